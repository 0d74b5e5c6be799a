"""A rendered page and its pixel budget: the values that cross from rendering to the engines.

`PageImage.of` encodes a page as PNG, hashes its pixels (stored results are reused only for the
same pixels) and tells a blank page by its ink, in the render process that made it.
"""

from __future__ import annotations

import hashlib
import io
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, UnidentifiedImageError

PNG_LEVEL = 1  # fastest zlib level: ~3x faster than level 6, ~15 % larger on text pages
# The image files a job takes (the worker's render and the client's checks read these).
ACCEPTED_IMAGE_FORMATS = {"PNG", "JPEG", "WEBP", "TIFF", "MPO"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff"}
# A PDF page drawn under this resolution (a poster or a drawing sheet within the page budget)
# has its 10 pt print under 8 px high, which a model reads badly or not at all: the job says so.
LOW_DPI = 60


ACCEPTED = "accepted: PNG, JPEG, WebP, TIFF"
NOT_AN_IMAGE = f"the data is not an image Pillow can read; {ACCEPTED}"


class RefusedImage(ValueError):
    """An image file a job does not take; the message says why and what is accepted. The worker
    and the client each say it in their own error, from these one set of checks."""


def tiff_pages(image: Image.Image) -> int:
    """The pages of an opened TIFF (a fax, a scanner's batch); 1 for any other image, whose
    frames (an animated WebP's) are no pages."""
    return getattr(image, "n_frames", 1) if image.format == "TIFF" else 1


def open_header(path: str | Path, max_pixels: int) -> Image.Image:
    """Open an image by its header (no pixels decoded) and hold its format and its first page
    to what a job takes (MAX_IMAGE_PIXELS), or RefusedImage."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            image = Image.open(path)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise RefusedImage(NOT_AN_IMAGE) from None
    if image.format not in ACCEPTED_IMAGE_FORMATS:
        image.close()
        raise RefusedImage(
            f"{image.format} images are not accepted; accepted: PNG, JPEG, WebP, TIFF"
        )
    try:
        _hold_to(image, max_pixels, "the image")
    except RefusedImage:
        image.close()
        raise
    return image


def check_pages(image: Image.Image, max_pixels: int) -> int:
    """Each page of an opened TIFF held to the limit as its first is (each frame's header is
    read, no pixels); returns its pages, and leaves the image at its first."""
    frames = tiff_pages(image)
    for n in range(1, frames):
        image.seek(n)
        _hold_to(image, max_pixels, f"page {n + 1} of the TIFF")
    if frames > 1:
        image.seek(0)
    return frames


def _hold_to(image: Image.Image, max_pixels: int, which: str) -> None:
    pixels = image.width * image.height
    if pixels > max_pixels:
        raise RefusedImage(
            f"{which} is {image.width}×{image.height} = {pixels / 1e6:.3g} MP, over the "
            f"{max_pixels / 1e6:g} MP limit (MAX_IMAGE_PIXELS)"
        )


@dataclass(frozen=True)
class Budget:
    """How large a rendered page may be (total pixels, its longest side), and how a model family
    wants its pages drawn: PDF pages at a resolution (`dpi`), the shorter side raised to a
    minimum (`min_side`), both sides on the model's patch grid (`grid`).

    Without `dpi` a PDF page is drawn to fill the pixel budget, and an image is only scaled down.
    """

    max_pixels: int
    max_side: int | None = None
    dpi: float | None = None
    min_side: int | None = None
    grid: int | None = None

    def cap(self, width: float, height: float) -> float:
        """The largest scale the pixel budget and the longest side allow."""
        scale = math.sqrt(self.max_pixels / (width * height))
        if self.max_side:
            scale = min(scale, self.max_side / max(width, height))
        return scale

    def scale_for(self, width: float, height: float, *, pdf: bool = False) -> float:
        """The scale from a source's size (points for a PDF page, pixels for an image)."""
        cap = self.cap(width, height)
        # a PDF page at its resolution, or filling the budget; an image as it is
        scale = (self.dpi / 72 if self.dpi else cap) if pdf else 1.0
        if self.min_side:
            scale = max(scale, self.min_side / min(width, height))
        return min(scale, cap)

    def size_for(self, width: float, height: float, *, pdf: bool = False) -> tuple[int, int]:
        """The rendered page's size in pixels, snapped to the grid when there is one."""
        scale = self.scale_for(width, height, pdf=pdf)
        w, h = max(1, round(width * scale)), max(1, round(height * scale))
        return self.snap(w, h) if self.grid else (w, h)

    def snap(self, width: int, height: int) -> tuple[int, int]:
        """Both sides to whole grid cells, the area held within the budget by taking a cell off
        whichever side keeps the aspect ratio closer."""
        g = self.grid or 1
        cols, rows = max(1, round(width / g)), max(1, round(height / g))
        if self.max_side:  # rounding never takes a side past the longest allowed
            cols, rows = (
                min(cols, max(1, self.max_side // g)),
                min(rows, max(1, self.max_side // g)),
            )
        aspect = width / height
        while cols * rows * g * g > self.max_pixels and (cols > 1 or rows > 1):
            if cols == 1:
                rows -= 1
            elif rows == 1 or abs((cols - 1) / rows - aspect) < abs(cols / (rows - 1) - aspect):
                cols -= 1
            else:
                rows -= 1
        return cols * g, rows * g


# Blank pages. The page is shrunk to about BLANK_SAMPLE_PIXELS by averaging (which flattens scanner
# noise and speckle), and a pixel is ink when it is BLANK_INK_CONTRAST levels darker or lighter
# than the paper (the median): light text on a dark slide is ink, and so is a white column beside
# a dark photograph that covers most of the page. Faint bleed-through from the back of the sheet
# stays well within that. A page is blank when under BLANK_MAX_INK of it is ink, and a PDF page
# whose text layer holds text never is. Measured on generated 1.6 MP scans: white,
# noise (sigma 10 and 20), 0.2 % speckle, bleed-through at 15 % contrast and grey paper all give
# 0; a lone page number "12" gives 6.7e-5, a small stray mark 9e-5, one line of text 1.4e-3 and
# a page of text 1.4e-2. So anything that leaves a mark goes to the engine: losing a page number
# is worse than reading a near-empty page.
BLANK_DETECTOR = "ink-v2"  # a new version reads again the pages an older one took for blank
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
    darker = sum(hist[: max(0, paper - BLANK_INK_CONTRAST)])
    lighter = sum(hist[paper + BLANK_INK_CONTRAST + 1 :])
    return (darker + lighter) / total


@dataclass(frozen=True)
class PageImage:
    """A rendered page as PNG; `sha256` identifies its pixels (used to reuse stored results);
    `blank` says it has no ink to read (see `ink_fraction`); `scanned` that its text is only
    pixels (an image, or a PDF page without a text layer), so it may lie sideways (a PDF page's
    text layer says so itself: `text_turn`). A PDF page also carries its size in points
    (`pdf_size`, to place what was read on the page) and the text of its own text layer, if it
    has one (`text_layer`)."""

    png: bytes = field(repr=False)
    sha256: str
    width: int
    height: int
    blank: bool = False
    scanned: bool = False
    pdf_size: tuple[float, float] | None = None
    text_layer: str | None = field(default=None, repr=False)
    #: the clockwise turn a PDF page drawn as displayed needs, as its text layer's lines run
    #: (down, up or upside down: a sideways table set on its own page); 0 when they read across
    text_turn: int = 0
    #: the pages of a multi-page image file (a TIFF), of which this is the first
    frames: int = 1

    @classmethod
    def of(
        cls,
        image: Image.Image,
        *,
        scanned: bool = False,
        pdf_size: tuple[float, float] | None = None,
        text_layer: str | None = None,
        text_turn: int = 0,
        frames: int = 1,
    ) -> PageImage:
        digest = hashlib.sha256(f"{image.width}x{image.height}:".encode())
        digest.update(image.tobytes())
        buf = io.BytesIO()
        image.save(buf, format="PNG", compress_level=PNG_LEVEL)
        blank = not (text_layer or "").strip() and ink_fraction(image) < BLANK_MAX_INK
        return cls(
            buf.getvalue(),
            digest.hexdigest(),
            image.width,
            image.height,
            blank,
            scanned,
            pdf_size,
            text_layer or None,
            text_turn,
            frames,
        )

    def pil(self) -> Image.Image:
        return Image.open(io.BytesIO(self.png)).convert("RGB")

    @property
    def dpi(self) -> int | None:
        """The resolution a PDF page was drawn at (by area, so a page turned upright keeps it);
        None for an image, whose size in inches is not known."""
        if self.pdf_size is None:
            return None
        inches = self.pdf_size[0] * self.pdf_size[1] / 72**2
        return round(math.sqrt(self.width * self.height / inches)) if inches > 0 else None
