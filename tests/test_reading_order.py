"""Reading order of detected lines: columns left to right, a spanning title first, rows joined."""

from __future__ import annotations

from vlm_ocr.engines.reading_order import Line, to_text


def line(x0: float, y0: float, x1: float, text: str, h: float = 20) -> Line:
    return Line(x0, y0, x1, y0 + h, text)


def test_title_over_two_aligned_columns() -> None:
    lines = [line(50, 10, 950, "Title across both columns")]
    for i in range(4):  # the columns' lines sit at the same heights, as in a typeset page
        y = 60 + i * 30
        lines += [line(50, y, 470, f"L{i}"), line(530, y, 950, f"R{i}")]
    lines.reverse()  # detector order is no help
    assert to_text(lines).split("\n") == ["Title across both columns"] + [
        f"L{i}" for i in range(4)
    ] + [f"R{i}" for i in range(4)]


def test_single_column_with_split_rows_reads_row_by_row() -> None:
    lines = [
        line(50, 10, 400, "Name"),
        line(600, 12, 900, "Value"),
        line(50, 50, 900, "A full-width sentence below the row."),
    ]
    assert to_text(lines) == "Name Value\nA full-width sentence below the row."


def test_footer_below_columns_comes_last() -> None:
    lines = [
        line(50, 10, 470, "left 1"),
        line(50, 40, 470, "left 2"),
        line(530, 10, 950, "right 1"),
        line(50, 200, 950, "footer spanning the page"),
    ]
    assert to_text(lines).split("\n") == ["left 1", "left 2", "right 1", "footer spanning the page"]
