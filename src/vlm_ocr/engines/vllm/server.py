"""Run `vllm serve` (the OpenAI-compatible server) as child processes on loopback.

`python -m vllm.entrypoints.cli.main serve` is what the `vllm` command runs, with the interpreter
of the engine's own environment.

The worker never imports vLLM: the server runs with the interpreter `VLLM_PYTHON` names (its own
environment), its flags come from `argv.launch_argvs`, and its log is read line by line for the
facts a user needs to tell one worker's engine from another's (`logs`). A watcher notices when a
process exits or the server stops answering, so the pages in flight fail at once instead of
hanging.

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
import logging
import os
import shlex
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from ...errors import ConfigError, EngineError
from ...loopback import port_taken, private_port
from ..families import Family, detect
from ..model_download import ensure_model
from ..model_files import ModelFiles
from .argv import ServeSpec, engine_env, launch_argvs
from .caches import VolumeCache, cache_key, seed, vllm_cache_root
from .logs import (
    StartLog,
    address_in_use,
    autotune_verdict,
    exit_reason,
    facts_in,
    redone_on_warm_caches,
)

log = logging.getLogger(__name__)

HEALTH_INTERVAL_S = 5.0  # between health checks, and the time one check may take
HEALTH_FAILURES_FATAL = 3  # consecutive failed checks: a hung server is given up within 30 s
# Starts tried when a port picked as free was taken before vLLM bound it.
START_ATTEMPTS = 3
# Run in the engine's interpreter before vLLM: ask the kernel to send SIGTERM to the server when
# the worker dies, even by SIGKILL (the setting survives exec), then become the server.
_LAUNCH = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM); "
    "os.getppid() == int(sys.argv[1]) or sys.exit(70); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
)
LOG_TAIL_LINES = 60
# Asked of the engine's interpreter for the front ends and the caches' key: its vLLM, without
# importing it; by its package metadata, else (a bundle of unpacked wheels has none) by the
# `_version.py` its build writes beside it; no vLLM at all, `NO_VLLM` and the interpreter's path.
NO_VLLM = "no vllm:"
_VLLM_VERSION = f"""
import importlib.metadata as m, importlib.util, pathlib, re, sys
try:
    print(m.version("vllm"))
except m.PackageNotFoundError:
    spec = importlib.util.find_spec("vllm")
    if spec is None:
        print({NO_VLLM!r}, sys.executable)
        sys.exit()
    file = pathlib.Path(spec.origin).with_name("_version.py") if spec.origin else None
    text = file.read_text() if file and file.is_file() else ""
    found = re.search(r"__version__ = version = '([^']+)'", text)
    print(found.group(1) if found else "")
"""


class _PortTaken(Exception):
    """A child exited saying its address was in use."""


@dataclass
class Child:
    """One process vLLM runs as, and the task that reads its log."""

    role: str  # "server" (answers HTTP) or "engine" (the headless launcher of a split start)
    argv: list[str]
    proc: asyncio.subprocess.Process | None = None
    reader: asyncio.Task[None] | None = None


@dataclass(frozen=True)
class StartFacts:
    """What a start of the server says of the engine, built once it answers: the engine facts'
    server part (`as_json`, under the names the bench, the GPU check and the docs read)."""

    vllm_version: str | None  # as the server's /version says
    spawn_to_healthy_s: float
    kv_cache_dtype: str
    data_parallel_size: int
    tensor_parallel_size: int
    argv: list[str]  # the server's, after its interpreter
    split_start: bool
    fork_server: bool
    api_server_count: int
    renderer_num_workers: int
    start_mode: str
    max_num_batched_tokens: int
    triton_autotune: str
    pid: int | None
    cold_start: dict[str, Any]  # the start by vLLM's log (`StartLog.facts`)
    caches: dict[str, Any]  # the compile caches: their state, folder and what the seed added
    logged: dict[str, str]  # what vLLM's log stated (`logs.facts_in`), the first of each
    downloaded: dict[str, Any] | None = None  # the weights, where fetched or found at start
    download_s: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The facts as the engine facts carry them: the log's beside the others, the version
        left to the engine facts' own field, the download only where there was one."""
        out = asdict(self)
        logged, _ = out.pop("logged"), out.pop("vllm_version")
        if self.downloaded is None:
            del out["downloaded"], out["download_s"]
        return logged | out


