"""`vlm-ocr-lab bench`: pages/s and the time per stage (render, engine, store) per page.

It runs jobs of a generated multi-page PDF through the same Worker the handler uses, with the
engine ENGINE selects and the store the settings select (a temp folder unless --bucket/--out).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from vlm_ocr import samples
from vlm_ocr.contract import JobResult, PageReport
from vlm_ocr.engines.base import EngineOptions
from vlm_ocr.engines.factory import make_engine
from vlm_ocr.engines.vllm.logs import summary as start_summary
from vlm_ocr.errors import EngineError
from vlm_ocr.images import PageImage
from vlm_ocr.pipeline.render import render_pdf_page
from vlm_ocr.pipeline.worker import build_worker
from vlm_ocr.settings import Settings

from .progress import PassProgress

STAGES = (
    "render_s",
    "orient_s",
    "queue_s",
    "engine_s",
    "layout_s",
    "store_s",
    "second_opinion_wait_s",
    "total_s",
)


def cpu_seconds(pids: list[int]) -> float:
    """CPU time the processes have used so far (Linux /proc): the render processes and the CPU
    models' processes, measured from outside them."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


async def bench_main(settings: Settings, args: argparse.Namespace) -> int:
    """Run the passes (and the direct path), print the figures; 1 when any page failed."""
    with contextlib.ExitStack() as stack:
        if args.loopback_s3:
            from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3

            s3 = LoopbackS3()
            stack.callback(s3.stop)
            settings = settings.with_(**s3.settings_update(s3.create_bucket("bench")))
        soak = stack.enter_context(instant_engine(args)) if args.instant_engine else None
        if soak is not None:
            settings = settings.with_(engine="openai", openai_base_url=soak.url)
        use_bucket = args.bucket or args.loopback_s3
        if use_bucket and not settings.bucket.configured:
            print("vlm-ocr-lab bench --bucket: set BUCKET_NAME and its credentials first")
            return 2
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="vlm-ocr-bench-"))
        out = None if use_bucket else (args.out or Path(tmp))
        t0 = time.perf_counter()
        engine = make_engine(settings, EngineOptions(exact_output_tokens=args.output_tokens))
        worker = build_worker(settings, engine, out_dir=out)
        await worker.start()
        cold_start = time.perf_counter() - t0
        try:
            # Later passes run on an engine that has seen the workload: a first pass slower
            # than the next is start-up work the warm-up page did not do.
            passes = [
                await run_bench(
                    worker,
                    pages=args.pages,
                    jobs=args.jobs,
                    second_opinion=args.second_opinion,
                    series=n,
                    progress_s=args.progress,
                )
                for n in range(args.passes)
            ]
            figures = passes[-1] | {"earlier_passes": passes[:-1]}
            if args.direct:
                try:
                    figures["direct"] = await _direct(worker, args)
                except EngineError as exc:  # the engine died: the passes' figures still count
                    figures["direct"] = {"skipped": f"the engine failed: {exc}"}
        finally:
            await worker.close()
        if soak is not None:
            figures["instant_engine"] = soak.stats()
    print_report(figures, worker.engine_facts(), cold_start, worker.store.kind, args.gpu_price)
    return 0 if all(p["failed"] == 0 for p in passes) else 1


