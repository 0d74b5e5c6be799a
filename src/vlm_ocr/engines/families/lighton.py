"""LightOnOCR 2 (lightonai/LightOnOCR-2-1B: a Pixtral vision encoder and a Qwen3 decoder),
driven as its model card and its makers' client drive it: the page image alone, no text prompt,
drawn 1540 px on its longest side, temperature 0.2 with top_p 0.9, answers of Markdown (tables
as HTML, math as LaTeX) with their escaped dollars repaired as its makers repair them (prices
left alone). It has no grounding mode: LightOnOCR-3 is its own family (`lighton3.py`).

Its answers may run to 12,288 tokens, what its makers' benchmarks give the same graph in the same
16,384-token context (their client sets no cap at all); its makers serve it without prefix
caching and pin transformers 5.16.1 for its Pixtral code (`engine_pins`)."""

from __future__ import annotations

import math
from typing import Any

from ...images import Budget
from ...prompts import Prompt
from ...settings import StartMode
from ..reading import Page, Reading
from .base import AnswerError, Checkpoint, Family, Sampling, temperatures
from .dollars import fix_escaped_dollars

PROMPT = Prompt("lighton-image-only", "1", "")
# What its makers say of the engine, for every LightOnOCR model: transformers 5.17 renamed a class
# vLLM 0.30's Pixtral code imports (vLLM 0.32 reads either); vLLM 0.27.1 makes them loop.
ENGINE_PINS = ("transformers==5.16.1",)
BROKEN_VLLM = {"0.27.1": "its compiled mode makes every LightOnOCR model loop (LightOn)"}
# Pixtral's vision encoder before vLLM 0.32 reads every page an engine step takes in as one
# sequence, under a dense attention mask over all their patches (quadratic in the step's image
# tokens), and vLLM's default model runner there does not reserve that memory when it sizes the KV
# cache: at 16,384 batched tokens seven 1,540 px pages made a 6.7 GiB mask and the engine died of
# CUDA out-of-memory at its first busy step on an H200 (vLLM 0.26). 4,096 tokens admit one page a
# step (0.15-0.27 GiB of mask, about 54 ms of encoder on an H200), which also keeps the
# quadratic cost off every decode step that shares the step. vLLM 0.32 attends page by page and
# profiles the encoder, so the common budget is safe there.
PIXTRAL_FIXED_IN = (0, 32)
PIXTRAL_BATCHED_TOKENS = 4096


def pixtral_batched_tokens(vllm_release: tuple[int, int], otherwise: int) -> int:
    return PIXTRAL_BATCHED_TOKENS if vllm_release < PIXTRAL_FIXED_IN else otherwise


def pixtral_image_tokens(width: int, height: int, side: int, patch: int) -> int:
    """The tokens Pixtral's processor spends on a page: made at most `side` pixels long, each
    side rounded up to whole `patch` cells, a token a cell and one more a row (its row break,
    or the image's end)."""
    scale = min(1.0, side / max(width, height))
    cols, rows = math.ceil(width * scale / patch), math.ceil(height * scale / patch)
    return rows * (cols + 1)


class LightOnOcr(Family):
    name = "lighton-ocr"
    version = "1"
    title = "LightOnOCR 2"
    architectures = frozenset({"LightOnOCRForConditionalGeneration"})
    name_hints = ("lightonocr",)
    patch = 28  # Pixtral's: patch 14, merged 2×2
    prompt = PROMPT
    sampling = Sampling(temperatures(0.2, 0.3, 0.5, 0.8, top_p=0.9), 12288)
    max_model_len = 16384
    min_vllm = "0.11.1"
    text_layer_fallback = True
    licence = "Apache-2.0"
    engine_pins = ENGINE_PINS
    broken_vllm = BROKEN_VLLM
    # No torch.compile: on one H200 (vLLM 0.32) it read some 6 % more pages a second without it,
    # worker and direct path alike, and the engine was ready in about a third of the time.
    start_mode = StartMode.FAST
    # API servers by the rule (one per megapixel of its pages): one kept an H100's pace, but on
    # an H200 it ran near a full CPU at under 8 pages a second, where each of three ran at about
    # a seventh of one (docs/models.md): one would hold back a faster engine.
    checkpoints = (
        Checkpoint(
            "lightonai/LightOnOCR-2-1B",
            "lightonocr-2-1b",
            "Pixtral + Qwen3, 1B",
            83.2,
            "its makers' figure, headers and footers left out of the score",
            preset="any listed GPU (Markdown only, no blocks)",
        ),
    )
    LONGEST_SIDE = 1540

    def budget(self, max_pixels: int) -> Budget:
        side = self.LONGEST_SIDE
        return Budget(side * side, max_side=side)

    @property
    def grid(self) -> int | None:
        return None  # Pixtral's processor rounds each side up to its own patch: as drawn

    def image_tokens(self, width: int, height: int, max_pixels: int) -> int:
        return pixtral_image_tokens(width, height, self.LONGEST_SIDE, self.patch)

    def limit_mm_per_prompt(self) -> dict[str, int]:
        return {"image": 1}

    def batched_tokens(self, vllm_release: tuple[int, int]) -> int:
        return pixtral_batched_tokens(vllm_release, super().batched_tokens(vllm_release))

    def processor_kwargs(self, max_pixels: int) -> dict[str, Any] | None:
        return None  # Pixtral's processor caps the page at 1540 px itself

    def serve_args(self) -> list[str]:
        return ["--no-enable-prefix-caching"]

    def content(self, image_url: str, prompt: Prompt) -> list[dict[str, Any]]:
        return [{"type": "image_url", "image_url": {"url": image_url}}]

    def parse(self, answer: str, prompt: Prompt, page: Page) -> Reading:
        text = fix_escaped_dollars(answer).strip()
        if not text:
            raise AnswerError("the answer is empty")
        return Reading(text)
