"""The worker's way to turn files into pages: every decode and render in the render processes
(the CPU pool) under `RENDER_TIMEOUT_S`, and at most `DECODE_PIXELS` source pixels being decoded
at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..blocks import Box
from ..errors import PageError, RenderTimeout
from ..images import Budget, PageImage
from ..settings import RenderSettings
from . import render
from .cpu_pool import CpuPool, TaskFailed, TaskTimeout

T = TypeVar("T")
#: asked once a render process is free for a page; raises when the page is no longer wanted
Ready = Callable[[], None] | None


def apart(fn: Callable[..., T], *args: object, settings: RenderSettings) -> T:
    """fn(*args) in a render process of its own, under RENDER_TIMEOUT_S and the render
    processes' memory limit: for a look at a job's file before the worker (and its pool) has
    started, so that no crafted file stalls or swells the main process. PageError as there."""

    async def run() -> T:
        pool = CpuPool(1, memory_limit_mb=settings.render_memory_mb)
        await pool.start()
        try:
            return await Rendering(pool, settings)._call(fn, *args)
        finally:
            await pool.close()

    return asyncio.run(run())


class Rendering:
    """The worker's way to turn files into pages: the CPU pool, a deadline per page, and a
    budget of source pixels decoded at once (a 50 MP image takes 200 MB while it decodes)."""

    def __init__(self, pool: CpuPool, settings: RenderSettings) -> None:
        self.pool = pool
        self.timeout_s = settings.render_timeout_s
        self.max_image_pixels = settings.max_image_pixels
        self._decode_pixels = settings.decode_pixels
        self._pixels_free = settings.decode_pixels
        self._freed = asyncio.Condition()

    async def _call(self, fn: Callable[..., T], *args: object, ready: Ready = None) -> T:
        try:
            return await self.pool.run(fn, *args, timeout_s=self.timeout_s, ready=ready)
        except TaskTimeout as exc:
            raise RenderTimeout(f"rendering was stopped: {exc} (RENDER_TIMEOUT_S)") from None
        except TaskFailed as exc:
            raise PageError("render", f"rendering failed: {exc}") from None

    async def turn(self, image: PageImage, clockwise: int) -> PageImage:
        return await self._call(render.turn_page, image, clockwise)

    async def crop(self, image: PageImage, boxes: list[Box]) -> list[bytes | None]:
        return await self._call(render.crop_figures, image.png, boxes)

    async def pdf_info(self, path: Path) -> render.PdfInfo:
        return await self._call(render.open_document, str(path), self.max_image_pixels)

    async def pdf_page(
        self, path: Path, number: int, budget: Budget, ready: Ready = None
    ) -> PageImage:
        return await self._call(render.render_pdf_page, str(path), number, budget, ready=ready)

    async def image(self, path: Path, budget: Budget, ready: Ready = None) -> PageImage:
        # its header read in a render process too: a crafted one (a TIFF declaring millions of
        # strips for a few pixels) costs memory and time there, under that process's limits
        pixels = await self._call(render.image_pixels, str(path), ready=ready)
        share = min(max(pixels, 1), self._decode_pixels)
        async with self._freed:
            await self._freed.wait_for(lambda: self._pixels_free >= share)
            self._pixels_free -= share
        try:
            return await self._call(
                render.render_image, str(path), budget, self.max_image_pixels, ready=ready
            )
        finally:
            async with self._freed:
                self._pixels_free += share
                self._freed.notify_all()
