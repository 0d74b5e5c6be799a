"""Put detected text lines in reading order with a recursive XY-cut.

A detector returns lines in no useful order; sorting them top to bottom interleaves the lines
of side-by-side columns. XY-cut splits the page at the widest clear vertical gutter first
(columns, read left to right), and where there is none, at horizontal gaps (blocks, read top to
bottom), recursing into each part. A title spanning both columns blocks the vertical cut at the
top level, so the page is first cut under the title, then the body is cut into columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median


@dataclass(frozen=True)
class Line:
    x0: float
    y0: float
    x1: float
    y1: float
    text: str

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


def _xy_cut(lines: list[Line], line_h: float, depth: int = 0) -> list[list[Line]]:
    """Blocks of lines, in reading order."""
    if len(lines) <= 1 or depth > 40:
        return [lines]
    # Columns: a gutter at least one line height wide that no line crosses.
    x_cuts = _gaps([(ln.x0, ln.x1) for ln in lines], min_gap=line_h * 0.8)
    if x_cuts:
        parts = _split(lines, x_cuts, "x")
        if len(parts) > 1 and not _is_one_row(lines, line_h):
            return [b for p in parts for b in _xy_cut(p, line_h, depth + 1)]
    # Blocks: horizontal gaps. Any clear gap splits; lines in one row stay together.
    y_cuts = _gaps([(ln.y0, ln.y1) for ln in lines], min_gap=line_h * 0.05)
    if y_cuts:
        parts = _split(lines, y_cuts, "y")
        if len(parts) > 1:
            return [b for p in parts for b in _xy_cut(p, line_h, depth + 1)]
    return [sorted(lines, key=lambda ln: (ln.x0, ln.y0))]


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
