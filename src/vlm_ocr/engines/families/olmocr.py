"""olmOCR 2 (allenai/olmOCR-2-7B-1025-FP8, a Qwen2.5-VL-7B fine-tune), driven as its pipeline
drives it: its v4 prompt before the page, the page drawn 1288 px on its longest side, its
temperature ladder and 8,000-token answers. The answer opens with YAML front matter (language,
whether the page is upright and how to turn it, whether it is a table or a diagram), then the
page as Markdown. A page it says is turned is turned and read again."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from ...images import Budget
from ...prompts import Prompt
from ...settings import StartMode
from ..reading import Page, Reading
from .base import AnswerError, Checkpoint, Family, Sampling, temperatures

PROMPT = Prompt(
    "olmocr-v4-yaml",
    "1",
    resources.files(__package__).joinpath("prompts/olmocr-v4-yaml.txt").read_text("utf-8"),
)
FIELDS = ("primary_language", "is_rotation_valid", "rotation_correction", "is_table", "is_diagram")
ROTATIONS = (0, 90, 180, 270)
_LINE = re.compile(r"^([A-Za-z_]+)\s*:\s*(.*?)\s*$")
_TRUE, _FALSE = {"true", "yes", "on"}, {"false", "no", "off"}
_NULL = {"null", "~", "none", ""}


class OlmOcr(Family):
    name = "olmocr"
    version = "1"
    title = "olmOCR 2"
    architectures = frozenset({"Qwen2_5_VLForConditionalGeneration"})
    name_hints = ("olmocr",)
    fine_tune = True  # of Qwen2.5-VL
    patch = 28  # Qwen2.5-VL's: patch 14, merged 2×2
    answer = (
        "YAML front matter (`primary_language`, `is_rotation_valid`, `rotation_correction`, "
        "`is_table`, `is_diagram`) then Markdown"
    )
    prompt = PROMPT
    # its pipeline's TEMPERATURE_BY_ATTEMPT, one attempt each, 8 in all
    sampling = Sampling(temperatures(0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0), 8000)
    max_model_len = 16384
    min_vllm = "0.11.0"
    text_layer_fallback = True
    licence = "Apache-2.0"
    # No torch.compile: on the H200 (vLLM 0.32) both runs without it read more pages a second
    # than the three with it, a decoding step of 256 sequences some 13 ms against 16 (vLLM's
    # gauges), and the engine was ready in half the time.
    start_mode = StartMode.FAST
    # One API server: on an H100 (vLLM 0.32) it read as many pages a second as the rule's two, the
    # one at under half a CPU at the median and some seven tenths at its busiest (docs/models.md);
    # an H200 writes these pages about an eighth faster, still well inside one CPU.
    api_server_count = 1
    checkpoints = (
        Checkpoint(
            "allenai/olmOCR-2-7B-1025-FP8",
            "olmocr-2-7b-1025-fp8",
            "Qwen2.5-VL, 7B, FP8",
            82.4,
            preset="any listed GPU (OCR fine-tune of Qwen2.5-VL; 10 GB of weights)",
        ),
    )
    LONGEST_SIDE = 1288

    def budget(self, max_pixels: int) -> Budget:
        side = self.LONGEST_SIDE
        return Budget(side * side, max_side=side, grid=self.grid)

    def processor_kwargs(self, max_pixels: int) -> dict[str, Any] | None:
        return None  # Qwen2.5-VL's processor as it ships: its pages are well inside its bounds

    def content(self, image_url: str, prompt: Prompt) -> list[dict[str, Any]]:
        # its pipeline (and its training) put the prompt before the page
        return [
            {"type": "text", "text": prompt.text},
            {"type": "image_url", "image_url": {"url": image_url}},
        ]

    def parse(self, answer: str, prompt: Prompt, page: Page) -> Reading:
        head, text = front_matter(answer)
        values = {key: value(key, raw) for key, raw in head.items()}
        correction = values["rotation_correction"]
        turn = None
        if values["is_rotation_valid"] is False and correction:
            turn = (360 - correction) % 360  # it says how to turn counter-clockwise
        return Reading(
            text,
            language=values["primary_language"],
            turn=turn,
            flags={"table": values["is_table"], "diagram": values["is_diagram"]},
        )


def front_matter(answer: str) -> tuple[dict[str, str], str]:
    """The front matter's `key: value` lines and the text after it; AnswerError when the answer
    does not open with a whole front matter of exactly the five fields."""
    body = answer.lstrip("\ufeff")
    if not body.startswith("---\n"):
        raise AnswerError("the answer does not open with front matter (---)")
    end = body.find("\n---", 3)
    if end < 0:
        raise AnswerError("the front matter is not closed (no second ---)")
    head: dict[str, str] = {}
    for line in body[4:end].splitlines():
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None:
            raise AnswerError(f"front matter line {line[:60]!r} is not `key: value`")
        head[m.group(1)] = m.group(2)
    missing = [f for f in FIELDS if f not in head]
    if missing:
        raise AnswerError(f"the front matter lacks {', '.join(missing)}")
    extra = [k for k in head if k not in FIELDS]
    if extra:
        raise AnswerError(f"the front matter has fields no olmOCR answer has: {', '.join(extra)}")
    return head, body[end + 4 :].strip()


def value(key: str, raw: str) -> Any:
    text = raw.strip().strip("'\"")
    low = text.lower()
    if key == "primary_language":
        return None if low in _NULL or low in _TRUE | _FALSE else text
    if key == "rotation_correction":
        try:
            number = int(text)
        except ValueError:
            raise AnswerError(f"rotation_correction {text[:20]!r} is not a number") from None
        if number not in ROTATIONS:
            raise AnswerError(f"rotation_correction {number} is not one of 0, 90, 180, 270")
        return number
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise AnswerError(f"{key} {text[:20]!r} is not true or false")
