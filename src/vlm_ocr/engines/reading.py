"""A page as an engine read it (`Reading`), and what a reader knows of the page (`Page`): the
values the CPU engine and every model family return, so neither depends on the other."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..blocks import Block


@dataclass(frozen=True)
class Reading:
    """A page as its reader (a model's family, or the CPU engine) read it."""

    text: str
    blocks: tuple[Block, ...] = ()
    language: str | None = None
    #: the clockwise turn the page needs before it reads right (the model said so)
    turn: int | None = None
    flags: dict[str, bool] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: the blocks' kinds are the model's; False for blocks that are only grouped lines
    labelled: bool = True
    #: the document's pass for repeated lines (`running_heads`) looks at the page too, as at
    #: pages whose blocks have no kinds: a model that may miss some headers and footers
    across_pages: bool = False


@dataclass(frozen=True)
class Page:
    """What a parser knows of the page it reads: its size as rendered, and in PDF points."""

    width: int
    height: int
    pdf_size: tuple[float, float] | None = None
