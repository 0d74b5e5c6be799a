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
from typing import Any, Protocol

from ..errors import ConfigError, EngineError
from ..prompts import PRESETS, Prompt
from ..render import PageImage
from ..settings import Settings
from .base import EngineFacts, Recognition
from .chat_client import REPETITION_DETECTION, ChatClient, Completion, strip_think
from .vllm_server import gpu_name

log = logging.getLogger(__name__)

# Greedy first; then olmOCR's ladder, so a looping page gets out of its loop.
TEMPERATURES = (0.0, 0.1, 0.1, 0.2, 0.3, 0.5, 0.8)
RETRY_REASONS = {"length", "repetition"}


def as_valid_json(text: str, schema: dict[str, Any]) -> tuple[str, str | None]:
    """The answer as indented JSON when it parses and validates against `schema`; else the
    text as it came and the first reason it does not."""
    from jsonschema import Draft202012Validator

    try:
        value = json.loads(text)
    except ValueError as exc:
        return text, f"not JSON ({exc})"
    error = next(iter(Draft202012Validator(schema).iter_errors(value)), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the top level"
        return text, f"at {where}: {error.message[:200]}"
    return json.dumps(value, ensure_ascii=False, indent=2), None


# The warm-up proves the whole path with a real page; a few tokens of answer are enough for that.
WARMUP_MAX_TOKENS = 32


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


class ServerHandle(Protocol):
    """The OpenAI-compatible server behind the engine: spawned here, or running elsewhere."""

    name: str
    base_url: str
    failure: str | None

    async def start(self) -> dict[str, Any]:
        """Make the server ready; returns facts about it for the engine facts."""
        ...

    async def gone_after_error(self) -> bool:
        """After a failed request: is the server gone for good?"""
        ...

    def log_tail(self, lines: int = 20) -> str: ...

    def terminate(self) -> None:
        """Stop at once, synchronously (from a signal handler)."""
        ...

    async def stop(self) -> None: ...


class ExternalServer:
    """A server this worker does not own (`ENGINE=openai`): never started, stopped or watched."""

    name = "openai"
    failure = None

    def __init__(self, settings: Settings) -> None:
        if not settings.openai_base_url:
            raise ValueError("ENGINE=openai needs OPENAI_BASE_URL (the server's base URL)")
        self.base_url = settings.openai_base_url

    async def start(self) -> dict[str, Any]:
        return {}

    async def gone_after_error(self) -> bool:
        return False

    def log_tail(self, lines: int = 20) -> str:
        return "(the server runs elsewhere; see its own log)"

    def terminate(self) -> None:
        pass

    async def stop(self) -> None:
        pass


class VlmEngine:
    def __init__(
        self, settings: Settings, server: ServerHandle, *, fixed_output_tokens: int | None = None
    ) -> None:
        """`fixed_output_tokens`: every answer exactly that long (`ignore_eos`), for benchmarks
        on dummy weights."""
        self.settings = settings
        self.server = server
        self.fixed_output_tokens = fixed_output_tokens
        self.model = settings.served_model_name
        self.default_concurrency = settings.max_num_seqs
        own = server.name == "vllm"
        self.baked = baked_record(settings) if own else None
        self.facts = EngineFacts(
            name=server.name,
            version="unknown",
            model=settings.model_name if own else settings.served_model_name,
            revision=self._revision(),
            json_output=True,
        )
        self.client: ChatClient | None = None

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def failure(self) -> str | None:
        return self.server.failure

    def temperatures(self) -> tuple[float, ...]:
        n = self.settings.max_attempts
        return (TEMPERATURES + (TEMPERATURES[-1],) * n)[:n]

    def check_model(self) -> None:
        """In an image that baked one model and may not download (HF_HUB_OFFLINE), another
        MODEL_NAME cannot start: say so in one line instead of letting the server fail."""
        s, baked = self.settings, self.baked
        if not baked or not s.hf_hub_offline or Path(s.model_name).is_dir():
            return
        if baked.get("repo") != s.model_name:
            raise ConfigError(
                f"MODEL_NAME is {s.model_name!r}, but this image has {baked.get('repo')!r} baked "
                "in and does not download models at run time; set MODEL_NAME to "
                f"{baked.get('repo')!r}, or deploy an image built with "
                f"--build-arg MODEL_NAME={s.model_name}"
            )

    async def start(self, warmup: PageImage) -> None:
        self.check_model()
        details: dict[str, Any] = {"gpu": await asyncio.to_thread(gpu_name)}
        server_facts = await self.server.start()
        self.client = ChatClient(
            self.base_url,
            self.model,
            api_key=self.settings.openai_api_key,
            timeout_s=self.settings.request_timeout_s,
            max_connections=self.settings.max_concurrent_pages or self.settings.max_num_seqs,
        )
        t0 = time.perf_counter()
        try:
            answer = await self.ask(
                warmup.png,
                PRESETS[self.settings.default_prompt],
                0.0,
                max_tokens=WARMUP_MAX_TOKENS,
            )
        except EngineError as exc:
            tail = self.server.log_tail()
            raise EngineError(
                f"warm-up page failed: {exc}\nlast engine log lines:\n{tail}", fatal=True
            ) from None
        if not answer.output_tokens:
            raise EngineError("warm-up page came back with no output tokens", fatal=True)
        details["warmup_s"] = round(time.perf_counter() - t0, 2)
        details["warmup_finish_reason"] = answer.finish_reason
        details["warmup_prompt_tokens"] = answer.prompt_tokens
        if server_facts:
            self.facts.version = server_facts.pop("vllm_version", None) or "unknown"
            server_facts.setdefault(
                "gdn_prefill_kernel", "not logged (the model has no GDN layers)"
            )
            details |= server_facts
        if self.baked is not None:
            details["baked"] = self.baked
        self.facts.details = details

    def _revision(self) -> str | None:
        """The weights' revision: the commit the image baked when it baked this model (a
        re-baked image never reuses text read by older weights), else MODEL_REVISION."""
        baked = self.baked or {}
        if baked.get("repo") == self.settings.model_name and baked.get("resolved_commit"):
            return str(baked["resolved_commit"])
        return self.settings.model_revision

    async def ask(
        self,
        png: bytes,
        prompt: Prompt,
        temperature: float,
        seed: int = 0,
        *,
        max_tokens: int | None = None,
    ) -> Completion:
        """One request for one page; a fatal EngineError when the server is gone."""
        assert self.client is not None, "the engine was not started"
        fixed = self.fixed_output_tokens
        body = ChatClient.request_body(
            self.model,
            png,
            prompt.text,
            temperature=temperature,
            max_tokens=max_tokens or fixed or self.settings.max_tokens,
            seed=seed,
            ignore_eos=bool(fixed) and max_tokens is None,
            schema=prompt.schema,
        )
        try:
            return await self.client.complete(body)
        except EngineError as exc:
            if await self.server.gone_after_error():
                raise EngineError(str(self.server.failure or exc), fatal=True) from None
            raise

    async def recognize(self, page: PageImage, prompt: Prompt) -> Recognition:
        """Ask, and ask again at a higher temperature while the answer stops by length or
        repetition, or (with a schema) does not validate; the best text when none is good."""
        if self.failure:
            raise EngineError(self.failure, fatal=True)
        t0 = time.perf_counter()
        best, reason, why = "", None, ""
        output_tokens = 0
        prompt_tokens = None
        temps = self.temperatures()
        for attempt, temperature in enumerate(temps, 1):
            answer = await self.ask(page.png, prompt, temperature, seed=attempt)
            text = strip_think(answer.text)
            output_tokens += answer.output_tokens or 0
            prompt_tokens = answer.prompt_tokens
            reason = answer.finish_reason
            expected = reason == "length" and self.fixed_output_tokens  # the bench asked for it
            invalid = None
            if prompt.schema is not None and reason not in RETRY_REASONS:
                text, invalid = as_valid_json(text, prompt.schema)
            if (reason not in RETRY_REASONS and invalid is None) or expected:
                return Recognition(
                    text=text,
                    finish_reason=reason,
                    attempts=attempt,
                    prompt_tokens=prompt_tokens,
                    output_tokens=output_tokens,
                    seconds=time.perf_counter() - t0,
                )
            why = f"invalid JSON for json_schema ({invalid})" if invalid else f"stopped by {reason}"
            if len(text) > len(best):
                best = text
            log.info(
                "page %s at temperature %.1f; attempt %d/%d", why, temperature, attempt, len(temps)
            )
        return Recognition(
            text=best,
            ok=False,
            finish_reason=reason,
            attempts=len(temps),
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            seconds=time.perf_counter() - t0,
            problem=f"{why} on all {len(temps)} attempts "
            f"(temperatures {', '.join(f'{t:g}' for t in temps)}; "
            f"MAX_TOKENS {self.settings.max_tokens})",
        )

    def fingerprint(self, prompt: Prompt) -> dict[str, Any]:
        return {
            "engine": self.facts.name,
            "model": self.facts.model,
            "revision": self.facts.revision,
            "prompt": prompt.name,
            "prompt_version": prompt.version,
            "sampling": {
                "temperatures": list(self.temperatures()),
                "max_tokens": self.settings.max_tokens,
                "repetition_detection": REPETITION_DETECTION,
                "thinking": False,
                "seed": "attempt number",
                **(
                    {"fixed_output_tokens": self.fixed_output_tokens}
                    if self.fixed_output_tokens
                    else {}
                ),
            },
        }

    def terminate(self) -> None:
        self.server.terminate()

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        await self.server.stop()
