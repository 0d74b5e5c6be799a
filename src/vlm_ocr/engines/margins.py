"""Headers and footers the layout model misses: the margin rule.

A block is page furniture by this rule when all of these hold:

- it lies wholly in the top or the bottom tenth of the page (`MARGIN`);
- the page's body (every block not wholly in either margin) starts below it (or ends above it)
  by at least `MIN_GAP` line heights: nothing of the body sits beside it or close to it;
- it is short (at most two lines, `MAX_CHARS` characters) and says what furniture says: a page
  number ("12", "- 12 -", "· 12 ·", "Page 3 of 9", "第 3 页", "第3版"), a web address with at
  most a few words around it, a download stamp ("Downloaded from …", "下载自 …"), or a
  journal's line (a volume, issue or page range, a year in brackets before pages, ISSN, DOI,
  ©, 第…卷/期, 学报).

So a body line is never taken: it is either outside the margins, or close to the body, or says
none of these things.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..blocks import RawBlock

MARGIN = 0.1  # of the page's height, at the top and at the bottom
MIN_GAP = 0.5  # line heights between a margin block and the body (a paragraph's lines sit closer)
MAX_CHARS = 160
MAX_ROWS = 2
MAX_WORDS_BESIDE_URL = 3  # "Available at www.example.org"; a footnote around a link says more
MAX_CHARS_BESIDE_URL = 12  # the same, in a line read with its spaces lost or added
#: what the blocks the rule may relabel were labelled: text, or no region at all
TEXT_LABELS = frozenset({"text", "title", "reference"})

# The recognizer spaces small print out ("5 9", "C N 1 1 - 1 2 3 4") or runs it together, so
# numbers, addresses and CJK are matched in the text without its spaces (`tight`), words in the
# text as read (`flat`).
PAGE_NUMBER = re.compile(
    r"^(?:page|p\.|seite|página|第)?[-–—·•(\[]?(?:\d{1,4}|[ivxlc]{1,7})[-–—·•)\]]?"
    r"(?:(?:of|/|von|de|共)\d{1,4})?[页頁版]?$"
)
URL = re.compile(
    r"https?://[\w-]+\.[\w./%#?=&~-]+|www\.[\w-]+\.[\w./%#?=&~-]+"
    r"|\b[\w-]+(?:\.[\w-]+)*\.(?:com|org|net|edu|gov|cn|io)\b[\w./%#?=&~-]*"
)
TIGHT_URL = re.compile(r"https?://\S+|www\.\S+")
FLAT_CUES = re.compile(
    r"^(?:downloaded|accessed|retrieved|printed|provided|delivered)\b|\bdownloaded\s+(?:from|by)\b"
    r"|\b(?:vol|volume|no|issue|pp)\b\.?\s*\d|\bcopyright\b|\ball rights reserved\b",
    re.IGNORECASE,
)
TIGHT_CUES = re.compile(
    r"下载|来源[:：]"  # a download stamp
    r"|\((?:19|20)\d{2}\)\d+|(?:19|20)\d{2}[,;]\d+\(\d+\)"  # (2005) 153-160; 2019, 12(3)
    r"|(?:e-?)?(?:issn|isbn)[:：]?\d{4}-?\d{3}[\dx]|doi[:：]?10\.\d|doi\.org|©"
    r"|cn\d{2}-\d{4}|第\d+[卷期]|\d+卷\d+期|学报|杂志|期刊|版权所有"
)


def _tight(text: str) -> str:
    return "".join(text.split()).lower()


def is_page_number(text: str) -> bool:
    return bool(PAGE_NUMBER.match(_tight(text)))


def says_furniture(text: str) -> bool:
    """A page number, a web address alone, a download stamp or a journal's line."""
    flat, tight = " ".join(text.split()), _tight(text)
    if is_page_number(text) or FLAT_CUES.search(flat) or TIGHT_CUES.search(tight):
        return True
    if URL.search(flat):
        return len(URL.sub(" ", flat).split()) <= MAX_WORDS_BESIDE_URL
    if TIGHT_URL.search(tight):  # an address read with spaces in it
        return len(TIGHT_URL.sub("", tight)) <= MAX_CHARS_BESIDE_URL
    return False


def margin_label(block: RawBlock, top: bool) -> str:
    if is_page_number(block.content):
        return "margin-page-number"
    return "margin-header" if top else "margin-footer"


def apply(
    blocks: Sequence[RawBlock], *, height: float, line_h: float, furniture: frozenset[str]
) -> list[RawBlock]:
    """`blocks` with those the rule finds relabelled (`margin-header`, `margin-footer`,
    `margin-page-number`); `furniture`: the labels that are headers and footers already."""
    top_edge, bottom_edge = MARGIN * height, (1 - MARGIN) * height

    def in_margin(box: tuple[float, ...]) -> bool:
        return box[3] <= top_edge or box[1] >= bottom_edge

    body = [
        b.box
        for b in blocks
        if b.box is not None and b.label not in furniture and not in_margin(b.box)
    ]
    if not body:
        return list(blocks)  # a page of margin lines alone has no body to tell them from
    gap = MIN_GAP * line_h
    body_top, body_bottom = min(b[1] for b in body) - gap, max(b[3] for b in body) + gap
    out = []
    for block in blocks:
        box = block.box
        if box is not None and block.label in TEXT_LABELS and in_margin(box) and _short(block):
            top = box[3] <= top_edge
            clear = box[3] <= body_top if top else box[1] >= body_bottom
            if clear and says_furniture(block.content):
                block = RawBlock(margin_label(block, top), box, block.content)
        out.append(block)
    return out


def _short(block: RawBlock) -> bool:
    text = block.content.strip()
    return bool(text) and len(text) <= MAX_CHARS and text.count("\n") < MAX_ROWS
