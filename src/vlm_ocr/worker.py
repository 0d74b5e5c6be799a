"""The job pipeline, top to bottom.

    job input ─► JobInput ─► Document (PageRefs) ─► per page, concurrently:
        render ─► stored result for this image + fingerprint? reuse it
               ─► engine.recognize ─► store page text
    ─► manifest ─► JobReport

Every page is independent: a page that fails is reported with its reason and the others go on.
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
from typing import Any

from . import samples
from .engines.base import Engine
from .errors import EngineError, InputError, PageError, StorageError
from .prompts import Prompt, resolve
from .render import Budget, PageImage, open_pdf
from .schema import JobInput, JobReport, PageReport
from .settings import Settings
from .sources import Limits, PageRef, load_document
from .storage import TEXT_TYPE, JobKeys, Store, put_json

log = logging.getLogger(__name__)
Progress = Callable[[dict[str, Any]], None]


@dataclass
class _JobState:
    """What one job shares between its page tasks."""

    job: JobInput
    keys: JobKeys
    prompt: Prompt
    fingerprint_id: str
    progress: Progress | None
    total: int
    done: int = 0
    storage_error: str | None = None
    engine_error: str | None = None


class Worker:
    """Holds the started engine and the store; runs jobs, several at once."""

    def __init__(self, settings: Settings, engine: Engine, store: Store) -> None:
        self.settings = settings
        self.engine = engine
        self.store = store
        size = settings.max_concurrent_pages or engine.default_concurrency
        self.engine_gate = asyncio.Semaphore(size)
        self.engine_slots = size

    # --- cold start -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the engine and check it with a real rendered page before any job."""
        t0 = time.perf_counter()
        await self.engine.start(warmup_page(self.budget()))
        log.info(
            "engine ready in %.1f s: %s",
            time.perf_counter() - t0,
            json.dumps(self.engine_facts(), ensure_ascii=False),
        )

    async def close(self) -> None:
        await self.engine.close()

    def budget(self, job: JobInput | None = None) -> Budget:
        if job is not None and (job.max_pixels or job.max_side):
            return Budget(job.max_pixels or self.settings.max_pixels, job.max_side)
        return Budget(self.settings.max_pixels)

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
        t0 = time.perf_counter()
        try:
            job = JobInput.parse(raw_input, max_pages=self.settings.max_pages_per_job)
        except InputError as exc:
            return {"error": str(exc)}
        prompt = resolve(job.prompt, job.custom_prompt, self.settings.default_prompt)
        fingerprint = self.engine.fingerprint(prompt)
        keys = JobKeys(self.store.key_prefix + (job.output_prefix or job_id))

        try:
            document = await load_document(job, self.budget(job), self._limits(), self.store)
        except InputError as exc:
            return {"error": str(exc)}
        loaded = time.perf_counter()

        state = _JobState(
            job=job,
            keys=keys,
            prompt=prompt,
            fingerprint_id=_digest(fingerprint),
            progress=progress,
            total=len(document.pages),
        )
        job_gate = asyncio.Semaphore(self.settings.job_max_concurrent_pages)

        async def bounded(ref: PageRef) -> PageReport:
            async with job_gate:
                return await self._page(ref, state)

        try:
            pages = await asyncio.gather(*(bounded(ref) for ref in document.pages))
        finally:
            document.close()
        recognized = time.perf_counter()

        report = JobReport(
            job_id=job_id,
            status=_status(pages),
            store=self.store.kind,
            prefix=keys.prefix,
            manifest_key=keys.manifest,
            pages=sorted(pages, key=lambda p: p.page),
            totals=_totals(pages),
            timings={},
            engine=self.engine_facts(),
            fingerprint={**fingerprint, "id": state.fingerprint_id},
            notes=self._notes(job, prompt),
            errors=[f"page {p.page}: {p.error}" for p in pages if p.error],
        )
        manifest_error = await self._write_manifest(report, loaded - t0, recognized - loaded)
        report.timings["total_s"] = round(time.perf_counter() - t0, 3)
        return await self._result(report, state, manifest_error)

    def _limits(self) -> Limits:
        s = self.settings
        return Limits(
            max_bytes=s.max_download_bytes,
            timeout_s=s.download_timeout_s,
            allow_private_urls=s.allow_private_urls,
            max_image_pixels=s.max_image_pixels,
            max_pages=s.max_pages_per_job,
        )

    # --- one page -------------------------------------------------------------------------------

    async def _page(self, ref: PageRef, st: _JobState) -> PageReport:
        report = PageReport(page=ref.number, source=ref.source, status="failed")
        t0 = time.perf_counter()
        try:
            if ref.error is not None:
                raise ref.error
            assert ref.render is not None
            image = await asyncio.to_thread(ref.render)
            report.image_sha256, report.width, report.height = (
                image.sha256,
                image.width,
                image.height,
            )
            report.timings["render_s"] = round(time.perf_counter() - t0, 4)
            self._check_job_alive(st)
            if not await self._reuse(report, st):
                await self._recognize_and_store(image, report, st)
        except PageError as exc:
            report.error, report.error_stage = exc.message, exc.stage
        except Exception as exc:  # a bug must fail this page, not the job's other pages
            log.exception("page %s failed unexpectedly", ref.number)
            report.error, report.error_stage = f"unexpected error: {exc!r}", "internal"
        report.timings["total_s"] = round(time.perf_counter() - t0, 4)
        st.done += 1
        if st.progress is not None:
            st.progress(
                {"done": st.done, "total": st.total, "page": ref.number, "status": report.status}
            )
        return report

    def _check_job_alive(self, st: _JobState) -> None:
        if st.storage_error:
            raise PageError(
                "store", f"not processed: the store failed earlier ({st.storage_error})"
            )
        failure = self.engine.failure
        if failure:
            raise PageError("engine", f"not processed: the engine is down ({failure})")

    async def _reuse(self, report: PageReport, st: _JobState) -> bool:
        """Reuse the stored text when it was made from the same pixels by the same engine."""
        key = st.keys.page(report.page)
        try:
            meta = await self.store.head(key)
            if not meta or meta.get("image-sha256") != report.image_sha256:
                return False
            if meta.get("fingerprint") != st.fingerprint_id:
                return False
            if st.job.return_text:
                report.text = await self.store.read_text(key)
        except StorageError as exc:
            st.storage_error = str(exc)
            raise PageError("store", str(exc)) from None
        report.status, report.key, report.reused = "ok", key, True
        report.chars = int(meta.get("chars", 0))
        return True

    async def _recognize_and_store(
        self, image: PageImage, report: PageReport, st: _JobState
    ) -> None:
        t_wait = time.perf_counter()
        async with self.engine_gate:
            self._check_job_alive(st)
            t_engine = time.perf_counter()
            try:
                rec = await self.engine.recognize(image, st.prompt)
            except EngineError as exc:
                if exc.fatal:
                    st.engine_error = str(exc)
                raise PageError("engine", str(exc)) from None
        report.timings["queue_s"] = round(t_engine - t_wait, 4)
        report.timings["engine_s"] = round(time.perf_counter() - t_engine, 4)
        report.finish_reason, report.attempts = rec.finish_reason, rec.attempts
        report.prompt_tokens, report.output_tokens = rec.prompt_tokens, rec.output_tokens

        t_store = time.perf_counter()
        if rec.ok:
            key = st.keys.page(report.page)
            meta = {
                "image-sha256": image.sha256,
                "fingerprint": st.fingerprint_id,
                "chars": str(len(rec.text)),
            }
            await self._put(key, rec.text, meta, st)
            report.status, report.key, report.chars = "ok", key, len(rec.text)
            if st.job.return_text:
                report.text = rec.text
        else:
            if rec.text:
                report.partial_key = st.keys.partial(report.page)
                await self._put(report.partial_key, rec.text, None, st)
            report.chars = len(rec.text)
            report.timings["store_s"] = round(time.perf_counter() - t_store, 4)
            raise PageError("engine", rec.problem or f"stopped by {rec.finish_reason}")
        report.timings["store_s"] = round(time.perf_counter() - t_store, 4)

    async def _put(self, key: str, text: str, meta: dict[str, str] | None, st: _JobState) -> None:
        try:
            await self.store.put(key, text.encode("utf-8"), TEXT_TYPE, meta)
        except StorageError as exc:
            st.storage_error = str(exc)
            raise PageError("store", f"not stored: {exc}") from None

    # --- the end of a job -----------------------------------------------------------------------

    async def _write_manifest(self, report: JobReport, load_s: float, pages_s: float) -> str | None:
        report.timings.update(load_s=round(load_s, 3), pages_s=round(pages_s, 3))
        manifest = report.model_dump(mode="json", exclude_none=True, exclude={"manifest_url"})
        for page in manifest["pages"]:
            page.pop("text", None)
            page.pop("url", None)
        t0 = time.perf_counter()
        try:
            await put_json(self.store, report.manifest_key or "", manifest)
        except StorageError as exc:
            report.manifest_key = None
            return str(exc)
        report.timings["manifest_s"] = round(time.perf_counter() - t0, 3)
        return None

    async def _result(
        self, report: JobReport, st: _JobState, manifest_error: str | None
    ) -> dict[str, Any]:
        if report.manifest_key and st.job.presign_urls:
            report.manifest_url = await self.store.presign(report.manifest_key)
            for page in report.pages:
                if page.key:
                    page.url = await self.store.presign(page.key)
        out = report.model_dump(mode="json", exclude_none=True)
        problems = []
        if st.storage_error or manifest_error:
            # A page is "ok" only once its text is stored, so the two lists follow from the status.
            stored = [p.page for p in report.pages if p.status == "ok"]
            not_stored = [p.page for p in report.pages if p.status != "ok"]
            problems.append(
                f"the store failed: {st.storage_error or manifest_error}. "
                f"Stored pages: {_ranges(stored) or 'none'}; not stored: {_ranges(not_stored)}"
                + ("" if manifest_error is None else "; the manifest was not written")
            )
        engine_error = st.engine_error or self.engine.failure
        if engine_error:
            problems.append(f"the engine failed and this worker will be replaced: {engine_error}")
            out["refresh_worker"] = True
        if report.status == "failed" and not problems:
            problems.append("no page could be processed: " + "; ".join(report.errors[:5]))
        if problems:
            out["status"] = "failed" if report.status == "failed" else "partial"
            out["error"] = " | ".join(problems)
        return out

    def _notes(self, job: JobInput, prompt: Prompt) -> list[str]:
        if self.engine.facts.uses_prompt:
            return []
        return [
            f"the {self.engine.facts.name} engine reads no prompt; "
            f"prompt {prompt.name!r} (version {prompt.version}) was not used"
        ]


def warmup_page(budget: Budget) -> PageImage:
    """A real page, rendered as a job's page would be, to warm and check the engine."""
    pdf = open_pdf(samples.pdf_from_pages(samples.LEGAL_PAGES[:1]))
    try:
        return pdf.render(1, budget)
    finally:
        pdf.close()


def _digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _status(pages: list[PageReport]) -> str:
    ok = sum(p.status == "ok" for p in pages)
    return "ok" if ok == len(pages) else ("failed" if ok == 0 else "partial")


def _totals(pages: list[PageReport]) -> dict[str, int]:
    return {
        "pages": len(pages),
        "ok": sum(p.status == "ok" for p in pages),
        "failed": sum(p.status == "failed" for p in pages),
        "reused": sum(p.reused for p in pages),
        "chars": sum(p.chars for p in pages if p.status == "ok"),
        "prompt_tokens": sum(p.prompt_tokens or 0 for p in pages),
        "output_tokens": sum(p.output_tokens or 0 for p in pages),
    }


def _ranges(numbers: list[int]) -> str:
    """[1,2,3,5] -> '1-3,5'."""
    out: list[str] = []
    for n in numbers:
        if out and n == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ",".join(out)
