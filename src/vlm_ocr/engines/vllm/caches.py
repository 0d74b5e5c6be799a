"""Compiled kernels kept on the network volume, so the next worker's cold start reuses them.

What vLLM compiles, tunes and measures at start goes to six caches, all pointed under one folder
per key:

    <volume>/vllm-cache/<model>-<digest>/vllm        vLLM's torch.compile artifacts (the AOT
                                                     compiled model and its Inductor cache),
                                                     FlashInfer's autotune results, the memory
                                                     profiling's result (`startup_plan/`) and the
                                                     model classes' inspection (`modelinfos/`)
                                         inductor    Inductor's FX-graph and autotune caches
                                         triton      Triton's kernels and autotune results
                                                     (TRITON_CACHE_AUTOTUNING: the GDN layers')
                                         flashinfer  FlashInfer's JIT kernels
                                         deep_gemm   DeepGEMM's JIT kernels (FP8 weights)
                                         cuda        the driver's PTX JIT

The key is a digest of everything that changes what is compiled or how much memory the engine
takes: the model and its revision, the GPUs, the vLLM version, the server's flags (ports aside:
every size, the memory share, the KV-cache dtype, the parallelism and the family's flags among
them), vLLM's own `VLLM_*` variables and the allocator's, so a different model, GPU, version or
setting never reads another's entries. That is what makes it safe to keep the memory profiling's
result (`VLLM_ENABLE_STARTUP_PLAN`): vLLM's own fingerprint of it leaves out
`--gpu-memory-utilization`, but a folder is never shared across values of it. (vLLM checks
besides that the GPU has as much free memory as when the value was measured.)

The model classes' inspection (vLLM imports the model's module in a subprocess to learn what it
supports, and keeps the answer under `modelinfos/`, keyed by the module's source) is done when
the image is built; its entries are copied into each new folder (`seed`), so no start pays it.

Workers share a volume and may start at once. vLLM rewrites its compile index in place (a reader
can see half a file) and writes absolute paths into it (a folder cannot be built elsewhere and
moved), so a folder is read only once it is whole: the first start of a key creates the key's
folder (an atomic mkdir), builds in it and marks it complete (an atomic rename of the marker)
once the engine has served its warm-up page. A start that finds the marker uses the folder as it
is (what a run adds later, Triton and Inductor write atomically, entry by entry); one that finds
the folder without it (another worker is building it) builds in a private folder of its own,
removed when it stops. A folder left unmarked by a worker that died is removed a day later.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...settings import VllmSettings
from .argv import ServeSpec, engine_env, server_argv

log = logging.getLogger(__name__)

# The variable each cache reads, and its folder under the key.
CACHES = {
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "DG_JIT_CACHE_DIR": "deep_gemm",
    "CUDA_CACHE_PATH": "cuda",
}
# vLLM's variables that only say where things are, how much is logged, whether a failed load of
# the compiled model fails the start (a check) or whether the memory measured is kept (vLLM
# leaves those two out of its own compile hash): no part of the key. Nor the worker's own
# settings named VLLM_* (its interpreter, port, start-up), which vLLM does not read: those that
# change the server's flags are in the key through the flags.
NOT_IN_KEY = {
    "VLLM_CACHE_ROOT",
    "VLLM_PORT",
    "VLLM_HOST_IP",
    "VLLM_LOGGING_LEVEL",
    "VLLM_FORCE_AOT_LOAD",
    "VLLM_ENABLE_STARTUP_PLAN",
    "VLLM_NO_USAGE_STATS",
} | {name.upper() for name in VllmSettings.model_fields if name.startswith("vllm_")}
# Variables beside vLLM's that change the memory the engine takes (so the profiled KV cache).
MEMORY_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
# What a cache folder is seeded with from the image (entries keyed by their own content).
SEEDED = ("modelinfos",)
# The server's flags that differ from start to start without changing what is compiled.
_PORT_FLAGS = ("--port", "--host", "--data-parallel-rpc-port", "--data-parallel-address")
# A folder left unmarked this long was left by a worker that died: it is removed.
STALE_BUILD_S = 24 * 3600
# The marker of a whole folder.
COMPLETE = ".complete"


def cache_key(spec: ServeSpec, vllm_version: str, environ: Mapping[str, str]) -> str:
    """`<model>-<digest>`: the folder name of the caches for one way of starting vLLM (its
    flags, GPUs, version, and vLLM's variables: the worker's own and those of `environ`)."""
    argv = [*server_argv(spec, 0), "--data-parallel-size", str(spec.data_parallel_size)]
    flags, skip = [], False
    for arg in argv[1:]:  # not the interpreter's path
        if skip:
            skip = False
            continue
        if arg in _PORT_FLAGS:
            skip = True
            continue
        flags.append(arg)
    variables = {
        k: v
        for k, v in (engine_env(spec.vllm) | dict(environ)).items()
        if (k.startswith("VLLM_") and k not in NOT_IN_KEY) or k in MEMORY_VARIABLES
    }
    doc = {
        "flags": flags,
        "gpus": spec.gpus,
        "vllm": vllm_version,
        "env": sorted(variables.items()),
    }
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(spec.model).name)[:48]
    return f"{name}-{digest}"


def vllm_cache_root(environ: Mapping[str, str]) -> Path:
    """Where vLLM keeps its caches in this environment (its own rule: `VLLM_CACHE_ROOT`, else
    `vllm` under `XDG_CACHE_HOME` or `~/.cache`)."""
    if root := environ.get("VLLM_CACHE_ROOT"):
        return Path(root).expanduser()
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base).expanduser() / "vllm"


def seed(source: Path | None, vllm_root: Path) -> list[str]:
    """Copy the image's cache entries into a vLLM cache folder where it has none of that name:
    each written beside and renamed into place, so a start reading the folder meanwhile (another
    worker's) sees an entry whole or not at all. The entries copied, by name. A folder that
    cannot be written is left as it is: vLLM then does without (the seed only saves time)."""
    copied: list[str] = []
    for sub in SEEDED:
        source_dir = source / sub if source else None
        if source_dir is None or not source_dir.is_dir():
            continue
        target_dir = vllm_root / sub
        for entry in sorted(source_dir.iterdir()):
            target = target_dir / entry.name
            if not entry.is_file() or target.exists():
                continue
            part = target_dir / f".{entry.name}.{uuid.uuid4().hex[:8]}.part"
            try:
                target_dir.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(entry, part)
                os.replace(part, target)
            except OSError as exc:
                log.warning("the image's %s not copied to %s: %s", entry.name, target_dir, exc)
                with contextlib.suppress(OSError):
                    part.unlink()
                return copied
            copied.append(f"{sub}/{entry.name}")
    return copied


@dataclass
class VolumeCache:
    """The caches of one start: the key's folder (found whole, or built here), or a private
    folder beside it while another worker builds the key's."""

    root: Path
    key: str
    building: Path | None = None  # the key's folder, being built by this start
    private: Path | None = None  # this start's own, while another builds the key's
    seed_from: Path | None = None  # the image's entries every new folder is given
    seeded: list[str] | None = None  # what this start copied from them

    @property
    def published(self) -> Path:
        return self.root / self.key

    @property
    def whole(self) -> bool:
        return (self.published / COMPLETE).is_file()

    def prepare(self) -> Path:
        """The folder this start's caches go to."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._remove_stale_builds()
        if self.whole:
            folder = self.published
        else:
            try:
                self.published.mkdir()  # the first start of this key builds it, in place
                folder = self.building = self.published
            except FileExistsError:
                self.private = self.root / f"{self.key}.private-{uuid.uuid4().hex[:12]}"
                self.private.mkdir()
                folder = self.private
        # a folder whole before the image's seed existed gets it too: it only adds entries
        self.seeded = seed(self.seed_from, folder / CACHES["VLLM_CACHE_ROOT"])
        return folder

    def env(self, folder: Path) -> dict[str, str]:
        return {name: str(folder / sub) for name, sub in CACHES.items()} | {
            "TRITON_CACHE_AUTOTUNING": "1",  # the GDN layers' autotuning, kept too
            # the memory profiling's result kept and, on the next start, used instead of it
            "VLLM_ENABLE_STARTUP_PLAN": "1",
        }

    def publish(self) -> str:
        """After the engine served its warm-up page: mark the build whole. Says what became
        of the caches, for the engine facts."""
        if self.private is not None:
            return "built privately (another worker was building the same key)"
        if self.building is None:
            return "reused"
        marker = self.building / f"{COMPLETE}.{uuid.uuid4().hex[:8]}"
        marker.write_text(json.dumps({"completed": time.time()}))
        os.rename(marker, self.building / COMPLETE)
        self.building = None
        return "built and published"

    def discard(self) -> None:
        """The worker stops: a private folder goes, and so does a build the engine never
        finished (another start may build the key then)."""
        for folder in (self.private, self.building):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        self.private = self.building = None

    def _remove_stale_builds(self) -> None:
        now = time.time()
        for old in self.root.iterdir():
            if not old.is_dir() or (old / COMPLETE).is_file():
                continue
            with contextlib.suppress(OSError):
                if now - old.stat().st_mtime > STALE_BUILD_S:
                    shutil.rmtree(old, ignore_errors=True)
