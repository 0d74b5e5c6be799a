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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlm_ocr import samples
from vlm_ocr.contract import JobResult, PageReport
from vlm_ocr.engines.base import EngineOptions
from vlm_ocr.engines.factory import make_engine
from vlm_ocr.errors import EngineError
from vlm_ocr.images import PageImage
from vlm_ocr.pipeline.render import render_pdf_page
from vlm_ocr.pipeline.worker import build_worker
from vlm_ocr.settings import Settings
from vlm_ocr_lab.bench.report import print_failures_first, print_report

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
    """Run the passes (and the direct path) and print the figures, failed pages first; 1 when
    any page failed or the engine did not start. With `--record FILE`, the run is appended to
    FILE as one row of the GPU figures' data (`vlm_ocr_lab.measured`)."""
    with contextlib.ExitStack() as stack:
        if args.loopback_s3:
            from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3

            s3 = LoopbackS3()
            stack.callback(s3.stop)
            settings = settings.with_(**s3.settings_update(s3.create_bucket("bench")))
        soak = stack.enter_context(standin_engine(args)) if standin_argv(args) else None
        if soak is not None:
            settings = settings.with_(engine="openai", openai_base_url=soak.url)
        if args.batching_engine and not settings.vllm.max_num_seqs:  # the worker sized for it
            settings = settings.with_(max_num_seqs=args.batching_engine.seqs)
        use_bucket = args.bucket or args.loopback_s3
        if use_bucket and not settings.bucket.configured:
            print("vlm-ocr-lab bench --bucket: set BUCKET_NAME and its credentials first")
            return 2
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="vlm-ocr-bench-"))
        out = None if use_bucket else (args.out or Path(tmp))
        deadline = Deadline.after(args.time_limit)
        t0 = time.perf_counter()
        options = EngineOptions(
            exact_output_tokens=args.output_tokens, greedy_temperature=args.greedy_temperature
        )
        engine = make_engine(settings, options)
        worker = build_worker(settings, engine, out_dir=out)
        run = Run()
        try:
            await _start_and_measure(worker, args, deadline, t0, run)
        finally:
            await worker.close()
        if soak is not None and run.figures:
            kind = "batching_engine" if args.batching_engine else "instant_engine"
            run.figures[kind] = soak.stats()
    facts = worker.engine_facts()
    failed = print_failures_first(run.figures, run.figures.get("direct", {}), run.start_error)
    if run.start_error is None:
        print_report(run.figures, facts, run.cold_start, worker.store.kind, args.gpu_price)
    if args.record:
        from vlm_ocr_lab.bench.record import append, row

        family = facts.get("family") or getattr(getattr(engine, "family", None), "name", None)
        data = row(run, facts, args, settings, os.environ, family or facts["name"])
        written = append(args.record, data)
        print(f"recorded: one row appended to {args.record} ({written})")
    return 1 if failed else 0


@dataclass
class Run:
    """What a run came to: its figures (the last pass's, with the earlier passes and the direct
    path inside), the start, or why the engine did not start."""

    figures: dict[str, Any] = field(default_factory=dict)
    cold_start: float = 0.0
    start_error: str | None = None


@dataclass(frozen=True)
class Deadline:
    """`--time-limit`: when the run's passes and direct path must end (None: never)."""

    at: float | None

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        return cls(time.perf_counter() + seconds if seconds else None)

    def left(self) -> float | None:
        return None if self.at is None else max(0.0, self.at - time.perf_counter())


async def _start_and_measure(
    worker: Any, args: argparse.Namespace, deadline: Deadline, t0: float, run: Run
) -> None:
    try:
        await worker.start()
    except EngineError as exc:  # the start's own reason, in one line: the log has the rest
        run.start_error = str(exc).splitlines()[0]
        return
    run.cold_start = time.perf_counter() - t0
    if not args.pages:  # --pages 0: the start alone
        return
    go = args.start_together
    if go:
        await _start_together(
            go, deadline, "the direct path" if args.direct_first else "the passes"
        )
    if args.direct_first:
        await _direct_into(run, worker, args, deadline)
        if go:  # the benches' second phase at once too, whichever finished its first sooner
            await _start_together(second_phase(go), deadline, "the worker's passes")
    # Later passes run on an engine that has seen the workload: a first pass slower than the
    # next is start-up work the warm-up page did not do.
    passes = []
    for n in range(args.passes):
        passes.append(
            await run_bench(
                worker,
                pages=args.pages,
                jobs=args.jobs,
                second_opinion=args.second_opinion,
                series=n,
                progress_s=args.progress,
                time_left=deadline.left(),
            )
        )
    run.figures = passes[-1] | {"earlier_passes": passes[:-1]} | run.figures
    if args.direct and not args.direct_first:
        if go:
            await _start_together(second_phase(go), deadline, "the direct path")
        await _direct_into(run, worker, args, deadline)


