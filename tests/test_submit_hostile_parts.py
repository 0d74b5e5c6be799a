"""The parts of `vlm-ocr submit` that meet a user's disk at its worst, on their own: a page tree
MuPDF cannot count, a document of too many pages, an image too large named as a PDF, folders
nested past Python's stack, list files that are no lists, pipes and devices named, names that
are not UTF-8 or hold control characters, and the bookkeeping of a document of many pages."""

from __future__ import annotations

import asyncio
import io
import os
import struct
import sys
import zlib
from pathlib import Path

import pytest
from PIL import Image

from vlm_ocr import samples
from vlm_ocr.cli.main import parser
from vlm_ocr.cli.submit import submit_main
from vlm_ocr.client.documents import (
    MAX_DOCUMENT_PAGES,
    NOT_REGULAR,
    Limits,
    Listed,
    Refused,
    examine,
)
from vlm_ocr.client.listing import Corpus, UsageError, walk
from vlm_ocr.client.manifest import DocumentManifest, split_pages
from vlm_ocr.client.report import DocumentLine, Summary
from vlm_ocr.client.submit import Options, Submission
from vlm_ocr.contract import PageReport
from vlm_ocr.errors import UNREADABLE_PDF
from vlm_ocr.file_names import shown, stored_name
from vlm_ocr.settings import Settings

LIMITS = Limits(max_bytes=50_000_000, max_image_pixels=1_000_000)


