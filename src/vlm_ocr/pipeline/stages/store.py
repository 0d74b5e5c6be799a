"""Store the page's text with the record of what decided it (its pixels, the fingerprint). A key
enters the page's report only once its write succeeded. A page the engine could not read well
on any attempt fails, and its best partial text is kept apart from the good pages; or, where the
model's family allows it and the PDF page has a text layer, that text is stored, flagged."""

from __future__ import annotations

import time

from ...errors import JobStop, PageError, StorageError
from ...storage import JSON_TYPE, TEXT_TYPE, PageRecord, Store
from ..state import PageWork


class StoreText:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def run(self, page: PageWork) -> None:
        if page.stored is not None or page.image is None:
            return  # reused: it is stored already
        t0 = time.perf_counter()
        job, rec = page.job, page.recognition
        key = job.keys.page(page.ref.number, "json" if job.json else "md")
        if rec is not None and not rec.ok and rec.fallback and page.image.text_layer:
            # as olmOCR's pipeline does: the PDF's own text, flagged, rather than no text
            page.fallback = rec.problem or f"stopped by {rec.finish_reason}"
        elif rec is not None and not rec.ok:
            problem = rec.problem or f"stopped by {rec.finish_reason}"
            unsaved = await self._keep_partial(page, rec.text)
            if unsaved is None:
                raise PageError("engine", problem)
            # the page failed for its own reason; the store's failure stops the job
            raise PageError("engine", f"{problem}; {unsaved.message}", stop=unsaved.stop)
        chars, text = page.text()
        assert text is not None
        # a fallback is stored without a record: a job submitted again asks the model again
        record = None if page.fallback else PageRecord(page.image.sha256, job.fingerprint_id, chars)
        await self._put(key, text, JSON_TYPE if job.json else TEXT_TYPE, record)
        page.key = key
        page.time("store_s", t0)

    async def _put(self, key: str, text: str, kind: str, record: PageRecord | None) -> None:
        try:
            await self.store.put(key, text.encode("utf-8"), kind, record)
        except StorageError as exc:
            raise PageError(
                "store", f"not stored: {exc}", stop=JobStop("store", str(exc))
            ) from None

    async def _keep_partial(self, page: PageWork, text: str) -> PageError | None:
        """Store the partial text apart; None once stored (or when there is none), else why it
        was not."""
        if not text:
            return None
        key = page.job.keys.partial(page.ref.number)
        try:
            await self._put(key, text, TEXT_TYPE, None)
        except PageError as exc:
            why = exc.stop.message if exc.stop else exc.message
            return PageError("store", f"its partial text was not stored ({why})", stop=exc.stop)
        page.partial_key = key
        return None
