"""Fetch the page's file and render it within the page budget (in the render processes). A job
of images that asks for a searchable PDF keeps each rendered page in its spill folder: the
files are gone once rendered, and the PDF is made of the pages as they were read."""

from __future__ import annotations

import asyncio
import time

from ...errors import RenderTimeout
from ..state import PageWork


class FetchRender:
    async def run(self, page: PageWork) -> None:
        page.job.check()
        t0 = time.perf_counter()
        try:  # its render is called off once the job's pages mostly run past the limit
            page.image = await page.ref.image(page.job.check_render)
        except RenderTimeout:
            page.job.render_timeouts += 1
            raise
        page.job.rendered += 1
        page.time("render_s", t0)
        if page.job.keep_images is not None:
            path = page.job.keep_images / f"page-{page.ref.number:04d}.png"
            await asyncio.to_thread(path.write_bytes, page.image.png)
