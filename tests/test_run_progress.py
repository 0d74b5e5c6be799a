"""`vlm-ocr run` between page outcomes: the progress line on a timer while a page is read, its
pace counted from the engine's being ready, and Ctrl-C, which leaves without waiting for the
page the engine has in hand. Time is a clock the test moves; order is asserted with events."""

from __future__ import annotations

import asyncio
import io
import json
import threading
from pathlib import Path
from typing import Any, cast

import pytest

from vlm_ocr.cli import run
from vlm_ocr.cli.local_files import LocalFile, check_file
from vlm_ocr.cli.progress import CountingEngine, PageProgress, heartbeat
from vlm_ocr.contract import PageItem, PageReport
from vlm_ocr.engines.base import Engine, Recognition
from vlm_ocr.images import PageImage
from vlm_ocr.pipeline.worker import build_worker
from vlm_ocr.prompts import Prompt
from vlm_ocr_lab.standins.fakes import FakeEngine

from .support import make_settings, write_pdf


class HeldEngine:
    """An engine whose readings wait for `release`."""

    name = "held"

    def __init__(self) -> None:
        self.released = asyncio.Event()

    async def recognize(self, page: Any, prompt: Any) -> str:
        await self.released.wait()
        return "text"


def page_done(done: int, total: int) -> PageItem:
    report = PageReport(page=done, source="four.pdf", status="ok")
    return PageItem(done=done, total=total, page=report)


def test_a_line_comes_on_the_timer_while_a_page_is_read_paced_from_the_engine_ready() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = PageProgress(4, out, live=False, every_s=5, clock=lambda: now[0])
    progress.file("four.pdf")
    now[0] = 24.0  # the engine took 24 s to start: no page's time
    progress.ready()
    held = HeldEngine()
    engine = CountingEngine(held, progress)  # type: ignore[arg-type]
    assert engine.name == "held"  # everything but the readings is the engine's own

    async def scenario() -> None:
        reading = asyncio.create_task(engine.recognize(None, None))  # type: ignore[arg-type]
        slept: list[float] = []

        async def sleep(seconds: float) -> None:  # the timer's wait, on the test's clock
            slept.append(seconds)
            if len(slept) == 3:  # the page is read 2 s into this wait, and stored
                held.released.set()
                assert await reading == "text"
                now[0] += 2
                progress(page_done(1, 4))
                seconds -= 2
            if len(slept) == 4:
                raise asyncio.CancelledError  # the run is over
            await asyncio.sleep(0)
            now[0] += seconds

        await asyncio.sleep(0)  # the reading is under way
        assert progress.reading == 1
        with pytest.raises(asyncio.CancelledError):
            await heartbeat(progress, sleep)
        assert slept == [5, 5, 5, 5] and progress.reading == 0

    asyncio.run(scenario())
    assert out.getvalue().splitlines() == [
        "vlm-ocr run: 0/4 pages (0 %), 1 reading, 5 s so far (four.pdf)",
        "vlm-ocr run: 0/4 pages (0 %), 1 reading, 10 s so far (four.pdf)",
        # 1 page in 15 s since the engine was ready, not in the 39 s since the program started
        "vlm-ocr run: 1/4 pages (25 %), 0.07 pages/s, 45 s left (four.pdf)",
    ]


def test_a_page_that_finishes_between_lines_moves_the_next_one_on() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = PageProgress(4, out, live=False, every_s=5, clock=lambda: now[0])
    progress.ready()
    now[0] = 6.0
    progress(page_done(1, 4))  # due: said now
    now[0] = 8.0
    assert progress.due() == 3.0
    progress.tick()  # not due: nothing
    assert out.getvalue().splitlines() == ["vlm-ocr run: 1/4 pages (25 %), 0.17 pages/s, 18 s left"]


class ReadsInAThread(FakeEngine):
    """An engine that reads a page in a thread, as the CPU engine does: cancelling its caller
    does not stop the thread, which goes on until `gate` opens."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.at_engine = asyncio.Event()

    async def recognize(self, page: PageImage, prompt: Prompt) -> Recognition:
        self.at_engine.set()
        await asyncio.to_thread(self.gate.wait)
        return await super().recognize(page, prompt)


def test_ctrl_c_leaves_without_waiting_for_the_page_the_engine_has_in_hand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(tmp_path, render_processes=1)
    pdf = write_pdf(tmp_path / "two.pdf", 2)
    file = check_file(pdf, None, settings)
    assert isinstance(file, LocalFile)
    parser = run.argparse.ArgumentParser()
    run.add_arguments(parser)
    args = parser.parse_args([str(pdf), "--out", str(tmp_path / "results")])
    progress = PageProgress(2, io.StringIO(), live=False, every_s=30)
    engine = ReadsInAThread()
    counting = cast(Engine, CountingEngine(engine, progress))
    worker = build_worker(settings, counting, tmp_path / "results")
    left: list[int] = []

    async def scenario() -> int:
        stop: list[run.Interrupt] = []

        async def go() -> int:
            stop.append(run.Interrupt(asyncio.current_task(), progress, exit=left.append))
            return await run.run_worker(worker, [file], args, progress, stop[0])

        task = asyncio.create_task(go())
        try:
            at_engine = asyncio.create_task(engine.at_engine.wait())
            await asyncio.wait([task, at_engine], return_when=asyncio.FIRST_COMPLETED)
            assert not task.done(), task.result()  # a run that ended early says why
            stop[0]()  # page 1 is at the engine: Ctrl-C
            status = await task
            # out, with the engine's thread still on the page: nobody waited for it
            assert not engine.gate.is_set()
            return status
        finally:
            engine.gate.set()  # so the thread ends before the test's loop closes

    assert asyncio.run(scenario()) == 130 and left == [130]
    assert capsys.readouterr().err == (
        "vlm-ocr run: interrupted: 0 of 2 pages stored; run the same command again to go on "
        "(the pages stored are reused, not read again); stopping the engine, dropping the 1 page "
        "in hand (Ctrl-C again leaves at once)\n"
    )
    manifest = json.loads((tmp_path / "results/two/manifest.json").read_text())
    assert manifest["error"].startswith("the job was stopped")  # written before it left
    assert {p["error_stage"] for p in manifest["pages"]} == {"stopped"}
