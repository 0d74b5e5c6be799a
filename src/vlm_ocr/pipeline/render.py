"""Turn a page (a PDF page or an image file) into a PNG within the pixel budget.

These functions run in the CPU pool's child processes (`cpu_pool`), on files the job's sources
spilled to disk: they take paths and return a small `PageImage`, so nothing large crosses the
pipe. An image is scaled down while it is decoded where the format allows (JPEG draft mode,
integer `reduce`), and flattened to RGB only after scaling, so memory follows what is kept.
"""

from __future__ import annotations

import io
import math
import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import pymupdf
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import EMPTY_PDF, ENCRYPTED_PDF, NOT_A_PDF, UNREADABLE_PDF, PageError
from ..images import (
    IMAGE_SUFFIXES,
    Budget,
    PageImage,
    RefusedImage,
    check_pages,
    open_header,
    tiff_pages,
)
from ..pdf_file import is_pdf, recount

MAX_PDF_ZOOM = 600 / 72  # never render a small PDF page above 600 dpi
MAX_ASPECT = 50  # longer side / shorter side: a thinner strip is no page a model can read
_OPEN_DOCS = 4  # PDFs kept open per process (pages of one job tend to come together)


@dataclass(frozen=True)
class PdfInfo:
    page_count: int  # the pages its page tree holds
    repaired: bool
    counted: int | None = None  # what a damaged tree's /Count said, where it is not that


_docs: OrderedDict[str, tuple[pymupdf.Document, int | None]] = OrderedDict()


def _open(path: str) -> tuple[pymupdf.Document, int | None]:
    opened = _docs.pop(path, None)
    if opened is None:
        doc = pymupdf.open(path, filetype="pdf")
        opened = doc, recount(doc)
        while len(_docs) >= _OPEN_DOCS:
            _docs.popitem(last=False)[1][0].close()
    _docs[path] = opened
    return opened


def is_tiff(head: bytes) -> bool:
    return head[:4] in (b"II*\x00", b"MM\x00*")


def tiff_pages_of(path: str | Path) -> int:
    """As `tiff_pages`, for a file (1 for one Pillow cannot read)."""
    try:
        with Image.open(path) as image:
            return tiff_pages(image)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return 1


def open_document(path: str, max_image_pixels: int) -> PdfInfo:
    """A job's document, spilled to a file of its own: a TIFF (a fax, a scanner's batch) is made
    a PDF of its pages there, in place, so that the job reads it as a PDF (pages selected,
    drawn to the budget and laid out alike), each page within MAX_IMAGE_PIXELS as an image is;
    then as `inspect_pdf`."""
    with open(path, "rb") as fh:
        if is_tiff(fh.read(4)):
            _tiff_as_pdf(path, max_image_pixels)
    return inspect_pdf(path)


def document_pages(path: str, max_image_pixels: int) -> int:
    """The pages `open_document` would find, without making a TIFF a PDF (which decodes every
    page): a TIFF's pages counted from its directories, each within MAX_IMAGE_PIXELS; a PDF's
    as `inspect_pdf`. For a check before the job, which converts it once."""
    with open(path, "rb") as fh:
        if not is_tiff(fh.read(4)):
            return inspect_pdf(path).page_count
    return _tiff_pages_held(path, max_image_pixels)


def _tiff_pages_held(path: str, max_image_pixels: int) -> int:
    """A TIFF's pages from its headers (no page decoded), each held to MAX_IMAGE_PIXELS."""
    try:
        with open_header(path, max_image_pixels) as img:
            return check_pages(img, max_image_pixels)
    except RefusedImage as exc:
        raise PageError("open", str(exc)) from None


def inspect_pdf(path: str) -> PdfInfo:
    """Open a PDF and say how many pages it has, or PageError('open', reason a user can act on)."""
    with open(path, "rb") as fh:
        head = fh.read(1024)
    if not is_pdf(head):
        raise PageError("open", NOT_A_PDF)
    try:
        doc, counted = _open(path)
        pages = doc.page_count  # MuPDF reads the page tree here, and may fail on it
    except Exception:  # MuPDF says only that it failed to open the file
        raise PageError("open", UNREADABLE_PDF) from None
    if doc.needs_pass:
        raise PageError("open", ENCRYPTED_PDF)
    if pages == 0:
        raise PageError("open", EMPTY_PDF)
    return PdfInfo(pages, bool(doc.is_repaired), counted)


def _tiff_as_pdf(path: str, max_image_pixels: int) -> None:
    _tiff_pages_held(path, max_image_pixels)
    try:
        with pymupdf.open(path, filetype="tiff") as tiff:
            data = tiff.convert_to_pdf()
    except Exception:
        raise PageError(
            "open", "the TIFF is corrupt or truncated (MuPDF cannot read it); send the whole file"
        ) from None
    Path(path).write_bytes(data)


MAX_TEXT_LAYER_CHARS = 200_000  # a page's own text kept for a fallback; more is no page's text


