"""The docs hold together: the README stays a front page, and every relative link in the README,
CONTRIBUTING.md and docs/ points at a file that exists, and with an anchor at one of its
headings (as GitHub names them)."""

from __future__ import annotations

import re
from pathlib import Path

from .support import ROOT

DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
FRONT_PAGE_LINES = 450
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(path: Path) -> str:
    """The document without its code blocks (whose `#` lines are no headings, nor links)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings: lower case, punctuation dropped, spaces to
    hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", prose(path), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= FRONT_PAGE_LINES, "move the reference into docs/"


def test_every_relative_link_points_at_a_file_and_a_heading_that_exist() -> None:
    broken = []
    for doc in DOCS:
        for target in LINK.findall(CODE.sub("", prose(doc))):  # a link in code is an example
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            if not path.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert broken == []


def test_the_docs_are_linked_from_the_readme() -> None:
    readme = prose(ROOT / "README.md")
    for doc in DOCS[1:]:
        assert f"]({doc.relative_to(ROOT)}" in readme, doc.name
