"""`vlm-ocr submit` for real: worker processes on the RunPod SDK's local API server, behind a
stand-in for RunPod's endpoint routes, with moto's S3 server as the bucket."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from vlm_ocr import samples
from vlm_ocr.client.submit import Options, Submission
from vlm_ocr.contract import PageReport
from vlm_ocr.pipeline.textsim import similarity
from vlm_ocr.settings import Settings
from vlm_ocr_lab.standins.local_endpoint import API_KEY
from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3

from .support import ROOT
from .support.fault_proxy import FaultProxy
from .support.workers import SAFETY_S, Workers, read


@pytest.fixture
def s3(loopback_s3: LoopbackS3) -> LoopbackS3:
    return loopback_s3


@pytest.fixture
def endpoint(workers: Workers) -> Workers:
    return workers


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


def test_a_document_in_six_jobs_comes_back_complete_and_in_order(s3, endpoint, tmp_path) -> None:
    # 24 pages in six jobs of four (each page read by the CPU engine is most of the test's time)
    pdf = tmp_path / "case.pdf"
    truth = write_pdf(pdf, 24)
    router = endpoint.router
    router.throttle = router.throttled + 2  # the next two submissions are answered with 429
    manifest, seen = submit(pdf, endpoint.settings(), pages_per_job=4, out=tmp_path / "out")

    assert manifest.complete and manifest.totals.ok == 24 and len(manifest.parts) == 6
    assert all(part.status == "ok" and len(part.job_ids) == 1 for part in manifest.parts)
    # The router answered two submissions with 429; the client backed off.
    assert router.throttled == router.throttle
    jobs = [endpoint.router.jobs[i] for part in manifest.parts for i in part.job_ids]
    assert {job.worker for job in jobs} == set(endpoint.urls)  # spread over both workers
    # Each job's pages were streamed with their numbers, within the job's range.
    assert sorted(page.page for page in seen) == list(range(1, 25))
    for job in jobs:
        numbers = [item["page"]["page"] for item in job.items]
        first, last = (int(n) for n in job.input["pages"].split("-"))
        assert sorted(numbers) == list(range(first, last + 1))
    # The whole text, in page order, each page its own text; the same in the bucket and --out.
    whole = read(s3, manifest.text_key or "")
    assert whole == (tmp_path / "out/document.txt").read_text(encoding="utf-8")
    texts = whole.split("\f")[:-1]
    assert len(texts) == 24
    for n, (text, page) in enumerate(zip(texts, truth, strict=True), start=1):
        assert f"Page {n} of 24" in text, (n, text)
        assert similarity(text.strip(), samples.page_text(page)) >= 0.9, (n, text)
    # document.md: the same texts, to read, each page after its marked break
    markdown = read(s3, manifest.markdown_key or "")
    assert markdown == (tmp_path / "out/document.md").read_text(encoding="utf-8")
    parts = markdown.split("<!-- page ")[1:]
    assert [part.split(" -->")[0] for part in parts] == [str(n) for n in range(1, 25)]
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
    again, _ = submit(pdf, endpoint.settings(), pages_per_job=4)
    assert again.complete and again.totals.reused == 24
    assert read(s3, again.text_key or "") == whole

    # --resume finds every job complete and submits nothing.
    before = len(endpoint.router.jobs)
    resumed, seen_again = submit(pdf, endpoint.settings(), pages_per_job=4, resume=True)
    assert resumed.complete and len(endpoint.router.jobs) == before
    assert sorted(page.page for page in seen_again) == list(range(1, 25))


def test_a_worker_killed_mid_run_ends_with_every_page_stored(s3, tmp_path_factory, tmp_path):
    # The workers reach the bucket through a proxy that sees each page they store: worker 0 is
    # killed the moment its first page is stored, in the middle of its job of six.
    proxy = FaultProxy(tuple(s3.endpoint.removeprefix("http://").split(":")))  # type: ignore[arg-type]
    ep = Workers(s3, tmp_path_factory.mktemp("kill"), bucket_url=proxy.url)
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
            task = asyncio.ensure_future(submission(pdf, ep.settings(), options).run())
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
    router = endpoint.router
    before = set(router.jobs)
    argv = ["-m", "vlm_ocr", "submit", str(pdf), "--endpoint", "e", "--pages-per-job", "2"]
    proc = subprocess.Popen(
        [sys.executable, *argv, "--prefix", "ctrl-c/short"],
        cwd=ROOT,
        env=endpoint.client_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Both jobs at the endpoint, and both in the client's document manifest (so it knows them).
    assert router.wait_for(lambda jobs: len(jobs) - len(before) == 2, SAFETY_S)
    new = set(router.jobs) - before
    assert wait_until(lambda: new <= job_ids_in(s3, "ocr/ctrl-c/short/document.json"))
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted: cancelled 2 job(s)" in err and "run again" in err
    assert {router.jobs[i].state for i in new} == {"CANCELLED"}
    assert API_KEY not in out + err


def job_ids_in(s3: LoopbackS3, key: str) -> set[str]:
    try:
        manifest = json.loads(read(s3, key))
    except Exception:  # not written yet
        return set()
    return {job for part in manifest["parts"] for job in part["job_ids"]}


def wait_until(test, timeout_s: float = SAFETY_S) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if test():
            return True
        time.sleep(0.05)
    return False


def test_a_wrong_api_key_says_which_setting_to_check(s3, endpoint, tmp_path) -> None:
    from vlm_ocr.client.endpoint import EndpointError

    pdf = tmp_path / "one.pdf"
    write_pdf(pdf, 1)
    settings = endpoint.settings().with_(runpod_api_key="wrong")
    with pytest.raises(EndpointError) as err:
        submit(pdf, settings, pages_per_job=1)
    assert "401 unauthorized; check RUNPOD_API_KEY" in str(err.value)
    assert "wrong" not in str(err.value)
