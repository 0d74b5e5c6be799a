"""Assemble a Worker from settings: which engine, which store. Used by the handler and the CLI."""

from __future__ import annotations

import logging
from pathlib import Path

from .engines.base import Engine
from .settings import EngineKind, Settings
from .storage import LocalStore, S3Store, Store
from .worker import Worker

log = logging.getLogger(__name__)


def choose_engine_kind(settings: Settings) -> EngineKind:
    """`auto` takes vLLM only when a CUDA GPU and a model are present."""
    if settings.engine is not EngineKind.AUTO:
        return settings.engine
    return EngineKind.RAPIDOCR


def make_engine(settings: Settings) -> Engine:
    kind = choose_engine_kind(settings)
    log.info("engine: %s (ENGINE=%s)", kind.value, settings.engine.value)
    if kind is EngineKind.RAPIDOCR:
        from .engines.rapidocr import RapidOcrEngine

        return RapidOcrEngine()
    raise ValueError(f"ENGINE={kind.value} is not available in this build")


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
