"""Have the engine read the page, through the gate all jobs' pages share (so concurrent jobs
keep the engine batched, never above what it takes). A model that says the page lies turned
(olmOCR's rotation hint) gets it turned and reads it again, three turns at most."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from ...engines.base import Engine, Recognition
from ...errors import EngineError, JobStop, PageError
from ...images import PageImage
from ..rendering import Rendering
from ..state import PageWork

MAX_TURNS = 3


class Recognize:
    def __init__(self, engine: Engine, gate: asyncio.Semaphore, rendering: Rendering) -> None:
        self.engine = engine
        self.gate = gate
        self.rendering = rendering

    async def run(self, page: PageWork) -> None:
        if not page.needs_engine:
            return
        assert page.image is not None
        t_wait = time.perf_counter()
        image = page.image
        rec = await self._read(page, image, t_wait)
        turned = 0
        for _ in range(MAX_TURNS):
            turn = rec.reading.turn if rec.ok and rec.reading is not None else None
            if not turn:
                break
            image = await self.rendering.turn(image, turn)
            turned = (turned + turn) % 360
            rec = combined(rec, await self._read(page, image, time.perf_counter()))
        page.recognition, page.read_image = rec, image
        if turned:
            page.turn = ((page.turn or 0) + turned) % 360

    async def _read(self, page: PageWork, image: PageImage, t_wait: float) -> Recognition:
        async with self.gate:
            page.job.check()
            page.timings["queue_s"] = page.timings.get("queue_s", 0) + _since(t_wait)
            t0 = time.perf_counter()
            try:
                rec = await self.engine.recognize(image, page.job.prompt)
            except EngineError as exc:
                page.tries += exc.tries
                stop = JobStop("engine", str(exc)) if exc.fatal else None
                raise PageError("engine", str(exc), stop=stop) from None
            page.tries += rec.tries
            page.timings["engine_s"] = page.timings.get("engine_s", 0) + _since(t0)
        return rec


def combined(before: Recognition, after: Recognition) -> Recognition:
    """The page read again, counting what its earlier reading cost."""
    return dataclasses.replace(
        after,
        attempts=before.attempts + after.attempts,
        output_tokens=(before.output_tokens or 0) + (after.output_tokens or 0),
        seconds=before.seconds + after.seconds,
    )


def _since(t0: float) -> float:
    return round(time.perf_counter() - t0, 4)
