"""Shared fixtures: settings on a temp folder, one started CPU engine per session, workers."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from vlm_ocr import samples
from vlm_ocr.engines.rapidocr import RapidOcrEngine
from vlm_ocr.render import Budget
from vlm_ocr.runtime import WorkerLoop
from vlm_ocr.settings import Settings
from vlm_ocr.storage import LocalStore
from vlm_ocr.worker import Worker, warmup_page

# Small pages keep the CPU engine quick; text at this budget still reads cleanly.
TEST_PIXELS = 700_000


@pytest.fixture(scope="session")
def loop() -> Iterator[WorkerLoop]:
    """One event loop for the session, like the handler's: the shared engine lives on it."""
    wl = WorkerLoop()
    yield wl
    wl.stop()


@pytest.fixture(scope="session")
def cpu_engine(loop: WorkerLoop) -> RapidOcrEngine:
    engine = RapidOcrEngine()
    loop.run(engine.start(warmup_page(Budget(TEST_PIXELS))))
    return engine


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {"output_dir": tmp_path / "out", "max_pixels": TEST_PIXELS}
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def worker(settings: Settings, cpu_engine: RapidOcrEngine, loop: WorkerLoop) -> Worker:
    async def build() -> Worker:  # semaphores belong to the loop that uses them
        return Worker(settings, cpu_engine, LocalStore(settings.output_dir))

    return loop.run(build())


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def png_bytes(image: Image.Image, fmt: str = "PNG", **kw: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kw)
    return buf.getvalue()


def page_image(paragraphs: list[str]) -> Image.Image:
    """A real rendered page (via PyMuPDF) as a Pillow image."""
    import pymupdf

    doc = pymupdf.open(stream=samples.pdf_from_pages([paragraphs]), filetype="pdf")
    pix = doc[0].get_pixmap(dpi=100, alpha=False)
    return Image.frombytes("RGB", (pix.width, pix.height), pix.samples)


def run_job(loop: WorkerLoop, worker: Worker, job: dict, job_id: str = "job-1") -> dict:
    return loop.run(worker.run(job_id, job))


@pytest.fixture
def run(loop: WorkerLoop, worker: Worker):
    return lambda job, job_id="job-1": run_job(loop, worker, job, job_id)


def gather(loop: WorkerLoop, coros: list) -> list:
    async def all_of() -> list:
        return await asyncio.gather(*coros)

    return loop.run(all_of())
