"""Assemble a Worker from settings: which engine, which store. Used by the handler and the CLI."""

from __future__ import annotations

import base64
import logging
import re
from pathlib import Path
from typing import Any

from .engines.base import Engine
from .render import is_image_file
from .settings import EngineKind, Settings
from .storage import Bucket, BucketInputs, LocalStore, S3Store, Store
from .worker import Worker

log = logging.getLogger(__name__)


def has_cuda_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or Path("/proc/driver/nvidia/gpus").is_dir()


def model_present(settings: Settings) -> bool:
    """A local model directory, or the hub id in the local Hugging Face cache."""
    if Path(settings.model_name).is_dir():
        return True
    hf_home = Path(settings.hf_home or Path.home() / ".cache" / "huggingface")
    cache = Path(settings.hf_hub_cache or hf_home / "hub")
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


def make_engine(
    settings: Settings, *, detection_order: bool = False, fixed_output_tokens: int | None = None
) -> Engine:
    """The engine `ENGINE` selects. The two options are for tools: the CPU engine's baseline
    reading order (`vlm-ocr eval`), and answers of a fixed length (`vlm-ocr bench`)."""
    kind, why = choose_engine_kind(settings)
    log.info("engine: %s (%s)", kind.value, why)
    if kind is EngineKind.RAPIDOCR:
        from .engines.rapidocr import RapidOcrEngine

        return RapidOcrEngine(detection_order=detection_order)
    from .engines.vllm_server import VllmServer, default_max_num_seqs, gpu_memory_gib
    from .engines.vlm import ExternalServer, VlmEngine

    if not settings.max_num_seqs:  # resolved once, for the server's flags and the worker alike
        memory = gpu_memory_gib(settings.tensor_parallel_size) if kind is EngineKind.VLLM else None
        seqs = default_max_num_seqs(memory)
        where = f"{memory:.0f} GiB of GPU memory" if memory else "no GPU to read"
        log.info("MAX_NUM_SEQS=%d (unset: the default for %s)", seqs, where)
        settings = settings.model_copy(update={"max_num_seqs": seqs})
    server = VllmServer(settings) if kind is EngineKind.VLLM else ExternalServer(settings)
    return VlmEngine(settings, server, fixed_output_tokens=fixed_output_tokens)


def make_store(
    settings: Settings, out_dir: Path | None = None
) -> tuple[Store, BucketInputs | None]:
    """The result store and the reader of inputs named by key. Results go to the bucket when
    bucket settings are present, unless a local folder is asked for; keys are read from the
    bucket whenever one is configured."""
    if not settings.bucket_configured:
        return LocalStore(out_dir or settings.output_dir), None
    if bool(settings.bucket_access_key_id) != bool(settings.bucket_secret_access_key):
        raise ValueError("set both BUCKET_ACCESS_KEY_ID and BUCKET_SECRET_ACCESS_KEY, or neither")
    bucket = Bucket.from_settings(settings)
    if out_dir is not None:
        return LocalStore(out_dir), BucketInputs(bucket)
    log.info("store: s3://%s/%s", settings.bucket_name, settings.bucket_prefix)
    return S3Store.from_settings(settings, bucket), BucketInputs(bucket)


def build_worker(
    settings: Settings, engine: Engine | None = None, out_dir: Path | None = None, **kw: Any
) -> Worker:
    """The worker the settings describe (its engine not started yet)."""
    store, inputs = make_store(settings, out_dir)
    return Worker(settings, engine or make_engine(settings), store, inputs=inputs, **kw)


async def start_worker(settings: Settings, out_dir: Path | None = None) -> Worker:
    worker = build_worker(settings, out_dir=out_dir)
    await worker.start()
    return worker


def job_for_file(path: Path, *, output_prefix: str | None = None, **options: Any) -> dict[str, Any]:
    """The job input that carries a local file, as a RunPod request would carry it."""
    source = {"base64": base64.b64encode(path.read_bytes()).decode(), "name": path.name}
    job: dict[str, Any] = {"images": [source]} if is_image_file(path) else {"pdf": source}
    job["output_prefix"] = output_prefix or (
        re.sub(r"[^A-Za-z0-9._-]+", "_", path.stem).strip("._-") or "file"
    )
    return job | {k: v for k, v in options.items() if v is not None}
