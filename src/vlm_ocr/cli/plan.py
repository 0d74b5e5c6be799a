"""`vlm-ocr plan`: GPU memory for a model and how many pages fit in its KV cache at once.

All the arithmetic is shown, so a user can check it by hand:

    weights        = safetensors bytes of the checkpoint, else parameters × bytes/parameter
    KV bytes/token = 2 (K and V) × full-attention layers × KV heads × head dim × bytes/element
    image tokens   = (W′ × H′) / patch², each side rounded to a multiple of the patch (the
                     family's `patch`: 32 for Qwen3-VL and Qwen3.5, 28 for Qwen2-VL and
                     Qwen2.5-VL), within the budget
    page tokens    = image tokens + prompt tokens + output token cap
    KV budget      = GPU memory × utilization − weights − activation reserve
    pages at once  = KV budget / (page tokens × KV bytes/token + recurrent state per sequence)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..engines.families import FAMILIES, Family, detect
from ..settings import KV_CACHE_DTYPES, Settings, accepted_values
from . import usage

GB = 1e9
DTYPE_BYTES = {
    "auto": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float32": 4,
}
# What plan sizes a KV cache of: the settings' values (vLLM's) whose element size it knows.
# `--kv-cache-dtype`, its help and both refusals name this one list.
SIZED_KV_DTYPES = tuple(d for d in KV_CACHE_DTYPES if d in DTYPE_BYTES)
# Bytes per parameter of the weights by quantization method (config.json quantization_config).
QUANT_BYTES = {
    "awq": 0.5 + 1 / 64,
    "gptq": 0.5 + 1 / 64,
    "fp8": 1.0,
    "compressed-tensors": 0.5 + 1 / 64,
}
PROMPT_TOKENS = 150  # chat template + preset text; the legal preset is about 250 Chinese tokens
ACTIVATION_RESERVE_GB = 4.0  # vLLM's profiling peak for activations, CUDA graphs and the encoder


@dataclass
class ModelShape:
    model_type: str
    layers: int
    full_attention_layers: int
    kv_heads: int
    head_dim: int
    params: tuple[float, float] | None  # (decoder layers, embeddings + vision tower)
    quantization: str | None
    weight_dtype_bytes: float
    linear_state_bytes: int = 0  # per sequence, all linear-attention (GDN) layers together
    notes: list[str] = field(default_factory=list)


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    return cfg.get("text_config") or cfg.get("llm_config") or cfg


TP_SIZES = (1, 2, 4, 8)


def tp_sizes(cfg: dict[str, Any]) -> list[int]:
    """The tensor parallel sizes the model's heads split over, as vLLM requires: its attention
    heads (the text model's, and the vision encoder's where it has some) a whole number per GPU,
    its KV heads too or each held whole by a set of GPUs."""
    text = _text_config(cfg)
    heads = int(text.get("num_attention_heads") or 1)
    kv = int(text.get("num_key_value_heads") or heads)
    vision = cfg.get("vision_config") or {}
    vision_heads = int(vision.get("num_heads") or vision.get("num_attention_heads") or 1)
    return [
        tp
        for tp in TP_SIZES
        if heads % tp == 0 and vision_heads % tp == 0 and (kv % tp == 0 or tp % kv == 0)
    ]


def read_shape(cfg: dict[str, Any]) -> ModelShape:
    text = _text_config(cfg)
    layers = int(text["num_hidden_layers"])
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or text["hidden_size"] // heads)
    notes = []
    layer_types = text.get("layer_types")
    interval = text.get("full_attention_interval")
    if layer_types:
        full = sum(t == "full_attention" for t in layer_types)
    elif interval:
        full = layers // int(interval)
    else:
        full = layers
    state = 0
    if full < layers:
        linear = layers - full
        # Gated DeltaNet: a (key dim × value dim) state per value head, plus a short conv cache.
        k_heads = int(text.get("linear_num_key_heads", 16))
        v_heads = int(text.get("linear_num_value_heads", 32))
        k_dim = int(text.get("linear_key_head_dim", 128))
        v_dim = int(text.get("linear_value_head_dim", 128))
        conv = int(text.get("linear_conv_kernel_dim", 4))
        ssm_state = v_heads * k_dim * v_dim * 4  # float32 recurrent state
        conv_state = (2 * k_heads * k_dim + v_heads * v_dim) * (conv - 1) * 2
        state = linear * (ssm_state + conv_state)
        notes.append(
            f"{linear} linear-attention layers hold a fixed state of {state / 2**20:.1f} MiB "
            "per sequence instead of a KV cache"
        )
    quant = cfg.get("quantization_config") or text.get("quantization_config") or {}
    method = quant.get("quant_method")
    if method == "compressed-tensors":  # its weights' bits say which kind it is
        groups = list((quant.get("config_groups") or {}).values())
        bits = (groups[0].get("weights") or {}).get("num_bits") if groups else None
        method = "fp8" if bits == 8 else method
    dtype = str(
        cfg.get("torch_dtype") or text.get("torch_dtype") or text.get("dtype") or "bfloat16"
    )
    wbytes = (
        QUANT_BYTES.get(method, DTYPE_BYTES.get(dtype, 2)) if method else DTYPE_BYTES.get(dtype, 2)
    )
    return ModelShape(
        model_type=str(cfg.get("model_type", "")),
        layers=layers,
        full_attention_layers=full,
        kv_heads=kv_heads,
        head_dim=head_dim,
        params=estimate_params(cfg),
        quantization=method,
        weight_dtype_bytes=wbytes,
        linear_state_bytes=state,
        notes=notes,
    )


def estimate_params(cfg: dict[str, Any]) -> tuple[float, float] | None:
    """Parameter counts from the shapes: the decoder layers (what quantization shrinks), and the
    embeddings, output head and vision tower (which AWQ/GPTQ checkpoints keep in 16 bits)."""
    text = _text_config(cfg)
    try:
        hidden, layers = int(text["hidden_size"]), int(text["num_hidden_layers"])
        vocab = int(text["vocab_size"])
        heads = int(text["num_attention_heads"])
        kv = int(text.get("num_key_value_heads") or heads)
        hd = int(text.get("head_dim") or hidden // heads)
    except (KeyError, TypeError, ValueError):
        return None
    attn = hidden * hd * (heads * 2 + kv * 2)
    experts = int(text.get("num_experts") or 0)
    if experts:
        inter = int(text.get("moe_intermediate_size") or text["intermediate_size"])
        mlp = experts * 3 * hidden * inter + hidden * experts
        shared = int(text.get("shared_expert_intermediate_size") or 0)
        mlp += 3 * hidden * shared
    else:
        mlp = 3 * hidden * int(text["intermediate_size"])
    embed = (
        vocab
        * hidden
        * (1 if text.get("tie_word_embeddings") or cfg.get("tie_word_embeddings") else 2)
    )
    vision = cfg.get("vision_config") or {}
    vis = 0
    if vision:
        vh = int(vision.get("hidden_size") or vision.get("embed_dim") or 0)
        depth = int(vision.get("depth") or vision.get("num_hidden_layers") or 0)
        vis = depth * (4 * vh * vh + 2 * vh * int(vision.get("intermediate_size", 0)))
    return float(layers * (attn + mlp)), float(embed + vis)


def safetensors_bytes(model_dir: Path) -> int | None:
    files = list(model_dir.glob("*.safetensors"))
    return sum(f.stat().st_size for f in files) if files else None


@dataclass
class Plan:
    gpu_memory_gb: float
    weights_gb: float
    weights_source: str
    kv_bytes_per_token: int
    kv_cache_dtype: str
    image_tokens: int
    page_tokens: int
    kv_budget_gb: float
    pages_at_once: int
    arithmetic: list[str]
    notes: list[str]
    does_not_fit: str | None = None  # why no page fits, when none does


def plan(
    cfg: dict[str, Any],
    *,
    model_dir: Path | None,
    gpu_memory_gb: float,
    kv_cache_dtype: str,
    page_size: tuple[int, int],
    max_pixels: int,
    max_tokens: int,
    max_model_len: int,
    gpu_memory_utilization: float,
    tensor_parallel_size: int,
    family: Family,
    prompt_tokens: int = PROMPT_TOKENS,
) -> Plan:
    """`family`: whose processor turns the page into image tokens."""
    shape = read_shape(cfg)
    kv_elem = DTYPE_BYTES[kv_cache_dtype]
    kv_per_token = 2 * shape.full_attention_layers * shape.kv_heads * shape.head_dim * kv_elem
    weights, source = weights_of(shape, model_dir)
    w, h = page_size
    img = family.image_tokens(w, h, max_pixels)
    patch = family.patch
    page = min(img + prompt_tokens + max_tokens, max_model_len)
    per_gpu_weights = weights / tensor_parallel_size
    usable = gpu_memory_gb * gpu_memory_utilization
    kv_budget = (usable - per_gpu_weights - ACTIVATION_RESERVE_GB) * tensor_parallel_size
    per_page = page * kv_per_token + shape.linear_state_bytes
    pages = max(0, int(kv_budget * GB // per_page)) if kv_budget > 0 else 0
    usable_line = f"{gpu_memory_gb:g} GB × {gpu_memory_utilization:g}"
    arithmetic = [
        f"weights: {source} = {weights:.1f} GB "
        f"({per_gpu_weights:.1f} GB per GPU at TP {tensor_parallel_size})",
        f"KV bytes/token: 2 × {shape.full_attention_layers} attention layers"
        f" × {shape.kv_heads} KV heads × {shape.head_dim} head dim"
        f" × {kv_elem} B ({kv_cache_dtype}) = {kv_per_token:,}",
        f"image tokens: {w}×{h} within {max_pixels:,} px, {patch}×{patch} px per token = {img:,}",
        f"page tokens: {img:,} image + {prompt_tokens} prompt + {max_tokens:,} output cap"
        f" = {img + prompt_tokens + max_tokens:,}"
        + (
            f" (capped at max_model_len {max_model_len:,})"
            if page < img + prompt_tokens + max_tokens
            else ""
        ),
        f"KV budget: ({usable_line}"
        f" − {per_gpu_weights:.1f} GB weights − {ACTIVATION_RESERVE_GB:g} GB activations)"
        f" × {tensor_parallel_size} GPU = {kv_budget:.1f} GB",
        f"pages at once: {kv_budget:.1f} GB / ({page:,} tokens × {kv_per_token:,} B"
        + (f" + {shape.linear_state_bytes:,} B state" if shape.linear_state_bytes else "")
        + f") = {pages:,}",
    ]
    if kv_budget <= 0:  # no budget to divide: the two lines become the reason
        short = weights_do_not_fit(per_gpu_weights, usable, usable_line)
        arithmetic[-2:] = [short]
    elif not pages:
        short = (
            f"does not fit: one page ({page:,} tokens) needs {per_page / GB:.2f} GB of KV cache, "
            f"more than the {kv_budget:.1f} GB left beside the weights"
        )
        arithmetic[-1] = short
    return Plan(
        gpu_memory_gb=gpu_memory_gb,
        weights_gb=round(weights, 2),
        weights_source=source,
        kv_bytes_per_token=kv_per_token,
        kv_cache_dtype=kv_cache_dtype,
        image_tokens=img,
        page_tokens=page,
        kv_budget_gb=round(kv_budget, 2),
        pages_at_once=pages,
        arithmetic=arithmetic,
        notes=shape.notes,
        does_not_fit=None if pages else arithmetic[-1],
    )


def weights_of(shape: ModelShape, model_dir: Path | None) -> tuple[float, str]:
    """The weights in GB, and what that figure comes from: the safetensors files beside the
    config, else its parameter counts; ValueError when it has neither."""
    on_disk = safetensors_bytes(model_dir) if model_dir else None
    if on_disk:
        return on_disk / GB, f"safetensors files: {on_disk:,} bytes"
    if not shape.params:
        raise ValueError("cannot size the weights: no safetensors files and no shapes in config")
    layer_params, other_params = shape.params
    other_bytes = 2 if shape.quantization else shape.weight_dtype_bytes
    weights = (layer_params * shape.weight_dtype_bytes + other_params * other_bytes) / GB
    return weights, (
        f"{layer_params / 1e9:.1f} B layer parameters × {shape.weight_dtype_bytes:.3f} bytes "
        f"({shape.quantization or 'unquantized'}) + {other_params / 1e9:.2f} B embedding and "
        f"vision parameters × {other_bytes:g} bytes"
    )


def weights_do_not_fit(per_gpu_weights: float, usable: float, usable_line: str) -> str:
    """A model whose weights and activations take more than vLLM may have of a GPU."""
    return (
        f"does not fit: the weights need {per_gpu_weights:.1f} GB a GPU and vLLM's activations "
        f"{ACTIVATION_RESERVE_GB:g} GB more, of the {max(usable, 0):.1f} GB it may take "
        f"({usable_line})"
    )


CONFIG_ACCEPTED = (
    "a model's config.json (from its Hugging Face repository), e.g. "
    "examples/chandra-ocr-2.config.json"
)
SHAPE_KEYS = ("num_hidden_layers", "num_attention_heads")


def read_config(path: Path) -> dict[str, Any]:
    """The model's config.json, or UsageError naming CONFIG: no file, a folder, not JSON, or
    JSON without the shapes a model's config has."""
    cfg = usage.json_object(path, "CONFIG", CONFIG_ACCEPTED)
    text = _text_config(cfg)
    if not isinstance(text, dict):
        raise usage.UsageError(
            "CONFIG", f"{path}: its text_config is not an object; accepted: {CONFIG_ACCEPTED}"
        )
    missing = [k for k in SHAPE_KEYS if k not in text]
    if missing:
        raise usage.UsageError(
            "CONFIG",
            f"{path} is not a model's config: it has no {' or '.join(missing)} (at its top "
            f"level, or under text_config or llm_config); accepted: {CONFIG_ACCEPTED}",
        )
    try:
        read_shape(cfg)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise usage.UsageError(
            "CONFIG", f"{path}: its shapes cannot be read ({exc!r}); accepted: {CONFIG_ACCEPTED}"
        ) from None
    return cfg


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "config",
        type=Path,
        metavar="CONFIG",
        help=f"{CONFIG_ACCEPTED}; the safetensors files beside it, if any, give the weights' size",
    )
    p.add_argument(
        "--gpu-memory",
        type=usage.positive(float),
        nargs="+",
        default=None,
        metavar="GB",
        help="GPU memory in GB (several values: a table); default 24 48 80 141",
    )
    p.add_argument(
        "--kv-cache-dtype",
        type=kv_dtype,
        metavar="DTYPE",
        help=f"the KV cache's element type: {', '.join(SIZED_KV_DTYPES)} (default: "
        "KV_CACHE_DTYPE, else fp8 on a GPU of --capability 8.9 or newer)",
    )
    p.add_argument(
        "--family",
        choices=sorted(FAMILIES),
        help="the model's family (default: MODEL_FAMILY, else told from the config and its "
        "file name, as the worker tells it); it sizes the page and sets the answer and context "
        "lengths",
    )
    p.add_argument(
        "--page-size",
        type=page_size,
        metavar="WxH",
        help="page image WxH in pixels (default: an A4 page rendered as the family renders it)",
    )
    p.add_argument(
        "--max-pixels",
        type=usage.positive(int),
        help="page pixel budget of the chat families (default: MAX_PIXELS)",
    )
    p.add_argument(
        "--max-tokens",
        type=usage.positive(int),
        help="output token cap per page (default: MAX_TOKENS, else the family's)",
    )
    p.add_argument(
        "--max-model-len",
        type=usage.positive(int),
        help="context, prompt and answer (default: MAX_MODEL_LEN, else the family's)",
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=usage.fraction,
        help="the share of GPU memory vLLM may take (default: GPU_MEMORY_UTILIZATION, 0.9)",
    )
    p.add_argument(
        "--tensor-parallel-size",
        type=usage.positive(int),
        help="GPUs one replica is split over (default: TENSOR_PARALLEL_SIZE, 1)",
    )
    p.add_argument(
        "--gpus",
        type=usage.positive(int),
        help="GPUs one worker has: print each layout of replicas (data parallel) × GPUs per "
        "replica (tensor parallel) that fits, on the first --gpu-memory size (default 141)",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    serve_line_arguments(p)


def serve_line_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--serve-line",
        action="store_true",
        help="print the exact `vllm serve` command line(s) the worker would run for this model "
        "on a host of --gpus GPUs of --gpu-memory GB and --cpus CPUs, with the settings of the "
        "environment (START_MODE, API_SERVER_COUNT, ...) and the flags above, to hold against "
        "its makers' line; a model that does not fit is refused, saying what would",
    )
    p.add_argument(
        "--cpus",
        type=usage.positive(int),
        default=16,
        help="--serve-line: the host's CPUs (default 16)",
    )
    p.add_argument(
        "--capability",
        type=usage.positive(float),
        default=9.0,
        help="the GPUs' compute capability (default 9.0, Hopper): below 8.9 the KV cache is "
        "not fp8 by default",
    )
    p.add_argument(
        "--model",
        help="the model the line serves and whose name tells its family (default: the config's "
        "`_name_or_path`, its folder when the file is a model's own config.json, else "
        "MODEL_NAME)",
    )


