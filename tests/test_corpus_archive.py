"""`vlm-ocr submit` over an archive as its users keep one: duplicates in many folders, a second
run into a new `--out`, a run that goes on after a failed job, a job RunPod loses, files named as
what they are not and TIFFs of several pages. The stand-in endpoint over workers that answer at
once (each selected page stored as a line of text), moto's S3 server as the bucket: what is
tested is the client's bookkeeping, and every job it sends is seen."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymupdf
import pytest
from aiohttp import web
from PIL import Image

from vlm_ocr import samples
from vlm_ocr.client import documents as client_documents
from vlm_ocr.client.corpus import CorpusOptions, CorpusRun
from vlm_ocr.client.listing import Corpus
from vlm_ocr.client.report import Summary
from vlm_ocr.client.submit import Options
from vlm_ocr_lab.standins.instant_worker import InstantWorker
from vlm_ocr_lab.standins.local_endpoint import Router
from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3, s3_client

from .support import write_pdf
from .support.corpus_endpoint import CorpusEndpoint
from .support.workers import BUCKET, keys, read


def holds(prefix: str, parts: tuple[str, ...]) -> bool:
    return bool(parts) and all(part in prefix for part in parts)


class FailingWorker(InstantWorker):
    """Answers at once; a job whose output folder holds every one of `fail` ends with an error
    from outside its document (as an engine gone would), to be sent again."""

    def __init__(self, endpoint: str, bucket: str) -> None:
        self.fail: tuple[str, ...] = ()
        super().__init__(endpoint, bucket)

    def answer(self, job_id: str, job: dict[str, Any]) -> list[dict[str, Any]]:
        if holds(job["output_prefix"], self.fail):
            return [{"error": "the engine stopped answering (stand-in)"}]
        return super().answer(job_id, job)


class LosingRouter(Router):
    """The stand-in endpoint, which answers /stream of the first `lose` jobs whose output
    folder holds every one of `losing` with 404, as RunPod does for a job id it no longer
    knows."""

    def __init__(self, workers: list[str]) -> None:
        self.losing: tuple[str, ...] = ()
        self.lose = 0
        self.lost: set[str] = set()
        super().__init__(workers)

    async def _stream(self, request: web.Request) -> web.Response:
        job = self.jobs[request.match_info["id"]]
        if job.id not in self.lost and self.lose and holds(job.input["output_prefix"], self.losing):
            self.lose -= 1
            self.lost.add(job.id)
        if job.id in self.lost:
            return web.json_response({"error": "request does not exist"}, status=404)
        return await super()._stream(request)


class Endpoint(CorpusEndpoint):
    """The stand-in endpoint whose workers fail or lose the jobs a test names."""

    worker: FailingWorker
    router: LosingRouter

    def __init__(self, s3: LoopbackS3) -> None:
        super().__init__(s3, FailingWorker, LosingRouter)

    def run_by_name(
        self, *paths: Path | str, **options: Any
    ) -> tuple[Summary, dict[str, list[dict]]]:
        """One run over the paths; its summary and its report's lines by file name."""
        summary, lines = self.run(*paths, gpu_price=3.6, **options)
        by_name: dict[str, list[dict]] = {}
        for line in lines:
            by_name.setdefault(Path(line["source"]).name, []).append(line)
        return summary, by_name


@pytest.fixture(scope="module")
def endpoint(loopback_s3: LoopbackS3) -> Iterator[Endpoint]:
    ep = Endpoint(loopback_s3)
    yield ep
    ep.stop()


@pytest.fixture
def base() -> str:
    """The bucket folder of this test's documents (the endpoint and the bucket are shared)."""
    return f"a-{uuid.uuid4().hex[:8]}"


def pdf(path: Path, pages: int, first: int = 1) -> Path:
    return write_pdf(path, pages, first, lines=1)


