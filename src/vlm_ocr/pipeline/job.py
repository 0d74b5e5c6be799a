"""One job, top to bottom, in four steps:

    prepare: job input ─► the prompt and the fingerprint ─► Document (PageRefs) ─► JobContext
    run the pages: every page through its stages, concurrently (`page.PageSequence`)
        ─► PageReports ─► the pages together (`whole_document`: running heads, document.md,
        searchable PDF)
    result: verdict (from the page reports and what stopped the job) ─► JobResult
    publish: the manifest stored ─► presigned URLs ─► the JobResult returned

A job that cannot start is refused with a `JobResult` of the same shape as any failed job
(`refuse`): here, input the document or the engine cannot serve (a document that cannot be
read, JSON asked of an engine that cannot answer it); before it comes here, in `Worker.run`,
input that does not parse and a prefix another job is writing. A job
stopped from outside while its pages run leaves a manifest of the pages done
(`leave_a_manifest`).

A `JobRunner` is built once per worker (`assemble`) from the parts a job uses, named one by
one: the engine, the store, the bucket inputs, the rendering, the page sequence, the
whole-document pass and the limits the settings set.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from ..contract import JobInput, JobResult, PageReport, Totals, format_ranges
from ..engines.base import Engine
from ..errors import InputError, JobStop, StorageError
from ..images import BLANK_DETECTOR, LOW_DPI, Budget
from ..prompts import Prompt
from ..settings import FetchSettings
from ..storage import BucketInputs, JobKeys, Store, put_json
from .job_files import JobFiles
from .page import PageSequence
from .rendering import Rendering
from .sources import Document, PageRef, load_document
from .state import JobContext, Progress
from .verdict import verdict
from .whole_document import Finished, WholeDocument

LAYOUT_VERSION = "2"  # blocks, figures, running heads: stored pages made otherwise are read again


@dataclass(frozen=True)
class JobLimits:
    """What bounds a job, read once from the settings."""

    #: the worker's page budget (`MAX_PIXELS`), which the engine's budget is asked with
    max_pixels: int
    #: pages one job may select (`MAX_PAGES_PER_JOB`)
    max_pages: int
    #: pages of one job in flight at once
    pages_at_once: int
    #: pages at the engine across all jobs (the engine facts' `concurrency`)
    engine_slots: int
    #: whether a job that does not say gets the second opinion (`SECOND_OPINION`)
    second_opinion: bool
    #: what a job's inputs may take to fetch
    fetch: FetchSettings


@dataclass
class Prepared:
    """A job ready to run its pages: what it reads them with, and where they are."""

    job_id: str
    input: JobInput
    keys: JobKeys
    prompt: Prompt
    fingerprint: dict[str, Any]
    document: Document
    context: JobContext
    started: float
    loaded: float
    recognized: float = 0.0


log = logging.getLogger(__name__)
# A stopped job's manifest is written within this (a bucket that does not answer stops no exit).
STOPPED_WRITE_S = 10.0


class JobRunner:
    def __init__(
        self,
        *,
        engine: Engine,
        store: Store,
        inputs: BucketInputs | None,
        rendering: Rendering,
        pages: PageSequence,
        whole: WholeDocument,
        limits: JobLimits,
    ) -> None:
        self.engine = engine
        self.store = store
        self.inputs = inputs
        self.rendering = rendering
        self.pages = pages
        self.whole = whole
        self.limits = limits

    async def run(
        self, job_id: str, job: JobInput, keys: JobKeys, progress: Progress | None = None
    ) -> JobResult:
        ready = await self.prepare(job_id, job, keys, progress)
        if isinstance(ready, JobResult):
            return ready
        try:
            pages = await self.run_pages(ready)
            whole = await self.whole.finish(job, keys, ready.document, ready.context, pages)
        except asyncio.CancelledError:  # stopped from outside: say so where the pages are
            await self.leave_a_manifest(ready)
            raise
        finally:
            ready.document.close()
        return await self.publish(ready, whole)

    def engine_facts(self) -> dict[str, Any]:
        facts = self.engine.facts
        return {
            "name": facts.name,
            "version": facts.version,
            "model": facts.model,
            "revision": facts.revision,
            "concurrency": self.limits.engine_slots,
            **facts.details,
        }

    def refuse(self, job_id: str, error: str | InputError) -> JobResult:
        """The job's refusal; an input error lists each of its problems in `errors` too."""
        lines = error.lines() if isinstance(error, InputError) else None
        return JobResult.refused(job_id, str(error), self.engine_facts(), lines)

    # --- the steps ------------------------------------------------------------------------------

    async def prepare(
        self, job_id: str, job: JobInput, keys: JobKeys, progress: Progress | None
    ) -> Prepared | JobResult:
        """The job's prompt, fingerprint, pages and context; or its refusal."""
        t0 = time.perf_counter()
        engine, limits = self.engine, self.limits
        if job.json_schema is not None and not engine.facts.json_output:
            return self.refuse(
                job_id,
                f"input.json_schema: the {engine.facts.name} engine reads text and cannot answer "
                "JSON; run JSON jobs on the GPU engine (ENGINE=vllm or openai)",
            )
        try:
            prompt = engine.prompt_for(job.prompt, job.custom_prompt, job.json_schema)
            document = await load_document(
                job,
                page_budget(engine.budget(limits.max_pixels), job),
                JobFiles(limits.fetch, self.inputs),
                self.rendering,
                max_pages=limits.max_pages,
            )
        except InputError as exc:
            return self.refuse(job_id, exc)
        loaded = time.perf_counter()
        fingerprint = fingerprint_of(engine, prompt, job)
        context = JobContext(
            input=job,
            keys=keys,
            prompt=prompt,
            fingerprint_id=_digest(fingerprint),
            # a second reading of the page's text says nothing about JSON extracted from it
            second_opinion=job.json_schema is None
            and (limits.second_opinion if job.second_opinion is None else job.second_opinion),
            total=len(document.pages),
            engine_failure=lambda: engine.failure,
            progress=progress,
        )
        if job.searchable_pdf and job.images is not None:
            context.keep_images = document.files.dir / "pages"
            context.keep_images.mkdir()
        return Prepared(job_id, job, keys, prompt, fingerprint, document, context, t0, loaded)

    async def run_pages(self, ready: Prepared) -> list[PageReport]:
        """Every page through its stages, a job's share of them in flight at once."""
        job_slots = asyncio.Semaphore(self.limits.pages_at_once)

        async def bounded(ref: PageRef) -> PageReport:
            async with job_slots:
                return await self.pages.run(ref, ready.context)

        reports = await asyncio.gather(*(bounded(ref) for ref in ready.document.pages))
        ready.recognized = time.perf_counter()
        return sorted(reports, key=lambda p: p.page)

    def result(
        self, ready: Prepared, whole: Finished, manifest_error: str | None = None
    ) -> JobResult:
        """The job's result from its pages and what stopped it (the manifest says the same)."""
        pages, document, keys = whole.pages, ready.document, ready.keys
        problems = document.problems + whole.problems
        judged = verdict(
            pages,
            problems=problems,
            stop=ready.context.stop,
            engine_failure=self.engine.failure,
            manifest_error=manifest_error,
        )
        timings = {
            "load_s": round(ready.loaded - ready.started, 3),
            "pages_s": round(ready.recognized - ready.loaded, 3),
        }
        return JobResult(
            job_id=ready.job_id,
            status=judged.status,
            error=judged.error,
            retry=judged.retry,
            refresh_worker=judged.refresh_worker,
            store=self.store.kind,
            prefix=keys.prefix,
            manifest_key=None if manifest_error else keys.manifest,
            document_key=whole.document_key,
            searchable_pdf_key=whole.searchable_pdf_key,
            input_sha256=document.input_sha256,
            pages=pages,
            totals=Totals.of(pages),
            timings=timings | whole.timings,
            engine=self.engine_facts(),
            fingerprint={**ready.fingerprint, "id": ready.context.fingerprint_id},
            notes=self._notes(ready.input, ready.prompt)
            + document.notes
            + whole.notes
            + _review_note(pages)
            + _low_dpi_note(pages)
            + _frames_note(pages),
            errors=problems + [f"page {p.page}: {p.error}" for p in pages if p.error],
        )

    async def publish(self, ready: Prepared, whole: Finished) -> JobResult:
        """Store the manifest (if it cannot be, the result says so), then presign the keys."""
        manifest = self.result(ready, whole)
        t_manifest = time.perf_counter()
        stored = manifest.manifest()  # its time up to its own writing: the result's, near enough
        stored["timings"] = stored.get("timings", {}) | {
            "total_s": round(t_manifest - ready.started, 3)
        }
        try:
            await put_json(self.store, ready.keys.manifest, stored)
        except StorageError as exc:
            final = self.result(ready, whole, manifest_error=str(exc))
        else:
            final = manifest
        timings = final.timings | {
            "manifest_s": round(time.perf_counter() - t_manifest, 4),
            "total_s": round(time.perf_counter() - ready.started, 3),
        }
        if not (final.manifest_key and ready.input.presign_urls):
            return final.model_copy(update={"timings": timings})
        presign = self.store.presign
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

    async def leave_a_manifest(self, ready: Prepared) -> None:
        """A job stopped from outside (RunPod cancelled it or its time ran out; Ctrl-C on `vlm-ocr
        run`): its manifest lists the pages done and the rest as not processed, so the stored
        pages are found, and a job submitted again reads only those missing. Written within
        STOPPED_WRITE_S, whatever stops it again meanwhile; a store that fails is logged."""
        done = {r.page: r for r in ready.context.reports}
        pages = [
            done.get(ref.number)
            or PageReport(
                page=ref.number,
                source=ref.source,
                status="failed",
                error="not processed: the job was stopped before this page was done",
                error_stage="stopped",
            )
            for ref in ready.document.pages
        ]
        ready.context.stop = JobStop("stopped", "the job was stopped (cancelled, or out of time)")
        ready.recognized = time.perf_counter()
        manifest = self.result(ready, Finished(pages)).manifest()
        write = asyncio.ensure_future(put_json(self.store, ready.keys.manifest, manifest))
        try:
            await asyncio.wait_for(asyncio.shield(write), STOPPED_WRITE_S)
        except (StorageError, TimeoutError, asyncio.CancelledError) as exc:
            log.warning("job %s: its manifest was not written (%r)", ready.job_id, exc)

    def _notes(self, job: JobInput, prompt: Prompt) -> list[str]:
        notes = []
        top = self.engine.budget(self.limits.max_pixels).max_pixels
        if job.max_pixels and job.max_pixels > top:
            notes.append(
                f"max_pixels {job.max_pixels:,} is above this worker's page budget ({top:,} "
                "pixels, MAX_PIXELS or its model family's own), which the engine was started "
                "with; pages were rendered within it (raise MAX_PIXELS on the endpoint for "
                "larger pages)"
            )
        if job.presign_urls and self.store.kind == "local":
            notes.append(
                "presign_urls: no URLs were made; the results are files in a local folder "
                "(OUTPUT_DIR), and only a bucket's results have URLs (BUCKET_NAME)"
            )
        facts = self.engine.facts
        if not facts.uses_prompt and (job.prompt or job.custom_prompt):  # asked for, not used
            notes.append(
                f"the {facts.name} engine reads no prompt; "
                f"prompt {prompt.name!r} (version {prompt.version}) was not used"
            )
        return notes


