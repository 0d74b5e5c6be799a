"""Each page's outcome and the job's status, with a scripted engine and an in-memory store.

Pages run one at a time here (one engine slot, one page of the job in flight), so each test knows
which page meets which failure; no test waits on a clock.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from vlm_ocr import samples
from vlm_ocr.engines.base import EngineFacts, Recognition
from vlm_ocr.errors import EngineError, StorageError
from vlm_ocr.storage import PageRecord

from .conftest import b64, make_settings, new_worker


class ScriptedEngine:
    """Answers page after page from a script: 'ok', 'partial' (stopped by length with some
    text) or 'crash' (the engine dies: a fatal error, and `failure` from then on)."""

    default_concurrency = 1

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.facts = EngineFacts(name="scripted", version="1")
        self.failure: str | None = None

    async def recognize(self, page: Any, prompt: Any) -> Recognition:
        step = self.script.pop(0)
        if step == "crash":
            self.failure = "the server exited with code -9"
            raise EngineError(self.failure, fatal=True)
        if step == "partial":
            return Recognition("half a page", ok=False, finish_reason="length", problem="cut off")
        return Recognition(f"text of {page.sha256[:8]}", finish_reason="stop")

    def fingerprint(self, prompt: Any) -> dict[str, Any]:
        return {"engine": "scripted"}

    def terminate(self) -> None:
        pass


class MemoryStore:
    """Objects in a dict; a put whose key ends with one of `fail` raises StorageError."""

    kind = "memory"
    key_prefix = ""

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.objects: dict[str, bytes] = {}
        self.records: dict[str, PageRecord] = {}
        self.fail = fail

    def uri(self, key: str) -> str:
        return f"memory://{key}"

    async def put(self, key: str, data: bytes, content_type: str, record: Any = None) -> None:
        if key.endswith(self.fail):
            raise StorageError(f"PUT {key}: injected failure")
        self.objects[key] = data
        if record is not None:
            self.records[key] = record

    async def record(self, key: str) -> PageRecord | None:
        return self.records.get(key)

    async def read_text(self, key: str) -> str:
        return self.objects[key].decode()

    async def presign(self, key: str) -> str | None:
        return None


@pytest.fixture
def run_scripted(loop, cpu_pool, tmp_path):
    def run(script: list[str], store: MemoryStore, pages: int = 4) -> tuple[dict, dict | None]:
        settings = make_settings(tmp_path, job_max_concurrent_pages=1)
        worker = new_worker(loop, settings, ScriptedEngine(script), cpu_pool, store)
        pdf = samples.pdf_from_pages(samples.numbered_pages(pages, lines=1))
        result = loop.run(worker.run("j", {"pdf": {"base64": b64(pdf)}, "output_prefix": "o"}))
        raw = store.objects.get("o/manifest.json")
        return result, json.loads(raw) if raw else None

    return run


def keys_named(result: dict) -> set[str]:
    return {k for p in result["pages"] for k in (p.get("key"), p.get("partial_key")) if k}


def test_all_pages_ok(run_scripted) -> None:
    store = MemoryStore()
    result, manifest = run_scripted(["ok"] * 4, store)
    assert result["status"] == manifest["status"] == "ok"
    assert "error" not in result and "error" not in manifest and "retry" not in result
    assert keys_named(result) == {f"o/page-000{n}.md" for n in range(1, 5)} <= set(store.objects)


def test_engine_dies_mid_job(run_scripted) -> None:
    store = MemoryStore()
    result, manifest = run_scripted(["ok", "crash"], store)
    assert [p["status"] for p in result["pages"]] == ["ok", "failed", "failed", "failed"]
    assert "exited with code -9" in result["pages"][1]["error"]
    assert "not processed: the engine is down" in result["pages"][2]["error"]
    assert result["status"] == manifest["status"] == "partial"
    assert result["error"] == manifest["error"]
    assert "this worker will be replaced" in result["error"] and result["refresh_worker"] is True
    assert result["retry"] is True  # submitting it again finishes it
    assert keys_named(result) == {"o/page-0001.md"}


def test_failed_page_write_names_no_key(run_scripted) -> None:
    store = MemoryStore(fail=("page-0002.md",))
    result, manifest = run_scripted(["ok"] * 4, store)
    assert [p["status"] for p in result["pages"]] == ["ok", "failed", "failed", "failed"]
    assert result["status"] == manifest["status"] == "partial"
    assert "Stored pages: 1; not stored: 2-4" in result["error"] and result["retry"] is True
    assert keys_named(result) == {"o/page-0001.md"} and keys_named(manifest) == keys_named(result)


def test_failed_partial_write_names_no_partial_key(run_scripted) -> None:
    store = MemoryStore(fail=(".partial.md",))
    result, manifest = run_scripted(["partial", "ok", "ok", "ok"], store)
    first = result["pages"][0]
    assert first["status"] == "failed" and "partial_key" not in first
    assert "its partial text was not stored" in first["error"]
    assert "partial_key" not in manifest["pages"][0]
    assert not any(k.endswith(".partial.md") for k in store.objects)
    assert result["status"] == manifest["status"] == "failed"


def test_partial_text_stored_apart(run_scripted) -> None:
    store = MemoryStore()
    result, manifest = run_scripted(["partial", "ok", "ok", "ok"], store)
    first = result["pages"][0]
    assert first["partial_key"] == "o/failed/page-0001.partial.md"
    assert store.objects[first["partial_key"]] == b"half a page"
    assert result["status"] == manifest["status"] == "partial"
    assert "retry" not in result  # the page itself failed: the job is not retried for it


def test_failed_manifest_write(run_scripted) -> None:
    store = MemoryStore(fail=("manifest.json",))
    result, manifest = run_scripted(["ok"] * 4, store)
    assert manifest is None and "manifest_key" not in result
    assert result["status"] == "partial"
    assert "the manifest was not written" in result["error"]
    assert "Stored pages: 1-4; not stored: none" in result["error"]
