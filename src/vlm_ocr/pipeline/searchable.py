"""The document as a searchable PDF: its pages with the recognized text laid over them invisibly
(PDF text render mode 3), so a viewer finds and selects the words where they are printed.

Each block's text is laid over its box, line by line, sized to fill the box; a page without
blocks gets its text over the whole page. A PDF page keeps its own text layer where it has one
(it is searchable already, and a second layer would double every hit); a job of images gets one
page per image, the image as it was read (JPEG), or a page saying why it could not be read. The
pages are made in the render processes, a few at a time (`PART_PAGES`), and joined at the end
with the one embedded font subset to the characters used (Droid Sans Fallback, which MuPDF
ships: Latin, CJK and more).
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pymupdf
from PIL import Image

from ..blocks import Box, PageBlocks
from ..contract import PageReport
from ..errors import PageError
from ..pdf_file import open_pdf
from ..storage import Store
from .cpu_pool import CpuPool, TaskFailed, TaskTimeout

PART_PAGES = 32  # pages made in one task of a render process
IMAGE_DPI = 150  # an image page's size: its pixels at this resolution
JPEG_QUALITY = 80
READ_CONCURRENCY = 16
SECONDS_PER_PAGE = 0.2  # added to the render deadline for joining the parts
_TAG = re.compile(r"<[^>]+>")
_ROW_END = re.compile(r"</tr\s*>|<br\s*/?>", re.IGNORECASE)
_IMAGE_LINK = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_SKIPPED = {"figure"}  # what a figure block says describes it; it is not printed on the page


@dataclass(frozen=True)
class Overlay:
    """What to lay over one page: text in boxes (points, the page as printed), or the whole
    page's text when there are no boxes. A page read turned `turn` degrees clockwise has its
    boxes in points of the page as read (`upright`: its size), where its lines run across, and
    is laid turned back onto the page as printed, so that its lines run as printed."""

    number: int
    boxes: tuple[tuple[Box, str], ...] = ()
    text: str = ""
    turn: int = 0
    upright: tuple[float, float] = (0.0, 0.0)
    #: a job of images: the page image as it was rendered (its spill file)
    image: str | None = None
    #: a job of images: why this image has no picture to show (its page then says so, and the
    #: PDF keeps one page per image)
    missing: str = ""


@dataclass(frozen=True)
class Made:
    key: str
    size: int
    overlaid: int  # pages that got a text layer
    kept: int  # PDF pages whose own text layer was kept
    #: images that could not be read, each a page that says so
    missing: tuple[int, ...] = ()


def plain(content: str) -> str:
    """A block's content as the words printed: tags and image links out, table rows as lines."""
    text = _IMAGE_LINK.sub(r"\1", content)
    text = _ROW_END.sub("\n", text)
    text = _TAG.sub(" ", text)
    lines = (" ".join(ln.replace("|", " ").split()) for ln in text.splitlines())
    return "\n".join(ln for ln in lines if ln and set(ln) - set("-: "))


# --- in the render processes ----------------------------------------------------------------


def make_part(source_pdf: str | None, overlays: list[Overlay], out: str) -> tuple[int, int]:
    """Pages of the searchable PDF, saved to `out`; (pages overlaid, pages whose text kept)."""
    font = pymupdf.Font("cjk")
    doc = pymupdf.open()
    src = open_pdf(source_pdf) if source_pdf else None  # its pages as the job counted them
    overlaid = kept = 0
    try:
        for overlay in overlays:
            if src is not None:
                doc.insert_pdf(src, from_page=overlay.number - 1, to_page=overlay.number - 1)
                page = doc[-1]
                if page.get_text("text").strip():
                    kept += 1
                    continue
                _crop_as_page(page)
                if page.rotation:
                    # the same look with points as printed; its contents made one stream again,
                    # without which the text laid over it is not found
                    page.remove_rotation()
                    page.clean_contents()
            elif overlay.image is None:
                _missing_page(doc, overlay)
                continue
            else:
                page = _image_page(doc, overlay.image)
            if _lay(page, overlay, font) and page.get_text("text").strip():
                overlaid += 1  # counted only where a viewer finds it on the page
        doc.save(out, garbage=3, deflate=True)
    finally:
        doc.close()
        if src is not None:
            src.close()
    return overlaid, kept


