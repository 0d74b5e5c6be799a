"""The CPU engine's lines as labelled blocks: each line goes to the layout region it falls in,
and a region's lines are grouped into blocks of its kind as lines in no region are into text
blocks without the model: paragraphs, but a table's lines are one block. The order is the
XY-cut's (`reading_order.paragraphs`), the same with the model as without it.

A figure is the picture (the model's box, cut out as a family's figures are), the text printed
in it a text block after it; a figure with no text in it goes before the first block below its
top that shares its columns. A region with no line in it is left out unless it is a figure. A
header or footer of the model's is one only where it looks it (`_confirmed`): else it is text;
those the model misses are left to the margin rule (`margins.py`).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from statistics import median

from ..blocks import RawBlock
from . import margins
from .layout_model import Region
from .reading_order import PARAGRAPH_GAP, Line, paragraphs

#: the model's classes (and the margin rule's labels) onto the block vocabulary
LABELS = {
    "text": "text",
    "title": "section-header",
    "figure": "figure",
    "figure_caption": "caption",
    "table": "table",
    "table_caption": "caption",
    "header": "page-header",
    "footer": "page-footer",
    "reference": "text",
    "equation": "formula",
    "figure-text": "text",
    "header-page-number": "page-number",
    "footer-page-number": "page-number",
    "margin-header": "page-header",
    "margin-footer": "page-footer",
    "margin-page-number": "page-number",
}
FURNITURE = frozenset(
    k for k, v in LABELS.items() if v in {"page-header", "page-footer", "page-number"}
)
MIN_INSIDE = 0.5  # of a line's area inside a region for the line to be in it
# Regions that are one block however their lines lie; the others are cut into paragraphs as
# lines in no region are (a text region may hold a running head and the paragraph below it).
WHOLE = frozenset({"table", "figure"})
# A header or footer of the model's lies in the top or bottom this much of the page, in lines
# no taller than this many of the page's median line heights, set apart from the body (its gap
# to it more than this many times the body's gaps between blocks): a running head, not the
# page's first line. (Line boxes tell a font's size only loosely: descenders, capitals, scripts.)
FURNITURE_BAND = 0.15
MAX_FURNITURE_HEIGHT = 1.5
APART = 1.2
# ...and set as furniture is, not as the body: wholly in the margin (`margins.MARGIN`, where a
# body is rarely set), or in clearly smaller type (its line boxes at most this many of the
# body's median: boxes of one size differ by a quarter, capitals against descenders), or saying
# what furniture says. A gap alone is no evidence: a letter's "Dear Ms. Smith," and a page's
# first line above an empty line are set apart too.
SMALLER = 0.7
_ENDS_AS_TEXT = re.compile(r"[.,:;!?。，：；！？、]$")


def in_regions(lines: Sequence[Line], regions: Sequence[Region]) -> list[Line]:
    """Each line with the region it falls in: the one holding most of its area (at least
    `MIN_INSIDE`), the better scored of two that hold as much."""
    out = []
    for line in lines:
        area = max(line.height, 1e-6) * max(line.x1 - line.x0, 1e-6)
        best: tuple[float, float, int] | None = None
        for n, region in enumerate(regions):
            x0, y0, x1, y1 = region.box
            inside = max(0.0, min(x1, line.x1) - max(x0, line.x0)) * max(
                0.0, min(y1, line.y1) - max(y0, line.y0)
            )
            share = inside / area
            if share >= MIN_INSIDE and (best is None or (share, region.score) > best[:2]):
                best = (share, region.score, n)
        out.append(dataclasses.replace(line, region=None if best is None else best[2]))
    return out


def labelled(lines: Sequence[Line], regions: Sequence[Region], *, height: float) -> list[RawBlock]:
    """The page's blocks in reading order, labelled with the model's classes (or the margin
    rule's); `place` maps them onto the vocabulary with `LABELS`."""
    line_h = median(ln.height for ln in lines) if lines else 1.0
    whole = [n for n, r in enumerate(regions) if r.label in WHOLE]
    placed = in_regions(lines, regions)
    paras = paragraphs(placed, whole)
    pieces = Counter(p.region for p in paras)
    free = [ln for ln in placed if ln.region is None]
    blocks: list[RawBlock] = []
    cut: set[int] = set()  # figures placed
    for para in paras:
        n = para.region
        if n is None:
            blocks += _text_blocks(para.box, para.text, free, height)
            continue
        region = regions[n]
        # the model's box, where the region is one block of the reading
        box = _union(para.box, region.box) if pieces[n] == 1 else para.box
        if region.label == "figure":
            # the picture, cut out; what is printed in it stays in the text, as read
            if n not in cut:
                blocks.append(RawBlock("figure", region.box, ""))
                cut.add(n)
            blocks.append(RawBlock("figure-text", para.box, para.text))
        else:
            label = region.label
            if label in {"header", "footer"} and margins.is_page_number(para.text):
                label = f"{label}-page-number"
            blocks.append(RawBlock(label, box, para.text))
    for n, region in enumerate(regions):
        if region.label == "figure" and n not in cut:
            _insert_figure(blocks, RawBlock("figure", region.box, ""))
    blocks = _confirmed(blocks, lines, height=height, line_h=line_h)
    return margins.apply(blocks, height=height, line_h=line_h, furniture=FURNITURE)


def _text_blocks(
    box: tuple[float, float, float, float], text: str, free: Sequence[Line], height: float
) -> list[RawBlock]:
    """A paragraph of lines in no region; in a margin, a block for each of its lines (a running
    head's parts at the left and the right, each for the margin rule to read alone)."""
    top, bottom = margins.MARGIN * height, (1 - margins.MARGIN) * height
    if not (box[3] <= top or box[1] >= bottom):
        return [RawBlock("text", box, text)]
    held = sorted(
        (ln for ln in free if ln.text.strip() and _inside(ln, box)), key=lambda ln: (ln.y0, ln.x0)
    )
    if len(held) < 2:
        return [RawBlock("text", box, text)]
    return [RawBlock("text", (ln.x0, ln.y0, ln.x1, ln.y1), ln.text.strip()) for ln in held]


def _union(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float, float]:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def _insert_figure(blocks: list[RawBlock], figure: RawBlock) -> None:
    """Before the first block that starts below the figure's top and shares columns with it;
    with none, after the last block that starts above it."""
    assert figure.box is not None
    x0, top, x1, _ = figure.box
    after = 0
    for n, block in enumerate(blocks):
        box = block.box
        if box is None:
            continue
        if box[1] >= top and min(x1, box[2]) > max(x0, box[0]):
            blocks.insert(n, figure)
            return
        if box[1] < top:
            after = n + 1
    blocks.insert(after, figure)


def _confirmed(
    blocks: list[RawBlock], lines: Sequence[Line], *, height: float, line_h: float
) -> list[RawBlock]:
    """The blocks, with the model's headers and footers that are not ones made text. One is
    when it lies in the page's top or bottom `FURNITURE_BAND`, its lines are no taller than
    `MAX_FURNITURE_HEIGHT` of the page's median line, it is set apart from the body (its gap
    to the body in its columns more than `APART` times the body's own gaps between blocks,
    nothing of the body beside it), and it is set as furniture is (`_set_as_furniture`). A
    page is never all headers and footers."""
    body = [b for b in blocks if b.content and b.box is not None and b.label not in FURNITURE]
    typical = _typical_gap(body) or PARAGRAPH_GAP * line_h
    boxes = [b.box for b in body if b.box is not None]
    body_h = median([ln.height for ln in lines if any(_inside(ln, b) for b in boxes)] or [line_h])
    out = []
    for block in blocks:
        box = block.box
        if block.label in FURNITURE and box is not None:
            held = [ln.height for ln in lines if _inside(ln, box)] or [line_h]
            centre = (box[1] + box[3]) / 2
            in_band = min(centre, height - centre) <= FURNITURE_BAND * height
            small = max(held) <= MAX_FURNITURE_HEIGHT * line_h
            apart = _gap(box, body, top=centre < height / 2) > APART * typical
            furniture = _set_as_furniture(block, max(held), height=height, body_h=body_h)
            if not (body and in_band and small and apart and furniture):
                block = RawBlock("text", box, block.content)
        out.append(block)
    return out


def _set_as_furniture(block: RawBlock, tallest: float, *, height: float, body_h: float) -> bool:
    """Wholly in the top or bottom margin, in clearly smaller type than the body's (`SMALLER`),
    saying what furniture says (a page number, a journal's line), or a title's line: a running
    head names a chapter or a work, where a page's first line of text ends as a sentence or a
    salutation does ("Dear Ms. Smith,")."""
    assert block.box is not None
    top, bottom = margins.MARGIN * height, (1 - margins.MARGIN) * height
    in_margin = block.box[3] <= top or block.box[1] >= bottom
    text = block.content.strip()
    titled = "\n" not in text and not _ENDS_AS_TEXT.search(text)
    return (
        in_margin or tallest <= SMALLER * body_h or margins.says_furniture(block.content) or titled
    )


def _inside(line: Line, box: Sequence[float]) -> bool:
    return box[0] <= line.x0 and line.x1 <= box[2] and box[1] <= line.y0 and line.y1 <= box[3]


def _gap(box: Sequence[float], body: Sequence[RawBlock], *, top: bool) -> float:
    """Between a block at the top (or bottom) of the page and the body below (or above) it in
    its columns; negative when the body reaches beside it."""
    boxes = [b.box for b in body if b.box is not None]
    if not boxes or any(b[1] < box[3] and b[3] > box[1] for b in boxes):
        return -1.0
    under = [b for b in boxes if min(b[2], box[2]) > max(b[0], box[0])] or boxes
    if top:
        return min(b[1] for b in under) - box[3]
    return box[1] - max(b[3] for b in under)


def _typical_gap(body: Sequence[RawBlock]) -> float | None:
    """The median gap between consecutive blocks of the body one above the other."""
    gaps = []
    for a, b in pairwise(body):
        assert a.box is not None and b.box is not None
        if min(a.box[2], b.box[2]) > max(a.box[0], b.box[0]) and b.box[1] > a.box[3]:
            gaps.append(b.box[1] - a.box[3])
    return median(gaps) if gaps else None
