"""Time the arithmetic of taking one page in, for a Qwen3.5-style family's shapes, on the GPU
host's own torch (no vLLM): the vision tower's linear layers and its attention over every patch,
the language model's prefill linear layers, and one decoding step's linear layers for 256
sequences; the linear layers in bf16 and in FP8 (per-tensor scales), once with the activations
quantized at each call in plain torch operations and once with the GEMMs alone (the floor a fused
quantization approaches). Random weights: what it measures is time, not reading. It tells how
much of a page's time is its arithmetic, and what FP8 could save, before a whole engine is tried:

    python3 dev/gpu/page_arith.py examples/chandra-ocr-2.config.json --page 1632x2112

Prints one JSON object. Left out: the language model's gated-delta-net recurrence, its attention
cores, norms and the rest, which FP8 would not change.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from sampler_bench import timed  # beside it in dev/gpu: the median of CUDA-event timings

FP8 = torch.float8_e4m3fn


def shapes(config: dict) -> tuple[dict, dict]:
    return config["vision_config"], config["text_config"]


def patches_and_tokens(vision: dict, width: int, height: int) -> tuple[int, int]:
    patch, merge = vision["patch_size"], vision["spatial_merge_size"]
    step = patch * merge
    w, h = max(step, round(width / step) * step), max(step, round(height / step) * step)
    n = (w // patch) * (h // patch)
    return n, n // (merge * merge)


def text_linears(text: dict) -> list[tuple[int, int]]:
    """(in, out) of every prefill linear layer of the language model, layer by layer."""
    h, ff = text["hidden_size"], text["intermediate_size"]
    out: list[tuple[int, int]] = []
    every = text.get("full_attention_interval", 1)
    for i in range(text["num_hidden_layers"]):
        out += [(h, 2 * ff), (ff, h)]  # the MLP's gate and up, then down
        if (i + 1) % every == 0:  # a full-attention layer
            q = text["num_attention_heads"] * text["head_dim"]
            kv = text["num_key_value_heads"] * text["head_dim"]
            gate = q if text.get("attn_output_gate") else 0
            out += [(h, q + gate + 2 * kv), (q, h)]
        else:  # a gated-delta-net layer
            k = text["linear_num_key_heads"] * text["linear_key_head_dim"]
            v = text["linear_num_value_heads"] * text["linear_value_head_dim"]
            out += [(h, 2 * k + 2 * v), (h, 2 * text["linear_num_value_heads"]), (v, h)]
    return out


def vision_linears(vision: dict) -> list[tuple[int, int]]:
    d, ff = vision["hidden_size"], vision["intermediate_size"]
    return [(d, 3 * d), (d, d), (d, ff), (ff, d)] * vision["depth"]


def linear_stack(
    dims: list[tuple[int, int]], tokens: int, device: str, fp8: bool, gemm_only: bool = False
) -> Callable[[], None]:
    """The layers' GEMMs on a (tokens × in) input each; with `fp8`, weights and the input in
    FP8 with per-tensor scales (the input's found and applied at each call, in plain torch
    operations, unless `gemm_only`)."""
    dtype = torch.bfloat16
    weights = {d: torch.randn(d[1], d[0], device=device, dtype=dtype) / d[0] ** 0.5 for d in dims}
    inputs = {k: torch.randn(tokens, k, device=device, dtype=dtype) for k, _ in dims}
    if not fp8:

        def run_bf16() -> None:
            for k, n in dims:
                F.linear(inputs[k], weights[(k, n)])

        return run_bf16
    one = torch.ones((), device=device)
    qweights = {d: (w / w.abs().max() * 448).to(FP8) for d, w in weights.items()}
    quantized = {k: (a / (a.abs().max().float() / 448)).to(FP8) for k, a in inputs.items()}

    def run() -> None:
        for k, n in dims:
            if gemm_only:  # the GEMMs alone: the floor a fused quantization would approach
                qa, scale = quantized[k], one
            else:
                a = inputs[k]
                scale = a.abs().max().float() / 448
                qa = (a / scale).to(FP8)
            torch._scaled_mm(qa, qweights[(k, n)].t(), scale_a=scale, scale_b=one, out_dtype=dtype)

    return run


def vision_attention(vision: dict, patches: int, device: str) -> Callable[[], None]:
    """The tower's attention cores over every patch, layer by layer (SDPA: flash on a GPU)."""
    heads = vision["num_heads"]
    head_dim = vision["hidden_size"] // heads
    q, k, v = (
        torch.randn(1, heads, patches, head_dim, device=device, dtype=torch.bfloat16)
        for _ in range(3)
    )

    def run() -> None:
        for _ in range(vision["depth"]):
            F.scaled_dot_product_attention(q, k, v)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="a family's example config (examples/)")
    parser.add_argument("--page", default="1632x2112", help="the page's pixels, WxH")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    vision, text = shapes(json.loads(args.config.read_text()))
    width, height = (int(x) for x in args.page.lower().split("x"))
    patches, tokens = patches_and_tokens(vision, width, height)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    fp8 = device == "cuda" and torch.cuda.get_device_capability() >= (8, 9)
    pad = -(-tokens // 16) * 16  # FP8 GEMMs want dimensions in sixteens
    figures: dict[str, object] = {
        "config": args.config.name,
        "page": f"{width}x{height}",
        "patches": patches,
        "prompt_tokens": tokens,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
    }
    runs = {
        "vision_linear": (vision_linears(vision), -(-patches // 16) * 16),
        "text_linear": (text_linears(text), pad),
        # one decoding step of MAX_NUM_SEQS sequences: a token each through the same layers
        "decode_step_linear": (text_linears(text), 256),
    }
    for name, (dims, rows) in runs.items():
        for kind in ("bf16", "fp8", "fp8_gemm") if fp8 else ("bf16",):
            try:
                stack = linear_stack(dims, rows, device, kind != "bf16", kind == "fp8_gemm")
                figures[f"{name}_{kind}_ms"] = round(timed(stack, args.repeat, device), 2)
            except RuntimeError as e:  # an FP8 GEMM this torch or GPU lacks: said, not fatal
                figures[f"{name}_{kind}_error"] = str(e).splitlines()[0]
    figures["vision_attention_ms"] = round(
        timed(vision_attention(vision, patches, device), args.repeat, device), 2
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
