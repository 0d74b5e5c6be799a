"""The whole review page: the job's summary, then its pages' sections, in one HTML file that
needs nothing else (style, script and pictures inline). Its Content-Security-Policy lets only
its own script run (by hash) and fetches nothing, so a text that slipped through would still
neither run nor call out."""

from __future__ import annotations

import base64
import hashlib
import statistics
from collections.abc import Collection, Sequence
from html import escape
from importlib import resources

from ...contract import JobResult
from .. import fonts
from .flags import flags_of
from .markup import kind_styles

ASSETS = resources.files(__package__).joinpath("assets")
# Stages whose time per page the summary shows, in the order a page meets them.
STAGES = ("render_s", "queue_s", "engine_s", "layout_s", "store_s", "second_opinion_wait_s")


def document(job: JobResult, summary: str, sections: Sequence[str]) -> str:
    script = ASSETS.joinpath("review.js").read_text("utf-8")
    css = ASSETS.joinpath("review.css").read_text("utf-8")
    style = "\n".join([css, kind_styles(), font_styles()])
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    policy = (
        f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )
    title = f"Review: job {job.job_id}" + (f" ({job.prefix})" if job.prefix else "")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{style}</style></head>\n<body>"
        f"{summary}<main>{''.join(sections)}</main><script>{script}</script></body></html>\n"
    )


def font_styles() -> str:
    """The font families: the system's, then CJK fonts (the one found here first), so Chinese,
    Japanese and Korean text is drawn with glyphs rather than empty boxes; Latin as before."""
    cjk = fonts.css_stack()
    return (
        f'body {{ font-family: system-ui, -apple-system, "Segoe UI", {cjk}, sans-serif; }}\n'
        f'pre {{ font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, {cjk}, '
        "monospace; }"
    )


def summary(
    job: JobResult,
    shown: Sequence[int],
    left_out: str,
    notes: Sequence[str],
    missing: Collection[int] = (),
) -> str:
    """The job at a glance: its pages by status, engine, timings, notes, and an index of its
    pages (those shown are links); what was left out (`left_out`), and the review's own
    `notes` (where the pictures came from); `missing`: the pages a stored file of which could
    not be read."""
    t = job.totals
    rotated = sum(bool(p.rotated) for p in job.pages)
    counts = {
        "pages": t.pages, "ok": t.ok, "blank": t.blank, "failed": t.failed,
        "review": t.review, "fallback": t.fallback, "rotated": rotated, "reused": t.reused,
        "shown here": len(shown),
    }  # fmt: skip
    head = "".join(f"<th>{k}</th>" for k in counts)
    row = "".join(f"<td>{v:,}</td>" for v in counts.values())
    out = [
        f'<header class="summary"><h1>Job {escape(job.job_id)}: {escape(job.status)}</h1>',
        f'<p class="meta">{escape(where(job))}</p><p class="meta">{escape(engine(job))}</p>',
        f'<table class="counts"><tr>{head}</tr><tr>{row}</tr></table>',
        f'<p class="meta">{escape(timings(job))}</p>',
    ]
    if job.error:  # the one line that says why the job is not `ok`, and what to do
        out.append(f'<p class="problems">{escape(job.error)}</p>')
    if left_out:
        out.append(f'<p class="left-out">{escape(left_out)}</p>')
    lists = [("Notes", job.notes), ("Errors", job.errors), ("This review", notes)]
    items = [
        f"<div><h4>{name}</h4><ul>{''.join(f'<li>{escape(x)}</li>' for x in xs)}</ul></div>"
        for name, xs in lists
        if xs
    ]
    chips = index(job, set(shown), missing)
    out.append(f'<div class="lists">{"".join(items)}</div>{chips}</header>')
    return "".join(out)


def where(job: JobResult) -> str:
    parts = [f"prefix {job.prefix}" if job.prefix else "", f"store {job.store or '?'}"]
    if job.manifest_key:
        parts.append(f"manifest {job.manifest_key}")
    return " · ".join(p for p in parts if p)


def engine(job: JobResult) -> str:
    e = job.engine
    parts = [f"engine {e.get('name', '?')} {e.get('version', '')}".strip()]
    parts += [f"{k} {e[k]}" for k in ("model", "revision", "family", "prompt") if e.get(k)]
    if "concurrency" in e:
        parts.append(f"concurrency {e['concurrency']}")
    return " · ".join(parts)


def timings(job: JobResult) -> str:
    job_part = ", ".join(
        f"{k.removesuffix('_s').replace('_', ' ')} {v:.2f} s" for k, v in job.timings.items()
    )
    per_page = []
    for stage in STAGES:
        values = [p.timings[stage] for p in job.pages if stage in p.timings]
        if values:
            name = stage.removesuffix("_s").replace("_", " ")
            per_page.append(f"{name} {statistics.median(values):.3f} s ({max(values):.3f})")
    page_part = f". A page, median (max): {', '.join(per_page)}" if per_page else ""
    return f"Time: {job_part or 'none recorded'}{page_part}"


def index(job: JobResult, shown: set[int], missing: Collection[int] = ()) -> str:
    """A chip per page, coloured by its most serious flag; a link where the page is shown."""
    chips = []
    for page in sorted(job.pages, key=lambda p: p.page):
        flags = flags_of(page, missing)
        cls = flags[0] if flags else page.status
        tip = escape(", ".join(flags) or page.status, quote=True)
        if page.page in shown:
            chips.append(f'<a class="{cls}" href="#page-{page.page}" title="{tip}">{page.page}</a>')
        else:
            chips.append(f'<span class="{cls}" title="{tip}: not shown">{page.page}</span>')
    return f'<nav class="index" aria-label="pages">{"".join(chips)}</nav>'
