"""Time the arithmetic of one page on the GPU host's own torch (no vLLM), for a family's shapes
read from its example config: taking the page in (the vision tower's linear layers and its
attention over every patch, the language model's prefill linear layers) and writing its answer
(a decoding step's linear layers for 256 sequences, the LM head among them, and the bytes such a
step must read besides: the KV cache of the full-attention layers at vLLM's fp8, and the
gated-delta-net layers' states, read and written). The linear layers run in bf16 and in FP8
(per-tensor scales), once with the activations quantized at each call in plain torch operations
and once with the GEMMs alone (the floor a fused quantization approaches). Random weights: what
it measures is time, not reading. From those it gives `ceiling_pages_per_s`, the pace a GPU
doing nothing but that arithmetic would reach: no engine reads faster, so a goal above it is
out of reach at that page size, and the measured pace against it says how much the engine
loses:

    python3 dev/gpu/page_arith.py examples/chandra-ocr-2.config.json --page 1632x2112

With `--spec GPU` it times nothing and needs neither a GPU nor torch: it counts the same
arithmetic (the floating-point operations of the intake, the bytes and operations of a decoding
step) and gives `spec_ceiling_pages_per_s` at the GPU's datasheet rates (`SPEC`), a ceiling no
kernel reaches, to weigh a goal before a lease.

Prints one JSON object. Left out, so the ceiling stays above any engine's pace: norms, rotary
embeddings, the gated-delta-net recurrence's arithmetic and its prefill, the attention cores of
the prefill, sampling, and every step's launch from the CPU. Towers with windowed attention
(Qwen2.5-VL's, olmOCR's) are refused: their attention is not one block over every patch.
"""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Callable
from pathlib import Path

try:
    import torch
    import torch.nn.functional as F
    from sampler_bench import timed  # beside it in dev/gpu: the median of CUDA-event timings
except ImportError:  # `--spec` counts without torch
    torch = None

#: datasheet rates, dense BF16 tensor TFLOPS and memory TB/s (NVIDIA's H100 SXM and H200 SXM
#: sheets): what no kernel exceeds
SPEC = {"H100": (989.0, 3.35), "H200": (989.0, 4.8)}
#: the towers whose MLP is one linear layer, an activation and another (the others gate theirs)
PLAIN_MLP_TOWERS = {"qwen3_5", "qwen3_vl"}
#: vLLM's KV cache at the worker's default on a GPU of capability 8.9 or newer: one byte a value
KV_BYTES = 1
STATE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def shapes(config: dict) -> tuple[dict, dict]:
    """The vision tower's and the language model's shapes, in one spelling for every family:
    a tower's `depth`, `num_heads`, `spatial_merge_size` and `gated` (its MLP), and a language
    model's `head_dim` (a flat config, dots.mocr's, is its own language model)."""
    vision = dict(config["vision_config"])
    if "window_size" in vision or "fullatt_block_indexes" in vision:
        raise SystemExit("a tower with windowed attention (Qwen2.5-VL's) is not timed here")
    vision["depth"] = vision.get("depth") or vision["num_hidden_layers"]
    vision["num_heads"] = vision.get("num_heads") or vision["num_attention_heads"]
    vision["spatial_merge_size"] = (
        vision.get("spatial_merge_size") or config.get("spatial_merge_size") or 1
    )
    vision["gated"] = vision.get("model_type") not in PLAIN_MLP_TOWERS
    text = dict(config.get("text_config") or config)
    text["head_dim"] = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    return vision, text


