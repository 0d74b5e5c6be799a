"""The engine protocol and the typed values that cross it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..images import Budget, PageImage
from ..prompts import Prompt
from .reading import Reading

if TYPE_CHECKING:
    from .families import Family


@dataclass
class Recognition:
    """One page's text and how it was produced.

    `ok` is False when the page ended badly on every attempt (length, repetition, an answer not
    in the model's format); `text` then holds the best partial text, which the pipeline stores
    apart from good pages, unless `fallback` allows a PDF page's own text layer instead.
    `reading` is the answer as the model's family read it: its blocks, flags and hints.
    """

    text: str
    ok: bool = True
    finish_reason: str | None = None
    attempts: int = 1
    #: requests sent: one per attempt, plus one for each transport failure (0: no server asked)
    tries: int = 0
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    seconds: float = 0.0
    problem: str | None = None
    reading: Reading | None = None
    fallback: bool = False


@dataclass
class EngineFacts:
    """What a user needs to tell one worker's engine from another's; in every job result."""

    name: str
    version: str
    model: str | None = None
    revision: str | None = None
    uses_prompt: bool = True
    #: answers JSON of a job's schema (guided decoding); the CPU engine cannot
    json_output: bool = False
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineOptions:
    """Ways to run an engine other than its production defaults, for measuring and comparing."""

    #: every answer exactly this many tokens (`ignore_eos`), taken as it comes on the first
    #: attempt: like-for-like throughput figures on dummy weights, whose text is noise
    exact_output_tokens: int | None = None
    #: a greedy attempt (temperature 0) sent at this temperature instead, without top-p: on
    #: dummy weights a greedy answer repeats the prompt's last token (a special token or a
    #: newline: no text, and a skipped token costs the API servers' detokenizer at every step);
    #: sampled, the stand-in writes text as a trained model does, for a fraction of a
    #: millisecond a step
    greedy_temperature: float | None = None
    #: the CPU engine joins lines in the order its detector found them, not in reading order:
    #: the baseline `vlm-ocr-lab eval --detection-order` measures the reading order against
    detection_order: bool = False


class Engine(Protocol):
    """What the worker asks of an engine: its facts, its size, its model's family, and pages
    read one request at a time."""

    facts: EngineFacts
    #: the model's family (how its pages are sized, prompted and read); None for an engine
    #: that reads without one (the CPU engine), whose blocks are then its own
    family: Family | None
    #: pages the engine should have in flight at once, across all jobs (all its replicas')
    default_concurrency: int
    #: engine replicas behind it (data parallel); the jobs a worker takes scale with them
    replicas: int

    async def start(self, warmup: PageImage) -> None:
        """Start (or connect) and recognize `warmup` once; raise if the answer is not right."""
        ...

    async def recognize(self, page: PageImage, prompt: Prompt) -> Recognition: ...

    def budget(self, max_pixels: int) -> Budget:
        """How pages are rendered for this engine's model (`max_pixels`: MAX_PIXELS)."""
        ...

    def prompt_for(
        self, preset: str | None, custom: str | None, schema: dict[str, Any] | None
    ) -> Prompt:
        """The prompt a job's pages are read with, or InputError naming the field when the
        model takes none of the kind the job asks for."""
        ...

    def fingerprint(self, prompt: Prompt) -> dict[str, Any]:
        """Everything that decides the text for a given image: stored results are reused only
        when this matches."""
        ...

    @property
    def failure(self) -> str | None:
        """Set when the engine is gone for good (crashed server); the worker must be replaced."""
        ...

    def terminate(self) -> None:
        """Stop any child process at once, synchronously (the worker got SIGTERM)."""
        ...

    async def close(self) -> None: ...
