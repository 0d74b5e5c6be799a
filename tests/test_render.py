"""Rendering: PDF pages at the pixel budget; images upright, RGB, within budget; bad files."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pymupdf
import pytest
from PIL import Image

from vlm_ocr import samples
from vlm_ocr.errors import PageError
from vlm_ocr.images import Budget
from vlm_ocr.pipeline.render import inspect_pdf, render_pdf_page, text_turn

from .support import encrypted_pdf, pdf_with_zero_pages, png_bytes, sideways_pdf

BUDGET = Budget(1_000_000)
_names = itertools.count()


@pytest.fixture
def as_file(tmp_path: Path):
    """Bytes written to a file of their own, as the job's sources spill them."""

    def write(data: bytes) -> str:
        path = tmp_path / f"input-{next(_names)}"
        path.write_bytes(data)
        return str(path)

    return write


def render_image(data: bytes, budget: Budget, max_pixels: int):
    import tempfile

    from vlm_ocr.pipeline import render

    with tempfile.NamedTemporaryFile() as fh:
        fh.write(data)
        fh.flush()
        return render.render_image(fh.name, budget, max_pixels)


def test_pdf_page_meets_pixel_budget(as_file) -> None:
    path = as_file(samples.pdf_from_pages([["one"], ["two"]]))
    assert inspect_pdf(path).page_count == 2
    page = render_pdf_page(path, 2, BUDGET)
    assert 0.97 * 1_000_000 <= page.width * page.height <= 1_000_000 * 1.01
    assert page.height / page.width == pytest.approx(842 / 595, rel=0.01)
    side = render_pdf_page(path, 1, Budget(1_000_000, max_side=800))
    assert max(side.width, side.height) <= 801


def test_same_pixels_same_hash(as_file) -> None:
    data = samples.pdf_from_pages([["one"], ["two"]])
    a, b = as_file(data), as_file(data)
    assert render_pdf_page(a, 1, BUDGET).sha256 == render_pdf_page(b, 1, BUDGET).sha256
    assert render_pdf_page(a, 1, BUDGET).sha256 != render_pdf_page(a, 2, BUDGET).sha256


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"hello, not a pdf", "not a PDF"),
        (samples.pdf_from_pages([["x"]])[:200], "corrupt or truncated: its bytes start as a PDF's"),
        (encrypted_pdf(), "encrypted"),
        (pdf_with_zero_pages(), "no pages"),
    ],
)
def test_bad_pdfs(data: bytes, says: str, as_file) -> None:
    with pytest.raises(PageError, match=says):
        inspect_pdf(as_file(data))


def test_image_turned_by_exif_and_flattened_to_rgb() -> None:
    img = Image.new("RGBA", (400, 200), (255, 0, 0, 0))  # fully transparent -> white
    img.paste((0, 0, 255, 255), (0, 0, 40, 40))  # opaque blue corner, top-left
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to view"
    page = render_image(png_bytes(img, exif=exif), BUDGET, 10**8)
    assert (page.width, page.height) == (200, 400)
    pixels = page.pil()
    assert pixels.getpixel((199, 0)) == (0, 0, 255)  # the corner went to the top-right
    assert pixels.getpixel((10, 300)) == (255, 255, 255)


def test_large_image_scaled_down_never_up() -> None:
    big = render_image(png_bytes(Image.new("L", (4000, 3000), 255)), BUDGET, 10**8)
    assert big.width * big.height <= 1_000_000 and big.width / big.height == pytest.approx(
        4 / 3, 0.01
    )
    small = render_image(png_bytes(Image.new("RGB", (300, 200))), BUDGET, 10**8)
    assert (small.width, small.height) == (300, 200)


@pytest.mark.parametrize("fmt", ["JPEG", "WEBP", "TIFF"])
def test_accepted_formats(fmt: str) -> None:
    page = render_image(png_bytes(Image.new("RGB", (64, 48), "white"), fmt), BUDGET, 10**8)
    assert (page.width, page.height) == (64, 48)


@pytest.mark.parametrize(
    ("mode", "paper", "ink"),
    [("I", 255, 0), ("I", 65535, 0), ("I;16", 65535, 0), ("F", 1.0, 0.0), ("F", 255.0, 0.0)],
)
def test_a_deep_grey_image_is_read_by_the_range_its_values_use(mode, paper, ink) -> None:
    # 32-bit integers holding 8 or 16 bits, floats of 0-1 or 0-255: paper white, ink black
    img = Image.new(mode, (200, 100), paper)
    img.paste(ink, (20, 20, 120, 60))
    page = render_image(png_bytes(img, "TIFF"), BUDGET, 10**8).pil()
    assert page.getpixel((5, 5)) == (255, 255, 255) and page.getpixel((50, 40)) == (0, 0, 0)


