"""`vlm-ocr submit` over a corpus, for real: folders, list files and a bucket prefix of documents
sent to two CPU-engine workers behind the stand-in endpoint, moto's S3 server as the bucket;
broken documents refused or reported, a finished document skipped, an interrupted run gone on
with only what is missing, RunPod's 429 and gateway errors backed off, the report's lines and
the exit status."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections import Counter
from pathlib import Path

import pymupdf
import pytest
from PIL import Image

from vlm_ocr import samples
from vlm_ocr.client.corpus import CorpusOptions, CorpusRun
from vlm_ocr.client.listing import Corpus, LeftOut, bucket_lister
from vlm_ocr.client.report import Summary
from vlm_ocr.client.submit import Options
from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3, s3_client

from .support import free_port, png_bytes
from .support import write_pdf as pdf
from .support.workers import BUCKET, SAFETY_S, Workers, keys, read


@pytest.fixture
def s3(loopback_s3: LoopbackS3) -> LoopbackS3:
    return loopback_s3


@pytest.fixture
def prefix() -> str:
    """A folder of the bucket for this test alone (the workers and the bucket are shared)."""
    return f"t-{uuid.uuid4().hex[:8]}"


def image(path: Path, first: int = 1) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pages = samples.numbered_pages(1, lines=2, first=first)
    with pymupdf.open(stream=samples.pdf_from_pages(pages), filetype="pdf") as doc:
        pix = doc[0].get_pixmap(dpi=100)
        path.write_bytes(pix.tobytes("png"))
    return path


def lines_of(report: Path) -> dict[str, dict]:
    """The report's lines by the name of their source."""
    found = [json.loads(line) for line in report.read_text().splitlines()]
    return {Path(line["source"]).name: line for line in found}


def jobs_under(workers: Workers, prefix: str) -> list:
    return [j for j in workers.router.jobs.values() if j.input["output_prefix"].startswith(prefix)]


def test_a_folder_of_documents_each_in_its_folder_with_a_report(workers, s3, prefix, tmp_path):
    folder = tmp_path / "archive"
    pdf(folder / "a.pdf", 2)
    pdf(folder / "cases" / "b.pdf", 1, first=10)
    image(folder / "cases" / "scan.png", first=20)
    (folder / "notes.txt").write_text("not a document")
    pdf(folder / ".hidden.pdf", 1)
    report = tmp_path / "corpus.jsonl"

    done = workers.submit(
        str(folder), "--prefix", prefix, "--report", str(report), "--gpu-price", "2.5",
        "--out", str(tmp_path / "out"), cwd=tmp_path,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-3000:]
    lines = lines_of(report)
    assert set(lines) == {"a.pdf", "b.pdf", "scan.png"}  # the hidden file and the notes left out
    for name, pages in (("a.pdf", 2), ("b.pdf", 1), ("scan.png", 1)):
        line = lines[name]
        assert line["status"] == "ok" and line["pages"] == line["ok"] == pages, line
        assert line["jobs"] == 1 and not line["earlier"] and line["seconds"] > 0
        assert line["prefix"].startswith(f"{prefix}/") and line["source"].endswith(name)
        for key in ("document_json", "document_md", "document_txt", "source"):
            assert line["keys"][key] in keys(s3, line["keys"][key])
        local = tmp_path / "out" / line["prefix"].rsplit("/", 1)[1]
        assert (local / "document.md").read_text() == read(s3, line["keys"]["document_md"])
    assert "Page 10 of 1" in read(s3, lines["b.pdf"]["keys"]["document_txt"])
    assert "Page 20" in read(s3, lines["scan.png"]["keys"]["document_txt"])
    # One document a job, whatever its size; the image went as an image.
    jobs = jobs_under(workers, prefix)
    assert len(jobs) == 3 and sum("images" in j.input for j in jobs) == 1
    # Said at the start: the limit of jobs in flight, from the endpoint's two workers.
    assert "jobs queued or running at once: 2 workers on the endpoint's /health" in done.stderr
    assert "3 documents: 3 ok" in done.stdout and "4 ok, 0 blank, 0 failed" in done.stdout
    assert "worker-hours" in done.stdout and "at US$2.5 a worker-hour" in done.stdout
    summary = json.loads(report.with_suffix(".summary.json").read_text())
    assert summary["documents"] == {"ok": 3} and summary["jobs"] == 3
    # The file that is no document is said, in the summary and its file, not sent in silence.
    assert f"1 file left out: not PDFs or images ({folder / 'notes.txt'})\n" in done.stdout
    assert summary["left_out"]["files"] == 1 and summary["left_out"]["archives"] == 0


