"""`vlm-ocr submit` for real: worker processes on the RunPod SDK's local API server, behind a
stand-in for RunPod's endpoint routes, with moto's S3 server as the bucket."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vlm_ocr import samples
from vlm_ocr.local_endpoint import API_KEY, LocalEndpoint, worker_environ
from vlm_ocr.loopback_s3 import LoopbackS3, s3_client
from vlm_ocr.settings import Settings
from vlm_ocr.submit import Options, Submission
from vlm_ocr.textsim import similarity

from .conftest import ROOT, TEST_PIXELS

BUCKET = "fanout"


def worker_env(s3: LoopbackS3, tmp: Path) -> dict[str, str]:
    return worker_environ(
        **s3.env(BUCKET),
        ENGINE="rapidocr",
        RENDER_PROCESSES="1",
        MAX_PIXELS=str(TEST_PIXELS),
        OUTPUT_DIR=str(tmp / "unused"),
        RUNPOD_LOG_LEVEL="ERROR",
        LOG_LEVEL="WARNING",
        UVICORN_LOG_LEVEL="warning",
    )


class Endpoint(LocalEndpoint):
    """Two workers behind the stand-in endpoint, on the loopback bucket."""

    def __init__(self, s3: LoopbackS3, tmp: Path, *, throttle: int = 0) -> None:
        super().__init__(ROOT / "handler.py", worker_env(s3, tmp), 2, throttle=throttle)

    def settings(self, s3: LoopbackS3) -> Settings:
        return Settings(
            **s3.settings_update(BUCKET), runpod_api_base=self.router.base, runpod_api_key=API_KEY
        )


@pytest.fixture(scope="module")
def s3():
    server = LoopbackS3()
    server.create_bucket(BUCKET)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def endpoint(s3, tmp_path_factory):
    ep = Endpoint(s3, tmp_path_factory.mktemp("fanout"), throttle=2)
    yield ep
    ep.stop()


def write_pdf(path: Path, count: int) -> list[list[str]]:
    pages = samples.numbered_pages(count, lines=2)
    path.write_bytes(samples.pdf_from_pages(pages))
    return pages


def submit(path: Path, settings: Settings, **options: object):
    seen: list[dict] = []
    opts = Options("local-endpoint", poll_s=0.2, **options)  # type: ignore[arg-type]
    manifest = asyncio.run(Submission(path, settings, opts, on_page=seen.append).run())
    return manifest, seen


def read(s3: LoopbackS3, key: str) -> str:
    body = s3_client(s3.endpoint).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return body.decode()


def test_sixty_pages_in_six_jobs_come_back_complete_and_in_order(s3, endpoint, tmp_path) -> None:
    pdf = tmp_path / "case.pdf"
    truth = write_pdf(pdf, 60)
    manifest, seen = submit(pdf, endpoint.settings(s3), pages_per_job=10, out=tmp_path / "out")

    assert manifest.complete and manifest.totals["ok"] == 60 and len(manifest.parts) == 6
    assert all(part.status == "ok" and len(part.job_ids) == 1 for part in manifest.parts)
    # The router answered the first two submissions with 429; the client backed off.
    assert endpoint.router.throttled == 2
    jobs = [endpoint.router.jobs[i] for part in manifest.parts for i in part.job_ids]
    assert {job.worker for job in jobs} == set(endpoint.urls)  # spread over both workers
    # Each job's pages were streamed with their numbers, within the job's range.
    assert sorted(page["page"] for page in seen) == list(range(1, 61))
    for job in jobs:
        numbers = [item["page"]["page"] for item in job.items]
        first, last = (int(n) for n in job.input["pages"].split("-"))
        assert sorted(numbers) == list(range(first, last + 1))
    # The whole text, in page order, each page its own text; the same in the bucket and --out.
    whole = read(s3, manifest.text_key or "")
    assert whole == (tmp_path / "out/document.txt").read_text(encoding="utf-8")
    texts = whole.split("\f")[:-1]
    assert len(texts) == 60
    for n, (text, page) in enumerate(zip(texts, truth, strict=True), start=1):
        assert f"Page {n} of 60" in text, (n, text)
        assert similarity(text.strip(), samples.page_text(page)) >= 0.9, (n, text)
    stored = read(s3, manifest.manifest_key)
    assert '"complete": true' in stored and (tmp_path / "out/document.json").is_file()
    # Each job's own manifest sits next to the document's.
    for part in manifest.parts:
        assert (part.manifest_key or "").endswith(
            f"{part.output_prefix(manifest.prefix)}/manifest.json"
        )

    # A second run resubmits the jobs, and the workers reuse every stored page.
    again, _ = submit(pdf, endpoint.settings(s3), pages_per_job=10)
    assert again.complete and again.totals["reused"] == 60
    assert read(s3, again.text_key or "") == whole

    # --resume finds every job complete and submits nothing.
    before = len(endpoint.router.jobs)
    resumed, seen_again = submit(pdf, endpoint.settings(s3), pages_per_job=10, resume=True)
    assert resumed.complete and len(endpoint.router.jobs) == before
    assert sorted(page["page"] for page in seen_again) == list(range(1, 61))


def test_a_worker_killed_mid_run_ends_with_every_page_stored(s3, tmp_path_factory, tmp_path):
    ep = Endpoint(s3, tmp_path_factory.mktemp("kill"))
    try:
        pdf = tmp_path / "long.pdf"
        truth = write_pdf(pdf, 12)
        settings = ep.settings(s3)
        options = Options("local-endpoint", pages_per_job=6, poll_s=0.2, retries=2)
        client = s3_client(s3.endpoint)

        def stored(job) -> int:
            prefix = f"{settings.bucket_prefix}/{job.input['output_prefix']}/page-"
            return client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("KeyCount", 0)

        async def run_and_kill():
            submission = Submission(pdf, settings, options)
            task = asyncio.ensure_future(submission.run())
            # Kill worker 0 in the middle of its job: once it has stored a page of six.
            while not task.done():
                busy = [j for j in ep.router.jobs.values() if j.worker == ep.urls[0]]
                if busy and busy[0].state == "IN_PROGRESS" and stored(busy[0]) >= 1:
                    ep.kill(0)
                    break
                await asyncio.sleep(0.05)
            return await task

        manifest = asyncio.run(run_and_kill())
        lost = [j for j in ep.router.jobs.values() if j.error and "worker lost" in j.error]
        assert len(lost) == 1
        assert manifest.complete and manifest.totals["ok"] == 12
        assert manifest.totals["submissions"] == 3  # two jobs, one of them twice
        assert manifest.totals["reused"] >= 1  # what the killed worker stored was not read again
        texts = read(s3, manifest.text_key or "").split("\f")[:-1]
        for n, (text, page) in enumerate(zip(texts, truth, strict=True), start=1):
            assert similarity(text.strip(), samples.page_text(page)) >= 0.9, (n, text)
    finally:
        ep.stop()


def test_ctrl_c_cancels_the_submitted_jobs_and_says_what_was_stored(s3, endpoint, tmp_path):
    pdf = tmp_path / "short.pdf"
    write_pdf(pdf, 4)
    env = worker_environ(
        **s3.env(BUCKET), RUNPOD_API_BASE=endpoint.router.base, RUNPOD_API_KEY=API_KEY
    )
    before = set(endpoint.router.jobs)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vlm_ocr.cli",
            "submit",
            str(pdf),
            "--endpoint",
            "e",
            "--pages-per-job",
            "2",
            "--prefix",
            "ctrl-c/short",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def recorded() -> int:  # jobs the client has taken on (its document manifest lists them)
        try:
            doc = json.loads(read(s3, "ocr/ctrl-c/short/document.json"))
        except s3_client(s3.endpoint).exceptions.NoSuchKey:
            return 0
        return sum(len(part["job_ids"]) for part in doc["parts"])

    deadline = time.monotonic() + 120
    while recorded() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted: cancelled 2 job(s)" in err and "run again" in err
    new = [endpoint.router.jobs[i] for i in set(endpoint.router.jobs) - before]
    assert {job.state for job in new} == {"CANCELLED"}
    assert API_KEY not in out + err


def test_a_wrong_api_key_says_which_setting_to_check(s3, endpoint, tmp_path) -> None:
    from vlm_ocr.endpoint import EndpointError

    pdf = tmp_path / "one.pdf"
    write_pdf(pdf, 1)
    settings = endpoint.settings(s3).model_copy(update={"runpod_api_key": "wrong"})
    with pytest.raises(EndpointError) as err:
        submit(pdf, settings, pages_per_job=1)
    assert "401 unauthorized; check RUNPOD_API_KEY" in str(err.value)
    assert "wrong" not in str(err.value)
