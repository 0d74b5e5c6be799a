"""How far a pass of the bench (or its direct path) has come, told while it runs: pages done of
all, their pace, the time left and, where the engine's requests are seen, the requests in flight.

Pages are counted where the bench sees them end (the worker's own per-page progress, the direct
path's answers), not inside an engine, so every engine reports, the CPU engine too. A line
comes every `every_s` seconds, and at once when a page ends and none came in the last
`every_s`, so the first page always gives one: a run stopped at a time limit leaves its pace."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


class PassProgress:
    def __init__(
        self,
        label: str,
        total: int,
        every_s: float,
        in_flight: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.label, self.total, self.every_s = label, total, every_s
        self.in_flight = in_flight
        self.t0 = time.perf_counter()
        self.done = 0
        self.said_at: float | None = None
        self._ticker = asyncio.get_running_loop().create_task(self._tick()) if every_s > 0 else None

    def page_done(self, *_: Any) -> None:
        """One page ended (stored or failed): the worker's `progress` callback, or the direct
        path's answer."""
        self.done += 1
        if self.every_s > 0 and (
            self.said_at is None or time.perf_counter() - self.said_at >= self.every_s
        ):
            self.say()

    def _last(self) -> float:
        return self.t0 if self.said_at is None else self.said_at

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(max(0.0, self._last() + self.every_s - time.perf_counter()))
            if time.perf_counter() - self._last() >= self.every_s:
                self.say()

    def say(self) -> None:
        self.said_at = time.perf_counter()
        print(self.line(self.said_at), flush=True)

    def line(self, now: float) -> str:
        elapsed = now - self.t0
        pace = self.done / elapsed if self.done and elapsed > 0 else 0.0
        if pace:
            left = (self.total - self.done) / pace
            rate = f"{pace:.2f} a second, about {left:.0f} s left"
        else:
            rate = "none done yet"
        flying = self.in_flight()
        tail = f", {flying} requests in flight" if flying is not None else ""
        return (
            f"progress, {self.label}: {self.done} of {self.total} pages at {elapsed:.1f} s "
            f"({rate}){tail}"
        )

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
