"""Headers and footers are furniture, never body text: a first line set like the body stays in the
text, a sentence that ends every page is no running footer, and a running head read with its
spacing varied from page to page is found on every page."""

from __future__ import annotations

import pymupdf

from vlm_ocr import samples
from vlm_ocr.blocks import PageBlocks
from vlm_ocr.engines.layout_blocks import labelled
from vlm_ocr.engines.layout_model import Region
from vlm_ocr.engines.reading_order import Line
from vlm_ocr.pipeline import running_heads
from vlm_ocr.pipeline.stages.store import edges_of

from .support import b64, make_settings, new_worker, run_job

H = 1400  # a page of synthetic lines, in pixels
CLOSING = "More text follows in this paragraph to make a body of several words on the page."


def line(y0: float, text: str, h: float = 20, x1: float = 480) -> Line:
    return Line(100, y0, x1, y0 + h, text)


def letter_lines(first: Line) -> list[Line]:
    """A first line, then one paragraph well below it: a letter's body, lines 25 pixels apart."""
    body = [
        line(260 + 25 * k, f"We have reviewed the invoice, line {k}.", x1=900) for k in range(8)
    ]
    return [first, *body]


def first_block(first: Line, header: tuple[float, float, float, float]) -> tuple[str, str]:
    """The first block of a letter page whose first line the layout model boxed as a header."""
    [block, *_] = labelled(letter_lines(first), [Region("header", 0.9, header)], height=H)
    return block.content, block.label


# --- a header of the layout model's ---------------------------------------------------------


def test_a_first_line_set_like_the_body_below_the_margin_is_text() -> None:
    # 13 % down the page, in the body's size and at its left edge, an empty line below it:
    # nothing but the gap says header, and a letter's salutation has one too
    salutation = line(175, "Dear Ms. Smith,", x1=290)
    assert first_block(salutation, (95, 170, 295, 200)) == ("Dear Ms. Smith,", "text")


def test_a_header_set_smaller_than_the_body_or_in_the_margin_stays_a_header() -> None:
    head = "Example Water Board, Annual Report"
    small = line(180, head, h=12, x1=400)  # as low on the page, in smaller type
    assert first_block(small, (95, 175, 405, 197)) == (head, "header")
    high = line(60, head, x1=400)  # in the body's size, in the top margin
    assert first_block(high, (95, 55, 405, 85)) == (head, "header")
    # as low, in the body's size, but a title's line: a book's chapter, not a line of text
    chapter = "第六章 水土流失与治理情况"
    assert first_block(line(180, chapter, x1=400), (95, 175, 405, 205)) == (chapter, "header")


def letter_pdf() -> bytes:
    """A letter, all in 12 pt: its salutation alone near the top, then three paragraphs."""
    paragraphs = [
        "Dear Ms. Smith,",
        "<br><br>Thank you for your letter of 3 March. We have reviewed the enclosed invoice and "
        "agree with the amounts listed for the second quarter.",
        "Payment will follow within thirty days of this notice. Please contact our office if "
        "anything remains unclear.",
        "Yours sincerely, John Doe",
    ]
    html = "".join(f'<p style="font-size:12pt; margin:0 0 6pt 0">{p}</p>' for p in paragraphs)
    doc = pymupdf.open()
    doc.new_page().insert_htmlbox(pymupdf.Rect(72, 90, 523, 770), html)
    return doc.tobytes()


def test_a_letters_salutation_stays_in_the_page_text(tmp_path, loop, cpu_engine, cpu_pool) -> None:
    worker = new_worker(loop, make_settings(tmp_path), cpu_engine, cpu_pool)
    result = run_job(loop, worker, {"pdf": {"base64": b64(letter_pdf())}, "output_prefix": "l"})
    assert result.status == "ok", result.error
    [page] = result.pages
    text = (tmp_path / "out" / str(page.key)).read_text()
    assert text.startswith("Dear Ms. Smith,") and "Thank you for your letter" in text
    doc = PageBlocks.model_validate_json((tmp_path / "out" / str(page.blocks_key)).read_text())
    assert not [b for b in doc.blocks if b.kind in {"page-header", "page-footer"}]


# --- the document's repeated lines ----------------------------------------------------------


