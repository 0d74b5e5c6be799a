"""One page of a job as HTML: its picture with the blocks drawn over it, labelled by kind, and
beside it the block under the pointer, the second opinion and the stored text.

Every text a model produced is escaped; a table block (HTML from the model) is rendered only
after `nh3` (the Ammonia sanitiser) has kept the tags a table needs and nothing that runs. A
block's text waits in an inert `<template>` until the page's script copies it beside the page."""

from __future__ import annotations

import base64
from html import escape

import nh3

from ...blocks import RUNNING, Block
from ..results import PageView
from ..show import COLOURS
from .flags import FLAGS, flags_of
from .words import marked

# More of a text than anyone reads on one page of a review: the rest is left out, saying so.
MAX_TEXT_CHARS = 100_000
MAX_BLOCK_CHARS = 20_000

TABLE_TAGS = {"table", "caption", "colgroup", "col", "thead", "tbody", "tfoot", "tr", "th", "td"}
INLINE_TAGS = {"b", "strong", "i", "em", "u", "s", "sub", "sup", "br", "p", "span", "code", "a"}
CELL = {"colspan", "rowspan"}


def sanitised(html: str) -> str:
    """A model's table, keeping the table and its inline formatting: no script, no event
    handler, no style, no image (it would fetch), links only to http(s) and mail."""
    return nh3.clean(
        html,
        tags=TABLE_TAGS | INLINE_TAGS,
        attributes={"th": CELL, "td": CELL, "col": {"span"}, "colgroup": {"span"}, "a": {"href"}},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )


def kind_styles() -> str:
    """The colour of each block kind (those of `vlm-ocr show`), for the boxes."""
    rules = []
    for kind, (r, g, b) in COLOURS.items():
        rules.append(
            f".k-{kind} {{ --c: rgb({r} {g} {b}); --f: rgb({r} {g} {b} / .08); "
            f"--h: rgb({r} {g} {b} / .22); }}"
        )
    return "\n".join(rules)


def clipped(text: str, limit: int) -> str:
    if len(text) <= limit:
        return escape(text)
    left = len(text) - limit
    return escape(text[:limit]) + f"\n<em>… {left:,} more characters not shown</em>"


def page_section(view: PageView, jpeg: bytes | None, why_no_picture: str) -> str:
    report = view.report
    flags = flags_of(report, [report.page] if view.problems else [])
    classes = " ".join(["page", *(["attention"] if flags else []), *flags[:1]])
    chips = "".join(f'<span class="flag {f}" title="{escape(FLAGS[f])}">{f}</span>' for f in flags)
    return (
        f'<article class="{classes}" id="page-{report.page}" data-page="{report.page}">'
        f"<h3>Page {report.page} {chips}</h3>"
        f'<p class="facts">{facts(view)}</p>'
        f"{problems(view, why_no_picture if jpeg is not None else '')}"
        f'<div class="cols">{sheet(view, jpeg, why_no_picture)}'
        f'<div class="side"><h4>Block</h4><div class="block-view"><p class="hint"></p></div>'
        f"{templates(view)}{opinion(view)}{stored_text(view)}</div></div></article>"
    )


def facts(view: PageView) -> str:
    r = view.report
    parts = [r.status, f"{r.chars:,} characters"]
    if view.blocks is not None:
        parts.append(f"{len(view.blocks.blocks)} blocks ({escape(view.blocks.source)})")
    if r.rotated:
        parts.append(f"turned {r.rotated}° clockwise")
    if r.reused:
        parts.append("reused from an earlier run")
    if r.finish_reason:
        parts.append(f"finish {escape(r.finish_reason)}, {r.attempts} attempt(s)")
    if "engine_s" in r.timings:
        parts.append(f"engine {r.timings['engine_s']:.2f} s")
    if "total_s" in r.timings:
        parts.append(f"total {r.timings['total_s']:.2f} s")
    parts.append(escape(r.source))
    return " · ".join(parts)


def problems(view: PageView, doubt: str = "") -> str:
    """What is wrong with the page or its files, and a doubt of its picture."""
    r = view.report
    lines = [f"Picture: {escape(doubt)}"] if doubt else []
    if r.error:
        lines.append(f"Failed ({escape(r.error_stage or 'unknown stage')}): {escape(r.error)}")
    if r.fallback:
        lines.append(f"Text layer stored instead of the model's answer: {escape(r.fallback)}")
    lines += [escape(p) for p in view.problems]
    if view.blocks is not None:
        lines += [f"Blocks: {escape(note)}" for note in view.blocks.notes]
    return f'<ul class="problems">{"".join(f"<li>{x}</li>" for x in lines)}</ul>' if lines else ""


