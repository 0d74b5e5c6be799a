"""Parts of the docs a tool writes: each between `<!-- generated: NAME -->` and
`<!-- end: NAME -->`, so the text around it stays hand-written and the tests can compare the
part with what the tool writes now."""

from __future__ import annotations

import re
from pathlib import Path


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- generated: {re.escape(name)} .*?-->\n)(.*?)(<!-- end: {re.escape(name)} -->)",
        re.S,
    )


def region(text: str, name: str) -> str | None:
    """What the document holds where it marks `name`, or None when it marks no such part."""
    found = _pattern(name).search(text)
    return found.group(2).strip("\n") if found else None


def replaced(text: str, name: str, content: str) -> str:
    pattern = _pattern(name)
    if not pattern.search(text):
        raise ValueError(f"no <!-- generated: {name} … --> part to replace")
    # blank lines around it: Markdown reads a table after an HTML comment only as its own block
    return pattern.sub(lambda m: f"{m.group(1)}\n{content}\n\n{m.group(3)}", text, count=1)


def write(path: Path, parts: dict[str, str]) -> None:
    text = path.read_text(encoding="utf-8")
    for name, content in parts.items():
        text = replaced(text, name, content)
    path.write_text(text, encoding="utf-8")
