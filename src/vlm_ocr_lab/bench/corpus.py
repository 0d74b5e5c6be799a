"""`vlm-ocr-lab bench --corpus`: `vlm-ocr submit` over a corpus, stopped half-way and run
again, then the client alone over a long listing.

1. Resume: `--documents` small documents (1-5 pages, a few broken on purpose) in a folder, sent
   by the command as a user types it to `--workers` worker processes (`handler.py
   --rp_serve_api`, the engine ENGINE selects) behind the stand-in endpoint, moto's S3 server as
   the bucket. Ctrl-C (SIGINT) once half the documents have their line in the report; then the
   same command again. Checked and printed: every good page stored once (read by the engine
   once: what the first run left is reused, never read again), the broken ones reported, the
   second run sending only the documents the first had not finished.
2. Listing: `--listing` one-page documents through workers that answer at once
   (`standins.instant_worker`), so what is measured is the client itself: its CPU time and its
   memory as the documents go by, and again when every document is finished (the run only
   reads what is stored).

The client is a process of its own, measured from outside: CPU time from the kernel's account
of it, memory from /proc (Linux) as it runs. Needs a checkout (handler.py) and the test extra.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlm_ocr import samples
from vlm_ocr.settings import Settings
from vlm_ocr_lab.standins.local_endpoint import API_KEY, LocalEndpoint, Router, worker_environ
from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3, s3_client

HANDLER = Path(__file__).resolve().parents[3] / "handler.py"
BUCKET = "corpus-bench"
BROKEN = ("empty.pdf", "letter.pdf", "locked.pdf", "cut.pdf", "garbage.png")


@dataclass
class Measured:
    """One run of the command: its exit status, time, CPU and memory as it went."""

    code: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_mb: float = 0.0
    #: (documents in the report, resident MB) as the run went
    memory: list[tuple[int, float]] = field(default_factory=list)
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    def said(self) -> list[str]:
        """What the command said: its line at the start, its last progress line, its summary."""
        start = [line for line in self.stderr if "jobs queued or running at once" in line]
        progress = [line for line in self.stderr if line.startswith("documents ")]
        return start[:1] + progress[-1:] + self.stdout


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def run_client(argv: list[str], env: dict[str, str], report: Path, stop_at: int = 0) -> Measured:
    """`vlm-ocr submit ARGV` in a process of its own, sampled every half second; SIGINT once
    `stop_at` documents are in its report (0: never)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    got = Measured()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vlm_ocr", "submit", *argv], env=env, stdout=out, stderr=err
        )
        try:
            watch(proc, got, report, stop_at)
        finally:  # a benchmark stopped leaves no client behind
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for stream, said in ((out, got.stdout), (err, got.stderr)):
            stream.seek(0)
            said.extend(line.rstrip("\n") for line in stream)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    got.code, got.wall_s = proc.returncode, time.perf_counter() - t0
    got.cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    got.peak_mb = max((mb for _, mb in got.memory), default=0.0)
    return got


def watch(proc: subprocess.Popen[bytes], got: Measured, report: Path, stop_at: int) -> None:
    """Its memory against the documents in its report, until it ends."""
    interrupted = False
    while proc.poll() is None:
        done, mb = lines(report), rss_mb(proc.pid)
        if mb is not None:
            got.memory.append((done, mb))
        if stop_at and done >= stop_at and not interrupted:
            proc.send_signal(signal.SIGINT)
            interrupted = True
        time.sleep(0.5)


def make_corpus(folder: Path, count: int, seed: int = 7) -> dict[str, int]:
    """`count` documents of 1-5 pages (every 40th one broken, every 9th an image); returns the
    good ones' pages by file name."""
    import pymupdf

    rng = random.Random(seed)
    good: dict[str, int] = {}
    broken = iter(BROKEN)
    for n in range(count):
        sub = folder / f"box-{n // 50:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        if n % 40 == 39 and (name := next(broken, None)):
            write_broken(sub / f"{n:04d}-{name}", name)
            continue
        pages = samples.numbered_pages(
            1 if n % 9 == 0 else rng.randint(1, 5), lines=3, first=n * 10
        )
        data = samples.pdf_from_pages(pages)
        if n % 9 == 0:
            with pymupdf.open(stream=data, filetype="pdf") as doc:
                (sub / f"{n:04d}.png").write_bytes(doc[0].get_pixmap(dpi=100).tobytes("png"))
            good[f"{n:04d}.png"] = 1
        else:
            (sub / f"{n:04d}.pdf").write_bytes(data)
            good[f"{n:04d}.pdf"] = len(pages)
    return good


