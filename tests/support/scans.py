"""Scanned-looking pages made by the tests: paper noise, speckle, bleed-through, grey paper, and
pages with a little or a lot of ink, at the default page budget (1064 × 1505)."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont, ImageOps

W, H = 1064, 1505
_rng = np.random.default_rng(1)


def white() -> Image.Image:
    return Image.new("L", (W, H), 255)


def noisy(img: Image.Image, sigma: float = 10) -> Image.Image:
    a = np.asarray(img, dtype=np.float32) + _rng.normal(0, sigma, (img.height, img.width))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def speckled(img: Image.Image, share: float = 0.002) -> Image.Image:
    a = np.asarray(img).copy()
    dots = _rng.random(a.shape) < share
    a[dots] = _rng.integers(0, 120, int(dots.sum()))
    return Image.fromarray(a)


def bled_through(img: Image.Image, text_page: Image.Image, contrast: float = 0.15) -> Image.Image:
    back = np.asarray(ImageOps.mirror(text_page.convert("L").resize((W, H))), dtype=np.float32)
    faint = 255 - (255 - back) * contrast
    return Image.fromarray(np.minimum(np.asarray(img, dtype=np.float32), faint).astype(np.uint8))


def grey_paper(img: Image.Image, level: int = 225) -> Image.Image:
    return Image.fromarray((np.asarray(img, dtype=np.float32) * level / 255).astype(np.uint8))


def page_number(number: str = "12") -> Image.Image:
    img = white()
    ImageDraw.Draw(img).text((520, 1430), number, fill=0, font=ImageFont.load_default(size=18))
    return img


def stray_mark() -> Image.Image:
    img = white()
    ImageDraw.Draw(img).ellipse((500, 700, 512, 712), fill=40)
    return img


def dark_slide(text_page: Image.Image) -> Image.Image:
    """Light text on a dark ground, as a dark-themed slide or a negative scan is."""
    return ImageOps.invert(text_page.convert("L").resize((W, H)))


def photo_over(text_page: Image.Image, share: float = 0.6) -> Image.Image:
    """The top `share` of the page a dark photograph, the text below it."""
    a = np.asarray(text_page.convert("L").resize((W, H))).copy()
    top = int(H * share)
    a[:top] = np.clip(_rng.normal(60, 25, (top, W)), 0, 255).astype(np.uint8)
    return Image.fromarray(a)
