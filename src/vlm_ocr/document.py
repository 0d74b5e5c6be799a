"""A whole document's text from its pages' texts: `document.md` to read (pages in order, each
break marked with an HTML comment a Markdown viewer does not show) and `document.txt` to
process (each page ended by a form feed). The worker writes them for a job of a whole PDF;
`vlm-ocr submit` for a document split over several jobs, whose pages live one folder down."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .contract import PageReport
from .storage import Store

READ_CONCURRENCY = 16  # page texts read from the store at once
_FIGURE_LINK = re.compile(r"\]\((page-\d{4}-figure-\d+\.png)\)")


@dataclass(frozen=True)
class PageText:
    number: int
    text: str  # empty for a blank or failed page
    failed: str | None = None  # why it has no text
    #: the page's folder below the document's (a job's part of a submitted document)
    folder: str = ""


async def read_texts(
    store: Store, pages: Sequence[PageReport], folder: Callable[[int], str] = lambda n: ""
) -> list[PageText]:
    """The stored texts of these pages, in their order (a page without one: empty, with why);
    `folder` names each page's folder below the document's."""
    gate = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(page: PageReport) -> PageText:
        if page.status != "ok" or page.key is None:
            return PageText(page.page, "", page.error, folder(page.page))
        async with gate:
            return PageText(page.page, await store.read_text(page.key), None, folder(page.page))

    return list(await asyncio.gather(*(one(p) for p in pages)))


def markdown(pages: Sequence[PageText]) -> str:
    """The pages in order, a page-break comment before each; figure links made relative to the
    document's folder."""
    parts = []
    for page in pages:
        head = f"<!-- page {page.number} -->"
        if page.failed:
            head += f"\n\n<!-- page {page.number} failed: {_comment(page.failed)} -->"
        text = page.text.strip()
        if page.folder:
            text = _FIGURE_LINK.sub(lambda m, d=page.folder: f"]({d}/{m.group(1)})", text)
        parts.append(f"{head}\n\n{text}" if text else head)
    return "\n\n".join(parts) + "\n"


def plain(pages: Sequence[PageText]) -> str:
    """The pages' texts in order, each ended by a form feed."""
    return "".join(p.text.rstrip("\n") + "\n\f" for p in pages)


def _comment(text: str) -> str:
    return " ".join(text.replace("--", "- -").split())[:300]
