"""The CPU engine's models beside the GPU engine: which way up a scan is, and a second reading
(its layout model too, unless CPU_LAYOUT is off).

They run in processes of their own (a `CpuPool`), one core each, started when a page first needs
them: spare cores beside the render processes, never the event loop. Each call has the render
deadline; a model that fails or runs over is reported, and the page goes on without it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from ..engines.gpu import host_cores
from ..engines.rapidocr import SecondReading, read_png
from ..errors import PageError
from ..images import PageImage
from .cpu_pool import CpuPool, TaskFailed, TaskTimeout
from .orientation import upright

log = logging.getLogger(__name__)
T = TypeVar("T")


class CpuModels:
    def __init__(self, processes: int, *, timeout_s: float, layout: bool = True) -> None:
        self.pool = CpuPool(processes or max(1, host_cores() // 2))
        self.timeout_s = timeout_s
        self.layout = layout
        self._starting = asyncio.Lock()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if not self.pool.started:  # once; the lock only while it starts
            async with self._starting:
                if not self.pool.started:
                    await self.pool.start()
        return await self.pool.run(fn, *args, timeout_s=self.timeout_s)

    async def read(self, image: PageImage) -> SecondReading | Exception:
        """The CPU engine's reading of the page (the second opinion), or why there is none."""
        try:
            return await self._run(read_png, image.png, self.layout)
        except (TaskTimeout, TaskFailed, PageError) as exc:
            return exc

    async def upright(self, image: PageImage, number: int) -> tuple[PageImage, int | None]:
        """A scanned page turned upright, and the clockwise turn (None: it could not be told)."""
        try:
            turn, turned = await self._run(upright, image)
        except (TaskTimeout, TaskFailed, PageError) as exc:
            log.warning("page %s: orientation not checked (%s)", number, exc)
            return image, None
        return turned or image, turn

    async def close(self) -> None:
        await self.pool.close()

    def terminate(self) -> None:
        self.pool.terminate()
