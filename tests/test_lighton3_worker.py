"""LightOnOCR-3 from outside: the worker on `ENGINE=openai` in front of an OpenAI-compatible server
that answers in the model's grounding format. What it is sent (the page at 2,048 px, then the
word `grounding`, its makers' sampling), what is stored (the text without the page's margins, a
continued paragraph joined), the blocks in page pixels, the figure cut out, the searchable PDF's
words in their blocks and the review page drawing them; and LightOnOCR 2's path as it was."""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymupdf
import pytest
from PIL import Image

from vlm_ocr import samples
from vlm_ocr.blocks import PageBlocks
from vlm_ocr.contract import JobResult
from vlm_ocr.engines.factory import make_engine
from vlm_ocr.pipeline.searchable import plain
from vlm_ocr_lab.standins.instant_engine import InstantEngine
from vlm_ocr_lab.standins.local_endpoint import worker_environ

from .support import b64, make_settings, new_worker, run_job

# A page as LightOnOCR-3 answers in grounding mode (0-1000 grid): a running head, a title, a
# paragraph carried over to the second column, a figure and its caption, a table whose prices
# its grounding answers write as `&dollar;`, a formula, escaped math beside a price, and the
# page's footer and number.
GROUNDED = """![header](80,30,920,50) Journal of Tests, Vol. 3

![title](100,80,900,120) # A Study of Pages

![text](100,140,480,400) The first column starts here and

![text+](520,140,900,400) ends in the second column.

![image](100,420,500,700) A bar chart of results.

![caption](100,710,500,730) Figure 1: Results.

![table](520,420,900,700) <table><tr><th>Item</th><th>Price</th></tr>
<tr><td>Sensor</td><td>&dollar;42.00</td></tr></table>

![formula](100,750,900,800) E = mc^2

![text](100,820,900,880) The cost is \\$5 per \\$x\\$ unit.

![footer](100,940,900,960) Printed by the test press

![page_number](480,965,520,980) 1
"""
A4 = (1440, 2048)  # an A4 page drawn 2,048 px on its longest side, on its processor's 32 px grid


class Fake:
    """The server, and every request it was sent."""

    def __init__(self, answer: str) -> None:
        self.requests: list[dict[str, Any]] = []
        self.server = InstantEngine(answer=self.answer)
        self.text = answer

    def answer(self, request: dict[str, Any]) -> str:
        self.requests.append(request)
        return self.text

    def pages(self) -> list[dict[str, Any]]:
        """The page requests (the warm-up, a few tokens long, left out)."""
        return [r for r in self.requests if r["max_tokens"] > 32]


@pytest.fixture
def fake() -> Iterator[Fake]:
    made = Fake(GROUNDED)
    yield made
    made.server.close()


def run_model(loop, tmp_path: Path, cpu_pool, fake: Fake, model: str, job: dict) -> JobResult:
    settings = make_settings(
        tmp_path, engine="openai", openai_base_url=fake.server.url, model_name=model
    )
    worker = new_worker(loop, settings, make_engine(settings), cpu_pool)
    loop.run(worker.start())
    try:
        return run_job(loop, worker, job)
    finally:
        loop.run(worker.close())


def image_size(request: dict[str, Any]) -> tuple[int, int]:
    url = request["messages"][0]["content"][0]["image_url"]["url"]
    data = base64.b64decode(url.split(",", 1)[1])
    return Image.open(io.BytesIO(data)).size


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """Two scanned A4 pages (no text layer: the searchable PDF gets the model's words)."""
    pdf = tmp_path / "study.pdf"
    text = [["A study of pages, scanned."], ["Its second page."]]
    pdf.write_bytes(samples.scanned(samples.pdf_from_pages(text), dpi=100))
    return pdf


def test_a_grounding_answer_becomes_the_pages_text_blocks_figure_and_searchable_words(
    loop, tmp_path: Path, cpu_pool, fake: Fake, study: Path
) -> None:
    job = {"pdf": {"base64": b64(study.read_bytes()), "name": study.name}}
    job |= {"output_prefix": "l3", "searchable_pdf": True}
    result = run_model(loop, tmp_path, cpu_pool, fake, "lightonai/LightOnOCR-3-0.8B", job)
    assert result.status == "ok", result.error
    assert result.engine["family"] == "lighton-ocr-3" and result.fingerprint["prompt"] == (
        "lightonocr-grounding"
    )
    # sent as its makers send it: the page at 2,048 px, then the word, their sampling
    requests = fake.pages()
    assert len(requests) == 2
    for request in requests:
        content = request["messages"][0]["content"]
        assert [part["type"] for part in content] == ["image_url", "text"]
        assert content[1]["text"] == "grounding" and len(request["messages"]) == 1
        assert (request["temperature"], request["top_p"]) == (0.1, 1.0)
        assert request["max_tokens"] == 12288
        assert request["chat_template_kwargs"] == {"enable_thinking": False}
        assert image_size(request) == A4
    out = tmp_path / "out"
    page = result.pages[0]
    assert (page.width, page.height) == A4
    text = (out / str(page.key)).read_text(encoding="utf-8")
    # the margins out of the text; the continued paragraph one; the makers' post-processing
    for margin in ("Journal of Tests", "Printed by the test press"):
        assert margin not in text
    assert not re.search(r"^1$", text, flags=re.M)
    assert "The first column starts here and ends in the second column." in text
    assert "<td>$42.00</td>" in text and "The cost is \\$5 per $x$ unit." in text
    assert "$$\nE = mc^2\n$$" in text and "# A Study of Pages" in text
    assert "![Figure 1: Results.](page-0001-figure-1.png)" in text
    assert page.figures == ["l3/page-0001-figure-1.png"]
    assert (out / "l3/page-0001-figure-1.png").stat().st_size > 0
    doc = PageBlocks.model_validate_json((out / str(page.blocks_key)).read_text())
    assert_blocks_in_page_pixels(doc)
    made = (out / str(result.searchable_pdf_key)).read_bytes()
    assert_words_in_their_blocks(made, doc)
    assert_review_draws_them(tmp_path, out / "l3", study, doc)


