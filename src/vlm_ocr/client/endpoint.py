"""A client of one RunPod serverless endpoint, over RunPod's documented routes.

`POST {base}/{endpoint}/run`, `GET /status/{job}`, `GET /stream/{job}`, `POST /cancel/{job}`,
`GET /health` (the endpoint's workers and jobs), with the API key as a bearer token. The RunPod
SDK's `Endpoint` class covers the same routes but keeps the key and base URL in module globals
and does not back off when RunPod answers 429; this client does both per instance, so a fan-out
of many jobs stays within the rate limits and the base URL can point at a stand-in that speaks
the same routes.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import random
import sys
from typing import Any

import httpx

log = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per poll otherwise; ours say more

# httpcore tries `import sniffio` for each lock it makes (several a request); without sniffio
# installed each try searches the whole import path again, a fifth of a corpus run's CPU time
# as measured. Marking it absent once makes each try fail at once, as it would anyway.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

# Connections to RunPod kept open at once: httpcore looks at each idle one on every request, so a
# few, reused, cost less than many (hundreds of jobs are asked after over them).
CONNECTIONS = 16

# Job states RunPod reports; the last four are final.
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"})
RETRY_STATUS = frozenset({429, 502, 503, 504})
# the routes of the endpoint itself, not of one job: a 404 there is a wrong endpoint id or base
ENDPOINT_ROUTES = frozenset({"/run", "/health"})
MAX_BACKOFF_S = 30.0
# Transport errors raised before the endpoint had the whole request: sending it again is safe.
# Any other (the connection lost while the answer was awaited) may follow a request RunPod took.
NOT_SENT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.WriteError,
    httpx.WriteTimeout,
)


class EndpointError(Exception):
    """The endpoint refused a request or could not be reached; the message names the route.
    `unreachable`: it did not answer, or kept answering 429 or a gateway error, past every retry
    (no later request is likely to fare better now)."""

    def __init__(
        self, message: str, *, unreachable: bool = False, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.unreachable = unreachable
        self.status = status  # the HTTP status it answered, if it answered


# Workers RunPod's /health counts as the endpoint's, by state (`ready` overlaps the others).
WORKER_STATES = ("idle", "running", "initializing")


def worker_count(health: dict[str, Any]) -> int:
    """The workers an endpoint holds now (idle, running or starting), from its /health."""
    workers = health.get("workers")
    if not isinstance(workers, dict):
        return 0
    return sum(int(n) for state, n in workers.items() if state in WORKER_STATES and n)


class Endpoint:
    """One endpoint's routes. Use as an async context manager (it holds a connection pool)."""

    def __init__(
        self,
        endpoint_id: str,
        api_key: str | None,
        *,
        api_base: str,
        attempts: int = 8,
        timeout_s: float = 30.0,
    ) -> None:
        if not endpoint_id or "/" in endpoint_id:
            raise ValueError("the endpoint id is the short id RunPod shows, without slashes")
        self.base = f"{api_base.rstrip('/')}/{endpoint_id}"
        self.attempts = attempts
        #: answers backed off from, by HTTP status (0: no answer), for a run's summary
        self.backoffs: dict[int, int] = {}
        #: jobs queued again after their `POST /run` lost its answer once sent: RunPod may have
        #: taken the first too (it has no idempotency key), so such a job may run twice
        self.runs_resent = 0
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
        self._http = httpx.AsyncClient(headers=headers, timeout=timeout_s, limits=limits)
        # requests wait here, not in httpcore's pool, whose every request looks at all waiting
        self._calls = asyncio.Semaphore(CONNECTIONS)

    async def __aenter__(self) -> Endpoint:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def run(self, job_input: dict[str, Any]) -> str:
        """Queue a job; returns its id."""
        body = await self._call("POST", "/run", json={"input": job_input})
        job_id = body.get("id")
        if not isinstance(job_id, str):
            raise EndpointError(f"POST /run answered without a job id: {str(body)[:200]}")
        return job_id

    async def status(self, job_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/status/{job_id}")

    async def stream(self, job_id: str) -> dict[str, Any]:
        """The items the job streamed since the last call, and its state."""
        return await self._call("GET", f"/stream/{job_id}")

    async def cancel(self, job_id: str, attempts: int | None = None) -> dict[str, Any]:
        return await self._call("POST", f"/cancel/{job_id}", attempts=attempts)

    async def health(self, attempts: int | None = None) -> dict[str, Any]:
        """The endpoint's workers by state and its jobs by state (`attempts`: fewer than a
        job's, where a wrong address should be said at once rather than after a minute)."""
        return await self._call("GET", "/health", attempts=attempts)

    async def _call(
        self, method: str, route: str, attempts: int | None = None, **kw: Any
    ) -> dict[str, Any]:
        """One request, retried with backoff on 429 (honouring Retry-After), on 5xx gateway
        answers and on connection errors; any other error status is final. A job is thus
        queued at least once: a `POST /run` whose answer was lost is sent again and counted."""
        delay, attempts = 0.5, attempts or self.attempts
        for attempt in range(1, attempts + 1):
            try:
                async with self._calls:
                    resp = await self._http.request(method, self.base + route, **kw)
            except httpx.TransportError as exc:
                if attempt == attempts:
                    raise EndpointError(
                        f"{method} {self.base}{route}: no answer ({type(exc).__name__}); check "
                        "the endpoint id, RUNPOD_API_BASE and the network",
                        unreachable=True,
                    ) from None
                wait = delay
                self.backoffs[0] = self.backoffs.get(0, 0) + 1
                if route == "/run" and not isinstance(exc, NOT_SENT):
                    self.runs_resent += 1
                    log.warning(
                        "POST /run: the connection was lost awaiting the answer (%s); sending the "
                        "job again, so RunPod may run it twice",
                        type(exc).__name__,
                    )
            else:
                if resp.status_code not in RETRY_STATUS:
                    if resp.is_error:
                        raise self._refused(method, route, resp)
                    return resp.json()
                if attempt == attempts:
                    raise EndpointError(
                        f"{method} {route}: HTTP {resp.status_code} after retries", unreachable=True
                    )
                wait = _retry_after(resp) or delay
                self.backoffs[resp.status_code] = self.backoffs.get(resp.status_code, 0) + 1
                log.debug("%s %s: HTTP %s; retry in %.1f s", method, route, resp.status_code, wait)
            # jitter: the many jobs of a corpus that met the same 429 do not come back together
            await asyncio.sleep(min(wait, MAX_BACKOFF_S) * random.uniform(1.0, 1.5))
            delay = min(delay * 2, MAX_BACKOFF_S)
        raise AssertionError("unreachable")

    def _refused(self, method: str, route: str, resp: httpx.Response) -> EndpointError:
        """An error answer, saying what to check where it is the key or the endpoint's id."""
        code = resp.status_code
        if code == 401:
            said = f"{method} {route}: 401 unauthorized; check RUNPOD_API_KEY"
        elif code == 404 and route in ENDPOINT_ROUTES:
            # no such endpoint (a job's route answers 404 for a job it lost instead)
            said = (
                f"{method} {self.base}{route}: HTTP 404: {resp.text[:200]}; check the endpoint "
                "id (--endpoint) and RUNPOD_API_BASE"
            )
        else:
            said = f"{method} {route}: HTTP {code}: {resp.text[:300]}"
        return EndpointError(said, status=code)


def _retry_after(resp: httpx.Response) -> float | None:
    try:
        return max(0.0, float(resp.headers.get("Retry-After", "")))
    except ValueError:
        return None
