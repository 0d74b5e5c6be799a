"""`vlm-ocr show RESULTS --page N [--pdf FILE | --images DIR] [-o FILE]`: a page drawn with the
blocks the worker found on it (boxes coloured by kind, reading-order numbers), to see what the
model saw.

RESULTS, `--pdf` and `--images` are `vlm-ocr review`'s: the job's folder or its prefix in the
store, and the document it read, its page found by what the job recorded (`pictures`). The page
itself is not stored: without its document the blocks are drawn on a blank page with the start
of their text, in a font that has the text's characters (`fonts`), which still shows the layout.
So they are when the document given cannot be the one the job read (`pictures.not_the_page`);
what review says of the pictures is said here too.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from ..blocks import PageBlocks
from ..contract import format_ranges
from ..settings import Settings
from . import fonts, pictures, results
from .results import Results, ResultsError
from .usage import UsageError, positive

COLOURS = {
    "text": (66, 133, 244),
    "title": (219, 68, 55),
    "section-header": (244, 160, 0),
    "list": (15, 157, 88),
    "table": (171, 71, 188),
    "formula": (0, 172, 193),
    "figure": (255, 112, 67),
    "caption": (158, 157, 36),
    "footnote": (121, 85, 72),
    "page-header": (120, 120, 120),
    "page-footer": (120, 120, 120),
    "page-number": (120, 120, 120),
    "code": (92, 107, 192),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    results.add_arguments(parser)
    parser.add_argument(
        "--page", type=positive(int), required=True, metavar="N", help="the page, 1-based"
    )
    pictures.add_arguments(parser)
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        metavar="FILE",
        help="the PNG to write (default: page-NNNN-blocks.png)",
    )


async def show_main(settings: Settings, args: argparse.Namespace) -> int:
    pictures.given(args)  # a mistake in them is said before anything is read
    out = args.out or Path(f"page-{args.page:04d}-blocks.png")
    if out.is_dir():
        raise UsageError("--out", f"{out} is a folder; accepted: the PNG file to write")
    store, inputs = results.stores(settings)
    found_results = Results.at(args.results, store, args.dir)
    try:
        job = await found_results.job()
    except ResultsError as exc:
        print(f"vlm-ocr show: {exc}", file=sys.stderr)
        return 1
    pictures.check_repaired(args, job.input_sha256)  # the job tells its own damaged PDF
    report = next((p for p in job.pages if p.page == args.page), None)
    if report is None:
        have = format_ranges([p.page for p in job.pages]) or "none"
        raise UsageError("--page", f"the job has no page {args.page} (it has {have})")
    view = await found_results.page(report)
    if view.blocks is None:
        why = "; ".join(view.problems) or f"the page is {report.status} and has no blocks file"
        print(f"vlm-ocr show: no blocks for page {args.page} ({why})", file=sys.stderr)
        return 1
    with pictures.scratch() as tmp:
        max_bytes = settings.fetch.max_download_bytes
        found = await pictures.find(args, [report], inputs, Path(tmp), max_bytes)
        size = (view.blocks.width, view.blocks.height)
        page, why = found.image(report, size, view.blocks, view.text)
    try:
        draw(view.blocks, page).save(out)
    except OSError as exc:
        raise UsageError("--out", f"{out} cannot be written ({exc})") from None
    print(f"{out}: {len(view.blocks.blocks)} blocks ({view.blocks.source})")
    # What review says of the pictures (where from, and a document other than the job's),
    # then why this page has none.
    for note in found.notes:
        if note != why:
            print(f"  {note}")
    if why and page is not None:  # drawn, but perhaps not the page the job read
        print(f"  page {args.page}: {why}")
    elif why:
        print(f"  page {args.page}: {why}; its blocks are drawn on a blank page")
    return 0


def draw(doc: PageBlocks, page: Image.Image | None = None) -> Image.Image:
    """The blocks over the page (or a blank one): a tinted box per block, its kind and its place
    in reading order at its corner; on a blank page, the start of each block's text."""
    base = (page or Image.new("RGB", (doc.width, doc.height), "white")).convert("RGBA")
    layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
    pen = ImageDraw.Draw(layer)
    scale = max(base.width, base.height) / 1500
    label_font = ImageFont.load_default(size=max(12, round(16 * scale)))
    text_size = max(10, round(12 * scale))
    width = max(2, round(3 * scale))
    for n, block in enumerate(doc.blocks, 1):
        if block.box is None:
            continue
        colour = COLOURS.get(block.kind, (0, 0, 0))
        x0, y0, x1, y1 = block.box
        pen.rectangle((x0, y0, x1, y1), fill=(*colour, 40), outline=(*colour, 255), width=width)
        if page is None and block.content:
            write_in(pen, block.box, block.content, text_size, inset=width * 2)
        tag = f"{n} {block.kind}"
        left, top, right, bottom = pen.textbbox((x0, y0), tag, font=label_font)
        lift = bottom - top + 2 * width
        y = y0 - lift if y0 - lift >= 0 else y0
        pen.rectangle((x0, y, x0 + right - left + 2 * width, y + lift), fill=(*colour, 230))
        pen.text((x0 + width, y + width - (top - y0)), tag, font=label_font, fill="white")
    return Image.alpha_composite(base, layer).convert("RGB")