def assert_blocks_in_page_pixels(doc: PageBlocks) -> None:
    kinds = [b.kind for b in doc.blocks]
    assert kinds == [
        "page-header",
        "title",
        "text",
        "text",
        "figure",
        "caption",
        "table",
        "formula",
        "text",
        "page-footer",
        "page-number",
    ]
    assert doc.source == "lighton-ocr-3" and doc.labelled
    sx, sy = A4[0] / 1000, A4[1] / 1000
    header, _, first, continued = doc.blocks[:4]
    assert header.box == pytest.approx((80 * sx, 30 * sy, 920 * sx, 50 * sy), abs=0.06)
    assert continued.box == pytest.approx((520 * sx, 140 * sy, 900 * sx, 400 * sy), abs=0.06)
    assert continued.continues is True and first.continues is None
    # and in the PDF's points: the same grid over the page's 595 × 842
    assert doc.pdf_size == (595.0, 842.0)
    pt = (80 * 0.595, 30 * 0.842, 920 * 0.595, 50 * 0.842)
    assert header.box_pt == pytest.approx(pt, abs=0.1)
    assert doc.blocks[-1].label == "page_number" and doc.blocks[0].label == "header"


def assert_words_in_their_blocks(made: bytes, doc: PageBlocks) -> None:
    """Each block's words are laid over the page inside its box (figures are not printed text)."""
    with pymupdf.open(stream=made) as pdf:
        words = [(pymupdf.Rect(w[:4]), w[4]) for w in pdf[doc.page - 1].get_text("words")]
    laid = 0
    for block in doc.blocks:
        if block.kind == "figure" or block.box_pt is None:
            continue
        box = pymupdf.Rect(block.box_pt)
        box = pymupdf.Rect(box.x0 - 2, box.y0 - 2, box.x1 + 2, box.y1 + 2)
        inside = [t for rect, t in words if box.contains((rect.tl + rect.br) / 2)]
        assert inside == plain(block.content).split(), (block.content, inside)
        laid += 1
    assert laid == len(doc.blocks) - 1


def assert_review_draws_them(tmp_path: Path, folder: Path, pdf: Path, doc: PageBlocks) -> None:
    out = tmp_path / "review.html"
    proc = subprocess.run(
        [sys.executable, "-m", "vlm_ocr", "review", str(folder), "--pdf", str(pdf), "-o", str(out)],
        cwd=tmp_path,
        env=worker_environ(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = out.read_text(encoding="utf-8")
    drawn = re.findall(
        r'class="box k-([a-z-]+)" style="left:([\d.]+)%;top:([\d.]+)%;width:([\d.]+)%;'
        r'height:([\d.]+)%" data-block="b1-',
        html,
    )
    assert [kind for kind, *_ in drawn] == [b.kind for b in doc.blocks]
    for (kind, left, top, width, height), block in zip(drawn, doc.blocks, strict=True):
        assert block.box is not None, kind
        x0, y0, x1, y1 = block.box
        assert float(left) == pytest.approx(100 * x0 / doc.width, abs=0.001)
        assert float(top) == pytest.approx(100 * y0 / doc.height, abs=0.001)
        assert float(width) == pytest.approx(100 * (x1 - x0) / doc.width, abs=0.001)
        assert float(height) == pytest.approx(100 * (y1 - y0) / doc.height, abs=0.001)


def test_the_1b_is_sent_its_pixtral_pages(loop, tmp_path: Path, cpu_pool, fake: Fake) -> None:
    pdf = samples.pdf_from_pages([["One page."]])
    job = {"pdf": {"base64": b64(pdf)}, "output_prefix": "one"}
    result = run_model(loop, tmp_path, cpu_pool, fake, "lightonai/LightOnOCR-3-1B", job)
    assert result.status == "ok", result.error
    [request] = fake.pages()
    assert image_size(request) == (1089, 1540)
    assert request["messages"][0]["content"][1] == {"type": "text", "text": "grounding"}
    doc = json.loads((tmp_path / "out" / str(result.pages[0].blocks_key)).read_text())
    header = doc["blocks"][0]["box"]
    assert header == pytest.approx([80 * 1.089, 30 * 1.54, 920 * 1.089, 50 * 1.54], abs=0.06)


def test_lightonocr_2_is_still_sent_the_page_alone_and_stores_its_markdown(
    loop, tmp_path: Path, cpu_pool
) -> None:
    fake = Fake("## Results\n\nThe cost is \\$5 per \\$x\\$ unit.")
    try:
        pdf = samples.pdf_from_pages([["One page."]])
        job = {"pdf": {"base64": b64(pdf)}, "output_prefix": "two"}
        result = run_model(loop, tmp_path, cpu_pool, fake, "lightonai/LightOnOCR-2-1B", job)
    finally:
        fake.server.close()
    assert result.status == "ok", result.error
    assert result.engine["family"] == "lighton-ocr"
    [request] = fake.pages()
    assert [part["type"] for part in request["messages"][0]["content"]] == ["image_url"]
    assert (request["temperature"], request["top_p"]) == (0.2, 0.9)  # its model card's
    assert image_size(request) == (1089, 1540)
    [page] = result.pages
    assert page.blocks is None  # Markdown only
    text = (tmp_path / "out" / str(page.key)).read_text(encoding="utf-8")
    assert text == "## Results\n\nThe cost is \\$5 per $x$ unit."