def kv_dtype(text: str) -> str:
    """`--kv-cache-dtype`, as argparse's type: one plan can size."""
    if text not in SIZED_KV_DTYPES:
        raise argparse.ArgumentTypeError(unsized(text))
    return text


def unsized(dtype: str) -> str:
    return f"{dtype!r} cannot be sized here; accepted: {', '.join(SIZED_KV_DTYPES)}"


def page_size(text: str) -> tuple[int, int]:
    """`--page-size WxH`, as argparse's type: two whole numbers of pixels."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not WIDTHxHEIGHT in pixels; accepted: e.g. 911x1288"
        ) from None
    if w < 1 or h < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: both sides must be at least 1 pixel")
    return w, h


A4_POINTS = (595, 842)
# The flags that stand for a setting: the plan and the serve line both read the settings.
SETTING_OF_FLAG = {
    "max_pixels": "max_pixels",
    "max_tokens": "max_tokens",
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "tensor_parallel_size": "tensor_parallel_size",
    "kv_cache_dtype": "kv_cache_dtype",
    "family": "model_family",
}


@dataclass(frozen=True)
class Sizing:
    """What a plan is computed from: the config, the model's family, the page, and the settings
    of the environment with the flags laid over them (the worker's own, so the plan and the
    serve line agree)."""

    cfg: dict[str, Any]
    model_dir: Path | None
    model: str
    family: Family
    page_size: tuple[int, int]
    settings: Settings
    kv_cache_dtype: str

    def plan(self, gpu_memory_gb: float, tensor_parallel_size: int | None = None) -> Plan:
        s, family = self.settings, self.family
        prompt = family.prompt.text if family.prompt else ""
        return plan(
            self.cfg,
            model_dir=self.model_dir,
            gpu_memory_gb=gpu_memory_gb,
            kv_cache_dtype=self.kv_cache_dtype,
            page_size=self.page_size,
            max_pixels=family.budget(s.render.max_pixels).max_pixels,
            max_tokens=s.vlm.max_tokens or family.sampling.max_tokens,
            max_model_len=s.vllm.max_model_len or family.max_model_len,
            gpu_memory_utilization=s.vllm.gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size or s.vllm.tensor_parallel_size,
            # the chat template and the family's own prompt (about 3 characters a token)
            family=family,
            prompt_tokens=30 + len(prompt) // 3 if family.prompt else PROMPT_TOKENS,
        )

    def with_config(self, cfg: dict[str, Any]) -> Sizing:
        """The same model with other weights (no files to size them by)."""
        return dataclasses.replace(self, cfg=cfg, model_dir=None)


def sizing(args: argparse.Namespace, settings: Settings) -> Sizing:
    from ..engines.vllm.argv import kv_cache_dtype

    cfg = read_config(args.config)
    model = model_of(args, cfg, settings)
    given = {SETTING_OF_FLAG[k]: v for k, v in vars(args).items() if k in SETTING_OF_FLAG}
    try:
        settings = settings.with_(model_name=model, **{k: v for k, v in given.items() if v})
    except ValidationError as exc:  # a flag's value the settings refuse, as they would its own
        first = exc.errors()[0]
        name = str(first["loc"][-1]) if first["loc"] else "a flag"
        flag = next((k for k, v in SETTING_OF_FLAG.items() if v == name), name)
        said = first["msg"].removeprefix("Value error, ")  # pydantic's prefix, not the user's
        if first["type"] != "value_error" and name in Settings.GROUP_OF:  # a bound, a type
            said = f"accepted: {accepted_values(name)}"  # in the words of the others
        raise usage.UsageError(
            f"--{flag.replace('_', '-')}", f"{first['input']!r}: {said}"
        ) from None
    family = detect(
        cfg, model, settings.model.model_family, max_pixels=settings.render.max_pixels
    ).family
    dtype = kv_cache_dtype(settings.vllm, args.capability)
    if dtype not in SIZED_KV_DTYPES:  # a value the worker takes, but of no size known here
        raise usage.UsageError(
            "KV_CACHE_DTYPE", f"{unsized(dtype)}; or give --kv-cache-dtype one of them"
        )
    tp, fitting = settings.vllm.tensor_parallel_size, tp_sizes(cfg)
    if tp not in fitting:  # vLLM refuses it at start
        flag = "--tensor-parallel-size" if args.tensor_parallel_size else "TENSOR_PARALLEL_SIZE"
        raise usage.UsageError(
            flag,
            f"{tp}: the model's heads do not split over {tp} GPUs; accepted: "
            f"{', '.join(map(str, fitting))}",
        )
    budget = family.budget(settings.render.max_pixels)
    size = args.page_size or budget.size_for(*A4_POINTS, pdf=True)
    folder = args.config.parent
    return Sizing(cfg, folder, model, family, size, settings, dtype)


@dataclass(frozen=True)
class Layout:
    """One way to run a model on a worker's GPUs: replicas × GPUs each."""

    data_parallel_size: int
    tensor_parallel_size: int
    weights_per_gpu_gb: float
    pages_per_replica: int
    pages_in_all: int
    fits: bool


