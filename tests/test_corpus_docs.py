"""One source of truth: what a corpus needs at each family's pace, in docs/deploying.md, is
what the generator writes now from benchmarks/gpu.jsonl."""

from __future__ import annotations

import json

from vlm_ocr_lab import measured
from vlm_ocr_lab.docs import corpus_docs, generated

from .support import ROOT

DEPLOYING = ROOT / "docs" / "deploying.md"


def test_the_corpus_sizing_table_is_what_the_measured_runs_give() -> None:
    text = DEPLOYING.read_text()
    for name, make in corpus_docs.REGIONS.items():
        shown = generated.region(text, name)
        assert shown == make(), (
            "run python -m vlm_ocr_lab.docs.corpus_docs --write docs/deploying.md"
        )


def _run(**values: object) -> measured.Run:
    row = {k: None for k in measured.REQUIRED} | {
        "date": "2026-12-01", "commit": "abc", "gpu": "NVIDIA H200", "vllm": "0",
        "transformers": "0", "family": "olmocr", "overrides": {}, "start": "fresh", "phases": {},
        "pages": 100, "failed": 0, "failed_by_reason": {},
    }  # fmt: skip
    family = str(values.get("family", row["family"]))
    row["start_mode"] = measured.family_start_mode(family)  # at its family's defaults
    return measured.parse(json.dumps(row | values))


def test_a_row_sizes_the_corpus_from_the_pace_and_the_price_of_the_run() -> None:
    rows = [
        _run(pages_per_s=10.0, usd_per_million_pages=100.0, engine_ready_s=150.0),
        _run(pages_per_s=12.0, usd_per_million_pages=None, overrides={"X": "1"}),  # not at defaults
    ]
    line = corpus_docs.row("olmocr", rows)
    # 100,000 pages at 10 pages/s: 2.8 GPU-hours; the price the run was costed at, US$3.6 an
    # hour; a million pages in a day at 10 pages/s a worker: 2 workers
    assert line == (
        "| `olmocr` | NVIDIA H200, 2026-12-01, 100 pages (abc) | 10 | 2.8 | 10 (US$3.6 an hour) "
        "| 2 | "
        "150 s |"
    )
    assert corpus_docs.row("chandra", rows).startswith("| `chandra` | not measured |")


def test_a_family_is_sized_by_its_first_checkpoint_not_its_newest_run() -> None:
    # LightOnOCR-3's 4B measured after its 0.8B: the family's row stays the 0.8B's, the
    # checkpoint it is served with unless MODEL_NAME names another
    small = "lightonai/LightOnOCR-3-0.8B"
    rows = [
        _run(family="lighton-ocr-3", model=small, pages_per_s=9.0, engine_ready_s=270.0),
        _run(family="lighton-ocr-3", model="lightonai/LightOnOCR-3-4B", pages_per_s=6.0,
             engine_ready_s=280.0),
    ]  # fmt: skip
    line = corpus_docs.row("lighton-ocr-3", rows)
    assert "| 9 |" in line and line.endswith("| 270 s |")
    # a family measured only on another checkpoint is sized by that one
    assert "| 6 |" in corpus_docs.row("lighton-ocr-3", rows[1:])
