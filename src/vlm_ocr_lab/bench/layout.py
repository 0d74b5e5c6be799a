"""`vlm-ocr-lab bench --layout`: what blocks, figure crops and the searchable PDF cost per page.

The same scanned document (pages rasterised as a scanner makes them) goes through the worker three
times, with an engine that answers at once, so only the worker's own work is measured:

    text      each page's answer is Markdown alone
    blocks    each answer also has blocks with boxes (a title, paragraphs, a figure and its
              caption, a footer: what Chandra or dots.ocr give), so the page gets its Markdown made
              from blocks, a figure cut out and a blocks file
    + PDF     the same, and the job asks for a searchable PDF

It prints CPU-ms per page in the worker process and in the render processes for each, the
difference each step adds, and the searchable PDF's size against the original's.
"""

from __future__ import annotations

import base64
import tempfile
import time
from pathlib import Path
from typing import Any

from vlm_ocr import samples
from vlm_ocr.blocks import RawBlock, place
from vlm_ocr.engines.base import Recognition
from vlm_ocr.engines.reading import Reading
from vlm_ocr.images import PageImage
from vlm_ocr.pipeline.worker import build_worker
from vlm_ocr.settings import Settings
from vlm_ocr_lab.bench.pipeline import cpu_seconds

LABELS = {k: k for k in ("title", "text", "figure", "caption", "page-footer")}


def answer(with_blocks: bool):
    def read(page: PageImage, prompt: Any) -> Recognition:
        text = f"Page of {page.width} by {page.height} pixels. " * 40
        if not with_blocks:
            return Recognition(text, finish_reason="stop")
        w, h = page.width, page.height
        raw = [RawBlock("title", (0.1 * w, 0.05 * h, 0.9 * w, 0.09 * h), "# A report")]
        for n in range(12):  # paragraphs down the page
            y = 0.1 + n * 0.025
            raw.append(RawBlock("text", (0.1 * w, y * h, 0.9 * w, (y + 0.02) * h), text[:120]))
        raw += [
            RawBlock("figure", (0.2 * w, 0.45 * h, 0.8 * w, 0.8 * h), "A chart"),
            RawBlock("caption", (0.2 * w, 0.81 * h, 0.8 * w, 0.84 * h), "Figure 1: a chart"),
            RawBlock("page-footer", (0.45 * w, 0.95 * h, 0.55 * w, 0.97 * h), "Page 1"),
        ]
        placed = place(raw, LABELS, width=w, height=h, pdf_size=page.pdf_size)
        reading = Reading(text, tuple(placed.blocks))
        return Recognition(text, finish_reason="stop", reading=reading)

    return read


async def _one(settings: Settings, job: dict[str, Any], with_blocks: bool) -> dict[str, Any]:
    from vlm_ocr_lab.standins.fakes import FakeEngine

    engine = FakeEngine(answer(with_blocks), concurrency=64)
    with tempfile.TemporaryDirectory(prefix="vlm-ocr-layout-") as tmp:
        worker = build_worker(settings, engine, out_dir=Path(tmp))
        await worker.start()
        try:
            cpu0, pool0 = time.process_time(), cpu_seconds(worker.pool.pids())
            t0 = time.perf_counter()
            result = await worker.run("layout", job)
            wall = time.perf_counter() - t0
            cpu, pool = time.process_time() - cpu0, cpu_seconds(worker.pool.pids()) - pool0
            pdf = Path(tmp, result.searchable_pdf_key) if result.searchable_pdf_key else None
            size = pdf.stat().st_size if pdf is not None else 0
        finally:
            await worker.close()
    pages = max(1, result.totals.pages)
    return {
        "ok": result.totals.ok,
        "pages": result.totals.pages,
        "wall_s": wall,
        "worker_ms": 1000 * cpu / pages,
        "render_ms": 1000 * pool / pages,
        "pdf_bytes": size,
        "searchable_s": result.timings.get("searchable_pdf_s", 0.0),
    }


async def layout_main(settings: Settings, pages: int) -> int:
    original = samples.scanned(samples.pdf_from_pages(samples.numbered_pages(pages)))
    job = {"pdf": {"base64": base64.b64encode(original).decode()}, "output_prefix": "layout"}
    settings = settings.with_(auto_rotate=False)
    runs = {
        "text": await _one(settings, job, with_blocks=False),
        "blocks": await _one(settings, job, with_blocks=True),
        "+ PDF": await _one(settings, job | {"searchable_pdf": True}, with_blocks=True),
    }
    print(
        f"{pages} scanned pages ({len(original) / 1e6:.2f} MB, 150 dpi JPEG), "
        f"render processes: {settings.render.render_processes or 'one per core'}"
    )
    print(f"{'run':<8}{'ok':>5}{'wall s':>9}{'worker CPU ms/page':>20}{'render CPU ms/page':>20}")
    for name, r in runs.items():
        print(
            f"{name:<8}{r['ok']:>5}{r['wall_s']:>9.2f}{r['worker_ms']:>20.1f}{r['render_ms']:>20.1f}"
        )
    text, blocks, pdf = runs["text"], runs["blocks"], runs["+ PDF"]
    print(
        f"blocks (Markdown from blocks, a figure cut out, blocks file): "
        f"{blocks['worker_ms'] - text['worker_ms']:+.1f} ms worker, "
        f"{blocks['render_ms'] - text['render_ms']:+.1f} ms render processes per page"
    )
    print(
        f"searchable PDF: {pdf['worker_ms'] - blocks['worker_ms']:+.1f} ms worker, "
        f"{pdf['render_ms'] - blocks['render_ms']:+.1f} ms render processes per page; "
        f"{pdf['searchable_s']:.2f} s for the document; "
        f"{pdf['pdf_bytes'] / 1e6:.2f} MB against the original's {len(original) / 1e6:.2f} MB "
        f"({pdf['pdf_bytes'] / len(original):.3f}x)"
    )
    return 0
