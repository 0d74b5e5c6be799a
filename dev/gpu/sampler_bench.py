"""Time vLLM's top-p sampling alone, as one decode step runs it, on the GPU host's engine.

A question the GPU check cannot answer by itself: how much of a decode step is the sampler? A
family that samples with a top_p below 1 (LightOnOCR 2: temperature 0.2, top_p 0.9) goes through
vLLM's top-p filter on every step; greedy requests and top_p 1.0 do not. On the GPU host the
filter is vLLM's Triton kernel (`dev/gpu/env.sh` keeps FlashInfer's sampler off there; the image's
vLLM has FlashInfer's compiled kernels and uses its fused sampler). This times, per batch size,
with CUDA events:

  softmax + sample   what every step does
  top-p, Triton      vLLM's `apply_top_k_top_p_triton`, then softmax + sample
  top-p, PyTorch     vLLM's sort-based fallback, then softmax + sample
  top-p, FlashInfer  FlashInfer's fused sampler, where its kernels load (else said why not)

over two kinds of logits: flat (what random weights give: every token about as likely, the worst
case for a top-p filter, which must keep most of the vocabulary) and peaked (one token well ahead,
as a trained model reading a page is).

On the GPU host, from the project's root, after `. dev/gpu/env.sh` with VLLM=0.32:
    $VLLM_PYTHON dev/gpu/sampler_bench.py [--vocab 151936] [--batches 64,128,256,512]
It prints one line per case: milliseconds per call (median of --repeat).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch


def logits_of(kind: str, batch: int, vocab: int, device: str) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(0)
    logits = torch.randn(batch, vocab, generator=gen, device=device, dtype=torch.float32)
    if kind == "flat":
        return logits * 0.02
    logits[:, 0] += 20.0  # one token far ahead, a few near it
    logits[:, 1:8] += 12.0
    return logits


def sample(logits: torch.Tensor) -> torch.Tensor:
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    q = torch.empty_like(probs).exponential_()
    return probs.div_(q).argmax(dim=-1)


def timed(fn: Callable[[], object], repeat: int, device: str) -> float:
    """Median milliseconds of one call, after two warm-up calls (Triton compiles at the first)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeat):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            import time

            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def samplers() -> dict[str, Callable[[torch.Tensor, torch.Tensor], object] | str]:
    """Each top-p implementation by name, or why it cannot run here."""
    found: dict[str, Callable[[torch.Tensor, torch.Tensor], object] | str] = {}
    try:
        from vllm.v1.sample.ops.topk_topp_triton import apply_top_k_top_p_triton

        found["top-p, Triton"] = lambda x, p: sample(apply_top_k_top_p_triton(x, None, p))
    except Exception as exc:  # a CPU build has no Triton kernel
        found["top-p, Triton"] = f"not loaded ({type(exc).__name__}: {exc})"
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    found["top-p, PyTorch"] = lambda x, p: sample(apply_top_k_top_p_pytorch(x, None, p))
    try:
        from vllm.v1.sample.ops.topk_topp_sampler import flashinfer_sample

        found["top-p, FlashInfer"] = lambda x, p: flashinfer_sample(x.contiguous(), None, p, {})
    except Exception as exc:
        found["top-p, FlashInfer"] = f"not loaded ({type(exc).__name__}: {exc})"
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=151_936, help="Qwen2/3's vocabulary")
    parser.add_argument("--batches", default="64,128,256,512")
    parser.add_argument("--top-p", type=float, nargs="+", default=[0.9, 0.1])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    device = args.device
    print(
        f"device {torch.cuda.get_device_name(0) if device == 'cuda' else 'cpu'}, "
        f"torch {torch.__version__}, vocab {args.vocab}, ms per call (median of {args.repeat})"
    )
    impls = samplers()
    for batch in (int(b) for b in args.batches.split(",")):
        for kind in ("flat", "peaked"):
            base = logits_of(kind, batch, args.vocab, device)
            ms = timed(lambda x=base: sample(x.clone()), args.repeat, device)
            print(f"batch {batch:4d} {kind:6s} softmax + sample          {ms:8.3f}")
            for top_p in args.top_p:
                p = torch.full((batch,), top_p, device=device, dtype=torch.float32)
                for name, fn in impls.items():
                    if isinstance(fn, str):
                        print(f"batch {batch:4d} {kind:6s} {name:24s} p={top_p}: {fn}")
                        continue
                    try:
                        ms = timed(lambda f=fn, x=base, p=p: f(x.clone(), p), args.repeat, device)
                    except Exception as exc:
                        impls[name] = f"failed ({type(exc).__name__}: {str(exc)[:160]})"
                        print(f"batch {batch:4d} {kind:6s} {name:24s} p={top_p}: {impls[name]}")
                        continue
                    print(f"batch {batch:4d} {kind:6s} {name:24s} p={top_p} {ms:8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
