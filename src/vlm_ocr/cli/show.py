"""`vlm-ocr show PREFIX --page N`: a page drawn with the blocks the worker found on it (boxes
coloured by kind, reading-order numbers), to see what the model saw.

The blocks come from the page's `page-NNNN.json` in the store the settings select (or the folder
`--dir` names). The page itself is not stored: `--source` gives the PDF or image it came from,
drawn at the size the blocks were found at; without it the blocks are drawn on a blank page with
the start of their text, which still shows the layout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pymupdf
from PIL import Image, ImageDraw, ImageFont, ImageOps

from ..blocks import PageBlocks
from ..errors import StorageError
from ..settings import Settings
from ..storage import JobKeys

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
    parser.add_argument("prefix", help="the job's output prefix (its folder in the store)")
    parser.add_argument("--page", type=int, required=True, help="1-based page number")
    parser.add_argument("--source", type=Path, help="the PDF or image the page came from")
    parser.add_argument("--dir", type=Path, help="a local results folder (default: the store)")
    parser.add_argument("--out", type=Path, help="the PNG to write (default page-NNNN-blocks.png)")


async def show_main(settings: Settings, args: argparse.Namespace) -> int:
    from ..pipeline.assemble import make_store

    store, _ = make_store(settings, args.dir)
    key = JobKeys(store.key_prefix + args.prefix.rstrip("/")).blocks(args.page)
    try:
        doc = PageBlocks.model_validate(json.loads(await store.read_text(key)))
    except (StorageError, ValueError) as exc:
        print(f"vlm-ocr show: no blocks for page {args.page} at {store.uri(key)} ({exc})")
        return 1
    page = page_image(doc, args.source) if args.source else None
    out = args.out or Path(f"page-{args.page:04d}-blocks.png")
    draw(doc, page).save(out)
    print(f"{out}: {len(doc.blocks)} blocks ({doc.source})")
    return 0


def page_image(doc: PageBlocks, source: Path) -> Image.Image:
    """The page as the blocks were found on it: drawn at their size, turned as it was read."""
    return source_page(source, doc.page, (doc.width, doc.height), doc.rotated)


def source_page(
    source: Path, number: int, size: tuple[int, int], rotated: int | None
) -> Image.Image:
    """Page `number` of a PDF (an image file is its one page) as the worker read it: turned
    `rotated` degrees clockwise, at `size` (the read image's, or one of its shape)."""
    if source.suffix.lower() == ".pdf":
        with pymupdf.open(source) as pdf:
            page = pdf[number - 1]
            sideways = (rotated or 0) % 180
            width = size[1] if sideways else size[0]
            zoom = width / page.rect.width
            pix = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False)
            image = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
    else:
        with Image.open(source) as opened:
            image = ImageOps.exif_transpose(opened).convert("RGB")
    if rotated:
        image = image.rotate(-rotated, expand=True)
    return image.resize(size)


def draw(doc: PageBlocks, page: Image.Image | None = None) -> Image.Image:
    """The blocks over the page (or a blank one): a tinted box per block, its kind and its place
    in reading order at its corner."""
    base = (page or Image.new("RGB", (doc.width, doc.height), "white")).convert("RGBA")
    layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
    pen = ImageDraw.Draw(layer)
    scale = max(base.width, base.height) / 1500
    label_font = ImageFont.load_default(size=max(12, round(16 * scale)))
    text_font = ImageFont.load_default(size=max(10, round(12 * scale)))
    width = max(2, round(3 * scale))
    for n, block in enumerate(doc.blocks, 1):
        if block.box is None:
            continue
        colour = COLOURS.get(block.kind, (0, 0, 0))
        x0, y0, x1, y1 = block.box
        pen.rectangle((x0, y0, x1, y1), fill=(*colour, 40), outline=(*colour, 255), width=width)
        if page is None and block.content:
            snippet = " ".join(block.content.split())[:120]
            pen.text(
                (x0 + width * 2, y0 + width * 2), snippet, font=text_font, fill=(60, 60, 60, 255)
            )
        tag = f"{n} {block.kind}"
        left, top, right, bottom = pen.textbbox((x0, y0), tag, font=label_font)
        lift = bottom - top + 2 * width
        y = y0 - lift if y0 - lift >= 0 else y0
        pen.rectangle((x0, y, x0 + right - left + 2 * width, y + lift), fill=(*colour, 230))
        pen.text((x0 + width, y + width - (top - y0)), tag, font=label_font, fill="white")
    return Image.alpha_composite(base, layer).convert("RGB")


def run(settings: Settings, args: argparse.Namespace) -> int:
    return asyncio.run(show_main(settings, args))
