"""Compare texts by their reading content, not their markup.

`clean` keeps letters, digits and CJK characters and drops everything else: whitespace,
punctuation, HTML tags, Markdown syntax (`#`, `*`, `|`, `---`, link targets) and LaTeX commands.
`similarity` is the normalized edit similarity of two cleaned texts: 1 − Levenshtein / longer
length (rapidfuzz's C++ implementation).
"""

from __future__ import annotations

import re
import unicodedata

from rapidfuzz.distance import Levenshtein

_HTML_TAG = re.compile(r"<[^>]{0,200}>")
_MD_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_LATEX_CMD = re.compile(r"\\[A-Za-z]+")


def clean(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = _HTML_TAG.sub("", text)
    text = _MD_LINK_TARGET.sub("]", text)
    text = _LATEX_CMD.sub("", text)
    return "".join(ch for ch in text if ch.isalnum())


def similarity(a: str, b: str) -> float:
    """1.0 for the same reading content; 0.0 when nothing is shared (or one side is empty)."""
    ca, cb = clean(a), clean(b)
    if not ca and not cb:
        return 1.0
    return Levenshtein.normalized_similarity(ca, cb)