class SoakEngine:
    """The soak's engine (`testing.instant_engine`) in a process of its own, so its threads
    take neither the worker's interpreter nor its memory."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc, self.url = proc, url

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as resp:
            return dict(json.loads(resp.read()))


@contextlib.contextmanager
def instant_engine(args: argparse.Namespace) -> Iterator[SoakEngine]:
    argv = [
        sys.executable,
        "-m",
        "vlm_ocr_lab.standins.instant_engine",
        "--faults",
        str(args.faults),
    ]
    argv += ["--slow", str(args.slow), "--slow-s", str(args.slow_s)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the instant engine did not start (it printed {url!r})")
        yield SoakEngine(proc, url)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # its signal to end
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Timeline:
    """When each engine request was sent and answered, recorded around the engine's `ask` (an
    engine with a server): how full a run kept the engine (the mean of requests in flight), how
    long it took to send the first request and to finish after the last answer. The worker and
    the direct path are measured alike, so their difference is the worker's own."""

    def __init__(self, engine: Any) -> None:
        self.spans: list[tuple[float, float]] = []
        self.sent = 0
        self.t0 = time.perf_counter()
        self._engine, self._ask = engine, getattr(engine, "ask", None)
        if self._ask is not None:
            engine.ask = self._recorded

    async def _recorded(self, *args: Any, **kwargs: Any) -> Any:
        sent = time.perf_counter()
        self.sent += 1
        try:
            return await self._ask(*args, **kwargs)
        finally:
            self.spans.append((sent, time.perf_counter()))

    def in_flight(self) -> int | None:
        """Requests sent and not answered yet; None for an engine without requests to see."""
        return self.sent - len(self.spans) if self._ask is not None else None

    def close(self) -> None:
        if self._ask is not None:
            del self._engine.ask  # the class's method again

    def figures(self, end: float) -> dict[str, float]:
        if not self.spans:
            return {}
        wall = end - self.t0
        first = min(s for s, _ in self.spans) - self.t0
        last = max(e for _, e in self.spans)
        busy = sum(e - s for s, e in self.spans)
        # Sweep the sends and answers in time order (an answer before a send at the same
        # instant): when the run first had its most requests in flight, and when it last did.
        events = sorted([(s, 1) for s, _ in self.spans] + [(e, -1) for _, e in self.spans])
        peak = in_flight = 0
        full_from = full_until = self.t0
        for t, step in events:
            if step < 0 and in_flight == peak:
                full_until = t
            in_flight += step
            if in_flight > peak:
                peak, full_from, full_until = in_flight, t, t
        return {
            "first_request_s": first,
            "after_last_answer_s": end - last,
            "mean_in_flight": busy / wall if wall else 0.0,
            "peak_in_flight": peak,
            "peak_from_s": full_from - self.t0,
            "peak_until_s": full_until - self.t0,
        }


async def run_bench(
    worker: Any,
    *,
    pages: int,
    jobs: int,
    second_opinion: bool = False,
    series: int = 0,
    progress_s: float = 0.0,
) -> dict[str, Any]:
    """One pass of `jobs` jobs of `pages` pages; pass `series` n for the n-th pass of a run."""
    stamp = time.strftime("%Y%m%d-%H%M%S")

    def job(j: int) -> dict[str, Any]:
        # Every job's pages differ, in every pass, so no page is served from the engine's
        # prefix cache or from the store's earlier results.
        first = (series * jobs + j) * pages + 1
        doc = samples.pdf_from_pages(samples.numbered_pages(pages, first=first))
        return {
            "pdf": {"base64": base64.b64encode(doc).decode()},
            "output_prefix": f"bench/{stamp}/pass-{series}/job-{j:03d}",
            "second_opinion": second_opinion,
        }

    # Made before the clock starts (2.2 s for a 224-page PDF on an H200 host): what the
    # user's job brings is not the worker's time.
    bench_jobs = [job(j) for j in range(jobs)]

    cpu0, pool0 = time.process_time(), cpu_seconds(worker.pool.pids())
    models0 = cpu_seconds(worker.cpu_models.pool.pids())
    # its t0 is the run's start, as on the direct path
    timeline = Timeline(worker.engine)
    label = f"worker pass {series + 1}"
    progress = PassProgress(label, pages * jobs, progress_s, timeline.in_flight)

    async def one(j: int) -> JobResult:
        return await worker.run(f"bench-{j}", bench_jobs[j], progress.page_done)

    try:
        results = await asyncio.gather(*(one(j) for j in range(jobs)))
    finally:
        progress.close()
        timeline.close()
    end = time.perf_counter()
    wall = end - timeline.t0
    cpu, pool_cpu = time.process_time() - cpu0, cpu_seconds(worker.pool.pids()) - pool0
    models_cpu = cpu_seconds(worker.cpu_models.pool.pids()) - models0
    page_reports = [p for r in results for p in r.pages]
    per_stage = {s: [p.timings[s] for p in page_reports if s in p.timings] for s in STAGES}
    return {
        "pages": len(page_reports),
        "failed": sum(p.status != "ok" for p in page_reports) + sum(not r.pages for r in results),
        "wall_s": wall,
        "pages_per_s": len(page_reports) / wall if wall else 0.0,
        "output_tokens_per_s": sum(p.output_tokens or 0 for p in page_reports) / wall,
        "worker_cpu_ms_per_page": 1000 * cpu / max(1, len(page_reports)),
        "render_cpu_ms_per_page": 1000 * pool_cpu / max(1, len(page_reports)),
        "cpu_models_cpu_ms_per_page": 1000 * models_cpu / max(1, len(page_reports)),
        "review": sum(bool(p.review) for p in page_reports),
        "failures": failure_reasons(page_reports)
        + Counter(f"job: {r.error}" for r in results if not r.pages),
        "sent_again": sum(resent(p) for p in page_reports),
        "pages_sent_again": sum(resent(p) > 0 for p in page_reports),
        # after every job's last step (the whole-document pass too): passes that stay level
        # keep nothing of the pages they read
        "peak_mb": peak_mb(),
        "timeline": timeline.figures(end),
        "stages": {
            s: {"p50": percentile(v, 50), "p95": percentile(v, 95), "mean": statistics.fmean(v)}
            for s, v in per_stage.items()
            if v
        },
    }


