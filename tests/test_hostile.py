"""Inputs made to stall, starve or confuse the worker: each fails alone and says why, the good
pages of the same job are stored, and a good job sent alongside is not held up."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest

from vlm_ocr import samples
from vlm_ocr.contract import PageItem
from vlm_ocr.errors import StorageError
from vlm_ocr.pipeline.textsim import similarity
from vlm_ocr.storage import LocalStore, PageRecord

from .support import b64, make_settings, new_worker, page_image, png_bytes, stored_text
from .support.hostile import nested_xobject_pdf
from .support.http_server import LoopbackServer

SELECTION_BOMB = "1- ," * 24 + "x"  # exponential in the old page-selection regex


def test_a_page_that_renders_for_minutes_holds_up_no_other_job(
    loop, cpu_engine, cpu_pool, tmp_path: Path
) -> None:
    # Its render ties up one render process for minutes: the good page of its job is stored
    # and a good job sent beside it finishes, both while it still renders. Cancelling its job
    # then ends that render with its process, and the pool goes on serving.
    worker = new_worker(loop, make_settings(tmp_path), cpu_engine, cpu_pool)
    streamed: list[PageItem] = []
    hostile = {"pdf": {"base64": b64(nested_xobject_pdf(depth=8))}, "output_prefix": "hostile"}
    good_pages = samples.numbered_pages(1, lines=2)
    good = {"pdf": {"base64": b64(samples.pdf_from_pages(good_pages))}, "output_prefix": "good"}

    async def side_by_side() -> tuple[bool, object]:
        page_one = asyncio.Event()

        def on_page(item: PageItem) -> None:
            streamed.append(item)
            page_one.set()

        stuck = asyncio.ensure_future(worker.run("hostile", hostile, on_page))
        done = await worker.run("good", good)
        await page_one.wait()
        still_rendering = not stuck.done()
        stuck.cancel()
        await asyncio.gather(stuck, return_exceptions=True)
        return still_rendering, done

    still_rendering, g = loop.run(side_by_side())
    assert still_rendering and g.status == "ok"
    text = stored_text(worker.settings, g.pages[0].key)
    assert similarity(text, samples.page_text(good_pages[0])) > 0.9
    [first] = [item.page for item in streamed]
    assert first.page == 1 and first.status == "ok"
    assert "Good page one" in stored_text(worker.settings, first.key)
    again = loop.run(worker.run("again", good | {"output_prefix": "again"}))
    assert again.status == "ok"


def test_a_page_past_its_render_deadline_fails_with_the_setting_named(
    run, loop, cpu_engine, cpu_pool, tmp_path: Path
) -> None:
    # The second page would render for minutes: only the deadline can end it.
    worker = new_worker(loop, make_settings(tmp_path, render_timeout_s=1), cpu_engine, cpu_pool)
    job = {"pdf": {"base64": b64(nested_xobject_pdf(depth=8))}, "pages": "2"}
    [page] = loop.run(worker.run("deadline", job)).pages
    assert page.status == "failed" and page.error_stage == "render"
    assert page.error == "rendering was stopped: it did not finish within 1 s (RENDER_TIMEOUT_S)"
    bomb = {"pdf": {"base64": b64(nested_xobject_pdf())}, "pages": SELECTION_BOMB}
    error = run(bomb).error or ""
    assert error.startswith("input.pages: ") and "is not a page selection" in error


def test_bad_urls_fail_their_pages_and_never_leak(
    loop, cpu_engine, cpu_pool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(tmp_path, allow_private_urls=True, download_timeout_s=60)
    worker = new_worker(loop, settings, cpu_engine, cpu_pool)
    server = LoopbackServer()
    good = png_bytes(page_image(["Fetched with a token."]))
    server.body("/p.png", good)
    host = server.url.removeprefix("http://")
    images = [
        {"url": f"http://user:hunter2@{host}/p.png?token=SECRET-TOKEN"},
        {"url": "https://localhost:abc/"},
        {"url": "https://localhost:99999/"},
        {"url": "https://" + "a" * 64 + ".example/"},
        {"url": "https://a..b/"},
        {"url": f"http://{host}/missing.png?token=SECRET-TOKEN"},
    ]
    caplog.set_level(logging.DEBUG)
    try:
        result = loop.run(worker.run("u", {"images": images, "output_prefix": "urls"}))
    finally:
        server.close()
    first, *bad = result.pages
    assert first.status == "ok" and "token" in stored_text(settings, first.key).lower()
    assert [p.status for p in bad] == ["failed"] * 5
    for page, index in zip(bad[:4], range(1, 5), strict=True):
        assert (page.error or "").startswith(f"input.images[{index}].url: ")
        assert "is not a valid URL" in (page.error or "")
    assert "HTTP 404" in (bad[4].error or "")
    manifest = stored_text(settings, "urls/manifest.json")
    for text in (json.dumps(result.wire()), manifest, caplog.text):
        assert "SECRET-TOKEN" not in text and "hunter2" not in text
        assert "Traceback" not in text and "site-packages" not in text
    assert json.loads(manifest)["pages"][0]["source"] == f"http://{host}/p.png"


def test_job_bytes_and_fetch_deadline(loop, cpu_engine, cpu_pool, tmp_path: Path) -> None:
    image = png_bytes(page_image(["Budgeted page."]))
    settings = make_settings(
        tmp_path,
        max_job_bytes=int(len(image) * 2.5),
        job_max_concurrent_pages=1,
        allow_private_urls=True,
        fetch_timeout_s=3,
        download_timeout_s=600,
    )
    worker = new_worker(loop, settings, cpu_engine, cpu_pool)
    server = LoopbackServer()
    server.stall("/stuck.png")
    try:
        images = [{"base64": b64(image)}] * 3 + [{"url": server.url + "/stuck.png"}]
        result = loop.run(worker.run("b", {"images": images, "output_prefix": "bytes"}))
    finally:
        server.close()
    statuses = [p.status for p in result.pages]
    assert statuses == ["ok", "ok", "failed", "failed"]
    assert "(MAX_JOB_BYTES); split the job" in (result.pages[2].error or "")
    assert "spent its 3 s of fetching time (FETCH_TIMEOUT_S)" in (result.pages[3].error or "")


def test_truncated_pdf_says_so_and_blank_pages_fail(run, settings) -> None:
    data = samples.pdf_from_pages(samples.numbered_pages(3))
    result = run({"pdf": {"base64": b64(data[: len(data) // 2])}, "output_prefix": "cut"})
    assert any("the PDF is damaged" in note for note in result.notes)
    last = result.pages[-1]
    assert last.status == "failed" and "came out blank from a damaged PDF" in (last.error or "")
    assert result.status == "partial"


def test_a_prefix_that_runs_into_a_file_of_earlier_results_is_refused(run) -> None:
    job = {"pdf": {"base64": b64(samples.pdf_from_pages(samples.numbered_pages(1, lines=1)))}}
    assert run(job | {"output_prefix": "case/a"}).status == "ok"
    refused = run(job | {"output_prefix": "case/a/manifest.json/more"})
    assert refused.status == "failed" and not refused.retry and not refused.pages
    assert refused.error == (
        "input.output_prefix: 'case/a/manifest.json' is a file of earlier results, not a "
        "folder; give another prefix"
    )


def test_same_prefix_twice_at_once_is_refused(loop, worker) -> None:
    pdf = {"pdf": {"base64": b64(samples.pdf_from_pages(samples.numbered_pages(2, lines=1)))}}
    job = pdf | {"output_prefix": "shared"}

    async def both() -> list[dict]:
        return await asyncio.gather(worker.run("a", job), worker.run("b", job))

    first, second = loop.run(both())
    assert first.status == "ok" and second.status == "failed" and not second.pages
    assert (second.error or "").startswith("input.output_prefix: another job on this worker")


def test_a_crash_between_text_and_record_never_reuses_other_text(
    loop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vlm_ocr import storage

    store = LocalStore(tmp_path)
    old = PageRecord("aaa", "fp", 3)
    loop.run(store.put("j/page-0001.md", b"old", "text/markdown", old))
    assert loop.run(store.record("j/page-0001.md")) == old
    real = storage._atomic_write

    def crash_on_record(path: Path, data: bytes) -> None:
        if ".meta" in path.parts:
            raise OSError("the worker died here")
        real(path, data)

    monkeypatch.setattr(storage, "_atomic_write", crash_on_record)
    with pytest.raises(StorageError):
        loop.run(
            store.put("j/page-0001.md", b"new text", "text/markdown", PageRecord("b", "fp", 8))
        )
    # The text is new and its record is gone: a re-run recognizes it again.
    assert (tmp_path / "j/page-0001.md").read_bytes() == b"new text"
    assert loop.run(store.record("j/page-0001.md")) is None


def test_stored_files_follow_the_umask(run, settings) -> None:
    mask = os.umask(0)
    os.umask(mask)
    result = run(
        {"pdf": {"base64": b64(samples.pdf_from_pages([["Mode."]]))}, "output_prefix": "m"}
    )
    for key in (result.pages[0].key, result.manifest_key):
        assert (settings.job.output_dir / str(key)).stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_fault_in_a_render_process_is_logged_whole_and_said_short(loop, cpu_pool, caplog) -> None:
    import math

    from vlm_ocr.pipeline.cpu_pool import TaskFailed

    with caplog.at_level(logging.WARNING), pytest.raises(TaskFailed) as failed:
        loop.run(cpu_pool.run(math.factorial, -1, timeout_s=60))
    assert str(failed.value) == "ValueError"  # what a user reads: no path, no traceback
    [record] = [r for r in caplog.records if "render process" in r.getMessage()]
    assert "Traceback" in record.getMessage() and "negative" in record.getMessage()


def test_a_document_whose_pages_all_run_past_the_render_limit_gives_up_early(
    loop, cpu_engine, cpu_pool, tmp_path: Path
) -> None:
    # 40 pages that each would render for minutes, in 12 kB: after a few run past the limit
    # the rest are not tried, so the document cannot hold the render processes for 40 limits
    # (a limit the light first page keeps on a busy machine too)
    worker = new_worker(loop, make_settings(tmp_path, render_timeout_s=5), cpu_engine, cpu_pool)
    pdf = nested_xobject_pdf(depth=8, heavy_pages=40)
    result = loop.run(worker.run("stalling", {"pdf": {"base64": b64(pdf)}}))
    assert result.status == "partial" and result.pages[0].status == "ok", result.pages[0]
    errors = [p.error or "" for p in result.pages[1:]]
    stopped = [e for e in errors if e.startswith("rendering was stopped")]
    assert 3 <= len(stopped) <= 3 + cpu_pool.size  # the limit, and what was rendering then
    assert set(errors) - set(stopped) == {
        "not rendered: 3 or more pages of this document ran past RENDER_TIMEOUT_S, more than were "
        "rendered, so its other pages are not tried; split the document, or raise "
        "RENDER_TIMEOUT_S"
    }
