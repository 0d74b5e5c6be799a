"""Scans that lie sideways or upside down are turned upright before the engine reads them; the
turn is recorded. Real pages, rendered by PyMuPDF, turned by the tests."""

from __future__ import annotations

import json

import pytest

from vlm_ocr import samples
from vlm_ocr.pipeline.orientation import detect_turn
from vlm_ocr.pipeline.textsim import similarity

from .support import b64, make_settings, new_worker, page_image, png_bytes, run_job

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
    # A PDF page with a text layer is upright by construction: not checked.
    assert pdf.pages[0].rotated is None