class VllmServer:
    """The engine server as children of this worker: they die with the worker, and the worker
    never talks to a server it did not start. Nothing runs and no port is taken until `start`."""

    name = "vllm"
    owned = True

    def __init__(
        self,
        spec: ServeSpec,
        files: ModelFiles,
        *,
        family: Family | None = None,
        pick_port: Callable[[], int] = private_port,
    ) -> None:
        self.spec = spec
        self.files = files
        self.family = family  # what the command line was built for
        self._pick_port = pick_port
        self.base_url = ""  # known once started
        self.children: list[Child] = []
        self.logged: dict[str, str] = {}  # facts vLLM's log stated, the first of each
        self.caches: dict[str, Any] = {}  # the compile caches' state, for the engine facts
        self._served_version: str | None = None  # as /version answered
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.downloaded: dict[str, Any] | None = None
        self.cache: VolumeCache | None = None  # the compile caches on the network volume
        self.cache_env: dict[str, str] = {}
        self.start_log = StartLog()
        self._t_spawn = 0.0
        self._vllm_version: str | None = None  # the engine's, read once at start
        self._autotune_before: frozenset[str] = frozenset()  # FlashInfer's results at spawn
        self.failure: str | None = None
        self._failed = asyncio.Event()  # set once `failure` says why the server is gone
        self._watcher: asyncio.Task[None] | None = None

    @property
    def proc(self) -> asyncio.subprocess.Process | None:
        """The process that answers HTTP."""
        return self.children[0].proc if self.children else None

    def _exited(self) -> Child | None:
        return next((c for c in self.children if c.proc and c.proc.returncode is not None), None)

    async def start(self) -> StartFacts:
        """Spawn the server and wait until /health answers; returns facts about the start."""
        vllm = self.spec.vllm
        await self._size_for_engine()  # before the download: an interpreter without vLLM is said
        t_download = time.perf_counter()
        self.downloaded = await ensure_model(self.files, vllm.vllm_python)
        download_s = round(time.perf_counter() - t_download, 2)
        if self.downloaded is not None:
            self._check_family()
        t0 = time.perf_counter()
        for attempt in range(1, START_ATTEMPTS + 1):
            await self._prepare_caches()  # again after a failed attempt discarded its build
            port = vllm.vllm_port or self._pick_port()
            if vllm.vllm_port and port_taken(port):
                raise EngineError(
                    f"port {port} (VLLM_PORT) is already taken by another process, perhaps an "
                    "engine left over from an earlier worker; stop it, or set VLLM_PORT=0 to pick "
                    "a free port",
                    fatal=True,
                )
            self.base_url = f"http://127.0.0.1:{port}"
            argvs = launch_argvs(self.spec, port, self._pick_port())
            self.children = [Child(role, argv) for role, argv in argvs.items()]
            self.tail.clear()
            self._autotune_before = _autotune_files(self.child_env())
            self.start_log, self._t_spawn = StartLog(), time.perf_counter()
            try:
                await self._start_children(t0 + vllm.vllm_startup_timeout_s)
                break
            except _PortTaken as exc:
                if vllm.vllm_port or attempt == START_ATTEMPTS:
                    raise EngineError(str(exc), fatal=True) from None
                log.warning("%s; starting again on other ports", exc)
        self._watcher = asyncio.create_task(self._watch())
        spawn_to_healthy_s = round(time.perf_counter() - t0, 2)
        # as vLLM (0.24 on) reads it: set by TRITON_AUTOTUNE, or by hand in the environment
        forced = self.child_env().get("VLLM_TRITON_FORCE_FIRST_CONFIG", "").strip().lower()
        split = len(self.children) > 1
        facts = StartFacts(
            vllm_version=self._served_version,
            spawn_to_healthy_s=spawn_to_healthy_s,
            kv_cache_dtype=self.spec.kv_cache_dtype,
            data_parallel_size=self.spec.data_parallel_size,
            tensor_parallel_size=vllm.tensor_parallel_size,
            argv=self.children[0].argv[1:],
            split_start=split,
            fork_server=split and vllm.vllm_fork_server,
            api_server_count=self.spec.api_server_count,
            renderer_num_workers=self.spec.renderer_num_workers,
            start_mode=self.spec.start_mode.value,
            max_num_batched_tokens=self.spec.max_num_batched_tokens,
            triton_autotune="off (first valid config)" if forced in ("1", "true") else "on",
            pid=self.proc.pid if self.proc else None,
            cold_start=self._cold_start(),
            caches=dict(self.caches),
            logged=dict(self.logged),
            downloaded=self.downloaded,
            download_s=download_s if self.downloaded is not None else None,
        )
        log.info("engine start, by vLLM's log: %s", self.start_log.summary())
        return facts

    async def _size_for_engine(self) -> None:
        """Read the engine's vLLM once and size the front ends for it (how they start and
        preprocess differs between releases)."""
        if self._vllm_version is None:
            self._vllm_version = await _engine_vllm_version(self.spec.vllm.vllm_python)
            self.spec = self.spec.on_vllm(self._vllm_version)
            log.info(
                "vLLM %s: %d API server(s), %d renderer thread(s) each",
                self._vllm_version,
                self.spec.api_server_count,
                self.spec.renderer_num_workers,
            )

    def _cold_start(self) -> dict[str, Any]:
        """The start by vLLM's log, with what FlashInfer's results file says and, on caches an
        earlier start completed, what was done again that they should have spared."""
        start = self.start_log
        file = start.autotune_file
        path = Path(file).resolve() if file else None
        start.flashinfer_autotune = autotune_verdict(
            file,
            start.autotune_off,
            there_before=str(path) in self._autotune_before,
            there_now=bool(path and path.is_file()),
        )
        facts = start.facts()
        reused = self.caches.get("state") == "reused"
        if reused and (redone := redone_on_warm_caches(facts)):
            facts["redone_on_warm_caches"] = redone
            log.warning("the engine's caches were whole, yet it did again: %s", redone)
        return facts

    async def ready(self) -> dict[str, Any] | None:
        """The engine served a real page: its compile caches are whole, and are published;
        returns their state now (None without a volume's caches)."""
        if self.cache is None:
            return None
        state = await asyncio.to_thread(self.cache.publish)
        log.info("compile caches %s: %s", state, self.cache.published)
        self.caches = {"state": state, "folder": str(self.cache.published)}
        if self.cache.seeded:  # what the image's seed added, still said once published
            self.caches["seeded"] = self.cache.seeded
        return dict(self.caches)

    async def _prepare_caches(self) -> None:
        """Point the compile caches at the network volume, in the folder of this start's key;
        none without a volume, or when VLLM_CACHE_ROOT was set by hand (the user's choice)."""
        volume = self.files.volume
        image_seed = Path(self.spec.vllm.vllm_cache_seed)
        by_hand = "VLLM_CACHE_ROOT" in os.environ
        if not volume.is_dir():
            self.caches = {"state": "the container's own (no network volume)"}
            if not by_hand and (
                seeded := await asyncio.to_thread(seed, image_seed, vllm_cache_root(os.environ))
            ):
                self.caches["seeded"] = seeded
            return
        if by_hand:
            self.caches = {"state": "as VLLM_CACHE_ROOT and the others were set"}
            return
        if self.cache is None:
            key = cache_key(self.spec, self._vllm_version or "unknown", os.environ)
            self.cache = VolumeCache(volume / "vllm-cache", key, seed_from=image_seed)
        folder = await asyncio.to_thread(self.cache.prepare)
        self.cache_env = self.cache.env(folder)
        state = (
            "building" if self.cache.building else ("private" if self.cache.private else "reused")
        )
        self.caches = {"state": state, "folder": str(folder)}
        if self.cache.seeded:
            self.caches["seeded"] = self.cache.seeded

    def _check_family(self) -> None:
        """A model downloaded at start was told by its name alone: its config must agree."""
        if self.family is None or self.files.settings.model_family:
            return
        home = self.downloaded or {}
        files = self.files
        if "home" in home:
            files = ModelFiles(files.settings.model_copy(update={"hf_home": home["home"]}))
        config = files.config()
        found = detect(config, files.name).family if config else None
        if found is not None and found.name != self.family.name:
            raise ConfigError(
                f"the model {files.name} is of the {found.name} family by its config.json, but "
                f"the worker was set up for {self.family.name} (by its name); set "
                f"MODEL_FAMILY={found.name}"
            )

    async def _start_children(self, deadline: float) -> None:
        for child in self.children:
            await self._spawn(child)
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                if exited := self._exited():
                    await self._failed_start(exited)
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(self.base_url + "/health")).status_code == 200:
                        break
                if time.perf_counter() > deadline:
                    await self.stop()
                    raise EngineError(
                        "the vLLM server was not healthy within "
                        f"{self.spec.vllm.vllm_startup_timeout_s:g} s "
                        f"(VLLM_STARTUP_TIMEOUT_S); last log lines:\n{self.log_tail()}",
                        fatal=True,
                    )
                await asyncio.sleep(0.5)
            with contextlib.suppress(httpx.HTTPError, ValueError):
                version = (await client.get(self.base_url + "/version")).json()
                self._served_version = version.get("version")
        if exited := self._exited():  # healthy, but not ours: it exited meanwhile
            await self._failed_start(exited)

    async def _failed_start(self, exited: Child) -> None:
        await self._read_to_end(exited)
        await self.stop()
        reason = self._exit_reason("while starting", exited)
        if address_in_use(list(self.tail)):
            raise _PortTaken(reason)
        raise EngineError(reason, fatal=True)

    async def _spawn(self, child: Child) -> None:
        log.info("starting engine %s: %s", child.role, shlex.join(child.argv))
        python, *rest = child.argv
        env = self.child_env()
        if child.role == "engine":  # fork the engine core: it has vLLM imported already
            env.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "fork")
        try:
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
        except OSError as exc:  # no such interpreter, or not one this worker may run
            await self.stop()
            raise ConfigError(
                f"VLLM_PYTHON={python!r}: it cannot be run ({exc.strerror or exc}); accepted: "
                "the interpreter of the environment that has vLLM installed"
            ) from None
        child.reader = asyncio.create_task(self._read_log(child.proc))

    @staticmethod
    async def _read_to_end(child: Child) -> None:
        """Let the log reader take what an exited child wrote last (its reason to exit). What
        is left of its process group is ended after a moment: a fork server still importing
        vLLM holds the log's pipe open, and the reader would wait on it to the end."""
        if child.reader is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(child.reader), 1)
            return
        if child.proc is not None:  # its own group (start_new_session); what it wrote stays
            _signal_groups([child.proc.pid], signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(child.reader), 5)

    def child_env(self) -> dict[str, str]:
        """The server's environment: ours, the hub settings, and a compile cache on the network
        volume when one is mounted, so the next cold start reuses the kernels this one compiled
        (DeepGEMM's among them: minutes of JIT on the first start with FP8 weights)."""
        model = self.files.settings
        env = dict(os.environ) | {
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1" if model.hf_hub_offline else "0",
        }
        if model.hf_home:
            env["HF_HOME"] = model.hf_home
        if self.downloaded is not None:  # found or downloaded at start: read offline
            env["HF_HUB_OFFLINE"] = "1"
            if "hub_cache" in self.downloaded:  # RunPod's model cache
                env["HF_HUB_CACHE"] = self.downloaded["hub_cache"]
            else:
                env["HF_HOME"] = self.downloaded["home"]
        for name, value in (engine_env(self.spec.vllm) | self.cache_env).items():
            env.setdefault(name, value)
        return env

    async def _read_log(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            self.start_log.line(line, time.perf_counter() - self._t_spawn)
            for name, value in facts_in(line).items():
                self.logged.setdefault(name, value)
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
                    self._failed.set()
                    log.error(self.failure)
                    await self.stop()
                    return
        if self.failure is None:
            await self._read_to_end(exited)
            self.failure = self._exit_reason("while serving", exited)
            self._failed.set()
            log.error("%s\n%s", self.failure, self.log_tail())
            await self.stop()  # the other process of a split start is no use alone

    def _exit_reason(self, when: str, child: Child | None = None) -> str:
        child = child or self.children[0]
        code = child.proc.returncode if child.proc else None
        return exit_reason(child.role, when, code, list(self.tail))

    async def gone_after_error(self) -> bool:
        """After a failed request: did the server go away (give it a moment to exit)? When it
        did, `failure` says why by the time this returns."""
        if self.failure:
            return True
        if not await self._any_exit(3):
            return False
        # the watcher reads the exited child's last lines, then records why it exited
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._failed.wait(), 10)
        return True

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(list(self.tail)[-lines:])

    def warmup_failure(self, exc: EngineError) -> EngineError:
        """With its log's last lines: the server is ours, and its log says why."""
        return EngineError(
            f"warm-up page failed: {exc}\nlast engine log lines:\n{self.log_tail()}", fatal=True
        )

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
        if self.cache is not None:  # a build the engine never finished is no cache
            await asyncio.to_thread(self.cache.discard)


