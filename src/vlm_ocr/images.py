"""A rendered page and its pixel budget: the values that cross from rendering to the engines.

`PageImage.of` encodes a page as PNG, hashes its pixels (stored results are reused only for the
same pixels) and tells a blank page by its ink, in the render process that made it.
"""

from __future__ import annotations

import hashlib
import io
import math
import struct
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, UnidentifiedImageError

# Our own limit (MAX_IMAGE_PIXELS) is checked before decoding, wherever an image is opened (the
# worker, the client): Pillow's own, a warning or an error by a fixed size, would stand in for it.
Image.MAX_IMAGE_PIXELS = None
PNG_LEVEL = 1  # fastest zlib level: ~3x faster than level 6, ~15 % larger on text pages
# The image files a job takes (the worker's render and the client's checks read these).
ACCEPTED_IMAGE_FORMATS = {"PNG", "JPEG", "WEBP", "TIFF", "MPO"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff"}
# A TIFF's pages counted at most (a job selects at most 100,000 pages: MAX_PAGES_PER_JOB's ceiling)
MAX_TIFF_PAGES = 100_001
_MAX_TAGS = 4096  # of a TIFF directory read for its size (a real one has a few dozen)
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
    if image.format != "TIFF":
        return 1
    if image.filename:
        return len(tiff_sizes(image.filename)) or 1
    return getattr(image, "n_frames", 1)


def tiff_sizes(path: str | Path) -> list[tuple[int, int]]:
    """Each page's width and height, from the TIFF's chain of directories (no pixels read; at
    most MAX_TIFF_PAGES, the chain cut where it loops or leaves the file). Pillow finds its
    frames with a lookup that grows with their number: 85 s for a crafted 11 MB file of 100,000
    pages, where this reads it in well under a second."""
    with open(path, "rb") as fh:
        head = fh.read(16)
        order = {b"II": "<", b"MM": ">"}.get(head[:2])
        if order is None or len(head) < 8:
            return []
        (magic,) = struct.unpack(order + "H", head[2:4])
        big = magic == 43  # BigTIFF: 8-byte counts and offsets
        if magic not in (42, 43):
            return []
        count_f, entry_size, off_f = ("Q", 20, "Q") if big else ("H", 12, "I")
        offset = struct.unpack(order + off_f, head[8:16] if big else head[4:8])[0]
        size = fh.seek(0, io.SEEK_END)
        pages: list[tuple[int, int]] = []
        seen: set[int] = set()
        while offset and offset < size and offset not in seen and len(pages) < MAX_TIFF_PAGES:
            seen.add(offset)
            fh.seek(offset)
            count_bytes = fh.read(struct.calcsize(count_f))
            if len(count_bytes) < struct.calcsize(count_f):
                break
            (entries,) = struct.unpack(order + count_f, count_bytes)
            table = fh.read(min(entries, _MAX_TAGS) * entry_size)
            if len(table) < min(entries, _MAX_TAGS) * entry_size:
                break  # a directory cut short: no page Pillow can read
            tags = _dimensions(table, order, entry_size, big)
            pages.append((tags.get(256, 0), tags.get(257, 0)))
            fh.seek(offset + struct.calcsize(count_f) + entries * entry_size)
            link = fh.read(struct.calcsize(off_f))
            whole = len(link) == struct.calcsize(off_f)
            offset = struct.unpack(order + off_f, link)[0] if whole else 0
    return pages


def _dimensions(table: bytes, order: str, entry_size: int, big: bool) -> dict[int, int]:
    """A directory's width (tag 256) and height (257), each a SHORT, LONG or LONG8 held in
    the entry itself."""
    found: dict[int, int] = {}
    value_f = {3: "H", 4: "I", 16: "Q"}
    for at in range(0, len(table) - entry_size + 1, entry_size):
        tag, kind = struct.unpack_from(order + "HH", table, at)
        if tag in (256, 257) and kind in value_f:
            value_at = at + (12 if big else 8)  # after the tag, its type and its count
            found[tag] = struct.unpack_from(order + value_f[kind], table, value_at)[0]
    return found


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
        raise RefusedImage(f"{image.format} images are not accepted; {ACCEPTED}")
    try:
        _hold_to(image.width, image.height, max_pixels, "the image")
    except RefusedImage:
        image.close()
        raise
    return image


def check_pages(image: Image.Image, max_pixels: int) -> int:
    """Each page of an opened TIFF held to the limit as its first is (its size read from its
    directory, no pixels); returns its pages."""
    if image.format != "TIFF" or not image.filename:
        return tiff_pages(image)
    sizes = tiff_sizes(image.filename)
    for n, (width, height) in enumerate(sizes[1:], 2):
        _hold_to(width, height, max_pixels, f"page {n} of the TIFF")
    return len(sizes) or 1  # a chain Pillow opened but this cannot walk: its first page


def _hold_to(width: int, height: int, max_pixels: int, which: str) -> None:
    if width * height > max_pixels:
        raise RefusedImage(
            f"{which} is {width}×{height} = {width * height / 1e6:.3g} MP, over the "
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
