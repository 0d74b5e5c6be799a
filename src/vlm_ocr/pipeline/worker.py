"""The worker: what lives from cold start to shutdown, and the door jobs come in by.

It holds the started engine, the store and the parts `assemble` built from the settings (the
render processes, the CPU engine's models, the page sequence with the gates all jobs' pages
share, the job runner). It starts and ends them, and lets a job in once its input parses and no
other job on the worker writes its prefix; each job then runs as `job.JobRunner` says.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from .. import samples
from ..contract import JobInput, JobResult
from ..engines.base import Engine
from ..engines.factory import make_engine
from ..errors import InputError
from ..images import Budget, PageImage
from ..settings import Settings
from ..storage import JobKeys, Store, open_store
from .assemble import Parts, assemble
from .cpu_pool import CpuPool
from .render import pdf_page_image
from .state import Progress

log = logging.getLogger(__name__)


class Worker:
    """Runs jobs, several at once, on one started engine."""

    def __init__(self, settings: Settings, engine: Engine, store: Store, parts: Parts) -> None:
        self.settings = settings
        self.engine = engine
        self.store = store
        self.parts = parts
        self.pool = parts.pool
        self.cpu_models = parts.cpu_models
        self.engine_slots = parts.engine_slots
        self.jobs = parts.jobs
        self._prefixes: set[str] = set()  # result prefixes of the jobs running now

    # --- cold start and shutdown ----------------------------------------------------------------

    async def start(self) -> None:
        """Start the CPU pool and the engine; check the engine with a real page before any job."""
        t0 = time.perf_counter()
        if self.parts.own_pool:
            await self.pool.start()
        await self.engine.start(warmup_page(self.engine.budget(self.settings.render.max_pixels)))
        log.info(
            "engine ready in %.1f s: %s",
            time.perf_counter() - t0,
            json.dumps(self.engine_facts(), ensure_ascii=False),
        )

    async def close(self) -> None:
        await self.engine.close()
        if self.parts.own_pool:
            await self.pool.close()
        await self.cpu_models.close()

    def terminate(self) -> None:
        """End every child process now (the worker got SIGTERM or SIGINT)."""
        self.engine.terminate()
        self.pool.terminate()
        self.cpu_models.terminate()

    @property
    def jobs_at_once(self) -> int:
        """Jobs the worker takes at once: `MAX_CONCURRENT_JOBS` per engine replica, so that
        each replica stays as full as one engine does."""
        return self.settings.job.max_concurrent_jobs * self.engine.replicas

    def engine_facts(self) -> dict[str, Any]:
        return self.jobs.engine_facts()

    # --- jobs -----------------------------------------------------------------------------------

    async def run(self, job_id: str, raw_input: Any, progress: Progress | None = None) -> JobResult:
        """Run one job; refusals come back as failed results, never as exceptions."""
        try:
            job = JobInput.parse(raw_input, max_pages=self.settings.job.max_pages_per_job)
        except InputError as exc:
            return self.jobs.refuse(job_id, exc)
        prefix = self.store.key_prefix + (job.output_prefix or job_id)
        if taken := self.store.taken(prefix):
            return self.jobs.refuse(job_id, f"input.output_prefix: {taken}")
        if prefix in self._prefixes:
            return self.jobs.refuse(
                job_id,
                f"input.output_prefix: another job on this worker is writing {prefix!r} now; "
                "wait for it to finish or use another prefix",
            )
        self._prefixes.add(prefix)
        try:
            return await self.jobs.run(job_id, job, JobKeys(prefix), progress)
        finally:
            self._prefixes.discard(prefix)


def build_worker(
    settings: Settings,
    engine: Engine | None = None,
    out_dir: Path | None = None,
    *,
    pool: CpuPool | None = None,
    store: Store | None = None,
) -> Worker:
    """The worker the settings describe (its engine not started yet): the engine and the store
    they select unless given, the rest built by `assemble`."""
    inputs = None
    if store is None:
        store, inputs = open_store(settings, out_dir)
    engine = engine or make_engine(settings)
    parts = assemble(settings, engine, store, inputs=inputs, pool=pool)
    return Worker(settings, engine, store, parts)


async def start_worker(settings: Settings, out_dir: Path | None = None) -> Worker:
    worker = build_worker(settings, out_dir=out_dir)
    await worker.start()
    return worker


def warmup_page(budget: Budget) -> PageImage:
    """A real page, rendered as a job's page would be, to warm and check the engine."""
    return pdf_page_image(samples.pdf_from_pages(samples.LEGAL_PAGES[:1]), 1, budget)
