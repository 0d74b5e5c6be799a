"""vLLM's headless engine launcher with its engine core forked from a fork server (run by path
with vLLM's interpreter: `python -P fork_launcher.py serve MODEL ... --headless`).

Why: building the config of a Qwen3.5-based model imports its gated-delta-net kernels, whose
module asks the GPU its name as it is imported; a process that has touched the CUDA driver cannot
fork safely, so vLLM spawns the engine core, which imports torch and vLLM all over again (about
20 s of every start of those families on an H200 host). Here a fork server is started first,
before anything touches the GPU, and imports the engine core's modules while the launcher imports
and builds its config; the engine core is then forked from it, ready. Like a spawned one, it gets
the launcher's environment as it is when the engine core is started.

This file imports only the standard library and vLLM: it runs in vLLM's environment, not the
worker's. Where vLLM has not got the hook it patches, it runs vLLM's own launcher unchanged.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from typing import Any

# What the fork server imports before the first engine core is forked from it
PRELOAD = ["__main__", "vllm.v1.engine.core"]
FORKSERVER = multiprocessing.get_context("forkserver")


class EngineCoreProcess(FORKSERVER.Process):
    """A process forked from the fork server that runs with the launcher's environment at
    `start()`, as a spawned process would (vLLM sets variables around the start)."""

    def start(self) -> None:
        self._launcher_env = dict(os.environ)
        super().start()

    def run(self) -> None:
        os.environ.clear()
        os.environ.update(self._launcher_env)
        super().run()


class ForkServerContext:
    """The fork server's multiprocessing context with `EngineCoreProcess` as its Process."""

    Process = EngineCoreProcess

    def __getattr__(self, name: str) -> Any:
        return getattr(FORKSERVER, name)


def main() -> None:
    FORKSERVER.set_forkserver_preload(PRELOAD)
    from multiprocessing import forkserver

    forkserver.ensure_running()  # imports PRELOAD in its own process, beside the launcher
    import vllm.v1.engine.utils as engine_utils

    if callable(getattr(engine_utils, "get_mp_context", None)):
        engine_utils.get_mp_context = ForkServerContext
    else:
        print(
            "fork_launcher: this vLLM has no vllm.v1.engine.utils.get_mp_context; "
            "its engine core starts as vLLM starts it",
            file=sys.stderr,
            flush=True,
        )
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