def patches_and_tokens(vision: dict, width: int, height: int) -> tuple[int, int]:
    patch, merge = vision["patch_size"], vision["spatial_merge_size"]
    step = patch * merge
    w, h = max(step, round(width / step) * step), max(step, round(height / step) * step)
    n = (w // patch) * (h // patch)
    return n, n // (merge * merge)


def is_full_attention(text: dict, layer: int) -> bool:
    return (layer + 1) % text.get("full_attention_interval", 1) == 0


def text_linears(text: dict) -> list[tuple[int, int]]:
    """(in, out) of every prefill linear layer of the language model, layer by layer."""
    h, ff = text["hidden_size"], text["intermediate_size"]
    out: list[tuple[int, int]] = []
    for i in range(text["num_hidden_layers"]):
        out += [(h, 2 * ff), (ff, h)]  # the MLP's gate and up, then down
        if is_full_attention(text, i):
            q = text["num_attention_heads"] * text["head_dim"]
            kv = text["num_key_value_heads"] * text["head_dim"]
            gate = q if text.get("attn_output_gate") else 0
            out += [(h, q + gate + 2 * kv), (q, h)]
        else:  # a gated-delta-net layer
            k = text["linear_num_key_heads"] * text["linear_key_head_dim"]
            v = text["linear_num_value_heads"] * text["linear_value_head_dim"]
            out += [(h, 2 * k + 2 * v), (h, 2 * text["linear_num_value_heads"]), (v, h)]
    return out


def decode_linears(text: dict) -> list[tuple[int, int]]:
    """A decoding step's linear layers: the prefill's, then the LM head over the vocabulary."""
    return [*text_linears(text), (text["hidden_size"], text["vocab_size"])]


def vision_linears(vision: dict) -> list[tuple[int, int]]:
    d, ff = vision["hidden_size"], vision["intermediate_size"]
    mlp = [(d, 2 * ff), (ff, d)] if vision["gated"] else [(d, ff), (ff, d)]
    return [(d, 3 * d), (d, d), *mlp] * vision["depth"]


def decode_step_bytes(text: dict, context: int, seqs: int) -> dict[str, int]:
    """What one decoding step of `seqs` sequences reads besides the weights, each `context`
    tokens long: the full-attention layers' keys and values at vLLM's fp8, and the
    gated-delta-net layers' states, each read and written once."""
    layers = range(text["num_hidden_layers"])
    full = sum(is_full_attention(text, i) for i in layers)
    kv = full * 2 * text["num_key_value_heads"] * text["head_dim"] * context * KV_BYTES
    state = 0
    if full < len(layers):
        per_layer = (
            text["linear_num_value_heads"]
            * text["linear_key_head_dim"]
            * text["linear_value_head_dim"]
            * STATE_BYTES[text.get("mamba_ssm_dtype", "bfloat16")]
        )
        state = (len(layers) - full) * per_layer * 2
    return {"kv_cache": kv * seqs, "gdn_states": state * seqs}


def linear_stack(
    dims: list[tuple[int, int]], tokens: int, device: str, fp8: bool, gemm_only: bool = False
) -> Callable[[], None]:
    """The layers' GEMMs on a (tokens × in) input each; with `fp8`, weights and the input in
    FP8 with per-tensor scales (the input's found and applied at each call, in plain torch
    operations, unless `gemm_only`)."""
    dtype, fp8_type = torch.bfloat16, torch.float8_e4m3fn
    weights = {d: torch.randn(d[1], d[0], device=device, dtype=dtype) / d[0] ** 0.5 for d in dims}
    inputs = {k: torch.randn(tokens, k, device=device, dtype=dtype) for k, _ in dims}
    if not fp8:

        def run_bf16() -> None:
            for k, n in dims:
                F.linear(inputs[k], weights[(k, n)])

        return run_bf16
    one = torch.ones((), device=device)
    qweights = {d: (w / w.abs().max() * 448).to(fp8_type) for d, w in weights.items()}
    quantized = {k: (a / (a.abs().max().float() / 448)).to(fp8_type) for k, a in inputs.items()}

    def run() -> None:
        for k, n in dims:
            if gemm_only:  # the GEMMs alone: the floor a fused quantization would approach
                qa, scale = quantized[k], one
            else:
                a = inputs[k]
                scale = a.abs().max().float() / 448
                qa = (a / scale).to(fp8_type)
            torch._scaled_mm(qa, qweights[(k, n)].t(), scale_a=scale, scale_b=one, out_dtype=dtype)

    return run


def vision_attention(vision: dict, patches: int, device: str) -> Callable[[], None]:
    """The tower's attention cores over every patch, layer by layer (SDPA's kernel as chosen)."""
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


def fastest_attention(vision: dict, patches: int, device: str, repeat: int) -> tuple[float, str]:
    """The tower's attention time with the fastest kernel torch has here (flash, or cuDNN's,
    which on Hopper is nearer the kernels vLLM's towers run), and which it was."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    run = vision_attention(vision, patches, device)
    if device != "cuda":
        return timed(run, repeat, device), "cpu"
    times = {}
    for name, backend in (
        ("flash", SDPBackend.FLASH_ATTENTION),
        ("cudnn", SDPBackend.CUDNN_ATTENTION),
    ):
        try:
            with sdpa_kernel([backend]):
                times[name] = timed(run, repeat, device)
        except RuntimeError:  # a kernel this torch or GPU lacks
            continue
    best = min(times, key=times.get)
    return times[best], best


def read_gb_per_s(device: str, repeat: int) -> float:
    """The GPU memory's read rate as a reduction over 4 GiB sees it (what a bandwidth-bound
    decoding step can at best reach)."""
    buf = torch.zeros(1 << 30, device=device, dtype=torch.float32)
    ms = timed(buf.sum, repeat, device)
    return buf.numel() * 4 / ms / 1e6


def gemm_flops(dims: list[tuple[int, int]], rows: int) -> int:
    return 2 * rows * sum(k * n for k, n in dims)


def at_spec(
    vision: dict, text: dict, patches: int, tokens: int, answer: int, seqs: int, gpu: str
) -> dict[str, object]:
    """The page's arithmetic counted, and the pace it allows at the GPU's datasheet rates: the
    intake's operations at its peak, a decoding step at the slower of its operations and its
    bytes (the weights in bf16, once a step; the keys, values and states as
    `decode_step_bytes`)."""
    tflops, tb_s = SPEC[gpu]
    vision_flops = gemm_flops(vision_linears(vision), patches)
    attention_flops = 4 * patches * patches * vision["hidden_size"] * vision["depth"]
    prefill_flops = gemm_flops(text_linears(text), tokens)
    intake_ms = (vision_flops + attention_flops + prefill_flops) / tflops / 1e9
    head = decode_linears(text)
    weights = 2 * sum(k * n for k, n in head)
    reads = decode_step_bytes(text, tokens + answer // 2, seqs)
    step_ms = max(gemm_flops(head, seqs) / tflops / 1e9, weights / tb_s / 1e9)
    step_ms += sum(reads.values()) / tb_s / 1e9
    writing_ms = step_ms * answer / seqs
    return {
        "spec": f"{gpu}: {tflops:g} TFLOPS, {tb_s:g} TB/s",
        "vision_linear_tflop": round(vision_flops / 1e12, 2),
        "vision_attention_tflop": round(attention_flops / 1e12, 2),
        "text_linear_tflop": round(prefill_flops / 1e12, 2),
        "decode_step_weights_gb": round(weights / 1e9, 2),
        **{f"decode_step_{k}_gb": round(v / 1e9, 2) for k, v in reads.items()},
        "spec_intake_ms": round(intake_ms, 1),
        "spec_writing_ms": round(writing_ms, 1),
        "spec_ceiling_pages_per_s": round(1000 / (intake_ms + writing_ms), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="a family's example config (examples/)")
    parser.add_argument("--page", default="1632x2112", help="the page's pixels, WxH")
    parser.add_argument("--answer-tokens", type=int, default=800, help="tokens written a page")
    parser.add_argument("--seqs", type=int, default=256, help="sequences a decoding step")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--spec", choices=sorted(SPEC), help="count at a GPU's datasheet rates")
    parser.add_argument("--commit", help="the project's commit, kept in the timed row")
    args = parser.parse_args()
    vision, text = shapes(json.loads(args.config.read_text()))
    width, height = (int(x) for x in args.page.lower().split("x"))
    patches, tokens = patches_and_tokens(vision, width, height)
    if args.spec:
        counted = at_spec(vision, text, patches, tokens, args.answer_tokens, args.seqs, args.spec)
        head = {"config": args.config.name, "page": f"{width}x{height}", "patches": patches}
        print(json.dumps(head | {"prompt_tokens": tokens} | counted))
        return
    if torch is None:
        raise SystemExit("timing needs torch (count without it: --spec)")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    fp8 = device == "cuda" and torch.cuda.get_device_capability() >= (8, 9)
    pad = -(-tokens // 16) * 16  # FP8 GEMMs want dimensions in sixteens
    figures: dict[str, object] = {
        "date": datetime.date.today().isoformat(),
        "commit": args.commit,
        "config": args.config.name,
        "page": f"{width}x{height}",
        "patches": patches,
        "prompt_tokens": tokens,
        "answer_tokens": args.answer_tokens,
        "seqs": args.seqs,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
    }
    runs = {
        "vision_linear": (vision_linears(vision), -(-patches // 16) * 16),
        "text_linear": (text_linears(text), pad),
        # one decoding step of `seqs` sequences: a token each through the same layers and the head
        "decode_step_linear": (decode_linears(text), args.seqs),
    }
    for name, (dims, rows) in runs.items():
        for kind in ("bf16", "fp8", "fp8_gemm") if fp8 else ("bf16",):
            try:
                stack = linear_stack(dims, rows, device, kind != "bf16", kind == "fp8_gemm")
                figures[f"{name}_{kind}_ms"] = round(timed(stack, args.repeat, device), 2)
            except RuntimeError as e:  # an FP8 GEMM this torch or GPU lacks: said, not fatal
                figures[f"{name}_{kind}_error"] = str(e).splitlines()[0]
    attention_ms, figures["vision_attention_kernel"] = fastest_attention(
        vision, patches, device, args.repeat
    )
    figures["vision_attention_ms"] = round(attention_ms, 2)
    # the decoding step's reads, at the answer's middle: its mean context over the answer
    reads = decode_step_bytes(text, tokens + args.answer_tokens // 2, args.seqs)
    rate = read_gb_per_s(device, args.repeat)
    read_ms = sum(reads.values()) / rate / 1e6
    figures |= {f"decode_step_{k}_gb": round(v / 1e9, 2) for k, v in reads.items()}
    figures["read_gb_per_s"] = round(rate)
    figures["decode_step_read_ms"] = round(read_ms, 2)
    intake = attention_ms + sum(float(figures[f"{n}_linear_bf16_ms"]) for n in ("vision", "text"))
    step = float(figures["decode_step_linear_bf16_ms"]) + read_ms
    writing = step * args.answer_tokens / args.seqs
    figures["intake_ms"] = round(intake, 1)
    figures["writing_ms"] = round(writing, 1)
    figures["ceiling_pages_per_s"] = round(1000 / (intake + writing), 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
