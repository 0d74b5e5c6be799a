"""`vlm-ocr-lab bench`: its arguments, and which benchmark they pick: the pipeline's pages/s and
time per stage (`bench`), the worker's peak memory (`bench --memory`), what page structure costs
(`layout_bench`), a document spread over local workers (`fanout_bench`), a corpus
stopped and run again (`corpus`), or what vLLM's API servers spend on a page (`frontend`)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import NamedTuple

from vlm_ocr.settings import Settings


class BatchingShape(NamedTuple):
    seqs: int
    intake_ms: float
    step_ms: float
    busy: float = 0.0


def batching_shape(text: str) -> BatchingShape:
    """`--batching-engine SEQS,INTAKE_MS,STEP_MS[,BUSY]`, or argparse's error naming the form."""
    try:
        seqs, intake, step, *busy = text.split(",")
        shape = BatchingShape(int(seqs), float(intake), float(step), *map(float, busy))
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not SEQS,INTAKE_MS,STEP_MS[,BUSY] (for example 256,55,17,0.9)"
        ) from None
    if shape.seqs < 1 or shape.intake_ms < 0 or shape.step_ms <= 0 or not 0 <= shape.busy <= 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: SEQS >= 1, INTAKE_MS >= 0, STEP_MS > 0, BUSY from 0 to 1"
        )
    return shape


def _positive(text: str) -> float:
    """A temperature above 0 (greedy is what it replaces), or argparse's error saying so."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 2:
        raise argparse.ArgumentTypeError(f"{text!r}: a temperature above 0, at most 2 (e.g. 1)")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pages",
        type=int,
        help="pages per job (default 12; with --fanout, per document: 60); 0: the engine's start "
        "alone",
    )
    p.add_argument("--jobs", type=int, default=1, help="jobs run at once (default 1)")
    p.add_argument(
        "--passes",
        type=int,
        default=1,
        help="run the jobs N times on the same engine and print each pass (default 1); "
        "--direct compares with the last",
    )
    p.add_argument("--out", type=Path, help="local results folder (default: a temp folder)")
    p.add_argument("--bucket", action="store_true", help="store in the configured bucket")
    p.add_argument(
        "--loopback-s3",
        action="store_true",
        help="store in an S3 server started on loopback (needs moto)",
    )
    p.add_argument(
        "--second-opinion",
        action="store_true",
        help="jobs ask for the CPU engine's second opinion on every page (its cost per page)",
    )
    p.add_argument(
        "--direct",
        action="store_true",
        help="also send the same pages straight to the engine's server",
    )
    p.add_argument(
        "--direct-first",
        action="store_true",
        help="with --direct: the direct path before the worker's passes, not after, so a "
        "worker pass slower than the direct path is told from the engine's first busy minute",
    )
    p.add_argument(
        "--progress",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="print how far each pass and the direct path have come (pages done of all, pace, "
        "time left) every SECONDS and at the first page (default 30; 0: never), so a run "
        "stopped at a time limit still shows its pace",
    )
    p.add_argument(
        "--gpu-price",
        type=float,
        metavar="USD_PER_HOUR",
        help="also print what a million pages cost at this GPU price per hour (all the "
        "worker's GPUs together)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        help="end the passes and the direct path this many seconds after the bench began: "
        "what is not done by then counts as failed (cut), so a run on a lent GPU still says "
        "what it measured",
    )
    p.add_argument(
        "--start-together",
        type=Path,
        metavar="FILE",
        help="benches sharing one GPU (the GPU check's ENGINES_ON_GPU): once the engine is "
        "ready, write FILE.ready-PID and wait until FILE exists (within --time-limit) before "
        "the passes, so their passes run at the same time; with --direct, the same with "
        "FILE.second before the direct path (before the passes with --direct-first)",
    )
    _stand_in_arguments(p)
    _record_arguments(p)
    _other_benchmarks(p)


def _stand_in_arguments(p: argparse.ArgumentParser) -> None:
    """How the answers of a model on dummy weights are made like a trained model's."""
    p.add_argument(
        "--output-tokens",
        type=int,
        help="make every answer exactly N tokens (ignore_eos), in the worker and the direct "
        "path alike: like-for-like figures on dummy weights",
    )
    p.add_argument(
        "--greedy-temperature",
        type=_positive,
        metavar="T",
        help="send a family's greedy attempt (temperature 0) at temperature T, without top-p, "
        "in the worker and the direct path alike: on dummy weights a greedy answer repeats the "
        "prompt's last token (a special token or a newline: no text, and a skipped token costs "
        "the API servers' detokenizer at every step); sampled, a stand-in writes text (the GPU "
        "check sends 1)",
    )


