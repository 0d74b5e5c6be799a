"""Turn a page (a PDF page or an image file) into a PNG within the pixel budget.

These functions run in the CPU pool's child processes (`cpu_pool`), on files the job's sources
spilled to disk: they take paths and return a small `PageImage`, so nothing large crosses the
pipe. An image is scaled down while it is decoded where the format allows (JPEG draft mode,
integer `reduce`), and flattened to RGB only after scaling, so memory follows what is kept.
"""

from __future__ import annotations

import hashlib
import io
import math
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import pymupdf
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import PageError

# Our own limit (MAX_IMAGE_PIXELS) is checked before decoding; Pillow's warning would duplicate it.
Image.MAX_IMAGE_PIXELS = None
MAX_PDF_ZOOM = 600 / 72  # never render a small PDF page above 600 dpi
MAX_ASPECT = 50  # longer side / shorter side: a thinner strip is no page a model can read
ACCEPTED_IMAGE_FORMATS = {"PNG", "JPEG", "WEBP", "TIFF", "MPO"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff"}
PNG_LEVEL = 1  # fastest zlib level: ~3x faster than level 6, ~15 % larger on text pages
_OPEN_DOCS = 4  # PDFs kept open per process (pages of one job tend to come together)


@dataclass(frozen=True)
class Budget:
    """How large a rendered page may be: total pixels, and optionally its longest side."""

    max_pixels: int
    max_side: int | None = None

    def scale_for(self, width: float, height: float) -> float:
        scale = math.sqrt(self.max_pixels / (width * height))
        if self.max_side:
            scale = min(scale, self.max_side / max(width, height))
        return scale


# Blank pages. The page is shrunk to about BLANK_SAMPLE_PIXELS by averaging (which flattens scanner
# noise and speckle), and a pixel is ink when it is BLANK_INK_CONTRAST levels darker than the
# paper (the median). Faint bleed-through from the back of the sheet stays well above that. A
# page is blank when under BLANK_MAX_INK of it is ink. Measured on generated 1.6 MP scans: white,
# noise (sigma 10 and 20), 0.2 % speckle, bleed-through at 15 % contrast and grey paper all give
# 0; a lone page number "12" gives 6.7e-5, a small stray mark 9e-5, one line of text 1.4e-3 and
# a page of text 1.4e-2. So anything that leaves a mark goes to the engine: losing a page number
# is worse than reading a near-empty page.
BLANK_DETECTOR = "ink-v1"
BLANK_SAMPLE_PIXELS = 180_000
BLANK_INK_CONTRAST = 80
BLANK_MAX_INK = 1e-5


def ink_fraction(image: Image.Image) -> float:
    gray = image.convert("L")
    factor = max(1, round(math.sqrt(gray.width * gray.height / BLANK_SAMPLE_PIXELS)))
    if factor > 1:
        gray = gray.reduce(factor)
    hist = gray.histogram()
    total = gray.width * gray.height
    seen, paper = 0, 255
    for level in range(255, -1, -1):  # the median, from the bright end
        seen += hist[level]
        if seen * 2 >= total:
            paper = level
            break
    return sum(hist[: max(0, paper - BLANK_INK_CONTRAST)]) / total


@dataclass(frozen=True)
class PageImage:
    """A rendered page as PNG; `sha256` identifies its pixels (used to reuse stored results);
    `blank` says it has no ink to read (see `ink_fraction`); `scanned` that its text is only
    pixels (an image, or a PDF page without a text layer), so it may lie sideways."""

    png: bytes = field(repr=False)
    sha256: str
    width: int
    height: int
    blank: bool = False
    scanned: bool = False

    @classmethod
    def of(cls, image: Image.Image, *, scanned: bool = False) -> PageImage:
        digest = hashlib.sha256(f"{image.width}x{image.height}:".encode())
        digest.update(image.tobytes())
        buf = io.BytesIO()
        image.save(buf, format="PNG", compress_level=PNG_LEVEL)
        blank = ink_fraction(image) < BLANK_MAX_INK
        return cls(buf.getvalue(), digest.hexdigest(), image.width, image.height, blank, scanned)

    def pil(self) -> Image.Image:
        return Image.open(io.BytesIO(self.png)).convert("RGB")


@dataclass(frozen=True)
class PdfInfo:
    page_count: int
    repaired: bool


_docs: OrderedDict[str, pymupdf.Document] = OrderedDict()


def _open(path: str) -> pymupdf.Document:
    doc = _docs.pop(path, None)
    if doc is None:
        doc = pymupdf.open(path, filetype="pdf")
        while len(_docs) >= _OPEN_DOCS:
            _docs.popitem(last=False)[1].close()
    _docs[path] = doc
    return doc


def inspect_pdf(path: str) -> PdfInfo:
    """Open a PDF and say how many pages it has, or PageError('open', reason a user can act on)."""
    with open(path, "rb") as fh:
        head = fh.read(1024)
    if not head.lstrip()[:5].startswith(b"%PDF"):
        raise PageError("open", "the data is not a PDF (it does not start with %PDF)")
    try:
        doc = _open(path)
    except Exception as exc:
        raise PageError(
            "open", f"the PDF is corrupt or truncated and cannot be opened ({_said(exc, path)})"
        ) from None
    if doc.needs_pass:
        raise PageError("open", "the PDF is encrypted with a password; send an unencrypted copy")
    if doc.page_count == 0:
        raise PageError("open", "the PDF has no pages")
    return PdfInfo(doc.page_count, bool(doc.is_repaired))


def render_pdf_page(path: str, number: int, budget: Budget) -> PageImage:
    try:
        doc = _open(path)
        page = doc[number - 1]
        rect = page.rect
        _check_aspect(rect.width, rect.height)
        zoom = min(budget.scale_for(rect.width, rect.height), MAX_PDF_ZOOM)
        pix = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False)
        scanned = not page.get_text("text").strip()
    except PageError:
        raise
    except Exception as exc:  # MuPDF raises plain RuntimeErrors for broken pages
        raise PageError(
            "render", f"page {number} could not be rendered: {_said(exc, path)}"
        ) from None
    pixels = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
    page_image = PageImage.of(pixels, scanned=scanned)
    if doc.is_repaired and page_image.blank:
        raise PageError(
            "render",
            f"page {number} came out blank from a damaged PDF (MuPDF had to repair the file; "
            "it is probably truncated): send the complete file",
        )
    return page_image


