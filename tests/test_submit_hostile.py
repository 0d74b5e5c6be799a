"""`vlm-ocr submit` over what a user's disk holds at its worst: a file written or removed while
the run reads it, names that are not UTF-8 or hold control characters, a document of too many
pages, and a document whose line cannot be written. The stand-in endpoint over workers that
answer at once (each selected page stored as a line of text), moto's S3 server as the bucket:
what is tested is the client's bookkeeping, and every job it sends is seen."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymupdf
import pytest

from vlm_ocr import samples
from vlm_ocr.client import submit as client_submit
from vlm_ocr.client.documents import CHANGED, REMOVED
from vlm_ocr.client.report import Report
from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3, s3_client

from .support.corpus_endpoint import CorpusEndpoint
from .support.workers import BUCKET, keys, read


@pytest.fixture(scope="module")
def endpoint(loopback_s3: LoopbackS3) -> Iterator[CorpusEndpoint]:
    ep = CorpusEndpoint(loopback_s3)
    yield ep
    ep.stop()


@pytest.fixture
def base() -> str:
    """The bucket folder of this test's documents (the endpoint and the bucket are shared)."""
    return f"h-{uuid.uuid4().hex[:8]}"


def pdf_bytes(pages: int, first: int = 1) -> bytes:
    return samples.pdf_from_pages(samples.numbered_pages(pages, lines=1, first=first))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source_of(s3: LoopbackS3, line: dict) -> bytes:
    key = line["keys"]["source"]
    return s3_client(s3.endpoint).get_object(Bucket=BUCKET, Key=key)["Body"].read()


def test_a_file_replaced_between_its_reads_is_refused_and_nothing_is_stored(
    endpoint, base, tmp_path, monkeypatch
):
    doc = tmp_path / "in" / "scan.pdf"
    doc.parent.mkdir()
    first, second = pdf_bytes(3), pdf_bytes(1, first=7)
    doc.write_bytes(first)
    identity = client_submit.local_identity

    def then_saved_again(listed: Any, limits: Any) -> str:
        sha = identity(listed, limits)
        (doc.parent / ".tmp").write_bytes(second)  # as an editor saves: a new file in its place
        os.replace(doc.parent / ".tmp", doc)
        return sha

    monkeypatch.setattr(client_submit, "local_identity", then_saved_again)
    summary, (line,) = endpoint.run(doc, base=base, report=tmp_path / "r1.jsonl")

    assert line["status"] == "refused" and line["error"] == CHANGED, line
    assert summary.exit_code == 1
    assert endpoint.jobs(base) == [] and keys(endpoint.s3, f"ocr/{base}/") == []

    # once it is still, the version there is sent, under its own name and hash
    monkeypatch.undo()
    summary, (line,) = endpoint.run(doc, base=base, report=tmp_path / "r2.jsonl")
    assert line["status"] == "ok" and line["pages"] == line["ok"] == 1, line
    assert source_of(endpoint.s3, line) == second
    manifest = json.loads(read(endpoint.s3, line["keys"]["document_json"]))
    assert manifest["source_sha256"] == sha256(second) and manifest["page_count"] == 1


def test_a_file_written_while_it_is_sent_is_sent_as_it_was_read(
    endpoint, base, tmp_path, monkeypatch
):
    doc = tmp_path / "scan.pdf"
    first = pdf_bytes(3, first=20)
    doc.write_bytes(first)
    examined = client_submit.examine
    copies: list[Path] = []

    def then_written(path: Path, named: Any, limits: Any) -> Any:
        found = examined(path, named, limits)
        copies.append(path)
        doc.write_bytes(pdf_bytes(5, first=40))  # in place, while the run counts and uploads
        return found

    monkeypatch.setattr(client_submit, "examine", then_written)
    _, (line,) = endpoint.run(doc, base=base, report=tmp_path / "r.jsonl")

    # the pages counted, the bytes uploaded and the name they are stored under: one version
    assert line["status"] == "ok" and line["pages"] == line["ok"] == 3, line
    assert source_of(endpoint.s3, line) == first
    manifest = json.loads(read(endpoint.s3, line["keys"]["document_json"]))
    assert manifest["source_sha256"] == sha256(first)
    assert line["prefix"].endswith(sha256(first)[:12])
    # read from a copy of its own, which is gone once it is uploaded
    assert copies and copies[0] != doc and not copies[0].exists()


