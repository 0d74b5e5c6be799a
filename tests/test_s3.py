"""The bucket store against a real S3 server on loopback (moto's server mode), over HTTP."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from vlm_ocr import samples
from vlm_ocr.pipeline.textsim import similarity
from vlm_ocr.pipeline.worker import Worker
from vlm_ocr.settings import Settings
from vlm_ocr.storage import S3Store
from vlm_ocr_lab.standins.fakes import FakeEngine
from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3, s3_client

from .support import (
    b64,
    free_port,
    make_settings,
    new_worker,
    page_image,
    pdf_job,
    png_bytes,
    run_sixteen_jobs,
    wait_for_http,
)
from .support.fault_proxy import FaultProxy


@pytest.fixture(scope="session")
def s3() -> Iterator[LoopbackS3]:
    server = LoopbackS3()
    yield server
    server.stop()


@pytest.fixture
def s3_endpoint(s3: LoopbackS3) -> str:
    return s3.endpoint


@pytest.fixture
def bucket(s3: LoopbackS3) -> str:
    return s3.create_bucket(f"ocr-{uuid.uuid4().hex[:12]}")


def bucket_settings(endpoint: str, bucket: str, **kw: Any) -> Settings:
    values: dict[str, Any] = {
        "bucket_endpoint_url": endpoint,
        "bucket_name": bucket,
        "bucket_access_key_id": "test",
        "bucket_secret_access_key": "test",
        "bucket_max_attempts": 4,
    }
    values.update(kw)
    return make_settings(**values)


@pytest.fixture
def make_worker(loop, cpu_engine, cpu_pool):
    def make(settings: Settings) -> tuple[Worker, FakeEngine]:
        # The real CPU engine, counted, with the prompt in its fingerprint as the GPU engine has
        # (the CPU engine ignores prompts, so it leaves them out).
        engine = FakeEngine(wraps=cpu_engine)
        return new_worker(loop, settings, engine, cpu_pool), engine

    return make


def proxy_for(endpoint: str) -> FaultProxy:
    host, port = endpoint.removeprefix("http://").split(":")
    return FaultProxy((host, int(port)))


client = s3_client


def get_text(endpoint: str, bucket: str, key: str) -> tuple[str, dict]:
    obj = client(endpoint).get_object(Bucket=bucket, Key=key)
    return obj["Body"].read().decode(), obj


def test_client_is_configured_for_r2(s3_endpoint: str, bucket: str) -> None:
    store = S3Store.from_settings(
        bucket_settings(
            s3_endpoint,
            bucket,
            bucket_max_attempts=6,
            bucket_connect_timeout_s=3,
            bucket_read_timeout_s=40,
        ).bucket
    )
    cfg = store.client.meta.config
    assert store.client.meta.region_name == "auto"
    assert cfg.request_checksum_calculation == "when_required"
    assert cfg.response_checksum_validation == "when_required"
    assert cfg.retries == {"mode": "standard", "total_max_attempts": 6}
    assert (cfg.connect_timeout, cfg.read_timeout) == (3, 40)
    assert cfg.signature_version == "s3v4"


def test_job_stores_pages_and_manifest(loop, make_worker, s3_endpoint: str, bucket: str) -> None:
    worker, _ = make_worker(bucket_settings(s3_endpoint, bucket))
    pages = samples.numbered_pages(2, lines=3)
    job = {
        "pdf": {"base64": b64(samples.pdf_from_pages(pages))},
        "output_prefix": "cases/42",
        "presign_urls": True,
    }
    result = loop.run(worker.run("j1", job))
    assert result.status == "ok" and result.store == "s3"
    assert [p.key for p in result.pages] == [
        "ocr/cases/42/page-0001.md",
        "ocr/cases/42/page-0002.md",
    ]
    for page, truth in zip(result.pages, pages, strict=True):
        text, obj = get_text(s3_endpoint, bucket, page.key or "")
        assert obj["ContentType"] == "text/markdown; charset=utf-8"
        assert similarity(text, samples.page_text(truth)) >= 0.9
        assert httpx.get(page.url or "").text == text  # the presigned URL serves it over HTTP
    manifest = json.loads(get_text(s3_endpoint, bucket, "ocr/cases/42/manifest.json")[0])
    assert [p["key"] for p in manifest["pages"]] == [p.key for p in result.pages]
    assert all("url" not in p for p in manifest["pages"]) and "manifest_url" not in manifest
    assert manifest["fingerprint"]["engine"] == "rapidocr" and "id" in manifest["fingerprint"]
    assert json.loads(httpx.get(result.manifest_url or "").text)["job_id"] == "j1"
    listed = client(s3_endpoint).list_objects_v2(Bucket=bucket, Prefix="ocr/cases/42/document.")
    assert len(listed.get("Contents", [])) == 2
    # one page of it read again under the prefix: the whole's document.md and .txt are removed
    assert loop.run(worker.run("j2", job | {"pages": "2"})).status == "ok"
    listed = client(s3_endpoint).list_objects_v2(Bucket=bucket, Prefix="ocr/cases/42/document.")
    assert not listed.get("Contents")


def test_inputs_by_bucket_key(loop, make_worker, s3_endpoint: str, bucket: str) -> None:
    s3 = client(s3_endpoint)
    pages = samples.numbered_pages(1, lines=3)
    s3.put_object(Bucket=bucket, Key="uploads/case-42.pdf", Body=samples.pdf_from_pages(pages))
    s3.put_object(
        Bucket=bucket, Key="uploads/p1.png", Body=png_bytes(page_image(["Key image page."]))
    )
    worker, _ = make_worker(bucket_settings(s3_endpoint, bucket, max_download_bytes=2_000_000))
    result = loop.run(
        worker.run("k1", {"pdf": {"key": "uploads/case-42.pdf"}, "return_text": True})
    )
    assert result.status == "ok", result
    assert similarity(result.pages[0].text or "", samples.page_text(pages[0])) >= 0.9
    result = loop.run(
        worker.run("k2", {"images": [{"key": "uploads/p1.png"}, {"key": "uploads/none.png"}]})
    )
    assert result.pages[0].status == "ok"
    assert "input.images[1].key: no object 'uploads/none.png'" in (result.pages[1].error or "")
    result = loop.run(worker.run("k3", {"pdf": {"key": "uploads/missing.pdf"}}))
    assert (result.error or "").startswith("input.pdf.key: no object 'uploads/missing.pdf'")
    s3.put_object(Bucket=bucket, Key="uploads/huge.pdf", Body=b"%PDF" + b"0" * 2_100_000)
    result = loop.run(worker.run("k4", {"pdf": {"key": "uploads/huge.pdf"}}))
    assert "over the 2 MB limit" in (result.error or "")


def test_a_key_read_from_a_bucket_that_does_not_exist_names_the_bucket(
    loop, make_worker, s3_endpoint: str
) -> None:
    worker, _ = make_worker(bucket_settings(s3_endpoint, f"nosuch-{uuid.uuid4().hex[:8]}"))
    result = loop.run(worker.run("nb", {"pdf": {"key": "uploads/two.pdf"}}))
    assert result.status == "failed" and "does not exist (BUCKET_NAME)" in (result.error or "")
    assert "upload it first" not in (result.error or "")


def test_rerun_reuses_pages_and_changed_prompt_recognizes_again(
    loop, make_worker, s3_endpoint: str, bucket: str
) -> None:
    worker, engine = make_worker(bucket_settings(s3_endpoint, bucket))
    job = {
        "pdf": {"base64": b64(samples.pdf_from_pages(samples.numbered_pages(3, lines=2)))},
        "output_prefix": "resume",
        "prompt": "markdown",
    }
    first = loop.run(worker.run("r1", job))
    assert engine.calls == 3 and first.totals.reused == 0
    again = loop.run(worker.run("r1", job))
    assert engine.calls == 3, "stored pages must not be recognized again"
    assert [p.reused for p in again.pages] == [True] * 3
    manifest = json.loads(get_text(s3_endpoint, bucket, "ocr/resume/manifest.json")[0])
    assert [p["reused"] for p in manifest["pages"]] == [True] * 3
    changed = loop.run(worker.run("r1", job | {"prompt": "plain"}))
    assert engine.calls == 6 and changed.totals.reused == 0


def test_retries_ride_out_500s_and_stalls(loop, make_worker, s3_endpoint: str, bucket: str) -> None:
    proxy = proxy_for(s3_endpoint)
    failures = {"page-0001.md": 2, "page-0002.md": 1}

    def rule(method: str, path: str):
        for name, left in failures.items():
            if method == "PUT" and path.endswith(name) and left:
                failures[name] -= 1
                return ("status", 500) if name.endswith("1.md") else ("stall", 3)
        return None

    proxy.rule = rule
    try:
        # the stall outlasts the read's time limit, which this test is about
        worker, _ = make_worker(bucket_settings(proxy.url, bucket, bucket_read_timeout_s=2))
        result = loop.run(worker.run("f1", pdf_job(samples.numbered_pages(2, lines=2), "flaky")))
    finally:
        proxy.close()
    assert result.status == "ok", result.error
    outcomes = [o for m, p, o in proxy.seen if m == "PUT" and "page-000" in p]
    assert outcomes.count("500") == 2 and outcomes.count("stall") == 1
    for page in result.pages:
        assert get_text(s3_endpoint, bucket, page.key or "")[0]


def test_bucket_failing_past_retries_says_what_is_stored(
    loop, make_worker, s3_endpoint: str, bucket: str
) -> None:
    proxy = proxy_for(s3_endpoint)
    proxy.rule = lambda m, p: ("status", 500) if m == "PUT" and p.endswith("page-0003.md") else None
    try:
        settings = bucket_settings(
            proxy.url, bucket, bucket_max_attempts=2, job_max_concurrent_pages=1
        )
        worker, _ = make_worker(settings)
        result = loop.run(worker.run("b1", pdf_job(samples.numbered_pages(4, lines=2), "broken")))
    finally:
        proxy.close()
    assert result.status == "partial" and result.retry
    assert "Stored pages: 1-2; not stored: 3-4" in (result.error or "")
    assert "InternalError" in (result.error or "")
    statuses = {p.page: p.status for p in result.pages}
    assert statuses == {1: "ok", 2: "ok", 3: "failed", 4: "failed"}
    manifest = json.loads(get_text(s3_endpoint, bucket, "ocr/broken/manifest.json")[0])
    assert [p["status"] for p in manifest["pages"]] == ["ok", "ok", "failed", "failed"]
    s3 = client(s3_endpoint)
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="ocr/broken/")["Contents"]}
    # page 3's blocks were written before its text failed; its report says failed, and the
    # next run writes both again (reuse keys on the text's record)
    assert keys == {
        "ocr/broken/page-0001.md",
        "ocr/broken/page-0001.json",
        "ocr/broken/page-0002.md",
        "ocr/broken/page-0002.json",
        "ocr/broken/page-0003.json",
        "ocr/broken/manifest.json",
    }


@pytest.fixture
def auth_s3(tmp_path: Path) -> Iterator[str]:
    """A second S3 server that checks credentials (moto with auth from the first request)."""
    import os
    import sys

    port = free_port()
    env = os.environ | {"INITIAL_NO_AUTH_ACTION_COUNT": "0"}  # (the session's, scrubbed)
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    wait_for_http(url, proc, timeout_s=300)  # moto starts in seconds; a busy machine, longer
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_wrong_credentials_give_clear_error(loop, make_worker, auth_s3: str) -> None:
    worker, _ = make_worker(
        bucket_settings(auth_s3, "no-such-access", bucket_access_key_id="wrong")
    )
    job = {"pdf": {"base64": b64(samples.pdf_from_pages(samples.numbered_pages(1, lines=2)))}}
    result = loop.run(worker.run("w1", job))
    assert result.status == "failed" and result.retry
    assert "access denied (403)" in (result.error or "")
    assert "BUCKET_ACCESS_KEY_ID" in (result.error or "")
    assert "Stored pages: none" in (result.error or "")


def test_sixteen_jobs_at_once_into_one_bucket(
    loop, make_worker, s3_endpoint: str, bucket: str
) -> None:
    worker, _ = make_worker(bucket_settings(s3_endpoint, bucket, max_pixels=450_000))
    run_sixteen_jobs(loop, worker, "many", lambda key: get_text(s3_endpoint, bucket, key)[0])


def test_uploads_overlap_recognition(loop, make_worker, s3_endpoint: str, bucket: str) -> None:
    """Page 1's upload is held open until the uploads of pages 2 and 3 have both arrived: it can
    only be released if those pages were recognized and stored while it was still open."""
    proxy = proxy_for(s3_endpoint)
    arrived: set[str] = set()

    def rule(method: str, path: str):
        name = path.rsplit("/", 1)[-1]
        if method == "PUT" and name in ("page-0002.md", "page-0003.md"):
            arrived.add(name)
            if len(arrived) == 2:
                proxy.release.set()
        if method == "PUT" and name == "page-0001.md":
            return ("hold", 300.0)
        return None

    proxy.rule = rule
    try:
        settings = bucket_settings(proxy.url, bucket, bucket_read_timeout_s=400)
        worker, _ = make_worker(settings)
        job = pdf_job(samples.numbered_pages(3, lines=2), "overlap")
        result = loop.run(worker.run("o1", job))
    finally:
        proxy.close()
    assert result.status == "ok", result.error
    held = [o for m, p, o in proxy.seen if m == "PUT" and p.endswith("page-0001.md")]
    assert held[0] == "released", "page 1's upload was released by the uploads of pages 2-3"


def test_a_fault_of_ours_is_no_bucket_error(loop) -> None:
    from botocore.exceptions import EndpointConnectionError

    from vlm_ocr.errors import StorageError
    from vlm_ocr.storage import Bucket

    bucket = Bucket(None, "results")

    def unreachable(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

    def mistaken(**_: Any) -> None:
        raise TypeError("get_object() got an unexpected keyword argument 'Kye'")

    with pytest.raises(StorageError, match=r"GET s3://results/a\.md: the bucket could not be"):
        loop.run(bucket.call("GET", "a.md", unreachable))
    with pytest.raises(TypeError, match="Kye"):  # a bug says itself, not "could not be reached"
        loop.run(bucket.call("GET", "a.md", mistaken))
