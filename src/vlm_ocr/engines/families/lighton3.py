"""LightOnOCR-3 (lightonai/LightOnOCR-3-0.8B, -1B and -4B), served as its makers serve it
(their repository lightonai/LightOnOCR: its README, client and benchmarks).

Two kinds of checkpoint: the 0.8B and the 4B are Qwen3.5 graphs (`Qwen3_5ForConditionalGeneration`,
gated-delta-net layers, so the worker's GDN prefill pin applies), fine-tuned, pages drawn 2,048 px
on the longest side, thinking off; the 1B keeps LightOnOCR 2's Pixtral encoder and Qwen3 decoder
(`LightOnOCRForConditionalGeneration`), pages 1,540 px. Being fine-tunes, all three are told from
Chandra 2, the Qwen3.5 chat models and LightOnOCR 2 by their name (`lightonocr-3`); which kind a
checkpoint is, by its config's `model_type` (or, with none to read, its name).

Its makers' rules, and the worker's choices where they leave one:

- **The request** is one user message: the page alone (plain mode, Markdown), or the page then the
  word `grounding` (grounding mode, one `![label](x1,y1,x2,y2)` marker per layout block). No
  system message; other instructions are out of its training.
- **Grounding by default.** Its makers' olmOCR-bench figures (85.4 for the 4B, 84.7 for the
  0.8B, 84.0 for the 1B) are grounding answers with the page's margins (headers, footers, page
  numbers, margin notes) left out, which is what the worker does with its blocks; and only
  grounding gives the blocks a job's `page-NNNN.json`, its figures, its searchable PDF and its
  review page are made of. A job therefore always gets grounding (`PLAIN` is kept for a caller
  that wants the bare Markdown).
- **Sampling.** Its makers disagree with themselves: their README says temperature 0.1, their
  client defaults to 0.2 with top_p 1.0 for this generation, their benchmarks ran 0.1 with 12,288
  answer tokens. The worker takes the benchmarks' (the setting the published figures were read
  at), top_p 1.0 as the client sends it, and climbs to warmer attempts (0.2, 0.4, 0.7) only when
  an answer stops by length or repetition or does not parse: a looping page gets out of its loop.
- **Flags** (their README's serve lines): one image a prompt, no multimodal processor cache (the
  worker sends that to every family), no prefix caching; a context of 18,000 tokens (the 1B:
  16,384, its `max_position_embeddings`); the Qwen3.5 ones with thinking off in the server's
  default chat-template arguments (and, as for every family, in each request). No
  `--mm-processor-kwargs`: the Qwen3.5 processor takes the page as sent (it allows 16.7 MP), and
  the 1B's caps it at 1,540 px itself.
- **Post-processing**: their escaped-dollar repair (`dollars.py`) on every block; tables written
  with `&dollar;` (as grounding answers do) get their `$` back. Not their "PP3" Markdown rules,
  which they tuned on olmOCR-bench itself and use for that benchmark alone (86.1, 85.4 and 84.5
  with it).
- **The engine's packages**: they pin vLLM 0.30.0 with transformers 5.16.1 (5.17 renamed a class
  vLLM 0.30's Pixtral code imports, which breaks the 1B), and say vLLM 0.27.1 makes every
  LightOnOCR model loop. The image's build installs the pin (`engine_pins`); vLLM 0.32 reads
  either transformers.
"""

from __future__ import annotations

import re
from typing import Any

from ...blocks import MAX_BLOCKS, RawBlock
from ...images import Budget
from ...prompts import Prompt
from ..reading import Page, Reading
from . import grounding
from .base import AnswerError, Checkpoint, Family, Sampling, from_grid, temperatures
from .dollars import fix_escaped_dollars
from .lighton import BROKEN_VLLM, ENGINE_PINS, pixtral_batched_tokens, pixtral_image_tokens

