"""The pages' pictures: each page of the document the job read, drawn as the worker read it
(turned as it was) and downscaled to a JPEG small enough to inline.

The document comes from `--pdf FILE` or `--images DIR`, else from the bucket when the job's
input was a key there (its pages' `source` says `key:…`); an input sent as base64 or a URL is
not kept by the worker, so then the page's blocks are drawn on a blank sheet."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pymupdf
from PIL import Image

from ...contract import PageReport
from ...errors import StorageError
from ...pipeline.render import is_image_file
from ...storage import BucketInputs, ObjectMissing
from ..show import source_page

SIDE = 1100  # pixels: the longer side of a page's picture (the screen, not the model)
JPEG_QUALITY = 75


@dataclass(frozen=True)
class Where:
    path: Path
    number: int  # the page in the file (an image is its own page 1)


@dataclass
class Pictures:
    pages: dict[int, Where] = field(default_factory=dict)
    #: where the pictures come from, or why there are none, for the summary
    notes: list[str] = field(default_factory=list)

    def jpeg(self, page: PageReport, size: tuple[int, int] | None) -> tuple[bytes | None, str]:
        """The page's picture as JPEG, of the shape of `size` (the image the worker read), or
        None and why."""
        where = self.pages.get(page.page)
        if where is None:
            return None, "no picture of this page: its document was not given"
        try:
            width, height = size or _size_of(where)
            scale = min(1.0, SIDE / max(width, height))
            shown = (max(1, round(width * scale)), max(1, round(height * scale)))
            image = source_page(where.path, where.number, shown, page.rotated)
        except (OSError, ValueError, RuntimeError, IndexError, Image.DecompressionBombError) as exc:
            return None, f"the page could not be drawn from {where.path.name}: {exc}"
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=JPEG_QUALITY, optimize=True)
        return buf.getvalue(), ""


def _size_of(where: Where) -> tuple[int, int]:
    if where.path.suffix.lower() == ".pdf":
        with pymupdf.open(where.path) as pdf:
            rect = pdf[where.number - 1].rect
            return round(rect.width), round(rect.height)
    with Image.open(where.path) as image:
        return image.size


def from_pdf(pdf: Path, pages: Sequence[PageReport]) -> Pictures:
    with pymupdf.open(pdf) as doc:
        count = doc.page_count
    beyond = [p.page for p in pages if p.page > count]
    notes = [f"page pictures from {pdf.name}"]
    if beyond:
        notes.append(f"{pdf.name} has {count} pages; the job has pages up to {max(beyond)}")
    return Pictures({p.page: Where(pdf, p.page) for p in pages if p.page <= count}, notes)


def from_images(folder: Path, pages: Sequence[PageReport]) -> Pictures:
    """A page's image by the name the job gave it, else the folder's images in name order."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and is_image_file(p))
    found: dict[int, Where] = {}
    for page in pages:
        named = folder / Path(page.source.removeprefix("key:")).name
        if named.is_file() and is_image_file(named):
            found[page.page] = Where(named, 1)
    if not found and files:
        found = {p.page: Where(files[p.page - 1], 1) for p in pages if p.page <= len(files)}
    notes = [f"page pictures from the images in {folder}"]
    if missing := [p.page for p in pages if p.page not in found]:
        notes.append(f"no image in {folder} for {len(missing)} of the job's pages")
    return Pictures(found, notes)


async def from_bucket(
    inputs: BucketInputs | None, pages: Sequence[PageReport], into: Path, max_bytes: int
) -> Pictures:
    """The job's inputs named by key, fetched from the bucket once each."""
    keys = sorted({p.source.removeprefix("key:") for p in pages if p.source.startswith("key:")})
    if not keys:
        return Pictures(notes=[NOT_KEPT])
    if inputs is None:
        return Pictures(
            notes=[
                "the job's input is in a bucket and no bucket is configured: set BUCKET_NAME "
                "and its credentials, or give --pdf FILE or --images DIR"
            ]
        )
    files: dict[str, Path] = {}
    notes: list[str] = []
    for n, key in enumerate(keys):
        got = await _fetch(inputs, key, into / f"input-{n}", max_bytes, notes)
        if got is not None:
            files[key] = got
    found = {}
    for page in pages:
        path = files.get(page.source.removeprefix("key:"))
        if path is not None and page.source.startswith("key:"):
            found[page.page] = Where(path, page.page if path.suffix == ".pdf" else 1)
    if files:
        notes.insert(0, f"page pictures from {', '.join(inputs.uri(k) for k in files)}")
    return Pictures(found, notes)


async def _fetch(
    inputs: BucketInputs, key: str, dest: Path, max_bytes: int, notes: list[str]
) -> Path | None:
    try:
        with dest.open("wb") as out:
            await inputs.fetch(key, out, max_bytes)
    except ObjectMissing:
        notes.append(f"{inputs.uri(key)} is no longer in the bucket: give --pdf or --images")
        return None
    except StorageError as exc:
        notes.append(f"{inputs.uri(key)} could not be read ({exc})")
        return None
    with dest.open("rb") as f:
        kind = ".pdf" if f.read(5) == b"%PDF-" else ".image"
    return dest.rename(dest.with_suffix(kind))


NOT_KEPT = (
    "no page pictures: the worker does not keep a job's input sent as base64 or by URL; give "
    "--pdf FILE or --images DIR to see the pages"
)


def scratch() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="vlm-ocr-review-")
