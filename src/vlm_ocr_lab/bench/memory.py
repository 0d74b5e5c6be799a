"""`vlm-ocr-lab bench --memory`: the worker's peak memory for one page, 64 large images and a
2,000-page PDF (each in a fresh process, with an engine that answers at once), and what a render
costs in this process and through a render process."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from vlm_ocr import samples
from vlm_ocr.images import Budget
from vlm_ocr.pipeline.cpu_pool import CpuPool
from vlm_ocr.pipeline.render import render_pdf_page
from vlm_ocr.pipeline.worker import build_worker
from vlm_ocr.settings import Settings
from vlm_ocr_lab.standins.fakes import FakeEngine

MEMORY_SCENARIOS = ("one-page", "64-large-images", "2000-page-pdf")


def _scenario_job(name: str) -> dict[str, Any]:
    if name == "one-page":
        pdf = samples.pdf_from_pages(samples.numbered_pages(1))
        return {"pdf": {"base64": base64.b64encode(pdf).decode()}}
    if name == "2000-page-pdf":
        pdf = samples.pdf_from_pages(samples.numbered_pages(2000, lines=2))
        return {"pdf": {"base64": base64.b64encode(pdf).decode()}}
    # A 48 MP scan (just under MAX_IMAGE_PIXELS): small as a PNG, 144 MB once decoded.
    img = Image.new("RGB", (6000, 8000), "white")
    draw = ImageDraw.Draw(img)
    for y in range(200, 7800, 120):
        draw.rectangle((300, y, 5700, y + 40), fill=(20, 20, 20))
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)
    src = {"base64": base64.b64encode(buf.getvalue()).decode()}
    return {"images": [src] * 64}


async def _memory_scenario(settings: Settings, name: str) -> dict[str, Any]:
    job = _scenario_job(name)
    # The render path's memory: orientation's processes hold the CPU engine's models, a fixed
    # cost apart from the pages (`vlm-ocr-lab bench --pages N` with scanned pages shows their time).
    settings = settings.with_(auto_rotate=False)
    # An engine that answers every page at once: this measures the worker, not an engine.
    engine = FakeEngine(lambda page, prompt: f"{page.width}x{page.height}", concurrency=64)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tempfile.TemporaryDirectory(prefix="vlm-ocr-memory-") as tmp:
        worker = build_worker(settings, engine, out_dir=Path(tmp))
        await worker.start()
        t0 = time.perf_counter()
        try:
            result = await worker.run(name, job | {"output_prefix": name})
        finally:
            await worker.close()
    wall = time.perf_counter() - t0
    return {
        "scenario": name,
        "pages": result.totals.pages,
        "ok": result.totals.ok,
        "wall_s": wall,
        "job_input_mb": sum(len(str(v)) for v in job.values()) / 1e6,
        "worker_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_before_job_mb": base / 1024,
        "render_process_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def memory_main(settings: Settings, scenario: str | None) -> int:
    """Each scenario in a fresh process, so each peak is its own."""
    if scenario:
        print(json.dumps(asyncio.run(_memory_scenario(settings, scenario))))
        return 0
    render = settings.render
    print(
        f"render processes: {render.render_processes or 'one per core'}, MAX_PIXELS "
        f"{render.max_pixels:,}, MAX_IMAGE_PIXELS {render.max_image_pixels:,}, "
        f"DECODE_PIXELS {render.decode_pixels:,}"
    )
    print(
        f"{'scenario':<18}{'pages':>7}{'ok':>6}{'wall s':>9}{'input MB':>10}"
        f"{'worker peak MB':>16}{'render proc peak MB':>21}"
    )
    for name in MEMORY_SCENARIOS:
        out = subprocess.run(
            [sys.executable, "-m", "vlm_ocr_lab", "bench", "--memory", "--scenario", name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(
            f"{name:<18}{r['pages']:>7}{r['ok']:>6}{r['wall_s']:>9.1f}{r['job_input_mb']:>10.1f}"
            f"{r['worker_peak_mb']:>16.0f}{r['render_process_peak_mb']:>21.0f}"
        )
    return 0


def render_overhead(pages: int = 40) -> None:
    """ms per normal page: rendered in this process, and through the render processes."""
    budget = Budget(Settings().render.max_pixels)
    with tempfile.NamedTemporaryFile(suffix=".pdf") as fh:
        fh.write(samples.pdf_from_pages(samples.numbered_pages(pages)))
        fh.flush()
        render_pdf_page(fh.name, 1, budget)  # open and warm
        t0 = time.perf_counter()
        for n in range(1, pages + 1):
            render_pdf_page(fh.name, n, budget)
        inline = (time.perf_counter() - t0) / pages

        async def pooled() -> float:
            pool = CpuPool(1)
            await pool.start()
            try:
                await pool.run(render_pdf_page, fh.name, 1, budget, timeout_s=60)
                t0 = time.perf_counter()
                for n in range(1, pages + 1):
                    await pool.run(render_pdf_page, fh.name, n, budget, timeout_s=60)
                return (time.perf_counter() - t0) / pages
            finally:
                await pool.close()

        through_pool = asyncio.run(pooled())
    print(
        f"render + PNG per page at {budget.max_pixels:,} px: in-process {inline * 1000:.1f} ms, "
        f"through a render process {through_pool * 1000:.1f} ms "
        f"(+{(through_pool - inline) * 1000:.1f} ms, none of it on the event loop)"
    )
