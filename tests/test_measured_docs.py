"""Figures written once: the measured figures in the docs are tables written from the GPU
figures' data (`benchmarks/gpu.jsonl`) by `vlm_ocr_lab.docs.measured_docs`, the tables are what
it writes now, and the hand-written text around them does not type a row's figure again."""

from __future__ import annotations

import re

import pytest

from vlm_ocr.engines.families import FAMILIES
from vlm_ocr_lab import measured
from vlm_ocr_lab.docs import family_table, generated, measured_docs

from .support import ROOT

DOCS = {
    "docs/models.md": ("gpu-starts", "gpu-limits"),
    "docs/deploying.md": ("start-summary",),
    "docs/tools.md": ("bench-runs",),
}


@pytest.mark.parametrize("doc", list(DOCS))
def test_the_measured_tables_are_what_the_data_gives(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    rows = measured.runs()
    for name in DOCS[doc]:
        shown = generated.region(text, name)
        assert shown is not None, f"{doc} marks no {name} table"
        assert shown == measured_docs.REGIONS[name](rows), (
            f"run python -m vlm_ocr_lab.docs.measured_docs --write {doc}"
        )
    assert measured_docs.parts(text, rows).keys() == set(DOCS[doc])


def hand_written(text: str) -> str:
    """The text a person typed: without the generated tables and the tools' output samples
    (fenced blocks, and inline code, which quotes a tool's line)."""
    text = re.sub(r"<!-- generated: (\S+) .*?<!-- end: \1 -->", "", text, flags=re.S)
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`]*`", "", text)


def figures(run: measured.Run) -> set[str]:
    """How a row's starts and paces would read if typed again."""
    out = set()
    if run.engine_ready_s is not None:
        out.add(f"{run.engine_ready_s:g} s")
        out.add(f"{run.engine_ready_s:.1f} s")
    for pace in (run.pages_per_s, run.direct_pages_per_s):
        if pace is not None:
            out.add(f"{pace:.2f} pages/s")
            out.add(f"{pace:g} pages/s")
    return out


@pytest.mark.parametrize("doc", list(DOCS))
def test_no_rows_figure_is_typed_again_by_hand(doc: str) -> None:
    text = hand_written((ROOT / doc).read_text(encoding="utf-8"))
    typed = {
        f"{f} ({r.model}, {r.commit})"
        for r in measured.runs()
        for f in figures(r)
        # the end of a range ("23-28 s") spans runs, not one row's figure typed again
        if re.search(rf"(?<![\d.-]){re.escape(f)}", text)
    }
    assert typed == set(), "a figure of the data typed by hand: write it from the data instead"


def test_a_document_without_marks_gets_no_tables() -> None:
    assert measured_docs.parts("no marks here", []) == {}


def test_the_tables_read_rows_as_the_reader_gives_them() -> None:
    rows = [
        measured.parse(
            '{"date": "2026-12-03", "commit": "abc1234", "gpu": "NVIDIA H200", "vllm": "0.32.0", '
            '"transformers": "5.19.0", "family": "dots-ocr", "model": "org/Some-OCR-1B", '
            '"overrides": {"MAX_NUM_SEQS": "128"}, "start": "fresh", "engine_ready_s": 101.5, '
            '"phases": {"first_log_line_at_s": 20.5, "engine_init_s": 40.0, "warmup_page_s": 0.8}, '
            '"pages": 256, "failed": 2, "failed_by_reason": {"engine: HTTP 400": 2}, '
            '"pages_per_s": 12.5, "direct_pages_per_s": 12.0, "usd_per_million_pages": 88.7, '
            '"gauges": "256 running", "start_mode": "fast"}'
        )
    ]
    starts = measured_docs.starts_table(rows).splitlines()
    assert starts[2] == (
        "| Some-OCR-1B | fresh | `MAX_NUM_SEQS=128` | **101.5 s** | first log line at 20.5 s; "
        "engine init 40 s; warm-up page 0.8 s | 2026-12-03, abc1234, vLLM 0.32.0 |"
    )
    runs = measured_docs.bench_runs_table(rows).splitlines()
    assert "| 256 | **2 of 256**: 2 × engine: HTTP 400 | 12.50 | 12.00 | 1.04 | 89 |" in runs[2]
    # a run with settings of its own is not the model's figure at its defaults
    assert len(measured_docs.limits_table(rows).splitlines()) == 2
    assert len(measured_docs.start_summary_table(rows).splitlines()) == 2


def test_a_pace_whose_answers_had_no_text_says_so() -> None:
    # a stand-in's greedy answers repeat a token that decodes to no text: the pace is shown with
    # the count beside it, wherever it is shown, and a row without such answers reads as before
    line = (
        '{"date": "2026-12-06", "commit": "abc1234", "gpu": "NVIDIA H200", "vllm": "0.32.0", '
        '"transformers": "5.19.0", "family": "chandra", "model": "datalab-to/chandra-ocr-2", '
        '"overrides": {}, "start": "fresh", "engine_ready_s": 50.0, "phases": {}, '
        '"pages": 512, "failed": 0, "failed_by_reason": {}, "pages_per_s": 4.5, '
        '"direct_pages_per_s": 4.4, "usd_per_million_pages": 246.3, "start_mode": "%s"%s}'
    )
    own = FAMILIES["chandra"].start_mode.value  # at the family's defaults
    textless = measured.parse(line % (own, ', "answers_without_text": 1024'))
    plain = measured.parse(line % (own, ""))
    assert textless.textless == "1,024 answers without text" and plain.textless == ""
    for table in (measured_docs.limits_table, measured_docs.bench_runs_table):
        assert "| 4.50 (1,024 answers without text) | 4.40 |" in table([textless])
        assert "| 4.50 | 4.40 |" in table([plain])
    chandra = FAMILIES["chandra"]
    row = family_table.Row(chandra, chandra.checkpoints[0], textless, None)
    assert family_table.pace(row, None)[0] == "4.5 / 4.4 (512 pages, 1,024 answers without text)"
