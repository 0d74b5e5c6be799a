"""A TIFF's pages are read from its chain of directories, as many as it holds, however it was
written (either byte order, BigTIFF), and however it was crafted: a chain that loops back or
runs off the file ends there, and 100,000 pages are counted without reading them all into
Pillow, whose frame lookup grows with their number."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from PIL import Image

from vlm_ocr.images import MAX_TIFF_PAGES, RefusedImage, check_pages, open_header, tiff_sizes


def crafted(path: Path, sizes: list[tuple[int, int]], *, order: str = "<", loop: bool = False):
    """A TIFF of one shared 8-bit strip, a directory a page, each naming its own size."""
    magic = b"II" if order == "<" else b"MM"
    out = bytearray(magic + struct.pack(order + "HI", 42, 8))
    entries = 9
    first = len(out)
    for n, (w, h) in enumerate(sizes):
        at = len(out)
        tags = [(256, 4, w), (257, 4, h), (258, 3, 8), (259, 3, 1), (262, 3, 1)]
        tags += [(273, 4, 0), (277, 3, 1), (278, 4, h), (279, 4, 1)]
        out += struct.pack(order + "H", entries)
        for tag, kind, value in tags:
            held = (
                struct.pack(order + "HH", value, 0)
                if kind == 3
                else struct.pack(order + "I", value)
            )
            out += struct.pack(order + "HHI", tag, kind, 1) + held
        last = n == len(sizes) - 1
        out += struct.pack(
            order + "I", (first if loop else 0) if last else at + 2 + 12 * entries + 4
        )
    path.write_bytes(bytes(out))
    return path


def test_a_tiffs_pages_by_pillow_and_by_hand(tmp_path: Path) -> None:
    pages = [Image.new("L", (200 + n, 100), 255) for n in range(3)]
    pages[0].save(tmp_path / "fax.tif", save_all=True, append_images=pages[1:])
    pages[0].save(tmp_path / "big.tif", save_all=True, append_images=pages[1:], big_tiff=True)
    want = [(200, 100), (201, 100), (202, 100)]
    assert tiff_sizes(tmp_path / "fax.tif") == tiff_sizes(tmp_path / "big.tif") == want
    motorola = crafted(tmp_path / "mm.tif", [(30, 40), (50, 60)], order=">")
    assert tiff_sizes(motorola) == [(30, 40), (50, 60)]
    with Image.open(motorola) as opened:
        assert opened.n_frames == 2  # as Pillow reads it


def test_a_crafted_chain_ends_where_it_loops_or_leaves_the_file(tmp_path: Path) -> None:
    assert len(tiff_sizes(crafted(tmp_path / "loop.tif", [(8, 8)] * 5, loop=True))) == 5
    cut = crafted(tmp_path / "cut.tif", [(8, 8)] * 3)
    cut.write_bytes(cut.read_bytes()[:-30])  # the last directory cut short
    assert len(tiff_sizes(cut)) == 2
    (tmp_path / "not.tif").write_bytes(b"II+\x00" + bytes(12))
    assert tiff_sizes(tmp_path / "not.tif") == []


def test_many_pages_are_counted_and_each_held_to_the_image_limit(tmp_path: Path) -> None:
    many = crafted(tmp_path / "many.tif", [(8, 8)] * (MAX_TIFF_PAGES + 5))
    with open_header(many, 1_000) as image:
        assert check_pages(image, 1_000) == MAX_TIFF_PAGES  # counted no further
    huge = crafted(tmp_path / "huge.tif", [(8, 8), (8, 8), (100_000, 100_000)])
    with (
        open_header(huge, 1_000) as image,
        pytest.raises(RefusedImage, match=r"page 3 of the TIFF is 100000×100000 = 1e\+04 MP"),
    ):
        check_pages(image, 1_000)
