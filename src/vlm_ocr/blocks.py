"""A page as structure: blocks of one vocabulary, with boxes in one coordinate system.

Every family that reads layout (Chandra's HTML blocks, dots.ocr's JSON cells, Qwen3-VL's
`qwenvl html`, the CPU engine's grouped lines) hands its blocks over in the pixels of the page
image the worker rendered; `place` holds them to the page (clamped, ordered corners, finite,
a bounded count, labels mapped onto the vocabulary) and adds the box in PDF points for PDF pages.
`markdown` makes the page text from them, with the page's headers and footers left out or kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

Kind = Literal[
    "text",
    "title",
    "section-header",
    "list",
    "table",
    "formula",
    "figure",
    "caption",
    "footnote",
    "page-header",
    "page-footer",
    "page-number",
    "code",
]
KINDS: tuple[str, ...] = Kind.__args__  # type: ignore[attr-defined]
RUNNING = frozenset({"page-header", "page-footer", "page-number"})  # headers and footers
HeadersFooters = Literal["drop", "keep"]
MAX_BLOCKS = 2000  # a page with more is a model that ran away; the rest is dropped with a note
Box = tuple[float, float, float, float]


class Block(BaseModel):
    """One block of a page: its kind, where it is, and what it says."""

    kind: Kind
    box: Box | None = Field(
        None, description="x0, y0, x1, y1 in the pixels of the rendered page image."
    )
    box_pt: Box | None = Field(
        None, description="The same box in PDF points (PDF pages), origin top left."
    )
    content: str = Field("", description="Markdown; HTML for tables; LaTeX for formulas.")
    label: str | None = Field(None, description="The model's own label, where it differs.")
    image: str | None = Field(
        None,
        description="A figure cut from the page: its file beside the page's text "
        "(page-0003-figure-1.png).",
    )
    continues: bool | None = Field(
        None,
        description="True: it continues the block before it (a paragraph carried over to the "
        "next column), so its text joins that block's; its box is where it is printed.",
    )


class PageBlocks(BaseModel):
    """`page-NNNN.json`: a page's blocks, in reading order, beside its text."""

    page: int
    width: int = Field(description="The rendered page image the boxes are in, pixels.")
    height: int
    pdf_size: tuple[float, float] | None = Field(
        None, description="The PDF page's size in points (PDF pages)."
    )
    rotated: int | None = Field(None, description="The clockwise turn the page was read at.")
    source: str = Field(description="Who found the blocks: the model family, or the CPU engine.")
    labelled: bool = Field(
        description="The kinds come from the model; false: the CPU engine's lines grouped into "
        "text blocks, headers and footers told by the document's repeated lines."
    )
    blocks: list[Block]
    notes: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class RawBlock:
    """A block as a family read it: its own label, a box already in page pixels (or none)."""

    label: str
    box: tuple[float, ...] | None
    content: str
    #: it continues the block before it (the model said so)
    continues: bool = False


@dataclass(frozen=True)
class Placed:
    blocks: list[Block]
    notes: list[str]


def place(
    raw: Iterable[RawBlock],
    labels: dict[str, str],
    *,
    width: int,
    height: int,
    pdf_size: tuple[float, float] | None = None,
) -> Placed:
    """Blocks held to the page. A box is clamped to the image, its corners ordered; a box that
    is not four finite numbers, or has no area left, is dropped (its text kept without a box).
    A label the family's `labels` does not know becomes `text`, keeping its own name."""
    blocks: list[Block] = []
    notes: list[str] = []
    dropped_boxes = unknown = 0
    for n, item in enumerate(raw):
        if n >= MAX_BLOCKS:
            notes.append(f"only the first {MAX_BLOCKS} blocks were kept")
            break
        kind = labels.get(item.label.strip().lower())
        if kind is None:
            kind, unknown = "text", unknown + 1
        box = _clamp(item.box, width, height)
        if item.box is not None and box is None:
            dropped_boxes += 1
        if box is None and not item.content.strip():
            continue  # nothing left to say
        box_pt = None
        if box is not None and pdf_size is not None:
            sx, sy = pdf_size[0] / width, pdf_size[1] / height
            box_pt = (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)
        own = item.label if item.label.strip().lower() != kind else None
        blocks.append(
            Block(
                kind=kind,  # type: ignore[arg-type]
                box=box,
                box_pt=box_pt,
                content=item.content,
                label=own,
                continues=True if item.continues else None,
            )
        )
    if dropped_boxes:
        notes.append(f"{dropped_boxes} block boxes were outside the page or not boxes: left out")
    if unknown:
        notes.append(f"{unknown} blocks had labels this worker does not know: read as text")
    return Placed(blocks, notes)


