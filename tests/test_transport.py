"""A page survives a transport that loses its request: the worker on `ENGINE=openai` behind the
fault proxy, in front of an engine that answers at once. What is not a transport failure (an
HTTP 400, a slow page) fails the page at once, as before."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from vlm_ocr import samples
from vlm_ocr.contract import JobResult, PageReport
from vlm_ocr.engines.factory import make_engine
from vlm_ocr.pipeline.worker import Worker
from vlm_ocr_lab import cli
from vlm_ocr_lab.bench.pipeline import failure_reasons
from vlm_ocr_lab.standins.instant_engine import FAULTS, InstantEngine

from .support import b64, make_settings, new_worker, page_image, png_bytes, run_job
from .support.fault_proxy import FaultProxy, every_chat_request, first_try_of_each_page

JOB = {"pdf": {"base64": b64(samples.pdf_from_pages(samples.numbered_pages(3)))}}
JOB_IMAGE = [{"base64": b64(png_bytes(page_image(["One page, one line of text."])))}]


@pytest.fixture(scope="module")
def instant() -> Iterator[InstantEngine]:
    server = InstantEngine()
    yield server
    server.close()


@pytest.fixture
def proxy(instant: InstantEngine) -> Iterator[FaultProxy]:
    proxy = FaultProxy(("127.0.0.1", instant.port))
    yield proxy
    proxy.close()


@contextmanager
def openai_worker(loop, tmp_path: Path, cpu_pool, proxy: FaultProxy, **values: Any):
    settings = make_settings(tmp_path, engine="openai", openai_base_url=proxy.url, **values)
    worker = new_worker(loop, settings, make_engine(settings), cpu_pool)
    loop.run(worker.start())
    try:
        yield worker
    finally:
        loop.run(worker.close())


def manifest(tmp_path: Path, result: JobResult) -> dict[str, Any]:
    return json.loads((tmp_path / "out" / str(result.manifest_key)).read_text())


@pytest.mark.parametrize("fault", FAULTS)
def test_a_request_lost_on_the_way_is_sent_again(
    loop, tmp_path: Path, cpu_pool, proxy: FaultProxy, fault: str
) -> None:
    proxy.body_rule = first_try_of_each_page(fault)  # the warm-up page's too
    with openai_worker(loop, tmp_path, cpu_pool, proxy) as worker:
        result = run_job(loop, worker, JOB)
    assert result.status == "ok", result.errors
    assert [(p.status, p.attempts, p.tries) for p in result.pages] == [("ok", 1, 2)] * 3
    assert [p["tries"] for p in manifest(tmp_path, result)["pages"]] == [2, 2, 2]
    assert sum(outcome == fault for _, _, outcome in proxy.seen) == 4  # 3 pages + the warm-up


def lose_every_request(worker: Worker, proxy: FaultProxy, fault: str) -> None:
    """From now on (the worker started), every page request is lost."""
    proxy.body_rule = every_chat_request(fault)


def test_a_page_fails_when_its_retries_are_spent_with_the_last_reason_and_its_tries(
    loop, tmp_path: Path, cpu_pool, proxy: FaultProxy
) -> None:
    with openai_worker(loop, tmp_path, cpu_pool, proxy, transport_retries=2) as worker:
        lose_every_request(worker, proxy, "drop")
        result = run_job(loop, worker, JOB)
    assert result.status == "failed" and not result.retry  # the engine is not gone
    for page in result.pages:
        assert page.status == "failed" and page.error_stage == "engine" and page.tries == 3
        assert page.error and "did not answer" in page.error and "(3 tries)" in page.error


def test_the_retries_stay_within_the_request_time(
    loop, tmp_path: Path, cpu_pool, proxy: FaultProxy
) -> None:
    with openai_worker(
        loop, tmp_path, cpu_pool, proxy, transport_retries=20, request_timeout_s=1.0
    ) as worker:
        lose_every_request(worker, proxy, "reset")
        result = run_job(loop, worker, {"images": JOB_IMAGE})
    page = result.pages[0]
    # 0.25-0.75 s before the second try, 0.5-1.5 s before a third: a fourth is past 1 s
    assert page.status == "failed" and page.tries is not None and 1 <= page.tries <= 3
    assert page.error and f"({page.tries} tries)" in page.error


def test_an_http_400_fails_the_page_at_once_with_the_servers_message(
    loop, tmp_path: Path, cpu_pool, proxy: FaultProxy
) -> None:
    with openai_worker(loop, tmp_path, cpu_pool, proxy) as worker:
        proxy.rule = lambda method, path: ("status", 400) if method == "POST" else None
        result = run_job(loop, worker, JOB)
    for page in result.pages:
        assert page.status == "failed" and page.tries == 1
        assert page.error and page.error.startswith("the engine server answered HTTP 400")


def test_a_slow_page_is_not_sent_again(loop, tmp_path: Path, cpu_pool, proxy) -> None:
    with openai_worker(loop, tmp_path, cpu_pool, proxy, request_timeout_s=0.5) as worker:
        proxy.rule = lambda method, path: ("stall", 3) if method == "POST" else None
        result = run_job(loop, worker, {"images": JOB_IMAGE})
    page = result.pages[0]
    assert page.status == "failed" and page.tries == 1
    assert page.error == "the page request timed out (REQUEST_TIMEOUT_S)"


def test_the_soak_loses_no_page_and_says_what_the_engine_did(capsys) -> None:
    """`vlm-ocr-lab bench --instant-engine`, small: every lost request is sent again."""
    argv = ["bench", "--instant-engine", "--faults", "0.1", "--slow", "0.02", "--slow-s", "0.2"]
    assert cli.main([*argv, "--pages", "10", "--jobs", "3", "--passes", "2"]) == 0
    out = capsys.readouterr().out
    assert "pass 1: pages: 30  failed: 0" in out and "pass 2: pages: 30  failed: 0" in out
    sent_again = int(re.search(r"transport: (\d+) requests sent again", out).group(1))  # type: ignore[union-attr]
    lost = int(re.search(r"([\d,]+) lost on the way", out).group(1))  # type: ignore[union-attr]
    assert 0 < sent_again <= lost  # the warm-up page's lost requests are not a job's
    assert re.search(
        r"worker memory: peak \d+ MB after pass 1 \(30 pages\), \d+ MB after pass 2", out
    )


def test_failed_pages_are_counted_by_reason() -> None:
    def failed(error: str, tries: int) -> PageReport:
        return PageReport(
            page=1, source="x", status="failed", error=error, tries=tries, error_stage="engine"
        )

    reasons = failure_reasons(
        [
            failed("the engine server did not answer: ReadError('') (4 tries)", 4),
            failed("the engine server did not answer: ReadError('') (4 tries)", 4),
            failed("the engine server answered HTTP 400: too long", 1),
            PageReport(page=2, source="x", status="ok", attempts=1, tries=2),
        ]
    )
    assert reasons == {
        "engine: the engine server did not answer: ReadError('')": 2,
        "engine: the engine server answered HTTP 400: too long": 1,
    }