def page_tree_pdf(kids: list[int], count: int) -> bytes:
    """A PDF whose one /Pages node lists `kids` (object numbers of pages, 3 up) under /Count
    `count`: as many page objects as the largest kid names, each empty."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    refs = b" ".join(b"%d 0 R" % kid for kid in kids)
    objects.append(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (refs, count))
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"
    objects += [page] * (max(kids) - 2)
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % at for at in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def test_a_page_tree_mupdf_cannot_count_is_refused_as_the_worker_refuses_it(tmp_path):
    # a thousand references to one page: MuPDF opens it, then fails to count its pages
    odd = tmp_path / "kids.pdf"
    odd.write_bytes(page_tree_pdf([3] * 1000, 1000))
    with pytest.raises(Refused) as refused:
        examine(odd, "pdf", LIMITS)
    assert str(refused.value) == UNREADABLE_PDF


def test_a_document_of_more_pages_than_one_may_have_is_refused(tmp_path):
    many = tmp_path / "many.pdf"
    many.write_bytes(page_tree_pdf(list(range(3, MAX_DOCUMENT_PAGES + 4)), 1))
    with pytest.raises(Refused, match=r"the PDF has 10,001 pages, over the 10,000 one submitted"):
        examine(many, "pdf", LIMITS)
    three = tmp_path / "three.pdf"
    three.write_bytes(samples.pdf_from_pages(samples.numbered_pages(3, lines=1)))
    few = Limits(LIMITS.max_bytes, LIMITS.max_image_pixels, max_pages=2)
    with pytest.raises(Refused, match="split it into documents of at most 2 pages"):
        examine(three, "pdf", few)
    fax = tmp_path / "fax.tiff"
    frames = [Image.new("L", (50, 40), 90 * n) for n in range(3)]
    frames[0].save(fax, format="TIFF", save_all=True, append_images=frames[1:])
    with pytest.raises(Refused, match="the TIFF has 3 pages, over the 2"):
        examine(fax, "image", few)
    assert examine(three, "pdf", LIMITS).pages == 3


def test_an_image_too_large_named_as_a_pdf_is_refused_for_its_size(tmp_path):
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 0, 0, 0, 0)  # no pixels follow
    huge = tmp_path / "scan.pdf"
    huge.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b""))
    with pytest.raises(Refused, match=r"100000×100000 = .* \(MAX_IMAGE_PIXELS\)"):
        examine(huge, "pdf", LIMITS)
    (tmp_path / "letter.pdf").write_text("Dear sir")  # neither: said as what its name says
    with pytest.raises(Refused, match="not a PDF"):
        examine(tmp_path / "letter.pdf", "pdf", LIMITS)


def test_folders_nested_past_pythons_stack_are_walked(tmp_path):
    deep = tmp_path / "archive"
    for _ in range(600):
        deep /= "d"
    deep.mkdir(parents=True)
    (deep / "x.pdf").write_bytes(b"%PDF-")
    (tmp_path / "archive" / "a.pdf").write_bytes(b"%PDF-")
    (tmp_path / "archive" / "e.pdf").write_bytes(b"%PDF-")
    found = [Path(d.source).name for d in walk(tmp_path / "archive")]
    assert found == ["a.pdf", "x.pdf", "e.pdf"]  # in name order, depth first, as before


def test_a_list_that_is_no_list_is_a_usage_error_naming_its_line(tmp_path, monkeypatch):
    one = tmp_path / "one.pdf"
    one.write_bytes(b"%PDF-")
    odd = tmp_path / "l.txt"
    odd.write_bytes(f"{one}\n".encode() + b"caf\xe9.pdf\n")  # Latin-1, not UTF-8
    with pytest.raises(UsageError) as said:
        Corpus([], [odd], "b", results_prefix="ocr/").check()
    assert str(said.value) == (
        f"--list {odd}: line 2 is not UTF-8 text; a list holds one path or key per line"
    )
    mistaken = tmp_path / "case.pdf"  # a PDF given as the list
    mistaken.write_bytes(samples.pdf_from_pages(samples.numbered_pages(1)))
    with pytest.raises(UsageError, match=r"case.pdf: a PDF, not a list; a list holds one path"):
        Corpus([], [mistaken], "b", results_prefix="ocr/").check()
    # standard input is read as the run goes: said when its line is reached
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe\n")))
    with pytest.raises(UsageError, match="line 1 is not UTF-8 text"):
        list(Corpus([], [Path("-")], "b", results_prefix="ocr/").documents())


def test_the_command_says_a_list_that_is_no_list_in_one_line_with_status_2(tmp_path, capsys):
    odd = tmp_path / "l.txt"
    odd.write_bytes(b"a.pdf\n\xff\xfe\n")
    settings = Settings(
        bucket_name="b",
        bucket_endpoint_url="http://127.0.0.1:9",  # never reached: refused before
        bucket_access_key_id="k",
        bucket_secret_access_key="s",
        runpod_api_key="r",
        runpod_api_base="http://127.0.0.1:9/v2",
    )
    args = parser().parse_args(["submit", "--list", str(odd), "--endpoint", "e"])
    assert asyncio.run(submit_main(settings, args)) == 2
    out, err = capsys.readouterr()
    assert err == f"vlm-ocr submit: --list {odd}: line 2 is not UTF-8 text; a list holds one " \
        "path or key per line\n" and out == ""  # fmt: skip


def test_a_pipe_or_a_device_named_is_no_regular_file(tmp_path):
    fifo = tmp_path / "scan.pdf"
    os.mkfifo(fifo)
    found = list(Corpus([str(fifo), os.devnull], [], "b", results_prefix="ocr/").documents())
    assert [(d.source, d.problem) for d in found] == [
        (str(fifo), NOT_REGULAR),
        (os.devnull, NOT_REGULAR),
    ]


def test_names_are_stored_as_valid_text_and_shown_with_control_characters_escaped():
    bad = os.fsdecode(b"bad-\xff\xfe-utf8.pdf")  # as a listing of the folder gives it
    assert stored_name(bad) == "bad-\\xff\\xfe-utf8.pdf" and stored_name("été.pdf") == "été.pdf"
    assert Listed(bad, path=Path(bad)).source == "bad-\\xff\\xfe-utf8.pdf"
    assert Listed(bad, path=Path(bad)).path == Path(bad)  # opened by its own bytes
    assert shown("esc-\x1b[2J\nFAKE.pdf") == "esc-\\x1b[2J\\nFAKE.pdf"
    line = DocumentLine(source=bad, status="refused", error=f"{bad}: gone")
    assert "\\xff" in line.model_dump_json() and "\\xff" in line.error  # type: ignore[operator]
    summary = Summary()
    summary.add(DocumentLine(source="x-\x1b[2J\n1 documents: 1 ok", status="refused"))
    assert not any("\x1b" in said or "\n" in said for said in summary.lines())
    manifest = DocumentManifest(
        endpoint="e", source_key="k", source=bad, prefix="p", manifest_key="p/document.json",
        page_count=1, pages_per_job=1, parts=split_pages(1, 1),
    )  # fmt: skip
    assert manifest.model_dump_json().count("\\\\xff") == 1  # valid JSON, the byte escaped


class Counted(list):
    """A list that counts the scans and sorts made of it."""

    scans = sorts = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        Counted.scans += 1
        return super().__iter__()

    def sort(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        Counted.sorts += 1
        return super().sort(*args, **kwargs)


def test_a_pages_record_is_found_by_its_number_not_by_a_scan_and_a_sort():
    n = 2000
    manifest = DocumentManifest(
        endpoint="e", source_key="k", prefix="p", manifest_key="p/document.json",
        page_count=n, pages_per_job=50, parts=split_pages(n, 50),
    )  # fmt: skip
    manifest.pages = Counted()
    # as parts stream at once: their pages interleaved, then each job's result again
    order = [p.first + i for i in range(50) for p in manifest.parts[::-1]]
    for number in order + order[::3]:
        status = "failed" if number == 77 else "ok"
        manifest.record(PageReport(page=number, source="k", status=status))  # type: ignore[arg-type]
    assert [p.page for p in manifest.pages] == list(range(1, n + 1))
    assert Counted.scans <= 1 and Counted.sorts == 0  # (the check above is the one scan)
    assert manifest.missing(manifest.parts[1]) == [77]
    assert (
        manifest.selection(manifest.parts[1]) == "77" and manifest.missing(manifest.parts[0]) == []
    )
    # a document.json an earlier version wrote out of order is read in order
    shuffled = manifest.model_dump(mode="json")
    shuffled["pages"] = shuffled["pages"][::-1]
    assert DocumentManifest.model_validate(shuffled).pages[0].page == 1


class Store:
    """The bucket's put, counted (what `Submission.save` calls)."""

    key_prefix = ""

    def __init__(self) -> None:
        self.puts: list[str] = []

    async def put(self, key: str, data: bytes, kind: str) -> None:
        self.puts.append(key)
        await asyncio.sleep(0)


def test_document_json_is_written_once_for_what_happened_at_once(tmp_path):
    class Shared:
        store = Store()

    sub = Submission(tmp_path / "x.pdf", None, None, Options("e"), shared=Shared(), limits=LIMITS)  # type: ignore[arg-type]
    sub.manifest = DocumentManifest(
        endpoint="e", source_key="k", prefix="p", manifest_key="p/document.json",
        page_count=100, pages_per_job=1, parts=split_pages(100, 1),
    )  # fmt: skip

    async def jobs_sent_and_ended() -> list[str]:
        for _ in range(100):  # a hundred jobs sent, or ended, in one moment
            sub._checkpoint()
        deferred = sub._deferred
        assert deferred is not None
        await deferred
        await sub.save()  # the document's end: written at once
        return Shared.store.puts

    assert asyncio.run(jobs_sent_and_ended()) == ["p/document.json"] * 2
