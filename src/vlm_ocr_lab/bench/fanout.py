"""`vlm-ocr-lab bench --fanout`: one document as one job on one worker, then spread over several.

Worker processes (`handler.py --rp_serve_api`, the engine ENGINE selects) behind the loopback
stand-in for RunPod's endpoint routes, moto's S3 server as the bucket, and the fan-out client of
`vlm-ocr submit` in this process. Two PDFs of the same shape with different text, so the second
run reuses nothing of the first. Needs a checkout (handler.py) and the test extra (moto).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from vlm_ocr import samples
from vlm_ocr.client.submit import DocumentManifest, Options, Submission
from vlm_ocr.settings import Settings
from vlm_ocr_lab.standins.local_endpoint import API_KEY, LocalEndpoint, Router, worker_environ
from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3

HANDLER = Path(__file__).resolve().parents[3] / "handler.py"


async def _timed(path: Path, settings: Settings, options: Options) -> dict[str, Any]:
    first: list[float] = []
    t0 = time.perf_counter()
    cpu0 = time.thread_time()  # the client's event loop (HTTP, JSON, manifests)
    submission = Submission(
        path,
        settings.bucket,
        settings.client,
        options,
        on_page=lambda page: first or first.append(time.perf_counter()),
    )
    manifest: DocumentManifest = await submission.run()
    return {
        "manifest": manifest,
        "wall_s": time.perf_counter() - t0,
        "first_page_s": (first[0] - t0) if first else float("nan"),
        "client_cpu_s": time.thread_time() - cpu0,
    }


def fanout_main(settings: Settings, *, pages: int, workers: int, pages_per_job: int) -> int:
    if not HANDLER.is_file():
        print("vlm-ocr-lab bench --fanout runs from a checkout of the project (needs handler.py)")
        return 2
    s3 = LoopbackS3()
    bucket = s3.create_bucket("fanout-bench")
    # The workers run on this command's settings (ENGINE, MODEL_NAME, ...), on the loopback bucket.
    own = {
        name.upper(): str(value)
        for name, value in settings.flat().items()
        if value is not None and Settings.GROUP_OF[name] not in ("bucket", "client")
    }
    env = worker_environ(
        **own,
        **s3.env(bucket),
        RUNPOD_LOG_LEVEL="ERROR",
        UVICORN_LOG_LEVEL="warning",
        LOG_LEVEL="WARNING",
    )
    t0 = time.perf_counter()
    endpoint = LocalEndpoint(HANDLER, env, workers)
    started = time.perf_counter() - t0
    alone = Router(endpoint.urls[:1])  # the same first worker, by itself
    try:
        with tempfile.TemporaryDirectory(prefix="vlm-ocr-fanout-") as tmp:
            one_pdf, many_pdf = Path(tmp, "one.pdf"), Path(tmp, "spread.pdf")
            one_pdf.write_bytes(samples.pdf_from_pages(samples.numbered_pages(pages, lines=4)))
            many_pdf.write_bytes(
                samples.pdf_from_pages(samples.numbered_pages(pages, lines=4, first=pages + 1))
            )

            def client(router: Router) -> Settings:
                return settings.with_(
                    **s3.settings_update(bucket),
                    runpod_api_base=router.base,
                    runpod_api_key=API_KEY,
                )

            one = asyncio.run(_timed(one_pdf, client(alone), Options("bench", pages_per_job=pages)))
            many = asyncio.run(
                _timed(
                    many_pdf,
                    client(endpoint.router),
                    Options("bench", pages_per_job=pages_per_job),
                )
            )
    finally:
        alone.stop()
        endpoint.stop()
        s3.stop()
    engine = env.get("ENGINE", "auto")
    print(f"{workers} workers (ENGINE={engine}) started in {started:.1f} s; {pages} pages each run")
    rows = [("one job, one worker", one, 1), (f"{pages_per_job} pages a job", many, workers)]
    print(
        f"{'run':<22}{'jobs':>6}{'workers':>9}{'wall s':>9}{'pages/s':>9}"
        f"{'first page s':>14}{'client CPU ms/job':>19}"
    )
    for name, r, used in rows:
        m: DocumentManifest = r["manifest"]
        jobs = m.totals.submissions
        print(
            f"{name:<22}{jobs:>6}{used:>9}{r['wall_s']:>9.1f}{pages / r['wall_s']:>9.2f}"
            f"{r['first_page_s']:>14.1f}{r['client_cpu_s'] / jobs * 1000:>19.1f}"
        )
        if not m.complete:
            print(f"  incomplete: {m.totals}")
    print(f"fan-out / one worker pages/s: {one['wall_s'] / many['wall_s']:.2f}")
    print(
        "(the SDK's local API server hands a job's streamed pages over when the job ends, so "
        "the first page arrives with the first job here; on RunPod each page streams as stored)"
    )
    return 0 if one["manifest"].complete and many["manifest"].complete else 1