def write_broken(path: Path, kind: str) -> None:
    import pymupdf

    whole = samples.pdf_from_pages(samples.numbered_pages(3, lines=3))
    if kind == "empty.pdf":
        path.write_bytes(b"")
    elif kind == "letter.pdf":
        path.write_text("Dear sir, this is a letter, not a PDF.")
    elif kind == "locked.pdf":
        with pymupdf.open(stream=whole, filetype="pdf") as doc:
            path.write_bytes(
                doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="u", owner_pw="o")
            )
    elif kind == "cut.pdf":
        path.write_bytes(whole[: len(whole) // 2])
    else:
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(2000))


def stored_once(router: Router) -> Counter[int]:
    """How many times each page was read and stored (not reused), counted over every job:
    {times: pages}."""
    reads: Counter[tuple[str, int]] = Counter()
    for job in router.jobs.values():
        folder = job.input["output_prefix"].rsplit("/", 1)[0]
        for item in job.items:
            page = item.get("page") or {}
            if page.get("status") in ("ok", "blank") and not page.get("reused"):
                reads[(folder, page["page"])] += 1
    return Counter(reads.values())


def folders(s3: LoopbackS3, prefix: str) -> tuple[set[str], set[str]]:
    """The document folders under `prefix`: those whose document.json says nothing is left to
    send, and all that have one."""
    import json

    client = s3_client(s3.endpoint)
    finished, every = set(), set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for obj in page.get("Contents") or []:
            if obj["Key"].endswith("/document.json"):
                doc = json.loads(client.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read())
                folder = obj["Key"].rsplit("/", 2)[-2]
                every.add(folder)
                if all(p["status"] == "ok" or p.get("final") for p in doc["parts"]):
                    finished.add(folder)
    return finished, every


def client_env(s3: LoopbackS3, router: Router, **extra: str) -> dict[str, str]:
    env = worker_environ(**s3.env(BUCKET), RUNPOD_API_BASE=router.base, RUNPOD_API_KEY=API_KEY)
    import vlm_ocr

    here = str(Path(vlm_ocr.__file__).resolve().parents[1])  # this checkout's, if run from one
    return env | {"LOG_LEVEL": "WARNING", "PYTHONPATH": here} | extra


def submit_argv(folder: Path, prefix: str, report: Path) -> list[str]:
    """`vlm-ocr submit`'s arguments for the folder's documents under `prefix`."""
    return [str(folder), "--endpoint", "bench", "--prefix", prefix, "--report", str(report)]


def own_settings(settings: Settings) -> dict[str, str]:
    """This command's worker settings (ENGINE, MAX_PIXELS, ...), for the worker processes."""
    return {
        name.upper(): str(value)
        for name, value in settings.flat().items()
        if value is not None and Settings.GROUP_OF[name] not in ("bucket", "client")
    }


def resume_bench(settings: Settings, documents: int, workers: int) -> bool:
    """Phase 1: the corpus on real workers, stopped half-way and run again; prints its figures
    and says whether every check held."""
    s3 = LoopbackS3()
    s3.create_bucket(BUCKET)
    quiet = {"RUNPOD_LOG_LEVEL": "ERROR", "UVICORN_LOG_LEVEL": "warning", "LOG_LEVEL": "WARNING"}
    env = worker_environ(**own_settings(settings) | s3.env(BUCKET) | quiet)
    t0 = time.perf_counter()
    endpoint = LocalEndpoint(HANDLER, env, workers)
    started = time.perf_counter() - t0
    try:
        with tempfile.TemporaryDirectory(prefix="vlm-ocr-corpus-") as tmp:
            folder = Path(tmp, "corpus")
            good = make_corpus(folder, documents)
            report = Path(tmp, "corpus.jsonl")
            argv = submit_argv(folder, "bench", report)
            cenv = client_env(s3, endpoint.router)
            first = run_client(argv, cenv, report, stop_at=documents // 2)
            # the stand-in cannot stop a cancelled job's worker half-way: let it end
            endpoint.router.wait_for(lambda jobs: not endpoint.router.busy, 600)
            jobs_before = set(endpoint.router.jobs)
            finished, _ = folders(s3, "ocr/bench/")
            second = run_client(argv, cenv, report)
            outcome = report_of(report)
            again = [endpoint.router.jobs[i] for i in set(endpoint.router.jobs) - jobs_before]
            missing = folders(s3, "ocr/bench/")[1] - finished
    finally:
        endpoint.stop()
        s3.stop()
    pages = sum(good.values())
    engine = env.get("ENGINE", "auto")
    print(f"{workers} workers (ENGINE={engine}) started in {started:.1f} s")
    print(
        f"{documents} documents ({len(good)} good: {pages} pages; {documents - len(good)} broken)"
    )
    reads = stored_once(endpoint.router)
    return print_resume(first, second, outcome, again, missing, pages, reads, documents - len(good))


def report_of(report: Path) -> dict[str, dict[str, Any]]:
    """Each document's line in the report, by file name."""
    import json

    found = [json.loads(line) for line in report.read_text().splitlines()]
    return {Path(line["source"]).name: line for line in found}


def print_resume(
    first: Measured,
    second: Measured,
    outcome: dict[str, dict[str, Any]],
    again: list[Any],
    missing: set[str],
    pages: int,
    reads: Counter[int],
    broken_count: int,
) -> bool:
    sent = Counter(job.input["output_prefix"].split("/")[1] for job in again)
    print(f"{'run':<30}{'exit':>6}{'wall s':>9}{'client CPU s':>14}{'client peak MB':>16}")
    for name, got in (("1: Ctrl-C at half the documents", first), ("2: the same command", second)):
        print(f"{name:<30}{got.code:>6}{got.wall_s:>9.1f}{got.cpu_s:>14.2f}{got.peak_mb:>16.1f}")
    print(
        f"documents run 1 had not finished: {len(missing)} (and those it had not reached); "
        f"run 2 sent {len(again)} jobs for {len(sent)} documents"
    )
    statuses = Counter(line["status"] for line in outcome.values())
    print(f"report of run 2: {dict(statuses)}")
    broken = {n: line for n, line in outcome.items() if n.split("-", 1)[-1] in BROKEN}
    print("the broken ones: " + ", ".join(f"{n} {b['status']}" for n, b in sorted(broken.items())))
    damaged = sum(line["ok"] + line["blank"] for line in broken.values())  # sent, partly read
    once = reads.get(1, 0)  # pages read once
    print(
        f"pages read and stored: {once} once ({pages} of the good documents, {damaged} of the "
        f"broken ones), {sum(n for k, n in reads.items() if k > 1)} more than once"
    )
    checks = {
        "every good page stored once": once == pages + damaged and set(reads) == {1},
        "the broken ones reported": len(broken) == broken_count
        and all(line["status"] != "ok" for line in broken.values()),
        "the good ones ok": statuses["ok"] == len(outcome) - broken_count,
        "run 2 sent only what was missing, once": set(sent) == missing
        and set(sent.values()) <= {1},
    }
    for said, held in checks.items():
        print(f"  {'ok ' if held else 'NOT'} {said}")
    print("what the command said in run 2 (its start, its last progress line, its summary):")
    for line in second.said():
        print(f"  | {line}")
    return all(checks.values())


INSTANT_WORKERS = 8  # jobs the instant workers take at once


def listing_bench(documents: int) -> None:
    """Phase 2: the client alone over `documents` one-page documents, then again when all are
    finished; prints its CPU time and its memory as the documents went by."""
    from vlm_ocr_lab.standins.instant_worker import InstantWorker

    s3 = LoopbackS3()
    s3.create_bucket(BUCKET)
    worker = InstantWorker(s3.endpoint, BUCKET)
    router = Router([worker.url] * INSTANT_WORKERS)
    try:
        with tempfile.TemporaryDirectory(prefix="vlm-ocr-listing-") as tmp:
            folder = Path(tmp, "corpus")
            one = samples.pdf_from_pages(samples.numbered_pages(1, lines=3))
            for n in range(documents):  # the same page, a different file: a comment after %%EOF
                box = folder / f"box-{n // 500:03d}"
                box.mkdir(parents=True, exist_ok=True)
                (box / f"{n:05d}.pdf").write_bytes(one + f"\n% {n}\n".encode())
            report = Path(tmp, "corpus.jsonl")
            argv = submit_argv(folder, "listing", report)
            argv += ["--max-in-flight", str(16 * INSTANT_WORKERS)]
            cenv = client_env(s3, router)
            runs = [run_client(argv, cenv, report), run_client(argv, cenv, report)]
    finally:
        router.stop()
        worker.stop()
        s3.stop()
    print(f"{documents} one-page documents, workers that answer at once ({worker.jobs} jobs)")
    print(
        f"{'run':<26}{'exit':>6}{'wall s':>9}{'client CPU s':>14}{'CPU ms/document':>17}"
        f"{'peak MB':>9}"
    )
    for name, got in zip(("1: every document sent", "2: every one finished"), runs, strict=True):
        print(
            f"{name:<26}{got.code:>6}{got.wall_s:>9.1f}{got.cpu_s:>14.2f}"
            f"{got.cpu_s / documents * 1000:>17.2f}{got.peak_mb:>9.1f}"
        )
    marks = [documents * k // 5 for k in range(1, 6)]
    seen = [next((mb for done, mb in runs[0].memory if done >= mark), None) for mark in marks]
    shown = ", ".join(f"{mark:,}: {mb:.0f} MB" for mark, mb in zip(marks, seen, strict=True) if mb)
    print(f"client memory as run 1 went (documents in the report: resident MB): {shown}")


def corpus_main(settings: Settings, *, documents: int, listing: int, workers: int) -> int:
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per look at a starting worker
    if not HANDLER.is_file():
        print("vlm-ocr-lab bench --corpus runs from a checkout of the project (needs handler.py)")
        return 2
    held = True
    if documents:
        held = resume_bench(settings, documents, workers)
    if listing:
        listing_bench(listing)
    return 0 if held else 1