def fingerprint_of(engine: Engine, prompt: Prompt, job: JobInput) -> dict[str, Any]:
    """What decides a page's text besides its pixels: a stored text is reused only when this
    matches. The blank-page detector decides some texts too (empty ones), and the layout the
    rest."""
    fingerprint = engine.fingerprint(prompt) | {"blank_detector": BLANK_DETECTOR}
    if job.json_schema is None:
        fingerprint |= {"layout": LAYOUT_VERSION, "headers_footers": job.headers_footers}
    return fingerprint


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


def _review_note(pages: list[PageReport]) -> list[str]:
    flagged = [p.page for p in pages if p.review]
    if not flagged:
        return []
    return [f"second opinion: pages {format_ranges(flagged)} to review (see their `differences`)"]


def _low_dpi_note(pages: list[PageReport]) -> list[str]:
    low = [p for p in pages if p.dpi is not None and p.dpi < LOW_DPI and p.status != "failed"]
    if not low:
        return []
    least = min(p.dpi or 0 for p in low)
    which = format_ranges([p.page for p in low])
    subject = (
        f"page {which} was drawn at"
        if len(low) == 1
        else f"pages {which} were drawn at as little as"
    )
    return [
        f"{subject} {least} dpi within the page budget: print under about "
        f"{round(8 * 72 / max(least, 1))} pt may not be read (a larger page budget reads it: "
        "the job's `max_pixels` up to the worker's MAX_PIXELS, within the model family's own; "
        "or the page cut into parts and sent as images)"
    ]


def _frames_note(pages: list[PageReport]) -> list[str]:
    multi = [p for p in pages if p.frames]
    if not multi:
        return []
    which = ", ".join(f"{p.page} ({p.frames} pages)" for p in multi[:5])
    more = f" and {len(multi) - 5} more" if len(multi) > 5 else ""
    return [
        f"image {which}{more}: a multi-page TIFF, of which only the first page was read; send "
        'it as `pdf` ({"pdf": {…}}) to read every page'
    ]


def _digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
