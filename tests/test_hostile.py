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
from vlm_ocr.errors import StorageError
from vlm_ocr.storage import LocalStore, PageRecord
from vlm_ocr.textsim import similarity

from .conftest import b64, make_settings, new_worker, page_image, png_bytes
from .httpserver import LoopbackServer
from .support.hostile import nested_xobject_pdf

SELECTION_BOMB = "1- ," * 24 + "x"  # exponential in the old page-selection regex


def stored(settings, key: str) -> str:
    return (settings.output_dir / key).read_text(encoding="utf-8")


def test_hostile_jobs_fail_alone_while_a_good_job_goes_through(
    loop, cpu_engine, cpu_pool, tmp_path: Path
) -> None:
    # A page that would render for many minutes is stopped at its deadline; the job's other
    # page is stored; a good job sent at the same time finishes first.
    settings = make_settings(tmp_path, render_timeout_s=20)
    worker = new_worker(loop, settings, cpu_engine, cpu_pool)
    finished: list[str] = []

    async def job(name: str, raw: dict) -> dict:
        result = await worker.run(name, raw)
        finished.append(name)
        return result

    hostile = {"pdf": {"base64": b64(nested_xobject_pdf(depth=8))}, "output_prefix": "hostile"}
    bomb = {"pdf": {"base64": b64(nested_xobject_pdf())}, "pages": SELECTION_BOMB}
    good_pages = samples.numbered_pages(1, lines=2)
    good = {"pdf": {"base64": b64(samples.pdf_from_pages(good_pages))}, "output_prefix": "good"}

    async def side_by_side() -> list[dict]:
        return await asyncio.gather(job("hostile", hostile), job("bomb", bomb), job("good", good))

    h, b, g = loop.run(side_by_side())
    assert finished.index("good") < finished.index("hostile")
    assert b["error"].startswith("input.pages: ") and "is not a page selection" in b["error"]
    assert g["status"] == "ok"
    assert (
        similarity(stored(settings, g["pages"][0]["key"]), samples.page_text(good_pages[0])) > 0.9
    )
    one, two = h["pages"]
    assert one["status"] == "ok" and "Good page one" in stored(settings, one["key"])
    assert two["status"] == "failed" and two["error_stage"] == "render"
    assert "rendering was stopped: it did not finish within 20 s (RENDER_TIMEOUT_S)" in two["error"]
    assert h["status"] == "partial"


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
    first, *bad = result["pages"]
    assert first["status"] == "ok" and "token" in stored(settings, first["key"]).lower()
    assert [p["status"] for p in bad] == ["failed"] * 5
    for page, index in zip(bad[:4], range(1, 5), strict=True):
        assert page["error"].startswith(f"input.images[{index}].url: ")
        assert "is not a valid URL" in page["error"]
    assert "HTTP 404" in bad[4]["error"]
    manifest = stored(settings, "urls/manifest.json")
    for text in (json.dumps(result), manifest, caplog.text):
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
    statuses = [p["status"] for p in result["pages"]]
    assert statuses == ["ok", "ok", "failed", "failed"]
    assert "(MAX_JOB_BYTES); split the job" in result["pages"][2]["error"]
    assert "spent its 3 s of fetching time (FETCH_TIMEOUT_S)" in result["pages"][3]["error"]


def test_truncated_pdf_says_so_and_blank_pages_fail(run, settings) -> None:
    data = samples.pdf_from_pages(samples.numbered_pages(3))
    result = run({"pdf": {"base64": b64(data[: len(data) // 2])}, "output_prefix": "cut"})
    assert any("the PDF is damaged" in note for note in result["notes"])
    last = result["pages"][-1]
    assert last["status"] == "failed" and "came out blank from a damaged PDF" in last["error"]
    assert result["status"] == "partial"


def test_same_prefix_twice_at_once_is_refused(loop, worker) -> None:
    pdf = {"pdf": {"base64": b64(samples.pdf_from_pages(samples.numbered_pages(2, lines=1)))}}
    job = pdf | {"output_prefix": "shared"}

    async def both() -> list[dict]:
        return await asyncio.gather(worker.run("a", job), worker.run("b", job))

    first, second = loop.run(both())
    assert first["status"] == "ok"
    assert second["error"].startswith("input.output_prefix: another job on this worker")


def test_a_crash_between_text_and_record_never_reuses_other_text(
    loop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vlm_ocr.storage as storage

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
    for key in (result["pages"][0]["key"], result["manifest_key"]):
        assert (settings.output_dir / key).stat().st_mode & 0o777 == 0o666 & ~mask
