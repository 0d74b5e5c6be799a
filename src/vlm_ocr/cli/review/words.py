"""Two readings of a page with the words they do not share marked, for a person to compare.

Words are runs of letters and digits, and each CJK character on its own (Chinese is not written
with spaces); they are matched case- and width-blind (NFKC) and without their punctuation, and
Markdown and HTML markup matches anything, so the Markdown of one reading and the plain lines of
the other differ only where their words do."""

from __future__ import annotations

import difflib
import html
import re
import unicodedata

_CJK = "\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff"
TOKEN = re.compile(rf"<[^<>\n]{{0,300}}>|[{_CJK}]|[^\s<{_CJK}]+")
_PUNCT = re.compile(r"[\W_]+")
# Past this many words a side, the readings are shown without marks (the matching is quadratic).
MAX_WORDS = 8000


def _words(text: str) -> list[tuple[int, int, str]]:
    """(start, end, key) of each word; markup and punctuation have an empty key."""
    out = []
    for m in TOKEN.finditer(text):
        token = m.group()
        key = "" if token.startswith("<") else _PUNCT.sub("", unicodedata.normalize("NFKC", token))
        out.append((m.start(), m.end(), key.casefold()))
    return out


def marked(a: str, b: str) -> tuple[str, str, bool]:
    """Both texts as HTML (escaped), the words of each the other lacks in `<mark>`; and whether
    they could be compared (False past MAX_WORDS)."""
    words_a, words_b = _words(a), _words(b)
    if max(len(words_a), len(words_b)) > MAX_WORDS:
        return html.escape(a), html.escape(b), False
    keyed_a = [w for w in words_a if w[2]]
    keyed_b = [w for w in words_b if w[2]]
    matcher = difflib.SequenceMatcher(
        None, [w[2] for w in keyed_a], [w[2] for w in keyed_b], autojunk=False
    )
    spans_a: list[tuple[int, int]] = []
    spans_b: list[tuple[int, int]] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op != "equal":
            spans_a += [(w[0], w[1]) for w in keyed_a[i1:i2]]
            spans_b += [(w[0], w[1]) for w in keyed_b[j1:j2]]
    return _mark(a, spans_a), _mark(b, spans_b), True


def _mark(text: str, spans: list[tuple[int, int]]) -> str:
    """The text escaped, the spans (in order, not overlapping) in `<mark>`; neighbours that
    only space separates share one mark."""
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and not text[merged[-1][1] : start].strip():
            merged[-1][1] = end
        else:
            merged.append([start, end])
    parts, at = [], 0
    for start, end in merged:
        parts.append(html.escape(text[at:start]))
        parts.append(f"<mark>{html.escape(text[start:end])}</mark>")
        at = end
    parts.append(html.escape(text[at:]))
    return "".join(parts)
