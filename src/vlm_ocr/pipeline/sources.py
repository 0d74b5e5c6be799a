"""From a job's document to a list of pages, each made into an image when its turn comes.

A PDF is fetched once into the job's spill folder and opened in the CPU pool; a page image is
fetched only when its page task asks for it, and its file is removed once it is rendered. Every
fetch of a job draws on one byte budget (`MAX_JOB_BYTES`) and one deadline (`FETCH_TIMEOUT_S`);
every decode and render runs in the CPU pool under `RENDER_TIMEOUT_S`. A PDF that cannot be read
fails the job (there is nothing else to do); a page image that cannot be read fails only its page.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..contract import JobInput, Source, parse_selection
from ..errors import InputError, PageError, RenderTimeout
from ..images import Budget, PageImage
from ..pdf_file import file_sha256
from .job_files import JobFiles
from .rendering import Ready, Rendering


@dataclass(frozen=True)
class PageRef:
    """One page to process: `image(ready)` fetches what it needs and renders it, or raises
    PageError saying why it cannot; `ready` is asked once a render process is free for it, and
    may raise to say the page is no longer to be rendered."""

    number: int
    source: str
    image: Callable[[Ready], Awaitable[PageImage]] = field(repr=False)


@dataclass
class Document:
    pages: list[PageRef]
    files: JobFiles
    #: job-level findings a user must act on (pages selected beyond the end)
    problems: list[str] = field(default_factory=list)
    #: what the user should know of how it was read (a repaired file, a miscounted page tree)
    notes: list[str] = field(default_factory=list)
    #: the PDF, spilled (a job of a PDF)
    pdf_path: Path | None = None
    #: the SHA-256 of the PDF as received, or of each image ("" until it is fetched)
    sha256s: list[str] = field(default_factory=list)
    #: the job reads every page of a PDF
    whole: bool = False

    @property
    def input_sha256(self) -> str | None:
        """Which document this is (`JobResult.input_sha256`)."""
        if self.pdf_path is not None:
            return self.sha256s[0]
        if not self.sha256s or not all(self.sha256s):
            return None
        return hashlib.sha256("".join(self.sha256s).encode()).hexdigest()

    def close(self) -> None:
        self.files.close()


async def load_document(
    job: JobInput,
    budget: Budget,
    files: JobFiles,
    rendering: Rendering,
    *,
    max_pages: int,
) -> Document:
    """The job's pages, each made into an image when its turn comes; `files` is closed with the
    document (or here, when there is none)."""
    try:
        if job.pdf is not None:
            return await _load_pdf(job, job.pdf, budget, files, rendering, max_pages)
        assert job.images is not None
        return _image_pages(job.images, budget, files, rendering)
    except BaseException:
        files.close()
        raise


async def _load_pdf(
    job: JobInput,
    src: Source,
    budget: Budget,
    files: JobFiles,
    rendering: Rendering,
    max_pages: int,
) -> Document:
    where = f"input.pdf.{src.kind}"
    path = await files.fetch(src, "input.pdf")
    sha256 = await asyncio.to_thread(file_sha256, path)  # as received: a TIFF is made a PDF
    try:
        info = await rendering.pdf_info(path)
    except PageError as exc:
        raise InputError(where, exc.message) from None
    chosen, beyond = select_pages(job.pages, info.page_count, max_pages)
    label = src.label()

    def page(n: int) -> PageRef:
        return PageRef(n, label, lambda ready: rendering.pdf_page(path, n, budget, ready))

    doc = Document(
        [page(n) for n in chosen],
        files,
        pdf_path=path,
        sha256s=[sha256],
        whole=len(chosen) == info.page_count,
    )
    if beyond:
        doc.problems.append(
            f"input.pages: page {beyond} selected beyond the end; the document has "
            f"{info.page_count} pages"
        )
    if info.counted is not None:
        doc.notes.append(
            f"the PDF's page tree says it has {info.counted} pages but holds "
            f"{info.page_count} (a damaged file); the job reads the {info.page_count} it holds"
        )
    if info.repaired:
        doc.notes.append(
            "the PDF is damaged (MuPDF repaired it while opening it; it may be truncated): "
            "pages that came out blank are reported as failed"
        )
    return doc


def _image_pages(
    images: list[Source], budget: Budget, files: JobFiles, rendering: Rendering
) -> Document:
    sha256s = [""] * len(images)

    def page(index: int, src: Source) -> PageRef:
        async def make(ready: Ready) -> PageImage:
            field = f"input.images[{index}]"
            try:
                path = await files.fetch(src, field)
            except InputError as exc:
                raise PageError("fetch", str(exc)) from None
            try:
                sha256s[index] = await asyncio.to_thread(file_sha256, path)
                return await rendering.image(path, budget, ready)
            except RenderTimeout as exc:
                raise RenderTimeout(f"{field}: {exc.message}") from None
            except PageError as exc:
                raise PageError(exc.stage, f"{field}: {exc.message}") from None
            finally:
                path.unlink(missing_ok=True)

        return PageRef(index + 1, src.label(), make)

    return Document([page(i, s) for i, s in enumerate(images)], files, sha256s=sha256s)


def select_pages(text: str | None, page_count: int, max_pages: int) -> tuple[list[int], str]:
    """The pages of the document a selection names (in order, once each), and the part of it
    beyond the document's end as text ('' when none). Counted by ranges, never page by page."""
    ranges = [(1, None)] if text is None else parse_selection(text)
    inside: list[tuple[int, int]] = []
    beyond: list[tuple[int, int | None]] = []
    for lo, hi in ranges:
        end = page_count if hi is None else hi
        if lo <= page_count:
            inside.append((lo, min(end, page_count)))
        if (hi is None and lo > page_count) or (hi is not None and hi > page_count):
            beyond.append((max(lo, page_count + 1), hi))
    merged = _merge(inside)
    if sum(hi - lo + 1 for lo, hi in merged) > max_pages:
        if text is None:  # no selection given: the field to give is this one, and how
            raise InputError(
                "input.pages",
                f"the document has {page_count:,} pages, over the {max_pages:,} a job reads "
                f'(MAX_PAGES_PER_JOB); read it in parts ("1-{max_pages}", then '
                f'"{max_pages + 1}-") or raise MAX_PAGES_PER_JOB',
            )
        raise InputError(
            "input.pages", f"selects more than {max_pages} pages (MAX_PAGES_PER_JOB); split the job"
        )
    if not merged:
        raise InputError(
            "input.pages",
            f"{text!r} selects no page of this document, which has {page_count} pages",
        )
    chosen = [n for lo, hi in merged for n in range(lo, hi + 1)]
    shown = ", ".join(str(lo) if hi == lo else f"{lo}-{hi or ''}" for lo, hi in beyond[:5])
    return chosen, shown + (", …" if len(beyond) > 5 else "")


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out
