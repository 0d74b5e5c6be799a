"""What a model family is: how its makers size its pages, prompt it, sample it, serve it, and
read its answers. One subclass per family; nothing else in the worker knows a family by name.

A family's `parse` turns an answer into a `Reading` (Markdown text, the flags the model gives,
its blocks with boxes in page pixels) or raises `AnswerError` with the reason, which sends the
page up the family's attempt ladder.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ...blocks import Block, HeadersFooters, Placed, RawBlock, markdown, place
from ...images import Budget
from ...prompts import Prompt
from ...settings import MIN_PIXELS, StartMode
from ..reading import Page, Reading

# The tokens one engine step takes in, unless a family needs fewer: vLLM's own budget for a server,
# four or five pages' image tokens of most families in one step.
BATCHED_TOKENS = 16384


class AnswerError(Exception):
    """The model's answer is not in its family's format (the reason says how)."""


@dataclass(frozen=True)
class Attempt:
    temperature: float
    top_p: float | None = None


@dataclass(frozen=True)
class Sampling:
    """A family's attempts at one page (the first its makers' own), and its answer length."""

    attempts: tuple[Attempt, ...]
    max_tokens: int

    def ladder(self, count: int = 0) -> tuple[Attempt, ...]:
        """`count` attempts (0: the family's own), the last one repeated beyond its ladder."""
        count = count or len(self.attempts)
        return (self.attempts + (self.attempts[-1],) * count)[:count]


def temperatures(*values: float, top_p: float | None = None) -> tuple[Attempt, ...]:
    return tuple(Attempt(t, top_p) for t in values)


@dataclass(frozen=True)
class Checkpoint:
    """A published checkpoint of a family, as the README's table and the Hub's presets name it.
    Its shapes live once, in `examples/<example>.config.json`: `vlm-ocr plan`, the dummy-weight
    folders of the GPU check and the tests' tiny models all read them from there."""

    repo: str
    #: the stem of its example config in `examples/` ("": none kept here)
    example: str
    #: what it is made of, for the table ("Qwen3.5, 4B")
    what: str
    #: its makers' overall olmOCR-bench figure, as the worker reads the model (None: none)
    olmocr_bench: float | None = None
    #: what that figure is, where a reader must know ("86.1 with the makers' PP3")
    score_note: str = ""
    #: OmniDocBench v1.0 edit distance, English / Chinese, as published ("": none)
    omnidocbench: str = ""
    #: the Hub preset's words: where it runs and what it is for ("": no preset)
    preset: str = ""
    #: the preset's settings beside MODEL_NAME
    preset_defaults: tuple[tuple[str, int | str], ...] = ()
    #: the licence of its weights, where it is not its family's
    licence: str = ""

    @property
    def short(self) -> str:
        """Its name without its owner (`LightOnOCR-3-0.8B`)."""
        return self.repo.rsplit("/", 1)[-1]


class Family:
    """The Qwen chat default's behaviour; families override what their makers do differently.

    Its class attributes are the family's facts, read by the worker, `vlm-ocr plan` and the
    generated docs (the settings' per-family defaults, the families' table) alike."""

    name: ClassVar[str]
    version: ClassVar[str]
    title: ClassVar[str]
    #: `architectures` of the model's config.json this family reads
    architectures: ClassVar[frozenset[str]] = frozenset()
    #: lower-case parts of a model's name that tell this family: with no config.json to read,
    #: and, for a fine-tune, from the base that shares its architecture
    name_hints: ClassVar[tuple[str, ...]] = ()
    #: shares its base's architecture: only its name tells it apart
    fine_tune: ClassVar[bool] = False
    #: pixels per image token along a side (the vision patch × its spatial merge)
    patch: int = 32
    #: what an answer holds, checked before it is stored (for the families' table)
    answer: ClassVar[str] = "Markdown"
    #: the family's own prompt; None: a job may choose a preset or its own prompt
    prompt: ClassVar[Prompt | None] = None
    sampling: ClassVar[Sampling]
    max_model_len: ClassVar[int]
    min_vllm: ClassVar[str]
    #: the model can think (reasoning): turned off at launch and in every request
    thinks: ClassVar[bool] = False
    #: answers carry blocks with boxes (some prompts of a family may)
    boxes: ClassVar[bool] = False
    #: a PDF page with a text layer falls back to it when no attempt gave a good answer
    text_layer_fallback: ClassVar[bool] = False
    #: block labels of the family onto the block vocabulary
    labels: ClassVar[dict[str, str]] = {}
    licence: ClassVar[str] = ""
    #: the published checkpoints (the first the family's own example)
    checkpoints: ClassVar[tuple[Checkpoint, ...]] = ()
    #: packages the engine's Python must have at these versions for this family; the image's
    #: build installs those of MODEL_NAME's family (`builder/engine_pins.py`)
    engine_pins: ClassVar[tuple[str, ...]] = ()
    #: vLLM releases the family's makers say break it, with what they say
    broken_vllm: ClassVar[dict[str, str]] = {}
    #: `START_MODE=auto`'s mode for it: `fast` where the GPU check found torch.compile gave its
    #: pages no pace (its start without it about half as long), else `throughput`
    start_mode: ClassVar[StartMode] = StartMode.THROUGHPUT
    #: vLLM's API servers for it where they start beside the engine (vLLM 0.32 on): a count the
    #: GPU check found more API servers add no pages a second to; None: one per megapixel of
    #: its page budget (`argv.preprocessing_parallelism`)
    api_server_count: ClassVar[int | None] = None

    def __init__(
        self, model_type: str = "", *, model: str = "", max_pixels: int = 1_600_000
    ) -> None:
        """`model_type` from its config.json ("" when there is none to read), `model` its
        name, `max_pixels` the worker's MAX_PIXELS: a family whose checkpoints differ tells
        them apart by these."""
        self.model_type = model_type
        self.model = model.lower()
        self.max_pixels = max_pixels

    @classmethod
    def variants(cls) -> dict[str, Family]:
        """The family as each kind of its checkpoints is served, for the docs' tables; one
        unless its checkpoints differ (their sizes in the key)."""
        return {"": cls()}

    # --- pages and requests -----------------------------------------------------------------

    def budget(self, max_pixels: int) -> Budget:
        """How its pages are rendered; `max_pixels` is the worker's MAX_PIXELS."""
        return Budget(max_pixels, grid=self.grid)

    @property
    def grid(self) -> int | None:
        """The grid its server's processor puts every image on (a Qwen2-VL-style processor
        rounds both sides to whole `patch` cells and resamples the image to them); None for a
        processor that does not. A page drawn on it reaches the vision tower as drawn, and the
        processor, which vLLM's API server runs on one thread a page, skips the resampling
        (about a tenth of its CPU a page at 2,048 px: `vlm-ocr-lab bench --front-end`)."""
        return self.patch

    def image_tokens(self, width: int, height: int, max_pixels: int) -> int:
        """The tokens its server's processor spends on a page of width × height pixels: a
        Qwen2-VL-style processor puts it on its grid within `max_pixels`, a token a cell."""
        w, h = smart_resize(width, height, self.patch, MIN_PIXELS, max_pixels)
        return (w * h) // (self.patch * self.patch)

    def limit_mm_per_prompt(self) -> dict[str, int]:
        return {"image": 1, "video": 0}

    def processor_kwargs(self, max_pixels: int) -> dict[str, Any] | None:
        """`--mm-processor-kwargs`, or None to leave the model's processor as it ships."""
        return {"max_pixels": max_pixels}

    def serve_args(self) -> list[str]:
        """Flags of its makers' `vllm serve` line beyond the worker's own."""
        if self.thinks:
            return ["--default-chat-template-kwargs", json.dumps({"enable_thinking": False})]
        return []

    def content(self, image_url: str, prompt: Prompt) -> list[dict[str, Any]]:
        """The user message's content: the page, then the prompt."""
        return [
            {"type": "image_url", "image_url": {"url": image_url}},
            {"type": "text", "text": prompt.text},
        ]

    def batched_tokens(self, vllm_release: tuple[int, int]) -> int:
        """`--max-num-batched-tokens` when `MAX_NUM_BATCHED_TOKENS` is 0: the tokens one engine
        step takes in (prompt chunks, and the image encoder's input with them), on the engine's
        vLLM (major, minor)."""
        return BATCHED_TOKENS

    # --- answers ----------------------------------------------------------------------------

    def parse(self, answer: str, prompt: Prompt, page: Page) -> Reading:
        return Reading(answer.strip())

    def placed(self, raw: list[RawBlock], page: Page) -> Placed:
        return place(raw, self.labels, width=page.width, height=page.height, pdf_size=page.pdf_size)

    def text_of(self, blocks: tuple[Block, ...], headers_footers: HeadersFooters = "drop") -> str:
        return markdown(blocks, headers_footers)

    def describe(self) -> dict[str, Any]:
        """For the engine facts."""
        return {
            "family": self.name,
            "family_version": self.version,
            "prompt": self.prompt.name if self.prompt else "per job",
            "blocks": "with boxes" if self.boxes else "none (the model gives no boxes)",
            "thinking": "off" if self.thinks else "the model does not think",
        }


def smart_resize(
    width: int, height: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """The size the Qwen-VL processor turns an image into (both sides on its grid, the area
    within its bounds): what Qwen2.5-VL's pixel boxes and dots.ocr's boxes refer to."""
    w = max(factor, round(width / factor) * factor)
    h = max(factor, round(height / factor) * factor)
    if w * h > max_pixels:
        beta = math.sqrt(width * height / max_pixels)
        w = max(factor, math.floor(width / beta / factor) * factor)
        h = max(factor, math.floor(height / beta / factor) * factor)
    elif w * h < min_pixels:
        beta = math.sqrt(min_pixels / (width * height))
        w = math.ceil(width * beta / factor) * factor
        h = math.ceil(height * beta / factor) * factor
    return w, h


def from_grid(
    box: tuple[float, ...] | None, page: Page, scale: float = 1000
) -> tuple[float, ...] | None:
    """A box on a 0-`scale` grid (Chandra, Qwen3-VL) in the page's pixels."""
    if box is None:
        return None
    sx, sy = page.width / scale, page.height / scale
    return (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)
