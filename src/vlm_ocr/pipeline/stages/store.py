"""Store the page's text with the record of what decided it (its pixels, the fingerprint). A key
enters the page's report only once its write succeeded. A page the engine could not read well
on any attempt fails, and its best partial text is kept apart from the good pages; or, where the
model's family allows it and the PDF page has a text layer, that text is stored, flagged.

A page read as blocks has its figures and its blocks file written first and its text last: the
text's record counts them, so a reused text always has them beside it."""

from __future__ import annotations

import time

from ...errors import JobStop, PageError, StorageError
from ...storage import JSON_TYPE, PNG_TYPE, TEXT_TYPE, PageRecord, Store
from ..state import Edges, PageWork

EDGE_LINES = 3  # lines kept from the top and the bottom of a page for the running-head pass
# A running head is short: a journal's name, a chapter's title, "Page 3 of 12"; the longest,
# a download stamp, runs to about 100 characters. A longer line is the page's text.
EDGE_CHARS = 100


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
        layout = page.layout if page.fallback is None else None
        record = PageRecord(
            page.image.sha256,
            job.fingerprint_id,
            chars,
            blocks=len(layout.doc.blocks) if layout else 0,
            figures=len(layout.figures) if layout else 0,
        )
        if layout is not None:
            for n, figure in enumerate(layout.figures, 1):
                await self._put(job.keys.figure(page.ref.number, n), figure.png, PNG_TYPE, None)
            blocks = layout.doc.model_dump_json(exclude_none=True).encode()
            await self._put(job.keys.blocks(page.ref.number), blocks, JSON_TYPE, record)
        # a fallback is stored without a record: a job submitted again asks the model again
        kind = JSON_TYPE if job.json else TEXT_TYPE
        await self._put(key, text.encode("utf-8"), kind, None if page.fallback else record)
        page.key = key
        if not job.json and not page.blank and (layout is None or layout.across_pages):
            job.edges[page.ref.number] = edges_of(text)
        page.time("store_s", t0)

    async def _put(self, key: str, data: bytes, kind: str, record: PageRecord | None) -> None:
        try:
            await self.store.put(key, data, kind, record)
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
            await self._put(key, text.encode("utf-8"), TEXT_TYPE, None)
        except PageError as exc:
            why = exc.stop.message if exc.stop else exc.message
            return PageError("store", f"its partial text was not stored ({why})", stop=exc.stop)
        page.partial_key = key
        return None


def edges_of(text: str) -> Edges:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    short = [ln if len(ln) <= EDGE_CHARS else "" for ln in lines]  # "" never repeats
    return Edges(tuple(short[:EDGE_LINES]), tuple(short[-EDGE_LINES:]), len(short))