GROUNDING = Prompt("lightonocr-grounding", "1", "grounding", answer="grounding")
PLAIN = Prompt("lightonocr-plain", "1", "")
# Its labels (and older ones its makers' code still reads) onto the block vocabulary. Margin
# notes go with the headers: the makers' scored transcription leaves them out with them.
LABELS = {
    "title": "title",
    "section": "section-header",
    "text": "text",
    "paragraph": "text",
    "list": "list",
    "caption": "caption",
    "figure_title": "caption",
    "footnote": "footnote",
    "page_footnote": "footnote",
    "aside_text": "page-header",
    "header": "page-header",
    "page_header": "page-header",
    "header_image": "page-header",
    "footer": "page-footer",
    "page_footer": "page-footer",
    "footer_image": "page-footer",
    "page_number": "page-number",
    "table": "table",
    "chart": "figure",  # its data as an HTML table, kept under the figure cut from the page
    "image": "figure",
    "figure": "figure",
    "formula": "formula",
    "code": "code",
}
HEADINGS = {"title": "#", "section": "##"}
_ENTITY_DOLLAR = re.compile(r"&(?:dollar|#36|#x24);", re.IGNORECASE)
QWEN35_SIDE, PIXTRAL_SIDE = 2048, 1540
# The Qwen3.5 sizes' engine step on vLLM 0.32: a 2,048 px page is some 4,000-5,000 prompt tokens,
# so vLLM's 16,384 take about three pages a step, and the gated-delta-net layers' chunked prefill
# launches its Triton kernels one by one from the engine core's one thread, whose time held the
# 0.8B's pace (py-spy, docs/models.md): twice the tokens a step, half the prefill steps and their
# launches for the same pages. The 0.8B read about a tenth more pages a second so, worker and
# direct path alike, with none failed (the GPU check's data). On older vLLM the common budget.
QWEN35_BATCHED_TOKENS = 32768
QWEN35_BATCHED_FROM = (0, 32)
LOOPING = "the answer ends writing one block over and over"


