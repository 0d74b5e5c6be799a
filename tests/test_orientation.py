"""Scans that lie sideways or upside down are turned upright before the engine reads them; the
turn is recorded. Real pages, rendered by PyMuPDF, turned by the tests."""

from __future__ import annotations

import json

import pymupdf
import pytest

from vlm_ocr import samples
from vlm_ocr.pipeline.orientation import detect_turn
from vlm_ocr.pipeline.textsim import similarity

from .support import (
    SIDEWAYS,
    b64,
    make_settings,
    new_worker,
    page_image,
    png_bytes,
    run_job,
    sideways_pdf,
)

PAGE = samples.LEGAL_PAGES[0]


@pytest.mark.parametrize("scanned_at", [0, 90, 180, 270])
def test_the_turn_that_puts_a_page_upright(scanned_at: int) -> None:
    scan = page_image(PAGE).rotate(-scanned_at, expand=True)  # turned clockwise
    assert detect_turn(scan) == (360 - scanned_at) % 360


def test_a_page_without_text_lines_is_left_alone() -> None:
    assert detect_turn(page_image(["7"])) == 0


def test_sideways_scans_are_read_upright_and_the_turn_recorded(
    tmp_path, loop, cpu_engine, cpu_pool
) -> None:
    worker = new_worker(loop, make_settings(tmp_path, auto_rotate=True), cpu_engine, cpu_pool)
    upright = page_image(PAGE)
    images = [
        {"base64": b64(png_bytes(upright.rotate(-90, expand=True))), "name": "cw.png"},
        {"base64": b64(png_bytes(upright)), "name": "upright.png"},
    ]
    try:
        result = run_job(loop, worker, {"images": images, "output_prefix": "turned"})
        pdf = run_job(loop, worker, {"pdf": {"base64": b64(samples.pdf_from_pages([PAGE]))}})
    finally:
        loop.run(worker.cpu_models.close())
    assert result.status == "ok", result.error
    sideways, straight = result.pages
    assert sideways.rotated == 270 and straight.rotated == 0
    assert (sideways.width, sideways.height) == (straight.width, straight.height)
    for page in (sideways, straight):
        text = (tmp_path / "out" / str(page.key)).read_text()
        assert similarity(text, samples.page_text(PAGE)) >= 0.9, text
    manifest = json.loads((tmp_path / "out/turned/manifest.json").read_text())
    assert [p["rotated"] for p in manifest["pages"]] == [270, 0]
    # A PDF page whose text layer reads across is not checked.
    assert pdf.pages[0].rotated is None


def test_pages_whose_text_layer_runs_sideways_are_turned_and_read(
    tmp_path, loop, cpu_engine, cpu_pool
) -> None:
    # a table turned to fit its page, upside down, and a page shown turned by its /Rotate
    pdf = pymupdf.open(stream=sideways_pdf([0, 90, 180]))
    pdf.insert_pdf(pymupdf.open(stream=sideways_pdf([0], displayed=90)))
    worker = new_worker(loop, make_settings(tmp_path, auto_rotate=True), cpu_engine, cpu_pool)
    try:
        job = {"pdf": {"base64": b64(pdf.tobytes())}, "output_prefix": "turned"}
        result = run_job(loop, worker, job)
    finally:
        loop.run(worker.cpu_models.close())
    assert result.status == "ok", result.error
    assert [p.rotated for p in result.pages] == [None, 90, 180, 270]
    for page in result.pages:  # each read as the text it is
        text = (tmp_path / "out" / str(page.key)).read_text()
        assert similarity(text, "\n".join(SIDEWAYS)) >= 0.9, (page.page, text)
    # each drawn as read: page 2 turned a quarter to landscape, page 4 (shown landscape by its
    # /Rotate) turned back to the portrait its text is set in
    assert [(p.width or 0) > (p.height or 0) for p in result.pages] == [False, True, False, False]
