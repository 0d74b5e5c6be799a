"""A stand-in for a RunPod endpoint on loopback, for the tests and `vlm-ocr-lab bench --fanout`.

RunPod's client routes (`POST /v2/{endpoint}/run`, `GET /status/{id}`, `GET /stream/{id}`,
`POST /cancel/{id}`, `GET /health`, a bearer key) in front of worker processes served by the
RunPod SDK's local API server (`handler.py --rp_serve_api`). The queue stands in for RunPod's:
each worker takes one job at a time through its `/runsync`. That server hands a streaming
handler's items over when the job ends, so `/stream` gets a job's page items in one batch, in
completion order, then the state. A worker that dies with a job fails that job (`worker lost`)
and takes no more. A job cancelled while a worker runs it stays cancelled, but what the worker
did is kept (`Job.items`): the worker cannot be stopped half-way here, and what it stored counts.

It can answer as RunPod does when it is busy: `throttle` of the /run calls with 429 (with
Retry-After), `gateway` of the /stream calls with 502, each counted in `throttled`, `gatewayed`;
and lose answers as a broken connection does: `drop` of the /run calls queue their job and close
the connection unanswered (counted in `dropped`).
`wait_for(test)` waits until the jobs satisfy a test (for a test or a benchmark to act on).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from aiohttp import web

from vlm_ocr.loopback import free_port
from vlm_ocr.settings import Settings

API_KEY = "local-endpoint-key"  # what the stand-in accepts; it guards nothing real


@dataclass
class Job:
    id: str
    input: dict[str, Any]
    state: str = "IN_QUEUE"
    worker: str | None = None
    output: list[Any] | None = None
    error: str | None = None
    served: int = 0  # stream items already handed to /stream
    items: list[Any] = field(default_factory=list)


class Router:
    def __init__(
        self, workers: list[str], *, throttle: int = 0, gateway: int = 0, drop: int = 0
    ) -> None:
        self.workers = list(workers)
        self.throttle = throttle  # answer the first N /run calls with 429
        self.throttled = 0
        self.gateway = gateway  # answer the first N /stream calls with 502
        self.gatewayed = 0
        self.drop = drop  # queue the first N /run calls' jobs, then drop their connections
        self.dropped = 0
        self.busy: set[str] = set()  # workers running a job now
        self.jobs: dict[str, Job] = {}
        self._changed = threading.Condition()
        self._ids = itertools.count(1)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.base = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()

    # --- the client routes ------------------------------------------------------------------

    async def _start(self) -> str:
        self.queue: asyncio.Queue[Job] = asyncio.Queue()
        app = web.Application(middlewares=[self._auth])
        app.add_routes(
            [
                web.post("/v2/{endpoint}/run", self._run),
                web.get("/v2/{endpoint}/status/{id}", self._status),
                web.get("/v2/{endpoint}/stream/{id}", self._stream),
                web.post("/v2/{endpoint}/cancel/{id}", self._cancel),
                web.get("/v2/{endpoint}/health", self._health),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        # a connection a job: the worker's server closes an idle kept-alive one after 5 s, and a
        # job sent on it as it closes would read as the worker lost (and take the worker away)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True),
            timeout=aiohttp.ClientTimeout(total=600),
        )
        self._serving = [asyncio.create_task(self._serve(url)) for url in self.workers]
        return f"http://127.0.0.1:{port}/v2"

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {API_KEY}":
            return web.json_response({"error": "unauthorized"}, status=401)
        return await handler(request)

    async def _run(self, request: web.Request) -> web.Response:
        if self.throttled < self.throttle:
            self.throttled += 1
            return web.json_response(
                {"error": "rate limited"}, status=429, headers={"Retry-After": "0.1"}
            )
        body = await request.json()
        job = Job(id=f"job-{next(self._ids)}", input=body["input"])
        with self._changed:  # the jobs are read by wait_for's test, in another thread
            self.jobs[job.id] = job
            self._changed.notify_all()
        self.queue.put_nowait(job)
        if self.dropped < self.drop:
            self.dropped += 1
            assert request.transport is not None
            request.transport.close()  # the client reads no answer, as on a reset connection
        return web.json_response({"id": job.id, "status": job.state})

    async def _status(self, request: web.Request) -> web.Response:
        job = self.jobs[request.match_info["id"]]
        body: dict[str, Any] = {"id": job.id, "status": job.state}
        if job.state == "COMPLETED":
            body["output"] = job.output
        if job.error:
            body["error"] = job.error
        return web.json_response(body)

    async def _stream(self, request: web.Request) -> web.Response:
        if self.gatewayed < self.gateway:
            self.gatewayed += 1
            return web.Response(status=502, text="bad gateway")
        job = self.jobs[request.match_info["id"]]
        new = job.items[job.served :]
        job.served = len(job.items)
        return web.json_response(
            {"id": job.id, "status": job.state, "stream": [{"output": item} for item in new]}
        )

    async def _cancel(self, request: web.Request) -> web.Response:
        job = self.jobs[request.match_info["id"]]
        if job.state in ("IN_QUEUE", "IN_PROGRESS"):
            job.state = "CANCELLED"
        self._notify()
        return web.json_response({"id": job.id, "status": job.state})

    async def _health(self, request: web.Request) -> web.Response:
        states = [job.state for job in self.jobs.values()]
        alive = [
            url for url, task in zip(self.workers, self._serving, strict=True) if not task.done()
        ]
        running = len(self.busy & set(alive))
        return web.json_response(
            {
                "jobs": {
                    "completed": states.count("COMPLETED"),
                    "failed": states.count("FAILED"),
                    "inProgress": states.count("IN_PROGRESS"),
                    "inQueue": states.count("IN_QUEUE"),
                    "retried": 0,
                },
                "workers": {"idle": len(alive) - running, "running": running},
            }
        )

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, test: Any, timeout_s: float) -> bool:
        """Until `test(jobs)` holds (checked at each change of a job), or False at the timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: test(list(self.jobs.values())), timeout_s)

    # --- the queue --------------------------------------------------------------------------

    async def _serve(self, url: str) -> None:
        """One worker: a job at a time, until the worker stops answering."""
        while True:
            job = await self.queue.get()
            if job.state == "CANCELLED":
                continue
            job.state, job.worker = "IN_PROGRESS", url
            self.busy.add(url)
            self._notify()
            try:
                async with self._session.post(url + "/runsync", json={"input": job.input}) as r:
                    body = await r.json()
            except (TimeoutError, aiohttp.ClientError) as exc:
                if job.state != "CANCELLED":
                    job.state, job.error = "FAILED", f"worker lost ({type(exc).__name__})"
                self._notify()
                return  # a dead worker takes no more jobs
            finally:
                self.busy.discard(url)
            self._ended(job, body)
            self._notify()

    @staticmethod
    def _ended(job: Job, body: dict[str, Any]) -> None:
        """A job's end as RunPod reports it: its items, and its state (kept if cancelled)."""
        output = body.get("output")
        cancelled = job.state == "CANCELLED"
        if isinstance(output, list):
            job.items = output[:-1]
            last = output[-1] if output else {}
            if isinstance(last, dict) and last.get("error"):
                if not cancelled:
                    job.state, job.error = "FAILED", str(last["error"])  # as RunPod does
                return
        if cancelled:
            return
        job.output = output
        job.state = "COMPLETED" if body.get("status") == "COMPLETED" else "FAILED"
        job.error = body.get("error")

    def stop(self) -> None:
        async def close() -> None:
            for task in self._serving:
                task.cancel()
            await self._session.close()
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


