"""One job, top to bottom.

    job input ─► JobInput ─► the prompt and the fingerprint ─► Document (PageRefs)
        ─► every page through its stages, concurrently (`page.PageSequence`) ─► PageReports
        ─► the pages together (`whole_document`: running heads, document.md, searchable PDF)
        ─► verdict (from the page reports and what stopped the job) ─► manifest ─► JobResult

A job that cannot start (bad input, a prefix another job is writing, JSON asked of an engine
that cannot answer it) is refused with a `JobResult` of the same shape as any failed job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

from ..contract import JobInput, JobResult, PageReport, Totals, format_ranges
from ..errors import InputError, StorageError
from ..images import BLANK_DETECTOR, Budget
from ..prompts import Prompt
from ..storage import JobKeys, put_json
from .sources import JobFiles, load_document
from .state import JobContext, Progress
from .verdict import verdict
from .whole_document import finish

LAYOUT_VERSION = "1"  # blocks, figures, running heads: stored pages made otherwise are read again

if TYPE_CHECKING:
    from .worker import Worker


async def run_job(
    worker: Worker, job_id: str, job: JobInput, keys: JobKeys, progress: Progress | None
) -> JobResult:
    t0 = time.perf_counter()
    settings, engine = worker.settings, worker.engine
    if job.json_schema is not None and not engine.facts.json_output:
        return worker.refuse(
            job_id,
            f"input.json_schema: the {engine.facts.name} engine reads text and cannot answer "
            "JSON; run JSON jobs on the GPU engine (ENGINE=vllm or openai)",
        )
    try:
        prompt = engine.prompt_for(job.prompt, job.custom_prompt, job.json_schema)
    except InputError as exc:
        return worker.refuse(job_id, str(exc))
    # the blank-page detector decides some texts too (empty ones), and the layout the rest
    fingerprint = engine.fingerprint(prompt) | {"blank_detector": BLANK_DETECTOR}
    if job.json_schema is None:
        fingerprint |= {"layout": LAYOUT_VERSION, "headers_footers": job.headers_footers}
    try:
        document = await load_document(
            job,
            page_budget(engine.budget(settings.render.max_pixels), job),
            JobFiles(settings.fetch, worker.inputs),
            worker.rendering,
            max_pages=settings.job.max_pages_per_job,
        )
    except InputError as exc:
        return worker.refuse(job_id, str(exc))
    loaded = time.perf_counter()

    context = JobContext(
        input=job,
        keys=keys,
        prompt=prompt,
        fingerprint_id=_digest(fingerprint),
        # a second reading of the page's text says nothing about JSON extracted from it
        second_opinion=job.json_schema is None
        and (
            settings.cpu_models.second_opinion if job.second_opinion is None else job.second_opinion
        ),
        total=len(document.pages),
        engine_failure=lambda: engine.failure,
        progress=progress,
    )
    # By default a job may fill the engine and keep renders and uploads going beside it.
    job_slots = asyncio.Semaphore(settings.job.job_max_concurrent_pages or worker.rendered_slots)

    async def bounded(ref: Any) -> PageReport:
        async with job_slots:
            return await worker.pages.run(ref, context)

    if job.searchable_pdf and job.images is not None:
        context.keep_images = document.files.dir / "pages"
        context.keep_images.mkdir()
    try:
        pages = sorted(
            await asyncio.gather(*(bounded(ref) for ref in document.pages)),
            key=lambda p: p.page,
        )
        recognized = time.perf_counter()
        whole = await finish(worker, job, keys, document, context, pages)
    finally:
        document.close()
    pages = whole.pages

    def result(manifest_error: str | None = None) -> JobResult:
        judged = verdict(
            pages,
            problems=document.problems + whole.problems,
            stop=context.stop,
            engine_failure=engine.failure,
            manifest_error=manifest_error,
        )
        return JobResult(
            job_id=job_id,
            status=judged.status,
            error=judged.error,
            retry=judged.retry,
            refresh_worker=judged.refresh_worker,
            store=worker.store.kind,
            prefix=keys.prefix,
            manifest_key=None if manifest_error else keys.manifest,
            document_key=whole.document_key,
            searchable_pdf_key=whole.searchable_pdf_key,
            pages=pages,
            totals=Totals.of(pages),
            timings={"load_s": round(loaded - t0, 3), "pages_s": round(recognized - loaded, 3)}
            | whole.timings,
            engine=worker.engine_facts(),
            fingerprint={**fingerprint, "id": context.fingerprint_id},
            notes=_notes(worker, job, prompt) + document.notes + whole.notes + _review_note(pages),
            errors=document.problems
            + whole.problems
            + [f"page {p.page}: {p.error}" for p in pages if p.error],
        )

    # The manifest says what the result says; if it cannot be written, the result says that.
    manifest = result()
    t_manifest = time.perf_counter()
    try:
        await put_json(worker.store, keys.manifest, manifest.manifest())
    except StorageError as exc:
        final = result(manifest_error=str(exc))
    else:
        final = manifest
    timings = final.timings | {
        "manifest_s": round(time.perf_counter() - t_manifest, 4),
        "total_s": round(time.perf_counter() - t0, 3),
    }
    if not (final.manifest_key and job.presign_urls):
        return final.model_copy(update={"timings": timings})
    presign = worker.store.presign
    return final.model_copy(
        update={
            "manifest_url": await presign(final.manifest_key),
            "pages": [
                p.model_copy(update={"url": await presign(p.key)}) if p.key else p
                for p in final.pages
            ],
            "timings": timings,
        }
    )


def page_budget(budget: Budget, job: JobInput) -> Budget:
    """The engine's page budget (its model family's, MAX_PIXELS for a chat VLM), or less when
    the job asks. Never more: the engine was started for that size and would scale a larger
    page down again."""
    if not (job.max_pixels or job.max_side):
        return budget
    sides = [s for s in (job.max_side, budget.max_side) if s]
    return dataclasses.replace(
        budget,
        max_pixels=min(job.max_pixels or budget.max_pixels, budget.max_pixels),
        max_side=min(sides) if sides else None,
    )


def _notes(worker: Worker, job: JobInput, prompt: Prompt) -> list[str]:
    notes = []
    top = worker.engine.budget(worker.settings.render.max_pixels).max_pixels
    if job.max_pixels and job.max_pixels > top:
        notes.append(
            f"max_pixels {job.max_pixels:,} is above this worker's page budget ({top:,} pixels, "
            "MAX_PIXELS or its model family's own), which the engine was started with; pages "
            "were rendered within it (raise MAX_PIXELS on the endpoint for larger pages)"
        )
    facts = worker.engine.facts
    if not facts.uses_prompt:
        notes.append(
            f"the {facts.name} engine reads no prompt; "
            f"prompt {prompt.name!r} (version {prompt.version}) was not used"
        )
    return notes


def _review_note(pages: list[PageReport]) -> list[str]:
    flagged = [p.page for p in pages if p.review]
    if not flagged:
        return []
    return [f"second opinion: pages {format_ranges(flagged)} to review (see their `differences`)"]


def _digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
