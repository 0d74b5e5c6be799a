"""A second reading of the page by the CPU engine, beside the GPU engine's, and how far the two
agree: pages that disagree, or differ in a critical token (an article number, a number, a modal
word), are flagged for review. The reading is stored beside the page's text, so a person can set
the two side by side (`vlm-ocr review`). It never fails a page; a missing reading is reported."""

from __future__ import annotations

import asyncio
import logging
import time

from ...errors import StorageError
from ...storage import PLAIN_TYPE, Store
from ..compare import agree
from ..cpu_models import CpuModels
from ..state import Opinion, PageWork

log = logging.getLogger(__name__)


class SecondOpinion:
    def __init__(self, models: CpuModels, store: Store, *, min_agreement: float) -> None:
        self.models = models
        self.store = store
        self.min_agreement = min_agreement

    def begin(self, page: PageWork) -> None:
        """Start the second reading beside the engine's, not after it."""
        if page.job.second_opinion and page.needs_engine and page.image is not None:
            page.second_reading = asyncio.create_task(self.models.read(page.image))

    async def judge(self, page: PageWork) -> None:
        """Once the engine's text is stored: compare the two readings, and keep the second."""
        rec, reading = page.recognition, page.second_reading
        if reading is None or rec is None or not rec.ok:
            return
        t0 = time.perf_counter()
        other = await reading
        page.time("second_opinion_wait_s", t0)
        if isinstance(other, Exception):
            page.opinion = Opinion(None, True, [f"no second opinion: {other}"])
            return
        # An engine that labels blocks leaves headers and footers out of its text: so does the
        # second reading it is compared with.
        labelled = rec.reading is not None and rec.reading.labelled and bool(rec.reading.blocks)
        compared = other.body if labelled else other.text
        found = agree(rec.text, compared)
        page.opinion = Opinion(
            found.agreement,
            found.needs_review(self.min_agreement),
            [str(d) for d in found.differences],
            await self._keep(page, compared),
        )

    async def _keep(self, page: PageWork, text: str) -> str | None:
        """Store the CPU engine's reading; its key, or None when the store refused it (the
        verdict stands without it, and the next write of the job meets the store's failure)."""
        key = page.job.keys.second_reading(page.ref.number)
        try:
            await self.store.put(key, text.encode("utf-8"), PLAIN_TYPE)
        except StorageError as exc:
            log.warning("page %s: the second reading was not stored (%s)", page.ref.number, exc)
            return None
        return key

    @staticmethod
    def cancel(page: PageWork) -> None:
        if page.second_reading is not None:
            page.second_reading.cancel()  # done already, or no longer needed
