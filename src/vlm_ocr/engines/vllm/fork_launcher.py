"""vLLM's command line with the processes vLLM starts for itself forked from a fork server (run by
path with vLLM's interpreter: `python -P fork_launcher.py serve MODEL ...`). The split start runs
its headless engine launcher so, and its API-server process so when it has several API servers,
or on vLLM 0.32 and later one.

Why: vLLM starts those processes with `spawn` wherever a fork is unsafe, and each imports torch
and vLLM all over again (about 20 s a process on an H200 host), after its parent has imported them.
The engine core is spawned for the Qwen3.5-based families, whose config imports gated-delta-net
kernels that ask the GPU its name as they are imported (a process that has touched the CUDA
driver cannot fork safely); several API servers are always spawned. Here a fork server is started
first, before anything touches the GPU, and imports the child's modules while this process
imports vLLM and builds its config; the children are then forked from it, ready. Like a spawned
process, each gets this process's environment as it is at its start.

One API server vLLM runs in the process it started as, which builds its tokenizer and multimodal
processor before the engine core's handshake, and the engine core waits on that before it loads
the model; with several, their parent handshakes at once while they start. On an H100 the engine
core's start and handshake took 4.75-8 s beside one API server and 0.13-2 s beside four. So here
one is started as several are (vLLM 0.32's `serve`): a forked child, the handshake in this process
(0.12 s so, on an H100).

This file imports only the standard library and vLLM: it runs in vLLM's environment, not the
worker's. Where vLLM has not got a hook it patches, that child starts as vLLM starts it (said on
stderr).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from typing import Any

# What the fork server imports before the first child is forked from it, by this process's role.
# The engine core's GPU worker (its model runner, sampler and attention backends) is imported here
# too: in the forked engine core it was seconds of the start, here it overlaps the launcher's own
# imports and config. It loads the CUDA driver's library but makes no CUDA context: a child forked
# after it used the GPU (dev/gpu/fork_probe.py on an H200). FlashInfer must not be: importing it
# initializes CUDA, and an engine core forked after it died ("Cannot re-initialize CUDA in forked
# subprocess").
ENGINE_CORE = ("vllm.v1.engine.core", "vllm.v1.worker.gpu_worker")
API_SERVER = ("vllm.entrypoints.launchers.api_server.entry",)
FORKSERVER = multiprocessing.get_context("forkserver")


class LauncherEnvProcess(FORKSERVER.Process):
    """A process forked from the fork server that runs with this process's environment at
    `start()`, as a spawned process would (vLLM sets variables around a child's start)."""

    def start(self) -> None:
        self._launcher_env = dict(os.environ)
        super().start()

    def run(self) -> None:
        # changed key by key: emptying the C environment first leaves setproctitle (vLLM names
        # its processes VLLM::...) nothing to write the new title over
        for key in os.environ.keys() - self._launcher_env.keys():
            del os.environ[key]
        os.environ.update({k: v for k, v in self._launcher_env.items() if os.environ.get(k) != v})
        # prometheus_client picks its kind of value when imported, in the fork server, before
        # vLLM set PROMETHEUS_MULTIPROC_DIR for its API servers: pick again, so each server's
        # metrics go to that folder and /metrics sums them, as in spawned servers
        values = sys.modules.get("prometheus_client.values")
        if values is not None:
            values.ValueClass = values.get_value_class()
        super().run()


class ForkServerContext:
    """The fork server's multiprocessing context with `LauncherEnvProcess` as its Process."""

    Process = LauncherEnvProcess

    def __getattr__(self, name: str) -> Any:
        return getattr(FORKSERVER, name)


class SpawnAsForkServer:
    """`multiprocessing` as vLLM's API-server manager sees it: asked for the spawn context, it
    gives the fork server's."""

    def __getattr__(self, name: str) -> Any:
        return getattr(multiprocessing, name)

    @staticmethod
    def get_context(method: str | None = None) -> Any:
        return ForkServerContext() if method == "spawn" else multiprocessing.get_context(method)


def unpatched(what: str) -> None:
    print(f"fork_launcher: {what}; it starts as vLLM starts it", file=sys.stderr, flush=True)


async def _finished() -> None:
    """What `uvloop.run` is handed once the API server has run: nothing left to do."""


def one_api_server_as_several() -> None:
    """`vllm serve`'s branch for one API server (`run_server`, in this process) made its branch
    for several, with one: the server's child builds its processor while this process
    handshakes with the engine core."""
    import vllm.entrypoints.cli.serve as serve

    several = getattr(serve, "run_multi_api_server", None)
    if not callable(getattr(serve, "run_server", None)) or not callable(several):
        unpatched("this vLLM's serve has no run_server or run_multi_api_server: one API server")
        return

    def run_server(args: Any, **_: Any) -> Any:
        args.api_server_count = 1  # `serve` set None for its own process
        several(args)  # until the API server ends, as `run_server` would run
        return _finished()

    serve.run_server = run_server


def main() -> None:
    headless = "--headless" in sys.argv
    FORKSERVER.set_forkserver_preload(["__main__", *(ENGINE_CORE if headless else API_SERVER)])
    from multiprocessing import forkserver

    forkserver.ensure_running()  # imports the preload in its own process, beside this one
    import vllm.v1.engine.utils as engine_utils
    import vllm.v1.utils as v1_utils

    if callable(getattr(engine_utils, "get_mp_context", None)):  # the engine core's context
        engine_utils.get_mp_context = ForkServerContext
    elif headless:
        unpatched("this vLLM has no vllm.v1.engine.utils.get_mp_context: the engine core")
    if getattr(v1_utils, "multiprocessing", None) is multiprocessing:  # the API servers'
        v1_utils.multiprocessing = SpawnAsForkServer()  # type: ignore[assignment]
    elif not headless:
        unpatched("this vLLM starts its API servers otherwise")
    if not headless and sys.argv[1:2] == ["serve"]:
        one_api_server_as_several()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
