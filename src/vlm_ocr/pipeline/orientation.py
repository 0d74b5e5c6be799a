"""Which way up a scanned page is, from the CPU engine's text detector and recognizer.

A scan fed in sideways or upside down reads badly, and a vision-language model does not say
so. The page's text lines are detected on a copy at most `DETECT_SIDE` pixels long, and two
questions are asked of them:

1. Do the lines run across or down the page? Line-shaped boxes (one side at least twice the
   other) taller than wide mean the page lies on its side (90° or 270°).
2. Which way up do they read? The longest lines are cut out, laid horizontal, and recognized as
   they are and turned 180°; upright text is recognized with high confidence, upside-down text
   with low. The orientation whose lines read with more confidence-weighted characters wins, by
   a margin (`MARGIN`); without it, or with too few lines, the page is left as it is.

The answer is the clockwise turn that makes the page upright: 0, 90, 180 or 270. It runs in the
CPU-model processes (`cpu_models.py`), never on the event loop. A page turned here gets the
hash of its new pixels, so a stored text is only reused for a page turned the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

from ..engines.rapidocr import load_ocr
from ..images import PageImage
from .render import turned

DETECT_SIDE = 640  # lines are found at this size (0.4 s on one core); read at full size
MIN_LINES = 3  # fewer line-shaped boxes: leave the page alone
PROBE_LINES = 5  # the longest lines, read both ways
MARGIN = 1.5  # the winning way must read this many times more confidently

_OCR: Any = None


def _ocr() -> Any:
    global _OCR
    if _OCR is None:
        _OCR = load_ocr(threads=1, **{"Det.limit_side_len": DETECT_SIDE, "Det.limit_type": "max"})
    return _OCR


def _read_score(ocr: Any, crops: list[np.ndarray]) -> float:
    """Confidence-weighted characters the recognizer reads in `crops`."""
    total = 0.0
    for crop in crops:
        out = ocr(crop, use_det=False, use_cls=False, use_rec=True)
        if getattr(out, "txts", None):
            total += sum(
                len(t.strip()) * float(s) for t, s in zip(out.txts, out.scores, strict=True)
            )
    return total


def detect_turn(image: Image.Image) -> int:
    """The clockwise turn (0, 90, 180, 270) that puts the page upright."""
    pixels = np.asarray(image.convert("RGB"))
    ocr = _ocr()
    det = ocr(pixels, use_det=True, use_cls=False, use_rec=False)
    if getattr(det, "boxes", None) is None:
        return 0
    lines = []
    for box in det.boxes:
        xs, ys = box[:, 0], box[:, 1]
        w, h = float(xs.max() - xs.min()), float(ys.max() - ys.min())
        if max(w, h) >= 2 * max(1.0, min(w, h)):
            lines.append(
                (max(w, h), h > w, int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max()))
            )
    if len(lines) < MIN_LINES:
        return 0
    sideways = sum(tall for _, tall, *_ in lines) > len(lines) / 2
    lines = [line for line in lines if line[1] == sideways]
    lines.sort(reverse=True)
    crops = []
    for _, _, x0, y0, x1, y1 in lines[:PROBE_LINES]:
        crop = pixels[y0 : y1 + 1, x0 : x1 + 1]
        # Lay a vertical line horizontal by turning it 90° counter-clockwise: a page turned
        # 90° clockwise then reads upright, one turned 90° counter-clockwise upside down.
        crops.append(np.ascontiguousarray(np.rot90(crop)) if sideways else crop)
    as_laid = _read_score(ocr, crops)
    flipped = _read_score(ocr, [np.ascontiguousarray(np.rot90(c, 2)) for c in crops])
    if max(as_laid, flipped) < MARGIN * min(as_laid, flipped) or max(as_laid, flipped) == 0:
        return 0  # no clear answer: leave the page as it is
    if sideways:
        # text running downwards (the page lies turned 90° clockwise): turn it back 270° cw
        return 270 if as_laid > flipped else 90
    return 0 if as_laid > flipped else 180


def upright(page: PageImage) -> tuple[int, PageImage | None]:
    """In a CPU-model process: the page's clockwise turn, and the page turned upright when it
    needed a turn (None when it did not)."""
    import io

    with Image.open(io.BytesIO(page.png)) as opened:
        image = opened.convert("RGB")
    turn = detect_turn(image)
    if turn == 0:
        return 0, None
    return turn, turned(page, image, turn)