def report(heads: list[str], closing: bool = True) -> dict[int, str]:
    """Pages as the recognizer read them: a running head, a body that differs from page to page
    (ended by the same sentence on every page), a page number."""
    pages = {}
    for n, head in enumerate(heads, 1):
        body = [f"Total {n * 100 + 7} EUR received", f"Item {n * 37} was delivered to site {n}."]
        body += [CLOSING] if closing else []
        pages[n] = "\n".join([head, *body, f"Page {n} of {len(heads)}"])
    return pages


def test_a_sentence_that_ends_every_page_is_no_running_footer() -> None:
    pages = report([f"Annual Report 2025 · {n}" for n in (1, 2, 3)])
    found = running_heads.find({n: edges_of(t) for n, t in pages.items()})
    assert set(found) == {1, 2, 3}
    for n, text in pages.items():
        assert (found[n].top, found[n].bottom) == (1, 1)  # the head and the page number only
        assert running_heads.strip(text, found[n]).splitlines()[-1] == CLOSING
    # nor the last line of the sentence, where it wraps: a sentence's tail, begun in lower case
    wrapped = {n: t.replace("several words", "several\nwords") for n, t in pages.items()}
    found = running_heads.find({n: edges_of(t) for n, t in wrapped.items()})
    assert {(f.top, f.bottom) for f in found.values()} == {(1, 1)}
    # the page number read as furniture and left out already: the sentence ends the page
    bare = {n: t.rsplit("\n", 1)[0] for n, t in pages.items()}
    found = running_heads.find({n: edges_of(t) for n, t in bare.items()})
    assert {(f.top, f.bottom) for f in found.values()} == {(1, 0)}


def test_a_documents_closing_sentence_stays_in_every_page(
    tmp_path, loop, cpu_engine, cpu_pool
) -> None:
    head = "ACME Holdings Annual Report 2025"
    pages = [
        [head, f"Section {n}. Item {n * 37} was delivered.", CLOSING, f"Page {n} of 3"]
        for n in (1, 2, 3)
    ]
    worker = new_worker(loop, make_settings(tmp_path), cpu_engine, cpu_pool)
    job = {"pdf": {"base64": b64(samples.pdf_from_pages(pages))}, "output_prefix": "closing"}
    result = run_job(loop, worker, job)
    assert result.status == "ok", result.error
    for page in result.pages:
        text = (tmp_path / "out" / str(page.key)).read_text()
        assert "ACME Holdings" not in text and f"Section {page.page}." in text
        assert "More text follows in this paragraph" in text
    assert not any("more text follows" in note for note in result.notes)


def test_a_running_head_read_with_its_spacing_varied_is_found_on_every_page() -> None:
    # as the recognizer read a scan: the space before the dot on page 1 only
    heads = ["Annual Report 2025 · 1", "Annual Report 2025· 2", "Annual Report 2025· 3"]
    pages = report(heads, closing=False)
    found = running_heads.find({n: edges_of(t) for n, t in pages.items()})
    assert {n: f.top for n, f in found.items()} == {1: 1, 2: 1, 3: 1}
    assert running_heads.strip(pages[1], found[1]).splitlines()[0] == "Total 107 EUR received"
    # other OCR noise of the same kind: full-width characters, dashes, CJK spacing
    assert running_heads.normalised("Section 2 – Results") == running_heads.normalised(
        "Section ２—Results"
    )
    assert running_heads.normalised("第 3 页") == running_heads.normalised("第3页")


def test_heads_that_differ_in_more_than_their_spacing_are_not_running_heads() -> None:
    heads = ["Part A · Rivers 1", "Part B · Cities 2", "Part C · Roads 3"]
    found = running_heads.find({n: edges_of(t) for n, t in report(heads).items()})
    assert {f.top for f in found.values()} == {0}  # the page numbers alone


def test_figures_at_the_tops_of_pages_are_no_running_head() -> None:
    # each page's figure link names its page, so the links differ by the pages' numbers alone,
    # as a running head's page number does: the figures stay in the text
    pages = {
        n: f"![figure](page-{n:04d}-figure-1.png)\nTable {n}: rivers and their lengths\n{CLOSING}"
        for n in (3, 4)
    }
    assert running_heads.find({n: edges_of(t) for n, t in pages.items()}) == {}
    html = {n: f'<img src="page-{n:04d}-figure-1.png">\nBody {n * 7}' for n in (1, 2)}
    assert running_heads.find({n: edges_of(t) for n, t in html.items()}) == {}
