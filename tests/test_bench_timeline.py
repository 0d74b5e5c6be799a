"""The benchmark's timeline (how full a run kept the engine, measured around the engine's
`ask`) and its progress lines (pages counted where the bench sees them end, for every engine)."""

from __future__ import annotations

import asyncio
import contextlib
import time

from vlm_ocr.errors import EngineError
from vlm_ocr_lab.bench.pipeline import Timeline
from vlm_ocr_lab.bench.progress import PassProgress


class Engine:
    def __init__(self) -> None:
        self.calls = 0

    async def ask(self, page: int) -> int:
        self.calls += 1
        await asyncio.sleep(0.01 * (page + 1))
        return page


def test_the_timeline_records_every_request_and_gives_the_engine_back() -> None:
    engine = Engine()

    async def run() -> tuple[list[int], dict[str, float]]:
        timeline = Timeline(engine)
        try:
            answers = await asyncio.gather(*(engine.ask(n) for n in range(4)))
        finally:
            timeline.close()
        return answers, timeline.figures(time.perf_counter())

    answers, figures = asyncio.run(run())
    assert answers == [0, 1, 2, 3] and engine.calls == 4
    assert engine.ask.__func__ is Engine.ask  # the recorder is gone after close()
    assert set(figures) == {
        "first_request_s",
        "after_last_answer_s",
        "mean_in_flight",
        "peak_in_flight",
        "peak_from_s",
        "peak_until_s",
        "answers_without_text",
    }
    # Four requests at once, never more: on average between none and four in flight.
    assert 0 < figures["mean_in_flight"] <= 4 and figures["peak_in_flight"] == 4
    # All four were in flight until the quickest answered.
    assert figures["peak_from_s"] <= figures["peak_until_s"]
    assert figures["first_request_s"] >= 0 and figures["after_last_answer_s"] >= 0


def test_an_engine_without_a_server_has_no_timeline() -> None:
    class CpuEngine:
        pass

    timeline = Timeline(CpuEngine())
    timeline.close()
    assert timeline.figures(time.perf_counter()) == {}


def test_the_peak_is_when_the_most_requests_were_in_flight() -> None:
    timeline = Timeline(Engine())
    t0 = timeline.t0
    # Two requests overlap from 2 s to 3 s; a third runs alone afterwards.
    timeline.spans = [(t0 + 1, t0 + 3), (t0 + 2, t0 + 5), (t0 + 6, t0 + 7)]
    figures = timeline.figures(t0 + 8)
    assert figures["peak_in_flight"] == 2
    assert (figures["peak_from_s"], figures["peak_until_s"]) == (2, 3)
    assert figures["mean_in_flight"] == (2 + 3 + 1) / 8
    assert (figures["first_request_s"], figures["after_last_answer_s"]) == (1, 1)
    timeline.close()


def test_progress_says_pages_pace_time_left_and_requests_in_flight() -> None:
    progress = PassProgress("worker pass 1", 10, 0.0, in_flight=lambda: 3)
    progress.done = 4  # four pages in 8 s: six left at that pace
    assert progress.line(progress.t0 + 8) == (
        "progress, worker pass 1: 4 of 10 pages at 8.0 s (0.50 a second, about 12 s left), "
        "3 requests in flight"
    )
    cpu = PassProgress("direct path", 10, 0.0)  # an engine whose requests are not seen
    assert cpu.line(cpu.t0 + 1) == "progress, direct path: 0 of 10 pages at 1.0 s (none done yet)"


SAFETY_S = 600  # a wait that ends long before; only a broken reporter runs into it


def test_failed_requests_are_counted_by_reason_and_never_paced() -> None:
    class Failing:
        async def ask(self, page: int) -> int:
            if page % 2:
                raise EngineError(f"the engine server did not answer: ReadError('') ({page} tries)")
            return page

    engine = Failing()

    async def run() -> Timeline:
        timeline = Timeline(engine)
        try:
            await asyncio.gather(*(engine.ask(n) for n in range(4)), return_exceptions=True)
        finally:
            timeline.close()
        return timeline

    timeline = asyncio.run(run())
    assert timeline.ok == 2 and len(timeline.spans) == 4
    # one reason, whatever the tries
    assert timeline.failures == {"the engine server did not answer: ReadError('')": 2}
    assert timeline.in_flight() == 0


def test_progress_lines_come_while_a_run_goes_and_stop_with_it(capsys) -> None:
    async def printed(text: str, seen: list[str]) -> None:
        deadline = time.monotonic() + SAFETY_S
        while time.monotonic() < deadline:
            seen.append(capsys.readouterr().out)
            if text in "".join(seen):
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"no progress line with {text!r} in {''.join(seen)!r}")

    async def run() -> None:
        flying = [2]
        progress = PassProgress("direct path", 2, 0.01, in_flight=lambda: flying[0])
        seen: list[str] = []
        # nothing ends: a line every 0.01 s all the same, so a stalled run shows it
        await printed("progress, direct path: 0 of 2 pages at", seen)
        await printed("2 requests in flight", seen)
        flying[0] = 0
        progress.page_done()
        progress.page_done()
        await printed("2 of 2 pages", seen)
        ticker = progress._ticker
        progress.close()
        assert ticker is not None
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        assert ticker.cancelled()

    asyncio.run(run())


def test_the_first_page_gives_a_line_at_once_and_then_one_a_period(capsys) -> None:
    async def run() -> str:
        progress = PassProgress("worker pass 1", 3, 3600.0)
        progress.page_done()  # the first page: at once, whatever the period
        progress.page_done()  # the next: within the period, quiet
        progress.close()
        return capsys.readouterr().out

    out = asyncio.run(run())
    assert out.startswith("progress, worker pass 1: 1 of 3 pages at ") and out.count("\n") == 1


def test_answers_without_text_are_counted_and_said() -> None:
    # a stand-in's greedy answers can be one skipped token over and over: text "", the pace then
    # the API servers' (the row and the report say so)
    class Answer:
        def __init__(self, text: str) -> None:
            self.text = text

    class Stand:
        async def ask(self, page: int) -> Answer:
            return Answer("" if page % 2 else "t12 t12")

    engine = Stand()

    async def run() -> Timeline:
        timeline = Timeline(engine)
        try:
            await asyncio.gather(*(engine.ask(n) for n in range(5)))
        finally:
            timeline.close()
        return timeline

    timeline = asyncio.run(run())
    assert timeline.ok == 5 and timeline.without_text == 2
    assert timeline.figures(time.perf_counter())["answers_without_text"] == 2
