"""The handler as users run it: `--test_input` in a subprocess, and the SDK's local API server."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from vlm_ocr import samples
from vlm_ocr.contract import (
    FailedItem,
    JobResult,
    PageItem,
    ResultItem,
    final_item,
    read_item,
)
from vlm_ocr.entry import runpod as entry
from vlm_ocr.entry.arguments import check_arguments, parser
from vlm_ocr.entry.one_shot import OneShot
from vlm_ocr.pipeline.textsim import similarity
from vlm_ocr_lab.standins.fakes import FakeEngine

from .support import (
    FAX,
    ROOT,
    b64,
    encrypted_pdf,
    fax,
    fax_with_a_huge_page,
    handler_env,
    make_settings,
    new_worker,
    page_image,
    png_bytes,
    start_api,
)


@pytest.mark.parametrize("option", ["--test-input", "--test_inptu", "--input"])
def test_a_misspelled_option_is_refused_before_anything_runs(option: str, tmp_path: Path) -> None:
    # In a folder with a test_input.json the SDK would ignore the option and run that job.
    (tmp_path / "test_input.json").write_text((ROOT / "test_input.json").read_text())
    job = json.dumps({"input": {"pdf": {"url": "https://example.com/a.pdf"}}})
    proc = subprocess.run(
        [sys.executable, str(ROOT / "handler.py"), option, job],
        cwd=tmp_path,
        env=handler_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    [line] = proc.stderr.splitlines()  # one line: no engine started, no job run
    assert f"unknown option {option}; did you mean --test_input?" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--rp-serve-api"], "unknown option --rp-serve-api; did you mean --rp_serve_api?"),
        (["--rp_serve"], "unknown option --rp_serve; did you mean --rp_serve_api?"),
        (["--frobnicate"], "unknown option --frobnicate; accepted: --test_input, --rp_serve_api"),
        (["test_input.json"], "unexpected argument 'test_input.json': give the job as"),
        (["--rp_api_port", "http"], "argument --rp_api_port: invalid int value: 'http'"),
        (["--rp_log_level", "LOUD"], "argument --rp_log_level: 'LOUD' is not a log level"),
        (["--test_input"], "argument --test_input: expected one argument"),
    ],
)
def test_every_argument_the_sdk_would_not_take_is_one_line_and_status_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        check_arguments(["handler.py", *argv])
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"handler.py: {says}") and line.endswith("(see handler.py --help)")


def test_the_handler_takes_the_sdks_options_and_no_other() -> None:
    import runpod.serverless

    sdk = runpod.serverless.parser
    assert {o for a in sdk._actions for o in a.option_strings} == {
        o for a in parser()._actions for o in a.option_strings
    }
    every_option = (
        "--rp_serve_api --rp_api_host 127.0.0.1 --rp_api_port=8001 --rp_api_concurrency 1 "
        "--rp_debugger --rp_log_level debug"
    )
    check_arguments(["handler.py", *every_option.split()])  # taken: no exit


def test_test_input_json_runs_and_prints_result(tmp_path: Path) -> None:
    env = handler_env(tmp_path)
    del env["RUNPOD_LOG_LEVEL"]  # as a user runs it: the SDK at its own default level (DEBUG)
    proc = subprocess.run(
        [sys.executable, "handler.py", "--test_input", (ROOT / "test_input.json").read_text()],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)  # stdout is the result alone, one JSON document
    assert result["status"] == "ok" and result["totals"]["pages"] == 2
    for page, truth in zip(result["pages"], samples.LEGAL_PAGES, strict=True):
        stored = (tmp_path / "out" / page["key"]).read_text(encoding="utf-8")
        assert stored == page["text"]
        assert similarity(stored, samples.page_text(truth)) >= 0.9, stored
    assert (tmp_path / "out/demo/lease/manifest.json").is_file()
    assert "INFO vlm_ocr.pipeline.worker: engine ready" in proc.stderr  # LOG_LEVEL's default, INFO


def test_log_level_takes_effect_and_the_sdks_lines_stay_off_stdout(tmp_path: Path) -> None:
    # The RunPod SDK configures logging when it is imported; the worker's level still wins. Its
    # own lines at DEBUG (the payload, the result again) go to stderr: stdout is the result.
    proc = subprocess.run(
        [sys.executable, "handler.py", "--test_input", (ROOT / "test_input.json").read_text()],
        cwd=ROOT,
        env=handler_env(tmp_path, LOG_LEVEL="WARNING", RUNPOD_LOG_LEVEL="DEBUG"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "INFO vlm_ocr" not in proc.stderr
    assert json.loads(proc.stdout)["status"] == "ok"
    assert "Starting Serverless Worker" in proc.stderr and "DEBUG  | " in proc.stderr


def one_shot(
    job_text: str, tmp_path: Path, *, sdk_default: bool = False
) -> subprocess.CompletedProcess[str]:
    """`handler.py --test_input JOB`; `sdk_default`: as a user runs it, no RUNPOD_LOG_LEVEL."""
    env = handler_env(tmp_path)
    if sdk_default:
        del env["RUNPOD_LOG_LEVEL"]
    return subprocess.run(
        [sys.executable, "handler.py", "--test_input", job_text],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("job_text", "says"),
    [
        ("{bad", "--test_input: not JSON (Expecting property name"),
        ("[1]", "--test_input: a JSON list; accepted: one JSON object"),
        ('{"inpt": {}}', '--test_input: no "input" in it; accepted: one JSON object'),
        ('{"input": ' + "[" * 5000 + "]" * 5000 + "}", "--test_input: not JSON that can be read"),
    ],
)
def test_a_test_input_that_is_no_job_is_one_line_and_a_failed_result(
    job_text: str, says: str, tmp_path: Path
) -> None:
    proc = one_shot(job_text, tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()  # one line: no traceback, no engine started
    assert says in line
    result = json.loads(proc.stdout)
    assert result["status"] == "failed" and result["error"].startswith(says)
    assert result["errors"] == [result["error"]]  # every problem is listed, this one too


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b64(b"meeting notes\n"), "input.pdf.base64: the data is not a PDF"),
        ("%%% not base64", "input.pdf.base64: not valid base64"),
    ],
)
def test_an_inline_pdf_that_is_none_is_refused_before_the_engine_starts(
    data: str, says: str, tmp_path: Path
) -> None:
    proc = one_shot(json.dumps({"input": {"pdf": {"base64": data}}}), tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()  # the worker was never built: no engine line
    assert says in line and json.loads(proc.stdout)["error"].startswith(says)


@pytest.mark.parametrize(
    ("job_input", "says"),
    [
        ({"pdf": {"url": "https://"}}, "input.pdf.url: 'https://' has no host; give the whole"),
        (
            {"pdf": {"url": "http://example.com/a.pdf"}},
            "input.pdf.url: 'http://example.com/a.pdf' is not an https URL",
        ),
        (
            {"pdf": {"key": "scans/a.pdf"}},
            "input.pdf.key: inputs named by `key` are read from the bucket, and no bucket is "
            "configured",
        ),
        (
            {"images": [{"key": "a.png"}, {"url": "ftp://example.com/b.png"}]},
            "input.images[0].key: inputs named by `key` are read from the bucket",
        ),
    ],
)
def test_a_file_that_cannot_be_fetched_is_refused_before_the_engine_starts(
    job_input: dict, says: str, tmp_path: Path
) -> None:
    proc = one_shot(json.dumps({"input": job_input}), tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()  # the worker was never built: no engine line
    assert says in line and json.loads(proc.stdout)["error"].startswith(says)


def test_the_one_shot_refuses_in_the_words_the_worker_would(run, tmp_path: Path) -> None:
    for job_input in ({"pdf": {"key": "scans/a.pdf"}}, {"pdf": {"url": "https://"}}):
        out = io.StringIO()
        with pytest.raises(SystemExit):
            OneShot(out, {"input": job_input}).check(make_settings(tmp_path))
        assert json.loads(out.getvalue())["error"] == run(job_input).error
    # One image that cannot be fetched fails alone: the job runs.
    good = {"base64": b64(png_bytes(page_image(["A readable page."])))}
    OneShot(io.StringIO(), {"input": {"images": [{"key": "a.png"}, good]}}).check(
        make_settings(tmp_path)
    )


TWO_PAGES = b64(samples.pdf_from_pages(samples.numbered_pages(2, lines=2)))
NOT_AN_IMAGE = b64(b"meeting notes\n")


@pytest.mark.parametrize(
    ("job_input", "says"),
    [
        (
            {"pdf": {"base64": b64(encrypted_pdf())}},
            "input.pdf.base64: the PDF is encrypted with a password; send an unencrypted copy",
        ),
        (
            {"pdf": {"base64": TWO_PAGES}, "pages": "5-9"},
            "input.pages: '5-9' selects no page of this document, which has 2 pages",
        ),
        (
            {"images": [{"base64": NOT_AN_IMAGE}, {"url": "http://example.com/b.png"}]},
            "input.images[0].base64: ",
        ),
    ],
)
def test_a_document_sent_inline_that_cannot_be_read_is_refused_before_the_engine_starts(
    job_input: dict, says: str, tmp_path: Path
) -> None:
    proc = one_shot(json.dumps({"input": job_input}), tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()  # the worker was never built: no engine line
    assert "ERROR" in line and says in line
    assert json.loads(proc.stdout)["error"].startswith(says)


def test_the_one_shot_opens_a_document_as_the_worker_would(run, tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    for job_input in (
        {"pdf": {"base64": b64(encrypted_pdf())}},
        {"pdf": {"base64": TWO_PAGES}, "pages": "5-9"},
        {"pdf": {"base64": b64(b"%PDF-1.7 truncated")}},
        # a TIFF sent as the PDF: its pages counted as the PDF the job makes of them has them
        {"pdf": {"base64": b64(fax(FAX))}, "pages": "5-9"},
        {"pdf": {"base64": b64(fax_with_a_huge_page())}},
    ):
        out = io.StringIO()
        with pytest.raises(SystemExit):
            OneShot(out, {"input": job_input}).check(settings)
        assert json.loads(out.getvalue())["error"] == run(job_input).error
    # What the job reads some of runs: pages past the end beside pages inside it, an image
    # beside one that is none, and a URL (fetched by the job alone).
    good = {"base64": b64(png_bytes(page_image(["A readable page."])))}
    for job_input in (
        {"pdf": {"base64": TWO_PAGES}, "pages": "2-9"},
        {"images": [{"base64": NOT_AN_IMAGE}, good]},
        {"pdf": {"url": "https://example.com/a.pdf"}},
        {"pdf": {"base64": b64(fax(FAX))}, "pages": "2-9"},
    ):
        OneShot(io.StringIO(), {"input": job_input}).check(settings)


def test_the_one_shot_opens_a_document_under_the_render_limits(tmp_path: Path) -> None:
    # apart from the main process and within RENDER_TIMEOUT_S, as the job's render processes
    # open it: no crafted file stalls the laptop's worker before its engine starts
    out = io.StringIO()
    with pytest.raises(SystemExit):
        settings = make_settings(tmp_path, render_timeout_s=0.001)
        OneShot(out, {"input": {"pdf": {"base64": TWO_PAGES}}}).check(settings)
    error = json.loads(out.getvalue())["error"]
    assert (
        error.startswith("input.pdf.base64: rendering was stopped") and "RENDER_TIMEOUT_S" in error
    )


def test_a_failed_job_says_its_error_on_stderr_in_one_line(tmp_path: Path) -> None:
    # Its header reads, so the job runs; the image is cut short, so its one page fails.
    png = png_bytes(page_image(["A readable page."]))
    job = {"input": {"images": [{"base64": b64(png[: len(png) // 2])}]}}
    proc = one_shot(json.dumps(job), tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["status"] == "failed"
    [line] = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert line.endswith(f"job local_test failed: {result['error']}")


@pytest.mark.parametrize("name", ["test_input.json", "README.md", "job.json"])
def test_a_file_name_for_test_input_says_how_to_give_its_contents(
    name: str, tmp_path: Path
) -> None:
    # run in the project's folder: test_input.json and README.md are there, job.json is not
    proc = one_shot(name, tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert line.endswith(
        f"--test_input: {name!r} is a file's name, not JSON; --test_input takes the job's JSON "
        f'itself; for a file: --test_input "$(cat {name})"'
    )
    assert json.loads(proc.stdout)["status"] == "failed"


def test_a_job_with_a_failed_page_exits_1_with_its_error_and_no_sdk_line(
    tmp_path: Path,
) -> None:
    good = png_bytes(page_image(["A readable page."]))
    images = [{"base64": b64(good)}, {"base64": b64(good[: len(good) // 2])}]
    # as a user runs it: the SDK's own lines left out
    proc = one_shot(json.dumps({"input": {"images": images}}), tmp_path, sdk_default=True)
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["status"] == "partial" and result["totals"]["ok"] == 1
    assert result["error"].startswith(
        "1 of 2 pages failed: page 2: input.images[1]: the image is corrupt or truncated"
    )
    assert "failed with error" not in proc.stderr and "ERROR  |" not in proc.stderr


def test_no_job_at_all_is_one_line(tmp_path: Path) -> None:
    # No --test_input and no test_input.json where it runs: said at once, no engine started.
    proc = subprocess.run(
        [sys.executable, str(ROOT / "handler.py")],
        cwd=tmp_path,
        env=handler_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert "no job to run: give --test_input" in line and "test_input.json" in line
    assert json.loads(proc.stdout)["status"] == "failed"


def test_a_bad_job_is_refused_with_every_problem_before_the_engine_starts(tmp_path: Path) -> None:
    proc = one_shot(json.dumps({"input": {"pages": 5, "return_text": "yes"}}), tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()  # the worker was never built: no engine line
    result = json.loads(proc.stdout)
    assert [e.split(":")[0] for e in result["errors"]] == [
        "input.pages",
        "input.return_text",
        "input",
    ]
    assert all("accepted: " in e or "give exactly one" in e for e in result["errors"])
    assert result["error"] in line


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
    says = "input.pdf.base64: the PDF is corrupt or truncated"
    assert json.loads(proc.stdout)["error"].startswith(says)


def run_demo_job(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python handler.py --test_input` with the demo job, in a worker with `env`."""
    return subprocess.run(
        [sys.executable, "handler.py", "--test_input", (ROOT / "test_input.json").read_text()],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_model_the_image_lacks_fails_every_job_with_one_line(tmp_path: Path) -> None:
    # The image baked one model; MODEL_NAME names another and the worker may not download it.
    hf_home = tmp_path / "hf"
    hf_home.mkdir()
    (hf_home / "baked-model.json").write_text(json.dumps({"repo": "org/baked-model"}))
    env = handler_env(tmp_path, ENGINE="vllm", MODEL_NAME="org/other-model", HF_HOME=str(hf_home))
    proc = run_demo_job(env)
    says = (
        "MODEL_NAME is 'org/other-model', but this image has 'org/baked-model' baked in and does "
        "not download models at run time"
    )
    assert says in proc.stdout and says in proc.stderr
    assert "--build-arg MODEL_NAME=org/other-model" in proc.stdout


@pytest.mark.parametrize(
    ("engine", "bad", "says"),
    [
        ("rapidocr", {"DEFAULT_PROMPT": "poetry"}, "DEFAULT_PROMPT='poetry': no such preset"),
        ("vllm", {"DEFAULT_PROMPT": "poetry"}, "DEFAULT_PROMPT='poetry': no such preset"),
        ("openai", {"MAX_PIXELS": "lots"}, "MAX_PIXELS='lots': Input should be a valid integer"),
        ("openai", {}, "ENGINE=openai needs OPENAI_BASE_URL"),
        ("rapidocr", {"BUCKET_NAME": "x"}, "BUCKET_NAME is set but BUCKET_ENDPOINT_URL, BUCKET_"),
    ],
)
def test_settings_no_job_can_run_with_fail_every_job_with_one_line(
    tmp_path: Path, engine: str, bad: dict[str, str], says: str
) -> None:
    env = handler_env(tmp_path, ENGINE=engine, MODEL_NAME="org/m", **bad)
    proc = run_demo_job(env)
    assert says in proc.stdout and says in proc.stderr and "Traceback" not in proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "failed" and result["error"].startswith(
        "the worker is misconfigured: "
    )
    if bad:  # the value and what is accepted
        assert "accepted: " in result["error"]


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("api")
    env = handler_env(tmp)
    del env["RUNPOD_LOG_LEVEL"]  # at the SDK's default, as on RunPod
    # the SDK's lines go to stdout, the worker's to stderr
    with (tmp / "server.log").open("w") as log:
        proc, url = start_api(env, timeout_s=120, stdout=log, stderr=log)
        yield url, tmp / "out"
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
    # The handler streams: the aggregated output is the pages as they were stored, then the result.
    *pages_streamed, last = body["output"]
    assert sorted(item["page"]["page"] for item in pages_streamed) == [1, 2]
    output = last["result"]
    assert last["event"] == "result" and output["totals"]["ok"] == 2
    for page, truth in zip(output["pages"], pages, strict=True):
        assert similarity((out / page["key"]).read_text(), samples.page_text(truth)) >= 0.9
    # The SDK's default level (DEBUG) would log every item, presigned URLs and text included: the
    # worker keeps it at INFO.
    log = (out.parent / "server.log").read_text()
    assert f"job {body['id']}: page 2 ok" in log and "output:" not in log
    assert samples.page_text(pages[0]).splitlines()[0] not in log


def test_runsync_bad_input_is_failed_job(api_server) -> None:
    url, _ = api_server
    body = httpx.post(
        url + "/runsync", json={"input": {"pdf": {"url": "ftp://x"}}}, timeout=60
    ).json()
    # A job that stores nothing ends with its error as the last item (RunPod marks the job
    # failed; the SDK's local server lists the item).
    error = body.get("error") or body["output"][-1]["error"]
    assert "input.pdf.url" in error and "https" in error


def test_each_page_reports_progress_through_the_sdk(monkeypatch, loop, worker) -> None:
    import asyncio

    import runpod

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
    shown: list[dict] = []
    result = asyncio.run(entry.make_handler(loop, worker, shown.append)(job))
    assert result["status"] == "ok" and shown == [result]
    assert sorted(p["done"] for _, p in sent) == [1, 2, 3]
    assert {job_id for job_id, _ in sent} == {"job-p"}
    assert sorted(p["page"] for _, p in sent) == [1, 2, 3] and all(p["total"] == 3 for _, p in sent)


def stream_items(loop, worker, job: dict, on_item=None) -> list[dict]:
    import asyncio

    async def consume() -> list[dict]:
        items = []
        async for item in entry.make_stream_handler(loop, worker)(job):
            items.append(item)
            if on_item:
                on_item(items)
        return items

    return asyncio.run(consume())


def test_pages_stream_as_they_are_stored_then_the_result(tmp_path, loop, cpu_pool) -> None:
    engine = FakeEngine(concurrency=4)
    engine.hold(3)
    worker = new_worker(loop, make_settings(tmp_path), engine, cpu_pool)
    pdf = samples.pdf_from_pages(samples.numbered_pages(3, lines=2))
    job = {"id": "job-s", "input": {"pdf": {"base64": b64(pdf)}, "return_text": True}}

    # The third page's answer is held until two pages have been streamed: the job cannot have
    # ended before they arrived.
    items = stream_items(loop, worker, job, lambda got: len(got) == 2 and engine.release())
    *pages, last = [read_item(item) for item in items]
    assert all(isinstance(item, PageItem) for item in pages)
    assert [item.done for item in pages] == [1, 2, 3]
    assert {item.total for item in pages} == {3}
    assert sorted(item.page.page for item in pages) == [1, 2, 3]
    for item in pages:
        page = item.page
        assert page.status == "ok" and (page.text or "").startswith("text ")
        assert (tmp_path / "out" / str(page.key)).read_text() == page.text
    assert isinstance(last, ResultItem) and last.result.status == "ok"
    assert last.result.totals.ok == 3


def test_a_job_runpod_stops_leaves_a_manifest_of_the_pages_done(tmp_path, loop, cpu_pool) -> None:
    import asyncio
    import time

    engine = FakeEngine(concurrency=4)
    engine.hold(3)  # the third page's answer never comes: the job is stopped waiting for it
    worker = new_worker(loop, make_settings(tmp_path), engine, cpu_pool)
    pdf = samples.pdf_from_pages(samples.numbered_pages(3, lines=2))
    job = {"id": "job-x", "input": {"pdf": {"base64": b64(pdf)}, "output_prefix": "stopped"}}

    async def consume_two() -> None:  # then stop, as the SDK does: it cancels the handler's task
        stream = entry.make_stream_handler(loop, worker)(job)
        for _ in range(2):
            await anext(stream)
        await stream.aclose()

    caller = asyncio.new_event_loop()  # closed at once after the handler ends, as a loop may be:
    try:  # the job is cancelled by closing the handler, not by a later step of this loop
        caller.run_until_complete(consume_two())
    finally:
        caller.close()
    manifest = tmp_path / "out/stopped/manifest.json"
    deadline = time.monotonic() + 120  # written on the worker's loop, once the task is cancelled
    while not manifest.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    engine.release()
    stopped = JobResult.model_validate_json(manifest.read_text())
    assert stopped.status == "partial" and stopped.retry
    assert [p.page for p in stopped.pages] == [1, 2, 3]
    [held] = [p for p in stopped.pages if p.status != "ok"]  # whichever page asked third
    assert held.status == "failed" and held.error_stage == "stopped"
    assert stopped.error == (
        "the job was stopped (cancelled, or out of time): 2 of 3 pages stored, the rest not "
        "processed; submitting it again reads only the pages missing"
    )


def test_a_failed_page_streams_as_a_page_and_the_job_completes(tmp_path, loop, cpu_pool) -> None:
    worker = new_worker(loop, make_settings(tmp_path), FakeEngine(concurrency=4), cpu_pool)
    good = b64(png_bytes(page_image(["A readable page."])))
    job = {"id": "job-f", "input": {"images": [{"base64": b64(b"not an image")}, {"base64": good}]}}
    *pages, last = stream_items(loop, worker, job)
    # No top-level `error` in a page item: the SDK would end the job on it.
    assert all("error" not in item for item in pages)
    failed = next(item["page"] for item in pages if item["page"]["status"] == "failed")
    assert failed["page"] == 1 and "input.images[0]" in failed["error"]
    # The job's error is under `result`, where the SDK does not take it for a failed job.
    assert "error" not in last and last["result"]["status"] == "partial"
    assert last["result"]["error"].startswith("1 of 2 pages failed: page 1: input.images[0]")


def test_a_job_that_stores_nothing_ends_the_stream_with_its_error(tmp_path, loop, cpu_pool) -> None:
    worker = new_worker(loop, make_settings(tmp_path), FakeEngine(concurrency=4), cpu_pool)
    items = stream_items(loop, worker, {"id": "job-e", "input": {"pdf": {"url": "ftp://x"}}})
    assert len(items) == 1 and "input.pdf.url" in items[0]["error"]


def test_a_job_the_engine_or_store_stopped_ends_as_a_failed_runpod_job() -> None:
    partial = JobResult(job_id="j", status="partial", error="page 3: not an image")
    assert final_item(partial) == ResultItem(result=partial)
    stopped = partial.model_copy(
        update={"error": "the engine failed …", "retry": True, "refresh_worker": True}
    )
    assert final_item(stopped) == FailedItem(error="the engine failed …")
    refused = JobResult.refused("j", "input: no page")
    assert final_item(refused) == FailedItem(error="input: no page")
    # The client reads back exactly what the worker sent, whichever the ending.
    for result in (partial, stopped, refused):
        wire = json.loads(json.dumps(final_item(result).model_dump(mode="json")))
        assert read_item(wire) == final_item(result)


def through_the_sdk_job_loop(
    monkeypatch: pytest.MonkeyPatch,
    loop,
    worker,
    job: dict,
    on_post: Callable[[list[str]], object] = lambda kinds: None,
) -> list[tuple[str, dict]]:
    """The RunPod SDK's own production path (`rp_job.handle_job`) with the stream handler, a
    loopback server in place of RunPod's job API: what it posted to the stream URL and to the
    done URL, in order. `on_post` sees the kinds posted so far after each post."""
    import asyncio

    import aiohttp
    from aiohttp import web
    from runpod.serverless.modules import rp_http, rp_job

    posts: list[tuple[str, dict]] = []

    async def receive(request: web.Request) -> web.Response:
        posts.append((request.path.strip("/"), json.loads(await request.text())))
        on_post([kind for kind, _ in posts])
        return web.Response(text="ok")

    async def run() -> None:
        app = web.Application()
        app.add_routes([web.post("/stream", receive), web.post("/done", receive)])
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        monkeypatch.setattr(rp_http, "JOB_STREAM_URL", base + "/stream?id=$ID")
        monkeypatch.setattr(rp_http, "JOB_DONE_URL", base + "/done?id=$ID")
        config = {
            "handler": entry.make_stream_handler(loop, worker),
            "return_aggregate_stream": True,
        }
        try:
            async with aiohttp.ClientSession() as session:
                await rp_job.handle_job(session, config, job)
        finally:
            await runner.cleanup()

    asyncio.run(run())
    return posts


def test_the_sdk_job_loop_streams_each_page_then_sends_the_whole_result(
    monkeypatch, tmp_path, loop, cpu_pool
) -> None:
    # Each page is posted to the stream URL as it is stored, and the aggregated list (pages,
    # then the result) to the done URL at the end.
    engine = FakeEngine(concurrency=4)
    engine.hold(3)
    worker = new_worker(loop, make_settings(tmp_path), engine, cpu_pool)
    pdf = samples.pdf_from_pages(samples.numbered_pages(3, lines=2))
    job = {"id": "job-sdk", "input": {"pdf": {"base64": b64(pdf)}}}

    def release(kinds: list[str]) -> None:
        if kinds == ["stream", "stream"]:
            engine.release()  # page 3 is answered only after two pages reached the stream

    posts = through_the_sdk_job_loop(monkeypatch, loop, worker, job, release)
    kinds = [kind for kind, _ in posts]
    assert kinds == ["stream"] * 4 + ["done"]
    streamed = [body["output"] for kind, body in posts if kind == "stream"]
    assert [item["done"] for item in streamed[:3]] == [1, 2, 3]
    assert sorted(item["page"]["page"] for item in streamed[:3]) == [1, 2, 3]
    assert streamed[3]["event"] == "result" and streamed[3]["result"]["status"] == "ok"
    done = posts[-1][1]
    assert "error" not in done and done["output"] == streamed


def test_a_job_with_a_failed_page_completes_as_a_runpod_job(
    monkeypatch, tmp_path, loop, cpu_pool
) -> None:
    worker = new_worker(loop, make_settings(tmp_path), FakeEngine(concurrency=4), cpu_pool)
    good = b64(png_bytes(page_image(["A readable page."])))
    job = {"id": "job-p", "input": {"images": [{"base64": good}, {"base64": b64(b"no image")}]}}
    kind, done = through_the_sdk_job_loop(monkeypatch, loop, worker, job)[-1]
    # No top-level `error` in what is sent when the job is done: RunPod marks it completed.
    assert kind == "done" and "error" not in done
    result = done["output"][-1]["result"]
    assert result["status"] == "partial"
    assert result["error"].startswith("1 of 2 pages failed: page 2: input.images[1]")
