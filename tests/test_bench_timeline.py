"""The benchmark's timeline: how full a run kept the engine, measured around the engine's `ask`."""

from __future__ import annotations

import asyncio
import time

from vlm_ocr.tools.bench import Timeline


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
