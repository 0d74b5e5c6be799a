"""`vlm-ocr bench`: pages/s and the time per stage (render, engine, store) per page.

It runs jobs of a generated multi-page PDF through the same Worker the handler uses, with the
engine ENGINE selects and the store the settings select (a temp folder unless --bucket/--out).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from . import samples
from .app import start_worker
from .prompts import resolve
from .render import PageImage, pdf_page_image
from .settings import Settings

STAGES = ("render_s", "queue_s", "engine_s", "store_s", "total_s")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


async def bench_main(settings: Settings, args: argparse.Namespace) -> int:
    s3 = None
    if args.loopback_s3:
        from .loopback_s3 import LoopbackS3

        s3 = LoopbackS3()
        settings = settings.model_copy(update=s3.settings_update(s3.create_bucket("bench")))
    try:
        with tempfile.TemporaryDirectory(prefix="vlm-ocr-bench-") as tmp:
            use_bucket = args.bucket or args.loopback_s3
            out = None if use_bucket else (args.out or Path(tmp))
            if use_bucket and not settings.bucket_configured:
                print("vlm-ocr bench --bucket: set BUCKET_NAME and its credentials first")
                return 2
            t0 = time.perf_counter()
            worker = await start_worker(settings, out_dir=out)
            cold_start = time.perf_counter() - t0
            try:
                figures = await run_bench(worker, pages=args.pages, jobs=args.jobs)
                if args.direct:
                    figures["direct"] = await _direct(worker, args)
            finally:
                await worker.close()
    finally:
        if s3 is not None:
            s3.stop()
    print_report(figures, worker.engine_facts(), cold_start, worker.store.kind)
    return 0 if figures["failed"] == 0 else 1


async def run_bench(worker: Any, *, pages: int, jobs: int) -> dict[str, Any]:
    stamp = time.strftime("%Y%m%d-%H%M%S")

    async def one(j: int) -> dict[str, Any]:
        # Every job's pages differ, so no page is served from the engine's prefix cache.
        doc = samples.pdf_from_pages(samples.numbered_pages(pages, first=j * pages + 1))
        pdf = base64.b64encode(doc).decode()
        job = {"pdf": {"base64": pdf}, "output_prefix": f"bench/{stamp}/job-{j:03d}"}
        return await worker.run(f"bench-{j}", job)

    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(j) for j in range(jobs)))
    wall = time.perf_counter() - t0
    page_reports = [p for r in results for p in r.get("pages", [])]
    per_stage = {s: [p["timings"][s] for p in page_reports if s in p["timings"]] for s in STAGES}
    return {
        "pages": len(page_reports),
        "failed": sum(p["status"] != "ok" for p in page_reports)
        + sum("pages" not in r for r in results),
        "wall_s": wall,
        "pages_per_s": len(page_reports) / wall if wall else 0.0,
        "stages": {
            s: {"p50": percentile(v, 50), "p95": percentile(v, 95), "mean": statistics.fmean(v)}
            for s, v in per_stage.items()
            if v
        },
    }


async def _direct(worker: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The same number of pages straight to the engine's server, at the worker's concurrency,
    first attempt only: the baseline that shows the worker's overhead."""
    engine = worker.engine
    if not hasattr(engine, "ask"):
        return {"skipped": f"the {engine.facts.name} engine has no server to call directly"}
    # Pages of the same shape and number as the worker's, but new to the engine's prefix cache.
    count = args.pages * args.jobs
    pdf = samples.pdf_from_pages(samples.numbered_pages(count, first=count + 1))
    pages = [pdf_page_image(pdf, n, worker.budget()) for n in range(1, count + 1)]
    prompt = resolve(None, None, worker.settings.default_prompt)
    gate = asyncio.Semaphore(worker.engine_slots)
    latencies: list[float] = []

    async def one(page: PageImage) -> None:
        async with gate:
            t0 = time.perf_counter()
            await engine.ask(page.png, prompt, 0.0)
            latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(p) for p in pages))
    wall = time.perf_counter() - t0
    return {
        "pages": count,
        "wall_s": wall,
        "pages_per_s": count / wall,
        "p50": percentile(latencies, 50),
        "p95": percentile(latencies, 95),
    }


def print_report(
    fig: dict[str, Any], engine: dict[str, Any], cold_start: float, store: str
) -> None:
    print(
        f"engine: {engine['name']} {engine['version']} model={engine.get('model')} "
        f"concurrency={engine['concurrency']}  store: {store}"
    )
    print(f"cold start (start + warm-up): {cold_start:.2f} s", end="")
    if "spawn_to_healthy_s" in engine:
        print(
            f"  = spawn to healthy {engine['spawn_to_healthy_s']:.2f} s"
            f" + warm-up page {engine['warmup_s']:.2f} s",
            end="",
        )
    print()
    print(
        f"pages: {fig['pages']}  failed: {fig['failed']}  wall: {fig['wall_s']:.2f} s  "
        f"pages/s: {fig['pages_per_s']:.2f}"
    )
    print(f"{'stage (s/page)':<16}{'p50':>10}{'p95':>10}{'mean':>10}")
    # total_s is each page's latency through the worker (render to stored)
    for stage, v in fig["stages"].items():
        print(f"{stage:<16}{v['p50']:>10.4f}{v['p95']:>10.4f}{v['mean']:>10.4f}")
    direct = fig.get("direct")
    if direct:
        if "skipped" in direct:
            print(f"direct: skipped ({direct['skipped']})")
        else:
            print(
                f"direct to server: pages/s {direct['pages_per_s']:.2f}  latency p50 "
                f"{direct['p50']:.3f} s p95 {direct['p95']:.3f} s  "
                f"worker/direct pages/s ratio {fig['pages_per_s'] / direct['pages_per_s']:.2f}"
            )