class LightOnOcr3(Family):
    name = "lighton-ocr-3"
    version = "1"
    title = "LightOnOCR-3"
    architectures = frozenset(
        {"Qwen3_5ForConditionalGeneration", "LightOnOCRForConditionalGeneration"}
    )
    name_hints = ("lightonocr-3",)
    fine_tune = True  # of Qwen3.5 (0.8B, 4B), and of LightOnOCR 2's graph (1B)
    answer = (
        "blocks `![label](x1,y1,x2,y2)` (0-1000 grid), a `+` for one that continues the last; "
        "headers, footers, page numbers and margin notes left out of the text; escaped dollars "
        "repaired as its makers repair them"
    )
    prompt = GROUNDING
    sampling = Sampling(temperatures(0.1, 0.2, 0.4, 0.7, top_p=1.0), 12288)
    max_model_len = 18000
    min_vllm = "0.17.0"
    thinks = True
    boxes = True
    text_layer_fallback = True
    labels = LABELS
    licence = "Apache-2.0"
    engine_pins = ENGINE_PINS
    broken_vllm = BROKEN_VLLM
    checkpoints = (
        Checkpoint(
            "lightonai/LightOnOCR-3-0.8B",
            "lightonocr-3-0.8b",
            "Qwen3.5, 0.8B",
            84.7,
            "85.4 with its makers' olmOCR-bench post-processing",
            preset="any listed GPU (OCR with layout blocks at under a billion parameters)",
        ),
        Checkpoint(
            "lightonai/LightOnOCR-3-4B",
            "lightonocr-3-4b",
            "Qwen3.5, 4B",
            85.4,
            "86.1 with its makers' olmOCR-bench post-processing",
            preset="any listed GPU (OCR with layout blocks)",
        ),
        Checkpoint(
            "lightonai/LightOnOCR-3-1B",
            "lightonocr-3-1b",
            "Pixtral + Qwen3, 1B",
            84.0,
            "84.5 with its makers' olmOCR-bench post-processing",
        ),
    )

    def __init__(
        self, model_type: str = "", *, model: str = "", max_pixels: int = 1_600_000
    ) -> None:
        super().__init__(model_type, model=model, max_pixels=max_pixels)
        # the 1B: LightOnOCR 2's graph; told by its config, or by its name with none to read
        self.pixtral = model_type == "mistral3" or (
            not model_type and "lightonocr-3-1b" in self.model
        )
        if self.pixtral:
            self.patch = 28  # Pixtral's: patch 14, merged 2×2
            self.max_model_len = 16384  # type: ignore[misc]
            self.min_vllm = "0.11.1"  # type: ignore[misc]
            self.thinks = False  # type: ignore[misc]

    @classmethod
    def variants(cls) -> dict[str, Family]:
        return {"0.8B, 4B": cls("qwen3_5"), "1B": cls("mistral3")}

    def budget(self, max_pixels: int) -> Budget:
        # a PDF page drawn to the longest side, an image only made smaller: as their client does
        side = PIXTRAL_SIDE if self.pixtral else QWEN35_SIDE
        return Budget(side * side, max_side=side, grid=self.grid)

    @property
    def grid(self) -> int | None:
        # Pixtral's processor rounds each side up to its own patch: its pages go as drawn
        return None if self.pixtral else self.patch

    def image_tokens(self, width: int, height: int, max_pixels: int) -> int:
        if self.pixtral:
            return pixtral_image_tokens(width, height, PIXTRAL_SIDE, self.patch)
        return super().image_tokens(width, height, max_pixels)

    def limit_mm_per_prompt(self) -> dict[str, int]:
        return {"image": 1}

    def batched_tokens(self, vllm_release: tuple[int, int]) -> int:
        own = super().batched_tokens(vllm_release)
        if self.pixtral:
            return pixtral_batched_tokens(vllm_release, own)
        return QWEN35_BATCHED_TOKENS if vllm_release >= QWEN35_BATCHED_FROM else own

    def processor_kwargs(self, max_pixels: int) -> dict[str, Any] | None:
        return None  # the processor as it ships (see the module)

    def serve_args(self) -> list[str]:
        return [*super().serve_args(), "--no-enable-prefix-caching"]

    def content(self, image_url: str, prompt: Prompt) -> list[dict[str, Any]]:
        page: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": image_url}}]
        return page + ([{"type": "text", "text": prompt.text}] if prompt.text else [])

    def parse(self, answer: str, prompt: Prompt, page: Page) -> Reading:
        if not answer.strip():
            raise AnswerError("the answer is empty")
        if prompt.answer != GROUNDING.answer:
            return Reading(fix_escaped_dollars(answer).strip())
        found = grounding.read(answer, MAX_BLOCKS)
        if grounding.loops(found.blocks):
            raise AnswerError(LOOPING)
        if not found.marked:  # its makers keep such an answer as it is
            note = "the grounding answer had no block markers: its text is kept without blocks"
            return Reading(fix_escaped_dollars(answer).strip(), notes=(note,))
        raw = [
            RawBlock(b.label, from_grid(b.box, page), content_of(b), continues=b.continues)
            for b in found.blocks
        ]
        placed = self.placed(raw, page)
        blocks = tuple(placed.blocks)
        return Reading(self.text_of(blocks), blocks, notes=(*found.notes, *placed.notes))


def content_of(block: grounding.Marked) -> str:
    """A block's text as the page's Markdown: its dollars repaired, a table's `&dollar;` a
    dollar again, a title or section without its own heading mark given one."""
    text = fix_escaped_dollars(block.text)
    label = block.label.lower()
    if label in ("table", "chart"):
        text = _ENTITY_DOLLAR.sub("$", text)
    if label in HEADINGS and text and not text.startswith("#"):
        text = f"{HEADINGS[label]} {text}"
    return text
