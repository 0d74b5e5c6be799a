"""The embedded CPU engine: RapidOCR (PP-OCR models in ONNX, shipped inside the package).

It stands in for the GPU model on a laptop. It reads no prompt; its lines are joined in reading
order by `reading_order`, so two-column pages come out column by column, and grouped into text
blocks with boxes (no kinds: the document's repeated lines tell its headers and footers).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import time
from typing import Any

import numpy as np

from ..blocks import RawBlock, place
from ..errors import EngineError
from ..images import Budget, PageImage
from ..prompts import Prompt, resolve
from .base import EngineFacts, Recognition
from .reading import Reading
from .reading_order import Line, paragraphs, to_text

log = logging.getLogger(__name__)


class RapidOcrEngine:
    default_concurrency = 1  # onnxruntime already uses every core for one page
    replicas = 1
    family = None  # it finds its own blocks: the engine's name says who did

    def __init__(self, *, detection_order: bool = False, default_prompt: str = "markdown") -> None:
        """`detection_order` joins lines as the detector returns them: the baseline `vlm-ocr
        eval --detection-order` compares the reading order against."""
        self.default_prompt = default_prompt
        version = importlib.metadata.version("rapidocr")
        self.facts = EngineFacts(
            name="rapidocr",
            version=version,
            model="PP-OCR (rapidocr built-in det/cls/rec)",
            uses_prompt=False,
        )
        self._ocr: Any = None
        self._lock = asyncio.Lock()
        self.detection_order = detection_order

    @property
    def failure(self) -> str | None:
        return None

    async def start(self, warmup: PageImage) -> None:
        t0 = time.perf_counter()
        self._ocr = await asyncio.to_thread(load_ocr)
        loaded = time.perf_counter()
        result = await self.recognize(warmup, prompt=None)
        if not result.text.strip():
            raise EngineError("the CPU engine read nothing from the warm-up page", fatal=True)
        self.facts.details = {
            "load_s": round(loaded - t0, 3),
            "warmup_s": round(result.seconds, 3),
            "blocks": "text blocks with boxes (its lines grouped; no kinds)",
        }

    async def recognize(self, page: PageImage, prompt: Prompt | None) -> Recognition:
        if self._ocr is None:
            raise EngineError("the CPU engine was not started")
        t0 = time.perf_counter()
        async with self._lock:
            reading = await asyncio.to_thread(self._read, page)
        return Recognition(
            text=reading.text,
            finish_reason="stop",
            seconds=time.perf_counter() - t0,
            reading=reading,
        )

    def _read(self, page: PageImage) -> Reading:
        lines = read_lines(self._ocr, np.asarray(page.pil()))
        if self.detection_order:
            return Reading("\n".join(ln.text for ln in lines))
        raw = [RawBlock("text", p.box, p.text) for p in paragraphs(lines)]
        placed = place(
            raw, {"text": "text"}, width=page.width, height=page.height, pdf_size=page.pdf_size
        )
        return Reading(
            to_text(lines), tuple(placed.blocks), notes=tuple(placed.notes), labelled=False
        )

    def budget(self, max_pixels: int) -> Budget:
        return Budget(max_pixels)

    def prompt_for(
        self, preset: str | None, custom: str | None, schema: dict[str, Any] | None
    ) -> Prompt:
        return resolve(preset, custom, self.default_prompt, schema)  # named in a note: unread

    def fingerprint(self, prompt: Prompt) -> dict[str, Any]:
        # The CPU engine ignores the prompt, so it is not part of what decides the text.
        order = "detection" if self.detection_order else "xy-cut-4"
        return {"engine": "rapidocr", "version": self.facts.version, "reading_order": order}

    def terminate(self) -> None:
        pass

    async def close(self) -> None:
        self._ocr = None


def load_ocr(threads: int = -1, **params: Any) -> Any:
    """RapidOCR with its built-in models; `threads` for onnxruntime (-1: every core), `params`
    more of its settings."""
    from rapidocr import RapidOCR

    logging.getLogger("RapidOCR").setLevel(logging.WARNING)
    return RapidOCR(
        params={
            "Global.log_level": "warning",
            "EngineConfig.onnxruntime.intra_op_num_threads": threads,
            **params,
        }
    )


def read_lines(ocr: Any, pixels: np.ndarray) -> list[Line]:
    """The page's text lines, as the detector found them."""
    out = ocr(pixels)
    if out.boxes is None or out.txts is None:
        return []
    return [Line.from_quad(box, txt) for box, txt in zip(out.boxes, out.txts, strict=True)]


def read_image(ocr: Any, pixels: np.ndarray, detection_order: bool = False) -> str:
    """The page's lines, joined in reading order (or as detected)."""
    lines = read_lines(ocr, pixels)
    if detection_order:
        return "\n".join(ln.text for ln in lines)
    return to_text(lines)


_CHILD_OCR: Any = None


def read_png(png: bytes, threads: int = 1) -> str:
    """Read a rendered page in a CPU-pool process (the model is loaded once per process): the
    second opinion on a page the GPU engine read."""
    import io

    from PIL import Image

    global _CHILD_OCR
    if _CHILD_OCR is None:
        _CHILD_OCR = load_ocr(threads)
    with Image.open(io.BytesIO(png)) as image:
        return read_image(_CHILD_OCR, np.asarray(image.convert("RGB")))