async def _direct_into(run: Run, worker: Any, args: argparse.Namespace, deadline: Deadline) -> None:
    """The direct path's figures into the run's, or why it did not run."""
    if deadline.left() == 0:
        run.figures["direct"] = {"skipped": "no time left within --time-limit"}
        return
    try:
        run.figures["direct"] = await _direct(worker, args, deadline.left())
    except EngineError as exc:  # the engine died: the passes' figures still count
        run.figures["direct"] = {"skipped": f"the engine failed: {exc}"}
        return
    run.figures["direct"]["first"] = bool(args.direct_first)


def second_phase(go: Path) -> Path:
    """`--start-together`'s file for the benches' second phase (the direct path, or the worker's
    passes after `--direct-first`): `GO.second`, made as `GO` is."""
    return go.with_name(f"{go.name}.second")


async def _start_together(go: Path, deadline: Deadline, what: str) -> None:
    """Say this bench is ready for its next phase (`GO.ready-PID`), then wait for `GO`, which
    whoever runs the benches makes once each has said so."""
    go.with_name(f"{go.name}.ready-{os.getpid()}").touch()
    print(f"engine ready; waiting for {go} to start {what}", flush=True)
    while not go.exists() and deadline.left() != 0:
        await asyncio.sleep(0.2)


class SoakEngine:
    """A stand-in engine (`standins.instant_engine`, `standins.batching_engine`) in a process
    of its own, so its threads take neither the worker's interpreter nor its memory."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc, self.url = proc, url

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as resp:
            return dict(json.loads(resp.read()))


def standin_argv(args: argparse.Namespace) -> list[str]:
    """The command line of the stand-in engine the bench asks for (none: empty)."""
    if args.batching_engine:
        shape = args.batching_engine
        return [
            *("-m", "vlm_ocr_lab.standins.batching_engine", "--seqs", str(shape.seqs)),
            *("--intake-ms", str(shape.intake_ms), "--step-ms", str(shape.step_ms)),
            *("--busy", str(shape.busy)),
        ]
    if args.instant_engine:
        return [
            *("-m", "vlm_ocr_lab.standins.instant_engine", "--faults", str(args.faults)),
            *("--slow", str(args.slow), "--slow-s", str(args.slow_s), "--spare", str(args.spare)),
        ]
    return []


@contextlib.contextmanager
def standin_engine(args: argparse.Namespace) -> Iterator[SoakEngine]:
    argv = [sys.executable, *standin_argv(args)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the stand-in engine did not start (it printed {url!r})")
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
        self.failures: Counter[str] = Counter()
        self.ok = 0  # requests answered
        # Answers that decode to no text: a stand-in model's greedy answers can repeat a token
        # the API server skips, and each such token makes its detokenizer decode again from the
        # prompt's last text (dev/gpu/detokenize_cost.py), so its CPU, not the engine, may hold
        # the pace; a trained model writes text.
        self.without_text = 0
        self.t0 = time.perf_counter()
        self._engine, self._ask = engine, getattr(engine, "ask", None)
        if self._ask is not None:
            engine.ask = self._recorded

    async def _recorded(self, *args: Any, **kwargs: Any) -> Any:
        sent = time.perf_counter()
        self.sent += 1
        try:
            answer = await self._ask(*args, **kwargs)
        except EngineError as exc:  # its reason, for a run that was cut or a direct path
            self.failures[reason(str(exc))] += 1
            raise
        finally:  # a request cancelled by a cut run was in flight too
            self.spans.append((sent, time.perf_counter()))
        self.ok += 1
        text = getattr(answer, "text", None)
        if isinstance(text, str) and not text.strip():
            self.without_text += 1
        return answer

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
            "answers_without_text": self.without_text,
        }


async def run_bench(
    worker: Any,
    *,
    pages: int,
    jobs: int,
    second_opinion: bool = False,
    series: int = 0,
    progress_s: float = 0.0,
    time_left: float | None = None,
) -> dict[str, Any]:
    """One pass of `jobs` jobs of `pages` pages; pass `series` n for the n-th pass of a run.
    Jobs not done after `time_left` seconds are cut: their pages count as failed."""
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
        results, cut = await _until([one(j) for j in range(jobs)], time_left)
    finally:
        progress.close()
        timeline.close()
    end = time.perf_counter()
    wall = end - timeline.t0
    cpu, pool_cpu = time.process_time() - cpu0, cpu_seconds(worker.pool.pids()) - pool0
    models_cpu = cpu_seconds(worker.cpu_models.pool.pids()) - models0
    page_reports = [p for r in results for p in r.pages]
    per_stage = {s: [p.timings[s] for p in page_reports if s in p.timings] for s in STAGES}
    done = max(1, len(page_reports))
    counts = _outcomes(results, timeline, pages * jobs, cut=cut)
    return counts | {
        "wall_s": wall,
        "pages_per_s": counts["ok"] / wall if counts["ok"] and wall else None,
        "output_tokens_per_s": sum(p.output_tokens or 0 for p in page_reports) / wall,
        "worker_cpu_ms_per_page": 1000 * cpu / done,
        "render_cpu_ms_per_page": 1000 * pool_cpu / done,
        "cpu_models_cpu_ms_per_page": 1000 * models_cpu / done,
        "review": sum(bool(p.review) for p in page_reports),
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


CUT = "not done within --time-limit (the run was cut)"


async def _until(calls: list[Any], time_left: float | None) -> tuple[list[Any], bool]:
    """Run the calls at once; those not done after `time_left` seconds are cancelled. Their
    results in order (of those done), and whether any was cut."""
    tasks = [asyncio.ensure_future(c) for c in calls]
    done, pending = await asyncio.wait(tasks, timeout=time_left)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return [t.result() for t in tasks if t in done], bool(pending)


def _outcomes(
    results: Sequence[JobResult], timeline: Timeline, planned: int, *, cut: bool
) -> dict[str, Any]:
    """Pages (those the pass was to read), ok, blank and failed by reason. A job that failed
    as a whole fails all its pages. A pass that was cut counts the engine's answers instead,
    its jobs' reports never having come."""
    if cut:
        ok = min(planned, timeline.ok)
        failed = planned - ok
        seen = timeline.failures.total()
        failures = timeline.failures + Counter({CUT: failed - seen}) if seen <= failed else None
        return {
            "pages": planned,
            "ok": ok,
            "blank": 0,
            "failed": failed,
            "failures": +(failures or Counter({CUT: failed})),
            "cut": True,
        }
    reports = [p for r in results for p in r.pages]
    per_job = planned // max(1, len(results))
    failures = failure_reasons(reports)
    for r in results:
        if not r.pages:
            failures[f"job: {r.error}"] += per_job
    return {
        "pages": planned,
        "ok": sum(p.status == "ok" for p in reports),
        "blank": sum(p.status == "blank" for p in reports),
        "failed": failures.total(),
        "failures": failures,
    }


