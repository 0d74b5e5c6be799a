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


@dataclass(frozen=True)
class RawBlock:
    """A block as a family read it: its own label, a box already in page pixels (or none)."""

    label: str
    box: tuple[float, ...] | None
    content: str


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
        blocks.append(Block(kind=kind, box=box, box_pt=box_pt, content=item.content, label=own))  # type: ignore[arg-type]
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


def markdown(blocks: Sequence[Block], headers_footers: HeadersFooters = "drop") -> str:
    """The page's text from its blocks, in their order; headers, footers and page numbers only
    when kept. Figures are left to the caller (they become image links once stored)."""
    parts = []
    for block in blocks:
        if block.kind in RUNNING and headers_footers == "drop":
            continue
        text = as_markdown(block)
        if text:
            parts.append(text)
    return "\n\n".join(parts)


def as_markdown(block: Block) -> str:
    content = block.content.strip()
    if block.kind == "formula" and content and not content.startswith(("$", "\\[", "\\(")):
        return f"$$\n{content}\n$$"
    if block.kind == "code" and content and not content.startswith("```"):
        return f"```\n{content}\n```"
    return content
