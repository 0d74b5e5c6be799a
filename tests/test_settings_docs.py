"""One source of truth: the docs' generated parts (the settings table, the families' tables) are
what the tools write now from `settings.py` and `FAMILIES`, so they cannot drift from the code."""

from __future__ import annotations

import re

from vlm_ocr.engines.families import FAMILIES
from vlm_ocr.settings import declared_fields
from vlm_ocr_lab.docs import family_docs, generated
from vlm_ocr_lab.docs.settings_docs import markdown_table, settings_table

from .support import ROOT

SETTINGS_DOC = ROOT / "docs" / "settings.md"
FAMILIES_DOC = ROOT / "docs" / "models.md"


def test_the_settings_table_is_what_the_declarations_give() -> None:
    shown = generated.region(SETTINGS_DOC.read_text(), "settings")
    assert shown == markdown_table(), "run python -m vlm_ocr_lab.docs.settings_docs --write"
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \|", shown, flags=re.M)
    assert rows == [name.upper() for name, _ in declared_fields()]


def test_the_families_tables_are_what_the_families_classes_give() -> None:
    text = FAMILIES_DOC.read_text()
    for name, make in family_docs.REGIONS.items():
        assert generated.region(text, name) == make(), "run python -m vlm_ocr_lab.docs.family_docs"


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
    assert all(f"`{f}`" in described["MODEL_FAMILY"] for f in FAMILIES)


def test_a_region_is_replaced_in_place() -> None:
    text = "before\n<!-- generated: x by a tool -->\nold\n<!-- end: x -->\nafter\n"
    new = generated.replaced(text, "x", "| a |")
    assert new == "before\n<!-- generated: x by a tool -->\n\n| a |\n\n<!-- end: x -->\nafter\n"
    assert generated.region(new, "x") == "| a |" and generated.region(new, "y") is None