def test_a_finished_document_is_not_sent_again(workers, s3, prefix, tmp_path):
    listed = tmp_path / "list.txt"
    one = pdf(tmp_path / "docs" / "one.pdf", 1, first=30)
    listed.write_text(f"# the documents\n{one}\n\n")
    report = tmp_path / "corpus.jsonl"
    args = ("--list", str(listed), "--prefix", prefix, "--report", str(report))

    first = workers.submit(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert lines_of(report)["one.pdf"]["jobs"] == 1
    sent = len(jobs_under(workers, prefix))

    again = workers.submit(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    line = lines_of(report)["one.pdf"]
    assert line["status"] == "ok" and line["earlier"] and line["jobs"] == 0
    assert len(jobs_under(workers, prefix)) == sent  # nothing sent the second time
    assert "1 finished by an earlier run" in again.stdout


def test_a_bucket_prefix_is_read_where_it_is(workers, s3, prefix, tmp_path):
    client = s3_client(s3.endpoint)
    good = samples.pdf_from_pages(samples.numbered_pages(2, lines=2, first=40))
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/in/x.pdf", Body=good)
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/in/sub/broken.png", Body=b"\x89PNG not one")
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/in/readme.txt", Body=b"not a document")
    report = tmp_path / "corpus.jsonl"

    done = workers.submit(
        f"s3://{BUCKET}/{prefix}/in/", "--prefix", f"{prefix}/out", "--report", str(report),
        cwd=tmp_path,
    )  # fmt: skip

    assert done.returncode == 1, done.stderr[-3000:]  # one document failed
    lines = lines_of(report)
    assert set(lines) == {"x.pdf", "broken.png"}
    assert lines["x.pdf"]["status"] == "ok" and lines["x.pdf"]["ok"] == 2
    assert lines["x.pdf"]["keys"]["source"] == f"{prefix}/in/x.pdf"  # read where it is
    # The worker refused the broken image: reported with its reason, sent once, not again.
    broken = lines["broken.png"]
    assert broken["status"] == "failed" and broken["jobs"] == 1, broken
    assert "not an image" in broken["error"]
    assert not [k for k in keys(s3, f"ocr/{prefix}/out/") if "/source" in k]  # no upload
    inputs = [j.input for j in jobs_under(workers, f"{prefix}/out/")]
    assert {i.get("pdf", {}).get("key") for i in inputs} == {f"{prefix}/in/x.pdf", None}

    # Run again: nothing is sent, the failed image included (its failure was its own) ...
    args = (f"s3://{BUCKET}/{prefix}/in/", "--prefix", f"{prefix}/out", "--report", str(report))
    again = workers.submit(*args, cwd=tmp_path)
    assert again.returncode == 1, again.stderr[-3000:]
    lines = lines_of(report)
    assert all(line["earlier"] and line["jobs"] == 0 for line in lines.values()), lines
    # ... unless its failed pages are asked for once more.
    retried = workers.submit(*args, "--retry-failed", cwd=tmp_path)
    assert retried.returncode == 1, retried.stderr[-3000:]
    lines = lines_of(report)
    assert lines["broken.png"]["jobs"] == 1 and lines["broken.png"]["status"] == "failed"
    assert lines["x.pdf"]["jobs"] == 0 and lines["x.pdf"]["earlier"]


def test_broken_documents_are_refused_and_the_others_go_on(workers, s3, prefix, tmp_path):
    folder = tmp_path / "mixed"
    pdf(folder / "good.pdf", 1, first=50)
    (folder / "empty.pdf").write_bytes(b"")
    (folder / "letter.pdf").write_text("Dear sir, this is no PDF.")
    (folder / "garbage.jpg").write_bytes(b"\xff\xd8 not a jpeg at all")
    big = Image.frombytes("L", (1000, 1000), os.urandom(1_000_000))
    (folder / "big.png").write_bytes(png_bytes(big))  # over the client's MAX_DOWNLOAD_BYTES
    locked = pymupdf.open(stream=samples.pdf_from_pages([["secret"]]), filetype="pdf")
    encrypt = {"encryption": pymupdf.PDF_ENCRYPT_AES_256, "user_pw": "u", "owner_pw": "o"}
    (folder / "locked.pdf").write_bytes(locked.tobytes(**encrypt))
    whole = samples.pdf_from_pages(samples.numbered_pages(3, lines=2))
    (folder / "cut.pdf").write_bytes(whole[: len(whole) * 2 // 3])
    report = tmp_path / "corpus.jsonl"

    done = workers.submit(
        str(folder), "--prefix", prefix, "--report", str(report), cwd=tmp_path,
        MAX_DOWNLOAD_BYTES="100000",
    )  # fmt: skip

    assert done.returncode == 1, done.stderr[-3000:]
    lines = lines_of(report)
    assert lines["good.pdf"]["status"] == "ok"
    refused = {
        "empty.pdf": "is empty",
        "letter.pdf": "not a PDF",
        "garbage.jpg": "not an image",
        "big.png": "MAX_DOWNLOAD_BYTES",
        "locked.pdf": "encrypted",
    }
    for name, said in refused.items():
        assert lines[name]["status"] == "refused" and said in lines[name]["error"], lines[name]
        assert lines[name]["jobs"] == 0
    # A damaged PDF that opens is sent; its pages fail on their own and are not sent again.
    cut = lines["cut.pdf"]
    assert cut["status"] in ("refused", "partial", "failed", "ok"), cut
    assert cut["jobs"] <= 1
    sent = jobs_under(workers, prefix)
    assert len(sent) == 1 + cut["jobs"]
    assert "refused" in done.stdout


def run_corpus(workers: Workers, corpus: Corpus, options: Options, copts: CorpusOptions):
    run = CorpusRun(corpus, workers.settings(), options, copts)
    corpus.lister = bucket_lister(run.shared.store.bucket)
    return run


def corpus_of(*paths: Path) -> Corpus:
    return Corpus([str(p) for p in paths], [], BUCKET, results_prefix="ocr/")


def test_the_time_left_knows_which_documents_have_pages_to_read(workers, s3, prefix, tmp_path):
    folder = tmp_path / "three"
    pdf(folder / "a.pdf", 2, first=70)
    (folder / "copy").mkdir()
    (folder / "copy/a.pdf").write_bytes((folder / "a.pdf").read_bytes())  # the same file again
    (folder / "letter.pdf").write_text("Dear sir, this is no PDF.")
    options = Options("e", base=prefix, poll_s=0.1)

    for earlier in (0, 1):  # the second run finds a.pdf finished
        run = run_corpus(workers, corpus_of(folder), options, CorpusOptions())
        asyncio.run(run.run())
        p = run.progress
        assert (p.documents_total, p.opened, p.earlier, p.duplicates, p.unopened) == (
            3, 1 - earlier, earlier, 1, 1,
        )  # fmt: skip
        assert p.pages_estimated() == p.pages_expected == 2 - 2 * earlier


def test_an_interrupted_run_goes_on_with_only_what_is_missing(workers, s3, prefix, tmp_path):
    folder = tmp_path / "five"
    for n, pages in enumerate((2, 1, 3, 1, 2)):
        pdf(folder / f"d{n}.pdf", pages, first=100 + 10 * n)
    options = Options("e", base=prefix, poll_s=0.1)
    router = workers.router

    async def stopped_after_two_jobs() -> None:
        run = run_corpus(workers, corpus_of(folder), options, CorpusOptions(max_in_flight=1))
        task = asyncio.ensure_future(run.run())
        two = lambda jobs: sum(  # noqa: E731
            j.state == "COMPLETED" and j.input["output_prefix"].startswith(prefix) for j in jobs
        )
        assert await asyncio.to_thread(router.wait_for, lambda jobs: two(jobs) >= 2, SAFETY_S)
        task.cancel()  # as Ctrl-C does
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(stopped_after_two_jobs())
    # The stand-in cannot stop a worker half-way through a cancelled job (RunPod does): let it
    # end, so that what it stores is there before the next run looks.
    assert router.wait_for(lambda jobs: not router.busy, SAFETY_S)
    first = {j.id for j in jobs_under(workers, prefix)}
    finished = {
        k.rsplit("/", 2)[-2]
        for k in keys(s3, f"ocr/{prefix}/")
        if k.endswith("/document.json") and json.loads(read(s3, k))["complete"]
    }
    # The first finished for sure; the second's end may not have reached the client yet.
    assert 1 <= len(finished) < 5

    report = tmp_path / "again.jsonl"
    again = run_corpus(workers, corpus_of(folder), options, CorpusOptions(report=report))
    summary: Summary = asyncio.run(again.run())

    assert summary.documents == Counter(ok=5) and summary.earlier == len(finished)
    second = [j for j in jobs_under(workers, prefix) if j.id not in first]
    # Only the documents an earlier run had not finished were sent, each once.
    sent = Counter(j.input["output_prefix"].split("/")[1] for j in second)
    folders = {line["prefix"].split("/")[1] for line in lines_of(report).values()}
    assert len(folders) == 5 and set(sent) == folders - finished
    assert set(sent.values()) == {1}
    # Every page was read and stored once: what the first run left was reused, not read again.
    stored = Counter(
        (j.input["output_prefix"].split("/")[1], item["page"]["page"])
        for j in jobs_under(workers, prefix)
        for item in j.items
        if item["page"]["status"] == "ok" and not item["page"]["reused"]
    )
    assert sum(stored.values()) == 9 and set(stored.values()) == {1}


def test_429_and_gateway_errors_are_backed_off(workers, s3, prefix, tmp_path):
    router = workers.router
    router.throttle = router.throttled + 3  # the next three submissions answered with 429
    router.gateway = router.gatewayed + 2  # the next two looks at a job answered with 502
    pdf(tmp_path / "p" / "one.pdf", 1, first=200)
    pdf(tmp_path / "p" / "two.pdf", 1, first=210)
    options = Options("e", base=prefix, poll_s=0.1)

    run = run_corpus(workers, corpus_of(tmp_path / "p"), options, CorpusOptions())
    summary = asyncio.run(run.run())

    assert summary.documents == Counter(ok=2)
    assert router.throttled == router.throttle and router.gatewayed == router.gateway
    assert summary.backoffs[429] == 3 and summary.backoffs[502] == 2
    assert summary.jobs == 2  # backed off, not sent twice


def test_a_job_whose_answer_was_lost_is_sent_again_and_said(workers, s3, prefix, tmp_path):
    router = workers.router
    router.drop = router.dropped + 1  # the next submission is queued, its answer lost
    pdf(tmp_path / "p" / "one.pdf", 2, first=220)
    options = Options("e", base=prefix, poll_s=0.1)

    run = run_corpus(workers, corpus_of(tmp_path / "p"), options, CorpusOptions())
    summary = asyncio.run(run.run())
    # the job whose answer was lost runs too: let it end before anything is read
    assert router.wait_for(
        lambda jobs: all(j.state not in ("IN_QUEUE", "IN_PROGRESS") for j in jobs), SAFETY_S
    )

    # RunPod took the first POST: the job ran twice, the client followed the second alone
    ran = jobs_under(workers, prefix)
    assert len(ran) == 2 and {j.state for j in ran} == {"COMPLETED"}
    assert summary.documents == Counter(ok=1) and summary.pages["ok"] == 2
    assert summary.jobs == 1 and summary.runs_resent == 1 and summary.backoffs[0] == 1
    assert any("may have run such a job twice" in line for line in summary.lines())
    assert summary.as_json()["runs_resent"] == 1
    (doc,) = [k for k in keys(s3, f"ocr/{prefix}/") if k.endswith("/document.json")]
    assert json.loads(read(s3, doc))["complete"]


def test_a_refusal_is_said_once_and_nothing_is_drawn(workers, tmp_path):
    doc = pdf(tmp_path / "case.pdf", 1)
    # no bucket at all (half a bucket is refused at start, before submit's own check)
    bucket = (
        "BUCKET_NAME",
        "BUCKET_ENDPOINT_URL",
        "BUCKET_ACCESS_KEY_ID",
        "BUCKET_SECRET_ACCESS_KEY",
    )
    no_bucket = dict.fromkeys(bucket, "")
    done = workers.submit(str(doc), cwd=tmp_path, **no_bucket)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "set BUCKET_NAME" in done.stderr, done.stderr
    assert done.stdout == ""

    letter = tmp_path / "in" / "letter.pdf"
    letter.parent.mkdir()
    letter.write_text("no PDF")
    done = workers.submit("in/letter.pdf", cwd=tmp_path)
    assert done.returncode == 1
    said = "vlm-ocr submit: in/letter.pdf: the data is not a PDF (it does not start with %PDF)\n"
    assert done.stderr == said  # once, and no bar around it
    assert done.stdout == ""

    done = workers.submit(str(doc), cwd=tmp_path, RUNPOD_API_KEY="")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "set RUNPOD_API_KEY" in done.stderr and done.stdout == ""

    # an endpoint that does not answer is said in one line naming what to check, at once
    base = f"http://127.0.0.1:{free_port()}/v2"  # a loopback port nothing listens on
    done = workers.submit(str(doc), cwd=tmp_path, RUNPOD_API_BASE=base)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert f"GET {base}/e/health: no answer" in done.stderr and "RUNPOD_API_BASE" in done.stderr

    done = workers.submit(cwd=tmp_path)
    assert done.returncode == 2 and "name at least one file" in done.stderr
    done = workers.submit("s3://elsewhere/x/", cwd=tmp_path)
    assert done.returncode == 2 and "not 'elsewhere'" in done.stderr


def test_files_that_are_no_documents_are_said_and_finding_none_sends_nothing(
    workers, s3, prefix, tmp_path
):
    zips = tmp_path / "zips"
    zips.mkdir()
    (zips / "bundle.zip").write_bytes(b"PK\x03\x04 an archive of PDFs")
    (zips / "bundle.tar.gz").write_bytes(b"\x1f\x8b an archive of PDFs")
    (tmp_path / "empty").mkdir()
    accepted = "accepted: PDFs and images: .jpeg, .jpg, .pdf, .png, .tif, .tiff, .webp\n"

    done = workers.submit("zips", "--prefix", prefix, "--out", "out", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stderr[-3000:]
    assert done.stderr.endswith(
        "vlm-ocr submit: no document found in zips: 2 files left out: not PDFs or images "
        "(zips/bundle.tar.gz, zips/bundle.zip); archives (.zip, .tar…) must be unpacked first; "
        + accepted
    ), done.stderr
    done = workers.submit("empty", "--prefix", prefix, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stderr[-3000:]
    assert done.stderr.endswith(f"vlm-ocr submit: no document found in empty; {accepted}")
    # Named alone, said before anything runs, by the path as typed.
    done = workers.submit("zips/bundle.zip", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"vlm-ocr submit: zips/bundle.zip: not a PDF or an image: an archive, to unpack first; "
        f"{accepted}"
    )
    assert jobs_under(workers, prefix) == [] and not (tmp_path / "out").exists()
    assert not (tmp_path / "corpus.jsonl").exists()  # a run that sent nothing leaves no report


def test_a_prefix_says_the_keys_it_leaves_out_and_not_the_results_or_folder_markers() -> None:
    keys = ["in/", "in/a.pdf", "in/b.zip", "in/notes.txt", "ocr/in/page-0001.md", "in/c.PNG"]
    lister = lambda prefix: ((key, 10, '"e"') for key in keys)  # noqa: E731
    corpus = Corpus(["s3://b/"], [], "b", results_prefix="ocr/", lister=lister)
    left_out = LeftOut()
    assert [d.key for d in corpus.documents(left_out)] == ["in/a.pdf", "in/c.PNG"]
    assert left_out.lines() == [
        "2 files left out: not PDFs or images (s3://b/in/b.zip, s3://b/in/notes.txt); archives "
        "(.zip, .tar…) must be unpacked first"
    ]
    assert left_out.as_json() == {
        "files": 2, "archives": 1, "examples": ["s3://b/in/b.zip", "s3://b/in/notes.txt"],
        "folders": [],
    }  # fmt: skip
