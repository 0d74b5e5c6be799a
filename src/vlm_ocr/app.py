"""Assemble a Worker from settings: which engine, which store. Used by the handler and the CLI."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .engines.base import Engine
from .settings import EngineKind, Settings
from .storage import LocalStore, S3Store, Store
from .worker import Worker

log = logging.getLogger(__name__)


def has_cuda_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or Path("/proc/driver/nvidia/gpus").is_dir()


def model_present(settings: Settings) -> bool:
    """A local model directory, or the hub id in the local Hugging Face cache."""
    if Path(settings.model_name).is_dir():
        return True
    hf_home = Path(settings.hf_home or Path.home() / ".cache" / "huggingface")
    cache = Path(os.environ.get("HF_HUB_CACHE", hf_home / "hub"))
    return (cache / f"models--{settings.model_name.replace('/', '--')}").is_dir()


def choose_engine_kind(settings: Settings) -> tuple[EngineKind, str]:
    """`auto` takes vLLM only when a CUDA GPU and a model are present; says why either way."""
    if settings.engine is not EngineKind.AUTO:
        return settings.engine, f"ENGINE={settings.engine.value}"
    gpu, model = has_cuda_gpu(), model_present(settings)
    if gpu and model:
        return EngineKind.VLLM, f"ENGINE=auto: CUDA GPU and model {settings.model_name} present"
    missing = " and ".join(
        what
        for what, ok in (("no CUDA GPU", gpu), (f"model {settings.model_name} not found", model))
        if not ok
    )
    return EngineKind.RAPIDOCR, f"ENGINE=auto: {missing}, so the CPU engine"


def make_engine(settings: Settings) -> Engine:
    kind, why = choose_engine_kind(settings)
    log.info("engine: %s (%s)", kind.value, why)
    if kind is EngineKind.RAPIDOCR:
        from .engines.rapidocr import RapidOcrEngine

        return RapidOcrEngine()
    from .engines.vllm_server import VllmServer
    from .engines.vlm import VlmEngine

    return VlmEngine(settings, VllmServer(settings) if kind is EngineKind.VLLM else None)


def make_store(settings: Settings, out_dir: Path | None = None) -> Store:
    """The bucket when bucket settings are present, unless a local folder is asked for."""
    if out_dir is None and settings.bucket_configured:
        if bool(settings.bucket_access_key_id) != bool(settings.bucket_secret_access_key):
            raise ValueError(
                "set both BUCKET_ACCESS_KEY_ID and BUCKET_SECRET_ACCESS_KEY, or neither"
            )
        log.info("store: s3://%s/%s", settings.bucket_name, settings.bucket_prefix)
        return S3Store.from_settings(settings)
    return LocalStore(out_dir or settings.output_dir)


async def start_worker(settings: Settings, out_dir: Path | None = None) -> Worker:
    worker = Worker(settings, make_engine(settings), make_store(settings, out_dir))
    await worker.start()
    return worker
