"""The worker: what lives from cold start to shutdown, and the door jobs come in by.

It holds the started engine, the store, the render processes and the CPU engine's models, and
the gates all jobs' pages share: pages at the engine (so concurrent jobs keep it batched) and
rendered pages held at once (so memory follows the engine's size). Each job runs as `job.run_job`
says, its pages as `page.PageSequence` says.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from .. import samples
from ..contract import JobInput, JobResult
from ..engines.base import Engine
from ..errors import InputError
from ..images import Budget, PageImage
from ..settings import Settings
from ..storage import BucketInputs, JobKeys, Store
from .cpu_models import CpuModels
from .cpu_pool import CpuPool
from .job import run_job
from .page import PageSequence
from .render import pdf_page_image
from .sources import Rendering
from .stages.fetch_render import FetchRender
from .stages.layout import Layout
from .stages.recognize import Recognize
from .stages.reuse import Reuse
from .stages.second_opinion import SecondOpinion
from .stages.store import StoreText
from .stages.upright import Upright
from .state import Progress

log = logging.getLogger(__name__)


class Worker:
    """Runs jobs, several at once, on one started engine."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        store: Store,
        *,
        inputs: BucketInputs | None = None,
        pool: CpuPool | None = None,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.store = store
        self.inputs = inputs
        self._own_pool = pool is None
        render = settings.render
        self.pool = pool or CpuPool(
            render.render_processes, memory_limit_mb=render.render_memory_mb
        )
        self.rendering = Rendering(self.pool, render)
        self.cpu_models = CpuModels(
            settings.cpu_models.cpu_model_processes, timeout_s=render.render_timeout_s
        )
        self.engine_slots = settings.job.max_concurrent_pages or engine.default_concurrency
        # Rendered pages held at once, across jobs: those at the engine and a few ready to go.
        self.rendered_slots = self.engine_slots + 2 * self.pool.size
        self.pages = PageSequence(
            render=FetchRender(),
            upright=Upright(self.cpu_models, enabled=settings.cpu_models.auto_rotate),
            reuse=Reuse(store),
            recognize=Recognize(engine, asyncio.Semaphore(self.engine_slots), self.rendering),
            layout=Layout(self.rendering, blocks_source(engine)),
            store=StoreText(store),
            second_opinion=SecondOpinion(
                self.cpu_models,
                store,
                min_agreement=settings.cpu_models.second_opinion_min_agreement,
            ),
            rendered_slots=asyncio.Semaphore(self.rendered_slots),
        )
        self._prefixes: set[str] = set()  # result prefixes of the jobs running now

    # --- cold start and shutdown ----------------------------------------------------------------

    async def start(self) -> None:
        """Start the CPU pool and the engine; check the engine with a real page before any job."""
        t0 = time.perf_counter()
        if self._own_pool:
            await self.pool.start()
        await self.engine.start(warmup_page(self.engine.budget(self.settings.render.max_pixels)))
        log.info(
            "engine ready in %.1f s: %s",
            time.perf_counter() - t0,
            json.dumps(self.engine_facts(), ensure_ascii=False),
        )

    async def close(self) -> None:
        await self.engine.close()
        if self._own_pool:
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
        facts = self.engine.facts
        return {
            "name": facts.name,
            "version": facts.version,
            "model": facts.model,
            "revision": facts.revision,
            "concurrency": self.engine_slots,
            **facts.details,
        }

    # --- jobs -----------------------------------------------------------------------------------

    async def run(self, job_id: str, raw_input: Any, progress: Progress | None = None) -> JobResult:
        """Run one job; refusals come back as failed results, never as exceptions."""
        try:
            job = JobInput.parse(raw_input, max_pages=self.settings.job.max_pages_per_job)
        except InputError as exc:
            return self.refuse(job_id, str(exc))
        prefix = self.store.key_prefix + (job.output_prefix or job_id)
        if prefix in self._prefixes:
            return self.refuse(
                job_id,
                f"input.output_prefix: another job on this worker is writing {prefix!r} now; "
                "wait for it to finish or use another prefix",
            )
        self._prefixes.add(prefix)
        try:
            return await run_job(self, job_id, job, JobKeys(prefix), progress)
        finally:
            self._prefixes.discard(prefix)

    def refuse(self, job_id: str, error: str) -> JobResult:
        return JobResult.refused(job_id, error, self.engine_facts())


def blocks_source(engine: Engine) -> str:
    """Who finds a page's blocks, for its blocks file: the model's family, or the engine."""
    family = getattr(engine, "family", None)
    return getattr(family, "name", None) or engine.facts.name


def warmup_page(budget: Budget) -> PageImage:
    """A real page, rendered as a job's page would be, to warm and check the engine."""
    return pdf_page_image(samples.pdf_from_pages(samples.LEGAL_PAGES[:1]), 1, budget)
