"""`vlm-ocr submit` as a user met it: file names with letters a key may not hold, a refusal of
the client's own making sent again by the next run, `--report` and `--out` checked before
anything is sent, and pages never read told apart from failed ones. Two CPU-engine workers
behind the stand-in endpoint, moto's S3 server as the bucket (as in test_corpus)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter

import pytest

from vlm_ocr.client.corpus import CorpusOptions
from vlm_ocr.client.manifest import DocumentManifest, Part, split_pages
from vlm_ocr.client.report import DocumentLine, Summary
from vlm_ocr.client.submit import Options
from vlm_ocr.contract import PageReport, check_prefix
from vlm_ocr_lab.standins.loopback_s3 import s3_client

from .support import unwritable_folder
from .support.workers import BUCKET, keys, read
from .test_corpus import corpus_of, image, jobs_under, lines_of, pdf, run_corpus


@pytest.fixture
def prefix() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def test_names_with_letters_a_key_may_not_hold_are_sent_and_stored(
    workers, loopback_s3, prefix, tmp_path
):
    folder = tmp_path / "in"
    pdf(folder / "Case 42 合約.pdf", 2)
    pdf(folder / "été.pdf", 1, first=5)
    image(folder / "掃描.png", first=7)
    pdf(folder / "Case 42.pdf", 1, first=9)
    report = tmp_path / "corpus.jsonl"

    done = workers.submit(str(folder), "--prefix", prefix, "--report", str(report), cwd=tmp_path)

    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 documents: 4 ok" in done.stdout
    lines = lines_of(report)
    assert {line["status"] for line in lines.values()} == {"ok"}
    for line in lines.values():
        check_prefix(line["prefix"])  # what the worker accepts as output_prefix
        assert line["keys"]["document_txt"] in keys(loopback_s3, line["keys"]["document_txt"])
    # an ASCII name keeps the folder earlier runs gave it (so they are found)
    assert lines["Case 42.pdf"]["prefix"].split("/")[-1].startswith("Case-42-")
    assert lines["Case 42 合約.pdf"]["prefix"].split("/")[-1].startswith("Case-42-")
    assert lines["Case 42 合約.pdf"]["prefix"] != lines["Case 42.pdf"]["prefix"]


def test_a_refusal_of_the_clients_making_is_sent_again_by_the_next_run(
    workers, loopback_s3, prefix, tmp_path, monkeypatch
):
    doc = pdf(tmp_path / "d" / "one.pdf", 2, first=50)
    options = Options("e", base=prefix, poll_s=0.1)
    good = Part.output_prefix
    # a client that builds a prefix the worker refuses (as one did for 合約.pdf)
    monkeypatch.setattr(Part, "output_prefix", lambda self, p: f"{p}/pages-合約")
    first = asyncio.run(run_corpus(workers, corpus_of(doc), options, CorpusOptions()).run())
    assert first.documents == Counter(unfinished=1)
    assert first.jobs == 1  # not sent again in the run: it would be refused the same way
    assert len(jobs_under(workers, prefix)) == 1
    key = next(k for k in keys(loopback_s3, f"ocr/{prefix}/") if k.endswith("/document.json"))
    recorded = json.loads(read(loopback_s3, key))
    assert recorded["parts"][0]["error"].startswith("input.output_prefix")
    # as an earlier version recorded it: final, which a re-run skipped as finished
    recorded["parts"][0]["final"] = True
    s3_client(loopback_s3.endpoint).put_object(
        Bucket=BUCKET, Key=key, Body=json.dumps(recorded).encode()
    )

    monkeypatch.setattr(Part, "output_prefix", good)
    report = tmp_path / "again.jsonl"
    again = asyncio.run(
        run_corpus(workers, corpus_of(doc), options, CorpusOptions(report=report)).run()
    )

    assert again.documents == Counter(ok=1) and again.earlier == 0 and again.jobs == 1
    line = lines_of(report)["one.pdf"]
    assert line["ok"] == 2 and not line["earlier"]
    assert "Page 51" in read(loopback_s3, line["keys"]["document_txt"])


def test_report_and_out_are_checked_before_anything_is_sent(workers, prefix, tmp_path):
    doc = pdf(tmp_path / "case.pdf", 1)
    (tmp_path / "reports").mkdir()
    (tmp_path / "taken.txt").write_text("a file")

    locked, why = unwritable_folder(tmp_path)  # root included, whom permissions do not stop
    for args, said in (
        (("--report", "reports"), "--report: reports is a folder, not a file"),
        (("--out", "taken.txt"), "--out: taken.txt is a file, not a folder"),
        (("--report", "taken.txt/r.jsonl"), "taken.txt is a file, so taken.txt/r.jsonl"),
        (
            ("--report", f"{locked}/r.jsonl"),
            f"--report: {locked}/r.jsonl cannot be written ({why})",
        ),
    ):
        done = workers.submit(str(doc), "--prefix", prefix, *args, cwd=tmp_path)
        assert done.returncode == 2, done.stderr[-3000:]
        assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""
    assert jobs_under(workers, prefix) == []  # nothing was sent


def manifest_of(
    pages: list[PageReport], page_count: int = 20, *, finished: bool
) -> DocumentManifest:
    parts = split_pages(page_count, 10)
    for part in parts:
        part.status = "ok" if finished else "cancelled"
        part.final = finished
    m = DocumentManifest(
        endpoint="e", source_key="k", prefix="p", manifest_key="p/document.json",
        page_count=page_count, pages_per_job=10, parts=parts,
    )  # fmt: skip
    for page in pages:
        m.record(page)
    m.summarise()
    return m


def page(n: int, status: str = "ok") -> PageReport:
    return PageReport(page=n, source="k", status=status, error="broken" if status != "ok" else None)  # type: ignore[arg-type]


def test_pages_never_read_are_not_counted_as_failed() -> None:
    # interrupted: 10 pages stored, the other 10 never read
    cut = manifest_of([page(n) for n in range(1, 11)], finished=False)
    assert cut.totals.failed == 0 and cut.totals.not_read == 10 and not cut.complete
    line = DocumentLine.of(cut, earlier=False, jobs=1, seconds=1.0)
    assert line.status == "unfinished" and line.failed == 0 and line.not_read == 10
    # broken: a page its job reported failed
    broken = manifest_of([page(n) for n in range(1, 20)] + [page(20, "failed")], finished=True)
    line = DocumentLine.of(broken, earlier=False, jobs=2, seconds=1.0)
    assert line.status == "partial" and line.failed == 1 and line.not_read == 0
    # a document its job refused: no page read, and no page failed on its own
    refused = manifest_of([], finished=True)
    line = DocumentLine.of(refused, earlier=False, jobs=2, seconds=1.0)
    assert line.status == "failed" and line.failed == 0 and line.not_read == 20
    summary = Summary()
    summary.add(DocumentLine.of(cut, earlier=False, jobs=1, seconds=1.0))
    assert "10 ok, 0 blank, 0 failed, 10 not read" in summary.lines()[1]