def join_parts(parts: list[str], out: str) -> int:
    """The parts as one PDF, its font subset to what is used; its size in bytes."""
    doc = pymupdf.open()
    try:
        for part in parts:
            with pymupdf.open(part) as one:
                doc.insert_pdf(one)
        doc.subset_fonts()
        doc.save(out, garbage=3, deflate=True)
    finally:
        doc.close()
    return Path(out).stat().st_size


def _image_page(doc: pymupdf.Document, path: str) -> pymupdf.Page:
    with Image.open(path) as opened:
        image = opened.convert("RGB")
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=JPEG_QUALITY)
        width, height = image.size
    page = doc.new_page(width=width * 72 / IMAGE_DPI, height=height * 72 / IMAGE_DPI)
    page.insert_image(page.rect, stream=buf.getvalue())
    return page


def _crop_as_page(page: pymupdf.Page) -> None:
    """A page shown cropped made the page it shows (its MediaBox the CropBox, its look the
    same): PyMuPDF's TextWriter lays text off by the difference between a crop's top and bottom
    margins, so under a crop of a page's top part the words landed lower than printed, and under
    one of its bottom part off the page."""
    media, crop = page.mediabox, page.cropbox  # the crop from the media's top-left corner
    shown = pymupdf.Rect(crop.x0, media.y1 - crop.y1, crop.x1, media.y1 - crop.y0)
    if shown != media:
        page.set_mediabox(shown)


def _missing_page(doc: pymupdf.Document, overlay: Overlay) -> None:
    """An A4 page in place of an image that could not be read, saying so in print."""
    page = doc.new_page(width=595, height=842)
    said = f"Image {overlay.number} could not be read: {overlay.missing}"
    page.insert_textbox(pymupdf.Rect(72, 72, 523, 770), said, fontsize=12)


def _lay(page: pymupdf.Page, overlay: Overlay, font: pymupdf.Font) -> bool:
    boxes = overlay.boxes
    if not boxes and overlay.text.strip():
        r = page.rect
        margin = min(r.width, r.height) * 0.05
        boxes = (((r.x0 + margin, r.y0 + margin, r.x1 - margin, r.y1 - margin), overlay.text),)
    laid = [line for box, text in boxes for line in _lines(box, text, font)]
    if not laid:
        return False
    turn = overlay.turn % 360
    if not turn:
        writer = pymupdf.TextWriter(page.rect)
        for start, line, size in laid:
            writer.append(start, line, font=font, fontsize=size)
        writer.write_text(page, render_mode=3)
        return True
    # a page read turned: each line turned back about its start, which is where the turn puts
    # it on the page as printed, so that it runs as its print does
    for start, line, size in laid:
        at = _printed(start, turn, overlay.upright)
        writer = pymupdf.TextWriter(page.rect)
        writer.append(at, line, font=font, fontsize=size)
        writer.write_text(page, render_mode=3, morph=(at, pymupdf.Matrix(_ANGLE[turn])))
    return True


