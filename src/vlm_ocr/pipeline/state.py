"""What a job's page tasks share (`JobContext`), and what one page carries from stage to stage
(`PageWork`): each stage reads what the stages before it found and sets its own field."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..blocks import PageBlocks
from ..contract import JobInput, PageItem, PageReport
from ..engines.base import Recognition
from ..errors import JobStop, PageError
from ..images import PageImage
from ..prompts import Prompt
from ..storage import JobKeys
from .sources import PageRef

if TYPE_CHECKING:
    from ..engines.rapidocr import SecondReading

Progress = Callable[[PageItem], None]
MAX_RENDER_TIMEOUTS = 3  # a job's pages past the render limit before its unrendered ones fail


@dataclass
class JobContext:
    """One job as its pages see it. `stop` is set once, by the first page that met a failure
    outside its input (the page sequence records it); the pages after it are not processed."""

    input: JobInput
    keys: JobKeys
    prompt: Prompt
    fingerprint_id: str
    second_opinion: bool
    total: int
    #: the engine's `failure`: why it is gone, or None while it serves
    engine_failure: Callable[[], str | None] = lambda: None
    progress: Progress | None = None
    stop: JobStop | None = None
    done: int = 0
    #: the first and last lines of pages whose blocks carry no kinds (or whose model may miss
    #: some headers and footers), for the document's pass that finds them (`running_heads`)
    edges: dict[int, Edges] = field(default_factory=dict)
    #: where rendered page images are kept for the searchable PDF (a job of images that asks)
    keep_images: Path | None = None
    #: the pages done so far, in the order they ended (a stopped job's manifest lists them)
    reports: list[PageReport] = field(default_factory=list)
    #: pages rendered, and pages whose rendering ran past RENDER_TIMEOUT_S
    rendered: int = 0
    render_timeouts: int = 0

    @property
    def json(self) -> bool:
        """Pages are read into JSON of the job's schema (stored as page-NNNN.json)."""
        return self.prompt.schema is not None

    def check(self) -> None:
        """Raise when the job must not go on: its store failed, or the engine is down."""
        if self.stop is not None and self.stop.kind == "store":
            raise PageError(
                "store", f"not processed: the store failed earlier ({self.stop.message})"
            )
        if engine_failure := self.engine_failure():
            raise PageError("engine", f"not processed: the engine is down ({engine_failure})")

    def check_render(self) -> None:
        """Raise when the job's pages have mostly run past the render limit: the render
        processes are the worker's, and a document built to render for minutes a page (a few
        hundred kB of nested drawing) would otherwise hold them for hours."""
        if self.render_timeouts >= MAX_RENDER_TIMEOUTS and self.render_timeouts > self.rendered:
            raise PageError(
                "render",
                f"not rendered: {MAX_RENDER_TIMEOUTS} or more pages of this document ran past "
                "RENDER_TIMEOUT_S, more than were rendered, so its other pages are not tried; "
                "split the document, or raise RENDER_TIMEOUT_S",
            )

    def finished(self, report: PageReport) -> None:
        self.reports.append(report)
        self.done += 1
        if self.progress is not None:
            self.progress(PageItem(done=self.done, total=self.total, page=report))


@dataclass(frozen=True)
class Edges:
    """A page's first and last lines of text (a few each), as stored."""

    top: tuple[str, ...]
    bottom: tuple[str, ...]
    #: how many lines the page has in all
    lines: int


@dataclass(frozen=True)
class StoredText:
    """A page's text found in the store for the same pixels and fingerprint, with how many
    blocks and figures were stored beside it from the same reading."""

    chars: int
    text: str | None  # read only when the job returns texts
    blocks: int = 0
    figures: int = 0


@dataclass(frozen=True)
class Figure:
    name: str  # page-0003-figure-1.png
    png: bytes = field(repr=False)


@dataclass(frozen=True)
class PageLayout:
    """The page as blocks: its blocks file (one coordinate system, figures named), the figures
    cut out, its Markdown made from the blocks, and whether the document's repeated lines may
    tell more of its headers and footers (blocks without kinds, or a model that misses some)."""

    doc: PageBlocks
    text: str
    figures: list[Figure]
    across_pages: bool = False


