"""The GPU engine: a vision-language model behind an OpenAI-compatible server.

`ENGINE=vllm` starts the server as a child process (`vllm_server`); `ENGINE=openai` talks to one
that runs elsewhere (a shared vLLM deployment). Both send each page as one chat request and retry
a page that stops by length or repetition with a rising temperature.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

from ..errors import EngineError
from ..prompts import PRESETS, Prompt
from ..render import PageImage
from ..settings import Settings
from .base import EngineFacts, Recognition
from .chat_client import REPETITION_DETECTION, ChatClient, Completion, strip_think
from .vllm_server import VllmServer, gpu_name

log = logging.getLogger(__name__)

# Greedy first; then olmOCR's ladder, so a looping page gets out of its loop.
TEMPERATURES = (0.0, 0.1, 0.1, 0.2, 0.3, 0.5, 0.8)
RETRY_REASONS = {"length", "repetition"}


def baked_record(settings: Settings) -> dict[str, Any] | None:
    """What the image build baked (builder/download_model.py), without the file list."""
    if not settings.hf_home:
        return None
    path = Path(settings.hf_home) / "baked-model.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return {k: doc.get(k) for k in ("repo", "revision", "resolved_commit", "bytes", "baked_at")}


class VlmEngine:
    def __init__(self, settings: Settings, server: VllmServer | None) -> None:
        if server is None and not settings.openai_base_url:
            raise ValueError("ENGINE=openai needs OPENAI_BASE_URL (the server's base URL)")
        self.settings = settings
        self.server = server
        self.base_url = server.base_url if server else str(settings.openai_base_url)
        self.model = settings.served_model_name
        self.default_concurrency = settings.max_num_seqs
        self.facts = EngineFacts(
            name="vllm" if server else "openai",
            version="unknown",
            model=settings.model_name if server else settings.served_model_name,
            revision=settings.model_revision,
        )
        self.client: ChatClient | None = None

    @property
    def failure(self) -> str | None:
        return self.server.failure if self.server else None

    def temperatures(self) -> tuple[float, ...]:
        n = self.settings.max_attempts
        return (TEMPERATURES + (TEMPERATURES[-1],) * n)[:n]

    async def start(self, warmup: PageImage) -> None:
        details: dict[str, Any] = {"gpu": await asyncio.to_thread(gpu_name)}
        if self.server is not None:
            details["spawn_to_healthy_s"] = round(await self.server.start(), 2)
        self.client = ChatClient(
            self.base_url,
            self.model,
            api_key=self.settings.openai_api_key,
            timeout_s=self.settings.request_timeout_s,
            max_connections=self.settings.max_concurrent_pages or self.settings.max_num_seqs,
        )
        t0 = time.perf_counter()
        try:
            png = await asyncio.to_thread(warmup.png)
            answer = await self._ask(png, PRESETS[self.settings.default_prompt], 0.0)
        except EngineError as exc:
            tail = f"\nlast engine log lines:\n{self.server.log_tail()}" if self.server else ""
            raise EngineError(f"warm-up page failed: {exc}{tail}", fatal=True) from None
        if not answer.output_tokens:
            raise EngineError("warm-up page came back with no output tokens", fatal=True)
        details["warmup_s"] = round(time.perf_counter() - t0, 2)
        details["warmup_finish_reason"] = answer.finish_reason
        details["warmup_prompt_tokens"] = answer.prompt_tokens
        if self.server is not None:
            facts = dict(self.server.facts)
            self.facts.version = facts.pop("vllm_version", None) or "unknown"
            facts.setdefault("gdn_prefill_kernel", "not logged (the model has no GDN layers)")
            details |= facts
            details["argv"] = self.server.argv[1:]
        details["kv_cache_dtype"] = self.settings.kv_cache_dtype
        baked = baked_record(self.settings)
        if baked is not None:
            details["baked"] = baked
            self.facts.revision = self.facts.revision or baked.get("resolved_commit")
        self.facts.details = details

    async def _ask(
        self, png: bytes, prompt: Prompt, temperature: float, seed: int = 0
    ) -> Completion:
        assert self.client is not None, "the engine was not started"
        body = ChatClient.request_body(
            self.model,
            png,
            prompt.text,
            temperature=temperature,
            max_tokens=self.settings.max_tokens,
            seed=seed,
        )
        try:
            return await self.client.complete(body)
        except EngineError as exc:
            if self.server is not None and await self._server_died():
                raise EngineError(str(self.server.failure or exc), fatal=True) from None
            raise

    async def _server_died(self) -> bool:
        """After a failed request: did the server process go away (give it a moment to exit)?"""
        assert self.server is not None and self.server.proc is not None
        if self.server.failure:
            return True
        try:
            await asyncio.wait_for(asyncio.shield(self.server.proc.wait()), 3)
        except TimeoutError:
            return False
        await asyncio.sleep(0.1)  # let the watcher record why
        return True

    async def recognize(self, page: PageImage, prompt: Prompt) -> Recognition:
        if self.failure:
            raise EngineError(self.failure, fatal=True)
        t0 = time.perf_counter()
        best, reason = "", None
        output_tokens = 0
        prompt_tokens = None
        temps = self.temperatures()
        png = await asyncio.to_thread(page.png)  # once, however many attempts
        for attempt, temperature in enumerate(temps, 1):
            answer = await self._ask(png, prompt, temperature, seed=attempt)
            text = strip_think(answer.text)
            output_tokens += answer.output_tokens or 0
            prompt_tokens = answer.prompt_tokens
            reason = answer.finish_reason
            if reason not in RETRY_REASONS:
                return Recognition(
                    text=text,
                    finish_reason=reason,
                    attempts=attempt,
                    prompt_tokens=prompt_tokens,
                    output_tokens=output_tokens,
                    seconds=time.perf_counter() - t0,
                )
            if len(text) > len(best):
                best = text
            log.info(
                "page stopped by %s at temperature %.1f; attempt %d/%d",
                reason,
                temperature,
                attempt,
                len(temps),
            )
        return Recognition(
            text=best,
            ok=False,
            finish_reason=reason,
            attempts=len(temps),
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            seconds=time.perf_counter() - t0,
            problem=f"stopped by {reason} on all {len(temps)} attempts "
            f"(temperatures {', '.join(f'{t:g}' for t in temps)}; "
            f"MAX_TOKENS {self.settings.max_tokens})",
        )

    def fingerprint(self, prompt: Prompt) -> dict[str, Any]:
        return {
            "engine": self.facts.name,
            "model": self.facts.model,
            "revision": self.settings.model_revision,
            "prompt": prompt.name,
            "prompt_version": prompt.version,
            "sampling": {
                "temperatures": list(self.temperatures()),
                "max_tokens": self.settings.max_tokens,
                "repetition_detection": REPETITION_DETECTION,
                "thinking": False,
                "seed": "attempt number",
            },
        }

    async def bench_direct(
        self, pages: list[PageImage], prompt: Prompt, concurrency: int
    ) -> dict[str, Any]:
        """The same pages straight to the server, same concurrency, first attempt only: the
        baseline that shows the worker's overhead."""
        gate = asyncio.Semaphore(concurrency)
        latencies: list[float] = []

        async def one(page: PageImage) -> None:
            async with gate:
                t0 = time.perf_counter()
                await self._ask(await asyncio.to_thread(page.png), prompt, 0.0)
                latencies.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(one(p) for p in pages))
        wall = time.perf_counter() - t0
        return {
            "pages": len(pages),
            "wall_s": wall,
            "pages_per_s": len(pages) / wall,
            "latencies": latencies,
        }

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        if self.server is not None:
            await self.server.stop()
