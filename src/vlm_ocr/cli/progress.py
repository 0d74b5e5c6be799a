"""Progress over pages on the command line, from the pipeline's page outcomes (each `PageItem` as
a page is stored or fails), so it is the same for every engine: pages done of all, the pages the
engine is reading now, the pace and the time left. On a terminal, one live line, redrawn as pages
finish and every second between; elsewhere (a log file, a pipe), a line at least every `every_s`
seconds while pages are read (`heartbeat`), so a long run leaves its pace behind without flooding
the log, and a slow page still shows the run is alive. The pace counts from the engine's being
ready (`ready`): its start is no page's time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TextIO

from ..contract import PageItem

if TYPE_CHECKING:
    from ..engines.base import Engine, Recognition
    from ..images import PageImage
    from ..prompts import Prompt

REDRAW_S = 0.1  # a live line is redrawn at most this often as pages finish (the last page always)
LIVE_TICK_S = 1.0  # and this often between pages, so its seconds and pages in hand stay true
CLEAR = "\r\x1b[K"  # back to the start of the line, and erase it


class PageProgress:
    def __init__(
        self,
        total: int,
        stream: TextIO,
        *,
        live: bool,
        every_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.stream = stream
        self.live = live
        self.every_s = every_s
        self.clock = clock
        self.started = self.last = clock()
        self.done = 0
        self.failed = 0
        #: pages at the engine now (`CountingEngine` keeps it)
        self.reading = 0
        self.name = ""
        self._drawn = False

    def ready(self) -> None:
        """The engine is ready: the pace and the time left count from now."""
        self.started = self.last = self.clock()

    def file(self, name: str) -> None:
        """The file whose pages come next (a live line shows it at once)."""
        self.name = name
        if self.live:
            self._draw(self.clock())

    def __call__(self, item: PageItem) -> None:
        """One page's outcome (the worker's progress callback)."""
        self.done += 1
        self.failed += item.page.status == "failed"
        now = self.clock()
        if self.live:
            if now - self.last >= REDRAW_S or self.done >= self.total:
                self._draw(now)
        elif now - self.last >= self.every_s:
            self._write(now)

    def due(self) -> float:
        """Seconds until the next line is due, whether or not a page finishes meanwhile."""
        every = LIVE_TICK_S if self.live else self.every_s
        return max(0.0, self.last + every - self.clock())

    def tick(self) -> None:
        """The line again if it is due (the timer's call, between pages)."""
        now = self.clock()
        if self.live:
            if now - self.last >= LIVE_TICK_S:
                self._draw(now)
        elif now - self.last >= self.every_s:
            self._write(now)

    @property
    def stored(self) -> int:
        """Pages stored so far (ok or blank), over all the files."""
        return self.done - self.failed

    def _write(self, now: float) -> None:
        self.stream.write(f"vlm-ocr run: {self.line(now)}\n")
        self.stream.flush()
        self.last = now

    def _draw(self, now: float) -> None:
        self.stream.write(CLEAR + self.line(now))
        self.stream.flush()
        self.last, self._drawn = now, True

    def clear(self) -> None:
        """Take the live line away (before other output on the terminal)."""
        if self._drawn:
            self.stream.write(CLEAR)
            self.stream.flush()
            self._drawn = False

    def line(self, now: float) -> str:
        total = max(self.total, self.done)
        parts = [f"{self.done}/{total} pages ({100 * self.done // max(total, 1)} %)"]
        if self.failed:
            parts.append(f"{self.failed} failed")
        if self.reading:
            parts.append(f"{self.reading} reading")
        elapsed = now - self.started
        if self.done and elapsed > 0:
            pace = self.done / elapsed
            parts.append(f"{pace:.2f} pages/s")
            if self.done >= total:
                parts.append(f"all in {duration(elapsed)}")
            else:
                parts.append(f"{duration((total - self.done) / pace)} left")
        elif elapsed >= 0.5:  # no pace before a page is done: how long it has been at it
            parts.append(f"{duration(elapsed)} so far")
        return ", ".join(parts) + (f" ({self.name})" if self.name else "")


async def heartbeat(
    progress: PageProgress, sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
) -> None:
    """The line on a timer too (until cancelled): pages finish when they finish, and a page
    that takes minutes must not leave the log silent that long."""
    while True:
        await sleep(progress.due())
        progress.tick()


class CountingEngine:
    """The engine as the worker sees it, counting the pages it is reading now for the progress
    line; everything else is the engine's own."""

    def __init__(self, engine: Engine, progress: PageProgress) -> None:
        self._engine = engine
        self._progress = progress

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def recognize(self, page: PageImage, prompt: Prompt) -> Recognition:
        self._progress.reading += 1
        try:
            return await self._engine.recognize(page, prompt)
        finally:
            self._progress.reading -= 1


def duration(seconds: float) -> str:
    """12 s, 3 min 5 s, 2 h 4 min."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"
