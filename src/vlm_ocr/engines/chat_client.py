"""One page, one chat request to an OpenAI-compatible server (vLLM, or any compatible one)."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import EngineError, TransportError

# A loop is a short pattern repeated many times in a row; tables and dotted leaders repeat too,
# but rarely 8 times a pattern of up to 32 tokens.
REPETITION_DETECTION = {"max_pattern_size": 32, "min_count": 8}

# What a gateway or a server that is starting or shutting down answers for a request it did not
# hand to the engine: worth sending again. Any other status is the server's word on the request.
RETRY_STATUSES = frozenset({502, 503, 504})
# The request or its answer was lost on the way: refused, reset, closed without an answer or cut
# off mid-answer. A read timeout is not among them (the page is slow: REQUEST_TIMEOUT_S).
LOST_ON_THE_WAY = (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ConnectTimeout)
CONNECT_TIMEOUT_S = 10.0
# An idle pooled connection is dropped before the server would close it: uvicorn (vLLM's
# server) closes one after 5 s idle, and a request sent on a connection the server is closing at
# that instant is lost (httpx's own default expiry is those same 5 s).
KEEPALIVE_EXPIRY_S = 3.0
NO_ANSWER = "the engine server did not answer"

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_OPEN_THINK = re.compile(r"^.*?</think>\s*", re.DOTALL)


def strip_think(text: str) -> str:
    """Remove reasoning: whole <think>…</think> blocks, and a leading block whose opening tag
    was in the prompt (only its closing tag appears), and an unclosed trailing <think>."""
    text = _THINK_BLOCK.sub("", text)
    if "</think>" in text:
        text = _OPEN_THINK.sub("", text, count=1)
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    return text.strip()


@dataclass
class Completion:
    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    output_tokens: int | None
    #: what a reasoning parser split off the answer (none when thinking is off)
    reasoning: str | None = None
    #: requests sent for this answer: 1, plus one for each transport failure before it
    tries: int = 1


class ChatClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None,
        timeout_s: float,
        max_connections: int,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S),
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=KEEPALIVE_EXPIRY_S,
            ),
        )

    @staticmethod
    def image_url(png: bytes) -> str:
        return "data:image/png;base64," + base64.b64encode(png).decode()

    @staticmethod
    def request_body(
        model: str,
        content: list[dict[str, Any]],
        *,
        temperature: float,
        max_tokens: int,
        top_p: float | None = None,
        ignore_eos: bool = False,
        schema: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One page's request: one user message of `content` (the page and its prompt, as the
        model's family lays them out). `ignore_eos` makes every answer exactly `max_tokens`
        long, for benchmarks that must compare like with like. No per-request `seed`: one
        seeded request in a batch takes the whole batch off vLLM's fused top-p sampler
        (FlashInfer) onto its unfused top-p path, every decode step."""
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": temperature,
            # Reasoning models (Qwen3.5 and its fine-tunes) think for minutes per page otherwise.
            "chat_template_kwargs": {"enable_thinking": False},
        }
        if top_p is not None:
            body["top_p"] = top_p
        if ignore_eos:
            body["ignore_eos"] = True
        else:
            body["repetition_detection"] = REPETITION_DETECTION
        if schema is not None:  # guided decoding: the answer can only be JSON of the schema
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "page", "schema": schema, "strict": True},
            }
        return body

    async def complete(self, body: dict[str, Any], *, timeout_s: float | None = None) -> Completion:
        """Send one request. `TransportError` when it or its answer was lost on the way (the
        caller may send it again); `EngineError` for the server's refusal or a slow page."""
        timeout = (
            httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))
            if timeout_s is not None
            else httpx.USE_CLIENT_DEFAULT
        )
        url = self.base_url + "/chat/completions"
        try:
            resp = await self._http.post(url, json=body, timeout=timeout)
        except LOST_ON_THE_WAY as exc:
            raise TransportError(f"{NO_ANSWER}: {exc!r}") from None
        except httpx.TimeoutException:
            raise EngineError("the page request timed out (REQUEST_TIMEOUT_S)") from None
        except httpx.HTTPError as exc:
            raise EngineError(f"the request to the engine server failed: {exc!r}") from None
        if resp.status_code in RETRY_STATUSES:
            raise TransportError(
                f"the engine server answered HTTP {resp.status_code}: {resp.text[:300]}"
            )
        if resp.status_code != 200:
            raise EngineError(
                f"the engine server answered HTTP {resp.status_code}: {resp.text[:500]}"
            )
        return completion_of(resp)

    async def close(self) -> None:
        await self._http.aclose()


def completion_of(resp: httpx.Response) -> Completion:
    """The answer of a chat completion; `TransportError` when the body is not one (a proxy's
    page, a body cut short): the request never got its answer."""
    try:
        data = resp.json()
        choice = data["choices"][0]
        message = choice.get("message") or {}
        usage = data.get("usage") or {}
        text = message.get("content") or ""
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise TransportError(
            f"the engine server's answer is not a chat completion: {resp.text[:200]!r}"
        ) from None
    return Completion(
        text=text if isinstance(text, str) else str(text),
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=usage.get("prompt_tokens"),
        output_tokens=usage.get("completion_tokens"),
        reasoning=message.get("reasoning") or message.get("reasoning_content") or None,
    )
