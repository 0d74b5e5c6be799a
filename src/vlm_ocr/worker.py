"""The job pipeline, top to bottom.

    job input ─► JobInput ─► Document (PageRefs) ─► per page, concurrently, one task each:
        fetch + render (CPU pool) ─► stored text for these pixels + fingerprint? reuse it
                                  ─► engine.recognize ─► store the text ─► PageReport
    ─► Verdict (from the page reports alone) ─► manifest ─► job result

Every page is independent: a page that fails is reported with its reason and the others go on.
A page task returns one PageReport, built once at its end; a key enters it only after the write
succeeded. The job's status comes from one function (`verdict`), for the manifest and the result.
Pages of all jobs share one engine gate, so concurrent jobs keep the engine batched.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from . import samples
from .compare import agree
from .cpu_pool import CpuPool, TaskFailed, TaskTimeout, host_cores
from .engines.base import Engine, Recognition
from .engines.rapidocr import read_png
from .errors import EngineError, InputError, PageError, StorageError
from .orientation import upright
from .prompts import Prompt, resolve
from .render import BLANK_DETECTOR, Budget, PageImage, pdf_page_image
from .schema import JobInput, JobReport, PageReport, format_ranges
from .settings import Settings
from .sources import Limits, PageRef, Rendering, load_document
from .storage import JSON_TYPE, TEXT_TYPE, BucketInputs, JobKeys, PageRecord, Store, put_json

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class PageDone:
    """One page's outcome the moment it is stored (or failed): what a job streams."""

    report: PageReport
    done: int
    total: int

    def update(self) -> dict[str, Any]:
        """The short form RunPod's progress updates carry."""
        return {
            "done": self.done,
            "total": self.total,
            "page": self.report.page,
            "status": self.report.status,
        }


Progress = Callable[[PageDone], None]


@dataclass(frozen=True)
class Opinion:
    """The second opinion on one page: how far the CPU engine's reading agrees with the
    engine's, and the critical tokens that differ."""

    agreement: float | None
    review: bool
    differences: list[str]

    @classmethod
    def of(cls, text: str, other: str | Exception, settings: Settings) -> Opinion:
        if isinstance(other, Exception):
            return cls(None, True, [f"no second opinion: {other}"])
        found = agree(text, other)
        review = found.needs_review(settings.second_opinion_min_agreement)
        return cls(found.agreement, review, [str(d) for d in found.differences])


@dataclass
class _Job:
    """What one job's page tasks share: its settings, and the two reasons to stop early."""

    job: JobInput
    keys: JobKeys
    prompt: Prompt
    fingerprint_id: str
    progress: Progress | None
    total: int
    second_opinion: bool = False
    done: int = 0
    store_error: str | None = None
    engine_error: str | None = None

    def check_alive(self, engine: Engine) -> None:
        if self.store_error:
            raise PageError(
                "store", f"not processed: the store failed earlier ({self.store_error})"
            )
        if engine.failure:
            raise PageError("engine", f"not processed: the engine is down ({engine.failure})")


@dataclass(frozen=True)
class Verdict:
    """A job's status and, when it is not plainly `ok`, the error a user reads first."""

    status: Literal["ok", "partial", "failed"]
    error: str | None = None
    refresh_worker: bool = False
    #: the job stopped for a reason outside its input (the engine or the store failed):
    #: submitting it again finishes it, reusing the pages already stored
    retry: bool = False


def verdict(
    pages: list[PageReport],
    *,
    problems: list[str],
    store_error: str | None,
    engine_error: str | None,
    manifest_error: str | None = None,
) -> Verdict:
    """The one place a job's status is decided, from its pages and what failed around them."""
    ok = [p.page for p in pages if p.status != "failed"]  # stored: text, or blank
    status: Literal["ok", "partial", "failed"] = (
        "failed" if not ok else ("ok" if len(ok) == len(pages) else "partial")
    )
    messages = list(problems)
    if store_error or manifest_error:
        # A page is ok or blank only once its text is stored: the two lists follow from status.
        not_stored = [p.page for p in pages if p.status == "failed"]
        messages.append(
            f"the store failed: {store_error or manifest_error}. "
            f"Stored pages: {format_ranges(ok) or 'none'}; "
            f"not stored: {format_ranges(not_stored) or 'none'}"
            + ("" if manifest_error is None else "; the manifest was not written")
        )
    if engine_error:
        messages.append(f"the engine failed and this worker will be replaced: {engine_error}")
    if status == "failed" and not messages:
        errors = [f"page {p.page}: {p.error}" for p in pages if p.error]
        messages.append("no page could be processed: " + "; ".join(errors[:5]))
    if messages and status == "ok":
        status = "partial"
    return Verdict(
        status,
        " | ".join(messages) or None,
        refresh_worker=bool(engine_error),
        retry=bool(engine_error or store_error or manifest_error),
    )


