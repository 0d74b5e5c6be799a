"""Run `vllm serve` (the OpenAI-compatible server) as child processes on loopback.

`python -m vllm.entrypoints.cli.main serve` is what the `vllm` command runs, with the interpreter
of the engine's own environment.

The worker never imports vLLM: the server runs with the interpreter `VLLM_PYTHON` names (its own
environment), its flags are built from settings by `server_argv` and `launch_argvs`, and its log
is read line by line for the facts a user needs to tell one worker's engine from another's. A
watcher notices when a process exits or the server stops answering, so the pages in flight fail
at once instead of hanging.

By default (`VLLM_SPLIT_START`) vLLM runs as two children started at the same moment: the API
server, told it has no local engine, and a headless launcher whose engine core connects to it
over loopback. A single `vllm serve` imports vLLM, then spawns an engine core that imports it a
second time; split, the two imports overlap and the launcher forks its engine core, which
imports nothing.
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
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import EngineError
from ..settings import Settings
from .model_download import NETWORK_VOLUME, ensure_model

log = logging.getLogger(__name__)

HEALTH_INTERVAL_S = 5.0  # between health checks, and the time one check may take
HEALTH_FAILURES_FATAL = 3  # consecutive failed checks: a hung server is given up within 30 s
# Run in the engine's interpreter before vLLM: ask the kernel to send SIGTERM to the server when
# the worker dies, even by SIGKILL (the setting survives exec), then become the server.
_LAUNCH = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM); "
    "os.getppid() == int(sys.argv[1]) or sys.exit(70); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
)
# The line of the engine's log that says why it did not start (the last one that names an error).
# Errors that only say another error happened: the cause is the one before them.
_WRAPPER = re.compile(r"EngineDeadError|See stack trace|RuntimeError: Engine core initialization")
_CAUSE = re.compile(r"((?:[A-Z]\w*(?:Error|Exception))|RuntimeError|ValueError): (.+)")
# pydantic states the reason on the line after its header: "  Value error, max_model_len ...".
_DETAIL = re.compile(r"^\s+(?:Value error, )?(.+?)(?: \[type=.*)?$")
LOG_TAIL_LINES = 60
# Compiled kernels kept on the network volume, so the next cold start reuses them: vLLM's
# torch.compile artifacts, Triton's kernels, FlashInfer's JIT and DeepGEMM's JIT.
CACHES = {
    "VLLM_CACHE_ROOT": "vllm",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "DG_JIT_CACHE_DIR": "deep_gemm",
}

# Lines of vLLM's log that carry facts worth reporting.
_FACTS = {
    "gdn_prefill_kernel": re.compile(r"Using (\S+(?: \S+)?) GDN prefill kernel"),
    "kv_cache_tokens": re.compile(r"KV cache size: ([\d,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"),
    "kv_cache_dtype_resolved": re.compile(r"kv_cache_dtype=(\w+)"),
    "attention_backend": re.compile(r"Using (\S+) (?:attention )?backend"),
    # The GEMM kernel of the quantized weights: what the speed of a worker hangs on (on an H200,
    # FP8 weights ran at 3.44 pages/s on DeepGEMM and about 1.7 on CUTLASS).
    "linear_kernel": re.compile(r"(?:Selected|Using) (\w+Kernel) for \w+"),
}


def facts_in(line: str) -> dict[str, str]:
    """The facts one line of vLLM's log states; the worker keeps the first statement of each."""
    return {name: m.group(1) for name, pattern in _FACTS.items() if (m := pattern.search(line))}


def cause_in(lines: list[str]) -> str:
    """The last error a log states that is not a wrapper of another; "" when none does."""
    for i in range(len(lines) - 1, -1, -1):
        m = _CAUSE.search(lines[i])
        if not m or _WRAPPER.search(lines[i]):
            continue
        detail = _DETAIL.match(lines[i + 1]) if i + 1 < len(lines) else None
        if m.group(1) == "ValidationError" and detail:
            return f"{m.group(2)}: {detail.group(1)}"
        return m.group(0)
    return ""