async def _engine_vllm_version(python: str) -> str:
    """The vLLM version of the engine's environment, as its package metadata says; "unknown"
    when it cannot be read, and ConfigError when the interpreter has no vLLM at all."""
    try:
        proc = await asyncio.create_subprocess_exec(
            python,
            "-c",
            _VLLM_VERSION,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    except (OSError, TimeoutError):
        return "unknown"
    said = out.decode().strip()
    if said.startswith(NO_VLLM):
        raise ConfigError(no_vllm(python, said.removeprefix(NO_VLLM).strip()))
    return said or "unknown"


def no_vllm(python: str, executable: str) -> str:
    where = f" ({executable})" if executable and executable != python else ""
    return (
        f"the GPU engine cannot start: vLLM is not installed for VLLM_PYTHON={python!r}{where}; "
        "set VLLM_PYTHON to the interpreter of the environment that has vLLM, or ENGINE=rapidocr "
        "for the CPU engine, which needs no GPU"
    )


def _autotune_files(env: Mapping[str, str]) -> frozenset[str]:
    """FlashInfer's autotune results under the cache vLLM will use (where 0.26 and 0.32 write
    them), as they are before a start."""
    root = env.get("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR")
    folder = Path(root).expanduser() if root else vllm_cache_root(env) / "flashinfer_autotune_cache"
    try:
        return frozenset(str(p.resolve()) for p in folder.rglob("autotune_configs*.json"))
    except OSError:
        return frozenset()


def _signal_groups(pgids: list[int], sig: int) -> bool:
    """Send `sig` to each process group; whether any of them still had a process."""
    found = False
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
            found = True
    return found
