"""The real vLLM server (CPU build, .venv-engine) serving a tiny Qwen3-VL model made here."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from vlm_ocr.settings import Settings

from . import ROOT

ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"
SERVER_PIXELS = 1_000_000
# What the engine's server reads from its environment on vLLM's CPU build (not settings).
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def engine_python() -> Path:
    if not ENGINE_PYTHON.exists():
        pytest.fail("the engine environment .venv-engine is missing; `make test` creates it")
    return ENGINE_PYTHON


def make_tiny_model(out: Path, arch: str = "qwen3_vl") -> Path:
    """A tiny random model of `arch` (qwen3_vl, or qwen2_5_vl: olmOCR's) in `out`."""
    subprocess.run(
        [str(engine_python()), str(ROOT / "tests/support/make_tiny_model.py"), str(out), arch],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def engine_env(model_dir: Path, port: int = 0, **extra: str) -> dict[str, str]:
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
        "HF_HUB_OFFLINE": "1",
        **SERVER_ENV,
    }
    env.update(extra)
    return env


def settings_from(env: dict[str, str], **extra: Any) -> Settings:
    """The settings an environment like `engine_env`'s gives, and `extra`."""
    return Settings.from_env(env).with_(**extra)
