"""A worker's parts, built once, here, from its settings (the store is chosen in `storage`):
the render processes, the CPU engine's models, the rendering, a page's stages and their
sequence, the whole-document pass and the job runner. Every part is handed what it uses and
nothing more; the worker (`worker.py`) only holds them, starts and ends them, and lets jobs in."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..engines.base import Engine
from ..settings import Settings
from ..storage import BucketInputs, Store
from .cpu_models import CpuModels
from .cpu_pool import CpuPool
from .job import JobLimits, JobRunner
from .page import PageSequence
from .rendering import Rendering
from .stages.fetch_render import FetchRender
from .stages.layout import Layout
from .stages.recognize import Recognize
from .stages.reuse import Reuse
from .stages.second_opinion import SecondOpinion
from .stages.store import StoreText
from .stages.upright import Upright
from .whole_document import WholeDocument


@dataclass(frozen=True)
class Parts:
    """What a worker is made of, besides its engine and store."""

    #: the render processes (decode, render, crop, the searchable PDF's pages)
    pool: CpuPool
    #: the pool was made here, so the worker starts and ends it (else its owner does)
    own_pool: bool
    cpu_models: CpuModels
    #: pages at the engine at once, across jobs
    engine_slots: int
    jobs: JobRunner


def assemble(
    settings: Settings,
    engine: Engine,
    store: Store,
    *,
    inputs: BucketInputs | None = None,
    pool: CpuPool | None = None,
) -> Parts:
    """The parts for this engine and store (`pool`: render processes someone else owns)."""
    render = settings.render
    own_pool = pool is None
    pool = pool or CpuPool(render.render_processes, memory_limit_mb=render.render_memory_mb)
    rendering = Rendering(pool, render)
    cpu_models = CpuModels(
        settings.cpu_models.cpu_model_processes,
        timeout_s=render.render_timeout_s,
        layout=settings.cpu_models.cpu_layout,
    )
    engine_slots = settings.job.max_concurrent_pages or engine.default_concurrency
    # rendered pages held at once, across jobs: those at the engine and a few ready to go
    rendered_slots = engine_slots + 2 * pool.size
    pages = page_sequence(
        settings, engine, store, rendering, cpu_models, slots=(engine_slots, rendered_slots)
    )
    limits = JobLimits(
        max_pixels=render.max_pixels,
        max_pages=settings.job.max_pages_per_job,
        # by default a job may fill the engine and keep renders and uploads going beside it
        pages_at_once=settings.job.job_max_concurrent_pages or rendered_slots,
        engine_slots=engine_slots,
        second_opinion=settings.cpu_models.second_opinion,
        fetch=settings.fetch,
    )
    jobs = JobRunner(
        engine=engine,
        store=store,
        inputs=inputs,
        rendering=rendering,
        pages=pages,
        whole=WholeDocument(store, pool, timeout_s=render.render_timeout_s),
        limits=limits,
    )
    return Parts(pool, own_pool, cpu_models, engine_slots, jobs)


def page_sequence(
    settings: Settings,
    engine: Engine,
    store: Store,
    rendering: Rendering,
    cpu_models: CpuModels,
    *,
    slots: tuple[int, int],
) -> PageSequence:
    """A page's stages, in the order they run, each given what it uses; `slots`: the pages at
    the engine at once and the rendered pages held at once, across jobs."""
    engine_slots, rendered_slots = slots
    models = settings.cpu_models
    return PageSequence(
        render=FetchRender(),
        upright=Upright(cpu_models, rendering, enabled=models.auto_rotate),
        reuse=Reuse(store),
        recognize=Recognize(engine, asyncio.Semaphore(engine_slots), rendering),
        layout=Layout(rendering, blocks_source(engine)),
        store=StoreText(store),
        second_opinion=SecondOpinion(
            cpu_models, store, min_agreement=models.second_opinion_min_agreement
        ),
        rendered_slots=asyncio.Semaphore(rendered_slots),
    )


def blocks_source(engine: Engine) -> str:
    """Who finds a page's blocks, for its blocks file: the model's family, or the engine."""
    return engine.family.name if engine.family is not None else engine.facts.name
