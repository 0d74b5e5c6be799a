"""Compiled kernels kept on the network volume, so the next worker's cold start reuses them.

What vLLM compiles and tunes at start goes to six caches, all pointed under one folder per key:

    <volume>/vllm-cache/<model>-<digest>/vllm        vLLM's torch.compile artifacts (and, on vLLM
                                                     0.32, FlashInfer's autotune results)
                                         inductor    Inductor's FX-graph and autotune caches
                                         triton      Triton's kernels and autotune results
                                                     (TRITON_CACHE_AUTOTUNING: the GDN layers')
                                         flashinfer  FlashInfer's JIT kernels
                                         deep_gemm   DeepGEMM's JIT kernels (FP8 weights)
                                         cuda        the driver's PTX JIT

The key is a digest of everything that changes what is compiled: the model and its revision, the
GPUs, the vLLM version, the server's flags (ports aside) and vLLM's own `VLLM_*` variables, so a
different model, GPU, version or setting never reads another's entries.

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
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .argv import ServeSpec, server_argv

# The variable each cache reads, and its folder under the key.
CACHES = {
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "DG_JIT_CACHE_DIR": "deep_gemm",
    "CUDA_CACHE_PATH": "cuda",
}
# Variables that only say where things are or how much is logged: no part of the key.
NOT_IN_KEY = {"VLLM_CACHE_ROOT", "VLLM_PORT", "VLLM_HOST_IP", "VLLM_LOGGING_LEVEL"}
# The server's flags that differ from start to start without changing what is compiled.
_PORT_FLAGS = ("--port", "--host", "--data-parallel-rpc-port", "--data-parallel-address")
# A folder left unmarked this long was left by a worker that died: it is removed.
STALE_BUILD_S = 24 * 3600
# The marker of a whole folder.
COMPLETE = ".complete"


def cache_key(spec: ServeSpec, vllm_version: str, environ: Mapping[str, str]) -> str:
    """`<model>-<digest>`: the folder name of the caches for one way of starting vLLM."""
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
    variables = {k: v for k, v in environ.items() if k.startswith("VLLM_") and k not in NOT_IN_KEY}
    doc = {
        "flags": flags,
        "gpus": spec.gpus,
        "vllm": vllm_version,
        "env": sorted(variables.items()),
    }
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(spec.model).name)[:48]
    return f"{name}-{digest}"


@dataclass
class VolumeCache:
    """The caches of one start: the key's folder (found whole, or built here), or a private
    folder beside it while another worker builds the key's."""

    root: Path
    key: str
    building: Path | None = None  # the key's folder, being built by this start
    private: Path | None = None  # this start's own, while another builds the key's

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
            return self.published
        try:
            self.published.mkdir()  # the first start of this key builds it, in place
        except FileExistsError:
            self.private = self.root / f"{self.key}.private-{uuid.uuid4().hex[:12]}"
            self.private.mkdir()
            return self.private
        self.building = self.published
        return self.building

    def env(self, folder: Path) -> dict[str, str]:
        return {name: str(folder / sub) for name, sub in CACHES.items()} | {
            "TRITON_CACHE_AUTOTUNING": "1"  # the GDN layers' autotuning, kept too
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