def render_pdf_page(path: str, number: int, budget: Budget) -> PageImage:
    try:
        doc = _open(path)[0]
        page = doc[number - 1]
        _check_aspect(page.rect.width, page.rect.height)
        page_image = draw_page(page, budget)
    except PageError:
        raise
    except Exception as exc:  # MuPDF raises plain RuntimeErrors for broken pages
        said = _said(exc, path)
        if "not in document" in said:  # MuPDF counts from 0: say it as the page tree's fault
            said = "the PDF's page tree counts more pages than it holds (a damaged file)"
        raise PageError("render", f"page {number} could not be rendered: {said}") from None
    if doc.is_repaired and page_image.blank:
        raise PageError(
            "render",
            f"page {number} came out blank from a damaged PDF (MuPDF had to repair the file; "
            "it is probably truncated): send the complete file",
        )
    return page_image


def draw_page(page: pymupdf.Page, budget: Budget) -> PageImage:
    """One PDF page as the budget says: at its scale (600 dpi at most), on the grid when the
    budget has one; with its size in points and its own text layer. A page on a grid is drawn
    straight at its size, each side to its own scale (at most a grid cell apart), so nothing
    resamples its pixels, here or in the engine's processor."""
    rect = page.rect
    zoom = min(budget.scale_for(rect.width, rect.height, pdf=True), MAX_PDF_ZOOM)
    matrix = pymupdf.Matrix(zoom, zoom)
    size = None
    if budget.grid:
        size = budget.snap(max(1, round(rect.width * zoom)), max(1, round(rect.height * zoom)))
        matrix = pymupdf.Matrix(size[0] / rect.width, size[1] / rect.height)
    pix = page.get_pixmap(matrix=matrix, alpha=False)
    pixels = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
    if size and size != pixels.size:  # MuPDF rounded a side the other way
        pixels = pixels.resize(size, Image.Resampling.LANCZOS)
    text = page.get_text("text")[:MAX_TEXT_LAYER_CHARS].strip()
    return PageImage.of(
        pixels,
        scanned=not text,
        pdf_size=(rect.width, rect.height),
        text_layer=text,
        text_turn=text_turn(page) if text else 0,
    )


def text_turn(page: pymupdf.Page) -> int:
    """The clockwise turn (0, 90, 180, 270) that lays the page's text across, as displayed: the
    direction most of its characters run in, where at least TEXT_TURN_SHARE of them run one
    way (a page of text and a small sideways label stays as it is). Lines set in vertical
    writing (Chinese, Japanese or Korean down the page, `wmode` 1) stand upright as they are
    and count for none."""
    chars = dict.fromkeys((0, 90, 180, 270), 0)
    for block in page.get_text("dict")["blocks"]:
        for line in block.get("lines", ()):
            if line.get("wmode"):
                continue
            # the direction on the page as stored; displayed, it turns with /Rotate (clockwise)
            quarter = _TURN_OF_DIRECTION.get((round(line["dir"][0]), round(line["dir"][1])))
            if quarter is not None:
                count = sum(len(span["text"].strip()) for span in line["spans"])
                chars[(quarter + page.rotation) % 360] += count
    total = sum(chars.values())
    running, most = max(chars.items(), key=lambda kv: kv[1])
    if total < TEXT_TURN_MIN_CHARS or most < TEXT_TURN_SHARE * total:
        return 0
    return (360 - running) % 360


# A line's direction (PyMuPDF's `dir`, y down) as the clockwise quarter turns it runs from
# across: rightwards 0, down 90, leftwards 180, up 270; a slanted line counts for none.
_TURN_OF_DIRECTION = {(1, 0): 0, (0, 1): 90, (-1, 0): 180, (0, -1): 270}
TEXT_TURN_MIN_CHARS = 50  # a chart whose one text is its y-axis label stays as it is
TEXT_TURN_SHARE = 0.6


