"""The job pipeline end to end on the CPU engine and the local store."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pymupdf
from PIL import Image

from vlm_ocr import samples
from vlm_ocr.images import LOW_DPI
from vlm_ocr.pdf_file import recount
from vlm_ocr.pipeline.textsim import similarity
from vlm_ocr.settings import Settings

from .support import (
    FAX,
    b64,
    encrypted_pdf,
    fax,
    fax_with_a_huge_page,
    make_settings,
    new_worker,
    page_image,
    pdf_with_zero_pages,
    png_bytes,
    run_sixteen_jobs,
    stored_text,
)
from .support.http_server import LoopbackServer


def test_multi_page_pdf_each_page_matches_its_own_text(run, settings: Settings) -> None:
    pages = samples.numbered_pages(3)
    result = run({"pdf": {"base64": b64(samples.pdf_from_pages(pages))}, "output_prefix": "t/a"})
    assert result.status == "ok" and result.error is None and not result.retry
    assert [p.key for p in result.pages] == [f"t/a/page-000{n}.md" for n in (1, 2, 3)]
    for page, truth in zip(result.pages, pages, strict=True):
        text = stored_text(settings, page.key)
        assert similarity(text, samples.page_text(truth)) >= 0.9, text
        assert page.chars == len(text)
        assert set(page.timings) >= {"render_s", "engine_s", "store_s", "total_s"}
    manifest = json.loads(stored_text(settings, "t/a/manifest.json"))
    assert manifest["totals"] == result.totals.model_dump()
    assert [p["status"] for p in manifest["pages"]] == ["ok"] * 3
    assert manifest["engine"]["name"] == "rapidocr" and manifest["engine"]["version"]
    assert all("text" not in p for p in manifest["pages"])
    assert result.notes == []  # no prompt was asked for, so none is said to be unused
    asked = run({"pdf": {"base64": b64(samples.pdf_from_pages(pages[:1]))}, "prompt": "markdown"})
    assert asked.notes == [
        "the rapidocr engine reads no prompt; prompt 'markdown' (version 1) was not used"
    ]


def test_two_columns_come_out_column_by_column(run) -> None:
    left = ["Left column opens the lease.", "Left column second clause.", "Left column ends."]
    right = ["Right column begins here.", "Right column second clause.", "Right column ends."]
    pdf = samples.pdf_from_pages([left + right], columns=2)
    result = run({"pdf": {"base64": b64(pdf)}, "return_text": True})
    text = result.pages[0].text or ""
    assert similarity(text, "\n".join(left + right)) >= 0.9, text
    positions = [text.find(word) for word in ("opens", "second", "ends", "begins")]
    assert positions[:3] == sorted(positions[:3]) and positions[2] < positions[3], text


def test_selection_beyond_document_keeps_good_pages(run, settings: Settings) -> None:
    pdf = samples.pdf_from_pages(samples.numbered_pages(2))
    result = run({"pdf": {"base64": b64(pdf)}, "pages": "2,5-2000", "output_prefix": "sel"})
    assert result.status == "partial"
    [ok] = result.pages
    assert ok.page == 2 and ok.status == "ok"
    truth = samples.page_text(samples.numbered_pages(2)[1])
    assert similarity(stored_text(settings, ok.key), truth) >= 0.9
    says = "input.pages: page 5-2000 selected beyond the end; the document has 2 pages"
    assert result.errors == [says] and result.error == says
    manifest = json.loads(stored_text(settings, "sel/manifest.json"))
    assert (manifest["status"], manifest["error"]) == ("partial", says)


def test_a_truncated_pdf_whose_last_pages_fail_says_so_in_the_job_error(run) -> None:
    pdf = samples.pdf_from_pages(samples.numbered_pages(5, lines=2))
    result = run({"pdf": {"base64": b64(pdf[:1736])}, "output_prefix": "cut"})
    assert [p.status for p in result.pages] == ["ok", "ok", "failed", "failed", "failed"]
    assert result.status == "partial" and not result.retry
    assert result.error == (
        "3 of 5 pages failed: pages 3-5: came out blank from a damaged PDF (MuPDF had to repair "
        "the file; it is probably truncated): send the complete file"
    )


def test_base64_as_encoders_write_it_is_read(run) -> None:
    # the URL-safe alphabet (RFC 4648 has both), no padding, a data URL with a parameter, and a
    # data URL behind leading white space: each is the same image
    png = png_bytes(page_image(["Clause seven shall remain in force."]))
    png += b"\0" * (len(png) % 3 == 0)  # so that its base64 ends in padding (after IEND: unread)
    std = base64.b64encode(png).decode()
    forms = [
        base64.urlsafe_b64encode(png).decode(),
        std.rstrip("="),
        "data:image/png;charset=utf-8;base64," + std,
        " " * 300 + "data:image/png;base64," + std,
    ]
    assert any(c in forms[0] for c in "-_") and forms[1] != std  # the forms differ from `std`
    result = run({"images": [{"base64": form} for form in forms], "return_text": True})
    assert [p.status for p in result.pages] == ["ok"] * 4, result.errors
    assert len({p.text for p in result.pages}) == 1


def test_bad_images_reported_good_ones_stored(run, settings: Settings) -> None:
    good = ["Clause seven shall remain in force."]
    images = [
        {"base64": b64(png_bytes(page_image(good)))},
        {"base64": "%%% not base64 %%%"},
        {"base64": b64(b"plain text, not an image")},
        {"base64": b64(png_bytes(Image.new("1", (12_000, 12_000))))},
        {"url": "https://127.0.0.1/page.png"},
        {"key": "uploads/page.png"},
    ]
    result = run({"images": images, "output_prefix": "imgs"})
    assert result.status == "partial"
    assert (result.error or "").startswith(
        "5 of 6 pages failed: page 2: input.images[1].base64: not valid base64"
    )
    assert (result.error or "").endswith("; 2 more in `errors`") and len(result.errors) == 5
    assert (result.totals.ok, result.totals.failed) == (1, 5)
    first = result.pages[0]
    assert first.status == "ok"
    assert similarity(stored_text(settings, first.key), good[0]) >= 0.9
    errors = {p.page: p.error or "" for p in result.pages[1:]}
    assert "input.images[1].base64: not valid base64" in errors[2]
    assert "input.images[2]: the data is not an image" in errors[3]
    assert "input.images[3]: the image is 12000×12000" in errors[4]
    assert "MAX_IMAGE_PIXELS" in errors[4]
    assert "input.images[4].url" in errors[5] and "loopback" in errors[5]
    assert "input.images[5].key" in errors[6] and "no bucket is configured" in errors[6]
    manifest = json.loads(stored_text(settings, "imgs/manifest.json"))
    assert [p["status"] for p in manifest["pages"]] == ["ok"] + ["failed"] * 5
    assert not (settings.job.output_dir / "imgs/page-0002.md").exists()


def test_unreadable_pdf_fails_job_with_field(run) -> None:
    result = run({"pdf": {"base64": b64(b"not a pdf at all")}})
    assert (result.status, result.pages, result.retry) == ("failed", [], False)
    assert result.error == "input.pdf.base64: the data is not a PDF (it does not start with %PDF)"
    assert "input: give exactly one document" in (run({}).error or "")
    garbage = run({"pdf": {"base64": b64(b"%PDF-1.4\n" + bytes(range(256)) * 8)}}).error or ""
    assert garbage.startswith("input.pdf.base64: the PDF is corrupt or truncated")
    assert "not a readable PDF" in garbage and "Failed to open" not in garbage
    assert "vlm-ocr-job" not in garbage and "input-0" not in garbage


def test_rerun_reuses_stored_pages(run) -> None:
    job = {
        "pdf": {"base64": b64(samples.pdf_from_pages(samples.numbered_pages(2)))},
        "output_prefix": "again",
    }
    first = run(job)
    second = run(job)
    assert [p.reused for p in first.pages] == [False, False]
    assert [p.reused for p in second.pages] == [True, True]
    assert [p.chars for p in second.pages] == [p.chars for p in first.pages]
    changed = run(job | {"max_pixels": 600_000})  # other pixels: recognized again
    assert [p.reused for p in changed.pages] == [False, False]


def test_sixteen_concurrent_jobs_never_cross(loop, cpu_engine, cpu_pool, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, max_pixels=450_000)
    worker = new_worker(loop, settings, cpu_engine, cpu_pool)
    run_sixteen_jobs(loop, worker, "c", lambda key: stored_text(settings, key))


def test_bad_urls_and_truncated_images_fail_only_their_pages(
    loop, cpu_engine, cpu_pool, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, allow_private_urls=True, max_download_bytes=3_000_000)
    worker = new_worker(loop, settings, cpu_engine, cpu_pool)
    good = png_bytes(page_image(["Served over HTTP, this page is good."]))
    server = LoopbackServer()
    server.body("/good.png", good)
    server.body("/huge.png", b"\x89PNG" + b"0" * 3_100_000)
    try:
        images = [
            {"url": server.url + "/good.png"},
            {"url": server.url + "/huge.png"},
            {"base64": b64(good[: len(good) // 2])},
            {"url": "ftp://example.com/page.png"},
        ]
        result = loop.run(worker.run("urls", {"images": images, "output_prefix": "urls"}))
    finally:
        server.close()
    first, *bad = result.pages
    assert first.status == "ok"
    assert (
        similarity(stored_text(settings, first.key), "Served over HTTP, this page is good.") > 0.9
    )
    errors = [p.error or "" for p in bad]
    assert "input.images[1].url: the file is over the 3 MB limit" in errors[0]
    assert "input.images[2]: the image is corrupt or truncated" in errors[1]
    assert "input.images[3].url: 'ftp://example.com/page.png' is not an https URL" in errors[2]
    assert [p.page for p in bad] == [2, 3, 4]


def test_a_stalled_download_fails_its_page_at_its_time_limit(
    loop, cpu_engine, cpu_pool, tmp_path: Path
) -> None:
    # The server sends its headers and then nothing, ever: only the time limit can end it.
    settings = make_settings(tmp_path, allow_private_urls=True, download_timeout_s=1)
    worker = new_worker(loop, settings, cpu_engine, cpu_pool)
    server = LoopbackServer()
    server.stall("/slow.png")
    try:
        result = loop.run(worker.run("slow", {"images": [{"url": server.url + "/slow.png"}]}))
    finally:
        server.close()
    [page] = result.pages
    assert page.status == "failed" and page.error_stage == "fetch"
    assert page.error == (
        "input.images[0].url: download did not finish within 1 s; use a faster host or a key"
    )


def test_encrypted_or_empty_pdf_fails_the_job_naming_the_field(run) -> None:
    encrypted = run({"pdf": {"base64": b64(encrypted_pdf())}})
    assert (encrypted.status, encrypted.pages) == ("failed", [])
    assert encrypted.error == (
        "input.pdf.base64: the PDF is encrypted with a password; send an unencrypted copy"
    )
    empty = run({"pdf": {"base64": b64(pdf_with_zero_pages())}})
    assert empty.error == "input.pdf.base64: the PDF has no pages"
    beyond = run({"pdf": {"base64": b64(samples.pdf_from_pages([["one"]]))}, "pages": "4-6"})
    assert (beyond.error or "").startswith("input.pages: '4-6' selects no page of this document")


def test_a_large_page_drawn_at_a_low_resolution_is_named_in_the_notes(
    run, settings: Settings
) -> None:
    doc = pymupdf.open()
    doc.new_page(width=612, height=792).insert_text((72, 72), "A letter page.", fontsize=12)
    # a drawing sheet of 100 by 60 inches, set in 10 pt print as such sheets are
    doc.new_page(width=7200, height=4320).insert_text((72, 72), "Sheet notes.", fontsize=10)
    result = run({"pdf": {"base64": b64(doc.tobytes())}, "output_prefix": "big"})
    letter, sheet = result.pages
    assert letter.dpi is not None and letter.dpi >= LOW_DPI
    assert sheet.dpi is not None and sheet.dpi < LOW_DPI
    assert sheet.dpi == round(((sheet.width or 0) * (sheet.height or 0) / (100 * 60)) ** 0.5)
    [note] = [n for n in result.notes if "dpi" in n]
    assert note.startswith(f"page 2 was drawn at {sheet.dpi} dpi")
    assert "the job's `max_pixels` up to the worker's MAX_PIXELS" in note
    manifest = json.loads(stored_text(settings, "big/manifest.json"))
    assert [p["dpi"] for p in manifest["pages"]] == [letter.dpi, sheet.dpi]
    assert note in manifest["notes"]
    images = run({"images": [{"base64": b64(png_bytes(page_image(["An image page."])))}]})
    assert images.pages[0].dpi is None and not [n for n in images.notes if "dpi" in n]


def test_a_multi_page_tiff_sent_as_pdf_is_read_page_by_page(run) -> None:
    result = run({"pdf": {"base64": b64(fax(FAX))}, "pages": "2-", "return_text": True})
    assert [(p.page, p.status) for p in result.pages] == [(2, "ok"), (3, "ok")]
    for page, line in zip(result.pages, FAX[1:], strict=True):
        assert similarity(page.text or "", line) >= 0.8, page.text


def test_a_multi_page_tiff_among_images_reads_its_first_page_and_says_so(run) -> None:
    images = [{"base64": b64(png_bytes(page_image(["An image page."])))}, {"base64": b64(fax(FAX))}]
    result = run({"images": images, "return_text": True})
    assert [p.status for p in result.pages] == ["ok", "ok"] and result.status == "ok"
    assert [p.frames for p in result.pages] == [None, 3]
    assert similarity(result.pages[1].text or "", FAX[0]) >= 0.8
    assert result.notes == [
        "image 2 (3 pages): a multi-page TIFF, of which only the first page was read; send it as "
        '`pdf` ({"pdf": {…}}) to read every page'
    ]


def test_a_tiff_sent_as_pdf_keeps_each_page_within_the_image_limit(run) -> None:
    result = run({"pdf": {"base64": b64(fax_with_a_huge_page())}})
    assert result.status == "failed" and result.error == (
        "input.pdf.base64: page 2 of the TIFF is 12000×12000 = 144 MP, over the 50 MP limit "
        "(MAX_IMAGE_PIXELS)"
    )


def test_an_animated_image_is_no_multi_page_tiff(run) -> None:
    frames = [page_image(["An animated page."]), page_image(["Its second frame."])]
    out = io.BytesIO()
    frames[0].save(out, "WEBP", save_all=True, append_images=frames[1:], lossless=True)
    result = run({"images": [{"base64": b64(out.getvalue())}]})
    assert result.status == "ok" and result.pages[0].frames is None and not result.notes


def _miscounted(pages: int, count: int) -> bytes:
    pdf = samples.pdf_from_pages(samples.numbered_pages(pages, lines=1))
    return pdf.replace(f"/Count {pages}".encode(), f"/Count {count}".encode())


def test_a_page_tree_that_counts_fewer_pages_than_it_holds_loses_none(run, settings) -> None:
    pdf = _miscounted(4, 2)  # MuPDF takes the tree's count as it is: pages 3 and 4 hidden
    assert pymupdf.open("pdf", pdf).page_count == 2
    job = {"pdf": {"base64": b64(pdf)}, "return_text": True, "searchable_pdf": True}
    result = run(job | {"output_prefix": "miscounted"})
    assert [p.status for p in result.pages] == ["ok"] * 4
    made = (settings.job.output_dir / "miscounted/searchable.pdf").read_bytes()
    with pymupdf.open(stream=made) as searchable:
        assert [len(page.search_for(f"Page {n} of 4")) for n, page in enumerate(searchable, 1)] == [
            1
        ] * 4
    assert [f"Page {n} of 4" in (p.text or "") for n, p in enumerate(result.pages, 1)] == [True] * 4
    assert result.notes[0] == (
        "the PDF's page tree says it has 2 pages but holds 4 (a damaged file); the job reads "
        "the 4 it holds"
    )


def test_a_page_tree_that_counts_more_pages_than_it_holds_makes_no_pages_of_nothing(run) -> None:
    result = run({"pdf": {"base64": b64(_miscounted(2, 3))}, "pages": "2-3"})
    assert [(p.page, p.status) for p in result.pages] == [(2, "ok")]
    assert result.errors == [
        "input.pages: page 3 selected beyond the end; the document has 2 pages"
    ]


def test_a_page_count_mupdf_refuses_to_take_is_walked_too(run) -> None:
    result = run({"pdf": {"base64": b64(_miscounted(1, 999_999_999))}})  # past MuPDF's bound
    assert result.status == "ok" and len(result.pages) == 1
    assert result.notes[0].startswith("the PDF's page tree says it has 999999999 pages but holds 1")


def test_a_page_tree_that_cannot_be_walked_is_taken_at_its_count() -> None:
    doc = pymupdf.open("pdf", _miscounted(2, 2))
    root = int(doc.xref_get_key(doc.pdf_catalog(), "Pages")[1].split()[0])
    doc.xref_set_key(root, "Kids", f"[{doc[0].xref} 0 R {doc[0].xref} 0 R]")  # one page twice
    assert recount(doc) is None and doc.page_count == 2


def test_urls_asked_of_a_local_folder_are_said_to_be_none(run) -> None:
    pdf = samples.pdf_from_pages(samples.numbered_pages(1, lines=2))
    result = run({"pdf": {"base64": b64(pdf)}, "presign_urls": True, "output_prefix": "urls"})
    assert result.status == "ok" and result.manifest_url is None and result.pages[0].url is None
    assert result.notes == [
        "presign_urls: no URLs were made; the results are files in a local folder (OUTPUT_DIR), "
        "and only a bucket's results have URLs (BUCKET_NAME)"
    ]