def failure_reasons(pages: Sequence[PageReport]) -> Counter[str]:
    """Failed pages by reason: the stage and the message, less the tries it took."""
    return Counter(
        f"{p.error_stage}: " + re.sub(r" \(\d+ tries\)", "", p.error or "")[:200]
        for p in pages
        if p.status == "failed"
    )


def resent(page: PageReport) -> int:
    """Requests of a page sent again after a transport failure (tries beyond its attempts)."""
    return max(0, (page.tries or 0) - max(page.attempts, 1))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _direct(worker: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The same number of pages straight to the engine's server, at the worker's concurrency,
    first attempt only: the baseline that shows the worker's overhead."""
    engine = worker.engine
    if not hasattr(engine, "ask"):
        return {"skipped": f"the {engine.facts.name} engine has no server to call directly"}
    # Pages of the same shape and number as a worker pass's, but new to the engine's prefix cache.
    count = args.pages * args.jobs
    pdf = samples.pdf_from_pages(samples.numbered_pages(count, first=args.passes * count + 1))
    budget = engine.budget(worker.settings.render.max_pixels)
    with tempfile.NamedTemporaryFile(suffix=".pdf") as fh:  # rendered in the worker's processes
        fh.write(pdf)
        fh.flush()
        timeout = worker.settings.render.render_timeout_s
        pages = await asyncio.gather(
            *(
                worker.pool.run(render_pdf_page, fh.name, n, budget, timeout_s=timeout)
                for n in range(1, count + 1)
            )
        )
    prompt = engine.prompt_for(None, None, None)
    gate = asyncio.Semaphore(worker.engine_slots)
    latencies: list[float] = []
    tokens: list[int] = []

    timeline = Timeline(engine)
    progress = PassProgress("direct path", count, args.progress, timeline.in_flight)

    async def one(page: PageImage) -> None:
        async with gate:
            t0 = time.perf_counter()
            answer = await engine.ask(page.png, prompt, engine.attempts[0])
            latencies.append(time.perf_counter() - t0)
            tokens.append(answer.output_tokens or 0)
            progress.page_done()

    try:
        await asyncio.gather(*(one(p) for p in pages))
    finally:
        progress.close()
        timeline.close()
    end = time.perf_counter()
    wall = end - timeline.t0
    return {
        "pages": count,
        "timeline": timeline.figures(end),
        "wall_s": wall,
        "pages_per_s": count / wall,
        "output_tokens_per_s": sum(tokens) / wall,
        "p50": percentile(latencies, 50),
        "p95": percentile(latencies, 95),
    }


def print_report(
    fig: dict[str, Any],
    engine: dict[str, Any],
    cold_start: float,
    store: str,
    gpu_price: float | None = None,
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
    print_start(engine)

    def totals(p: dict[str, Any]) -> str:
        return (
            f"pages: {p['pages']}  failed: {p['failed']}  wall: {p['wall_s']:.2f} s  "
            f"pages/s: {p['pages_per_s']:.2f}  output tokens/s: {p['output_tokens_per_s']:.0f}"
        )

    earlier = fig.get("earlier_passes", [])
    for n, p in enumerate(earlier, 1):
        print(f"pass {n}: {totals(p)}")
        print_timeline(f"pass {n}", p)
    print((f"pass {len(earlier) + 1}: " if earlier else "") + totals(fig))
    print(
        f"CPU per page: worker process (event loop, HTTP, JSON, store; and the CPU engine) "
        f"{fig['worker_cpu_ms_per_page']:.1f} ms, render processes "
        f"{fig['render_cpu_ms_per_page']:.1f} ms"
        + (
            f", CPU-model processes (orientation, second opinion) "
            f"{fig['cpu_models_cpu_ms_per_page']:.1f} ms ({fig['review']} pages to review)"
            if fig["cpu_models_cpu_ms_per_page"]
            else ""
        )
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
                f"direct to server: pages/s {direct['pages_per_s']:.2f}  output tokens/s "
                f"{direct['output_tokens_per_s']:.0f}  latency p50 "
                f"{direct['p50']:.3f} s p95 {direct['p95']:.3f} s  "
                f"worker/direct pages/s ratio {fig['pages_per_s'] / direct['pages_per_s']:.2f}"
            )
    print_timeline("worker", fig)
    print_timeline("direct", direct or {})
    print_faults(fig)
    if gpu_price:
        print_cost(gpu_price, fig, direct or {})


def print_start(engine: dict[str, Any]) -> None:
    """The engine's start as vLLM's log took it apart, and what it started with."""
    if phases := engine.get("cold_start"):
        print(f"cold start by vLLM's log: {start_summary(phases)}")
    if "api_server_count" in engine:
        caches = engine.get("caches", {})
        print(
            f"API servers: {engine['api_server_count']}, start mode: {engine.get('start_mode')}, "
            f"caches: {caches.get('state')}"
            + (f" ({caches['folder']})" if "folder" in caches else "")
        )


def print_faults(fig: dict[str, Any]) -> None:
    """Failed pages by reason and requests sent again (every pass together), the memory after
    each pass, and what the soak's engine did."""
    passes = [*fig.get("earlier_passes", []), fig]
    for reason, count in sum((p["failures"] for p in passes), Counter()).most_common():
        print(f"failed: {count} × {reason}")
    print(
        f"transport: {sum(p['sent_again'] for p in passes)} requests sent again after a "
        f"transport failure, on {sum(p['pages_sent_again'] for p in passes)} pages"
    )
    first, last = passes[0]["peak_mb"], passes[-1]["peak_mb"]
    if len(passes) == 1:
        print(f"worker memory: peak {first:.0f} MB")
    else:
        print(
            f"worker memory: peak {first:.0f} MB after pass 1 ({passes[0]['pages']:,} pages), "
            f"{last:.0f} MB after pass {len(passes)} ({sum(p['pages'] for p in passes):,} pages "
            f"in all): {100 * (last / first - 1):+.1f} %"
        )
    if stats := fig.get("instant_engine"):
        lost = {k.removeprefix("fault "): v for k, v in sorted(stats.items()) if "fault" in k}
        print(
            f"instant engine: {stats.get('requests', 0):,} requests, "
            f"{sum(lost.values()):,} lost on the way ("
            + ", ".join(f"{k} {v}" for k, v in lost.items())
            + f"), {stats.get('slow', 0):,} answered slowly"
        )


def print_cost(price: float, fig: dict[str, Any], direct: dict[str, Any]) -> None:
    """What a million pages cost at `price` US$ an hour for the worker's GPUs."""

    def per_million(pages_per_s: float) -> float:
        return price * 1e6 / (pages_per_s * 3600)

    line = f"cost at US${price:g}/hour: US${per_million(fig['pages_per_s']):,.2f} per million pages"
    if direct.get("pages_per_s"):
        line += f" (direct path US${per_million(direct['pages_per_s']):,.2f})"
    print(line)


def print_timeline(name: str, figures: dict[str, Any]) -> None:
    if t := figures.get("timeline"):
        print(
            f"{name} timeline: first request at {t['first_request_s']:.2f} s, end "
            f"{t['after_last_answer_s']:.2f} s after the last answer, requests in flight "
            f"{t['mean_in_flight']:.1f} on average, {t['peak_in_flight']} at most "
            f"from {t['peak_from_s']:.2f} s to {t['peak_until_s']:.2f} s"
        )
