"""Each page's outcome and the job's status, with a scripted engine and an in-memory store.

Pages run one at a time here (one engine slot, one page of the job in flight), so each test knows
which page meets which failure; no test waits on a clock.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from vlm_ocr import samples
from vlm_ocr.contract import JobResult, PageReport
from vlm_ocr.engines.base import Recognition
from vlm_ocr.errors import EngineError
from vlm_ocr.pipeline.verdict import verdict
from vlm_ocr_lab.standins.fakes import FakeEngine, MemoryStore

from .support import b64, make_settings, new_worker

CRASH = EngineError("the server exited with code -9", fatal=True)
PARTIAL = Recognition("half a page", ok=False, finish_reason="length", problem="cut off")


@pytest.fixture
def run_scripted(loop, cpu_pool, tmp_path):
    """Pages answered in order from a script: `None` a good text, else the step itself."""

    def run(script: list[Any], store: MemoryStore, pages: int = 4) -> tuple[JobResult, dict | None]:
        settings = make_settings(tmp_path, job_max_concurrent_pages=1)
        engine = FakeEngine(
            [step if step is not None else f"text of page {n}" for n, step in enumerate(script)]
        )
        worker = new_worker(loop, settings, engine, cpu_pool, store)
        pdf = samples.pdf_from_pages(samples.numbered_pages(pages, lines=1))
        result = loop.run(worker.run("j", {"pdf": {"base64": b64(pdf)}, "output_prefix": "o"}))
        raw = store.objects.get("o/manifest.json")
        return result, json.loads(raw) if raw else None

    return run


OK = None


def keys_named(result: JobResult | dict) -> set[str]:
    pages = result.wire()["pages"] if isinstance(result, JobResult) else result["pages"]
    return {k for p in pages for k in (p.get("key"), p.get("partial_key")) if k}


def test_all_pages_ok(run_scripted) -> None:
    store = MemoryStore()
    result, manifest = run_scripted([OK] * 4, store)
    assert result.status == manifest["status"] == "ok"
    assert result.error is None and "error" not in manifest
    assert not result.retry and not result.refresh_worker
    assert keys_named(result) == {f"o/page-000{n}.md" for n in range(1, 5)} <= set(store.objects)


def test_engine_dies_mid_job(run_scripted) -> None:
    store = MemoryStore()
    result, manifest = run_scripted([OK, CRASH], store)
    assert [p.status for p in result.pages] == ["ok", "failed", "failed", "failed"]
    assert result.pages[1].error == "the server exited with code -9"
    assert [p.error for p in result.pages[2:]] == [
        "not processed: the engine is down (the server exited with code -9)"
    ] * 2
    assert result.status == manifest["status"] == "partial"
    assert result.error == manifest["error"]
    assert "this worker will be replaced" in (result.error or "") and result.refresh_worker
    assert "pages failed" not in (result.error or "")  # they failed for the engine, said once
    assert result.retry and manifest["retry"]  # submitting it again finishes it
    assert keys_named(result) == {"o/page-0001.md"}


def test_failed_page_write_names_no_key(run_scripted) -> None:
    store = MemoryStore(fail=("page-0002.md",))
    result, manifest = run_scripted([OK] * 4, store)
    assert [p.status for p in result.pages] == ["ok", "failed", "failed", "failed"]
    assert result.status == manifest["status"] == "partial"
    assert "Stored pages: 1; not stored: 2-4" in (result.error or "") and result.retry
    assert keys_named(result) == {"o/page-0001.md"} and keys_named(manifest) == keys_named(result)


def test_failed_partial_write_names_no_partial_key(run_scripted) -> None:
    store = MemoryStore(fail=(".partial.md",))
    result, manifest = run_scripted([PARTIAL, OK, OK, OK], store)
    first = result.pages[0]
    assert first.status == "failed" and first.partial_key is None
    assert first.error == (
        "cut off; its partial text was not stored (PUT o/failed/page-0001.partial.md: "
        "injected failure)"
    )
    assert "partial_key" not in manifest["pages"][0]
    assert not any(k.endswith(".partial.md") for k in store.objects)
    # the store failed: the job stops there, and is worth submitting again
    assert result.status == manifest["status"] == "failed" and result.retry


def test_partial_text_stored_apart(run_scripted) -> None:
    store = MemoryStore()
    result, manifest = run_scripted([PARTIAL, OK, OK, OK], store)
    first = result.pages[0]
    assert first.partial_key == "o/failed/page-0001.partial.md"
    assert store.objects[first.partial_key] == b"half a page"
    assert first.chars == len("half a page") and first.key is None
    assert result.status == manifest["status"] == "partial"
    assert not result.retry  # the page itself failed: the job is not retried for it
    # its error says so, in the result and the manifest alike
    assert result.error == manifest["error"] == "1 of 4 pages failed: page 1: cut off"


def test_failed_manifest_write(run_scripted) -> None:
    store = MemoryStore(fail=("manifest.json",))
    result, manifest = run_scripted([OK] * 4, store)
    assert manifest is None and result.manifest_key is None
    assert result.status == "partial" and result.retry
    assert "the manifest was not written" in (result.error or "")
    assert "Stored pages: 1-4; not stored: none" in (result.error or "")


def failed_page(number: int, error: str) -> PageReport:
    return PageReport(page=number, source="s", status="failed", error=error)


def test_failed_pages_are_counted_and_grouped_in_one_line() -> None:
    ok = [PageReport(page=n, source="s", status="ok") for n in (1, 2)]
    failed = [failed_page(3, "page 3 came out\nblank")] + [
        failed_page(n, f"page {n} came out blank") for n in range(4, 9)
    ]
    failed += [failed_page(n, f"input.images[{n - 1}]: not an image") for n in range(9, 13)]
    judged = verdict(ok + failed, problems=[], stop=None)
    assert (judged.status, judged.retry) == ("partial", False)
    assert judged.error == (
        "10 of 12 pages failed: pages 3-8: came out blank; page 9: input.images[8]: not an "
        "image; page 10: input.images[9]: not an image; 2 more in `errors`"
    )
    # A job-level problem comes first; a job that stored nothing says so.
    beyond = verdict(ok + failed[:1], problems=["input.pages: 9-12 beyond the end"], stop=None)
    assert beyond.error == "input.pages: 9-12 beyond the end | 1 of 3 pages failed: page 3: " + (
        "came out blank"
    )
    none = verdict(failed[:2], problems=[], stop=None)
    assert (none.status, none.error) == (
        "failed",
        "no page could be processed: pages 3-4: " + ("came out blank"),
    )
