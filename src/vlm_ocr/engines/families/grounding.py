"""LightOnOCR-3's grounding answers, read without trusting them.

Asked with the page and the word `grounding`, the model writes one marker per layout block,
`![label](x1,y1,x2,y2)`, then the block's text up to the next marker (a table or a list runs over
several lines, and the text may start on the line after its marker). The box is left, top,
right, bottom on a 0-1000 grid of the image it was sent, whatever its size; a `+` after the
label (`text+`) marks a block that continues the one before it, a paragraph carried over to the
next column.

What the model does not promise is handled here: text before the first marker is kept as a block
of its own without a box; a marker the answer was cut inside (at its token cap) is dropped from
the last block's text; boxes are taken as written (the worker's `place` clamps them to the page
and orders their corners); at most `limit` markers are read, the rest of the answer is left with
a note; and an answer that ends in one block written over and over is a loop, refused.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

MARKER = re.compile(
    r"!\[([A-Za-z_][\w-]{0,39}?)(\+?)\]"
    r"\(\s*(-?\d{1,9}(?:\.\d{1,6})?)\s*,\s*(-?\d{1,9}(?:\.\d{1,6})?)\s*,"
    r"\s*(-?\d{1,9}(?:\.\d{1,6})?)\s*,\s*(-?\d{1,9}(?:\.\d{1,6})?)\s*\)[ \t]*"
)
# the start of a marker at the very end of an answer, cut off before it closed
CUT_MARKER = re.compile(r"!\[[^\]\n]{0,41}(?:\]\([^)\n]{0,80})?\Z")
LOOP = 8  # the same block this many times at the end of an answer: the model looped


@dataclass(frozen=True)
class Marked:
    """One block as the model marked it."""

    label: str
    #: x1, y1, x2, y2 on the 0-1000 grid, as written (None: text before the first marker)
    box: tuple[float, float, float, float] | None
    text: str
    continues: bool = False


@dataclass(frozen=True)
class Grounded:
    blocks: list[Marked]
    notes: list[str]

    @property
    def marked(self) -> bool:
        """The answer had at least one marker (else it is plain text)."""
        return any(b.box is not None for b in self.blocks)


def read(answer: str, limit: int) -> Grounded:
    """The answer's blocks in their order, at most `limit` markers read."""
    notes: list[str] = []
    marks = list(itertools.islice(MARKER.finditer(answer), limit + 1))
    if len(marks) > limit:
        notes.append(f"the answer has more than {limit} blocks: the rest was not read")
        end_of_all = marks.pop().start()
    else:
        end_of_all = len(answer)
    blocks: list[Marked] = []
    lead = answer[: marks[0].start() if marks else end_of_all]
    if marks and lead.strip():
        blocks.append(Marked("text", None, lead.strip()))
        notes.append("text before the first block marker was kept as a block without a box")
    elif not marks:
        return Grounded([Marked("text", None, _uncut(lead).strip())], notes)
    for n, mark in enumerate(marks):
        end = marks[n + 1].start() if n + 1 < len(marks) else end_of_all
        text = answer[mark.end() : end]
        if n + 1 == len(marks):
            text = _uncut(text)
        label, plus, *box = mark.groups()
        x1, y1, x2, y2 = (float(v) for v in box)
        blocks.append(Marked(label, (x1, y1, x2, y2), text.strip(), continues=plus == "+"))
    return Grounded(blocks, notes)


def _uncut(text: str) -> str:
    return CUT_MARKER.sub("", text.rstrip())


def loops(blocks: list[Marked]) -> bool:
    """The answer ends in one block (its label and text) written `LOOP` times in a row."""
    if len(blocks) < LOOP:
        return False
    last = blocks[-1]
    tail = blocks[-LOOP:]
    return bool(last.text) and all(b.label == last.label and b.text == last.text for b in tail)
