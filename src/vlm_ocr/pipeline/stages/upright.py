"""Turn a page upright when it lies sideways or upside down (`AUTO_ROTATE`): a scan as the CPU
models see it, a PDF page with a text layer as its lines run (`PageImage.text_turn`)."""

from __future__ import annotations

import time

from ..cpu_models import CpuModels
from ..rendering import Rendering
from ..state import PageWork


class Upright:
    def __init__(self, models: CpuModels, rendering: Rendering, *, enabled: bool) -> None:
        self.models = models
        self.rendering = rendering
        self.enabled = enabled

    async def run(self, page: PageWork) -> None:
        image = page.image
        if not self.enabled or image is None or image.blank:
            return
        t0 = time.perf_counter()
        if image.scanned:
            page.image, page.turn = await self.models.upright(image, page.ref.number)
        elif image.text_turn:  # its text says which way up it is: turned in a render process
            page.image = await self.rendering.turn(image, image.text_turn)
            page.turn = image.text_turn
        else:
            return
        page.time("orient_s", t0)
