"""A Worker from settings: which engine, which store. Used by the RunPod entry and the tools."""

from __future__ import annotations

import logging
from pathlib import Path

from ..engines.base import Engine
from ..engines.factory import make_engine
from ..errors import ConfigError
from ..settings import Settings
from ..storage import Bucket, BucketInputs, LocalStore, S3Store, Store
from .cpu_pool import CpuPool
from .worker import Worker

log = logging.getLogger(__name__)


def make_store(
    settings: Settings, out_dir: Path | None = None
) -> tuple[Store, BucketInputs | None]:
    """The result store and the reader of inputs named by key. Results go to the bucket when
    bucket settings are present, unless a local folder is asked for; keys are read from the
    bucket whenever one is configured."""
    bucket_settings = settings.bucket
    if not bucket_settings.configured:
        return local_store(out_dir, settings), None
    bucket = Bucket.from_settings(bucket_settings)
    if out_dir is not None:
        return local_store(out_dir, settings), BucketInputs(bucket)
    log.info("store: s3://%s/%s", bucket_settings.bucket_name, bucket_settings.bucket_prefix)
    return S3Store.from_settings(bucket_settings, bucket), BucketInputs(bucket)


def local_store(out_dir: Path | None, settings: Settings) -> LocalStore:
    """The results folder, made now: one that cannot be written refuses every job at start,
    not each page as it is stored."""
    root = out_dir or settings.job.output_dir
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".write-check"
        probe.write_bytes(b"")
        probe.unlink()
    except (OSError, ValueError) as exc:
        name = "the results folder" if out_dir else "OUTPUT_DIR"
        raise ConfigError(
            f"{name}={str(root)!r}: it cannot be written ({exc}); accepted: a folder this "
            "worker may create and write to, or bucket settings (BUCKET_NAME and its keys)"
        ) from None
    return LocalStore(root)


def build_worker(
    settings: Settings,
    engine: Engine | None = None,
    out_dir: Path | None = None,
    *,
    pool: CpuPool | None = None,
) -> Worker:
    """The worker the settings describe (its engine not started yet)."""
    store, inputs = make_store(settings, out_dir)
    return Worker(settings, engine or make_engine(settings), store, inputs=inputs, pool=pool)


async def start_worker(settings: Settings, out_dir: Path | None = None) -> Worker:
    worker = build_worker(settings, out_dir=out_dir)
    await worker.start()
    return worker