def failure_reasons(pages: Sequence[PageReport]) -> Counter[str]:
    """Failed pages by reason: the stage and the message, less the tries it took."""
    failed = (p for p in pages if p.status == "failed")
    return Counter(f"{p.error_stage}: {reason(p.error or '')}" for p in failed)


def reason(message: str) -> str:
    """A failure's reason: its first line, less the tries it took."""
    first = message.splitlines()[0] if message else ""
    return re.sub(r" \(\d+ tries\)", "", first)[:200]


def resent(page: PageReport) -> int:
    """Requests of a page sent again after a transport failure (tries beyond its attempts)."""
    return max(0, (page.tries or 0) - max(page.attempts, 1))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _direct(
    worker: Any, args: argparse.Namespace, time_left: float | None = None
) -> dict[str, Any]:
    """The same number of pages straight to the engine's server, at the worker's concurrency,
    first attempt only: the baseline that shows the worker's overhead. A request that fails is
    counted by its reason, never in the pace."""
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
            with contextlib.suppress(EngineError):  # the timeline has its reason
                answer = await engine.ask(page.png, prompt, engine.attempts[0])
                latencies.append(time.perf_counter() - t0)
                tokens.append(answer.output_tokens or 0)
            progress.page_done()

    try:
        _, cut = await _until([one(p) for p in pages], time_left)
    finally:
        progress.close()
        timeline.close()
    end = time.perf_counter()
    wall = end - timeline.t0
    ok = len(latencies)
    failures = timeline.failures + Counter({CUT: count - ok - timeline.failures.total()})
    return {
        "pages": count,
        "ok": ok,
        "failed": count - ok,
        "failures": +failures,
        "cut": cut,
        "timeline": timeline.figures(end),
        "wall_s": wall,
        "pages_per_s": ok / wall if ok and wall else None,
        "output_tokens_per_s": sum(tokens) / wall,
        "p50": percentile(latencies, 50),
        "p95": percentile(latencies, 95),
    }
