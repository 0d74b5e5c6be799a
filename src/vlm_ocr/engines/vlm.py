"""The GPU engine: a vision-language model behind an OpenAI-compatible server.

`ENGINE=vllm` starts the server as a child process (`vllm/server.py`); `ENGINE=openai` talks to
one that runs elsewhere (a shared vLLM deployment). The model's family (`families/`) says how a
page is asked for and how its answer is read; this engine sends each page as one chat request
and climbs the family's attempt ladder while an answer stops by length or repetition, is not in
the family's format, or (with a job's schema) does not validate.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError, EngineError, InputError, TransportError
from ..images import Budget, PageImage
from ..prompts import PRESETS, Prompt, resolve
from ..settings import ModelSettings, VlmSettings
from .base import EngineFacts, EngineOptions, Recognition
from .chat_client import NO_ANSWER, REPETITION_DETECTION, ChatClient, Completion, strip_think
from .families import FAMILIES, AnswerError, Attempt, Family, Page, Reading
from .gpu import GpuFacts
from .model_files import ModelFiles

if TYPE_CHECKING:
    from .vllm.server import StartFacts

log = logging.getLogger(__name__)

RETRY_REASONS = {"length", "repetition"}
# The warm-up proves the whole path with a real page; a few tokens of answer are enough for that.
WARMUP_MAX_TOKENS = 32
# The first wait before a request is sent again after a transport failure; it doubles each time,
# jittered so that pages a dropped batch of connections lost are not all sent in one burst.
RETRY_BACKOFF_S = 0.5
# Pages kept waiting in the server's own queue beyond what it batches, a share of it: a sequence
# that ends is replaced at the next step by a page already decoded and preprocessed, not after a
# round trip through the worker, HTTP and the server's image preprocessing (with exactly the
# batch in flight, vLLM's waiting queue is always empty and every page in its front end is a
# batch slot left idle). A page's request time includes its wait there.
QUEUED_AHEAD = 0.25


def pages_in_flight(concurrency: int) -> int:
    """Pages the worker keeps at a server that batches `concurrency`: that many and a queue."""
    return concurrency + math.ceil(concurrency * QUEUED_AHEAD)


def backoff_s(retry: int) -> float:
    """The wait before the `retry`-th retry of a request (1-based): 0.5, 1, 2, ... s ± 50 %."""
    return RETRY_BACKOFF_S * 2 ** (retry - 1) * random.uniform(0.5, 1.5)


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


class ServerHandle(Protocol):
    """The OpenAI-compatible server behind the engine: spawned here, or running elsewhere."""

    name: str
    base_url: str
    failure: str | None
    #: the worker started it: its model is the worker's own and its log the worker's to show
    owned: bool

    async def start(self) -> StartFacts | None:
        """Make the server ready; returns facts about its start (None: nothing was started)."""
        ...

    async def ready(self) -> dict[str, Any] | None:
        """The engine served its warm-up page; returns the compile caches' state it settled
        (None: no caches of its own)."""
        ...

    async def gone_after_error(self) -> bool:
        """After a failed request: is the server gone for good?"""
        ...

    def log_tail(self, lines: int = 20) -> str: ...

    def warmup_failure(self, exc: EngineError) -> EngineError:
        """The warm-up page's failure in a user's words: what to look at, or to set."""
        ...

    def terminate(self) -> None:
        """Stop at once, synchronously (from a signal handler)."""
        ...

    async def stop(self) -> None: ...


class ExternalServer:
    """A server this worker does not own (`ENGINE=openai`): never started, stopped or watched."""

    name = "openai"
    failure = None
    owned = False

    def __init__(self, base_url: str | None) -> None:
        if not base_url:
            raise ConfigError("ENGINE=openai needs OPENAI_BASE_URL (the server's base URL)")
        self.base_url = base_url

    async def start(self) -> StartFacts | None:
        return None

    async def ready(self) -> dict[str, Any] | None:
        return None

    async def gone_after_error(self) -> bool:
        return False

    def log_tail(self, lines: int = 20) -> str:
        return "(the server runs elsewhere; see its own log)"

    def warmup_failure(self, exc: EngineError) -> EngineError:
        """By the setting that names the server, for its log is not ours."""
        where = f"the server at OPENAI_BASE_URL={self.base_url} (ENGINE=openai)"
        if not str(exc).startswith(NO_ANSWER):  # it answered: its own word on the page
            return EngineError(f"warm-up page failed: {where} failed it: {exc}", fatal=True)
        cause = str(exc).removeprefix(f"{NO_ANSWER}: ").removesuffix(f" ({exc.tries} tries)")
        return EngineError(
            f"warm-up page failed: {where} did not answer ({cause}; {exc.tries} tries); start "
            "that server, or set OPENAI_BASE_URL to the base URL of the OpenAI-compatible server "
            "that runs the model",
            fatal=True,
        )

    def terminate(self) -> None:
        pass

    async def stop(self) -> None:
        pass


class VlmEngine:
    """Pages as chat requests to the server; `concurrency` is how many pages the server
    batches (its `--max-num-seqs`)."""

    def __init__(
        self,
        vlm: VlmSettings,
        model: ModelSettings,
        server: ServerHandle,
        *,
        family: Family,
        concurrency: int,
        replicas: int = 1,
        default_prompt: str = "markdown",
        gpu: GpuFacts | None = None,
        connections: int | None = None,
        options: EngineOptions | None = None,
        facts: dict[str, Any] | None = None,
    ) -> None:
        self.settings = vlm
        self.server = server
        self.model_settings = model
        self.family = family
        self.options = options or EngineOptions()
        self.model = vlm.served_model_name
        self.concurrency = concurrency
        self.default_concurrency = pages_in_flight(concurrency)
        self.replicas = replicas
        self.default_prompt = default_prompt
        self.gpu = gpu or GpuFacts()
        self.connections = connections or self.default_concurrency
        self.attempts = family.sampling.ladder(vlm.max_attempts)
        self.max_tokens = vlm.max_tokens or family.sampling.max_tokens
        own = server.owned
        self.baked = ModelFiles(model).baked() if own else None
        self.facts = EngineFacts(
            name=server.name,
            version="unknown",
            model=model.model_name if own else vlm.served_model_name,
            revision=self._revision(),
            json_output=True,
        )
        self._known = dict(facts or {})  # facts known before start: the family, GDN layers
        self.client: ChatClient | None = None

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def failure(self) -> str | None:
        return self.server.failure

    def budget(self, max_pixels: int) -> Budget:
        return self.family.budget(max_pixels)

    def prompt_for(
        self, preset: str | None, custom: str | None, schema: dict[str, Any] | None
    ) -> Prompt:
        """The prompt a job reads its pages with: the family's own when it has one (a job that
        names another is refused), else the job's preset, its own prompt, or the default."""
        own = self.family.prompt
        if own is None:
            return resolve(preset, custom, self.default_prompt, schema)
        takes = [name for name, family in FAMILIES.items() if family.prompt is None]
        field = (
            "json_schema"
            if schema is not None
            else ("prompt" if preset is not None else "custom_prompt")
        )
        if preset is not None or custom is not None or schema is not None:
            raise InputError(
                f"input.{field}",
                f"this worker's model ({self.facts.model}) is of the {self.family.name} family, "
                f"which reads every page with its own prompt; leave `{field}` out, or run the "
                f"job on a model of a family that takes prompts ({', '.join(takes)})",
            )
        return own

    def check_model(self) -> None:
        """In an image that baked one model and may not download (HF_HUB_OFFLINE), another
        MODEL_NAME cannot start: say so in one line instead of letting the server fail."""
        s, baked = self.model_settings, self.baked
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
        details: dict[str, Any] = {
            "gpu": self.gpu.describe(),
            "compute_capability": self.gpu.capability,
            **self.family.describe(),
            **self._known,
        }
        started = await self.server.start()
        resolved = started and started.downloaded and started.downloaded.get("resolved_commit")
        if resolved and not self.baked:
            # the commit a download at start resolved MODEL_REVISION to keys the stored texts
            self.facts.revision = resolved
        self.client = ChatClient(
            self.base_url,
            self.model,
            api_key=self.settings.openai_api_key,
            timeout_s=self.settings.request_timeout_s,
            max_connections=self.connections,
        )
        prompt = self.family.prompt or PRESETS[self.default_prompt]
        t0 = time.perf_counter()
        try:
            answer = await self.ask(
                warmup.png, prompt, self.attempts[0], max_tokens=WARMUP_MAX_TOKENS
            )
        except EngineError as exc:
            raise self.server.warmup_failure(exc) from None
        if not answer.output_tokens:
            raise EngineError("warm-up page came back with no output tokens", fatal=True)
        if answer.reasoning or "</think>" in answer.text:
            raise EngineError(
                "the warm-up answer carried reasoning although thinking was turned off; check "
                "the model's chat template (it must honour enable_thinking)",
                fatal=True,
            )
        details["warmup_s"] = round(time.perf_counter() - t0, 2)
        details["warmup_finish_reason"] = answer.finish_reason
        details["warmup_prompt_tokens"] = answer.prompt_tokens
        details["thinking_checked"] = "the warm-up answer carried no reasoning"
        caches = await self.server.ready()
        if started is not None:
            self.facts.version = started.vllm_version or "unknown"
            details |= started.as_json()
            details.setdefault(
                "gdn_prefill_kernel",
                "not logged"
                if details.get("gdn_layers")
                else "not logged (the model has no GDN layers)",
            )
            if caches is not None:
                details["caches"] = caches
        if self.baked is not None:
            details["baked"] = self.baked
        self.facts.details = details

    def _revision(self) -> str | None:
        """The weights' revision: the commit the image baked when it baked this model (a
        re-baked image never reuses text read by older weights), else MODEL_REVISION."""
        baked = self.baked or {}
        if baked.get("repo") == self.model_settings.model_name and baked.get("resolved_commit"):
            return str(baked["resolved_commit"])
        return self.model_settings.model_revision

    async def ask(
        self,
        png: bytes,
        prompt: Prompt,
        attempt: Attempt,
        *,
        max_tokens: int | None = None,
    ) -> Completion:
        """One request for one page (sent again after a transport failure); a fatal
        EngineError when the server is gone."""
        exact = self.options.exact_output_tokens
        if attempt.temperature == 0 and self.options.greedy_temperature is not None:
            attempt = Attempt(self.options.greedy_temperature)
        content = self.family.content(ChatClient.image_url(png), prompt)
        body = ChatClient.request_body(
            self.model,
            content,
            temperature=attempt.temperature,
            top_p=attempt.top_p,
            max_tokens=max_tokens or exact or self.max_tokens,
            ignore_eos=bool(exact) and max_tokens is None,
            schema=prompt.schema,
        )
        return await self.send(body)

    async def send(self, body: dict[str, Any]) -> Completion:
        """Send one page's request; send it again after a transport failure while the server
        is up, retries remain and the request's time (REQUEST_TIMEOUT_S) lasts. A fatal
        EngineError when the server is gone; otherwise the last failure with its tries."""
        assert self.client is not None, "the engine was not started"
        deadline = time.monotonic() + self.settings.request_timeout_s
        tries = 0
        while True:
            tries += 1
            try:
                answer = await self.client.complete(body, timeout_s=deadline - time.monotonic())
            except EngineError as exc:
                failure = exc
            else:
                answer.tries = tries
                return answer
            if await self.server.gone_after_error():
                reason = self.server.failure or failure
                raise EngineError(str(reason), fatal=True, tries=tries) from None
            wait = backoff_s(tries)
            retry = isinstance(failure, TransportError) and tries <= self.settings.transport_retries
            if not retry or time.monotonic() + wait >= deadline:
                note = f" ({tries} tries)" if isinstance(failure, TransportError) else ""
                raise EngineError(f"{failure}{note}", tries=tries) from None
            log.info("page request lost (%s); sending it again in %.1f s", failure, wait)
            await asyncio.sleep(wait)

    async def recognize(self, page: PageImage, prompt: Prompt) -> Recognition:
        """Ask, and ask again up the ladder while the answer stops by length or repetition, is
        not in the family's format, or (with a schema) does not validate; the best text and the
        last reason when no attempt is good."""
        if self.failure:
            raise EngineError(self.failure, fatal=True)
        t0 = time.perf_counter()
        best, reason, why = "", None, ""
        output_tokens = tries = 0
        prompt_tokens = None
        exact = self.options.exact_output_tokens
        where = Page(page.width, page.height, page.pdf_size)
        for n, attempt in enumerate(self.attempts, 1):
            try:
                answer = await self.ask(page.png, prompt, attempt)
            except EngineError as exc:
                exc.tries += tries  # the page's earlier attempts count too
                raise
            tries += answer.tries
            text = strip_think(answer.text)
            output_tokens += answer.output_tokens or 0
            prompt_tokens = answer.prompt_tokens
            reason = answer.finish_reason
            reading: Reading | None = None
            invalid = None
            if exact:  # a measurement: an answer of the length asked for, taken as it comes
                reading = Reading(text)
            elif reason not in RETRY_REASONS:
                try:
                    reading = self.read(text, prompt, where)
                except AnswerError as exc:
                    invalid = str(exc)
            if reading is not None:
                return Recognition(
                    text=reading.text,
                    finish_reason=reason,
                    attempts=n,
                    tries=tries,
                    prompt_tokens=prompt_tokens,
                    output_tokens=output_tokens,
                    seconds=time.perf_counter() - t0,
                    reading=reading,
                )
            why = invalid or f"stopped by {reason}"
            if len(text) > len(best):
                best = text
            log.info(
                "page %s at temperature %.1f; attempt %d/%d",
                why,
                attempt.temperature,
                n,
                len(self.attempts),
            )
        temps = ", ".join(f"{a.temperature:g}" for a in self.attempts)
        return Recognition(
            text=best,
            ok=False,
            finish_reason=reason,
            attempts=len(self.attempts),
            tries=tries,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            seconds=time.perf_counter() - t0,
            problem=f"{why} on all {len(self.attempts)} attempts "
            f"(temperatures {temps}; MAX_TOKENS {self.max_tokens})",
            fallback=self.family.text_layer_fallback and prompt.schema is None,
        )

    def read(self, text: str, prompt: Prompt, page: Page) -> Reading:
        """The answer read as the family reads it, or as JSON of the job's schema."""
        if prompt.schema is not None:
            value, invalid = as_valid_json(text, prompt.schema)
            if invalid:
                raise AnswerError(f"invalid JSON for json_schema ({invalid})")
            return Reading(value)
        return self.family.parse(text, prompt, page)

    def fingerprint(self, prompt: Prompt) -> dict[str, Any]:
        options = self.options
        measuring = {
            "exact_output_tokens": options.exact_output_tokens,
            "greedy_temperature": options.greedy_temperature,
        }
        return {
            "engine": self.facts.name,
            "model": self.facts.model,
            "revision": self.facts.revision,
            "family": self.family.name,
            "family_version": self.family.version,
            "prompt": prompt.name,
            "prompt_version": prompt.version,
            "sampling": {
                "temperatures": [a.temperature for a in self.attempts],
                "top_p": [a.top_p for a in self.attempts],
                "max_tokens": self.max_tokens,
                "repetition_detection": REPETITION_DETECTION,
                "thinking": False,
                **{k: v for k, v in measuring.items() if v},  # set only to measure
            },
        }

    def terminate(self) -> None:
        self.server.terminate()

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        await self.server.stop()
