"""Put detected text lines in reading order with a recursive XY-cut.

A detector returns lines in no useful order; sorting them top to bottom interleaves the lines
of side-by-side columns. XY-cut splits a region at clear vertical gutters first (columns, read
left to right), and where there are none, at horizontal gaps (bands, read top to bottom),
recursing into each part. A title spanning the columns blocks the vertical cut; the horizontal
gaps then cut the page into line bands, and consecutive bands that share a gutter (not merely
single lines side by side) are merged back into one block, which is then cut into its columns.

Lines may carry the layout region they fall in (`Line.region`, the CPU engine's layout model):
the cut ignores it, and `paragraphs` groups a region's lines into blocks without changing the
cut's order.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from statistics import median

# The narrowest gap between columns, in line heights: a strip that no line crosses is a gutter
# even when narrow (newspaper columns sit a few pixels apart at a page's pixel budget).
GUTTER = 0.2
# The narrowest column, in line heights.
MIN_COLUMN = 2.0


@dataclass(frozen=True)
class Line:
    x0: float
    y0: float
    x1: float
    y1: float
    text: str
    #: the layout region the line falls in (an index the caller gave), None: in none
    region: int | None = None

    @classmethod
    def from_quad(cls, quad: Sequence[Sequence[float]], text: str) -> Line:
        xs = [p[0] for p in quad]
        ys = [p[1] for p in quad]
        return cls(min(xs), min(ys), max(xs), max(ys), text)

    @property
    def height(self) -> float:
        return self.y1 - self.y0


def _gaps(spans: list[tuple[float, float]], min_gap: float) -> list[float]:
    """Cut positions inside clear gaps (at least `min_gap` wide) of the union of spans."""
    spans = sorted(spans)
    cuts: list[float] = []
    reach = spans[0][1]
    for lo, hi in spans[1:]:
        if lo - reach >= min_gap:
            cuts.append((reach + lo) / 2)
        reach = max(reach, hi)
    return cuts


def _split(lines: list[Line], cuts: list[float], axis: str) -> list[list[Line]]:
    parts: list[list[Line]] = [[] for _ in range(len(cuts) + 1)]
    for line in lines:
        centre = (line.x0 + line.x1) / 2 if axis == "x" else (line.y0 + line.y1) / 2
        parts[sum(centre > c for c in cuts)].append(line)
    return [p for p in parts if p]


def _column_cuts(lines: list[Line], line_h: float) -> list[float]:
    """Gutters that split `lines` into columns (not the cells of one row)."""
    cuts = _gaps([(ln.x0, ln.x1) for ln in lines], min_gap=line_h * GUTTER)
    if not cuts or _is_one_row(lines, line_h):
        return []
    for part in _split(lines, cuts, "x"):
        if max(ln.x1 for ln in part) - min(ln.x0 for ln in part) < MIN_COLUMN * line_h:
            return []  # a strip of list numbers or labels: read it row by row with its text
    return cuts


def _xy_cut(lines: list[Line], line_h: float, depth: int = 0) -> list[list[Line]]:
    """Blocks of lines, in reading order."""
    if len(lines) <= 1 or depth > 40:
        return [lines]
    # Columns: a gutter that no line crosses, read left to right.
    x_cuts = _column_cuts(lines, line_h)
    if x_cuts:
        return [b for p in _split(lines, x_cuts, "x") for b in _xy_cut(p, line_h, depth + 1)]
    # Bands between horizontal gaps, top to bottom. Consecutive bands that share a gutter belong
    # to one multi-column block (a title above it stopped the column cut), so they are merged
    # and cut into columns together.
    y_cuts = _gaps([(ln.y0, ln.y1) for ln in lines], min_gap=line_h * 0.05)
    if not y_cuts:
        return [sorted(lines, key=lambda ln: (ln.x0, ln.y0))]
    groups: list[list[Line]] = []
    for band in _split(lines, y_cuts, "y"):
        if groups and _is_column_block(groups[-1] + band, line_h):
            groups[-1] = groups[-1] + band
        else:
            groups.append(band)
    return [b for g in groups for b in _xy_cut(g, line_h, depth + 1)]


def _is_column_block(lines: list[Line], line_h: float) -> bool:
    """Columns, at least one of more than one line; single lines side by side (captions under
    two figures, say) are not a column block."""
    cuts = _column_cuts(lines, line_h)
    return bool(cuts) and any(len(part) >= 2 for part in _split(lines, cuts, "x"))


def _is_one_row(lines: list[Line], line_h: float) -> bool:
    top = min(ln.y0 for ln in lines)
    bottom = max(ln.y1 for ln in lines)
    return bottom - top < line_h * 1.6


def order_lines(lines: list[Line]) -> list[list[Line]]:
    """Group lines into blocks in reading order; each block lists rows top to bottom."""
    lines = [ln for ln in lines if ln.text.strip()]
    if not lines:
        return []
    line_h = median(ln.height for ln in lines) or 1.0
    return _xy_cut(lines, line_h)


def to_text(lines: list[Line]) -> str:
    """Lines in reading order: one output line per row, rows of a column block together."""
    out: list[str] = []
    for block in order_lines(lines):
        rows = _rows(block)
        out.append("\n".join(" ".join(ln.text.strip() for ln in row) for row in rows))
    return "\n".join(out)


def _rows(block: list[Line]) -> list[list[Line]]:
    rows: list[list[Line]] = []
    for line in sorted(block, key=lambda ln: (ln.y0 + ln.y1) / 2):
        if rows:
            last = rows[-1]
            top = min(ln.y0 for ln in last)
            bottom = max(ln.y1 for ln in last)
            overlap = min(bottom, line.y1) - max(top, line.y0)
            if overlap > 0.5 * min(line.height, bottom - top):
                last.append(line)
                continue
        rows.append([line])
    return [sorted(row, key=lambda ln: ln.x0) for row in rows]


@dataclass(frozen=True)
class Paragraph:
    """Lines of one block of text, in reading order, with the box around them."""

    box: tuple[float, float, float, float]
    text: str
    region: int | None = None  # the layout region of its lines, None: lines in no region


# Consecutive blocks closer than this (in line heights), one above the other, are one paragraph.
PARAGRAPH_GAP = 0.8


def paragraphs(lines: list[Line], whole: Collection[int] = ()) -> list[Paragraph]:
    """The page's lines grouped into blocks, in reading order: the XY-cut's blocks, with
    consecutive ones that sit close one above the other (a paragraph's lines) joined.

    Lines of a layout region (`Line.region`) are grouped so too, never with lines of another;
    those of a region in `whole` (a table's columns) that come one after another in the
    reading order are one block. The order stays the cut's, so a region the cut reads in two
    places (a box the model drew over two columns) is two blocks."""
    ordered = order_lines(lines)
    if not ordered:
        return []
    line_h = median(ln.height for block in ordered for ln in block) or 1.0
    groups: list[list[list[Line]]] = []  # each group: pieces of the cut's blocks
    for piece in (p for block in ordered for p in _by_region(block)):
        region = piece[0].region
        last = groups[-1] if groups else None
        if (
            last is not None
            and last[0][0].region == region
            and (region in whole or _continues([ln for p in last for ln in p], piece, line_h))
        ):
            last.append(piece)
        else:
            groups.append([piece])
    return [_paragraph(group) for group in groups]


def _by_region(block: list[Line]) -> list[list[Line]]:
    """A block of the cut as runs of lines of one region (or of none), row by row."""
    pieces: list[list[Line]] = []
    for line in (ln for row in _rows(block) for ln in row):
        if pieces and pieces[-1][0].region == line.region:
            pieces[-1].append(line)
        else:
            pieces.append([line])
    return pieces


def _paragraph(group: list[list[Line]]) -> Paragraph:
    lines = [ln for piece in group for ln in piece]
    region = lines[0].region
    # lines in no region are one paragraph's rows; a region's pieces keep the cut's order
    parts = [lines] if region is None else group
    text = "\n".join(
        " ".join(ln.text.strip() for ln in row) for part in parts for row in _rows(part)
    )
    box = (
        min(ln.x0 for ln in lines),
        min(ln.y0 for ln in lines),
        max(ln.x1 for ln in lines),
        max(ln.y1 for ln in lines),
    )
    return Paragraph(box, text, region)


def _continues(above: list[Line], block: list[Line], line_h: float) -> bool:
    bottom = max(ln.y1 for ln in above)
    top = min(ln.y0 for ln in block)
    if not -0.2 * line_h < top - bottom < PARAGRAPH_GAP * line_h:
        return False
    a0, a1 = min(ln.x0 for ln in above), max(ln.x1 for ln in above)
    b0, b1 = min(ln.x0 for ln in block), max(ln.x1 for ln in block)
    overlap = min(a1, b1) - max(a0, b0)
    return overlap > 0.5 * min(a1 - a0, b1 - b0)