def _record_arguments(p: argparse.ArgumentParser) -> None:
    """--record: the run as one row of the GPU figures' data file (`vlm_ocr_lab.measured`)."""
    p.add_argument(
        "--record",
        type=Path,
        metavar="FILE",
        help="append the run to FILE as one JSON row of the GPU figures' data "
        "(benchmarks/gpu.jsonl's schema), checked before it is written",
    )
    p.add_argument(
        "--commit",
        help="--record: the commit that ran (default: git's HEAD here, else 'unknown')",
    )
    p.add_argument(
        "--model",
        help="--record: the checkpoint whose shapes ran (default: MODEL_NAME; a dummy-weight "
        "folder names its checkpoint here)",
    )
    p.add_argument(
        "--start",
        choices=("fresh", "warm"),
        help="--record: the start's kind where the engine's facts do not say it (a start that "
        "failed); else warm when the engine reused caches on the volume or hit its compile cache, "
        "fresh when it built them",
    )
    p.add_argument("--note", default="", help="--record: what a reader of the row must know")


def _other_benchmarks(p: argparse.ArgumentParser) -> None:
    """The benchmarks besides the pipeline's own: memory, fan-out, page structure, the soak."""
    p.add_argument(
        "--memory",
        action="store_true",
        help="print the worker's peak memory for one page, 64 large images and a 2,000-page "
        "PDF (no engine), and the render cost per page",
    )
    p.add_argument("--scenario", help=argparse.SUPPRESS)
    p.add_argument(
        "--fanout",
        action="store_true",
        help="one document as one job on one worker, then spread over --workers local workers "
        "behind a stand-in for RunPod's endpoint (needs moto)",
    )
    p.add_argument(
        "--workers", type=int, default=2, help="workers for --fanout and --corpus (default 2)"
    )
    p.add_argument(
        "--pages-per-job", type=int, default=10, help="job size for --fanout (default 10)"
    )
    p.add_argument(
        "--corpus",
        action="store_true",
        help="vlm-ocr submit over --documents small documents on --workers local workers, "
        "stopped half-way and run again, then the client alone over --listing documents "
        "(needs moto)",
    )
    p.add_argument(
        "--documents", type=int, default=200, help="documents for --corpus (default 200)"
    )
    p.add_argument(
        "--listing", type=int, default=5000, help="documents of --corpus's listing (default 5000)"
    )
    p.add_argument(
        "--layout",
        action="store_true",
        help="what blocks, figure crops and the searchable PDF cost per page (no engine; "
        "--pages scanned pages, default 24)",
    )
    p.add_argument(
        "--front-end",
        action="store_true",
        help="the CPU time vLLM's API servers spend preparing one page, drawn on the family's "
        "grid and off it (ENGINE=vllm; --pages requests each, default 16)",
    )
    p.add_argument(
        "--batching-engine",
        type=batching_shape,
        metavar="SEQS,INTAKE_MS,STEP_MS[,BUSY]",
        help="an OpenAI-compatible server on loopback that batches as vLLM does, in time only "
        "(ENGINE=openai): SEQS requests at once, each engine step taking one page in "
        "(INTAKE_MS) or decoding (STEP_MS), BUSY of each step on a CPU (default 0); with "
        "--direct, whether the worker keeps such an engine as busy as requests sent straight to "
        "it (LightOnOCR 2 on an H200: 256,55,17)",
    )
    p.add_argument(
        "--instant-engine",
        action="store_true",
        help="the soak: an OpenAI-compatible server on loopback that answers at once (ENGINE="
        "openai), losing --faults of the requests on the way and answering --slow of them late",
    )
    p.add_argument(
        "--faults", type=float, default=0.02, help="--instant-engine: share lost (default 0.02)"
    )
    p.add_argument(
        "--slow", type=float, default=0.005, help="--instant-engine: share slow (default 0.005)"
    )
    p.add_argument(
        "--slow-s", type=float, default=2.0, help="--instant-engine: how slow, s (default 2)"
    )
    p.add_argument(
        "--spare",
        type=int,
        default=0,
        help="--instant-engine: the first N requests are answered at once, never lost (1: the "
        "warm-up page, so the worker starts and its pages meet the faults; default 0)",
    )


def bench_command(settings: Settings, args: argparse.Namespace) -> int:
    """Run the benchmark the arguments pick (each imported only when it runs)."""
    if args.memory:
        from vlm_ocr_lab.bench.memory import memory_main, render_overhead

        if not args.scenario:
            render_overhead()
        return memory_main(settings, args.scenario)
    if args.layout:
        from vlm_ocr_lab.bench.layout import layout_main

        return asyncio.run(layout_main(settings, args.pages or 24))
    if args.front_end:
        from vlm_ocr_lab.bench.frontend import frontend_main

        return asyncio.run(frontend_main(settings, args.pages or 16))
    if args.corpus:
        from vlm_ocr_lab.bench.corpus import corpus_main

        return corpus_main(
            settings, documents=args.documents, listing=args.listing, workers=args.workers
        )
    if args.fanout:
        from vlm_ocr_lab.bench.fanout import fanout_main

        return fanout_main(
            settings,
            pages=args.pages or 60,
            workers=args.workers,
            pages_per_job=args.pages_per_job,
        )
    from vlm_ocr_lab.bench.pipeline import bench_main

    if args.pages is None:
        args.pages = 12
    return asyncio.run(bench_main(settings, args))
