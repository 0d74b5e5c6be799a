"""Headers and footers of a document whose model gives no labels: the lines that repeat at the top
(or the bottom) of nearby pages.

A line is a running head when the same line opens (or ends) another page within a few pages of
it, but for one number at most, the page's, which then differs by as many as the pages do:
"Annual Report 2025 · 12" and "Annual Report 2025 · 13", "Page 3 of 9" and "Page 4 of 9", a bare
page number; not "Invoice 1041, order 77" and "Invoice 1042, order 78", nor "Total 9" and
"Total 18", whose lines say more than where they are. Only lines next to the edge
count (from the edge inward, up to the first line that does not repeat), and only short ones
that are no sentence of the body (a closing line that ends every page is text).
Books alternate left and right heads, hence a window of pages rather than the next page alone.

Found lines are dropped from the stored page texts when the job's `headers_footers` is `drop`,
and the page's blocks that hold them are labelled as headers, footers or page numbers either way.
The page texts are rewritten under their records (the same pixels and fingerprint), so a job
submitted again reuses the cleaned texts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..blocks import HeadersFooters, PageBlocks
from ..contract import PageReport
from ..errors import StorageError
from ..storage import JSON_TYPE, TEXT_TYPE, Store
from .state import Edges

WINDOW = 3  # pages either side in which the same line must recur
MAX_RUNNING = 2  # running lines at one edge of a page, at most
CONCURRENCY = 16  # pages rewritten at once
# A running head is a name, a title, a citation or a page number; a line that ends every page
# as a sentence of the body does (a form's closing line) is text, however often it repeats.
# "© 2025 Example Water Board. All rights reserved." has two words in lower case.
PROSE_WORDS = 6
_SENTENCE_END = re.compile(r"[.!?。！？][\"'”’)\]]*$")
_CJK_RANGE = r"\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK = re.compile(f"[{_CJK_RANGE}]")
_NUMBER = re.compile(r"\d+")
_PICTURE = re.compile(r"!\[[^\]]*\]\(|<img\b", re.IGNORECASE)  # a Markdown or HTML image
_MARKUP = re.compile(r"^[#>*_\-\s|]+|[*_\s|]+$")
# Marks the recognizer reads as one or another of a kind, and space it reads or misses beside a
# mark or a CJK character (where CJK sets none): none of it tells two lines apart.
_SAME_MARKS = str.maketrans(dict.fromkeys("‐‑‒–—―−", "-") | dict.fromkeys("•∙・‧", "·"))
_SAME_MARKS |= str.maketrans(dict.fromkeys("‘’‚‛`´", "'") | dict.fromkeys("“”„‟", '"'))
_MARK_OR_CJK = rf"[^\w\s]|[{_CJK_RANGE}]"
_LOOSE_SPACE = re.compile(rf"\s+(?={_MARK_OR_CJK})|(?<={_MARK_OR_CJK})\s+")
_PAGE_NUMBER = re.compile(
    r"^(page|p\.|seite|página|第)?\s*[-–—(\[]?\s*#\s*[-–—)\]]?\s*((of|/|von|de)\s*#)?\s*[页頁]?$"
)


@dataclass
class Found:
    """The running lines of one page: how many from the top and from the bottom, and their
    kinds (`page-header`, `page-footer`, `page-number`) by their normalised text."""

    top: int = 0
    bottom: int = 0
    kinds: dict[str, str] = field(default_factory=dict)


def normalised(line: str) -> str:
    """The line as compared across pages: lower case, numbers as #, and what the recognizer
    reads differently from page to page of the same line made one: the width of characters,
    the kind of dash, quote or dot, and spacing around punctuation and CJK ("2025 · 1",
    "2025· 2"; "第 3 页", "第3页"). Spaces between words and numbers still tell lines apart."""
    text = unicodedata.normalize("NFKC", _MARKUP.sub("", line.strip())).lower()
    text = _LOOSE_SPACE.sub("", text.translate(_SAME_MARKS))
    return " ".join(_NUMBER.sub("#", text).split())


@dataclass(frozen=True)
class _Line:
    form: str  # normalised, numbers as #
    numbers: tuple[str, ...]

    @classmethod
    def of(cls, text: str) -> _Line:
        # a figure's link names its page ("page-0003-figure-1.png"), so two pages' figures at
        # their tops read as one line but for the page's number: content, never a running head
        if _prose(text) or _PICTURE.search(text):
            return cls("", ())  # never repeats
        return cls(normalised(text), tuple(_NUMBER.findall(unicodedata.normalize("NFKC", text))))

    def repeats(self, other: _Line, pages_apart: int) -> bool:
        """The same line but for one number at most, which then counts pages: it differs by
        as many as the pages do."""
        if not self.form or self.form != other.form or len(self.numbers) != len(other.numbers):
            return False
        differ = [(a, b) for a, b in zip(self.numbers, other.numbers, strict=True) if a != b]
        if len(differ) > 1:
            return False
        return not differ or int(differ[0][1]) - int(differ[0][0]) == pages_apart


def _prose(text: str) -> bool:
    """A sentence of the body, not a running head: ended by its full stop, with at least
    `PROSE_WORDS` words in lower case (or twice as many CJK characters), or the tail of one
    (a paragraph's last line, "words on the page.", begins in lower case)."""
    if not _SENTENCE_END.search(text.strip()):
        return False
    words = [w.strip(".,;:!?\"'()[]") for w in text.split()]
    lower = [w.isalpha() and w.islower() for w in words]
    if sum(lower) >= PROSE_WORDS or len(_CJK.findall(text)) >= 2 * PROSE_WORDS:
        return True
    return lower[0] and sum(lower) >= 2


def find(edges: dict[int, Edges]) -> dict[int, Found]:
    """The pages that have running lines, by page number."""
    numbers = sorted(edges)
    found: dict[int, Found] = {}
    for side in ("top", "bottom"):
        lines = {n: [_Line.of(t) for t in _inward(edges[n], side)] for n in numbers}
        for n in numbers:
            near = [m for m in numbers if m != n and abs(m - n) <= WINDOW]
            count = max((_shared(lines[n], lines[m], m - n) for m in near), default=0)
            if not count:
                continue
            entry = found.setdefault(n, Found())
            setattr(entry, side, count)
            edge = "page-header" if side == "top" else "page-footer"
            for line in lines[n][:count]:
                number = _PAGE_NUMBER.match(line.form)
                entry.kinds[line.form] = "page-number" if number else edge
    # a page is never all running lines: that is a page repeated, not a page with a head
    return {n: f for n, f in found.items() if f.top + f.bottom < edges[n].lines}


def _shared(a: list[_Line], b: list[_Line], pages_apart: int) -> int:
    """How many lines from the edge two pages share before they part (0 when they never part
    within the lines looked at: the same page twice)."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if not x.repeats(y, pages_apart):
            break
        count += 1
    if count >= min(len(a), len(b)):
        return 0
    return min(count, MAX_RUNNING)


def _inward(edges: Edges, side: str) -> Sequence[str]:
    return edges.top if side == "top" else tuple(reversed(edges.bottom))


def strip(text: str, found: Found) -> str:
    """The page text without its running lines."""
    lines = text.splitlines()
    filled = [i for i, ln in enumerate(lines) if ln.strip()]
    drop = set(filled[: found.top]) | set(
        filled[len(filled) - found.bottom :] if found.bottom else ()
    )
    return "\n".join(ln for i, ln in enumerate(lines) if i not in drop).strip("\n")


async def apply(
    store: Store,
    pages: list[PageReport],
    edges: dict[int, Edges],
    headers_footers: HeadersFooters,
    *,
    reused: frozenset[int] = frozenset(),
) -> tuple[list[PageReport], list[str]]:
    """Find the running lines of the job's pages, rewrite what they change, and return the page
    reports (their `chars` as stored now) with a note for the result. The `reused` pages (read
    by an earlier job, their edges as read then) take part in the finding, but their stored
    files are as that job left them: it has dropped what it found."""
    found = {n: f for n, f in find(edges).items() if n not in reused}
    if not found:
        return pages, []
    gate = asyncio.Semaphore(CONCURRENCY)
    by_page = {p.page: p for p in pages}
    labelled: set[int] = set()

    async def one(number: int, lines: Found) -> None:
        report = by_page.get(number)
        if report is None or report.key is None:
            return
        async with gate:
            if report.blocks_key and await _label_blocks(store, report.blocks_key, lines):
                labelled.add(number)
            if headers_footers == "drop":
                text = await store.read_text(report.key)
                kept = strip(text, lines)
                record = await store.record(report.key)
                if record is not None:
                    record = dataclasses.replace(record, chars=len(kept))
                await store.put(report.key, kept.encode("utf-8"), TEXT_TYPE, record)
                by_page[number] = report.model_copy(
                    update={"chars": len(kept), "text": kept if report.text is not None else None}
                )

    try:
        await asyncio.gather(*(one(n, f) for n, f in found.items()))
    except (StorageError, ValueError) as exc:  # (ValueError: a blocks file that is not ours)
        return [by_page[p.page] for p in pages], [
            f"headers and footers were found but not all pages could be rewritten: {exc}"
        ]
    kinds = {k: v for f in found.values() for k, v in f.kinds.items()}
    shown = ", ".join(repr(k) for k in list(kinds)[:3]) + (", …" if len(kinds) > 3 else "")
    done = "dropped from the page texts" if headers_footers == "drop" else "kept in the page texts"
    if labelled:
        done += ", labelled in the blocks"
    note = (
        f"running headers and footers found on {len(found)} pages ({shown}; numbers read as #): "
        f"{done}"
    )
    return [by_page[p.page] for p in pages], [note]


async def read_edges(store: Store, key: str) -> dict[int, Edges]:
    """The pages' edges an earlier job kept under the prefix (none when it kept none, or when
    they cannot be read: a page is then found among the new ones alone)."""
    try:
        kept = json.loads(await store.read_text(key))
        return {
            int(n): Edges(tuple(e["top"]), tuple(e["bottom"]), int(e["lines"]))
            for n, e in kept["pages"].items()
        }
    except (StorageError, ValueError, TypeError, KeyError, AttributeError):
        return {}


async def keep_edges(store: Store, key: str, edges: dict[int, Edges]) -> None:
    """The pages' edges, for a later job that reuses some of them."""
    pages = {
        str(n): {"top": list(e.top), "bottom": list(e.bottom), "lines": e.lines}
        for n, e in sorted(edges.items())
    }
    data = json.dumps({"pages": pages}, ensure_ascii=False).encode()
    await store.put(key, data, JSON_TYPE)


async def _label_blocks(store: Store, key: str, found: Found) -> bool:
    """Label the page's blocks that hold its running lines; whether any was labelled."""
    record = await store.record(key)
    doc = PageBlocks.model_validate(json.loads(await store.read_text(key)))
    changed = False
    for n, block in enumerate(doc.blocks):
        kind = found.kinds.get(normalised(block.content))
        if kind and block.kind != kind:
            doc.blocks[n] = block.model_copy(update={"kind": kind})
            changed = True
    if changed:
        data = doc.model_dump_json(exclude_none=True).encode()
        await store.put(key, data, JSON_TYPE, record)
    return changed
