"""Blank pages: no ink, whatever the scanner added, is stored empty without the engine; any mark
that could be content (a page number, a stray mark) goes to the engine."""

from __future__ import annotations

import pytest

from vlm_ocr.images import PageImage

from .support import b64, page_image, png_bytes, scans, stored_text

TEXT = ["Clause nine applies to every blank page question."]


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("white", scans.white),
        ("noise", lambda: scans.noisy(scans.white(), 10)),
        ("heavy noise", lambda: scans.noisy(scans.white(), 20)),
        ("speckle", lambda: scans.speckled(scans.noisy(scans.white()))),
        ("bleed-through", lambda: scans.noisy(scans.bled_through(scans.white(), page_image(TEXT)))),
        ("grey paper", lambda: scans.noisy(scans.grey_paper(scans.white()))),
        ("dark paper", lambda: scans.noisy(scans.grey_paper(scans.white(), 40))),
    ],
)
def test_no_ink_is_blank(name: str, make) -> None:
    assert PageImage.of(make().convert("RGB")).blank, name


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("page number only", lambda: scans.noisy(scans.page_number())),
        ("stray mark", lambda: scans.noisy(scans.stray_mark())),
        ("one line", lambda: scans.noisy(page_image(TEXT[:1]).convert("L").resize((1064, 1505)))),
        ("small page number", lambda: scans.page_number("3").resize((266, 376))),
        ("light text on a dark slide", lambda: scans.noisy(scans.dark_slide(page_image(TEXT)))),
        ("text under a dark photograph", lambda: scans.photo_over(page_image(TEXT * 8), 0.6)),
    ],
)
def test_any_mark_is_not_blank(name: str, make) -> None:
    assert not PageImage.of(make().convert("RGB")).blank, name


def test_a_pdf_page_with_a_text_layer_is_never_blank() -> None:
    # Its words may be drawn in a colour the page's ground hides: the engine is asked all the same.
    page = PageImage.of(scans.white().convert("RGB"), text_layer="Clause nine", pdf_size=(612, 792))
    assert not page.blank
    assert PageImage.of(scans.white().convert("RGB"), text_layer=" \n", pdf_size=(612, 792)).blank


def test_blank_pages_are_stored_empty_without_the_engine(run, settings) -> None:
    blank = scans.noisy(scans.bled_through(scans.white(), page_image(TEXT))).convert("RGB")
    images = [{"base64": b64(png_bytes(img))} for img in (blank, page_image(TEXT), blank)]
    result = run({"images": images, "output_prefix": "blanks", "return_text": True})
    assert [p.status for p in result.pages] == ["blank", "ok", "blank"]
    assert result.status == "ok" and result.totals.blank == 2
    first = result.pages[0]
    assert first.text == "" and "engine_s" not in first.timings and first.attempts == 0
    assert stored_text(settings, first.key) == ""
    assert "Clause nine" in (result.pages[1].text or "")
