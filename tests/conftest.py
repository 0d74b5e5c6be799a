"""Shared fixtures: settings on a temp folder, one started CPU engine per session, workers."""

from __future__ import annotations

import asyncio
import base64
import io
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PIL import Image

from vlm_ocr import local_endpoint, samples
from vlm_ocr.app import build_worker
from vlm_ocr.cpu_pool import CpuPool
from vlm_ocr.engines.rapidocr import RapidOcrEngine
from vlm_ocr.engines.vllm_server import free_port  # noqa: F401 (shared with the tests)
from vlm_ocr.local_endpoint import wait_for_http  # noqa: F401 (shared with the tests)
from vlm_ocr.render import Budget
from vlm_ocr.runtime import WorkerLoop
from vlm_ocr.settings import Settings
from vlm_ocr.textsim import similarity
from vlm_ocr.worker import Worker, warmup_page

ROOT = Path(__file__).resolve().parents[1]
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


@pytest.fixture(scope="session")
def cpu_pool(loop: WorkerLoop) -> Iterator[CpuPool]:
    """One pool of render processes for the session, as one worker has."""
    pool = CpuPool(2)
    loop.run(pool.start())
    yield pool
    loop.run(pool.close())


def new_worker(
    loop: WorkerLoop, settings: Settings, engine: object, pool: CpuPool, store: object = None
) -> Worker:
    """A worker on the session's loop and pool, with the store the settings select (or
    `store`)."""

    async def build() -> Worker:  # semaphores belong to the loop that uses them
        if store is not None:
            return Worker(settings, engine, store, pool=pool)  # type: ignore[arg-type]
        return build_worker(settings, engine, pool=pool)  # type: ignore[arg-type]

    return loop.run(build())


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    # Orientation (a second of CPU per scanned page, and processes of its own) only where a
    # test is about it: test_orientation.py.
    values: dict[str, object] = {
        "output_dir": tmp_path / "out",
        "max_pixels": TEST_PIXELS,
        "auto_rotate": False,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def worker(settings: Settings, cpu_engine: RapidOcrEngine, loop: WorkerLoop, cpu_pool) -> Worker:
    return new_worker(loop, settings, cpu_engine, cpu_pool)


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


def pdf_job(pages: list[list[str]], prefix: str) -> dict:
    return {"pdf": {"base64": b64(samples.pdf_from_pages(pages))}, "output_prefix": prefix}


def run_sixteen_jobs(
    loop: WorkerLoop, worker: Worker, prefix: str, read: Callable[[str], str]
) -> None:
    """16 two-page jobs at once on one worker; every stored page must hold its own page's text
    (each page carries a code unique across all jobs, so a mix-up between jobs shows too)."""
    docs = {j: samples.numbered_pages(2, lines=2) for j in range(16)}
    for j, pages in docs.items():
        for n, page in enumerate(pages):
            page.insert(0, f"Job {j} sheet {n + 1} code {j * 1000 + n * 17 + 4242}")
    jobs = [worker.run(f"job-{j}", pdf_job(pages, f"{prefix}/{j}")) for j, pages in docs.items()]
    for j, result in enumerate(gather(loop, jobs)):
        assert result["status"] == "ok", result.get("error")
        for page, truth in zip(result["pages"], docs[j], strict=True):
            text = read(page["key"])
            assert similarity(text, samples.page_text(truth)) >= 0.9, (j, text)


def serve_api(env: dict[str, str], port: int, **popen: object) -> subprocess.Popen:
    """`handler.py --rp_serve_api` (the RunPod SDK's local API server) on a loopback port."""
    return local_endpoint.serve_api(ROOT / "handler.py", env, port, **popen)


def gather(loop: WorkerLoop, coros: list) -> list:
    async def all_of() -> list:
        return await asyncio.gather(*coros)

    return loop.run(all_of())
