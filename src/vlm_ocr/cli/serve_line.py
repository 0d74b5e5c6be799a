"""`vlm-ocr plan CONFIG --serve-line`: the `vllm serve` line(s) the worker would run for a model
on a host of `--gpus` GPUs of `--gpu-memory` GB, from the same settings as the plan.

A model the plan says does not fit is refused in one line that says why and what would fit
(a larger GPU, the model split over more GPUs, a quantised checkpoint, a shorter context). A line
that runs says, above it, how its `--max-num-seqs` stands to the pages the KV cache holds."""

from __future__ import annotations

import argparse
import shlex

from ..engines.vllm.argv import ServeSpec
from .plan import ACTIVATION_RESERVE_GB, GB, PROMPT_TOKENS, Plan, Sizing, read_shape
from .usage import UsageError

ROLES = {
    "server": "the API server(s): HTTP, and the page images decoded and preprocessed",
    "engine": "the engine launcher, started at the same moment: the engine core of each replica",
}
# The memory of the GPUs a worker is commonly lent (RTX 4090, RTX 5090, L40S, A100/H100,
# RTX PRO 6000, H200, B200): the larger ones a refusal names.
GPU_SIZES_GB = (24, 32, 48, 80, 96, 141, 180)
# Tokens left for a page's answer below which a shorter context is not worth suggesting.
MIN_ANSWER_TOKENS = 512


def serve_line_main(args: argparse.Namespace, sized: Sizing) -> int:
    per_gpu = (args.gpu_memory or [141])[0]
    check = sized.plan(per_gpu)
    if check.pages_at_once < 1:
        raise UsageError("--serve-line", refusal(sized, per_gpu, check, str(args.config)))
    spec = spec_for(sized, per_gpu, args.gpus or 1, args.capability, args.cpus)
    print(f"# {seqs_note(spec, check)}")
    print("\n".join(serve_lines(spec)))
    return 0


def spec_for(sized: Sizing, per_gpu: float, gpus: int, capability: float, cpus: int) -> ServeSpec:
    from ..engines.gpu import Gpu, GpuFacts

    gpu = Gpu(f"a GPU of {per_gpu:g} GB", round(per_gpu * GB / 2**20), capability)
    return ServeSpec.resolve(sized.settings, GpuFacts((gpu,) * gpus), sized.family, cpus=cpus)


def serve_lines(spec: ServeSpec) -> list[str]:
    """The `vllm serve` line of each process the worker would start, with the variables it
    sets for them (ports as the worker would pick them: here fixed)."""
    from ..engines.vllm.argv import engine_env, launch_argvs

    argvs = launch_argvs(spec, port=8000, rpc_port=8100)
    env = "".join(f"{name}={shlex.quote(value)} " for name, value in engine_env(spec.vllm).items())
    return [f"# {ROLES[role]}\n{env}{shlex.join(argv)}" for role, argv in argvs.items()]


def seqs_note(spec: ServeSpec, check: Plan) -> str:
    """How the line's `--max-num-seqs` stands to the pages the plan fits in the KV cache."""
    seqs, pages = spec.max_num_seqs, check.pages_at_once
    where = " per replica" if spec.data_parallel_size > 1 else ""
    source = "MAX_NUM_SEQS" if spec.vllm.max_num_seqs else "MAX_NUM_SEQS=0: by the GPU's memory"
    full = f"at the full page size ({check.page_tokens:,} tokens: image, prompt and answer cap)"
    head = f"--max-num-seqs {seqs}{where} ({source})"
    if seqs > pages:
        return (
            f"{head}: the KV cache holds {pages:,} pages at once {full}; the rest wait, and as "
            "pages end short of the cap more run at once"
        )
    if seqs < pages:
        return (
            f"{head}: the KV cache would hold {pages:,} pages at once {full}; MAX_NUM_SEQS up "
            f"to {pages} lets more run at once, which is not always faster (measure it)"
        )
    return f"{head}: the KV cache holds {pages:,} pages at once {full}"


def refusal(sized: Sizing, per_gpu: float, check: Plan, config: str) -> str:
    """Why the model does not fit, and what would."""
    tp = sized.settings.vllm.tensor_parallel_size
    util = sized.settings.vllm.gpu_memory_utilization
    gpus = "a GPU" if tp == 1 else f"{tp} GPUs"
    weights = check.weights_gb / tp
    if check.kv_budget_gb <= 0:
        room = per_gpu * util - ACTIVATION_RESERVE_GB
        why = (
            f"its weights take {weights:.1f} GB a GPU, more than the {room:.1f} GB a GPU of "
            f"{per_gpu:g} GB leaves them (× {util:g} GPU_MEMORY_UTILIZATION, less "
            f"{ACTIVATION_RESERVE_GB:g} GB for activations)"
        )
    else:
        why = (
            f"the KV cache left beside its weights ({check.kv_budget_gb:.1f} GB) holds no page "
            f"of {check.page_tokens:,} tokens"
        )
    would = fits_instead(sized, per_gpu, check)
    return (
        f"{sized.model} does not fit {gpus} of {per_gpu:g} GB: {why}; it would fit "
        f"{'; or '.join(would) if would else 'a larger GPU'} "
        f"(vlm-ocr plan {config} --gpu-memory {per_gpu:g} shows the arithmetic)"
    )


def fits_instead(sized: Sizing, per_gpu: float, check: Plan) -> list[str]:
    """What would hold at least one page: each answer found by planning it."""
    tp = sized.settings.vllm.tensor_parallel_size
    out = []
    larger = next((g for g in GPU_SIZES_GB if g > per_gpu and sized.plan(g).pages_at_once), None)
    if larger is not None:
        out.append(f"a GPU of {larger} GB")
    split = next((n for n in (2, 4, 8) if n > tp and sized.plan(per_gpu, n).pages_at_once), None)
    if split is not None:
        out.append(
            f"TENSOR_PARALLEL_SIZE={split} (--tensor-parallel-size {split}) on {split} such GPUs"
        )
    if read_shape(sized.cfg).quantization is None:
        for method, name in (("fp8", "an FP8"), ("awq", "a 4-bit AWQ")):
            quantised = sized.with_config(
                sized.cfg | {"quantization_config": {"quant_method": method}}
            )
            smaller = quantised.plan(per_gpu)
            if smaller.pages_at_once:
                out.append(f"{name} checkpoint of it (weights {smaller.weights_gb:.0f} GB)")
                break
    if check.kv_budget_gb > 0:  # the weights fit: a page of fewer tokens might
        state = read_shape(sized.cfg).linear_state_bytes
        tokens = int((check.kv_budget_gb * GB - state) // check.kv_bytes_per_token)
        if tokens - check.image_tokens - PROMPT_TOKENS >= MIN_ANSWER_TOKENS:
            out.append(
                f"MAX_MODEL_LEN={tokens} (--max-model-len {tokens}), a page's answer cut sooner"
            )
    return out
