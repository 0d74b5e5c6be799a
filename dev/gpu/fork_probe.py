"""Which of vLLM's modules a fork server may import before it forks an engine core, on the GPU host.

The worker's fork server (src/vlm_ocr/engines/vllm/fork_launcher.py) imports
`vllm.v1.engine.core` before it forks the engine core; the engine core then imports FlashInfer,
the CUTLASS DSL and the GPU worker's modules itself (about 10 s of a start, py-spy at 9e6e64a).
Importing them in the fork server too is safe only if none touches the CUDA driver when imported:
a process that has cannot fork a child that uses CUDA. For each module: import it in a fresh
process, say whether torch initialized CUDA or the driver library was loaded, then fork a child
that multiplies two matrices on the GPU and say whether it could.

    $VLLM_PYTHON dev/gpu/fork_probe.py [MODULE ...]     (after `. dev/gpu/env.sh`)
"""

from __future__ import annotations

import subprocess
import sys

MODULES = (
    "vllm.v1.engine.core",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu.model_runner",
    "vllm.v1.attention.backends.flashinfer",
    "flashinfer",
    "vllm.model_executor.models.qwen3_5",
)

_PROBE = """
import os, sys, time
t0 = time.perf_counter()
__import__(sys.argv[1])
took = time.perf_counter() - t0
import torch
maps = open("/proc/self/maps").read()
state = (f"imported in {took:.1f} s; torch CUDA initialized: {torch.cuda.is_initialized()}; "
         f"libcuda loaded: {'libcuda.so' in maps}")
pid = os.fork()
if pid == 0:
    try:
        a = torch.ones(64, 64, device="cuda")
        ok = float((a @ a).sum()) == 64 * 64 * 64
        os._exit(0 if ok else 1)
    except Exception as exc:
        print("child:", type(exc).__name__, str(exc)[:200], flush=True)
        os._exit(2)
_, status = os.waitpid(pid, 0)
print(state + f"; a forked child used the GPU: {os.waitstatus_to_exitcode(status) == 0}")
"""


def main(argv: list[str]) -> int:
    for module in argv or MODULES:
        out = subprocess.run(
            [sys.executable, "-c", _PROBE, module], capture_output=True, text=True, timeout=300
        )
        said = out.stdout.strip().splitlines() or out.stderr.strip().splitlines()[-1:]
        print(f"{module}: {' / '.join(said) or 'nothing said'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