def render_image(path: str, budget: Budget, max_image_pixels: int) -> PageImage:
    """Decode an image file, turn it upright by its EXIF orientation, fit the budget, flatten
    to RGB on white."""
    img = open_image(path, max_image_pixels)
    _check_aspect(img.width, img.height)
    scale = budget.scale_for(img.width, img.height)
    try:
        if scale < 1 and img.format == "JPEG":
            img.draft(img.mode, (math.ceil(img.width * scale), math.ceil(img.height * scale)))
        img.load()
        img = _resizable(ImageOps.exif_transpose(img))
        scale = budget.scale_for(img.width, img.height)  # draft may have scaled already
        if scale < 1:
            size = (max(1, int(img.width * scale)), max(1, int(img.height * scale)))
            factor = min(img.width // size[0], img.height // size[1])
            if factor >= 2:
                img = img.reduce(factor)  # a cheap box filter first, then a small exact resize
            img = img.resize(size, Image.Resampling.LANCZOS)
    except (OSError, SyntaxError, ValueError) as exc:
        raise PageError(
            "decode", f"the image is corrupt or truncated ({_said(exc, path)})"
        ) from None
    return PageImage.of(_to_rgb(img), scanned=True)


def open_image(path: str, max_image_pixels: int) -> Image.Image:
    """Read an image's header and check it, without decoding its pixels."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            img = Image.open(path)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise PageError(
            "decode", "the data is not an image Pillow can read; accepted: PNG, JPEG, WebP, TIFF"
        ) from None
    if img.format not in ACCEPTED_IMAGE_FORMATS:
        raise PageError(
            "decode", f"{img.format} images are not accepted; accepted: PNG, JPEG, WebP, TIFF"
        )
    if img.width * img.height > max_image_pixels:
        raise PageError(
            "decode",
            f"the image is {img.width}×{img.height} = {img.width * img.height / 1e6:.0f} MP, "
            f"over the {max_image_pixels / 1e6:g} MP limit (MAX_IMAGE_PIXELS)",
        )
    return img


def image_pixels(path: str) -> int:
    """Width × height from the header (0 when it cannot be read: decoding will say why)."""
    try:
        with Image.open(path) as img:
            return img.width * img.height
    except Exception:
        return 0


def _said(exc: Exception, path: str) -> str:
    """A library's error message, without the worker's spill-file path in it."""
    return str(exc).replace(path, "the file").replace(Path(path).name, "the file")


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
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        return img.point(lambda v: v / 256).convert("L")
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


def pdf_page_image(pdf: bytes, number: int, budget: Budget) -> PageImage:
    """Render one page of PDF bytes in this process (the warm-up page, tools)."""
    doc = pymupdf.open(stream=pdf, filetype="pdf")
    try:
        page = doc[number - 1]
        zoom = min(budget.scale_for(page.rect.width, page.rect.height), MAX_PDF_ZOOM)
        pix = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False)
        return PageImage.of(Image.frombytes("RGB", (pix.width, pix.height), pix.samples))
    finally:
        doc.close()


def is_image_file(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES
