"""How far two readings of one page agree, and where they differ in what changes meaning.

One implementation for the second opinion of a job (`worker.py`) and `vlm-ocr-lab eval --compare`.
`agreement` is `textsim.similarity` (1 − Levenshtein / longer length over letters, digits and
CJK characters). The critical tokens are those a reader of a legal text cannot afford to have
changed, compared as sequences so an inserted, dropped or altered one shows in context:

- article: 第…條/項/款 (Arabic, full-width or Chinese numerals), Article N, Art. N, § N;
- number: every other run of digits with its separators (dates like 2024-05-01 or 113.5.1,
  amounts like 1,250.00, clause numbers like 3.2);
- modal: 不得, 應不, 得, 應, 須 (a 得 read as 應 turns a permission into a duty).
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass

from .textsim import similarity

ARTICLE = re.compile(
    r"第\s*[0-9一二三四五六七八九十百千零〇兩两]+\s*[條項款]"
    r"|\b(?:Article|Art\.)\s*\d+[a-z]?\b|§\s*\d+[a-z]?",
    re.IGNORECASE,
)
NUMBER = re.compile(r"\d+(?:[.,/:-]\d+)*")
MODAL = re.compile(r"不得|應不|得|應|須")
CONTEXT = 12


@dataclass(frozen=True)
class Difference:
    kind: str  # "article", "number" or "modal"
    a: str
    b: str
    context_a: str
    context_b: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.a} ≠ {self.b}"


@dataclass(frozen=True)
class Agreement:
    agreement: float
    differences: list[Difference]

    def needs_review(self, min_agreement: float) -> bool:
        return self.agreement < min_agreement or bool(self.differences)


def agree(a: str, b: str) -> Agreement:
    return Agreement(round(similarity(a, b), 4), critical_differences(a, b))


def _tokens(text: str) -> dict[str, list[tuple[str, int]]]:
    """Critical tokens by kind, with their positions; article numbers are not numbers too."""
    articles = [(re.sub(r"\s+", "", m.group()), m.start()) for m in ARTICLE.finditer(text)]
    rest = ARTICLE.sub(lambda m: " " * len(m.group()), text)
    return {
        "article": articles,
        "number": [(m.group(), m.start()) for m in NUMBER.finditer(rest)],
        "modal": [(m.group(), m.start()) for m in MODAL.finditer(text)],
    }


def _context(text: str, pos: int | None) -> str:
    if pos is None:
        return ""
    return text[max(0, pos - CONTEXT) : pos + CONTEXT].replace("\n", " ")


def critical_differences(a: str, b: str) -> list[Difference]:
    a, b = unicodedata.normalize("NFKC", a), unicodedata.normalize("NFKC", b)
    tokens_a, tokens_b = _tokens(a), _tokens(b)
    diffs = []
    for kind in ("article", "number", "modal"):
        ta, tb = tokens_a[kind], tokens_b[kind]
        matcher = difflib.SequenceMatcher(
            a=[t for t, _ in ta], b=[t for t, _ in tb], autojunk=False
        )
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                continue
            diffs.append(
                Difference(
                    kind=kind,
                    a=" ".join(t for t, _ in ta[i1:i2]) or "(none)",
                    b=" ".join(t for t, _ in tb[j1:j2]) or "(none)",
                    context_a=_context(a, ta[i1][1] if i1 < len(ta) else None),
                    context_b=_context(b, tb[j1][1] if j1 < len(tb) else None),
                )
            )
    return diffs