def worker_environ(**extra: str) -> dict[str, str]:
    """This process's environment without RunPod's variables and without any the worker reads
    as a setting, plus `extra`: a worker started from it talks to no real job queue or bucket,
    and runs on exactly the settings `extra` names, whatever the developer's shell has set."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RUNPOD_") and k.lower() not in Settings.GROUP_OF
    }
    return env | extra


def serve_api(handler: Path, env: dict[str, str], port: int, **popen: Any) -> subprocess.Popen[Any]:
    """`handler.py --rp_serve_api` (the RunPod SDK's local API server) on a loopback port."""
    argv = ["--rp_serve_api", "--rp_api_host", "127.0.0.1", "--rp_api_port", str(port)]
    return subprocess.Popen(
        [sys.executable, str(handler), *argv], cwd=handler.parent, env=env, **popen
    )


# uvicorn's exit code when it cannot start, a taken port among the reasons: the port picked as
# free was taken by another process before the worker's API server bound it.
UVICORN_STARTUP_FAILURE = 3
START_ATTEMPTS = 3


def start_api(
    handler: Path, env: dict[str, str], *, timeout_s: float, **popen: Any
) -> tuple[subprocess.Popen[Any], str]:
    """A worker serving the local API on a free port, answering; tried again on another port
    when uvicorn could not start on the one picked. Returns the process and its URL."""
    for attempt in range(1, START_ATTEMPTS + 1):
        port = free_port()
        proc = serve_api(handler, env, port, **popen)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for_http(url + "/docs", proc, timeout_s=timeout_s)
        except ServerExited as exc:
            if exc.code != UVICORN_STARTUP_FAILURE or attempt == START_ATTEMPTS:
                raise
            continue
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        return proc, url
    raise AssertionError("unreachable")


class LocalEndpoint:
    """`count` worker processes (`handler.py --rp_serve_api`, environment `env`) behind a
    Router. `kill(i)` ends worker i as a crash would; `stop()` ends everything."""

    def __init__(self, handler: Path, env: dict[str, str], count: int = 2, **router: Any) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.urls: list[str] = []
        # its own session: kill() ends its render processes too
        popen: dict[str, Any] = {"stdout": subprocess.DEVNULL, "start_new_session": True}
        try:
            for _ in range(count):  # started together; each waited for, and started again
                port = free_port()  # on another port if uvicorn could not start on this one
                self.procs.append(serve_api(handler, env, port, **popen))
                self.urls.append(f"http://127.0.0.1:{port}")
            for i, (url, proc) in enumerate(zip(self.urls, self.procs, strict=True)):
                try:
                    wait_for_http(url + "/docs", proc, timeout_s=180)
                except ServerExited as exc:
                    if exc.code != UVICORN_STARTUP_FAILURE:
                        raise
                    self.procs[i], self.urls[i] = start_api(handler, env, timeout_s=180, **popen)
        except BaseException:
            self._end_workers()
            raise
        self.router = Router(self.urls, **router)

    def kill(self, index: int) -> None:
        os.killpg(self.procs[index].pid, signal.SIGKILL)
        self.procs[index].wait(timeout=30)

    def stop(self) -> None:
        self.router.stop()
        self._end_workers()

    def _end_workers(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)


class ServerExited(RuntimeError):
    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(f"the server exited with code {code}")


def wait_for_http(url: str, proc: subprocess.Popen[Any], timeout_s: float) -> None:
    """Until `url` answers, failing early (ServerExited) if the server process exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerExited(proc.returncode)
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout_s:g} s")
