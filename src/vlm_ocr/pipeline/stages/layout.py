"""The page as blocks, where its reading gave blocks: their boxes also in the PDF's points (as
the page is printed, whatever turn it was read at), its figures cut from the page image (in the
render processes), and its Markdown made from the blocks with the job's `headers_footers`.
Blocks that are only grouped lines (the CPU engine's without its layout model) keep the text as
it was read: their headers and footers are found across the document afterwards
(`running_heads`), as are those a reading that may miss some asks for (`across_pages`)."""

from __future__ import annotations

import time

from ...blocks import PageBlocks, markdown, printed_size, with_points
from ...errors import PageError
from ...storage import JobKeys
from ..rendering import Rendering
from ..state import Figure, PageLayout, PageWork

MAX_FIGURES = 50  # cut from one page; a page with more is a model that ran away
# Figures cut from one page cover at most this many pages' area together: crops are held until
# stored, so what a page's figures take stays near what the page itself does.
MAX_FIGURE_AREA = 2.0


class Layout:
    def __init__(self, rendering: Rendering, source: str) -> None:
        self.rendering = rendering
        self.source = source  # who finds the blocks: the model family, or the CPU engine

    async def run(self, page: PageWork) -> None:
        rec, image = page.recognition, page.read_image or page.image
        if rec is None or not rec.ok or rec.reading is None or image is None or page.job.json:
            return
        reading = rec.reading
        if not reading.blocks:
            return
        t0 = time.perf_counter()
        turn = page.turn or 0
        size = printed_size(image.pdf_size, turn)
        blocks = with_points(
            reading.blocks, turn=turn, width=image.width, height=image.height, pdf_size=size
        )
        notes = list(reading.notes)
        wanted, left = [], MAX_FIGURE_AREA * image.width * image.height
        for n, block in enumerate(blocks):
            if block.kind != "figure" or block.box is None:
                continue
            x0, y0, x1, y1 = block.box
            left -= (x1 - x0) * (y1 - y0)
            if len(wanted) == MAX_FIGURES or left < 0:
                notes.append(
                    f"figures from block {n + 1} on were not cut out: a page gets at most "
                    f"{MAX_FIGURES} figures covering {MAX_FIGURE_AREA:g} pages' area"
                )
                break
            wanted.append(n)
        figures: list[Figure] = []
        crops: list[bytes | None] = []
        if wanted:
            try:
                crops = await self.rendering.crop(image, [blocks[n].box for n in wanted])  # type: ignore[misc]
            except PageError as exc:  # the text and the blocks stand without their figures
                notes.append(f"the figures were not cut out: {exc.message}")
                wanted = []
            for n, png in zip(wanted, crops, strict=True):
                if png is None:
                    notes.append(f"block {n + 1} (a figure) is too small to cut out: skipped")
                    continue
                name = JobKeys.figure_name(page.ref.number, len(figures) + 1)
                blocks[n] = blocks[n].model_copy(update={"image": name})
                figures.append(Figure(name, png))
        text = markdown(blocks, page.job.input.headers_footers) if reading.labelled else rec.text
        doc = PageBlocks(
            page=page.ref.number,
            width=image.width,
            height=image.height,
            pdf_size=size,
            rotated=page.turn,
            source=self.source,
            labelled=reading.labelled,
            blocks=blocks,
            notes=notes,
        )
        across = reading.across_pages or not reading.labelled
        page.layout = PageLayout(doc, text, figures, across_pages=across)
        page.time("layout_s", t0)
