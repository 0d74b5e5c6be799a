"""One configurable fake engine and an in-memory store, for tests and the memory benchmark.

`FakeEngine` answers each page from a script, or with a text made from the page, or by asking a
real engine it wraps (counting the calls). A script step is a text (a good answer), a
`Recognition` (any outcome), an exception (raised; a fatal `EngineError` marks the engine
gone from then on, as a crashed server would), or None (the engine it wraps answers that
page). `hold(n)` keeps the n-th request waiting until `release()`, so a test can order events
without a clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from vlm_ocr.engines.base import Engine, EngineFacts, Recognition
from vlm_ocr.errors import EngineError, StorageError
from vlm_ocr.images import Budget, PageImage
from vlm_ocr.prompts import Prompt, resolve
from vlm_ocr.storage import PageRecord

Step = str | Recognition | Exception | None
Answer = Callable[[PageImage, Prompt], Step]


def page_text(page: PageImage, prompt: Prompt) -> str:
    """The default answer: a text that differs page by page."""
    return f"text of {page.sha256[:8]}"


class FakeEngine:
    def __init__(
        self,
        script: Iterable[Step] | Answer | None = None,
        *,
        wraps: Engine | None = None,
        name: str = "fake",
        concurrency: int = 1,
        json_output: bool = False,
        uses_prompt: bool = True,
    ) -> None:
        self.inner = wraps
        self._answer: Answer | None = script if callable(script) else None
        self._script: list[Step] | None = (
            None if script is None or callable(script) else list(script)
        )
        self.facts = (
            wraps.facts
            if wraps is not None
            else EngineFacts(
                name=name, version="1", uses_prompt=uses_prompt, json_output=json_output
            )
        )
        self.family = wraps.family if wraps is not None else None
        self.default_concurrency = concurrency
        self.replicas = 1
        self.failure: str | None = None
        self.calls = 0
        self.prompts: list[Prompt] = []
        self._held: dict[int, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def hold(self, call: int) -> None:
        """Keep the `call`-th request (1-based) waiting until `release()`."""
        self._held[call] = asyncio.Event()

    def release(self) -> None:
        """Let held requests go; safe from any thread."""
        for event in self._held.values():
            if self._loop is not None:
                self._loop.call_soon_threadsafe(event.set)
            else:
                event.set()

    async def start(self, warmup: PageImage) -> None:
        self._loop = asyncio.get_running_loop()

    async def recognize(self, page: PageImage, prompt: Prompt) -> Recognition:
        self._loop = asyncio.get_running_loop()
        self.calls += 1
        self.prompts.append(prompt)
        if self.failure:
            raise EngineError(self.failure, fatal=True)
        held = self._held.get(self.calls)
        if held is not None:
            await held.wait()
        scripted = self._script is not None or self._answer is not None
        step = self._next(page, prompt) if scripted or self.inner is None else None
        if step is None and self.inner is not None:
            return await self.inner.recognize(page, prompt)
        if isinstance(step, EngineError) and step.fatal:
            self.failure = str(step)
        if isinstance(step, Exception):
            raise step
        if isinstance(step, Recognition):
            return step
        if step is None:
            raise AssertionError("a None step asks the engine FakeEngine wraps, and it wraps none")
        return Recognition(step, finish_reason="stop")

    def _next(self, page: PageImage, prompt: Prompt) -> Step:
        if self._script is not None:
            return self._script.pop(0)
        return (self._answer or page_text)(page, prompt)

    def budget(self, max_pixels: int) -> Budget:
        return self.inner.budget(max_pixels) if self.inner is not None else Budget(max_pixels)

    def prompt_for(
        self, preset: str | None, custom: str | None, schema: dict[str, Any] | None
    ) -> Prompt:
        return resolve(preset, custom, "markdown", schema)

    def fingerprint(self, prompt: Prompt) -> dict[str, Any]:
        base = (
            self.inner.fingerprint(prompt)
            if self.inner is not None
            else {"engine": self.facts.name}
        )
        # as the GPU engine's: another prompt is another text
        return base | {"prompt": prompt.name, "prompt_version": prompt.version}

    def terminate(self) -> None:
        pass

    async def close(self) -> None:
        pass


class MemoryStore:
    """Objects in a dict; a put whose key ends with one of `fail` raises StorageError."""

    kind = "memory"
    key_prefix = ""

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.objects: dict[str, bytes] = {}
        self.records: dict[str, PageRecord] = {}
        self.fail = fail

    def uri(self, key: str) -> str:
        return f"memory://{key}"

    def taken(self, prefix: str) -> str | None:
        return None

    async def put(
        self, key: str, data: bytes, content_type: str, record: PageRecord | None = None
    ) -> None:
        if key.endswith(self.fail):
            raise StorageError(f"PUT {key}: injected failure")
        self.objects[key] = data
        if record is not None:
            self.records[key] = record

    async def record(self, key: str) -> PageRecord | None:
        return self.records.get(key)

    async def read_text(self, key: str) -> str:
        return self.objects[key].decode()

    async def presign(self, key: str) -> str | None:
        return None

    async def delete(self, key: str) -> None:
        self.objects.pop(key, None)
