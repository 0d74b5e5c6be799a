"""What a model family is: how its makers size its pages, prompt it, sample it, serve it, and
read its answers. One subclass per family; nothing else in the worker knows a family by name.

A family's `parse` turns an answer into a `Reading` (Markdown text, the flags the model gives,
its blocks with boxes in page pixels) or raises `AnswerError` with the reason, which sends the
page up the family's attempt ladder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ...blocks import Block, HeadersFooters, Placed, RawBlock, markdown, place
from ...images import Budget
from ...prompts import Prompt


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
class Reading:
    """A page as its family read it."""

    text: str
    blocks: tuple[Block, ...] = ()
    language: str | None = None
    #: the clockwise turn the page needs before it reads right (the model said so)
    turn: int | None = None
    flags: dict[str, bool] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: the blocks' kinds are the model's; False for blocks that are only grouped lines
    labelled: bool = True
    #: the document's pass for repeated lines (`running_heads`) looks at the page too, as at
    #: pages whose blocks have no kinds: a model that may miss some headers and footers
    across_pages: bool = False


@dataclass(frozen=True)
class Page:
    """What a parser knows of the page it reads: its size as rendered, and in PDF points."""

    width: int
    height: int
    pdf_size: tuple[float, float] | None = None


class Family:
    """The Qwen chat default's behaviour; families override what their makers do differently."""

    name: ClassVar[str]
    version: ClassVar[str]
    title: ClassVar[str]
    #: `architectures` of the model's config.json this family reads
    architectures: ClassVar[frozenset[str]] = frozenset()
    #: lower-case parts of a model's name that tell this family from others of its architecture
    name_hints: ClassVar[tuple[str, ...]] = ()
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

    def __init__(self, model_type: str = "") -> None:
        self.model_type = model_type

    # --- pages and requests -----------------------------------------------------------------

    def budget(self, max_pixels: int) -> Budget:
        """How its pages are rendered; `max_pixels` is the worker's MAX_PIXELS."""
        return Budget(max_pixels)

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


def from_grid(
    box: tuple[float, ...] | None, page: Page, scale: float = 1000
) -> tuple[float, ...] | None:
    """A box on a 0-`scale` grid (Chandra, Qwen3-VL) in the page's pixels."""
    if box is None:
        return None
    sx, sy = page.width / scale, page.height / scale
    return (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)