def _clamp(box: Sequence[float] | None, width: int, height: int) -> Box | None:
    if box is None or len(box) != 4:
        return None
    try:
        x0, y0, x1, y1 = (float(v) for v in box)
    except (TypeError, ValueError):
        return None
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)):
        return None
    x0, x1 = sorted((min(max(x0, 0.0), width), min(max(x1, 0.0), width)))
    y0, y1 = sorted((min(max(y0, 0.0), height), min(max(y1, 0.0), height)))
    if x1 - x0 < 1 or y1 - y0 < 1:
        return None
    return (round(x0, 1), round(y0, 1), round(x1, 1), round(y1, 1))


# kinds whose continuation joins the block before it on its line, as one paragraph
PROSE = frozenset({"text", "list", "caption", "footnote"})


def markdown(blocks: Sequence[Block], headers_footers: HeadersFooters = "drop") -> str:
    """The page's text from its blocks, in their order; headers, footers and page numbers only
    when kept. A figure cut from the page is an image link, its caption the alt text. A block
    that continues the one before it joins its paragraph (prose) or follows it on the next
    line; after a block left out it starts a paragraph of its own."""
    parts: list[str] = []
    joined = False  # the block before was written: a continuation may join it
    for n, block in enumerate(blocks):
        if block.kind in RUNNING and headers_footers == "drop":
            joined = False
            continue
        text = as_markdown(block, caption_of(blocks, n))
        if not text:
            joined = False
            continue
        if block.continues and joined:
            glue = " " if block.kind in PROSE and blocks[n - 1].kind in PROSE else "\n"
            parts[-1] = parts[-1] + glue + text
        else:
            parts.append(text)
        joined = True
    return "\n\n".join(parts)


def caption_of(blocks: Sequence[Block], n: int) -> str | None:
    """The caption next to block `n` (after it, else before it), on one line."""
    for m in (n + 1, n - 1):
        if 0 <= m < len(blocks) and blocks[m].kind == "caption" and blocks[m].content.strip():
            return " ".join(blocks[m].content.split())
    return None


def as_markdown(block: Block, caption: str | None = None) -> str:
    content = block.content.strip()
    if block.kind == "figure" and block.image:
        alt = caption or " ".join(content.split("\n\n", 1)[0].split()) or "figure"
        alt = alt[:300].replace("[", "(").replace("]", ")")
        link = f"![{alt}]({block.image})"
        return link if not content or content == alt else f"{link}\n\n{content}"
    if block.kind == "formula" and content and not content.startswith(("$", "\\[", "\\(")):
        return f"$$\n{content}\n$$"
    if block.kind == "code" and content and not content.startswith("```"):
        return f"```\n{content}\n```"
    return content


def unturn(box: Box, turn: int, width: float, height: float) -> Box:
    """A box in a page image that was turned `turn` degrees clockwise (of `width` × `height`
    after the turn), in the page as it came, before the turn."""
    x0, y0, x1, y1 = box
    turn %= 360
    if turn == 90:
        corners = ((y0, width - x0), (y1, width - x1))
    elif turn == 180:
        corners = ((width - x0, height - y0), (width - x1, height - y1))
    elif turn == 270:
        corners = ((height - y0, x0), (height - y1, x1))
    else:
        return box
    (ax, ay), (bx, by) = corners
    return (min(ax, bx), min(ay, by), max(ax, bx), max(ay, by))


def printed_size(pdf_size: tuple[float, float] | None, turn: int) -> tuple[float, float] | None:
    """The PDF page's size as printed, from that of its image turned `turn` degrees."""
    if pdf_size is None or not turn % 180:
        return pdf_size
    return (pdf_size[1], pdf_size[0])


def with_points(
    blocks: Sequence[Block],
    *,
    turn: int,
    width: int,
    height: int,
    pdf_size: tuple[float, float] | None,
) -> list[Block]:
    """Blocks whose `box_pt` is in the PDF page's points as the page is printed, whatever turn
    it was read at (`width` × `height`: the image read; `pdf_size`: the page's, unturned)."""
    if pdf_size is None:
        return [b.model_copy(update={"box_pt": None}) for b in blocks]
    sideways = turn % 180 != 0
    original = (height, width) if sideways else (width, height)
    sx, sy = pdf_size[0] / original[0], pdf_size[1] / original[1]
    out = []
    for block in blocks:
        point = None
        if block.box is not None:
            x0, y0, x1, y1 = unturn(block.box, turn, width, height)
            point = (round(x0 * sx, 2), round(y0 * sy, 2), round(x1 * sx, 2), round(y1 * sy, 2))
        out.append(block.model_copy(update={"box_pt": point}))
    return out
