"""The corpus client's parts as an archive meets them: linked folders (a year linked in from a
share, a link back up, a link to nothing), a fax's pages held to the image limit, the summary of
many documents not ok, and an endpoint id RunPod does not know."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from PIL import Image

from vlm_ocr.client.documents import Limits, Refused, examine
from vlm_ocr.client.endpoint import Endpoint, EndpointError
from vlm_ocr.client.listing import Corpus, LeftOut
from vlm_ocr.client.report import DocumentLine, Summary

from .support.http_server import LoopbackServer


def touch(path: Path, data: bytes = b"%PDF-") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_linked_folders_are_followed_once_and_a_link_to_nothing_is_refused(tmp_path: Path):
    share = tmp_path / "share" / "2024"
    touch(share / "a.pdf")
    touch(share / "b.pdf")
    archive = tmp_path / "archive"
    touch(archive / "local.pdf")
    (archive / "2024").symlink_to(share)  # a year's folder linked in from a share
    (archive / "again").symlink_to(share)  # the same folder linked twice
    (archive / "2024-loop").symlink_to(archive)  # a link back up
    (archive / "gone.pdf").symlink_to(tmp_path / "nothere.pdf")
    (archive / "unmounted").symlink_to(tmp_path / "nas" / "2023")  # a share not mounted
    (archive / "notes.txt").symlink_to(tmp_path / "nothere.txt")
    os.mkfifo(archive / "pipe.pdf")

    left_out = LeftOut()
    found = list(Corpus([str(archive)], [], "b", "ocr/").documents(left_out))

    sent = [Path(d.source).relative_to(archive).as_posix() for d in found if not d.problem]
    assert sent == ["2024/a.pdf", "2024/b.pdf", "local.pdf"]
    refused = {Path(d.source).name: d.problem for d in found if d.problem}
    assert refused == {
        "gone.pdf": f"a link to {tmp_path / 'nothere.pdf'}, which does not exist",
        "pipe.pdf": "not a regular file; save it to a file first",
        "unmounted": f"a link to {tmp_path / 'nas' / '2023'}, which does not exist",
    }
    said = "\n".join(left_out.lines())
    assert f"1 file left out: not PDFs or images ({archive / 'notes.txt'})" in said
    assert (
        "linked folders walked already (a loop, or a second link), left out: "
        f"{archive / '2024-loop'} -> {archive}, {archive / 'again'} -> {share}"
    ) in said, said
    assert left_out.as_json()["linked"] == [
        f"{archive / '2024-loop'} -> {archive}",
        f"{archive / 'again'} -> {share}",
    ]


def tiff(path: Path, sizes: list[tuple[int, int]]) -> Path:
    pages = [Image.new("L", size, 255) for size in sizes]
    pages[0].save(path, format="TIFF", save_all=True, append_images=pages[1:])
    return path


def test_a_fax_is_its_pages_each_held_to_the_image_limit(tmp_path: Path) -> None:
    limits = Limits(max_bytes=10_000_000, max_image_pixels=100_000)
    fax = examine(tiff(tmp_path / "fax.tif", [(200, 100)] * 3), "image", limits)
    assert (fax.kind, fax.pages, fax.suffix) == ("pdf", 3, ".tif")
    one = examine(tiff(tmp_path / "one.tiff", [(200, 100)]), "image", limits)
    assert (one.kind, one.pages) == ("image", 1)
    big = tiff(tmp_path / "big.tif", [(200, 100), (1000, 200)])
    said = r"page 2 of the TIFF is 1000×200 = 0\.2 MP, over the 0\.1 MP"
    with pytest.raises(Refused, match=said):
        examine(big, "image", limits)
    letter = touch(tmp_path / "letter.pdf", b"Dear sir")
    with pytest.raises(Refused, match=r"not a PDF \(it does not start with %PDF\)"):
        examine(letter, "pdf", limits)


def test_the_summary_says_how_many_more_are_not_ok() -> None:
    summary = Summary()
    summary.add(DocumentLine(source="good.pdf", status="ok", pages=1, ok=1, stored_this_run=1))
    for n in range(12):
        summary.add(DocumentLine.refused(f"empty-{n:02d}.pdf", "the file is empty", 0.0))
    lines = summary.lines()
    named = [line for line in lines if line.startswith("  empty-")]
    assert len(named) == 10
    assert lines[-1] == "  and 2 more not ok: the report's lines whose status is not ok"
    assert summary.as_json()["not_ok"] == {"documents": 12, "examples": summary.examples}


def test_an_endpoint_runpod_does_not_know_is_said_with_what_to_check() -> None:
    server = LoopbackServer()  # answers 404 to every route, as to an unknown endpoint id
    try:

        async def health() -> None:
            api = Endpoint("wrongid", "key", api_base=f"{server.url}/v2", attempts=1)
            async with api:
                await api.health()

        with pytest.raises(EndpointError) as said:
            asyncio.run(health())
    finally:
        server.close()
    assert str(said.value).startswith(f"GET {server.url}/v2/wrongid/health: HTTP 404")
    assert "check the endpoint id (--endpoint) and RUNPOD_API_BASE" in str(said.value)