def _lines(box: Box, text: str, font: pymupdf.Font) -> list[tuple[tuple[float, float], str, float]]:
    """A block's lines, each with where it starts (its baseline) and its size."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    x0, y0, x1, y1 = box
    if not lines or x1 - x0 < 1 or y1 - y0 < 1:
        return []
    band = (y1 - y0) / len(lines)
    # one size a block, its longest line across its width: a block's lines are set alike, so
    # each of the others then ends about where it is printed, not stretched to the box
    longest = max(font.text_length(line, fontsize=1) for line in lines) or 1.0
    size = max(1.0, min(band * 0.9, (x1 - x0) / longest))
    return [
        ((x0, y0 + band * n + (band + size * 0.7) / 2), line, size)  # the line's middle
        for n, line in enumerate(lines)
    ]


# the turn a page was read at, clockwise, undone: text running across the page as read runs up
# the page as printed after a turn of 90, down it after 270
_ANGLE = {90: 90, 180: 180, 270: -90}


def _printed(point: tuple[float, float], turn: int, upright: tuple[float, float]) -> pymupdf.Point:
    """A point of the page as read, on the page as printed (as `blocks.unturn` maps a box)."""
    x, y = point
    width, height = upright
    if turn == 90:
        return pymupdf.Point(y, width - x)
    if turn == 180:
        return pymupdf.Point(width - x, height - y)
    return pymupdf.Point(height - y, x)


# --- in the worker --------------------------------------------------------------------------


async def overlays(store: Store, pages: list[PageReport], images: Path | None) -> list[Overlay]:
    """Each stored page's overlay, from its blocks file where it has one, else its text."""
    gate = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(report: PageReport) -> Overlay:
        image = str(images / f"page-{report.page:04d}.png") if images is not None else None
        if image is not None and not Path(image).is_file():  # it never rendered
            return Overlay(report.page, missing=report.error or "it has no picture")
        if report.status != "ok" or report.key is None:
            return Overlay(report.page, image=image)
        async with gate:
            if report.blocks_key:
                doc = PageBlocks.model_validate(
                    json.loads(await store.read_text(report.blocks_key))
                )
                return _blocks_overlay(report.page, doc, image)
            return Overlay(report.page, text=plain(await store.read_text(report.key)), image=image)

    return list(await asyncio.gather(*(one(p) for p in pages)))


def _blocks_overlay(number: int, doc: PageBlocks, image: str | None) -> Overlay:
    """The page's blocks in points: of the page as printed (`box_pt`, or for an image the image
    as rendered, at IMAGE_DPI), or of the page as read where it was read turned."""
    turn = (doc.rotated or 0) % 360
    if image is not None:
        upright = (doc.width * 72 / IMAGE_DPI, doc.height * 72 / IMAGE_DPI)
    elif doc.pdf_size is not None:
        shown_w, shown_h = doc.pdf_size
        upright = (shown_h, shown_w) if turn % 180 else (shown_w, shown_h)
    else:
        turn, upright = 0, (0.0, 0.0)
    sx, sy = upright[0] / doc.width, upright[1] / doc.height
    boxes = []
    for block in doc.blocks:
        text = plain(block.content)
        if block.kind in _SKIPPED or not text or block.box is None:
            continue
        if turn or image is not None:
            x0, y0, x1, y1 = block.box
            boxes.append(((x0 * sx, y0 * sy, x1 * sx, y1 * sy), text))
        elif block.box_pt is not None:
            boxes.append((block.box_pt, text))
    return Overlay(number, boxes=tuple(boxes), image=image, turn=turn, upright=upright)


async def make(
    pool: CpuPool,
    store: Store,
    key: str,
    pages: list[PageReport],
    *,
    source_pdf: Path | None,
    images: Path | None,
    work: Path,
    timeout_s: float,
) -> Made:
    """Make the searchable PDF of the job's pages and store it at `key`."""
    wanted = await overlays(store, pages, images)
    if not [o for o in wanted if not o.missing]:
        raise PageError("searchable", "no page could be rendered, so there is no PDF to make")
    source = str(source_pdf) if source_pdf is not None else None
    chunks = [wanted[i : i + PART_PAGES] for i in range(0, len(wanted), PART_PAGES)]
    paths = [str(work / f"searchable-{n:05d}.pdf") for n in range(len(chunks))]
    try:
        done = await asyncio.gather(
            *(
                pool.run(make_part, source, chunk, path, timeout_s=timeout_s)
                for chunk, path in zip(chunks, paths, strict=True)
            )
        )
        out = work / "searchable.pdf"
        joining = timeout_s + SECONDS_PER_PAGE * len(wanted)
        size = await pool.run(join_parts, paths, str(out), timeout_s=joining)
    except TaskTimeout as exc:
        raise PageError("searchable", f"making the PDF was stopped: {exc}") from None
    except TaskFailed as exc:
        raise PageError("searchable", f"making the PDF failed: {exc}") from None
    data = await asyncio.to_thread(out.read_bytes)
    await store.put(key, data, "application/pdf")
    missing = tuple(o.number for o in wanted if o.missing)
    return Made(key, size, sum(o for o, _ in done), sum(k for _, k in done), missing)
