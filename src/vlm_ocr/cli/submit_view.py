"""What `vlm-ocr submit` shows while it runs: one display over documents and pages, drawn from
the run's counts (`client.corpus.Progress`). In a terminal, one bar redrawn in place (pages done
of those expected, the documents, the jobs in flight, pages/s and the time left); otherwise, one
line every `every_s`. Log lines go through it, so the bar is never drawn twice around them; it
draws nothing until the run has pages to show, so a refusal is printed alone."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from ..client.corpus import Progress
from .progress import duration

TERMINAL_S = 0.5
LINE_S = 30.0


class View:
    """`single`: the file's name when the run is one document (a bar over its pages, as
    before); None for a corpus."""

    def __init__(
        self,
        progress: Progress,
        *,
        single: str | None = None,
        stream: IO[str] | None = None,
        every_s: float | None = None,
    ) -> None:
        self.progress = progress
        self.single = single
        self.stream = stream or sys.stderr
        self.terminal = self.stream.isatty()
        self.every_s = every_s or (TERMINAL_S if self.terminal else LINE_S)
        self._bar: Any = None
        self._said = ""

    # --- what it says -----------------------------------------------------------------------

    def documents(self) -> str:
        p = self.progress
        total = "" if p.documents_total is None else f"/{p.documents_total}"
        bad = p.documents_done - p.duplicates - p.documents["ok"]
        extra = [f"{bad} not ok"] if bad else []
        if p.earlier:
            extra.append(f"{p.earlier} done before")
        if p.duplicates:
            extra.append(f"{p.duplicates} duplicate{'s' if p.duplicates > 1 else ''}")
        return f"documents {p.documents_done}{total}" + (f" ({', '.join(extra)})" if extra else "")

    def line(self) -> str:
        p = self.progress
        parts = [] if self.single else [self.documents()]
        parts.append(f"pages {p.pages_stored} stored, {p.pages_failed} failed")
        parts.append(f"{p.jobs_in_flight} jobs in flight")
        if p.workers is not None:
            parts.append(f"{p.workers} workers")
        left = p.left_s()
        parts.append(
            f"{p.pages_per_s():.2f} pages/s, {'?' if left is None else duration(left)} left"
        )
        return "; ".join(parts)

    # --- drawing ----------------------------------------------------------------------------

    def draw(self) -> None:
        if not self._showing():
            return  # nothing to show yet (and nothing drawn around a refusal)
        p = self.progress
        if not self.terminal:
            line = self.line()
            if line != self._said:  # a line when something moved
                self.write(line)
                self._said = line
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=p.pages_estimated(),
                unit="page",
                desc=self.single or "pages",
                file=self.stream,
            )
        bar = self._bar
        done = p.pages_stored + p.pages_failed
        bar.total = max(p.pages_estimated(), done)
        bar.update(done - bar.n)  # (tqdm's pace and time left follow its updates)
        if not self.single:
            failed = f", {p.pages_failed} pages failed" if p.pages_failed else ""
            bar.set_postfix_str(
                f"{self.documents()}{failed}, {p.jobs_in_flight} jobs in flight", refresh=False
            )
        bar.refresh()

    def write(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    async def run(self) -> None:
        """Draw every `every_s` until cancelled."""
        while True:
            await asyncio.sleep(self.every_s)
            self.draw()

    def close(self) -> None:
        if self._bar is not None:
            self.draw()
            self._bar.close()
            self._bar = None
        elif not self.terminal:
            self.draw()

    def _showing(self) -> bool:
        """Pages to show (one document), or a document done (a corpus)."""
        p = self.progress
        return bool(p.pages_expected or (not self.single and p.documents_done))

    @contextmanager
    def showing_logs(self) -> Iterator[None]:
        """Log lines through the display while it runs."""
        root = logging.getLogger()
        saved = root.handlers[:]
        handler = _Through(self)
        handler.setFormatter(
            saved[0].formatter if saved else logging.Formatter("%(levelname)s %(message)s")
        )
        root.handlers = [handler]
        try:
            yield
        finally:
            root.handlers = saved


class _Through(logging.Handler):
    def __init__(self, view: View) -> None:
        super().__init__()
        self.view = view

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.view.write(self.format(record))
        except Exception:
            self.handleError(record)
