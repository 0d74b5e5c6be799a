"""From a job's document to a list of pages, each ready to render on its own.

A PDF that cannot be read fails the job (there is nothing else to do); a page image that cannot
be read fails only that page, and a page selected beyond the document's end is reported as a
failed page while the pages that exist are processed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from .errors import InputError, PageError
from .fetch import download
from .render import Budget, PageImage, PdfDocument, open_pdf, render_image
from .schema import JobInput, Source, select_pages
from .storage import Store

_DATA_URL = re.compile(r"^data:[\w/+.-]*;base64,", re.IGNORECASE)
FETCH_CONCURRENCY = 8


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    timeout_s: float
    allow_private_urls: bool
    max_image_pixels: int
    max_pages: int


@dataclass
class PageRef:
    """One page to process: `render` makes its image (in a worker thread), or `error` says why
    it cannot be made."""

    number: int
    source: str
    render: Callable[[], PageImage] | None = None
    error: PageError | None = None


@dataclass
class Document:
    pages: list[PageRef]
    pdf: PdfDocument | None = None

    def close(self) -> None:
        if self.pdf is not None:
            self.pdf.close()


async def fetch(src: Source, field: str, limits: Limits, store: Store) -> bytes:
    """The bytes a source names, or InputError naming `field.<kind>`."""
    where = f"{field}.{src.kind}"
    if src.base64 is not None:
        return decode_base64(src.base64, where, limits.max_bytes)
    if src.url is not None:
        return await download(
            src.url,
            field=where,
            max_bytes=limits.max_bytes,
            timeout_s=limits.timeout_s,
            allow_private=limits.allow_private_urls,
        )
    assert src.key is not None
    return await store.get(src.key, max_bytes=limits.max_bytes, field=where)


def decode_base64(text: str, field: str, max_bytes: int) -> bytes:
    text = _DATA_URL.sub("", text.strip(), count=1)
    if len(text) * 3 // 4 > max_bytes:
        raise InputError(
            field, f"the file is over the {max_bytes / 1e6:g} MB limit; use a `url` or `key`"
        )
    try:
        data = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise InputError(
            field, "not valid base64; send the file's bytes base64-encoded (RFC 4648)"
        ) from None
    if not data:
        raise InputError(field, "the file is empty")
    return data


async def load_document(job: JobInput, budget: Budget, limits: Limits, store: Store) -> Document:
    if job.pdf is not None:
        return await _load_pdf(job, budget, limits, store)
    assert job.images is not None
    return await _load_images(job.images, budget, limits, store)


async def _load_pdf(job: JobInput, budget: Budget, limits: Limits, store: Store) -> Document:
    assert job.pdf is not None
    data = await fetch(job.pdf, "input.pdf", limits, store)
    try:
        pdf = await asyncio.to_thread(open_pdf, data)
    except ValueError as exc:
        raise InputError(f"input.pdf.{job.pdf.kind}", str(exc)) from None
    label, count = job.pdf.label(), pdf.page_count
    try:
        chosen, missing = select_pages(job.pages, count, limits.max_pages)
        if not chosen:
            raise InputError(
                "input.pages",
                f"{job.pages!r} selects no page of this document, which has {count} pages",
            )
    except InputError:
        pdf.close()
        raise
    pages = [PageRef(n, label, render=partial(pdf.render, n, budget)) for n in chosen]
    pages += [
        PageRef(
            n,
            label,
            error=PageError(
                "select",
                f"input.pages: page {n} does not exist; the document has {count} pages",
            ),
        )
        for n in missing
    ]
    return Document(pages=sorted(pages, key=lambda p: p.number), pdf=pdf)


async def _load_images(
    images: list[Source], budget: Budget, limits: Limits, store: Store
) -> Document:
    gate = asyncio.Semaphore(FETCH_CONCURRENCY)

    async def one(index: int, src: Source) -> PageRef:
        number = index + 1
        async with gate:
            try:
                data = await fetch(src, f"input.images[{index}]", limits, store)
            except InputError as exc:
                return PageRef(number, src.label(), error=PageError("fetch", str(exc)))
        render = partial(_render_image, data, budget, limits.max_image_pixels, index)
        return PageRef(number, src.label(), render=render)

    refs = await asyncio.gather(*(one(i, s) for i, s in enumerate(images)))
    return Document(pages=list(refs))


def _render_image(data: bytes, budget: Budget, max_pixels: int, index: int) -> PageImage:
    try:
        return render_image(data, budget, max_pixels)
    except PageError as exc:
        raise PageError(exc.stage, f"input.images[{index}]: {exc.message}") from None
