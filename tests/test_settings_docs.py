"""One source of truth: the README's settings table matches the declared settings."""

from __future__ import annotations

import re

from vlm_ocr.tools.settings_docs import settings_table

from .support import ROOT


def readme_rows() -> dict[str, str]:
    text = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \| (.*?) \| .* \|$", text, flags=re.M)
    return {name: default.strip("`") if default != "—" else "" for name, default in rows}


def test_readme_table_lists_every_setting_with_its_default() -> None:
    declared = {name: default for name, default, _ in settings_table()}
    assert readme_rows() == declared
