"""Fixtures: one event loop, one started CPU engine and one render pool per session; settings
and a worker per test. Helpers are in `tests/support`."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from vlm_ocr.contract import JobResult
from vlm_ocr.engines import model_files
from vlm_ocr.engines.rapidocr import RapidOcrEngine
from vlm_ocr.entry.runtime import WorkerLoop
from vlm_ocr.images import Budget
from vlm_ocr.pipeline.cpu_pool import CpuPool
from vlm_ocr.pipeline.worker import Worker, warmup_page
from vlm_ocr.settings import Settings
from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3

from .support import TEST_PIXELS, make_settings, new_worker, run_job
from .support.workers import BUCKET, Workers


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The engine tests first: they are the longest file and mostly one after the other (each
    starts vLLM), so `make test` hands them to one process at once while the others take the
    fast files (xdist deals files out in this order with `--no-loadscope-reorder`)."""
    items.sort(key=lambda item: item.get_closest_marker("engine") is None)


@pytest.fixture(scope="session", autouse=True)
def no_outside_settings() -> Iterator[None]:
    """Nothing of the developer's shell reaches a test: no variable the worker reads as a
    setting, no RunPod or AWS variable (boto3 would read those), for the whole session. Settings
    are built from what each test names; processes a test starts inherit this environment."""
    names = [
        k for k in os.environ if k.lower() in Settings.GROUP_OF or k.startswith(("RUNPOD_", "AWS_"))
    ]
    saved = {k: os.environ.pop(k) for k in names}
    yield
    os.environ.update(saved)


@pytest.fixture(scope="session", autouse=True)
def no_network_volume(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Nor does the machine's /runpod-volume, which the worker in a test's process would take for
    RunPod's network volume (the compile caches and models on it): a test names a volume of its
    own where it wants one."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_files, "NETWORK_VOLUME", tmp_path_factory.mktemp("x") / "no-volume")
        yield


@pytest.fixture(autouse=True)
def no_stale_log_handlers() -> Iterator[None]:
    """A command a test runs sets logging up on the stderr of its moment (pytest's capture,
    closed after the test): a later test's log lines must not go to that closed stream."""
    root = logging.getLogger()
    before = set(root.handlers)
    yield
    for handler in root.handlers[:]:
        if handler not in before and type(handler) is logging.StreamHandler:
            root.removeHandler(handler)


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


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def worker(settings: Settings, cpu_engine: RapidOcrEngine, loop: WorkerLoop, cpu_pool) -> Worker:
    return new_worker(loop, settings, cpu_engine, cpu_pool)


@pytest.fixture
def run(loop: WorkerLoop, worker: Worker) -> Callable[..., JobResult]:
    def go(job: Any, job_id: str = "job-1") -> JobResult:
        return run_job(loop, worker, job, job_id)

    return go


@pytest.fixture(scope="session")
def loopback_s3() -> Iterator[LoopbackS3]:
    """moto's S3 server on loopback with the bucket the fan-out tests' workers use."""
    server = LoopbackS3()
    server.create_bucket(BUCKET)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def workers(loopback_s3: LoopbackS3, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    """Two CPU-engine workers behind the stand-in endpoint, started once for the session's
    `vlm-ocr submit` tests (each test keeps to its own prefix and counts its own jobs)."""
    endpoint = Workers(loopback_s3, tmp_path_factory.mktemp("workers"))
    yield endpoint
    endpoint.stop()
