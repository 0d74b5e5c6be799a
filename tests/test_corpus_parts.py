"""The corpus client's parts on their own: the listing as a stream, the gate on jobs in flight
and its default, the document checks, the time left, and the summary's cost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vlm_ocr import samples
from vlm_ocr.client.corpus import Progress
from vlm_ocr.client.documents import Limits, Listed, Refused, examine, local_identity
from vlm_ocr.client.endpoint import worker_count
from vlm_ocr.client.gate import MAX_AUTO_IN_FLIGHT, Gate, Plan, poll_interval
from vlm_ocr.client.listing import Corpus, UsageError, walk
from vlm_ocr.client.report import DocumentLine, Summary


def touch(path: Path, data: bytes = b"%PDF-") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_a_folder_is_walked_in_name_order_without_hidden_or_other_files(tmp_path: Path) -> None:
    for name in ("b.pdf", "a/z.png", "a/c.PDF", ".git/x.pdf", "notes.txt", "a/.x.jpg", "c.jpeg"):
        touch(tmp_path / name)
    found = [Path(d.source).relative_to(tmp_path).as_posix() for d in walk(tmp_path)]
    assert found == ["a/c.PDF", "a/z.png", "b.pdf", "c.jpeg"]


def test_a_bucket_prefix_is_listed_a_page_at_a_time_and_results_left_out() -> None:
    asked: list[str] = []

    def lister(prefix: str) -> Iterator[tuple[str, int, str]]:
        asked.append(prefix)
        yield "in/a.pdf", 10, '"e1"'
        yield "in/ocr-notes.txt", 10, '"e2"'
        yield "ocr/in/source.pdf", 10, '"e3"'  # a result of an earlier run
        raise AssertionError("read past what was asked for")

    corpus = Corpus(["s3://b/"], [], "b", results_prefix="ocr/", lister=lister)
    documents = corpus.documents()
    first = next(documents)  # the stream gives a document before the listing is over
    assert (first.key, first.size, first.etag, first.source) == (
        "in/a.pdf",
        10,
        '"e1"',
        "s3://b/in/a.pdf",
    )
    assert asked == [""]
    with pytest.raises(AssertionError):
        next(documents)


def test_a_list_file_names_files_keys_and_folders_and_reports_what_it_cannot(tmp_path: Path):
    one = touch(tmp_path / "one.pdf")
    touch(tmp_path / "folder" / "two.pdf")
    listed = tmp_path / "list.txt"
    listed.write_text(
        f"# a comment\n{one}\n\ns3://b/in/x.pdf\n{tmp_path / 'folder'}\nmissing.pdf\ns3://other/y.pdf\n"
    )
    corpus = Corpus([], [listed], "b", results_prefix="ocr/")
    corpus.check()
    found = list(corpus.documents())
    assert [d.path.name if d.path else d.key for d in found[:3]] == [
        "one.pdf",
        "in/x.pdf",
        "two.pdf",
    ]
    assert found[3].problem == "missing.pdf: no such file or folder"
    assert "not 'other'" in (found[4].problem or "")


def test_the_command_line_is_checked_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file or folder"):
        Corpus([str(tmp_path / "nothing")], [], "b", results_prefix="ocr/").check()
    with pytest.raises(UsageError, match="reads bucket 'b'"):
        Corpus(["s3://c/x/"], [], "b", results_prefix="ocr/").check()
    with pytest.raises(UsageError, match="--list"):
        Corpus([], [tmp_path / "none.txt"], "b", results_prefix="ocr/").check()
    one = touch(tmp_path / "one.pdf")
    assert Corpus([str(one)], [], "b", results_prefix="ocr/").single_file == one
    assert Corpus([str(tmp_path)], [], "b", results_prefix="ocr/").single_file is None


def test_the_default_limit_follows_the_workers_and_the_jobs_size() -> None:
    assert Plan.of(1, 50.0).limit == 8  # eight jobs of 50 pages a worker
    assert Plan.of(2, 50.0).limit == 16
    assert Plan.of(2, 4.0).limit == 200  # small documents: many more, one a job
    assert Plan.of(0, 50.0).limit == 8  # scaled to zero: counted as one worker
    assert Plan.of(40, 2.0).limit == MAX_AUTO_IN_FLIGHT
    assert "2 workers" in Plan.of(2, 4.0).said() and "200 jobs" in Plan.of(2, 4.0).said()
    assert worker_count({"workers": {"idle": 1, "running": 2, "initializing": 1, "ready": 3}}) == 4
    assert poll_interval(2.0, 10) == 2.0 and poll_interval(2.0, 250) == 5.0
    assert poll_interval(2.0, 10, queued=True) == 10.0


def test_the_gate_holds_at_most_its_limit_and_follows_a_new_one() -> None:
    async def scenario() -> list[int]:
        gate = Gate(None, plan=lambda: 2)
        inside, most = [0], []
        release = asyncio.Event()

        async def holder() -> None:
            async with gate:
                inside[0] += 1
                most.append(inside[0])
                await release.wait()
                inside[0] -= 1

        tasks = [asyncio.create_task(holder()) for _ in range(5)]
        await asyncio.sleep(0.05)
        at_two = gate.held
        await gate.set_limit(4)
        await asyncio.sleep(0.05)
        at_four = gate.held
        release.set()
        await asyncio.gather(*tasks)
        return [at_two, at_four, max(most), gate.held]

    assert asyncio.run(scenario()) == [2, 4, 4, 0]


def test_a_document_is_held_to_a_jobs_limits(tmp_path: Path) -> None:
    limits = Limits(max_bytes=10_000, max_image_pixels=1_000_000)
    good = touch(tmp_path / "good.pdf", samples.pdf_from_pages(samples.numbered_pages(2)))
    assert len(local_identity(Listed(str(good), path=good), limits)) == 64
    assert examine(good, "pdf", limits).pages == 2
    big = touch(tmp_path / "big.pdf", b"%PDF-" + b"0" * 20_000)
    with pytest.raises(Refused, match=r"0\.02 MB, over the 0\.01 MB limit \(MAX_DOWNLOAD_BYTES\)"):
        local_identity(Listed(str(big), path=big), limits)
    odd = touch(tmp_path / "notes.docx", b"PK")
    with pytest.raises(Refused, match="not a PDF or an image"):
        local_identity(Listed(str(odd), path=odd), limits)
    with pytest.raises(Refused, match="not a PDF"):
        examine(touch(tmp_path / "x.pdf", b"hello"), "pdf", limits)
    pdf = samples.pdf_from_pages(samples.numbered_pages(3, lines=1))
    miscounted = touch(tmp_path / "miscounted.pdf", pdf.replace(b"/Count 3", b"/Count 1"))
    assert examine(miscounted, "pdf", limits).pages == 3  # the pages the worker will read


def test_the_summary_prices_the_workers_time_and_says_whether_all_is_ok() -> None:
    summary = Summary(gpu_price=3.6)
    summary.add(DocumentLine(source="a.pdf", status="ok", pages=3, ok=3))
    summary.add(DocumentLine(source="b.pdf", status="ok", pages=1, ok=1, earlier=True))
    assert summary.exit_code == 0
    summary.add(DocumentLine.refused("c.pdf", "the PDF has no pages", 0.1))
    assert summary.exit_code == 1
    summary.worker_s, summary.wall_s = 1800.0, 10.0
    text = "\n".join(summary.lines())
    assert "3 documents: 2 ok, 1 refused (1 finished by an earlier run)" in text
    assert "0.500 worker-hours" in text and "US$1.80 at US$3.6 a worker-hour" in text
    assert "US$600.000 per 1,000 pages" in text  # three pages stored this run
    assert "c.pdf: refused: the PDF has no pages" in text
    assert summary.as_json()["cost_usd"] == 1.8


def test_the_time_left_counts_no_pages_for_duplicates_and_documents_finished_before() -> None:
    # ten listed: three opened (30 pages, 15 stored), one unreadable, one an earlier run
    # finished, two duplicates; the three not known yet are taken as ten pages each
    progress = Progress(
        documents_total=10, documents_taken=7, opened=3, unopened=1, earlier=1, duplicates=2
    )
    progress.pages_expected, progress.pages_stored = 30, 15
    progress.started = time.monotonic() - 100  # 0.15 pages/s
    assert progress.pages_estimated() == 30 + 3 * 10
    assert progress.left_s() == pytest.approx((60 - 15) / 0.15, rel=1e-3)
    progress.pages_failed = 5  # failed pages are not read again
    assert progress.left_s() == pytest.approx((60 - 20) / 0.15, rel=1e-3)
    assert Progress(documents_total=None, pages_expected=8).pages_estimated() == 8


def test_a_list_can_come_from_standard_input(tmp_path: Path, monkeypatch) -> None:
    import io
    import sys

    one = touch(tmp_path / "one.pdf")
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{one}\ns3://b/in/two.png\n"))
    corpus = Corpus([], [Path("-")], "b", results_prefix="ocr/")
    corpus.check()
    assert [d.path or d.key for d in corpus.documents()] == [one, "in/two.png"]


def test_a_documents_own_failure_is_told_by_the_workers_words(run) -> None:
    """The client sends a failed job again unless its error says the document caused it; these
    are the worker's words for both kinds."""
    from vlm_ocr.client.submit import OWN_FAULT
    from vlm_ocr.contract import PageReport
    from vlm_ocr.errors import JobStop
    from vlm_ocr.pipeline.verdict import verdict

    refused = run({"pdf": {"url": "ftp://example.com/x.pdf"}})  # its input refused
    unreadable = run({"images": [{"base64": "%%%"}]})  # its only page failed on its own
    for own in (refused, unreadable):
        assert own.status == "failed" and (own.error or "").startswith(OWN_FAULT), own.error
    failed = [PageReport(page=1, source="s", status="failed", error="engine gone")]
    for kind in ("store", "engine"):  # stopped from outside: worth sending again
        outside = verdict(failed, problems=[], stop=JobStop(kind, "down"))  # type: ignore[arg-type]
        assert outside.retry and not (outside.error or "").startswith(OWN_FAULT)


