"""LightOnOCR 2 (lightonai/LightOnOCR-2-1B: a Pixtral vision encoder and a Qwen3 decoder),
driven as its model card drives it: the page image alone, no text prompt, drawn 1540 px on its
longest side, temperature 0.2 with top_p 0.9, 4,096-token answers of Markdown (tables as HTML,
math as LaTeX)."""

from __future__ import annotations

import re
from typing import Any

from ...images import Budget
from ...prompts import Prompt
from ..reading import Page, Reading
from .base import AnswerError, Family, Sampling, temperatures

PROMPT = Prompt("lighton-image-only", "1", "")
_ESCAPED_DOLLAR = re.compile(r"\\\$")


class LightOnOcr(Family):
    name = "lighton-ocr"
    version = "1"
    title = "LightOnOCR 2"
    architectures = frozenset({"LightOnOCRForConditionalGeneration"})
    name_hints = ("lightonocr",)
    patch = 28  # Pixtral's: patch 14, merged 2×2
    prompt = PROMPT
    sampling = Sampling(temperatures(0.2, 0.3, 0.5, 0.8, top_p=0.9), 4096)
    max_model_len = 16384
    min_vllm = "0.11.1"
    text_layer_fallback = True
    licence = "Apache-2.0"
    LONGEST_SIDE = 1540

    def budget(self, max_pixels: int) -> Budget:
        side = self.LONGEST_SIDE
        return Budget(side * side, max_side=side)

    def limit_mm_per_prompt(self) -> dict[str, int]:
        return {"image": 1}

    def processor_kwargs(self, max_pixels: int) -> dict[str, Any] | None:
        return None  # Pixtral's processor caps the page at 1540 px itself

    def serve_args(self) -> list[str]:
        return ["--no-enable-prefix-caching"]

    def content(self, image_url: str, prompt: Prompt) -> list[dict[str, Any]]:
        return [{"type": "image_url", "image_url": {"url": image_url}}]

    def parse(self, answer: str, prompt: Prompt, page: Page) -> Reading:
        text = _ESCAPED_DOLLAR.sub("$", answer).strip()
        if not text:
            raise AnswerError("the answer is empty")
        return Reading(text)
