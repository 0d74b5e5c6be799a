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


def test_the_cold_start_cell_gives_the_other_start_modes_start_where_one_was_measured() -> None:
    from vlm_ocr.engines.families.olmocr import OlmOcr
    from vlm_ocr_lab import measured

    def run(start: str, ready: float, pace: float | None, mode: str) -> measured.Run:
        row = {
            "date": "2026-12-02", "commit": "abc1234", "gpu": "NVIDIA H200", "vllm": "0.32.0",
            "transformers": "5.17.0", "family": "olmocr", "overrides": {},
            "start": start, "engine_ready_s": ready, "phases": {}, "pages": 512 if pace else 0,
            "failed": 0, "failed_by_reason": {}, "pages_per_s": pace,
            "direct_pages_per_s": pace, "usd_per_million_pages": 100.0 if pace else None,
            "start_mode": mode,
        }  # fmt: skip
        return measured.parse(json.dumps(row))

    mine = OlmOcr.start_mode.value
    theirs = measured.other_start("olmocr")["START_MODE"]
    default, warm = run("fresh", 52.1, 11.7, mine), run("warm", 36.8, None, mine)
    other = run("fresh", 108.5, 10.0, theirs)
    assert default.at_defaults and other.off_defaults == {"START_MODE": theirs}
    checkpoint = OlmOcr.checkpoints[0]
    row = family_table.Row(OlmOcr, checkpoint, default, warm, other)
    _, start, _, _ = family_table.pace(row, None)
    assert start == (
        f"52.1 s fresh, 36.8 s on warm caches; `START_MODE={theirs}`: 108.5 s fresh and 10 pages/s"
    )
    older = dataclasses.replace(other, vllm="0.26.0")
    for another in (None, older):  # none measured, or on another vLLM: no comparison made
        row = family_table.Row(OlmOcr, checkpoint, default, warm, another)
        assert family_table.pace(row, None)[1] == "52.1 s fresh, 36.8 s on warm caches"
    # measured only in the other mode (the family's changed since): shown in it, so named
    speed, start, _, _ = family_table.pace(
        family_table.Row(OlmOcr, checkpoint, None, None, other), None
    )
    assert speed == f"`START_MODE={theirs}`: 10 / 10 (512 pages)"
    assert start == f"`START_MODE={theirs}`: 108.5 s fresh"