def cuda_graph_sizes(settings: Settings) -> list[int]:
    """The decode batch sizes to capture: every size vLLM pads a batch up to. Fewer sizes than
    vLLM's default (one per 8 or 16 sequences) cut the capture at start; a batch between two
    sizes runs at the larger one, which costs little in memory-bound decoding."""
    if settings.cuda_graph_sizes.strip():
        return sorted({int(x) for x in settings.cuda_graph_sizes.split(",") if x.strip()})
    top = settings.max_num_seqs
    sizes = {n for n in (1, 2, 4, 8, 16, 32, 64) if n < top}
    sizes |= set(range(96, top, 32)) | {top}
    return sorted(sizes)


def nvidia_smi(*fields: str) -> list[str] | None:
    """One line per GPU of `nvidia-smi --query-gpu=FIELDS`; None without a usable nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.strip() for line in out.splitlines() if line.strip()]


def compute_capability() -> float | None:
    """The first GPU's compute capability (9.0 for Hopper), or None."""
    lines = nvidia_smi("compute_cap")
    try:
        return float(lines[0]) if lines else None
    except ValueError:
        return None


def gpu_memory_gib(gpus: int) -> float | None:
    """The memory of the first `gpus` GPUs together, GiB; None without a GPU to read."""
    lines = nvidia_smi("memory.total")
    try:
        mib = [int(line.split()[0]) for line in lines or []][:gpus]
    except (ValueError, IndexError):
        return None
    return sum(mib) / 1024 if mib else None


# `MAX_NUM_SEQS=0`: sequences by the memory the engine has (GiB, all its GPUs). On an H200 the 32B
# AWQ model ran 3.0 pages/s at 256, 2.5-2.75 at 192 and 2.4 at 320 (its decoding slowed); below
# that, about what the KV cache beside the 32B AWQ weights holds for pages that end well before
# `MAX_TOKENS` (README, "Choose a GPU").
MAX_NUM_SEQS_BY_MEMORY = ((120.0, 256), (70.0, 192), (40.0, 64), (0.0, 32))
# No GPU here to read: the server runs elsewhere (`openai`) or on a CPU build of vLLM.
MAX_NUM_SEQS_UNKNOWN_GPU = 192


def default_max_num_seqs(memory_gib: float | None) -> int:
    if memory_gib is None:
        return MAX_NUM_SEQS_UNKNOWN_GPU
    return next(seqs for floor, seqs in MAX_NUM_SEQS_BY_MEMORY if memory_gib >= floor)


def resolve_kv_cache_dtype(settings: Settings, capability: float | None) -> str:
    """The user's value when set; else fp8 where the GPU has an fp8 KV cache (8.9+)."""
    if settings.kv_cache_dtype:
        return settings.kv_cache_dtype
    return "fp8" if capability is not None and capability >= 8.9 else "auto"


def server_argv(settings: Settings, port: int, kv_cache_dtype: str = "fp8") -> list[str]:
    """The exact command line of the engine server, from settings."""
    argv = [settings.vllm_python, "-m", "vllm.entrypoints.cli.main", "serve", settings.model_name]
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
        kv_cache_dtype,
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
        # Jobs with a JSON schema: guided decoding by xgrammar, with no free whitespace between
        # tokens, so a model cannot pad an answer with blank lines until MAX_TOKENS.
        "--structured-outputs-config",
        json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
    ]
    if settings.enforce_eager:
        argv.append("--enforce-eager")
    else:
        sizes = cuda_graph_sizes(settings)
        argv += ["--compilation-config", json.dumps({"cudagraph_capture_sizes": sizes})]
    argv += shlex.split(settings.vllm_extra_args)
    return argv


def launch_argvs(
    settings: Settings, port: int, kv_cache_dtype: str = "fp8", rpc_port: int = 0
) -> dict[str, list[str]]:
    """The command line of each process vLLM runs as, by role: one `server`; or, split, a
    `server` with no local engine and an `engine` launcher that handshakes with it on
    `rpc_port` (vLLM's data-parallel mode with one engine)."""
    argv = server_argv(settings, port, kv_cache_dtype)
    if not settings.vllm_split_start:
        return {"server": argv}
    dp = ["--data-parallel-size", "1", "--data-parallel-address", "127.0.0.1"]
    dp += ["--data-parallel-rpc-port", str(rpc_port)]
    return {
        "server": [*argv, *dp, "--data-parallel-size-local", "0"],
        "engine": [*argv, *dp, "--data-parallel-size-local", "1", "--headless"],
    }


