"""What makes a page need a person's eyes, and the order pages are shown in: those that need
attention first (the most serious flag first), then the rest in page order."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ...contract import PageReport

# In the order a page needing attention is shown; each with what it tells the reader.
FLAGS: dict[str, str] = {
    "failed": "the page failed: no text was stored",
    "missing": "a file the job stored for the page (its text, blocks or second reading) is "
    "missing or cannot be read",
    "review": "the second opinion disagrees, or differs in a critical token",
    "fallback": "the model gave no good answer: the PDF's own text layer was stored",
    "rotated": "the page was turned before it was read",
    "blank": "no ink was found: the page was stored empty",
}


def flags_of(page: PageReport, missing: Collection[int] = ()) -> list[str]:
    """The page's flags: from its report, and `missing`, the pages a stored file of which could
    not be read (the manifest cannot tell that: the file went after the job)."""
    found = {
        "failed": page.status == "failed",
        "missing": page.page in missing,
        "review": bool(page.review or page.differences),
        "fallback": page.fallback is not None,
        "rotated": bool(page.rotated),
        "blank": page.status == "blank",
    }
    return [flag for flag in FLAGS if found[flag]]


def ordered(pages: Sequence[PageReport], missing: Collection[int] = ()) -> list[PageReport]:
    """Pages needing attention (by their most serious flag, then page), then the others."""
    rank = {flag: n for n, flag in enumerate(FLAGS)}
    flagged = [p for p in pages if flags_of(p, missing)]
    flagged.sort(key=lambda p: (rank[flags_of(p, missing)[0]], p.page))
    return flagged + sorted((p for p in pages if not flags_of(p, missing)), key=lambda p: p.page)
