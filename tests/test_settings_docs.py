"""One source of truth: the docs' generated parts (the settings table, the families' tables) are
what the tools write now from `settings.py` and `FAMILIES`, so they cannot drift from the code."""

from __future__ import annotations

import dataclasses
import json
import re

from vlm_ocr.engines.families import FAMILIES
from vlm_ocr.settings import declared_fields
from vlm_ocr_lab.docs import family_docs, family_table, generated
from vlm_ocr_lab.docs.settings_docs import markdown_table, settings_table

from .support import ROOT

SETTINGS_DOC = ROOT / "docs" / "settings.md"
FAMILIES_DOC = ROOT / "docs" / "models.md"
README = ROOT / "README.md"


def test_the_settings_table_is_what_the_declarations_give() -> None:
    shown = generated.region(SETTINGS_DOC.read_text(), "settings")
    assert shown == markdown_table(), "run python -m vlm_ocr_lab.docs.settings_docs --write"
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \|", shown, flags=re.M)
    assert rows == [name.upper() for name, _ in declared_fields()]


def test_the_families_tables_are_what_the_families_classes_give() -> None:
    marked = set()
    for doc in (FAMILIES_DOC, README):
        text = doc.read_text()
        for name, make in family_docs.REGIONS.items():
            shown = generated.region(text, name)
            if shown is not None:
                marked.add(name)
                assert shown == make(), f"run python -m vlm_ocr_lab.docs.family_docs --write {doc}"
    assert marked == set(family_docs.REGIONS)  # each one somewhere


def test_the_readmes_table_names_every_checkpoint_its_licence_and_what_measured_it() -> None:
    table = generated.region(README.read_text(), "family-table") or ""
    rows = table.splitlines()[2:]
    checkpoints = [c for f in FAMILIES.values() for c in f.checkpoints]
    assert len(rows) == len(checkpoints)
    for row, c in zip(rows, checkpoints, strict=True):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[1].startswith(f"`{c.repo}`") and cells[3]  # its licence
        measured_with = cells[-1]
        assert measured_with == "—" or measured_with.startswith("vLLM ")
        if measured_with == "—":
            assert cells[5] == family_table.NOT_MEASURED


def test_a_default_that_is_the_familys_own_names_every_familys_value() -> None:
    described = {var: desc for var, _, desc in settings_table()}
    for name, value in family_docs.PER_FAMILY.items():
        text = described[name.upper()]
        assert "family's own" in text, name
        said = {
            family: int(number)
            for names, number in re.findall(r"((?:`[^`]+`(?:, | and )?)+) (\d+)", text)
            for family in re.findall(r"`([^`]+)`", names)
        }
        assert said == {f.name: value(f) for f in FAMILIES.values()}, name
        for family in FAMILIES.values():  # a kind of checkpoint served otherwise says its own
            for label, variant in family.variants().items():
                if value(variant) != value(family):
                    assert f"{family.name}'s {label}: {value(variant)}" in text, name
    assert all(f"`{f}`" in described["MODEL_FAMILY"] for f in FAMILIES)


def test_a_region_is_replaced_in_place() -> None:
    text = "before\n<!-- generated: x by a tool -->\nold\n<!-- end: x -->\nafter\n"
    new = generated.replaced(text, "x", "| a |")
    assert new == "before\n<!-- generated: x by a tool -->\n\n| a |\n\n<!-- end: x -->\nafter\n"
    assert generated.region(new, "x") == "| a |" and generated.region(new, "y") is None


def test_the_cold_start_cell_gives_the_fast_start_where_one_was_measured() -> None:
    from vlm_ocr.engines.families.olmocr import OlmOcr
    from vlm_ocr_lab import measured

    def run(start: str, ready: float, pace: float | None, **overrides: str) -> measured.Run:
        row = {
            "date": "2026-12-02", "commit": "abc1234", "gpu": "NVIDIA H200", "vllm": "0.32.0",
            "transformers": "5.17.0", "family": "olmocr", "overrides": overrides,
            "start": start, "engine_ready_s": ready, "phases": {}, "pages": 512 if pace else 0,
            "failed": 0, "failed_by_reason": {}, "pages_per_s": pace,
            "direct_pages_per_s": pace, "usd_per_million_pages": 100.0 if pace else None,
        }  # fmt: skip
        return measured.parse(json.dumps(row))

    throughput, warm = run("fresh", 177.6, 10.5), run("warm", 69.7, None)
    fast = run("fresh", 113.5, 11.3, START_MODE="fast")
    checkpoint = OlmOcr.checkpoints[0]
    row = family_table.Row(OlmOcr, checkpoint, throughput, warm, fast)
    _, start, _, _ = family_table.pace(row, None)
    assert (
        start
        == "177.6 s fresh, 69.7 s on warm caches; `START_MODE=fast`: 113.5 s fresh and 11.3 pages/s"
    )
    older = dataclasses.replace(fast, vllm="0.26.0")
    for other in (None, older):  # none measured, or on another vLLM: no comparison made
        row = family_table.Row(OlmOcr, checkpoint, throughput, warm, other)
        assert family_table.pace(row, None)[1] == "177.6 s fresh, 69.7 s on warm caches"