def gpu_name() -> str:
    """The GPU(s) as nvidia-smi names them, or 'none'."""
    lines = nvidia_smi("name", "memory.total")
    return "; ".join(lines) if lines else "none"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@dataclass
class Child:
    """One process vLLM runs as, and the task that reads its log."""

    role: str  # "server" (answers HTTP) or "engine" (the headless launcher of a split start)
    argv: list[str]
    proc: asyncio.subprocess.Process | None = None
    reader: asyncio.Task[None] | None = None


class VllmServer:
    """The engine server as children of this worker: they die with the worker, and the worker
    never talks to a server it did not start."""

    name = "vllm"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = settings.vllm_port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.capability = compute_capability()
        self.kv_cache_dtype = resolve_kv_cache_dtype(settings, self.capability)
        argvs = launch_argvs(settings, self.port, self.kv_cache_dtype, free_port())
        self.children = [Child(role, argv) for role, argv in argvs.items()]
        self.facts: dict[str, Any] = {}
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.downloaded: dict[str, Any] | None = None
        self.failure: str | None = None
        self._watcher: asyncio.Task[None] | None = None

    @property
    def proc(self) -> asyncio.subprocess.Process | None:
        """The process that answers HTTP."""
        return self.children[0].proc

    def _exited(self) -> Child | None:
        return next((c for c in self.children if c.proc and c.proc.returncode is not None), None)

    async def start(self) -> dict[str, Any]:
        """Spawn the server and wait until /health answers; returns facts about the start."""
        t_download = time.perf_counter()
        self.downloaded = await ensure_model(self.settings)
        if self.downloaded is not None:
            self.facts["downloaded"] = self.downloaded
            self.facts["download_s"] = round(time.perf_counter() - t_download, 2)
        t0 = time.perf_counter()
        if port_taken(self.port):
            raise EngineError(
                f"port {self.port} (VLLM_PORT) is already taken by another process, perhaps an "
                "engine left over from an earlier worker; stop it, or set VLLM_PORT=0 to pick a "
                "free port",
                fatal=True,
            )
        for child in self.children:
            await self._spawn(child)
        deadline = t0 + self.settings.vllm_startup_timeout_s
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                if exited := self._exited():
                    await self._read_to_end(exited)
                    await self.stop()
                    raise EngineError(self._exit_reason("while starting", exited), fatal=True)
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
        if exited := self._exited():  # healthy, but not ours: it exited meanwhile
            await self.stop()
            raise EngineError(self._exit_reason("while starting", exited), fatal=True)
        self._watcher = asyncio.create_task(self._watch())
        self.facts["spawn_to_healthy_s"] = round(time.perf_counter() - t0, 2)
        self.facts["kv_cache_dtype"] = self.kv_cache_dtype
        self.facts["compute_capability"] = self.capability
        self.facts["argv"] = self.children[0].argv[1:]
        self.facts["split_start"] = len(self.children) > 1
        self.facts["pid"] = self.proc.pid
        return dict(self.facts)

    async def _spawn(self, child: Child) -> None:
        log.info("starting engine %s: %s", child.role, shlex.join(child.argv))
        python, *rest = child.argv
        env = self.child_env()
        if child.role == "engine":  # fork the engine core: it has vLLM imported already
            env.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "fork")
        child.proc = await asyncio.create_subprocess_exec(
            python,
            "-c",
            _LAUNCH,
            str(os.getpid()),
            *rest,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            start_new_session=True,  # so stop() can end its whole process group
        )
        child.reader = asyncio.create_task(self._read_log(child.proc))

    @staticmethod
    async def _read_to_end(child: Child) -> None:
        """Let the log reader take what an exited child wrote last (its reason to exit)."""
        if child.reader is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(child.reader), 5)

    def child_env(self) -> dict[str, str]:
        """The server's environment: ours, the hub settings, and a compile cache on the network
        volume when one is mounted, so the next cold start reuses the kernels this one compiled
        (DeepGEMM's among them: minutes of JIT on the first start with FP8 weights)."""
        env = dict(os.environ) | {
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1" if self.settings.hf_hub_offline else "0",
        }
        if self.settings.hf_home:
            env["HF_HOME"] = self.settings.hf_home
        if self.downloaded is not None:  # downloaded at start: the engine reads it offline
            env["HF_HOME"], env["HF_HUB_OFFLINE"] = self.downloaded["home"], "1"
        if NETWORK_VOLUME.is_dir():
            for name, where in CACHES.items():
                env.setdefault(name, str(NETWORK_VOLUME / "vllm-cache" / where))
        return env

    async def _read_log(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            for name, value in facts_in(line).items():
                self.facts.setdefault(name, value)
            if "ERROR" in line or "Traceback" in line:
                log.warning("engine: %s", line)
            else:
                log.debug("engine: %s", line)

    async def _any_exit(self, timeout: float) -> Child | None:
        """The first child to exit within `timeout` seconds, or None."""
        waits = [asyncio.ensure_future(c.proc.wait()) for c in self.children if c.proc]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return self._exited()

    async def _watch(self) -> None:
        """Notice an exit at once, and a server that stops answering within a few checks."""
        misses = 0
        async with httpx.AsyncClient(timeout=HEALTH_INTERVAL_S) as client:
            while not (exited := await self._any_exit(HEALTH_INTERVAL_S)):
                try:
                    ok = (await client.get(self.base_url + "/health")).status_code == 200
                except httpx.HTTPError:
                    ok = False
                misses = 0 if ok else misses + 1
                if misses >= HEALTH_FAILURES_FATAL:
                    self.failure = (
                        f"the vLLM server stopped answering /health ({misses} checks in a row, "
                        f"{misses * 2 * HEALTH_INTERVAL_S:.0f} s at most); it was stopped"
                    )
                    log.error(self.failure)
                    await self.stop()
                    return
        if self.failure is None:
            await self._read_to_end(exited)
            self.failure = self._exit_reason("while serving", exited)
            log.error("%s\n%s", self.failure, self.log_tail())
            await self.stop()  # the other process of a split start is no use alone

    def _exit_reason(self, when: str, child: Child | None = None) -> str:
        child = child or self.children[0]
        code = child.proc.returncode if child.proc else None
        killed = "killed: out of memory is the usual cause"
        hint = f" ({killed})" if code in (-signal.SIGKILL, 137) else ""
        cause = cause_in(list(self.tail))
        if code == 0 and not cause:
            # vLLM's own processes end quietly when their engine core vanished; a core that
            # raised would have left its error in the log.
            cause = f"its engine core process died without an error in the log ({killed})"
        return f"the vLLM {child.role} exited {when} with code {code}{hint}" + (
            f": {cause[:400]}" if cause else ""
        )

    async def gone_after_error(self) -> bool:
        """After a failed request: did the server go away (give it a moment to exit)?"""
        if self.failure:
            return True
        if not await self._any_exit(3):
            return False
        await asyncio.sleep(0.1)  # let the watcher record why
        return True

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(list(self.tail)[-lines:])

    def terminate(self, grace_s: float = 10.0) -> None:
        """End the children's process groups now (the engine core with its launcher), from
        anywhere, a signal handler included: SIGTERM, then SIGKILL to what is left after
        `grace_s`. A group outlives its leader when the leader alone was killed."""
        groups = [c.proc.pid for c in self.children if c.proc]
        _signal_groups(groups, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while groups and time.monotonic() < deadline:
            groups = [pgid for pgid in groups if _signal_groups([pgid], 0)]
            time.sleep(0.1)
        _signal_groups(groups, signal.SIGKILL)

    async def stop(self) -> None:
        if self._watcher is not None and self._watcher is not asyncio.current_task():
            self._watcher.cancel()
        await asyncio.to_thread(self.terminate, 20.0)
        for child in self.children:
            if child.proc is not None:
                await child.proc.wait()
            if child.reader is not None:
                child.reader.cancel()


def _signal_groups(pgids: list[int], sig: int) -> bool:
    """Send `sig` to each process group; whether any of them still had a process."""
    found = False
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
            found = True
    return found