def layouts(
    plan_for: Callable[[int], Plan], gpus: int, sizes: Sequence[int] = TP_SIZES
) -> list[Layout]:
    """Every layout of `gpus` GPUs (tensor parallel sizes among `sizes`, the model's, that
    divide them, the rest replicas), smallest replicas first; a layout fits when each replica
    holds at least one page."""
    out = []
    for tp in (n for n in sizes if n <= gpus and gpus % n == 0):
        p = plan_for(tp)
        dp = gpus // tp
        out.append(
            Layout(
                data_parallel_size=dp,
                tensor_parallel_size=tp,
                weights_per_gpu_gb=round(p.weights_gb / tp, 2),
                pages_per_replica=p.pages_at_once,
                pages_in_all=p.pages_at_once * dp,
                fits=p.pages_at_once > 0,
            )
        )
    return out


def print_layouts(found: list[Layout], gpus: int, per_gpu: float) -> None:
    print(f"{gpus} GPUs of {per_gpu:g} GB:")
    print(
        f"{'replicas (DP)':>14}{'GPUs each (TP)':>16}{'weights/GPU GB':>16}"
        f"{'pages/replica':>15}{'pages in all':>14}"
    )
    for x in found:
        pages = (
            f"{x.pages_per_replica:>15,}{x.pages_in_all:>14,}"
            if x.fits
            else (f"{'does not fit':>29}")
        )
        print(
            f"{x.data_parallel_size:>14}{x.tensor_parallel_size:>16}"
            f"{x.weights_per_gpu_gb:>16.1f}{pages}"
        )
    best = choose(found)
    if best is None:
        print("no layout fits: a larger GPU, or more of them")
        return
    why = (
        f"the fewest GPUs a replica needs to batch {FULL_BATCH} pages or more"
        if best.pages_per_replica >= FULL_BATCH
        else f"no layout batches {FULL_BATCH} pages a replica; this one batches the most"
    )
    print(
        f"choose TENSOR_PARALLEL_SIZE={best.tensor_parallel_size} ({why}); DATA_PARALLEL_SIZE "
        f"unset then runs {best.data_parallel_size} replica(s). Pages are independent, so "
        "replicas add pages/s where splitting a model that fits adds an all-reduce to every layer"
    )