class Worker:
    """Holds the started engine, the store and the CPU pool; runs jobs, several at once."""

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
        self.pool = pool or CpuPool(
            settings.render_processes, memory_limit_mb=settings.render_memory_mb
        )
        self.rendering = Rendering(
            self.pool, timeout_s=settings.render_timeout_s, decode_pixels=settings.decode_pixels
        )
        self.engine_slots = settings.max_concurrent_pages or engine.default_concurrency
        self.engine_gate = asyncio.Semaphore(self.engine_slots)
        # Rendered pages held at once, across jobs: those at the engine and a few ready to go.
        # A page takes its place before it renders and gives it back when it leaves the engine,
        # so memory follows the engine's size, not the number of pages jobs put in flight.
        self.rendered_slots = self.engine_slots + 2 * self.pool.size
        self.rendered_gate = asyncio.Semaphore(self.rendered_slots)
        self._prefixes: set[str] = set()  # result prefixes of the jobs running now
        # The CPU engine's models (page orientation, the second opinion) run in processes of
        # their own, one core each, started when first needed: spare cores beside the render
        # processes, never the event loop.
        self.cpu_models = CpuPool(settings.cpu_model_processes or max(1, host_cores() // 2))
        self._cpu_models_started = asyncio.Lock()

    # --- cold start -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the CPU pool and the engine; check the engine with a real page before any job."""
        t0 = time.perf_counter()
        if self._own_pool:
            await self.pool.start()
        await self.engine.start(warmup_page(self.budget()))
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

    def budget(self, job: JobInput | None = None) -> Budget:
        """The page budget: MAX_PIXELS, or less when the job asks. Never more: the engine was
        started with MAX_PIXELS and would scale a larger page down again."""
        top = self.settings.max_pixels
        if job is not None and (job.max_pixels or job.max_side):
            return Budget(min(job.max_pixels or top, top), job.max_side)
        return Budget(top)

    def limits(self) -> Limits:
        s = self.settings
        return Limits(
            max_bytes=s.max_download_bytes,
            max_job_bytes=s.max_job_bytes,
            timeout_s=s.download_timeout_s,
            fetch_timeout_s=s.fetch_timeout_s,
            allow_private_urls=s.allow_private_urls,
            max_image_pixels=s.max_image_pixels,
            max_pages=s.max_pages_per_job,
        )

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

    # --- one job --------------------------------------------------------------------------------

    async def run(
        self, job_id: str, raw_input: Any, progress: Progress | None = None
    ) -> dict[str, Any]:
        """Run one job; the result is JSON-ready. A failed job carries an `error` key."""
        try:
            job = JobInput.parse(raw_input, max_pages=self.settings.max_pages_per_job)
        except InputError as exc:
            return {"error": str(exc)}
        prefix = self.store.key_prefix + (job.output_prefix or job_id)
        if prefix in self._prefixes:
            return {
                "error": f"input.output_prefix: another job on this worker is writing {prefix!r} "
                "now; wait for it to finish or use another prefix"
            }
        self._prefixes.add(prefix)
        try:
            return await self._run(job_id, job, JobKeys(prefix), progress)
        finally:
            self._prefixes.discard(prefix)

    async def _run(
        self, job_id: str, job: JobInput, keys: JobKeys, progress: Progress | None
    ) -> dict[str, Any]:
        t0 = time.perf_counter()
        if job.json_schema is not None and not self.engine.facts.json_output:
            return {
                "error": f"input.json_schema: the {self.engine.facts.name} engine reads text and "
                "cannot answer JSON; run JSON jobs on the GPU engine (ENGINE=vllm or openai)"
            }
        prompt = resolve(
            job.prompt, job.custom_prompt, self.settings.default_prompt, job.json_schema
        )
        # the blank-page detector decides some texts too (empty ones)
        fingerprint = self.engine.fingerprint(prompt) | {"blank_detector": BLANK_DETECTOR}
        try:
            document = await load_document(
                job, self.budget(job), self.limits(), self.inputs, self.rendering
            )
        except InputError as exc:
            return {"error": str(exc)}
        loaded = time.perf_counter()

        state = _Job(
            job,
            keys,
            prompt,
            _digest(fingerprint),
            progress,
            len(document.pages),
            # a second reading of the page's text says nothing about JSON extracted from it
            second_opinion=job.json_schema is None
            and (
                self.settings.second_opinion if job.second_opinion is None else job.second_opinion
            ),
        )
        # By default a job may fill the engine and keep renders and uploads going beside it.
        job_gate = asyncio.Semaphore(self.settings.job_max_concurrent_pages or self.rendered_slots)

        async def bounded(ref: PageRef) -> PageReport:
            async with job_gate:
                return await self._page(ref, state)

        try:
            pages = await asyncio.gather(*(bounded(ref) for ref in document.pages))
        finally:
            document.close()
        recognized = time.perf_counter()

        def judge(manifest_error: str | None = None) -> Verdict:
            return verdict(
                pages,
                problems=document.problems,
                store_error=state.store_error,
                engine_error=state.engine_error or self.engine.failure,
                manifest_error=manifest_error,
            )

        first = judge()
        report = JobReport(
            job_id=job_id,
            status=first.status,
            error=first.error,
            store=self.store.kind,
            prefix=keys.prefix,
            manifest_key=keys.manifest,
            pages=sorted(pages, key=lambda p: p.page),
            totals=_totals(pages),
            timings={"load_s": round(loaded - t0, 3), "pages_s": round(recognized - loaded, 3)},
            engine=self.engine_facts(),
            fingerprint={**fingerprint, "id": state.fingerprint_id},
            notes=self._notes(job, prompt) + document.notes + _review_note(pages),
            errors=document.problems + [f"page {p.page}: {p.error}" for p in pages if p.error],
        )
        manifest_error = await self._write_manifest(report)
        final = judge(manifest_error)
        report.status, report.error = final.status, final.error
        if manifest_error:
            report.manifest_key = None
        report.timings["total_s"] = round(time.perf_counter() - t0, 3)
        return await self._result(report, final, job)

    # --- one page -------------------------------------------------------------------------------

    async def _page(self, ref: PageRef, job: _Job) -> PageReport:
        """Everything one page goes through; returns its report, built once at the end."""
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        image: PageImage | None = None
        rec: Recognition | None = None
        key = partial_key = text = None
        chars = 0
        reused = blank = False
        error: PageError | None = None
        second: asyncio.Task[str | Exception] | None = None
        turn: int | None = None
        opinion: Opinion | None = None
        try:
            job.check_alive(self.engine)
            page_key = job.keys.page(ref.number, "json" if job.prompt.schema else "md")
            stored = None
            async with self.rendered_gate:  # from rendering until the engine is done with it
                image = await ref.image()
                timings["render_s"] = _since(t0)
                if self.settings.auto_rotate and image.scanned and not image.blank:
                    t_turn = time.perf_counter()
                    image, turn = await self._upright(image, ref.number)
                    timings["orient_s"] = _since(t_turn)
                job.check_alive(self.engine)
                if not image.blank:
                    stored = await self._stored(page_key, image.sha256, job)
                    if stored is None:
                        if job.second_opinion:  # read beside the engine, not after it
                            second = asyncio.create_task(self._read_again(image))
                        rec = await self._recognize(image, job, timings)
            t_store = time.perf_counter()
            if image.blank:  # nothing to read: stored empty, without the engine
                record = PageRecord(image.sha256, job.fingerprint_id, 0)
                text, blank = ("null" if job.prompt.schema else ""), True  # nothing on the page
                key = await self._put(page_key, text, record, job)
            elif stored is not None:
                key, reused = page_key, True
                chars, text = stored
            else:
                assert rec is not None
                if not rec.ok:
                    chars = len(rec.text)
                    partial_key, unsaved = await self._put_partial(ref.number, rec, job)
                    raise PageError(
                        "engine", (rec.problem or f"stopped by {rec.finish_reason}") + unsaved
                    )
                record = PageRecord(image.sha256, job.fingerprint_id, len(rec.text))
                key = await self._put(page_key, rec.text, record, job)
                chars, text = len(rec.text), rec.text
            timings["store_s"] = _since(t_store)
            if second is not None and rec is not None and rec.ok:  # the text is safe: now judge
                t_second = time.perf_counter()
                opinion = Opinion.of(rec.text, await second, self.settings)
                timings["second_opinion_wait_s"] = _since(t_second)
        except PageError as exc:
            error = exc
        except Exception as exc:  # a bug must fail this page, not the job's other pages
            log.exception("page %s failed unexpectedly", ref.number)
            error = PageError("internal", f"internal error ({type(exc).__name__}); see the log")
        finally:
            if second is not None:
                second.cancel()  # done already, or no longer needed
        timings["total_s"] = _since(t0)
        report = PageReport(
            page=ref.number,
            source=ref.source,
            status="failed" if error else ("blank" if blank else "ok"),
            key=key,
            partial_key=partial_key,
            chars=chars,
            reused=reused,
            image_sha256=image.sha256 if image else None,
            width=image.width if image else None,
            height=image.height if image else None,
            finish_reason=rec.finish_reason if rec else None,
            attempts=rec.attempts if rec else 0,
            prompt_tokens=rec.prompt_tokens if rec else None,
            output_tokens=rec.output_tokens if rec else None,
            timings=timings,
            error=error.message if error else None,
            error_stage=error.stage if error else None,
            text=text if job.job.return_text and not error else None,
            rotated=turn,
            agreement=opinion.agreement if opinion else None,
            review=opinion.review if opinion else None,
            differences=opinion.differences if opinion else None,
        )
        job.done += 1
        if job.progress is not None:
            job.progress(PageDone(report, job.done, job.total))
        return report

    async def _stored(self, key: str, sha256: str, job: _Job) -> tuple[int, str | None] | None:
        """(characters, text if the job returns text) of the stored page, when it was made from
        the same pixels by the same engine; None when it must be recognized."""
        try:
            have = await self.store.record(key)
            if have is None or (have.image_sha256, have.fingerprint) != (
                sha256,
                job.fingerprint_id,
            ):
                return None
            return have.chars, (await self.store.read_text(key) if job.job.return_text else None)
        except StorageError as exc:
            job.store_error = str(exc)
            raise PageError("store", str(exc)) from None

    async def _on_cpu_models(self, fn: Callable[..., T], *args: Any) -> T:
        if not self.cpu_models.started:  # once; the lock only while it starts
            async with self._cpu_models_started:
                if not self.cpu_models.started:
                    await self.cpu_models.start()
        return await self.cpu_models.run(fn, *args, timeout_s=self.settings.render_timeout_s)

    async def _read_again(self, image: PageImage) -> str | Exception:
        """The CPU engine's reading of the page, for the second opinion (or why there is none)."""
        try:
            return await self._on_cpu_models(read_png, image.png)
        except (TaskTimeout, TaskFailed, PageError) as exc:
            return exc

    async def _upright(self, image: PageImage, number: int) -> tuple[PageImage, int | None]:
        """A scanned page turned upright, and the clockwise turn (None: it could not be told)."""
        try:
            turn, turned = await self._on_cpu_models(upright, image.png, image.scanned)
        except (TaskTimeout, TaskFailed, PageError) as exc:
            log.warning("page %s: orientation not checked (%s)", number, exc)
            return image, None
        return turned or image, turn

    async def _recognize(
        self, image: PageImage, job: _Job, timings: dict[str, float]
    ) -> Recognition:
        t_wait = time.perf_counter()
        async with self.engine_gate:
            job.check_alive(self.engine)
            timings["queue_s"] = _since(t_wait)
            t_engine = time.perf_counter()
            try:
                rec = await self.engine.recognize(image, job.prompt)
            except EngineError as exc:
                if exc.fatal:
                    job.engine_error = str(exc)
                raise PageError("engine", str(exc)) from None
            timings["engine_s"] = _since(t_engine)
        return rec

    async def _put(self, key: str, text: str, record: PageRecord | None, job: _Job) -> str:
        """Store a text; returns its key once it is written."""
        try:
            kind = JSON_TYPE if job.prompt.schema and record is not None else TEXT_TYPE
            await self.store.put(key, text.encode("utf-8"), kind, record)
        except StorageError as exc:
            job.store_error = str(exc)
            raise PageError("store", f"not stored: {exc}") from None
        return key

    async def _put_partial(
        self, number: int, rec: Recognition, job: _Job
    ) -> tuple[str | None, str]:
        """Keep the best partial text of a failed page apart; (its key, '') or (None, why not)."""
        if not rec.text:
            return None, ""
        try:
            return await self._put(job.keys.partial(number), rec.text, None, job), ""
        except PageError as exc:
            return None, f"; its partial text was not stored ({exc.message})"

    # --- the end of a job -----------------------------------------------------------------------

    async def _write_manifest(self, report: JobReport) -> str | None:
        manifest = report.model_dump(mode="json", exclude_none=True, exclude={"manifest_url"})
        for page in manifest["pages"]:
            page.pop("text", None)
            page.pop("url", None)
        t0 = time.perf_counter()
        try:
            await put_json(self.store, report.manifest_key or "", manifest)
        except StorageError as exc:
            return str(exc)
        report.timings["manifest_s"] = _since(t0)
        return None

    async def _result(self, report: JobReport, final: Verdict, job: JobInput) -> dict[str, Any]:
        if report.manifest_key and job.presign_urls:
            report.manifest_url = await self.store.presign(report.manifest_key)
            for page in report.pages:
                if page.key:
                    page.url = await self.store.presign(page.key)
        out = report.model_dump(mode="json", exclude_none=True)
        if final.refresh_worker:
            out["refresh_worker"] = True
        if final.retry:
            out["retry"] = True
        return out

    def _notes(self, job: JobInput, prompt: Prompt) -> list[str]:
        notes = []
        if job.max_pixels and job.max_pixels > self.settings.max_pixels:
            notes.append(
                f"max_pixels {job.max_pixels:,} is above this worker's MAX_PIXELS "
                f"({self.settings.max_pixels:,}), which the engine was started with; pages were "
                "rendered at MAX_PIXELS (raise it on the endpoint for larger pages)"
            )
        if not self.engine.facts.uses_prompt:
            notes.append(
                f"the {self.engine.facts.name} engine reads no prompt; "
                f"prompt {prompt.name!r} (version {prompt.version}) was not used"
            )
        return notes


def warmup_page(budget: Budget) -> PageImage:
    """A real page, rendered as a job's page would be, to warm and check the engine."""
    return pdf_page_image(samples.pdf_from_pages(samples.LEGAL_PAGES[:1]), 1, budget)


def _since(t0: float) -> float:
    return round(time.perf_counter() - t0, 4)


def _digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _review_note(pages: list[PageReport]) -> list[str]:
    flagged = [p.page for p in pages if p.review]
    if not flagged:
        return []
    return [f"second opinion: pages {format_ranges(flagged)} to review (see their `differences`)"]


def _totals(pages: list[PageReport]) -> dict[str, int]:
    return {
        "pages": len(pages),
        "ok": sum(p.status == "ok" for p in pages),
        "blank": sum(p.status == "blank" for p in pages),
        "failed": sum(p.status == "failed" for p in pages),
        "reused": sum(p.reused for p in pages),
        "review": sum(bool(p.review) for p in pages),
        "chars": sum(p.chars for p in pages if p.status == "ok"),
        "prompt_tokens": sum(p.prompt_tokens or 0 for p in pages),
        "output_tokens": sum(p.output_tokens or 0 for p in pages),
    }
