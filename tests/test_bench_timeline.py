"""The benchmark's timeline: how full a run kept the engine, measured around the engine's `ask`."""

from __future__ import annotations

import asyncio
import contextlib
import time

from vlm_ocr.errors import EngineError
from vlm_ocr_lab.bench.pipeline import Timeline


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


def test_progress_says_answers_pace_and_requests_in_flight() -> None:
    timeline = Timeline(Engine())
    t0 = timeline.t0
    timeline.spans, timeline.sent, timeline.ok = [(t0 + 1, t0 + 3), (t0 + 2, t0 + 5)], 3, 2
    # two answers in the 4 s since the first request was sent; the third is still out
    assert timeline.progress("worker pass 1", t0 + 5) == (
        "progress, worker pass 1: 2 answers at 5.0 s (0.50 a second since the first request), "
        "1 in flight"
    )
    timeline.spans, timeline.sent, timeline.ok = [], 0, 0
    assert "0 answers at 1.0 s (none yet" in timeline.progress("direct path", t0 + 1)
    timeline.close()


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
    line = timeline.progress("direct path", timeline.t0 + 10)
    assert "2 answers and 2 failed at 10.0 s" in line and "0 in flight" in line


def test_progress_lines_come_while_a_run_goes_and_stop_with_it(capsys) -> None:
    class Held:
        def __init__(self) -> None:
            self.release = asyncio.Event()

        async def ask(self, page: int) -> int:
            await self.release.wait()
            return page

    async def printed(text: str, seen: list[str]) -> None:
        # bounded: the reporter prints every 10 ms, a busy machine may take far longer
        for _ in range(2000):
            seen.append(capsys.readouterr().out)
            if text in "".join(seen):
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"no progress line with {text!r} in {''.join(seen)!r}")

    async def run() -> None:
        engine = Held()
        timeline = Timeline(engine, label="direct path", progress_s=0.01)
        asks = [asyncio.ensure_future(engine.ask(n)) for n in range(2)]
        seen: list[str] = []
        await printed("progress, direct path: 0 answers", seen)
        await printed("2 in flight", seen)
        engine.release.set()
        assert await asyncio.gather(*asks) == [0, 1]
        await printed("2 answers", seen)
        reporter = timeline._reporter
        timeline.close()
        assert reporter is not None
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
        assert reporter.cancelled()

    asyncio.run(run())
