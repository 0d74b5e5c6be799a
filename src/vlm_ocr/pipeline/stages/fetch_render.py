"""Fetch the page's file and render it within the page budget (in the render processes)."""

from __future__ import annotations

import time

from ..state import PageWork


class FetchRender:
    async def run(self, page: PageWork) -> None:
        page.job.check()
        t0 = time.perf_counter()
        page.image = await page.ref.image()
        page.time("render_s", t0)