def render_image(path: str, budget: Budget, max_image_pixels: int) -> PageImage:
    """Decode an image file, turn it upright by its EXIF orientation, fit the budget, flatten
    to RGB on white."""
    img = open_image(path, max_image_pixels)
    frames = tiff_pages(img)  # a fax's pages: the first is read, and the job says so
    _check_aspect(img.width, img.height)
    scale = budget.scale_for(img.width, img.height)
    try:
        if scale < 1 and img.format == "JPEG":
            img.draft(img.mode, (math.ceil(img.width * scale), math.ceil(img.height * scale)))
        img.load()
        img = _resizable(ImageOps.exif_transpose(img))
        scale = budget.scale_for(img.width, img.height)  # draft may have scaled already
        if scale != 1 or budget.grid:
            size = (max(1, int(img.width * scale)), max(1, int(img.height * scale)))
            size = budget.snap(*size) if budget.grid else size
            factor = min(img.width // size[0], img.height // size[1])
            if factor >= 2:
                img = img.reduce(factor)  # a cheap box filter first, then a small exact resize
            if size != img.size:
                img = img.resize(size, Image.Resampling.LANCZOS)
    except (OSError, SyntaxError, ValueError) as exc:
        raise PageError(
            "decode", f"the image is corrupt or truncated ({_said(exc, path)})"
        ) from None
    return PageImage.of(_to_rgb(img), scanned=True, frames=frames)


def open_image(path: str, max_image_pixels: int) -> Image.Image:
    """Read an image's header and check it, without decoding its pixels."""
    try:
        return open_header(path, max_image_pixels)
    except RefusedImage as exc:
        raise PageError("decode", str(exc)) from None


def image_pixels(path: str) -> int:
    """Width × height from the header (0 when it cannot be read: decoding will say why)."""
    try:
        with Image.open(path) as img:
            return img.width * img.height
    except Exception:
        return 0


def _said(exc: Exception, path: str) -> str:
    """A library's error message, without the worker's spill-file path in it, nor MuPDF's
    error code (`code=7: cycle in page tree`)."""
    said = re.sub(r"^code=\d+: ", "", str(exc))
    return said.replace(path, "the file").replace(Path(path).name, "the file")


def _check_aspect(width: float, height: float) -> None:
    short, long = sorted((width, height))
    if short <= 0 or long / short > MAX_ASPECT:
        raise PageError(
            "render",
            f"the page is {width:.0f}×{height:.0f}, an aspect ratio over 1:{MAX_ASPECT}; "
            "crop it or split it into pages",
        )


def _resizable(img: Image.Image) -> Image.Image:
    """The image in a mode Pillow scales well (L, LA, RGB, RGBA), at its bit depth or less."""
    if img.mode in ("L", "LA", "RGB", "RGBA"):
        return img
    if img.mode in ("PA", "P") and (img.mode == "PA" or "transparency" in img.info):
        return img.convert("RGBA")
    if img.mode in ("I;16", "I;16B", "I;16L", "I", "F"):  # by the range its values use
        top = img.getextrema()[1]
        if img.mode == "F" and top <= 1:
            scale = 255.0  # floats of 0-1
        else:
            scale = 1.0 if top <= 255 else (1 / 256 if top <= 65535 else 255 / top)
        return img.point(lambda v: v * scale).convert("L")
    if img.mode == "1":
        return img.convert("L")
    return img.convert("RGB")


def _to_rgb(img: Image.Image) -> Image.Image:
    """Flatten onto white (after scaling: the alpha channel is not kept at full size)."""
    if img.mode == "RGB":
        return img
    if img.mode in ("RGBA", "LA"):
        rgba = img.convert("RGBA")
        white = Image.new("RGB", rgba.size, (255, 255, 255))
        white.paste(rgba, mask=rgba.getchannel("A"))
        return white
    return img.convert("RGB")


def turn_page(image: PageImage, clockwise: int) -> PageImage:
    """The page turned clockwise by 90, 180 or 270 degrees (its model said it lies turned)."""
    with Image.open(io.BytesIO(image.png)) as opened:
        return turned(image, opened.convert("RGB"), clockwise)


def turned(image: PageImage, pixels: Image.Image, clockwise: int) -> PageImage:
    """`image` (decoded as `pixels`) turned clockwise: its size in points turns with it, its
    text layer stays."""
    size = image.pdf_size
    if size is not None and clockwise % 180:
        size = (size[1], size[0])
    return PageImage.of(
        pixels.rotate(-clockwise, expand=True),
        scanned=image.scanned,
        pdf_size=size,
        text_layer=image.text_layer,
        frames=image.frames,
    )


def pdf_page_image(pdf: bytes, number: int, budget: Budget) -> PageImage:
    """Render one page of PDF bytes in this process (the warm-up page, tools)."""
    doc = pymupdf.open(stream=pdf, filetype="pdf")
    try:
        return draw_page(doc[number - 1], budget)
    finally:
        doc.close()


def is_image_file(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


MIN_FIGURE_SIDE = 16  # pixels: a smaller crop is no figure anyone could look at


def crop_figures(png: bytes, boxes: list[tuple[float, float, float, float]]) -> list[bytes | None]:
    """Each box cut from the page as a PNG; None for a box too thin to be a figure."""
    out: list[bytes | None] = []
    with Image.open(io.BytesIO(png)) as opened:
        page = opened.convert("RGB")
        for x0, y0, x1, y1 in boxes:
            left, top = max(0, math.floor(x0)), max(0, math.floor(y0))
            right, bottom = min(page.width, math.ceil(x1)), min(page.height, math.ceil(y1))
            if right - left < MIN_FIGURE_SIDE or bottom - top < MIN_FIGURE_SIDE:
                out.append(None)
                continue
            buf = io.BytesIO()
            page.crop((left, top, right, bottom)).save(buf, format="PNG", optimize=False)
            out.append(buf.getvalue())
    return out
