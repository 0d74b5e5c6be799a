"""The docs hold together: the README stays a front page, every relative link in the README,
CONTRIBUTING.md and docs/ points at a file that exists, and with an anchor at one of its
headings (as GitHub names them), and the objects they list for a job are those the store writes."""

from __future__ import annotations

import re
from pathlib import Path

from vlm_ocr.storage import JobKeys

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


def documented_objects(path: Path) -> set[str]:
    """The objects a doc's listing of a job's store names (lines `<prefix>/name  what it is`)."""
    names = set()
    for block in FENCE.findall(path.read_text(encoding="utf-8")):
        for line in block.splitlines():
            if line.startswith("<prefix>/"):
                first = re.split(r"\s{2,}", line, maxsplit=1)[0]
                names |= {
                    f"<prefix>/{n.strip().removeprefix('<prefix>/')}" for n in first.split(",")
                }
    return names


def job_keys_objects() -> set[str]:
    """Every object JobKeys names, one of each kind (page 1, page 3's figure and partial text);
    a kind of key added to JobKeys fails here until it is listed in the docs."""
    keys = JobKeys("<prefix>")
    made = {
        "page": keys.page(1),
        "blocks": keys.blocks(1),
        "second_reading": keys.second_reading(1),
        "figure": keys.figure(3, 1),
        "figure_name": f"<prefix>/{JobKeys.figure_name(3, 1)}",
        "partial": keys.partial(3),
        "document": keys.document("md"),
        "searchable_pdf": keys.searchable_pdf,
        "running_lines": keys.running_lines,
        "manifest": keys.manifest,
    }
    public = {name for name in dir(JobKeys) if not name.startswith("_")}
    assert public == set(made), "name the new kind of key here, and list it in the docs"
    return set(made.values()) | {keys.document("txt")}


def test_the_listed_stored_objects_are_those_the_store_writes() -> None:
    for doc in (ROOT / "README.md", ROOT / "docs/job.md"):
        assert documented_objects(doc) == job_keys_objects(), doc.name
