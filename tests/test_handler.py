"""The handler as users run it: `--test_input` in a subprocess, and the SDK's local API server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from vlm_ocr import samples
from vlm_ocr.textsim import similarity

from .conftest import ROOT, b64, free_port, serve_api, wait_for_http


def handler_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNPOD_", "BUCKET_"))}
    env.update(OUTPUT_DIR=str(tmp_path / "out"), RUNPOD_LOG_LEVEL="ERROR")
    env.update(extra)
    return env


def test_test_input_json_runs_and_prints_result(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "handler.py", "--test_input", (ROOT / "test_input.json").read_text()],
        cwd=ROOT,
        env=handler_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert result["status"] == "ok" and result["totals"]["pages"] == 2
    for page, truth in zip(result["pages"], samples.LEGAL_PAGES, strict=True):
        stored = (tmp_path / "out" / page["key"]).read_text(encoding="utf-8")
        assert stored == page["text"]
        assert similarity(stored, samples.page_text(truth)) >= 0.9, stored
    assert (tmp_path / "out/demo/lease/manifest.json").is_file()
    assert "INFO vlm_ocr.worker: engine ready" in proc.stderr  # LOG_LEVEL's default, INFO


def test_log_level_takes_effect(tmp_path: Path) -> None:
    # The RunPod SDK configures logging when it is imported; the worker's level still wins.
    proc = subprocess.run(
        [sys.executable, "handler.py", "--test_input", (ROOT / "test_input.json").read_text()],
        cwd=ROOT,
        env=handler_env(tmp_path, LOG_LEVEL="WARNING"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "INFO vlm_ocr" not in proc.stderr and '"status": "ok"' in proc.stdout


def test_bad_test_input_exits_non_zero_with_field(tmp_path: Path) -> None:
    job = {"input": {"pdf": {"base64": b64(b"%PDF-1.7 truncated")}}}
    proc = subprocess.run(
        [sys.executable, "handler.py", "--test_input", json.dumps(job)],
        cwd=ROOT,
        env=handler_env(tmp_path, RUNPOD_LOG_LEVEL="INFO"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert "input.pdf.base64: the PDF is corrupt or truncated" in proc.stdout + proc.stderr


def test_a_model_the_image_lacks_fails_every_job_with_one_line(tmp_path: Path) -> None:
    # The image baked one model; MODEL_NAME names another and the worker may not download it.
    hf_home = tmp_path / "hf"
    hf_home.mkdir()
    (hf_home / "baked-model.json").write_text(json.dumps({"repo": "org/baked-model"}))
    env = handler_env(tmp_path, ENGINE="vllm", MODEL_NAME="org/other-model", HF_HOME=str(hf_home))
    proc = subprocess.run(
        [sys.executable, "handler.py", "--test_input", (ROOT / "test_input.json").read_text()],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    says = (
        "MODEL_NAME is 'org/other-model', but this image has 'org/baked-model' baked in and does "
        "not download models at run time"
    )
    assert says in proc.stdout and says in proc.stderr
    assert "--build-arg MODEL_NAME=org/other-model" in proc.stdout


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("api")
    port = free_port()
    proc = serve_api(handler_env(tmp), port, stdout=subprocess.DEVNULL)
    wait_for_http(f"http://127.0.0.1:{port}/docs", proc, timeout_s=120)
    yield f"http://127.0.0.1:{port}", tmp / "out"
    proc.terminate()
    proc.wait(timeout=30)


def test_runsync_over_http(api_server) -> None:
    url, out = api_server
    pages = samples.numbered_pages(2, lines=3)
    job = {
        "input": {"pdf": {"base64": b64(samples.pdf_from_pages(pages))}, "output_prefix": "api/one"}
    }
    resp = httpx.post(url + "/runsync", json=job, timeout=120)
    assert resp.status_code == 200
    body = resp.json()
    assert body["status"] == "COMPLETED", body
    output = body["output"]
    assert output["totals"]["ok"] == 2
    for page, truth in zip(output["pages"], pages, strict=True):
        assert similarity((out / page["key"]).read_text(), samples.page_text(truth)) >= 0.9


def test_runsync_bad_input_is_failed_job(api_server) -> None:
    url, _ = api_server
    body = httpx.post(
        url + "/runsync", json={"input": {"pdf": {"url": "ftp://x"}}}, timeout=60
    ).json()
    assert body["status"] == "FAILED"
    assert "input.pdf.url" in body["error"] and "https" in body["error"]


def test_each_page_reports_progress_through_the_sdk(monkeypatch, loop, worker) -> None:
    import asyncio

    import runpod

    import handler as entry

    sent: list[tuple[str, dict]] = []
    monkeypatch.setenv("RUNPOD_WEBHOOK_GET_JOB", "https://api.runpod.invalid/job-take")
    monkeypatch.setattr(
        runpod.serverless, "progress_update", lambda job, p: sent.append((job["id"], p))
    )
    job = {
        "id": "job-p",
        "input": {
            "pdf": {"base64": b64(samples.pdf_from_pages(samples.numbered_pages(3, lines=2)))}
        },
    }
    result = asyncio.run(entry.make_handler(loop, worker)(job))
    assert result["status"] == "ok"
    assert sorted(p["done"] for _, p in sent) == [1, 2, 3]
    assert {job_id for job_id, _ in sent} == {"job-p"}
    assert sorted(p["page"] for _, p in sent) == [1, 2, 3] and all(p["total"] == 3 for _, p in sent)