def test_bad_images() -> None:
    with pytest.raises(PageError, match="not an image"):
        render_image(b"GIF89a but not really", BUDGET, 10**8)
    with pytest.raises(PageError, match="GIF images are not accepted"):
        render_image(png_bytes(Image.new("RGB", (8, 8)), "GIF"), BUDGET, 10**8)
    with pytest.raises(PageError, match="corrupt or truncated"):
        render_image(png_bytes(Image.new("RGB", (300, 300), "red"))[:120], BUDGET, 10**8)
    bomb = png_bytes(Image.new("1", (12_000, 12_000)))  # 144 MP in a few kB
    with pytest.raises(PageError, match="over the 50 MP limit"):
        render_image(bomb, BUDGET, 50_000_000)
    with pytest.raises(PageError, match="aspect ratio over 1:50; crop it"):
        render_image(png_bytes(Image.new("L", (6000, 40), 255)), BUDGET, 10**8)


def test_a_page_on_a_grid_is_drawn_straight_at_its_size_not_resampled(as_file) -> None:
    # A4 at 2,048 px on the longest side on a 32 px grid: 1,440 x 2,048, the shorter side at
    # its own scale. Drawn so, it is what MuPDF draws at that matrix, pixel for pixel; a page
    # drawn at one scale and resampled to the grid would differ at every glyph's edges.
    import pymupdf

    pdf = samples.pdf_from_pages(samples.numbered_pages(1))
    page = render_pdf_page(as_file(pdf), 1, Budget(2048 * 2048, max_side=2048, grid=32))
    assert (page.width, page.height) == (1440, 2048)
    doc = pymupdf.open(stream=pdf, filetype="pdf")
    rect = doc[0].rect
    pix = doc[0].get_pixmap(matrix=pymupdf.Matrix(1440 / rect.width, 2048 / rect.height))
    drawn = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
    assert Image.open(io.BytesIO(page.png)).convert("RGB").tobytes() == drawn.tobytes()


def test_a_text_layer_says_the_turn_that_lays_its_lines_across() -> None:
    # text set turned counter-clockwise needs as much clockwise; a page shown turned (/Rotate)
    # adds its own turn; the turned page as drawn
    for displayed, turns in ((0, [0, 90, 180, 270]), (90, [0, 90])):
        with pymupdf.open(stream=sideways_pdf(turns, displayed)) as doc:
            assert [text_turn(page) for page in doc] == [(t - displayed) % 360 for t in turns]
    # a page of text across with a short sideways label, or too little text to tell: as it is
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_textbox(pymupdf.Rect(72, 72, 523, 500), "A line across the page. " * 12)
    page.insert_text((560, 700), "Figure 3", rotate=90)
    chart = doc.new_page(width=595, height=842)  # a chart whose one text is its y-axis label
    chart.insert_text((60, 600), "Annual rainfall in millimetres", rotate=90)
    assert [text_turn(p) for p in doc] == [0, 0]
    # Chinese set in vertical writing runs down the page, upright as it is: never turned
    vertical = pymupdf.open()
    page = vertical.new_page(width=595, height=842)
    for column in range(6):
        page.insert_text((500 - 40 * column, 100), samples.LEGAL_PAGES[0][0], fontname="china-t")
    for xref, *_ in page.get_fonts():  # the font's vertical encoding: its writing mode 1
        vertical.xref_set_key(xref, "Encoding", "/UniCNS-UTF16-V")
    with pymupdf.open(stream=vertical.tobytes()) as shown:
        lines = [ln for b in shown[0].get_text("dict")["blocks"] for ln in b.get("lines", ())]
        assert lines and all(ln["wmode"] == 1 and ln["dir"] == (0.0, 1.0) for ln in lines)
        assert text_turn(shown[0]) == 0


def test_mupdfs_error_code_is_not_said() -> None:
    from vlm_ocr.pipeline.render import _said

    said = _said(
        RuntimeError("code=7: cycle in page tree of /tmp/job/input-00001"), "/tmp/job/input-00001"
    )
    assert said == "cycle in page tree of the file"
