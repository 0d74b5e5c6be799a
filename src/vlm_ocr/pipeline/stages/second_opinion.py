"""A second reading of the page by the CPU engine, beside the GPU engine's, and how far the two
agree: pages that disagree, or differ in a critical token (an article number, a number, a modal
word), are flagged for review. It never fails a page; a missing reading is reported."""

from __future__ import annotations

import asyncio
import time

from ..compare import agree
from ..cpu_models import CpuModels
from ..state import Opinion, PageWork


class SecondOpinion:
    def __init__(self, models: CpuModels, *, min_agreement: float) -> None:
        self.models = models
        self.min_agreement = min_agreement

    def begin(self, page: PageWork) -> None:
        """Start the second reading beside the engine's, not after it."""
        if page.job.second_opinion and page.needs_engine and page.image is not None:
            page.second_reading = asyncio.create_task(self.models.read(page.image))

    async def judge(self, page: PageWork) -> None:
        """Once the engine's text is stored: compare the two readings."""
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
        found = agree(rec.text, other.body if labelled else other.text)
        page.opinion = Opinion(
            found.agreement,
            found.needs_review(self.min_agreement),
            [str(d) for d in found.differences],
        )

    @staticmethod
    def cancel(page: PageWork) -> None:
        if page.second_reading is not None:
            page.second_reading.cancel()  # done already, or no longer needed
