"""The engine protocol and the typed values that cross it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..prompts import Prompt
from ..render import PageImage


@dataclass
class Recognition:
    """One page's text and how it was produced.

    `ok` is False when the page ended badly on every attempt (length, repetition); `text` then
    holds the best partial text, which the pipeline stores apart from good pages.
    """

    text: str
    ok: bool = True
    finish_reason: str | None = None
    attempts: int = 1
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    seconds: float = 0.0
    problem: str | None = None


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


class Engine(Protocol):
    facts: EngineFacts
    #: pages the engine should have in flight at once, across all jobs
    default_concurrency: int

    async def start(self, warmup: PageImage) -> None:
        """Start (or connect) and recognize `warmup` once; raise if the answer is not right."""
        ...

    async def recognize(self, page: PageImage, prompt: Prompt) -> Recognition: ...

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
