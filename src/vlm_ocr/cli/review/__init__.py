"""`vlm-ocr review RESULTS [--pdf FILE | --images DIR] -o review.html`: one self-contained HTML
file to review a job on: a summary (its pages by status, notes, engine and family, timings),
then the pages that need attention (failed, to review, text-layer fallback, turned, blank),
then the others; each page's picture with its blocks drawn and labelled by kind (hover or click
one for its text), the text stored for it, and where a second opinion was asked for, both
readings with the words that differ marked.

    RESULTS ─► results (manifest, pages: the contract's models) ─► flags.ordered
        ─► per page: pictures (its JPEG) + markup.page_section ─► document (summary, CSP)

The file is bounded: the pages past `--max-mb` are listed in the summary, not shown.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...contract import JobResult, PageReport, format_ranges, parse_selection
from ...errors import InputError
from ...settings import Settings
from .. import fonts, pictures, results
from ..results import READS_AT_ONCE, PageView, Results, ResultsError
from ..usage import UsageError, positive
from .document import document, summary
from .flags import flags_of, ordered
from .markup import page_section

DEFAULT_MAX_MB = 20.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    results.add_arguments(parser)
    pictures.add_arguments(parser)
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=Path("review.html"),
        metavar="FILE",
        help="the HTML file to write (default: review.html)",
    )
    parser.add_argument(
        "--pages",
        help='the pages to show, e.g. "1-3,7" (default: all, those needing attention first, '
        "as many as --max-mb allows)",
    )
    parser.add_argument(
        "--max-mb",
        type=positive(float),
        default=DEFAULT_MAX_MB,
        help=f"the most the file may weigh (default {DEFAULT_MAX_MB:g} MB): the pages past it "
        "are listed in the summary, not shown",
    )


def run(settings: Settings, args: argparse.Namespace) -> int:
    return asyncio.run(review_main(settings, args))


async def review_main(settings: Settings, args: argparse.Namespace) -> int:
    pictures.given(args)  # a mistake in them is said before anything is read
    try:
        store, inputs = results.stores(settings)
        found_results = Results.at(args.results, store, args.dir)
        job = await found_results.job()
        chosen = chosen_pages(job, args.pages)
    except ResultsError as exc:
        print(f"vlm-ocr review: {exc}", file=sys.stderr)
        return 1
    pictures.check_repaired(args, job.input_sha256)  # the job tells its own damaged PDF
    views = await read_pages(found_results, chosen)
    missing = frozenset(page for page, view in views.items() if view.problems)
    chosen = ordered(chosen, missing)
    with pictures.scratch() as tmp:
        max_bytes = settings.fetch.max_download_bytes
        found = await pictures.find(args, chosen, inputs, Path(tmp), max_bytes)
        notes = found.notes + missing_note(missing) + ([] if fonts.cjk_font() else [NO_CJK_FONT])
        budget = int(args.max_mb * 1e6) - overhead(job, notes, missing)
        shown = render(views, found, chosen, budget, missing)
    left = [p.page for p in chosen[len(shown.pages) :]]
    why = ""
    if left:
        why = (
            f"Not shown: pages {short_ranges(left)} ({len(left):,}), past the size limit of "
            f"{args.max_mb:g} MB (--max-mb); show them with --pages or a larger --max-mb."
        )
    if shown.unpictured and (found.pages or found.missing):  # a document was given or found
        which = "pages" if len(shown.unpictured) > 1 else "page"
        notes.append(
            f"no picture for {len(shown.unpictured)} of the {len(shown.pages)} pages shown "
            f"({which} {short_ranges(sorted(shown.unpictured))}; each says why)"
        )
    if shown.doubted:
        pages = "pages" if len(shown.doubted) > 1 else "page"
        notes.append(
            f"{pages} {short_ranges(sorted(shown.doubted))}: the words the job read are mostly "
            f"not in the given PDF's {pages} (each says so): is it the document the job read?"
        )
    head = summary(job, [p.page for p in shown.pages], why, notes, missing)
    html = document(job, head, shown.sections)
    write(args.out, html)
    attention = sum(bool(flags_of(p, missing)) for p in shown.pages)
    print(
        f"{args.out}: {len(shown.pages)} of {len(job.pages)} pages shown ({attention} needing "
        f"attention), {len(html.encode()) / 1e6:.2f} MB"
    )
    for line in ([why] if why else []) + notes:
        print(f"  {line}")
    return 0


async def read_pages(job_results: Results, pages: Sequence[PageReport]) -> dict[int, PageView]:
    """Each page's stored files, read once and before the pages are ordered: a page a file of
    which cannot be read (gone since the job, or damaged) is shown among those needing
    attention."""
    views: dict[int, PageView] = {}
    for start in range(0, len(pages), READS_AT_ONCE):
        for view in await job_results.pages(pages[start : start + READS_AT_ONCE]):
            views[view.report.page] = view
    return views


def missing_note(missing: Collection[int]) -> list[str]:
    """The review's note of the pages `missing_files` found, shown first among those needing
    attention."""
    if not missing:
        return []
    if len(missing) == 1:
        return [
            f"page {next(iter(missing))}: a file the job stored for it is missing or cannot be "
            "read (its section says which)"
        ]
    return [
        f"pages {short_ranges(sorted(missing))} ({len(missing):,}): a file the job stored for "
        "each is missing or cannot be read (each page's section says which)"
    ]


NO_CJK_FONT = (
    "no font with Chinese, Japanese or Korean on this system: a browser here draws their text "
    f"as empty boxes; {fonts.INSTALL}"
)


def write(out: Path, html: str) -> None:
    if out.is_dir():
        raise UsageError("--out", f"{out} is a folder; accepted: the HTML file to write")
    try:
        out.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise UsageError(
            "--out", f"{out} cannot be written ({exc.strerror}); accepted: a file you may write"
        ) from None


def short_ranges(pages: list[int], limit: int = 200) -> str:
    """Pages as ranges, cut short when scattered (the summary's index marks each one)."""
    text = format_ranges(pages)
    return text if len(text) <= limit else text[: text.rfind(",", 0, limit)] + ",…"


def overhead(job: JobResult, notes: Sequence[str], missing: Collection[int] = ()) -> int:
    """Bytes of the file besides its pages' sections, at most: the summary with every page
    left out (a page's link in the index is a few bytes longer than its mark), style, script."""
    left_out = "x" * 400  # the line that says what was left out
    empty = document(job, summary(job, [], left_out, notes, missing), [])
    return len(empty.encode()) + 16 * len(job.pages)


def chosen_pages(job: JobResult, selection: str | None) -> list[PageReport]:
    """The pages to show, in page order: `--pages`, or all of them."""
    pages = sorted(job.pages, key=lambda p: p.page)
    if selection is None:
        return pages
    try:
        ranges = parse_selection(selection)
    except InputError as exc:
        raise UsageError("--pages", exc.message) from None
    wanted = [p for p in pages if any(lo <= p.page <= (hi or p.page) for lo, hi in ranges)]
    if not wanted:
        have = format_ranges([p.page for p in job.pages]) or "none"
        raise UsageError("--pages", f"{selection}: the job has no such page (it has {have})")
    return wanted


@dataclass
class Shown:
    pages: list[PageReport]
    sections: list[str]
    #: pages whose picture may not be the page the job read (`pictures.words_elsewhere`)
    doubted: list[int] = field(default_factory=list)
    #: pages drawn on a blank sheet, each saying why
    unpictured: list[int] = field(default_factory=list)


def render(
    views: dict[int, PageView],
    found: pictures.Pictures,
    pages: Sequence[PageReport],
    budget: int,
    missing: Collection[int] = (),
) -> Shown:
    """The pages' sections in order, until the next one would pass `budget` bytes; a heading
    before those needing attention and before the others."""
    shown = Shown([], [])
    used = 0
    for r in pages:
        view = views[r.page]
        size = (view.blocks.width, view.blocks.height) if view.blocks else None
        if size is None and r.width and r.height:
            size = (r.width, r.height)
        jpeg, why = found.jpeg(r, size, view.blocks, view.text)
        section = heading(shown.pages, r, pages, missing) + page_section(view, jpeg, why)
        cost = len(section.encode())
        if used + cost > budget:
            break
        if jpeg is not None and why:
            shown.doubted.append(r.page)
        elif jpeg is None:
            shown.unpictured.append(r.page)
        shown.pages.append(r)
        shown.sections.append(section)
        used += cost
    shown.sections = [
        counted(section, n, shown.pages, pages, missing) for n, section in enumerate(shown.sections)
    ]
    return shown


def heading(
    before: Sequence[PageReport],
    page: PageReport,
    pages: Sequence[PageReport],
    missing: Collection[int] = (),
    shown: Sequence[PageReport] | None = None,
) -> str:
    """The heading before `page` where its group (needing attention or not) starts: the pages
    of the group `shown`, and of how many when the size limit left some out (before the cut
    is known, as long as that can be, so that the budget holds)."""
    flagged = bool(flags_of(page, missing))
    if before and bool(flags_of(before[-1], missing)) == flagged:
        return ""
    count = sum(bool(flags_of(p, missing)) == flagged for p in pages)
    drawn = count if shown is None else sum(bool(flags_of(p, missing)) == flagged for p in shown)
    title = "Needs attention" if flagged else ("The other pages" if before else "The pages")
    if shown is not None and drawn == count:
        return f"<h2>{title} ({count})</h2>"
    return f"<h2>{title} ({drawn} of {count} shown)</h2>"


def counted(
    section: str,
    n: int,
    shown: Sequence[PageReport],
    pages: Sequence[PageReport],
    missing: Collection[int],
) -> str:
    """Section `n` with its heading counting the pages shown, once the cut is known."""
    before, page = shown[:n], shown[n]
    old = heading(before, page, pages, missing)
    if not old:
        return section
    return heading(before, page, pages, missing, shown) + section.removeprefix(old)
