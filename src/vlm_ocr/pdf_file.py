"""A PDF opened as the worker reads it: by the pages its page tree holds.

MuPDF finds a page by the counts of the page tree's nodes (`/Count`) and takes them as they are,
so a damaged file whose count is too low hides its last pages, and one too high makes pages of
nothing. The worker, its searchable PDF, `submit`'s page counts and the review's pictures all open
a PDF here, so they agree on its pages.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pymupdf


def file_sha256(path: str | Path) -> str:
    """A file's SHA-256, read a megabyte at a time: which document it is, whatever its name."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def is_pdf(head: bytes) -> bool:
    """Whether a file's first kilobyte is a PDF's (its header, after any whitespace)."""
    return head.lstrip()[:5].startswith(b"%PDF")


def open_pdf(path: str | Path) -> pymupdf.Document:
    """A PDF opened as the worker reads it: `recount`ed."""
    doc = pymupdf.open(path, filetype="pdf")
    recount(doc)
    return doc


def recount(doc: pymupdf.Document) -> int | None:
    """Set the page tree's counts to the pages it holds (in memory), and say what its /Count
    said where that was not so: MuPDF finds a page by the counts, so too low a count hides the
    last pages and too high makes pages of nothing."""
    if doc.needs_pass:
        return None
    counts = _tree_counts(doc)
    if counts is None:
        return None
    root, held = counts[0]
    kind, value = doc.xref_get_key(root, "Count")  # MuPDF refuses to count past a billion
    said = int(value) if kind == "int" else 0
    if held == said:
        return None
    for node, held in counts:
        doc.xref_set_key(node, "Count", str(held))
    return said


_REF = re.compile(rb"(\d+)\s+\d+\s+R")


def _tree_counts(doc: pymupdf.Document) -> list[tuple[int, int]] | None:
    """Each /Pages node of the page tree, root first, with the pages below it by its /Kids (each
    node read once, so a tree of any shape is walked in time of its size); None where the walk
    cannot be trusted either (a node met twice, no root)."""
    try:
        kind, value = doc.xref_get_key(doc.pdf_catalog(), "Pages")
        if kind != "xref":
            return None
        root = int(value.split()[0])
        seen, order, stack = {root}, [], [root]
        kids: dict[int, list[int]] = {}
        while stack:
            node = stack.pop()
            kind, value = doc.xref_get_key(node, "Kids")
            if kind == "xref":  # an array kept as an object of its own
                value = doc.xref_object(int(value.split()[0]))
            elif kind != "array":
                continue  # a leaf: a page
            kids[node] = [int(m) for m in _REF.findall(value.encode())]
            order.append(node)
            for kid in kids[node]:
                if kid in seen or not 0 < kid < doc.xref_length():
                    return None
                seen.add(kid)
                stack.append(kid)
    except (RuntimeError, ValueError):  # MuPDF's errors are RuntimeErrors; a broken reference
        return None
    held: dict[int, int] = {}
    for node in reversed(order):  # children before their parents
        held[node] = sum(held.get(kid, 1) for kid in kids[node])
    return [(node, held[node]) for node in order]
