"""Progress over pages on the command line, from the pipeline's page outcomes (each `PageItem` as
a page is stored or fails), so it is the same for every engine: pages done of all, the pace and
the time left. On a terminal, one live line redrawn as pages finish; elsewhere (a log file, a
pipe), one line every `every_s` seconds, so a long run leaves its pace behind without flooding
the log."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from ..contract import PageItem

REDRAW_S = 0.1  # a live line is redrawn at most this often (the last page always)
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
        self.name = ""
        self._drawn = False

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
            self.stream.write(f"vlm-ocr run: {self.line(now)}\n")
            self.stream.flush()
            self.last = now

    @property
    def stored(self) -> int:
        """Pages stored so far (ok or blank), over all the files."""
        return self.done - self.failed

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
        elapsed = now - self.started
        if self.done and elapsed > 0:
            pace = self.done / elapsed
            parts.append(f"{pace:.2f} pages/s")
            if self.done >= total:
                parts.append(f"all in {duration(elapsed)}")
            else:
                parts.append(f"{duration((total - self.done) / pace)} left")
        return ", ".join(parts) + (f" ({self.name})" if self.name else "")


def duration(seconds: float) -> str:
    """12 s, 3 min 5 s, 2 h 4 min."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"
