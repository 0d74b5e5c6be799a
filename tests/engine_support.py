"""The real vLLM server (CPU build, .venv-engine) serving a tiny Qwen3-VL model made here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"
SERVER_PIXELS = 1_000_000


def engine_python() -> Path:
    if not ENGINE_PYTHON.exists():
        pytest.fail("the engine environment .venv-engine is missing; `make test` creates it")
    return ENGINE_PYTHON


def make_tiny_model(out: Path) -> Path:
    subprocess.run(
        [str(engine_python()), str(ROOT / "tests/support/make_tiny_qwen3_vl.py"), str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def engine_env(model_dir: Path, port: int, **extra: str) -> dict[str, str]:
    """Settings for ENGINE=vllm on this CPU: small limits, RAM for the KV cache, no hub."""
    env = {
        "ENGINE": "vllm",
        "MODEL_NAME": str(model_dir),
        "SERVED_MODEL_NAME": "tiny",
        "VLLM_PYTHON": str(engine_python()),
        "VLLM_PORT": str(port),
        "KV_CACHE_DTYPE": "auto",  # fp8 KV needs AVX-512 or AMX on the CPU backend
        "MAX_MODEL_LEN": "2048",
        "MAX_NUM_SEQS": "8",
        "MAX_NUM_BATCHED_TOKENS": "4096",
        "GPU_MEMORY_UTILIZATION": "0.2",  # on the CPU backend: the share of RAM
        "ENFORCE_EAGER": "true",
        "MAX_PIXELS": str(SERVER_PIXELS),
        "MAX_TOKENS": "24",
        "MAX_ATTEMPTS": "3",
        "VLLM_STARTUP_TIMEOUT_S": "400",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
    }
    env.update(extra)
    return env
