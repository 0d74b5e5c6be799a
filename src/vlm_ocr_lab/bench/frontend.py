"""`vlm-ocr-lab bench --front-end`: the CPU time vLLM's API servers spend preparing one page.

On vLLM 0.32 each API server decodes and prepares the page images on one thread, before the engine
sees them; for a small model that front end, not the GPU, can bound pages/s. The worker starts its
engine as in production (ENGINE=vllm, MODEL_NAME, its family's flags), then sends the same page
one request at a time, as the family draws it and as it would be drawn off its processor's grid,
each asking for one output token, and reads the CPU time of every process of the API server's
process group (the server and the API servers it spawns) before and after. It prints CPU-ms a
page both ways; the engine's own time is not in them (its processes are a group of their own),
but on a machine of few cores the engine's work beside it makes the figure vary from run to run.
So it also times the checkpoint's image processor alone on both pages, in the engine's Python
and on one thread, as an API server runs it: the part of the front end the page's size decides.

vLLM's CPU build measures the same front end as the GPU's: the processor is the checkpoint's, and
its cost does not depend on the model's size, so a tiny model of the family's architecture with
its real processor config will do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import tempfile
import time
from pathlib import Path

from vlm_ocr import samples
from vlm_ocr.images import Budget, PageImage
from vlm_ocr.pipeline.render import render_pdf_page
from vlm_ocr.pipeline.worker import start_worker
from vlm_ocr.settings import EngineKind, Settings
from vlm_ocr_lab.bench.pipeline import cpu_seconds


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user and system) of the live processes of a process group."""
    pids = []
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        with contextlib.suppress(OSError):  # gone since the listing
            if os.getpgid(pid) == pgid:
                pids.append(pid)
    return cpu_seconds(pids)


def pages_of(budget: Budget) -> dict[str, PageImage]:
    """A sample page drawn as the budget says, and, for a budget with a grid, without it."""
    pdf = samples.pdf_from_pages(samples.numbered_pages(1))
    budgets = {"as the family draws it": budget}
    if budget.grid:
        budgets = {
            "off its processor's grid": dataclasses.replace(budget, grid=None),
            f"on its processor's {budget.grid} px grid": budget,
        }
    with tempfile.NamedTemporaryFile(suffix=".pdf") as fh:
        fh.write(pdf)
        fh.flush()
        return {name: render_pdf_page(fh.name, 1, b) for name, b in budgets.items()}


# Run by the engine's Python: the checkpoint's image processor on each page, CPU-ms a page.
_PROCESSOR = """
import sys, time
from PIL import Image
from transformers import AutoProcessor
processor = AutoProcessor.from_pretrained(sys.argv[1]).image_processor
count = int(sys.argv[2])
for path in sys.argv[3:]:
    image = Image.open(path).convert("RGB")
    processor(images=[image], return_tensors="pt")
    t0 = time.process_time()
    for _ in range(count):
        processor(images=[image], return_tensors="pt")
    print(1000 * (time.process_time() - t0) / count)
"""


def processor_ms(python: str, model: str, pages: list[PageImage], count: int) -> list[float]:
    """CPU-ms a page of the model's image processor on each page (one thread, as vLLM's API
    server runs it), in the engine's Python."""
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for n, page in enumerate(pages):
            paths.append(os.path.join(folder, f"{n}.png"))
            Path(paths[-1]).write_bytes(page.png)
        proc = subprocess.run(
            [python, "-c", _PROCESSOR, model, str(count), *paths],
            env=os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
    return [float(line) for line in proc.stdout.split()]


async def frontend_main(settings: Settings, pages: int) -> int:
    if settings.job.engine != EngineKind.VLLM:
        print("--front-end measures vLLM's API server: set ENGINE=vllm and MODEL_NAME")
        return 2
    worker = await start_worker(settings)
    try:
        engine = worker.engine
        server = next(c for c in engine.server.children if c.role == "server")
        assert server.proc is not None
        pgid = os.getpgid(server.proc.pid)  # its own session: its group is its pid
        prompt = engine.prompt_for(None, None, None)
        attempt = engine.attempts[0]
        print(f"engine: {engine.facts.name} {engine.facts.version}, {engine.facts.model}")
        drawn = pages_of(engine.budget(settings.render.max_pixels))
        for name, page in drawn.items():
            await engine.ask(page.png, prompt, attempt, max_tokens=1)  # its shapes seen once
            cpu0, t0 = group_cpu_s(pgid), time.perf_counter()
            for _ in range(pages):
                await engine.ask(page.png, prompt, attempt, max_tokens=1)
            cpu = (group_cpu_s(pgid) - cpu0) / pages
            wall = (time.perf_counter() - t0) / pages
            print(
                f"page {page.width}x{page.height} ({name}): API server CPU {1000 * cpu:.1f} ms "
                f"a page, {1000 * wall:.0f} ms a request, over {pages} pages"
            )
    finally:
        await worker.close()
    model = str(engine.facts.model)
    times = processor_ms(settings.vllm.vllm_python, model, list(drawn.values()), pages)
    for (name, page), ms in zip(drawn.items(), times, strict=True):
        print(f"page {page.width}x{page.height} ({name}): image processor {ms:.1f} CPU-ms a page")
    return 0