def test_a_run_that_sent_nothing_leaves_no_report_files(tmp_path: Path) -> None:
    import subprocess
    import sys

    from vlm_ocr.loopback import free_port
    from vlm_ocr_lab.standins.local_endpoint import worker_environ

    touch(tmp_path / "docs" / "a.pdf", samples.pdf_from_pages(samples.LEGAL_PAGES[:1]))
    nowhere = f"http://127.0.0.1:{free_port()}"  # a loopback port nothing listens on
    env = worker_environ(
        RUNPOD_API_BASE=f"{nowhere}/v2",
        RUNPOD_API_KEY="key",
        BUCKET_NAME="b",
        BUCKET_ENDPOINT_URL=nowhere,
        BUCKET_ACCESS_KEY_ID="id",
        BUCKET_SECRET_ACCESS_KEY="secret",
    )
    done = subprocess.run(
        [sys.executable, "-m", "vlm_ocr", "submit", "docs", "--endpoint", "e"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and "RUNPOD_API_BASE" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs"]  # no corpus.jsonl, no summary


def test_the_report_files_are_made_with_the_first_line_and_said_where(tmp_path, caplog) -> None:
    import logging

    from vlm_ocr.client.report import Report

    target = tmp_path / "out" / "corpus.jsonl"
    empty = Report(target)
    empty.close(Summary())
    assert empty.path is None and not (tmp_path / "out").exists()
    report = Report(target)
    with caplog.at_level(logging.INFO, logger="vlm_ocr.client.report"):
        report.write(DocumentLine(source="a.pdf", status="ok", pages=1, ok=1))
    assert f"corpus report: {target}" in caplog.text
    assert f"its summary at the end: {target.with_suffix('.summary.json')}" in caplog.text
    summary = Summary()
    summary.add(DocumentLine(source="a.pdf", status="ok", pages=1, ok=1))
    report.close(summary)
    assert report.path == target and report.summary_path == target.with_suffix(".summary.json")
    assert '"source":"a.pdf"' in target.read_text()
    assert '"ok": 1' in target.with_suffix(".summary.json").read_text()