@dataclass(frozen=True)
class Opinion:
    """The second opinion on a page: how far the CPU engine's reading agrees with the engine's,
    and the critical tokens that differ (or why there is no second reading)."""

    agreement: float | None
    review: bool
    differences: list[str]
    #: where the CPU engine's reading is stored, once written
    key: str | None = None


@dataclass
class PageWork:
    """One page on its way through the stages, in the order they fill it in."""

    ref: PageRef
    job: JobContext
    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)
    image: PageImage | None = None  # fetch + render
    turn: int | None = None  # upright: the clockwise turn applied, None when not told
    stored: StoredText | None = None  # reuse
    recognition: Recognition | None = None  # recognize
    tries: int = 0  # recognize: requests sent to the engine's server, transport retries included
    read_image: PageImage | None = None  # recognize: the page as the engine read it (turned)
    layout: PageLayout | None = None  # layout: its blocks, figures and Markdown
    fallback: str | None = None  # store: why the page's own text layer was stored instead
    key: str | None = None  # store: where its text is, once written
    partial_key: str | None = None  # store: the best partial text of a failed page
    second_reading: asyncio.Task[SecondReading | Exception] | None = None  # second opinion
    opinion: Opinion | None = None  # second opinion
    error: PageError | None = None

    @property
    def blank(self) -> bool:
        return self.image is not None and self.image.blank

    @property
    def needs_engine(self) -> bool:
        """Rendered, with ink, and no stored text for it."""
        return self.image is not None and not self.image.blank and self.stored is None

    def time(self, name: str, since: float) -> None:
        self.timings[name] = round(time.perf_counter() - since, 4)

    def text(self) -> tuple[int, str | None]:
        """(characters, text) of the page's outcome so far."""
        if self.stored is not None:
            return self.stored.chars, self.stored.text
        if self.blank:
            return 0, "null" if self.job.json else ""
        if self.fallback is not None and self.image is not None:
            layer = self.image.text_layer or ""
            return len(layer), layer
        if self.layout is not None:
            return len(self.layout.text), self.layout.text
        if self.recognition is not None:
            return len(self.recognition.text), self.recognition.text
        return 0, None

    def stored_layout(self) -> tuple[int, int]:
        """(blocks, figures) stored beside the page's text."""
        if self.stored is not None:
            return self.stored.blocks, self.stored.figures
        if self.layout is not None and self.key is not None:
            return len(self.layout.doc.blocks), len(self.layout.figures)
        return 0, 0

    def report(self) -> PageReport:
        """The page's report, built once when its last stage is done."""
        self.time("total_s", self.started)
        image, rec, error, opinion = self.image, self.recognition, self.error, self.opinion
        reading = rec.reading if rec is not None and self.fallback is None else None
        chars, text = self.text()
        blocks, figures = (0, 0) if error else self.stored_layout()
        number, keys = self.ref.number, self.job.keys
        return PageReport(
            page=self.ref.number,
            source=self.ref.source,
            status="failed" if error else ("blank" if self.blank else "ok"),
            key=None if error else self.key,
            partial_key=self.partial_key,
            chars=chars if not error or rec is not None else 0,
            reused=self.stored is not None and not error,
            image_sha256=image.sha256 if image else None,
            width=image.width if image else None,
            height=image.height if image else None,
            dpi=image.dpi if image else None,
            frames=image.frames if image and image.frames > 1 else None,
            finish_reason=rec.finish_reason if rec else None,
            attempts=rec.attempts if rec else 0,
            tries=self.tries or None,
            prompt_tokens=rec.prompt_tokens if rec else None,
            output_tokens=rec.output_tokens if rec else None,
            timings=self.timings,
            error=error.message if error else None,
            error_stage=error.stage if error else None,
            text=text if self.job.input.return_text and not error else None,
            rotated=self.turn,
            blocks=blocks or None,
            blocks_key=keys.blocks(number) if blocks else None,
            figures=[keys.figure(number, n + 1) for n in range(figures)] or None,
            fallback=self.fallback,
            language=reading.language if reading else None,
            flags=reading.flags or None if reading else None,
            agreement=opinion.agreement if opinion else None,
            review=opinion.review if opinion else None,
            differences=opinion.differences if opinion else None,
            second_key=opinion.key if opinion else None,
        )