FULL_BATCH = 32  # pages a replica batches before more replicas beat fewer, larger ones


def choose(found: list[Layout]) -> Layout | None:
    """The layout to run: the most replicas whose each holds a full batch; else the one
    whose replicas hold the most."""
    fitting = [x for x in found if x.fits]
    full = [x for x in fitting if x.pages_per_replica >= FULL_BATCH]
    if full:
        return full[0]
    return max(fitting, key=lambda x: x.pages_per_replica, default=None)


def model_of(args: argparse.Namespace, cfg: dict[str, Any], settings: Settings) -> str:
    """The model a config describes: --model, its `_name_or_path`, the folder of a model's own
    config.json, else the settings' MODEL_NAME."""
    if args.model:
        return str(args.model)
    if cfg.get("_name_or_path"):
        return str(cfg["_name_or_path"])
    if args.config.name == "config.json":
        return str(args.config.parent)
    return settings.model.model_name


def plan_main(args: argparse.Namespace, settings: Settings | None = None) -> int:
    from .serve_line import serve_line_main

    sized = sizing(args, settings or Settings())
    if args.serve_line:
        return serve_line_main(args, sized)
    sizes = args.gpu_memory or [24, 48, 80, 141]
    try:
        plans = [sized.plan(g) for g in sizes]
    except ValueError as exc:  # weights that cannot be sized
        raise usage.UsageError("CONFIG", f"{args.config}: {exc}") from None
    w, h = sized.page_size
    print(f"family: {sized.family.name} ({sized.family.title}); page {w}×{h} px", file=sys.stderr)
    if args.gpus:
        per_gpu = sizes[0] if args.gpu_memory else 141
        found = layouts(lambda tp: sized.plan(per_gpu, tp), args.gpus, tp_sizes(sized.cfg))
        if args.json:
            print(json.dumps([asdict(x) for x in found], indent=2))
        else:
            print_layouts(found, args.gpus, per_gpu)
        return 0
    if args.json:
        print(
            json.dumps([asdict(p) for p in plans] if len(plans) > 1 else asdict(plans[0]), indent=2)
        )
        return 0
    if len(plans) == 1:
        print("\n".join(plans[0].arithmetic + [f"note: {n}" for n in plans[0].notes]))
        return 0
    print_table(plans, sized.kv_cache_dtype)
    return 0


def print_table(plans: list[Plan], kv_cache_dtype: str) -> None:
    first = plans[0]
    print(
        f"weights {first.weights_gb:.1f} GB; "
        f"KV {first.kv_bytes_per_token:,} B/token ({kv_cache_dtype}); "
        f"{first.image_tokens:,} image tokens, {first.page_tokens:,} tokens per page"
    )
    print(f"{'GPU GB':>8}{'KV budget GB':>14}{'pages at once':>15}")
    for p in plans:
        if p.does_not_fit:
            print(f"{p.gpu_memory_gb:>8g}  {p.does_not_fit}")
        else:
            print(f"{p.gpu_memory_gb:>8g}{p.kv_budget_gb:>14.1f}{p.pages_at_once:>15,}")
    for n in first.notes:
        print(f"note: {n}")