def test_a_file_removed_while_the_run_reads_it_is_refused_in_one_line(
    endpoint, base, tmp_path, monkeypatch
):
    doc = tmp_path / "scan.pdf"
    doc.write_bytes(pdf_bytes(1))
    identity = client_submit.local_identity

    def then_removed(listed: Any, limits: Any) -> str:
        sha = identity(listed, limits)
        doc.unlink()
        return sha

    monkeypatch.setattr(client_submit, "local_identity", then_removed)
    _, (line,) = endpoint.run(doc, base=base, report=tmp_path / "r.jsonl")
    assert line["status"] == "refused" and line["error"] == REMOVED, line


def page(path: Path | bytes, data: bytes) -> None:
    with open(path, "wb") as out:
        out.write(data)


def test_names_not_utf8_or_with_control_characters_are_sent_recorded_and_shown_escaped(
    endpoint, base, tmp_path, caplog
):
    folder = tmp_path / "names"
    folder.mkdir()
    page(folder / "plain.pdf", pdf_bytes(1))
    page(os.fsencode(folder) + b"/bad-\xff\xfe-utf8.pdf", pdf_bytes(1, first=3))
    with pymupdf.open(stream=pdf_bytes(1, first=5), filetype="pdf") as doc:
        page(os.fsencode(folder) + b"/bad-\xff-scan.png", doc[0].get_pixmap(dpi=50).tobytes("png"))
    page(folder / "esc-\x1b[2J.pdf", pdf_bytes(1, first=7))
    page(folder / "nl-\n9 documents: 9 ok.pdf", b"no PDF")
    report = tmp_path / "r.jsonl"

    with caplog.at_level(logging.INFO):
        summary, lines = endpoint.run(folder, base=base, report=report)

    # every document has its line, none left out in silence, and the run is not all ok
    assert summary.documents == Counter(ok=4, refused=1) and summary.exit_code == 1
    names = {Path(line["source"]).name: line for line in lines}
    assert set(names) == {
        "plain.pdf", "bad-\\xff\\xfe-utf8.pdf", "bad-\\xff-scan.png", "esc-\x1b[2J.pdf",
        "nl-\n9 documents: 9 ok.pdf",
    }  # fmt: skip
    for line in lines:
        if line["status"] == "ok":  # its document.json written, naming it as the line does
            manifest = json.loads(read(endpoint.s3, line["keys"]["document_json"]))
            assert manifest["source"] == line["source"]
    # a terminal is given no control character: no screen cleared, no line faked
    said = [*summary.lines(), *(r.getMessage() for r in caplog.records)]
    assert not any("\x1b" in text or "\n" in text for text in said), said
    assert any("nl-\\n9 documents: 9 ok.pdf: refused" in text for text in said)

    # recorded: the next run sends nothing again
    again, _ = endpoint.run(folder, base=base, report=tmp_path / "again.jsonl")
    assert again.earlier == 4 and again.jobs == 0


def test_a_document_whose_line_cannot_be_written_is_still_counted(
    endpoint, base, tmp_path, monkeypatch
):
    page(tmp_path / "one.pdf", pdf_bytes(1))
    page(tmp_path / "two.pdf", pdf_bytes(1, first=9))
    write = Report.write

    def failing(self: Report, line: Any) -> None:
        if line.source.endswith("two.pdf") and line.status == "ok":
            raise RuntimeError("a fault of ours")
        write(self, line)

    monkeypatch.setattr(Report, "write", failing)
    summary, lines = endpoint.run(
        tmp_path / "one.pdf", tmp_path / "two.pdf", base=base, report=tmp_path / "r.jsonl"
    )
    assert summary.documents == Counter(ok=1, unfinished=1) and summary.exit_code == 1
    (said,) = [line for line in lines if line["source"].endswith("two.pdf")]
    assert "could not be recorded (RuntimeError: a fault of ours)" in said["error"]


def test_a_document_of_too_many_pages_is_refused_before_anything_is_sent(endpoint, base, tmp_path):
    # 10,001 empty pages in a small file: refused, not split into 201 jobs of 50
    many = pymupdf.open()
    for _ in range(10_001):
        many.new_page(width=612, height=792)
    page(tmp_path / "many.pdf", many.tobytes())
    _, (line,) = endpoint.run(tmp_path / "many.pdf", base=base, report=tmp_path / "r.jsonl")
    assert line["status"] == "refused" and "10,001 pages, over the 10,000" in line["error"]
    assert endpoint.jobs(base) == [] and keys(endpoint.s3, f"ocr/{base}/") == []
