"""From a job's document to a list of pages, each made into an image when its turn comes.

A PDF is fetched once into the job's spill folder and opened in the CPU pool; a page image is
fetched only when its page task asks for it, and its file is removed once it is rendered. Every
fetch of a job draws on one byte budget (`MAX_JOB_BYTES`) and one deadline (`FETCH_TIMEOUT_S`);
every decode and render runs in the CPU pool under `RENDER_TIMEOUT_S`. A PDF that cannot be read
fails the job (there is nothing else to do); a page image that cannot be read fails only its page.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import re
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeVar

from ..blocks import Box
from ..contract import JobInput, Source, parse_selection
from ..errors import InputError, PageError, RenderTimeout, StorageError
from ..images import Budget, PageImage
from ..pdf_file import file_sha256
from ..settings import FetchSettings, RenderSettings
from ..storage import BucketInputs, ObjectMissing, ObjectTooLarge
from . import render
from .cpu_pool import CpuPool, TaskFailed, TaskTimeout
from .fetch import DownloadTimeout, download

# `data:image/png;base64,` and with parameters (`data:image/png;charset=utf-8;base64,`)
_DATA_URL = re.compile(r"data:[\w/+.-]{0,100}(;[\w.+-]{1,40}=[^;,]{0,100}){0,5};base64,", re.I)
_URL_SAFE = str.maketrans("-_", "+/")
FETCH_CONCURRENCY = 8  # files of one job being fetched at once
T = TypeVar("T")
#: asked once a render process is free for a page; raises when the page is no longer wanted
Ready = Callable[[], None] | None


NO_BUCKET = (
    "inputs named by `key` are read from the bucket, and no bucket is configured; set the four "
    "bucket settings (BUCKET_ENDPOINT_URL, BUCKET_NAME and its two keys), or send `base64` or "
    "`url`"
)


class Rendering:
    """The worker's way to turn files into pages: the CPU pool, a deadline per page, and a
    budget of source pixels decoded at once (a 50 MP image takes 200 MB while it decodes)."""

    def __init__(self, pool: CpuPool, settings: RenderSettings) -> None:
        self.pool = pool
        self.timeout_s = settings.render_timeout_s
        self.max_image_pixels = settings.max_image_pixels
        self._decode_pixels = settings.decode_pixels
        self._pixels_free = settings.decode_pixels
        self._freed = asyncio.Condition()

    async def _call(self, fn: Callable[..., T], *args: object, ready: Ready = None) -> T:
        try:
            return await self.pool.run(fn, *args, timeout_s=self.timeout_s, ready=ready)
        except TaskTimeout as exc:
            raise RenderTimeout(f"rendering was stopped: {exc} (RENDER_TIMEOUT_S)") from None
        except TaskFailed as exc:
            raise PageError("render", f"rendering failed: {exc}") from None

    async def turn(self, image: PageImage, clockwise: int) -> PageImage:
        return await self._call(render.turn_page, image, clockwise)

    async def crop(self, image: PageImage, boxes: list[Box]) -> list[bytes | None]:
        return await self._call(render.crop_figures, image.png, boxes)

    async def pdf_info(self, path: Path) -> render.PdfInfo:
        return await self._call(render.open_document, str(path), self.max_image_pixels)

    async def pdf_page(
        self, path: Path, number: int, budget: Budget, ready: Ready = None
    ) -> PageImage:
        return await self._call(render.render_pdf_page, str(path), number, budget, ready=ready)

    async def image(self, path: Path, budget: Budget, ready: Ready = None) -> PageImage:
        # its header read in a render process too: a crafted one (a TIFF declaring millions of
        # strips for a few pixels) costs memory and time there, under that process's limits
        pixels = await self._call(render.image_pixels, str(path), ready=ready)
        share = min(max(pixels, 1), self._decode_pixels)
        async with self._freed:
            await self._freed.wait_for(lambda: self._pixels_free >= share)
            self._pixels_free -= share
        try:
            return await self._call(
                render.render_image, str(path), budget, self.max_image_pixels, ready=ready
            )
        finally:
            async with self._freed:
                self._pixels_free += share
                self._freed.notify_all()


class JobFiles:
    """A job's fetched inputs: one byte budget, one budget of fetching time, one spill folder
    removed when the job ends.

    The time budget counts the wall time during which any of the job's fetches is running, not
    the time since the job began: inputs are fetched as their pages come up, so a long job
    fetches its last pages late, and that is no reason to fail them."""

    def __init__(self, limits: FetchSettings, inputs: BucketInputs | None) -> None:
        self.limits = limits
        self.inputs = inputs
        self.dir = Path(tempfile.mkdtemp(prefix="vlm-ocr-job-"))
        self.used = 0
        self.gate = asyncio.Semaphore(FETCH_CONCURRENCY)
        self._count = 0
        self._active = 0  # fetches running now
        self._since = 0.0  # when the current busy stretch began
        self._spent = 0.0  # busy time of the stretches that have ended

    def _time_left(self) -> float:
        busy = time.monotonic() - self._since if self._active else 0.0
        return self.limits.fetch_timeout_s - self._spent - busy

    @contextlib.contextmanager
    def _busy(self) -> Iterator[None]:
        if not self._active:
            self._since = time.monotonic()
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            if not self._active:
                self._spent += time.monotonic() - self._since

    def take(self, n: int) -> None:
        self.used += n
        if self.used > self.limits.max_job_bytes:
            raise _JobBytesExceeded

    async def fetch(self, src: Source, field: str) -> Path:
        """The file a source names, spilled to disk, or InputError naming `field.<kind>`."""
        where = f"{field}.{src.kind}"
        self._count += 1
        path = self.dir / f"input-{self._count:05d}"
        try:
            async with self.gate:
                left = self._time_left()
                if left <= 0:
                    raise InputError(where, self._late())
                with self._busy(), path.open("wb") as out:
                    await self._fetch(src, where, out, left)
        except _JobBytesExceeded:
            path.unlink(missing_ok=True)
            raise InputError(
                where,
                f"the job's inputs add up to more than {self.limits.max_job_bytes / 1e6:g} MB "
                "(MAX_JOB_BYTES); split the job",
            ) from None
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path

    async def _fetch(self, src: Source, where: str, out: BinaryIO, left: float) -> None:
        limits = self.limits
        if src.base64 is not None:
            data = decode_base64(src.base64, where, limits.max_download_bytes)
            self.take(len(data))
            out.write(data)
        elif src.url is not None:
            timeout = min(limits.download_timeout_s, left)
            try:
                await download(
                    src.url,
                    out,
                    field=where,
                    max_bytes=limits.max_download_bytes,
                    timeout_s=timeout,
                    allow_private=limits.allow_private_urls,
                    take=self.take,
                )
            except DownloadTimeout:
                if timeout < limits.download_timeout_s:  # the job's fetching time ran out
                    raise InputError(where, self._late()) from None
                raise
        else:
            assert src.key is not None
            await self._read_key(src.key, where, out, left)

    async def _read_key(self, key: str, where: str, out: BinaryIO, left: float) -> None:
        if self.inputs is None:
            raise InputError(where, NO_BUCKET)
        limit = self.limits.max_download_bytes
        try:
            async with asyncio.timeout(left):
                size = await self.inputs.fetch(key, out, limit)
        except TimeoutError:
            raise InputError(where, self._late()) from None
        except ObjectMissing:
            raise InputError(
                where, f"no object {key!r} in bucket {self.inputs.bucket.name!r}; upload it first"
            ) from None
        except ObjectTooLarge as exc:
            raise InputError(
                where, f"{exc}, over the {limit / 1e6:g} MB limit (MAX_DOWNLOAD_BYTES)"
            ) from None
        except StorageError as exc:
            raise InputError(where, str(exc)) from None
        self.take(size)

    def _late(self) -> str:
        return (
            f"the job has spent its {self.limits.fetch_timeout_s:g} s of fetching time "
            "(FETCH_TIMEOUT_S); use faster hosts or bucket keys, or split the job"
        )

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class _JobBytesExceeded(Exception):
    pass


def decode_base64(text: str, field: str, max_bytes: int) -> bytes:
    """The bytes of base64 text as encoders write it: the standard or the URL-safe alphabet
    (RFC 4648 has both), padded or not, wrapped in lines, behind a `data:` URL's prefix."""
    text = text.lstrip()
    if found := _DATA_URL.match(text, 0, 700):
        text = text[found.end() :]
    if len(text) * 3 // 4 > max_bytes:
        raise InputError(
            field, f"the file is over the {max_bytes / 1e6:g} MB limit; use a `url` or `key`"
        )
    compact = "".join(text.split()).rstrip("=")
    if "-" in compact or "_" in compact:
        compact = compact.translate(_URL_SAFE)
    try:
        data = base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InputError(
            field,
            "not valid base64 (it may hold letters, digits, + and / or - and _, and = at the "
            "end, and no other character); send the file's bytes base64-encoded",
        ) from None
    if not data:
        raise InputError(field, "the file is empty")
    return data


def check_inline_pdf(job: JobInput, max_bytes: int) -> None:
    """A PDF sent inline is base64 of a PDF, or InputError: what a one-shot run can tell before
    the engine starts, without opening it (that is the render processes' work)."""
    if job.pdf is not None and job.pdf.base64 is not None:
        where = "input.pdf.base64"
        head = decode_base64(job.pdf.base64, where, max_bytes)[:1024]
        if not (render.is_pdf(head) or render.is_tiff(head)):
            raise InputError(where, render.NOT_A_PDF)


# --- the document -------------------------------------------------------------------------------


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
                f"the PDF has {page_count:,} pages, over the {max_pages:,} a job reads "
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
