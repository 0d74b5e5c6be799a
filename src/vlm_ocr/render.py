"""Turn a page (a PDF page or an image file) into an RGB image within the pixel budget."""

from __future__ import annotations

import hashlib
import io
import math
import threading
import warnings
from dataclasses import dataclass, field

import pymupdf
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import PageError

# Our own limit (MAX_IMAGE_PIXELS) is checked before decoding; Pillow's warning would duplicate it.
Image.MAX_IMAGE_PIXELS = None
MAX_PDF_ZOOM = 600 / 72  # never render a small PDF page above 600 dpi
ACCEPTED_IMAGE_FORMATS = {"PNG", "JPEG", "WEBP", "TIFF", "MPO"}


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


@dataclass(frozen=True)
class PageImage:
    """A rendered page; `sha256` identifies its pixels (used to reuse stored results)."""

    image: Image.Image = field(repr=False)
    sha256: str

    @classmethod
    def of(cls, image: Image.Image) -> PageImage:
        digest = hashlib.sha256(f"{image.width}x{image.height}:".encode())
        digest.update(image.tobytes())
        return cls(image=image, sha256=digest.hexdigest())

    @property
    def width(self) -> int:
        return self.image.width

    @property
    def height(self) -> int:
        return self.image.height

    def png(self) -> bytes:
        buf = io.BytesIO()
        self.image.save(buf, format="PNG", compress_level=3)
        return buf.getvalue()


class PdfDocument:
    """An opened PDF. MuPDF is not thread-safe, so rendering holds a lock per document."""

    def __init__(self, data: bytes) -> None:
        self._doc = pymupdf.open(stream=data, filetype="pdf")
        self._lock = threading.Lock()

    @property
    def page_count(self) -> int:
        return self._doc.page_count

    @property
    def needs_password(self) -> bool:
        return bool(self._doc.needs_pass)

    def render(self, number: int, budget: Budget) -> PageImage:
        with self._lock:
            try:
                page = self._doc[number - 1]
                rect = page.rect
                zoom = min(budget.scale_for(rect.width, rect.height), MAX_PDF_ZOOM)
                pix = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False)
                image = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
            except Exception as exc:  # MuPDF raises plain RuntimeErrors for broken pages
                raise PageError("render", f"page {number} could not be rendered: {exc}") from None
        return PageImage.of(image)

    def close(self) -> None:
        self._doc.close()


def open_pdf(data: bytes) -> PdfDocument:
    """Open PDF bytes or raise ValueError with a reason a user can act on."""
    if not data.lstrip()[:5].startswith(b"%PDF"):
        raise ValueError("the data is not a PDF (it does not start with %PDF)")
    try:
        doc = PdfDocument(data)
    except Exception as exc:
        raise ValueError(f"the PDF is corrupt or truncated and cannot be opened ({exc})") from None
    if doc.needs_password:
        raise ValueError("the PDF is encrypted with a password; send an unencrypted copy")
    if doc.page_count == 0:
        raise ValueError("the PDF has no pages")
    return doc


def render_image(data: bytes, budget: Budget, max_image_pixels: int) -> PageImage:
    """Decode an image file, turn it upright by its EXIF orientation, flatten to RGB, fit budget."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            img = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
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
    try:
        img.load()
        img = ImageOps.exif_transpose(img)
    except (OSError, SyntaxError, ValueError) as exc:
        raise PageError("decode", f"the image is corrupt or truncated ({exc})") from None
    img = _to_rgb(img)
    scale = budget.scale_for(img.width, img.height)
    if scale < 1:
        size = (max(1, int(img.width * scale)), max(1, int(img.height * scale)))
        img = img.resize(size, Image.Resampling.LANCZOS)
    return PageImage.of(img)


def _to_rgb(img: Image.Image) -> Image.Image:
    if img.mode == "RGB":
        return img
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        white = Image.new("RGB", rgba.size, (255, 255, 255))
        white.paste(rgba, mask=rgba.getchannel("A"))
        return white
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        img = img.point(lambda v: v / 256).convert("L")
    return img.convert("RGB")
