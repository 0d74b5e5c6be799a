"""Chandra 2 (datalab-to/chandra-ocr-2, a Qwen3.5 fine-tune), driven as its makers' code drives
it: its `ocr_layout` prompt after the page, pages drawn at 192 dpi (the shorter side at least
1,024 px) and fitted on a 28 px grid within 3072×2048, greedy with top_p 0.1 first and six
warmer retries when an answer loops. The answer is a run of `<div data-bbox data-label>` blocks
on a 0-1000 grid; headers, footers and blank-page blocks stay out of the text by default.

Its weights are under a modified OpenRAIL-M licence: free under US$2M of revenue or funding,
and not for a service that competes with its maker's."""

from __future__ import annotations

from importlib import resources
from typing import Any

from ...blocks import RawBlock
from ...images import Budget
from ...prompts import Prompt
from ...settings import StartMode
from ..reading import Page, Reading
from . import html
from .base import AnswerError, Attempt, Checkpoint, Family, Sampling, from_grid

PROMPT = Prompt(
    "chandra-ocr-layout",
    "1",
    resources.files(__package__).joinpath("prompts/chandra-ocr-layout.txt").read_text("utf-8"),
)
LABELS = {
    "caption": "caption",
    "footnote": "footnote",
    "equation-block": "formula",
    "list-group": "list",
    "page-header": "page-header",
    "page-footer": "page-footer",
    "image": "figure",
    "figure": "figure",
    "diagram": "figure",
    "section-header": "section-header",
    "table": "table",
    "text": "text",
    "complex-block": "text",
    "code-block": "code",
    "form": "text",
    "table-of-contents": "text",
    "chemical-block": "text",
    "bibliography": "text",
}
FIGURES = {"image", "figure", "diagram"}


class Chandra(Family):
    name = "chandra"
    version = "1"
    title = "Chandra 2"
    architectures = frozenset({"Qwen3_5ForConditionalGeneration"})
    name_hints = ("chandra",)
    fine_tune = True  # of Qwen3.5
    answer = (
        "HTML blocks with `data-bbox` (0-1000 grid) and `data-label`; headers, footers and "
        "blank-page blocks left out of the text"
    )
    prompt = PROMPT
    sampling = Sampling(
        (Attempt(0.0, 0.1), *(Attempt(t, 0.95) for t in (0.2, 0.4, 0.6, 0.8, 0.8, 0.8))), 12384
    )
    max_model_len = 18000
    min_vllm = "0.17.0"
    thinks = True  # a Qwen3.5 model: thinking is turned off
    boxes = True
    text_layer_fallback = True
    labels = LABELS
    licence = (
        "modified OpenRAIL-M (free under US$2M revenue or funding; not to compete with Datalab)"
    )
    # torch.compile: with answers of text (the first stand-ins wrote none), the compiled decoder
    # took its steps about a third faster and read about a sixth more pages a second than at
    # `fast`, worker and direct path alike, on one H100 (vLLM 0.32). A fresh start compiles for
    # about half a minute more (H200), once per network volume: later starts read the cache.
    start_mode = StartMode.THROUGHPUT
    # API servers by the rule (one per megapixel of its pages, four on 16 CPUs): on H100s one
    # read as many pages a second as four, but on an H200, which decodes faster, four read some
    # 5 % more through the worker and 2 % more on the direct path (docs/models.md).
    checkpoints = (
        Checkpoint(
            "datalab-to/chandra-ocr-2",
            "chandra-ocr-2",
            "Qwen3.5, 4B",
            85.9,
            "its makers' figure; on LightOn's harness 85.8, 85.1 without Datalab's post-processing",
            preset="any listed GPU (OCR with layout blocks)",
        ),
    )
    MAX_PIXELS = 3072 * 2048

    def budget(self, max_pixels: int) -> Budget:
        return Budget(self.MAX_PIXELS, dpi=192, min_side=1024, grid=28)

    def processor_kwargs(self, max_pixels: int) -> dict[str, Any] | None:
        return {"min_pixels": 3136, "max_pixels": self.MAX_PIXELS}

    def parse(self, answer: str, prompt: Prompt, page: Page) -> Reading:
        if repeats_at_end(answer):
            raise AnswerError("the answer ends repeating itself")
        divs = html.boxed(html.parse(answer))
        if not divs:
            raise AnswerError("no layout block (a div with data-bbox and data-label) in the answer")
        raw = []
        for div in divs:
            label = div.attrs.get("data-label", "").strip() or "text"
            if label.lower() == "blank-page":
                continue
            raw.append(RawBlock(label, from_grid(html.box_of(div), page), content_of(div, label)))
        placed = self.placed(raw, page)
        blocks = tuple(placed.blocks)
        return Reading(self.text_of(blocks), blocks, notes=tuple(placed.notes))


def content_of(div: html.Node, label: str) -> str:
    kind = label.lower()
    if kind == "table":
        table = html.find(div, "table")
        return html.outer_html(table) if table is not None else html.markdown(div)
    if kind in FIGURES:  # the description the model wrote, and its alt text
        img = html.find(div, "img")
        alt = img.attrs.get("alt", "").strip() if img is not None else ""
        described = (
            html.markdown(div).replace(f"[{alt}]", "").strip() if alt else html.markdown(div)
        )
        return "\n\n".join(p for p in (alt, described) if p)
    if kind == "equation-block":
        return div.text().strip()
    return html.markdown(div)


def repeats_at_end(text: str, window: int = 250) -> bool:
    """The answer ends in one short run of characters repeated many times in a row (a loop
    the server did not stop): the shorter the run, the more repeats it takes."""
    for tail in (text, text[:-50] if len(text) > 50 else ""):
        for size in range(1, min(window, len(tail) // 2) + 1):
            unit = tail[-size:]
            count, end = 0, len(tail)
            while end >= size and tail[end - size : end] == unit:
                count, end = count + 1, end - size
            if count > int(4 * (1 + 3 / size)):
                return True
    return False