SNIPPET_CHARS = 2000  # more than any block's box holds at the size drawn


def write_in(
    pen: ImageDraw.ImageDraw,
    box: tuple[float, float, float, float],
    text: str,
    size: int,
    inset: float,
) -> None:
    """The start of `text` inside `box`: wrapped to its width, as many lines as fit in its
    height (one at least), the last cut with "…" when more is left, so that it is not drawn
    over the next block or off the page."""
    x0, y0, x1, y1 = box
    room = x1 - x0 - 2 * inset
    height = round(size * 1.25)
    count = max(1, int((y1 - y0 - 2 * inset) // height))
    lines = wrap(
        " ".join(text[:SNIPPET_CHARS].split()), lambda t: width_of(pen, t, size) <= room, count
    )
    for n, line in enumerate(lines):
        write(pen, (x0 + inset, y0 + inset + n * height), line, size)


def wrap(text: str, fits: Callable[[str], bool], count: int) -> list[str]:
    """`text` in at most `count` lines that each `fits`: broken between words, and inside a
    word too long for a line (Chinese has no spaces); "…" ends the last when some is left."""
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        if fits(f"{line} {word}" if line else word):
            line = f"{line} {word}" if line else word
            continue
        if line:
            lines.append(line)
        while len(lines) < count and not fits(word):
            cut = longest_fit(word, fits)
            lines.append(word[:cut])
            word = word[cut:]
        if len(lines) >= count:
            return ellipsis(lines[:count], fits)
        line = word
    return [*lines, line] if line else lines


def longest_fit(word: str, fits: Callable[[str], bool]) -> int:
    """How many of `word`'s first characters fit (one at least), found by halving."""
    low, high = 1, len(word) - 1
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(word[:mid]) else (low, mid - 1)
    return low


def ellipsis(lines: list[str], fits: Callable[[str], bool]) -> list[str]:
    last = lines[-1]
    while last and not fits(f"{last.rstrip()}…"):
        last = last[:-1]
    return [*lines[:-1], f"{last.rstrip()}…"]


def width_of(pen: ImageDraw.ImageDraw, text: str, size: int) -> float:
    return sum(pen.textlength(run, font=font) for run, font in runs(text, size))


def runs(text: str, size: int) -> Iterator[tuple[str, ImageFont.FreeTypeFont]]:
    """`text` in runs, each with the font that has its characters: ASCII in PIL's own font, as
    it always was, other Latin, Greek and Cyrillic in MuPDF's (PIL's has none of them), the
    rest in the system's CJK font."""
    for kind, chars in itertools.groupby(text, key=fonts.script):
        if kind == "ascii":
            font = ascii_font(size)
        else:
            font = fonts.latin_font(size) if kind == "latin" else cjk_font(size)
        yield "".join(chars), font


def write(pen: ImageDraw.ImageDraw, at: tuple[float, float], text: str, size: int) -> None:
    """`text` from `at` on one baseline, each run in a font that has it (`runs`); said once
    when the system has no CJK font: its text is then drawn as empty boxes."""
    x, baseline = at[0], at[1] + ascii_font(size).getmetrics()[0]
    for run, font in runs(text, size):
        pen.text((x, baseline), run, font=font, fill=(60, 60, 60, 255), anchor="ls")
        x += pen.textlength(run, font=font)


@functools.cache
def ascii_font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)  # type: ignore[return-value]


def cjk_font(size: int) -> ImageFont.FreeTypeFont:
    found = fonts.cjk_font()
    if found is None:
        warn_no_cjk_font()
        return ImageFont.load_default(size=size)
    return found.font(size)


@functools.cache  # said once
def warn_no_cjk_font() -> None:
    print(
        "vlm-ocr show: no font with Chinese, Japanese or Korean on this system, so their "
        f"text is drawn as empty boxes; {fonts.INSTALL}",
        file=sys.stderr,
    )


def run(settings: Settings, args: argparse.Namespace) -> int:
    return asyncio.run(show_main(settings, args))