def sheet(view: PageView, jpeg: bytes | None, why_no_picture: str) -> str:
    """The page's picture (or a blank sheet of its shape, saying why) with its blocks' boxes."""
    doc, r = view.blocks, view.report
    width, height = (doc.width, doc.height) if doc else (r.width or 850, r.height or 1100)
    if jpeg is not None:
        data = base64.b64encode(jpeg).decode()
        inside = f'<img src="data:image/jpeg;base64,{data}" alt="page {r.page}">'
    else:
        inside = f'<div class="none">{escape(why_no_picture)}</div>'
    boxes = []
    for n, block in enumerate(doc.blocks if doc else [], 1):
        if block.box is None:
            continue
        x0, y0, x1, y1 = block.box
        place = (
            f"left:{100 * x0 / width:.3f}%;top:{100 * y0 / height:.3f}%;"
            f"width:{100 * (x1 - x0) / width:.3f}%;height:{100 * (y1 - y0) / height:.3f}%"
        )
        label = f"{n} {block.kind}"
        boxes.append(
            f'<button type="button" class="box k-{block.kind}" style="{place}" '
            f'data-block="b{r.page}-{n}" aria-label="block {label}">'
            f'<span class="tag">{label}</span></button>'
        )
    return (
        f'<figure class="sheet" style="aspect-ratio:{width}/{height}">'
        f"{inside}{''.join(boxes)}</figure>"
    )


def templates(view: PageView) -> str:
    """Each block's kind and text, inert until the script shows it."""
    out = []
    for n, block in enumerate(view.blocks.blocks if view.blocks else [], 1):
        if block.box is not None:
            out.append(
                f'<template id="b{view.report.page}-{n}"><p class="kind">{n} · '
                f"{block_kind(block)}</p>{block_body(block)}</template>"
            )
    return "".join(out)


def block_kind(block: Block) -> str:
    own = f" (the model's {escape(block.label)})" if block.label else ""
    figure = f" · figure file {escape(block.image)}" if block.image else ""
    return f"{block.kind}{own}{figure}"


def block_body(block: Block) -> str:
    if not block.content:
        return '<p class="hint">(no text)</p>'
    if block.kind == "table" and "<" in block.content:
        table = sanitised(block.content[:MAX_BLOCK_CHARS])
        return (
            f'<div class="table-view">{table}</div>'
            f"<details><summary>the model's HTML</summary>"
            f"<pre>{clipped(block.content, MAX_BLOCK_CHARS)}</pre></details>"
        )
    return f"<pre>{clipped(block.content, MAX_BLOCK_CHARS)}</pre>"


def opinion(view: PageView) -> str:
    """The second opinion: its verdict, the critical tokens that differ, and both readings
    with the words they do not share marked."""
    r = view.report
    if r.agreement is None and not r.differences:
        return ""
    verdict = "to review" if r.review else "agrees"
    head = f"Second opinion: {verdict}"
    if r.agreement is not None:
        head += f", agreement {r.agreement:.3f}"
    diffs = "".join(f"<li>{escape(d)}</li>" for d in r.differences or [])
    body = f"<ul>{diffs}</ul>" if diffs else ""
    if view.text is not None and view.second is not None:
        second, left = without_dropped_heads(view)
        a, b, compared = marked(view.text[:MAX_TEXT_CHARS], second[:MAX_TEXT_CHARS])
        note = "" if compared else '<p class="hint">Too long to mark the words that differ.</p>'
        if left:
            note += (
                f'<p class="hint">{left} line{"s" if left > 1 else ""} the job left out of the '
                "stored text as running headers and footers, left out of the CPU engine's "
                "reading here too.</p>"
            )
        body += (
            f'{note}<div class="readings"><div><h5>The engine (stored)</h5><pre>{a}</pre></div>'
            f"<div><h5>The CPU engine</h5><pre>{b}</pre></div></div>"
        )
    elif r.second_key is None:
        body += '<p class="hint">The CPU engine\'s reading was not stored with this job.</p>'
    return f"<h4>{escape(head)}</h4>{body}"


def without_dropped_heads(view: PageView) -> tuple[str, int]:
    """The CPU engine's reading without the running heads the job dropped from the stored text
    after the two were compared (`headers_footers: drop`), and how many lines that left out: the
    agreement was measured before, so they are no difference to mark."""
    second = view.second or ""
    if view.blocks is None or view.text is None:
        return second, 0
    kept = {_line(t) for t in view.text.splitlines()}
    dropped = {
        n
        for b in view.blocks.blocks
        if b.kind in RUNNING
        for t in b.content.splitlines()
        if (n := _line(t)) and n not in kept
    }
    lines = second.splitlines()
    left = [t for t in lines if _line(t) not in dropped]
    return "\n".join(left), len(lines) - len(left)


def _line(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalnum())


def stored_text(view: PageView) -> str:
    if view.text is None:
        why = " Its file could not be read (above)." if view.text_key else ""
        return f'<h4>Stored text</h4><p class="hint">None.{why}</p>'
    what = "Partial text (the page failed)" if view.partial else "Stored text"
    key = f" ({escape(view.text_key)})" if view.text_key else ""
    opened = "" if view.second is not None else " open"
    return (
        f"<details{opened}><summary>{what}{key}</summary>"
        f"<pre>{clipped(view.text, MAX_TEXT_CHARS)}</pre></details>"
    )
