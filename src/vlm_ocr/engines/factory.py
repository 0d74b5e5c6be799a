"""The engine the settings select, built once at start: the CPU engine, or a vision-language
model behind vLLM (started here) or behind an OpenAI-compatible server elsewhere. The model's
family is told here, once, from its config.json and its name (`families.detect`)."""

from __future__ import annotations

import logging
from typing import Any

from ..settings import EngineKind, Settings
from .base import Engine, EngineOptions
from .families import Detected, detect
from .gpu import GpuFacts, host_cores
from .model_files import ModelFiles

log = logging.getLogger(__name__)


def choose_engine_kind(settings: Settings, gpu: GpuFacts) -> tuple[EngineKind, str]:
    """`auto` takes vLLM only when a CUDA GPU and a model are present, or the model may be
    downloaded (`HF_HUB_OFFLINE=false`, the Hub image: the vLLM engine downloads it at start);
    says why either way."""
    kind = settings.job.engine
    if kind is not EngineKind.AUTO:
        return kind, f"ENGINE={kind.value}"
    name = settings.model.model_name
    has_model = ModelFiles(settings.model).present()
    if gpu.present and has_model:
        return EngineKind.VLLM, f"ENGINE=auto: CUDA GPU and model {name} present"
    if gpu.present and not settings.model.hf_hub_offline:
        why = f"CUDA GPU, and model {name} downloaded at start (HF_HUB_OFFLINE=false)"
        return EngineKind.VLLM, f"ENGINE=auto: {why}"
    missing = " and ".join(
        what
        for what, ok in (("no CUDA GPU", gpu.present), (f"model {name} not found", has_model))
        if not ok
    )
    return EngineKind.RAPIDOCR, f"ENGINE=auto: {missing}, so the CPU engine"


def gdn_layers(config: dict[str, Any] | None) -> int:
    """The model's gated-delta-net (linear attention) layers, from its config."""
    text = (config or {}).get("text_config") or config or {}
    return sum(t == "linear_attention" for t in text.get("layer_types") or [])


def family_of(settings: Settings, config: dict[str, Any] | None) -> Detected:
    detected = detect(
        config,
        settings.model.model_name,
        settings.model.model_family,
        max_pixels=settings.render.max_pixels,
    )
    log.info("model family: %s (%s)", detected.family.name, detected.why)
    if detected.warning:
        log.warning("%s", detected.warning)
    return detected


def make_engine(
    settings: Settings, options: EngineOptions | None = None, *, gpu: GpuFacts | None = None
) -> Engine:
    """The engine `ENGINE` selects (not started yet). `gpu` is what `nvidia-smi` says, read here
    once unless given."""
    options = options or EngineOptions()
    gpu = GpuFacts.probe() if gpu is None else gpu
    kind, why = choose_engine_kind(settings, gpu)
    log.info("engine: %s (%s)", kind.value, why)
    if kind is EngineKind.RAPIDOCR:
        from .rapidocr import RapidOcrEngine

        return RapidOcrEngine(
            layout=settings.cpu_models.cpu_layout,
            detection_order=options.detection_order,
            default_prompt=settings.job.default_prompt,
        )
    from .vllm.argv import MAX_NUM_SEQS_UNKNOWN_GPU, ServeSpec
    from .vllm.server import VllmServer
    from .vlm import ExternalServer, ServerHandle, VlmEngine

    files = ModelFiles(settings.model)
    config = files.config() if kind is EngineKind.VLLM else None
    detected = family_of(settings, config)
    family = detected.family
    facts: dict[str, Any] = {"family_detected_by": detected.why}
    if gdn := gdn_layers(config):
        facts["gdn_layers"] = gdn
    server: ServerHandle
    if kind is EngineKind.VLLM:
        spec = ServeSpec.resolve(settings, gpu, family, cpus=host_cores())
        server = VllmServer(spec, files, family=family)
        seqs, replicas, concurrency = spec.max_num_seqs, spec.data_parallel_size, spec.concurrency
        if replicas > 1:
            log.info(
                "%d engine replicas of %d GPU(s) each, %d sequences each",
                replicas,
                settings.vllm.tensor_parallel_size,
                seqs,
            )
    else:
        server = ExternalServer(settings.vlm.openai_base_url)
        seqs = concurrency = settings.vllm.max_num_seqs or MAX_NUM_SEQS_UNKNOWN_GPU
        replicas = 1
    if not settings.vllm.max_num_seqs:
        memory = gpu.memory_gib(settings.vllm.tensor_parallel_size)
        own_gpu = memory is not None and kind is EngineKind.VLLM
        where = f"{memory:.0f} GiB of GPU memory" if own_gpu else "no GPU to read"
        log.info("MAX_NUM_SEQS=%d (unset: the default for %s)", seqs, where)
    return VlmEngine(
        settings.vlm,
        settings.model,
        server,
        family=family,
        concurrency=concurrency,
        replicas=replicas,
        connections=settings.job.max_concurrent_pages or None,
        default_prompt=settings.job.default_prompt,
        gpu=gpu,
        options=options,
        facts=facts,
    )