def tiff(path: Path, frames: int) -> Path:
    """A fax: a TIFF of `frames` pages, each its own picture."""
    pages = [Image.new("L", (200, 100), 255 - 40 * n) for n in range(frames)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pages[0].save(path, format="TIFF", save_all=True, append_images=pages[1:])
    return path


def png_bytes() -> bytes:
    out = io.BytesIO()
    Image.new("L", (100, 50), 200).save(out, format="PNG")
    return out.getvalue()


def test_the_same_file_in_many_folders_is_sent_once_and_its_copies_said(endpoint, base, tmp_path):
    minutes = pdf(tmp_path / "minutes.pdf", 3).read_bytes()
    for box in ("a", "b", "c"):  # the same file in three folders
        (tmp_path / "archive" / box).mkdir(parents=True)
        (tmp_path / "archive" / box / "minutes.pdf").write_bytes(minutes)
    pdf(tmp_path / "archive" / "d" / "other.pdf", 2, first=10)
    listed = tmp_path / "list.txt"  # one of them named once more
    listed.write_text(f"{tmp_path / 'archive' / 'b' / 'minutes.pdf'}\n")
    report = tmp_path / "r.jsonl"

    summary, lines = endpoint.run_by_name(
        tmp_path / "archive", lists=[listed], base=base, report=report, retries=0
    )

    # One job a folder of the bucket: the copies share the first's, and are not sent.
    folders = Counter(j.input["output_prefix"].rsplit("/", 1)[0] for j in endpoint.jobs(base))
    assert sorted(folders.values()) == [1, 1], folders
    copies = lines["minutes.pdf"]
    assert len(copies) == 4
    first = [c for c in copies if "duplicate_of" not in c]
    assert len(first) == 1 and first[0]["jobs"] == 1 and first[0]["ok"] == 3
    for copy in copies:
        assert copy["prefix"] == first[0]["prefix"] and copy["status"] == "ok"
        if copy is not first[0]:
            assert copy["duplicate_of"] == first[0]["source"] and copy["jobs"] == 0
            assert not copy["earlier"], copy  # finished by this run, not an earlier one
    # Counted once: the documents, the pages and the pace and cost of a page.
    assert summary.documents == Counter(ok=2) and summary.duplicates == 3
    assert summary.pages["ok"] == 5 and summary.pages_this_run == 5
    text = "\n".join(summary.lines())
    assert text.startswith("2 documents: 2 ok\n3 more listed are duplicates"), text
    assert summary.exit_code == 0

    # Run again: the first is finished by an earlier run, its copies are still copies.
    summary, lines = endpoint.run_by_name(
        tmp_path / "archive", lists=[listed], base=base, report=report
    )
    assert summary.earlier == 2 and summary.duplicates == 3 and summary.jobs == 0
    assert sum(line["earlier"] for line in lines["minutes.pdf"]) == 1


def test_a_new_out_folder_gets_the_results_an_earlier_run_finished(endpoint, base, tmp_path):
    pdf(tmp_path / "docs" / "one.pdf", 2)
    pdf(tmp_path / "docs" / "two.pdf", 1, first=5)
    first_out = tmp_path / "first"
    endpoint.run_by_name(
        tmp_path / "docs", base=base, report=first_out / "r.jsonl", out=first_out,
        out_folders=True,
    )  # fmt: skip
    sent = len(endpoint.jobs(base))

    again = tmp_path / "again"  # another machine, or the first folder lost
    summary, lines = endpoint.run_by_name(
        tmp_path / "docs", base=base, report=again / "r.jsonl", out=again, out_folders=True
    )

    assert summary.earlier == 2 and len(endpoint.jobs(base)) == sent  # nothing sent
    for name in ("one.pdf", "two.pdf"):
        (line,) = lines[name]
        local = again / line["prefix"].rsplit("/", 1)[1]
        for kind in ("md", "txt"):
            assert (local / f"document.{kind}").read_text() == read(
                endpoint.s3, line["keys"][f"document_{kind}"]
            )
        assert json.loads((local / "document.json").read_text())["complete"]
        assert (first_out / local.name / "document.md").read_text() == (
            local / "document.md"
        ).read_text()

    # One document alone, into a folder of its own, as the command does it
    single = Corpus([str(tmp_path / "docs" / "one.pdf")], [], BUCKET, "ocr/")
    alone = tmp_path / "alone"
    run = CorpusRun(
        single, endpoint.settings(), Options("e", base=base, out=alone), CorpusOptions()
    )
    asyncio.run(run.run())
    assert run.last_line is not None and run.last_line.earlier
    assert "Page 2" in (alone / "document.txt").read_text()


def test_a_run_after_a_failed_job_prices_only_the_pages_it_stored(endpoint, base, tmp_path):
    doc = pdf(tmp_path / "big" / "big.pdf", 30)
    endpoint.worker.fail = (f"{base}/big-", "/pages-0011-0020")
    summary, lines = endpoint.run_by_name(
        doc, base=base, pages_per_job=10, retries=0, report=tmp_path / "r1.jsonl"
    )
    endpoint.worker.fail = ()
    (line,) = lines["big.pdf"]
    assert line["status"] == "unfinished" and line["ok"] == 20 and line["not_read"] == 10
    assert summary.pages_this_run == 20

    pdf(tmp_path / "big" / "small.pdf", 1, first=50)
    summary, lines = endpoint.run_by_name(
        tmp_path / "big", base=base, pages_per_job=10, report=tmp_path / "r2.jsonl"
    )

    (line,) = lines["big.pdf"]
    assert line["status"] == "ok" and line["ok"] == 30 and line["jobs"] == 1
    assert line["stored_this_run"] == 10  # the other 20 the first run stored
    assert summary.pages["ok"] == 31 and summary.pages_this_run == 11
    summary.worker_s, summary.wall_s = 3600.0, 10.0
    # one worker-hour at US$3.6 over the 11 pages this run stored
    assert "US$327.273 per 1,000 pages" in summary.cost_line()
    assert "1.10 pages/s stored this run" in "\n".join(summary.lines())


def test_a_job_runpod_loses_is_sent_again_and_the_others_finish(endpoint, base, tmp_path):
    doc = pdf(tmp_path / "lost" / "case.pdf", 30)
    router = endpoint.router
    router.losing, router.lose = (f"{base}/case", "/pages-0011-0020"), 1

    summary, lines = endpoint.run_by_name(
        doc, base=base, pages_per_job=10, report=tmp_path / "r.jsonl"
    )

    assert router.lose == 0 and len(router.lost) == 1
    (line,) = lines["case.pdf"]
    assert line["status"] == "ok" and line["ok"] == 30 and line["jobs"] == 4, line
    sent = Counter(j.input["output_prefix"].rsplit("/", 1)[1] for j in endpoint.jobs(base))
    assert sent == {"pages-0001-0010": 1, "pages-0011-0020": 2, "pages-0021-0030": 1}

    # Not sent again (no retries left): the document's other jobs still end, and its line
    # says what the bucket has
    other = pdf(tmp_path / "lost2" / "case2.pdf", 30, first=100)
    router.lose = 1
    summary, lines = endpoint.run_by_name(
        other, base=base, pages_per_job=10, retries=0, report=tmp_path / "r2.jsonl"
    )
    assert summary.documents == Counter(unfinished=1) and summary.jobs == 3
    (line,) = lines["case2.pdf"]
    assert line["status"] == "unfinished" and line["ok"] == 20 and line["not_read"] == 10
    assert "HTTP 404" in line["error"], line
    recorded = json.loads(read(endpoint.s3, line["keys"]["document_json"]))
    assert [p["status"] for p in recorded["parts"]] == ["ok", "failed", "ok"]
    router.losing = ()


def test_a_tiff_of_several_pages_is_sent_whole_and_files_as_what_they_are(endpoint, base, tmp_path):
    folder = tmp_path / "mixed"
    tiff(folder / "fax.tiff", 3)
    tiff(folder / "one.tif", 1)
    (folder / "scan.pdf").write_bytes(png_bytes())  # a PNG named .pdf
    pdf(folder / "tmp", 2).rename(folder / "letter.png")  # a PDF named .png
    fax_in_bucket = tiff(tmp_path / "k.tif", 4).read_bytes()
    s3_client(endpoint.s3.endpoint).put_object(
        Bucket=BUCKET, Key=f"in-{base}/bucketfax.tif", Body=fax_in_bucket
    )

    summary, lines = endpoint.run_by_name(
        folder, f"s3://{BUCKET}/in-{base}/", base=base, report=tmp_path / "r.jsonl"
    )

    assert summary.documents == Counter(ok=5), lines
    pages = {name: line["ok"] for name, (line,) in lines.items()}
    assert pages == {
        "fax.tiff": 3, "one.tif": 1, "scan.pdf": 1, "letter.png": 2, "bucketfax.tif": 4,
    }  # fmt: skip
    # the job of each document, by its name
    inputs = {
        j.input["output_prefix"].split("/")[1].rsplit("-", 1)[0]: j.input
        for j in endpoint.jobs(base)
    }
    # the faxes as the job's `pdf`, every page selected (the worker makes them PDFs), uploaded
    # or read where they are
    assert inputs["fax"]["pdf"]["key"].endswith("/source.tiff") and inputs["fax"]["pages"] == "1-3"
    assert inputs["bucketfax"]["pdf"] == {"key": f"in-{base}/bucketfax.tif"}
    assert inputs["bucketfax"]["pages"] == "1-4"
    assert inputs["one"]["images"][0]["key"].endswith("/source.tif")  # one page: an image
    # each sent as what it holds, whatever its name, and uploaded under what it is
    assert inputs["scan"]["images"][0]["key"].endswith("/source.png")
    assert inputs["letter"]["pdf"]["key"].endswith("/source.pdf")
    assert inputs["letter"]["pages"] == "1-2"
    assert len([k for k in keys(endpoint.s3, f"ocr/{base}/") if "/source." in k]) == 4


def test_a_fax_an_earlier_version_read_as_one_image_is_read_whole(
    endpoint, base, tmp_path, monkeypatch
):
    fax = tiff(tmp_path / "faxes" / "fax.tiff", 3)
    read_as_one = client_documents.examine

    def as_before(path: Path, named: Any, limits: Any) -> Any:
        found = read_as_one(path, named, limits)
        return client_documents.Content("image", 1, found.suffix)  # the first page alone

    monkeypatch.setattr("vlm_ocr.client.submit.examine", as_before)
    _, lines = endpoint.run_by_name(fax, base=base, report=tmp_path / "r1.jsonl")
    assert lines["fax.tiff"][0]["pages"] == 1
    monkeypatch.undo()

    summary, lines = endpoint.run_by_name(fax, base=base, report=tmp_path / "r2.jsonl")

    (line,) = lines["fax.tiff"]
    assert line["status"] == "ok" and line["pages"] == line["ok"] == 3 and not line["earlier"]
    assert summary.pages_this_run == 3


def test_a_fax_is_read_whole_by_the_worker(workers, loopback_s3, base, tmp_path):
    """Through the real worker (the CPU engine): every page of a TIFF of three, in two jobs."""
    pages = samples.numbered_pages(3, lines=1, first=70)
    with pymupdf.open(stream=samples.pdf_from_pages(pages), filetype="pdf") as doc:
        frames = [
            Image.open(io.BytesIO(page.get_pixmap(dpi=100).tobytes("png"))).convert("L")
            for page in doc
        ]
    fax = tmp_path / "faxes" / "fax.tiff"
    fax.parent.mkdir()
    frames[0].save(fax, format="TIFF", save_all=True, append_images=frames[1:])
    report = tmp_path / "r.jsonl"

    done = workers.submit(
        "faxes", "--prefix", base, "--pages-per-job", "2", "--report", str(report), cwd=tmp_path
    )

    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [json.loads(text) for text in report.read_text().splitlines()]
    assert line["status"] == "ok" and line["pages"] == line["ok"] == 3 and line["jobs"] == 2
    text = read(loopback_s3, line["keys"]["document_txt"])
    for n in (70, 71, 72):
        assert f"Page {n} of 3" in text, text
