"""Run `vllm serve` (the OpenAI-compatible server) as a child process on loopback.

The worker never imports vLLM: the server runs with the interpreter `VLLM_PYTHON` names (its own
environment), its flags are built from settings by `server_argv`, and its log is read line by line
for the facts a user needs to tell one worker's engine from another's. A watcher notices when the
process exits or stops answering, so the pages in flight fail at once instead of hanging.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from ..errors import EngineError
from ..settings import Settings

log = logging.getLogger(__name__)

NETWORK_VOLUME = Path("/runpod-volume")  # where RunPod mounts a serverless network volume
HEALTH_INTERVAL_S = 10.0
HEALTH_FAILURES_FATAL = 3  # consecutive failed health checks before the server is given up
LOG_TAIL_LINES = 60

# Lines of vLLM's log that carry facts worth reporting.
_FACTS = {
    "gdn_prefill_kernel": re.compile(r"Using (\S+(?: \S+)?) GDN prefill kernel"),
    "kv_cache_tokens": re.compile(r"KV cache size: ([\d,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"),
    "kv_cache_dtype_resolved": re.compile(r"kv_cache_dtype=(\w+)"),
    "attention_backend": re.compile(r"Using (\S+) (?:attention )?backend"),
}


def server_argv(settings: Settings, port: int) -> list[str]:
    """The exact command line of the engine server, from settings."""
    argv = [
        settings.vllm_python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        settings.model_name,
    ]
    if settings.model_revision:
        argv += ["--revision", settings.model_revision]
    argv += [
        "--served-model-name",
        settings.served_model_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--gdn-prefill-backend",
        settings.gdn_prefill_backend,
        "--kv-cache-dtype",
        settings.kv_cache_dtype,
        "--max-model-len",
        str(settings.max_model_len),
        "--max-num-seqs",
        str(settings.max_num_seqs),
        "--max-num-batched-tokens",
        str(settings.max_num_batched_tokens),
        "--gpu-memory-utilization",
        f"{settings.gpu_memory_utilization:g}",
        "--tensor-parallel-size",
        str(settings.tensor_parallel_size),
        "--limit-mm-per-prompt",
        json.dumps({"image": 1, "video": 0}),
        "--mm-processor-kwargs",
        json.dumps({"max_pixels": settings.max_pixels}),
        "--mm-processor-cache-gb",
        "0",
    ]
    if settings.enforce_eager:
        argv.append("--enforce-eager")
    argv += shlex.split(settings.vllm_extra_args)
    return argv


def gpu_name() -> str:
    """The GPU(s) as nvidia-smi names them, or 'none'."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "none"
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return "; ".join(line.strip() for line in out.splitlines() if line.strip()) or "none"


class VllmServer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = settings.vllm_port
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.argv = server_argv(settings, self.port)
        self.proc: asyncio.subprocess.Process | None = None
        self.facts: dict[str, Any] = {}
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.failure: str | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> float:
        """Spawn the server and wait until /health answers; returns seconds taken."""
        t0 = time.perf_counter()
        log.info("starting engine: %s", shlex.join(self.argv))
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self.child_env(),
            start_new_session=True,  # so stop() can end its whole process group
        )
        self._tasks.append(asyncio.create_task(self._read_log()))
        deadline = t0 + self.settings.vllm_startup_timeout_s
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                if self.proc.returncode is not None:
                    raise EngineError(self._exit_reason("while starting"), fatal=True)
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(self.base_url + "/health")).status_code == 200:
                        break
                if time.perf_counter() > deadline:
                    await self.stop()
                    raise EngineError(
                        "the vLLM server was not healthy within "
                        f"{self.settings.vllm_startup_timeout_s:g} s "
                        f"(VLLM_STARTUP_TIMEOUT_S); last log lines:\n{self.log_tail()}",
                        fatal=True,
                    )
                await asyncio.sleep(0.5)
            with contextlib.suppress(httpx.HTTPError, ValueError):
                version = (await client.get(self.base_url + "/version")).json()
                self.facts["vllm_version"] = version.get("version")
        self._tasks.append(asyncio.create_task(self._watch()))
        return time.perf_counter() - t0

    def child_env(self) -> dict[str, str]:
        """The server's environment: ours, the hub settings, and a compile cache on the network
        volume when one is mounted, so the next cold start reuses the kernels this one compiled."""
        env = dict(os.environ) | {
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1" if self.settings.hf_hub_offline else "0",
        }
        if self.settings.hf_home:
            env["HF_HOME"] = self.settings.hf_home
        if "VLLM_CACHE_ROOT" not in env and NETWORK_VOLUME.is_dir():
            env["VLLM_CACHE_ROOT"] = str(NETWORK_VOLUME / "vllm-cache")
        return env

    async def _read_log(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            for name, pattern in _FACTS.items():
                if name not in self.facts and (m := pattern.search(line)):
                    self.facts[name] = m.group(1)
            if "ERROR" in line or "Traceback" in line:
                log.warning("engine: %s", line)
            else:
                log.debug("engine: %s", line)

    async def _watch(self) -> None:
        """Notice an exit at once, and a server that stops answering within a few checks."""
        assert self.proc is not None
        misses = 0
        async with httpx.AsyncClient(timeout=HEALTH_INTERVAL_S) as client:
            while self.proc.returncode is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self.proc.wait()), HEALTH_INTERVAL_S)
                    break
                try:
                    ok = (await client.get(self.base_url + "/health")).status_code == 200
                except httpx.HTTPError:
                    ok = False
                misses = 0 if ok else misses + 1
                if misses >= HEALTH_FAILURES_FATAL:
                    self.failure = (
                        f"the vLLM server stopped answering /health for "
                        f"{misses * HEALTH_INTERVAL_S:.0f} s; it was stopped"
                    )
                    log.error(self.failure)
                    await self.stop()
                    return
        if self.failure is None:
            self.failure = self._exit_reason("while serving")
            log.error("%s\n%s", self.failure, self.log_tail())

    def _exit_reason(self, when: str) -> str:
        code = self.proc.returncode if self.proc else None
        hint = ""
        if code in (-signal.SIGKILL, 137):
            hint = " (killed: out of memory is the usual cause)"
        return f"the vLLM server exited {when} with code {code}{hint}"

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(list(self.tail)[-lines:])

    async def stop(self) -> None:
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
