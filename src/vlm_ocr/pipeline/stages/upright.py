"""Turn a scanned page upright when it lies sideways or upside down (`AUTO_ROTATE`)."""

from __future__ import annotations

import time

from ..cpu_models import CpuModels
from ..state import PageWork


class Upright:
    def __init__(self, models: CpuModels, *, enabled: bool) -> None:
        self.models = models
        self.enabled = enabled

    async def run(self, page: PageWork) -> None:
        image = page.image
        # Only scans can lie turned: a PDF page with a text layer is laid out as printed.
        if not self.enabled or image is None or not image.scanned or image.blank:
            return
        t0 = time.perf_counter()
        page.image, page.turn = await self.models.upright(image, page.ref.number)
        page.time("orient_s", t0)
