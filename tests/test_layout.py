"""Pages as structure: blocks in one coordinate system, figures as files, headers and footers apart
(labelled, or found across the document), a searchable PDF, document.md, and the picture."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pymupdf
import pytest
from PIL import Image

from vlm_ocr import document, samples
from vlm_ocr.blocks import MAX_BLOCKS, Block, PageBlocks, RawBlock, place, unturn, with_points
from vlm_ocr.cli import main as cli
from vlm_ocr.cli import show
from vlm_ocr.contract import JobInput, JobResult
from vlm_ocr.engines.base import Recognition
from vlm_ocr.engines.families import Reading
from vlm_ocr.errors import InputError
from vlm_ocr.images import PageImage
from vlm_ocr.pipeline import running_heads, searchable
from vlm_ocr.pipeline.stages.store import edges_of
from vlm_ocr_lab import cli as lab_cli
from vlm_ocr_lab.standins.fakes import FakeEngine

from .support import b64, make_settings, new_worker, page_image, png_bytes, run_job

CAPTION = "Figure 1: Revenue by year"
FIXTURES = Path(__file__).parent / "fixtures" / "families"


def laid_out(page: PageImage, prompt: object) -> Recognition:
    """A model that reads layout: a title, a paragraph, a figure and its caption, a footer."""
    w, h = page.width, page.height

    def at(x0: float, y0: float, x1: float, y1: float) -> tuple[float, ...]:
        return (x0 * w, y0 * h, x1 * w, y1 * h)

    raw = [
        RawBlock("title", at(0.1, 0.05, 0.9, 0.1), "# Annual report"),
        RawBlock("text", at(0.1, 0.12, 0.9, 0.3), "Revenue grew in every quarter."),
        RawBlock("figure", at(0.2, 0.35, 0.8, 0.65), "A bar chart"),
        RawBlock("caption", at(0.2, 0.66, 0.8, 0.7), CAPTION),
        RawBlock("figure", at(0.2, 0.72, 0.8, 0.725), ""),  # a sliver: no figure to cut
        RawBlock("page-footer", at(0.4, 0.95, 0.6, 0.98), "Page 1"),
    ]
    labels = {k: k for k in ("title", "text", "figure", "caption", "page-footer")}
    placed = place(raw, labels, width=w, height=h, pdf_size=page.pdf_size)
    blocks = tuple(placed.blocks)
    return Recognition("unused", finish_reason="stop", reading=Reading("unused", blocks))


def one_page_pdf() -> bytes:
    return samples.pdf_from_pages([["Annual report", "Revenue grew in every quarter."]])


# --- blocks -------------------------------------------------------------------------------------


def test_blocks_are_stored_beside_the_text_with_figures_cut_out(tmp_path, loop, cpu_pool) -> None:
    settings = make_settings(tmp_path)
    worker = new_worker(loop, settings, FakeEngine(laid_out), cpu_pool)
    result = run_job(loop, worker, {"pdf": {"base64": b64(one_page_pdf())}, "output_prefix": "r"})
    page = result.pages[0]
    assert result.status == "ok", result.error
    assert page.blocks == 6 and page.blocks_key == "r/page-0001.json"
    assert page.figures == ["r/page-0001-figure-1.png"]
    out = tmp_path / "out" / "r"
    text = (out / "page-0001.md").read_text()
    assert text == (
        "# Annual report\n\nRevenue grew in every quarter.\n\n"
        f"![{CAPTION}](page-0001-figure-1.png)\n\nA bar chart\n\n{CAPTION}"
    )  # the footer is left out of the text (headers_footers: drop)
    doc = PageBlocks.model_validate_json((out / "page-0001.json").read_text())
    assert doc.labelled and doc.pdf_size == (595.0, 842.0)
    assert [b.kind for b in doc.blocks][-1] == "page-footer"
    figure = doc.blocks[2]
    assert figure.image == "page-0001-figure-1.png" and figure.box and figure.box_pt
    # the box in points is the box in pixels at the page's scale
    sx, sy = 595.0 / doc.width, 842.0 / doc.height
    x0, y0, x1, y1 = figure.box
    assert figure.box_pt == pytest.approx([x0 * sx, y0 * sy, x1 * sx, y1 * sy], abs=0.01)
    with Image.open(out / "page-0001-figure-1.png") as crop:
        x0, y0, x1, y1 = figure.box
        assert crop.size == (math.ceil(x1) - math.floor(x0), math.ceil(y1) - math.floor(y0))
    assert "block 5 (a figure) is too small to cut out: skipped" in doc.notes


def test_headers_and_footers_stay_in_the_text_when_kept(tmp_path, loop, cpu_pool) -> None:
    worker = new_worker(loop, make_settings(tmp_path), FakeEngine(laid_out), cpu_pool)
    job = {"pdf": {"base64": b64(one_page_pdf())}, "output_prefix": "k", "headers_footers": "keep"}
    result = run_job(loop, worker, job)
    assert (tmp_path / "out" / "k/page-0001.md").read_text().endswith("Page 1")
    assert result.fingerprint["headers_footers"] == "keep"
    # and a stored page read with the other choice is not reused
    again = run_job(loop, worker, job | {"headers_footers": "drop"})
    assert not again.pages[0].reused
    assert not (tmp_path / "out" / "k/page-0001.md").read_text().endswith("Page 1")


def test_a_reused_page_reports_its_blocks_and_figures(tmp_path, loop, cpu_pool) -> None:
    engine = FakeEngine(laid_out)
    worker = new_worker(loop, make_settings(tmp_path), engine, cpu_pool)
    job = {"pdf": {"base64": b64(one_page_pdf())}, "output_prefix": "again"}
    first = run_job(loop, worker, job)
    second = run_job(loop, worker, job)
    assert engine.calls == 1 and second.pages[0].reused
    for field in ("blocks", "blocks_key", "figures", "chars"):
        assert getattr(second.pages[0], field) == getattr(first.pages[0], field)


def test_hostile_blocks_are_clamped_dropped_or_mapped() -> None:
    many = [RawBlock("text", (0, n, 10, n + 5), f"line {n}") for n in range(10_000)]
    placed = place(many, {"text": "text"}, width=100, height=100)
    assert len(placed.blocks) == MAX_BLOCKS
    assert f"only the first {MAX_BLOCKS} blocks were kept" in placed.notes
    odd = [
        RawBlock("text", (-50, -50, 500, 500), "outside"),  # clamped to the page
        RawBlock("text", (80, 90, 20, 10), "inverted"),  # corners put in order
        RawBlock("text", (float("nan"), 0, 10, 10), "nan"),  # no box, text kept
        RawBlock("text", (float("inf"), 0, 10, 10), ""),  # no box and no text: dropped
        RawBlock("text", (5, 5, 5.2, 50), "no width"),  # no area left: no box
        RawBlock("text", (1, 2, 3), "three numbers"),
        RawBlock("hologram", (10, 10, 20, 20), "an unknown label"),
    ]
    placed = place(odd, {"text": "text"}, width=100, height=100, pdf_size=(50.0, 50.0))
    by_text = {b.content: b for b in placed.blocks}
    assert "" not in by_text and len(placed.blocks) == 6
    assert by_text["outside"].box == (0, 0, 100, 100)
    assert by_text["outside"].box_pt == (0, 0, 50, 50)
    assert by_text["inverted"].box == (20, 10, 80, 90)
    assert by_text["nan"].box is None and by_text["no width"].box is None
    assert by_text["three numbers"].box is None
    assert by_text["an unknown label"].kind == "text"
    assert by_text["an unknown label"].label == "hologram"
    assert any("outside the page or not boxes" in n for n in placed.notes)
    assert any("labels this worker does not know" in n for n in placed.notes)


def test_boxes_read_on_a_turned_page_land_on_the_page_as_printed() -> None:
    # a 100 x 200 page read turned 90 degrees clockwise (the image read is 200 x 100)
    printed = (10.0, 20.0, 30.0, 40.0)
    for turn, read in {
        90: (160.0, 10.0, 180.0, 30.0),
        180: (70.0, 160.0, 90.0, 180.0),
        270: (20.0, 70.0, 40.0, 90.0),
    }.items():
        size = (200, 100) if turn % 180 else (100, 200)
        assert unturn(read, turn, *size) == printed
        [block] = with_points(
            [Block(kind="text", box=read)],
            turn=turn,
            width=size[0],
            height=size[1],
            pdf_size=(50.0, 100.0),
        )
        assert block.box_pt == (5.0, 10.0, 15.0, 20.0)


def test_the_cpu_engine_groups_its_lines_into_labelled_blocks(
    tmp_path, loop, cpu_engine, cpu_pool
) -> None:
    pdf = samples.pdf_from_pages([samples.LEGAL_PAGES[0]])
    worker = new_worker(loop, make_settings(tmp_path), cpu_engine, cpu_pool)
    result = run_job(loop, worker, {"pdf": {"base64": b64(pdf)}, "output_prefix": "cpu"})
    doc = PageBlocks.model_validate_json((tmp_path / "out/cpu/page-0001.json").read_text())
    assert doc.labelled and doc.source == "rapidocr" and result.pages[0].blocks
    assert doc.blocks[0].content == "租賃契約書" and doc.blocks[0].kind == "section-header"
    assert "第三條" in doc.blocks[-2].content and doc.blocks[-2].kind == "text"
    tops = [b.box[1] for b in doc.blocks if b.box]
    assert tops == sorted(tops)  # one column: read top to bottom
    assert "labelled blocks with boxes" in result.engine["blocks"]


# --- running headers and footers ----------------------------------------------------------------


def report_pages(count: int) -> list[list[str]]:
    pages = []
    for n in range(1, count + 1):
        body = [f"Section {n}. Item {n * 37} was delivered to site {n * 11}."]
        body += [f"Note {n}.{k}: quantity {n * k * 13} checked by clerk {k * 7}." for k in (1, 2)]
        pages.append(["ACME Holdings Annual Report 2025", *body, f"Page {n} of {count}"])
    return pages


def test_running_lines_are_found_across_pages() -> None:
    texts = {n: "\n".join(page) for n, page in enumerate(report_pages(4), 1)}
    found = running_heads.find({n: edges_of(t) for n, t in texts.items()})
    assert set(found) == {1, 2, 3, 4}
    assert all((f.top, f.bottom) == (1, 1) for f in found.values())
    assert found[1].kinds == {
        "acme holdings annual report #": "page-header",
        "page # of #": "page-number",
    }
    assert running_heads.strip(texts[2], found[2]).splitlines()[0].startswith("Section 2.")
    # lines that differ in more than the page's number say more than where they are
    invoices = {n: f"Invoice {1040 + n}, order {70 + n}\nTotal {n * 9}" for n in (1, 2, 3)}
    # (nor does a number that changes otherwise than the pages do: "Total 9", "Total 18")
    assert running_heads.find({n: edges_of(t) for n, t in invoices.items()}) == {}
    # the same page twice is not a page with a running head
    same = "Title\nBody line\nFooter"
    assert running_heads.find({1: edges_of(same), 2: edges_of(same)}) == {}


@pytest.mark.parametrize("keep", [False, True])
def test_a_documents_running_heads_are_dropped_or_kept_and_labelled(
    tmp_path, loop, cpu_engine, cpu_pool, keep: bool
) -> None:
    pages = report_pages(3)
    worker = new_worker(loop, make_settings(tmp_path), cpu_engine, cpu_pool)
    job = {"pdf": {"base64": b64(samples.pdf_from_pages(pages))}, "output_prefix": "heads"}
    result = run_job(loop, worker, job | {"headers_footers": "keep" if keep else "drop"})
    assert result.status == "ok", result.error
    assert any("running headers and footers found on 3 pages" in n for n in result.notes)
    for page in result.pages:
        text = (tmp_path / "out" / str(page.key)).read_text()
        assert page.chars == len(text)
        assert ("ACME Holdings" in text) is keep and (f"Page {page.page} of 3" in text) is keep
        assert f"Section {page.page}." in text
        doc = PageBlocks.model_validate_json((tmp_path / "out" / str(page.blocks_key)).read_text())
        kinds = {b.content: b.kind for b in doc.blocks}
        assert kinds["ACME Holdings Annual Report 2025"] == "page-header"
        assert kinds[f"Page {page.page} of 3"] == "page-number"


def test_a_page_read_among_reused_ones_loses_the_running_heads_they_lost(
    tmp_path, loop, cpu_engine, cpu_pool
) -> None:
    # pages 1, 2 and 4 read first, their heads found and dropped; then the whole document: 1, 2
    # and 4 reused, their stored text without the heads, and page 3 read between them
    worker = new_worker(loop, make_settings(tmp_path, cpu_layout=False), cpu_engine, cpu_pool)
    job = {"pdf": {"base64": b64(samples.pdf_from_pages(report_pages(4)))}, "output_prefix": "r"}
    first = run_job(loop, worker, job | {"pages": "1-2,4"})
    assert any("found on 3 pages" in n for n in first.notes), first.notes
    stored = {p.page: (tmp_path / "out" / str(p.key)).read_text() for p in first.pages}
    whole = run_job(loop, worker, job)
    assert [p.reused for p in whole.pages] == [True, True, False, True]
    texts = {p.page: (tmp_path / "out" / str(p.key)).read_text() for p in whole.pages}
    assert "ACME Holdings" not in texts[3] and "Page 3 of 4" not in texts[3], texts[3]
    assert texts[3].startswith("Section 3.")
    assert {n: texts[n] for n in stored} == stored  # the reused are left as the first job left them


# --- the document to read -----------------------------------------------------------------------


def test_document_markdown_marks_pages_and_links_figures_from_the_documents_folder() -> None:
    pages = [
        document.PageText(1, "# One\n\n![chart](page-0001-figure-1.png)", folder="pages-0001-0002"),
        document.PageText(2, "", failed="the engine stopped -- twice"),
        document.PageText(3, "Three"),
    ]
    assert document.markdown(pages) == (
        "<!-- page 1 -->\n\n# One\n\n![chart](pages-0001-0002/page-0001-figure-1.png)\n\n"
        "<!-- page 2 -->\n\n<!-- page 2 failed: the engine stopped - - twice -->\n\n"
        "<!-- page 3 -->\n\nThree\n"
    )
    assert document.plain(pages) == "# One\n\n![chart](page-0001-figure-1.png)\n\f\n\fThree\n\f"


def test_a_whole_pdf_job_writes_document_md_and_a_selection_does_not(
    tmp_path, loop, cpu_engine, cpu_pool
) -> None:
    worker = new_worker(loop, make_settings(tmp_path), cpu_engine, cpu_pool)
    pdf = {"base64": b64(samples.pdf_from_pages(samples.LEGAL_PAGES))}
    whole = run_job(loop, worker, {"pdf": pdf, "output_prefix": "doc", "searchable_pdf": True})
    assert whole.document_key == "doc/document.md" and whole.searchable_pdf_key
    md = (tmp_path / "out/doc/document.md").read_text()
    texts = [(tmp_path / "out" / str(p.key)).read_text() for p in whole.pages]
    assert md == f"<!-- page 1 -->\n\n{texts[0]}\n\n<!-- page 2 -->\n\n{texts[1]}\n"
    assert (tmp_path / "out/doc/document.txt").read_text() == f"{texts[0]}\n\f{texts[1]}\n\f"
    part = run_job(loop, worker, {"pdf": pdf, "pages": "2", "output_prefix": "part"})
    assert part.document_key is None and not (tmp_path / "out/part/document.md").exists()
    # a selection read again where the whole was: the whole's text, now out of step, is gone
    again = run_job(loop, worker, {"pdf": pdf, "pages": "2", "output_prefix": "doc"})
    assert again.document_key is None and again.status == "ok"
    assert not [p.name for p in (tmp_path / "out/doc").glob("document.*")]
    assert not (tmp_path / "out/doc/searchable.pdf").exists()  # nor its searchable PDF
    # the manifest, stored before the result is done, says the job's time up to its writing
    manifest = json.loads((tmp_path / "out/doc/manifest.json").read_text())
    assert 0 < manifest["timings"]["total_s"] <= again.timings["total_s"]


# --- the searchable PDF -------------------------------------------------------------------------


def words_in(pdf: bytes, number: int) -> list[tuple[pymupdf.Rect, str]]:
    with pymupdf.open(stream=pdf) as doc:
        return [(pymupdf.Rect(w[:4]), w[4]) for w in doc[number - 1].get_text("words")]


def test_a_scanned_pdf_becomes_searchable_where_its_words_are_printed(
    tmp_path, loop, cpu_engine, cpu_pool
) -> None:
    original = samples.scanned(samples.pdf_from_pages(samples.LEGAL_PAGES), dpi=100)
    worker = new_worker(loop, make_settings(tmp_path), cpu_engine, cpu_pool)
    job = {"pdf": {"base64": b64(original)}, "output_prefix": "s", "searchable_pdf": True}
    result = run_job(loop, worker, job)
    assert result.status == "ok", result.error
    assert result.searchable_pdf_key == "s/searchable.pdf"
    made = (tmp_path / "out/s/searchable.pdf").read_bytes()
    assert any("searchable PDF: 2 pages got a text layer" in n for n in result.notes)
    with pymupdf.open(stream=made) as doc:
        assert doc.page_count == 2 and doc[0].rect == pymupdf.Rect(0, 0, 595, 842)
        assert doc[1].search_for("landlord")
    for page in result.pages:
        assert_words_in_their_boxes(made, tmp_path / "out" / str(page.blocks_key))


def assert_words_in_their_boxes(made: bytes, blocks_file: Path) -> None:
    """Each block's words are found in the PDF, in order, inside the block's box."""
    blocks = PageBlocks.model_validate_json(blocks_file.read_text())
    words = words_in(made, blocks.page)
    for block in blocks.blocks:
        assert block.box_pt is not None
        box = pymupdf.Rect(block.box_pt)
        box = pymupdf.Rect(box.x0 - 2, box.y0 - 2, box.x1 + 2, box.y1 + 2)
        inside = [text for rect, text in words if box.contains((rect.tl + rect.br) / 2)]
        assert inside == block.content.split(), (block.content, inside)


def searchable_page(
    tmp_path: Path, loop, cpu_engine, cpu_pool, doc: pymupdf.Document, **settings: Any
) -> tuple[JobResult, pymupdf.Document]:
    """A one-page PDF's job with a searchable PDF: its result, and the searchable PDF, whose
    page's words are checked to lie in their blocks' boxes."""
    worker = new_worker(loop, make_settings(tmp_path, **settings), cpu_engine, cpu_pool)
    job = {"pdf": {"base64": b64(doc.tobytes())}, "output_prefix": "s", "searchable_pdf": True}
    result = run_job(loop, worker, job)
    assert result.status == "ok", result.error
    made = (tmp_path / "out/s/searchable.pdf").read_bytes()
    assert_words_in_their_boxes(made, tmp_path / "out/s/page-0001.json")
    return result, pymupdf.open(stream=made)


def sideways_scan(width: float, height: float) -> pymupdf.Document:
    """A page of the lease whose scan lies on its side, on a page of `width` × `height`."""
    doc = pymupdf.open()
    page = doc.new_page(width=width, height=height)
    page.insert_image(
        page.rect, stream=png_bytes(page_image(samples.LEGAL_PAGES[1]).rotate(90, expand=True))
    )
    return doc


def test_a_page_shown_turned_by_its_pdf_is_searchable_as_shown(
    tmp_path, loop, cpu_engine, cpu_pool
) -> None:
    doc = sideways_scan(842, 595)
    doc[0].set_rotation(90)  # a landscape page shown upright by the PDF's /Rotate 90
    _, out = searchable_page(tmp_path, loop, cpu_engine, cpu_pool, doc)
    assert out[0].rect == pymupdf.Rect(0, 0, 595, 842)  # as it was shown
    assert out[0].search_for("landlord")


def test_a_page_read_turned_is_searchable_along_its_printed_lines(
    tmp_path, loop, cpu_engine, cpu_pool
) -> None:
    # the same scan on an upright page: read turned, its lines run up the page
    doc = sideways_scan(595, 842)
    result, out = searchable_page(tmp_path, loop, cpu_engine, cpu_pool, doc, auto_rotate=True)
    assert result.pages[0].rotated == 90
    lines = [ln for b in out[0].get_text("dict")["blocks"] for ln in b.get("lines", [])]
    assert lines and all(ln["dir"] == (0.0, -1.0) for ln in lines)  # up, as printed
    assert out[0].search_for("landlord")


def test_a_page_shown_cropped_is_searchable_where_its_words_are_printed(
    tmp_path, loop, cpu_engine, cpu_pool
) -> None:
    doc = pymupdf.open(stream=samples.scanned(samples.pdf_from_pages(samples.LEGAL_PAGES[1:])))
    doc[0].set_cropbox(pymupdf.Rect(0, 0, 595, 640))  # its top part: the bottom margin larger
    _, out = searchable_page(tmp_path, loop, cpu_engine, cpu_pool, doc)
    assert out[0].rect == pymupdf.Rect(0, 0, 595, 640)  # as it was shown
    assert out[0].search_for("landlord")


def test_a_pdf_with_its_own_text_layer_keeps_it(tmp_path, loop, cpu_engine, cpu_pool) -> None:
    original = samples.pdf_from_pages(samples.LEGAL_PAGES[:1])
    worker = new_worker(loop, make_settings(tmp_path), cpu_engine, cpu_pool)
    job = {"pdf": {"base64": b64(original)}, "output_prefix": "t", "searchable_pdf": True}
    result = run_job(loop, worker, job)
    assert any("1 pages kept their own text layer" in n for n in result.notes)
    made = (tmp_path / "out/t/searchable.pdf").read_bytes()
    with pymupdf.open(stream=original) as a, pymupdf.open(stream=made) as b:
        assert b[0].get_text("words") == a[0].get_text("words")  # its own, not doubled


def test_a_blocks_lines_are_laid_at_one_size_each_as_long_as_it_is(tmp_path: Path) -> None:
    blank = pymupdf.open()
    blank.new_page(width=612, height=792)
    blank.save(tmp_path / "page.pdf")
    text = "Second line of page two: invoice total 4,210 EUR.\nThird line about dates."
    overlay = searchable.Overlay(1, boxes=(((50, 50, 450, 110), text),))
    searchable.make_part(str(tmp_path / "page.pdf"), [overlay], str(tmp_path / "out.pdf"))
    with pymupdf.open(tmp_path / "out.pdf") as out:
        spans = [
            span
            for block in out[0].get_text("dict")["blocks"]
            for line in block["lines"]
            for span in line["spans"]
        ]
    [long, short] = spans
    assert long["size"] == short["size"] and long["bbox"][2] == pytest.approx(450, abs=2)
    assert short["bbox"][2] < 260  # its own length at the block's size, not the block's width


def test_images_become_pages_of_a_searchable_pdf(tmp_path, loop, cpu_pool) -> None:
    # a model that gives no boxes: the page's text is laid over the whole page
    engine = FakeEngine(lambda page, prompt: f"Receipt total {page.width} euro")
    worker = new_worker(loop, make_settings(tmp_path), engine, cpu_pool)
    images = [
        {"base64": b64(png_bytes(Image.new("RGB", (600, 800), "white").convert("L")))},
        {"base64": b64(b"not an image")},
        {"base64": b64(png_bytes(page_image(["Scanned receipt"])))},
    ]
    result = run_job(loop, worker, {"images": images, "searchable_pdf": True})
    assert result.status == "partial" and result.searchable_pdf_key
    made = (tmp_path / "out/job-1/searchable.pdf").read_bytes()
    with pymupdf.open(stream=made) as doc:
        # one page an image, in order: the image that never rendered has a page saying why
        assert doc.page_count == 3
        width = result.pages[2].width
        assert doc[2].rect.width == pytest.approx(width * 72 / searchable.IMAGE_DPI)
        assert doc[2].search_for(f"Receipt total {width} euro")
        assert doc[0].get_text().strip() == ""  # blank: nothing to lay over it
        assert doc[1].get_text().startswith("Image 2 could not be read: input.images[1]")
    assert len(made) < 200_000
    [note] = [n for n in result.notes if n.startswith("searchable PDF")]
    assert "; image 2 could not be read, and its page says so" in note


def test_a_searchable_pdf_is_refused_for_json_jobs() -> None:
    with pytest.raises(InputError, match=r"input\.searchable_pdf"):
        JobInput.parse(
            {
                "pdf": {"base64": "JVBERg=="},
                "json_schema": {"type": "object"},
                "searchable_pdf": True,
            }
        )


def test_block_content_is_laid_over_as_the_words_printed() -> None:
    html = "<table><tr><td>Item</td><td>Price</td></tr><tr><td>Tea</td><td>3</td></tr></table>"
    assert searchable.plain(html) == "Item Price\nTea 3"
    assert searchable.plain("| a | b |\n|---|---|\n| 1 | 2 |") == "a b\n1 2"
    assert searchable.plain("![a chart](page-0001-figure-1.png)") == "a chart"


# --- the picture --------------------------------------------------------------------------------


def test_show_draws_a_page_with_its_blocks(tmp_path, loop, cpu_engine, cpu_pool) -> None:
    pdf = tmp_path / "lease.pdf"
    pdf.write_bytes(samples.pdf_from_pages(samples.LEGAL_PAGES[:1]))
    worker = new_worker(loop, make_settings(tmp_path), cpu_engine, cpu_pool)
    job = {"pdf": {"base64": b64(pdf.read_bytes()), "name": pdf.name}, "output_prefix": "lease"}
    run_job(loop, worker, job)
    out = tmp_path / "drawn.png"
    args = ["show", str(tmp_path / "out/lease"), "--page", "1", "--pdf", str(pdf)]
    assert cli.main([*args, "-o", str(out)]) == 0
    doc = PageBlocks.model_validate_json((tmp_path / "out/lease/page-0001.json").read_text())
    with Image.open(out) as drawn:
        assert drawn.size == (doc.width, doc.height)
        x0, y0, x1, y1 = (round(v) for v in doc.blocks[-1].box or ())
        # the box's outline in its kind's colour, the page's own ink inside it
        assert drawn.getpixel((x0 + 1, (y0 + y1) // 2)) == show.COLOURS["text"]
        inside = drawn.crop((x0 + 4, y0 + 4, x1 - 4, y1 - 4)).convert("L")
        assert min(inside.getdata()) < 100
        again = tmp_path / "again.png"  # show's old spelling, kept: --dir, --source and --out
        old = ["show", "lease", "--page", "1", "--dir", str(tmp_path / "out"), "--source", str(pdf)]
        assert cli.main([*old, "--out", str(again)]) == 0
        with Image.open(again) as drawn_again:
            assert drawn_again.tobytes() == drawn.tobytes()
    blank = show.draw(doc)  # without the page: the blocks on white, with their text
    assert blank.size == (doc.width, doc.height)


def test_show_says_when_there_is_no_job_or_no_blocks(tmp_path, capsys) -> None:
    args = ["show", "nothing", "--page", "3", "--dir", str(tmp_path)]
    assert cli.main(args) == 2
    assert "RESULTS: " in capsys.readouterr().err


def test_a_real_qwen3_vl_layout_answer_is_stored_as_blocks_and_figures(
    tmp_path, loop, cpu_pool
) -> None:
    from vlm_ocr.engines.families import Page
    from vlm_ocr.engines.families.qwen import QwenVl
    from vlm_ocr.prompts import PRESETS

    answer = (FIXTURES / "qwen/qwen3-vl-235b-a22b_qwenvl-html_research-report.txt").read_text()
    family = QwenVl("qwen3_vl")

    def read(page: PageImage, prompt: object) -> Recognition:
        reading = family.parse(
            answer, PRESETS["qwenvl-html"], Page(page.width, page.height, page.pdf_size)
        )
        return Recognition(reading.text, finish_reason="stop", reading=reading)

    worker = new_worker(loop, make_settings(tmp_path), FakeEngine(read), cpu_pool)
    job = {"pdf": {"base64": b64(one_page_pdf())}, "output_prefix": "q", "searchable_pdf": True}
    result = run_job(loop, worker, job)
    page = result.pages[0]
    assert result.status == "ok", result.error
    doc = PageBlocks.model_validate_json((tmp_path / "out/q/page-0001.json").read_text())
    figures = [b for b in doc.blocks if b.kind == "figure"]
    assert len(doc.blocks) == 41 and len(figures) == 5
    assert page.figures == [f"q/page-0001-figure-{n}.png" for n in range(1, 6)]
    text = (tmp_path / "out/q/page-0001.md").read_text()
    for n in range(1, 6):
        assert f"(page-0001-figure-{n}.png)" in text
        with Image.open(tmp_path / f"out/q/page-0001-figure-{n}.png") as crop:
            x0, y0, x1, y1 = figures[n - 1].box or ()
            assert abs(crop.width - (x1 - x0)) <= 2 and abs(crop.height - (y1 - y0)) <= 2
    # the page had a text layer of its own: kept, nothing laid over it
    assert any("1 pages kept their own text layer" in n for n in result.notes)


def test_the_layout_benchmark_prints_its_figures(capsys) -> None:
    assert lab_cli.main(["bench", "--layout", "--pages", "2"]) == 0
    out = capsys.readouterr().out
    assert "blocks (Markdown from blocks, a figure cut out, blocks file):" in out
    assert "searchable PDF:" in out and "against the original's" in out


def test_a_page_of_countless_figures_is_cut_within_bounds(tmp_path, loop, cpu_pool) -> None:
    def greedy(page: PageImage, prompt: object) -> Recognition:
        raw = [RawBlock("figure", (0, 0, page.width, page.height), f"all {n}") for n in range(60)]
        placed = place(raw, {"figure": "figure"}, width=page.width, height=page.height)
        reading = Reading("", tuple(placed.blocks))
        return Recognition("", finish_reason="stop", reading=reading)

    worker = new_worker(loop, make_settings(tmp_path), FakeEngine(greedy), cpu_pool)
    result = run_job(loop, worker, {"pdf": {"base64": b64(one_page_pdf())}, "output_prefix": "g"})
    page = result.pages[0]
    assert result.status == "ok" and page.blocks == 60
    assert len(page.figures or []) == 2  # two pages' area of crops, no more
    doc = PageBlocks.model_validate_json((tmp_path / "out/g/page-0001.json").read_text())
    assert any("figures from block 3 on were not cut out" in n for n in doc.notes)
