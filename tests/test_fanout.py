"""`vlm-ocr submit` for real: worker processes on the RunPod SDK's local API server, behind a
stand-in for RunPod's endpoint routes, with moto's S3 server as the bucket."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from vlm_ocr import samples
from vlm_ocr.client.submit import Options, Submission
from vlm_ocr.contract import PageReport
from vlm_ocr.pipeline.textsim import similarity
from vlm_ocr.settings import Settings
from vlm_ocr_lab.standins.local_endpoint import API_KEY, LocalEndpoint, worker_environ
from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3, s3_client

from .support import ROOT, SPARE_LIMITS_ENV, TEST_PIXELS
from .support.fault_proxy import FaultProxy

BUCKET = "fanout"
SAFETY_S = 600  # a wait that should end long before; only a hung test runs into it


def worker_env(s3: LoopbackS3, tmp: Path, bucket_url: str | None = None) -> dict[str, str]:
    return worker_environ(
        **SPARE_LIMITS_ENV
        | s3.env(BUCKET)
        | ({"BUCKET_ENDPOINT_URL": bucket_url} if bucket_url else {}),
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

    def __init__(
        self, s3: LoopbackS3, tmp: Path, *, throttle: int = 0, bucket_url: str | None = None
    ) -> None:
        env = worker_env(s3, tmp, bucket_url)
        super().__init__(ROOT / "handler.py", env, 2, throttle=throttle)

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


def submission(path: Path, settings: Settings, options: Options, **kw: object) -> Submission:
    return Submission(path, settings.bucket, settings.client, options, **kw)  # type: ignore[arg-type]


def submit(path: Path, settings: Settings, **options: object):
    seen: list[PageReport] = []
    opts = Options("local-endpoint", poll_s=0.2, **options)  # type: ignore[arg-type]
    manifest = asyncio.run(submission(path, settings, opts, on_page=seen.append).run())
    return manifest, seen


def read(s3: LoopbackS3, key: str) -> str:
    body = s3_client(s3.endpoint).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return body.decode()


def test_sixty_pages_in_six_jobs_come_back_complete_and_in_order(s3, endpoint, tmp_path) -> None:
    pdf = tmp_path / "case.pdf"
    truth = write_pdf(pdf, 60)
    manifest, seen = submit(pdf, endpoint.settings(s3), pages_per_job=10, out=tmp_path / "out")

    assert manifest.complete and manifest.totals.ok == 60 and len(manifest.parts) == 6
    assert all(part.status == "ok" and len(part.job_ids) == 1 for part in manifest.parts)
    # The router answered the first two submissions with 429; the client backed off.
    assert endpoint.router.throttled == 2
    jobs = [endpoint.router.jobs[i] for part in manifest.parts for i in part.job_ids]
    assert {job.worker for job in jobs} == set(endpoint.urls)  # spread over both workers
    # Each job's pages were streamed with their numbers, within the job's range.
    assert sorted(page.page for page in seen) == list(range(1, 61))
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
    # document.md: the same texts, to read, each page after its marked break
    markdown = read(s3, manifest.markdown_key or "")
    assert markdown == (tmp_path / "out/document.md").read_text(encoding="utf-8")
    parts = markdown.split("<!-- page ")[1:]
    assert [part.split(" -->")[0] for part in parts] == [str(n) for n in range(1, 61)]
    for part, text in zip(parts, texts, strict=True):
        assert part.split(" -->\n\n", 1)[1].strip() == text.strip()
    stored = read(s3, manifest.manifest_key)
    assert '"complete": true' in stored and (tmp_path / "out/document.json").is_file()
    # Each job's own manifest sits next to the document's.
    for part in manifest.parts:
        assert (part.manifest_key or "").endswith(
            f"{part.output_prefix(manifest.prefix)}/manifest.json"
        )

    # A second run resubmits the jobs, and the workers reuse every stored page.
    again, _ = submit(pdf, endpoint.settings(s3), pages_per_job=10)
    assert again.complete and again.totals.reused == 60
    assert read(s3, again.text_key or "") == whole

    # --resume finds every job complete and submits nothing.
    before = len(endpoint.router.jobs)
    resumed, seen_again = submit(pdf, endpoint.settings(s3), pages_per_job=10, resume=True)
    assert resumed.complete and len(endpoint.router.jobs) == before
    assert sorted(page.page for page in seen_again) == list(range(1, 61))


def test_a_worker_killed_mid_run_ends_with_every_page_stored(s3, tmp_path_factory, tmp_path):
    # The workers reach the bucket through a proxy that sees each page they store: worker 0 is
    # killed the moment its first page is stored, in the middle of its job of six.
    proxy = FaultProxy(tuple(s3.endpoint.removeprefix("http://").split(":")))  # type: ignore[arg-type]
    ep = Endpoint(s3, tmp_path_factory.mktemp("kill"), bucket_url=proxy.url)
    first_page_of_worker_0 = threading.Event()

    def answered(method: str, path: str, status: int) -> None:
        busy = [j for j in ep.router.jobs.values() if j.worker == ep.urls[0]]
        page = re.search(r"/page-\d{4}\.md$", path)
        mine = busy and f"/{busy[0].input['output_prefix']}/page-" in path
        if method == "PUT" and status == 200 and page and mine:
            first_page_of_worker_0.set()

    proxy.answered = answered
    try:
        pdf = tmp_path / "long.pdf"
        truth = write_pdf(pdf, 12)
        options = Options("local-endpoint", pages_per_job=6, poll_s=0.2, retries=2)

        async def run_and_kill():
            task = asyncio.ensure_future(submission(pdf, ep.settings(s3), options).run())
            stored = await asyncio.to_thread(first_page_of_worker_0.wait, SAFETY_S)
            assert stored, "worker 0 stored no page"
            ep.kill(0)
            return await task

        manifest = asyncio.run(run_and_kill())
        lost = [j for j in ep.router.jobs.values() if j.error and "worker lost" in j.error]
        assert len(lost) == 1
        assert manifest.complete and manifest.totals.ok == 12
        assert manifest.totals.submissions == 3  # two jobs, one of them twice
        assert manifest.totals.reused >= 1  # what the killed worker stored was not read again
        texts = read(s3, manifest.text_key or "").split("\f")[:-1]
        for n, (text, page) in enumerate(zip(texts, truth, strict=True), start=1):
            assert similarity(text.strip(), samples.page_text(page)) >= 0.9, (n, text)
    finally:
        ep.stop()
        proxy.close()


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
            "vlm_ocr",
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
        env=env | {"LOG_LEVEL": "INFO"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The client logs each job it has taken on (and recorded in its document manifest).
    both_submitted = threading.Event()
    log: list[str] = []

    def watch() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line)
            if sum("submitted: pages" in seen for seen in log) == 2:
                both_submitted.set()

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    assert both_submitted.wait(SAFETY_S), "".join(log)[-2000:]
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    reader.join(60)
    out, err = proc.stdout.read() if proc.stdout else "", "".join(log)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted: cancelled 2 job(s)" in err and "run again" in err
    new = [endpoint.router.jobs[i] for i in set(endpoint.router.jobs) - before]
    assert {job.state for job in new} == {"CANCELLED"}
    assert API_KEY not in out + err


def test_a_wrong_api_key_says_which_setting_to_check(s3, endpoint, tmp_path) -> None:
    from vlm_ocr.client.endpoint import EndpointError

    pdf = tmp_path / "one.pdf"
    write_pdf(pdf, 1)
    settings = endpoint.settings(s3).with_(runpod_api_key="wrong")
    with pytest.raises(EndpointError) as err:
        submit(pdf, settings, pages_per_job=1)
    assert "401 unauthorized; check RUNPOD_API_KEY" in str(err.value)
    assert "wrong" not in str(err.value)
