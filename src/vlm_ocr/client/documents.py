"""What one document of a submission is: a local file or an object already in the bucket, told
by its content (a file's sha256) or its key, and checked before any job is sent with the limits a
job has, so a broken or oversized document is refused with the worker's own words and costs no
GPU time.

The checks read headers and page counts only: a PDF is opened (PyMuPDF reads its page tree), an
image's header is read (no pixels are decoded). A local file is told by its header, as `vlm-ocr
run` tells it, whatever its name says; a TIFF of several pages (a fax, a scanner's batch) is sent
as the job's `pdf`, which the worker makes a PDF of its pages, so that every page is read. An
object in the bucket is read by the client only when it is a PDF or a TIFF (streamed to a
temporary file, to count and check its pages, then deleted); it is never uploaded again.

A local file is read twice at most: once for its hash (all a finished document needs), and once
into a private copy, whose pages are counted and which is uploaded, then deleted. The copy must
hold what the hash was read from, and neither read may see the file change: a file written while
the run reads it is refused, never sent as one version under another's name.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from ..contract import key_name
from ..errors import EMPTY_PDF, ENCRYPTED_PDF, NOT_A_PDF, UNREADABLE_PDF
from ..file_names import stored_name
from ..images import IMAGE_SUFFIXES, NOT_AN_IMAGE, RefusedImage, check_pages, open_header
from ..pdf_file import file_sha256, is_pdf, open_pdf
from ..settings import Settings
from ..storage import Bucket, BucketInputs, ObjectTooLarge

Kind = Literal["pdf", "image"]
SLUG_CHARS = 60  # of the name kept in a document's folder name
DOCUMENT_SUFFIXES = frozenset({".pdf"} | IMAGE_SUFFIXES)
CONTENT_TYPES = {
    ".pdf": "application/pdf",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
}


class Refused(ValueError):
    """The document cannot be sent as it is; the message says why, as a job would."""


NOT_REGULAR = "not a regular file; save it to a file first"
CHANGED = "the file changed while it was read; run again when it is not being written"
REMOVED = "the file was removed while the run read it"
# The pages one document may have: it is split into jobs of --pages-per-job, but its
# document.json holds a record of every page (about 800 bytes each) and is written again as its
# jobs end, so 10,000 pages keep that under 10 MB.
MAX_DOCUMENT_PAGES = 10_000
CHUNK = 1 << 20  # read and copied a megabyte at a time, whatever the file's size


def kind_of(name: str) -> Kind | None:
    suffix = Path(name).suffix.lower()
    if suffix == ".pdf":
        return "pdf"
    return "image" if suffix in IMAGE_SUFFIXES else None


@dataclass(frozen=True)
class Limits:
    """The limits a job has that a document can be held to before it is sent."""

    max_bytes: int
    max_image_pixels: int
    max_pages: int = MAX_DOCUMENT_PAGES

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(settings.fetch.max_download_bytes, settings.render.max_image_pixels)


@dataclass(frozen=True)
class Listed:
    """One document as a listing found it: a local file, or an object in the bucket (`key`,
    with its size and ETag when the listing gave them). `problem`: named, but nothing to send
    (a path that does not exist)."""

    source: str
    path: Path | None = None
    key: str | None = None
    size: int | None = None
    etag: str | None = None
    problem: str | None = None

    def __post_init__(self) -> None:
        # the source is shown and stored; the path (any bytes) is what is opened
        object.__setattr__(self, "source", stored_name(self.source))

    @property
    def name(self) -> str:
        return self.path.name if self.path is not None else Path(self.key or self.source).name

    @property
    def kind(self) -> Kind | None:
        return kind_of(self.name)


@dataclass(frozen=True)
class Facts:
    """What the checks found: how a job reads the document (`pdf`: a PDF, or a TIFF of several
    pages), how many pages, its identity, and what it is (`suffix`, for its upload's name)."""

    kind: Kind
    page_count: int
    sha256: str | None = None
    etag: str | None = None
    suffix: str = ""


def check_size(size: int, limits: Limits, what: str) -> None:
    if size == 0:
        raise Refused(f"{what} is empty")
    if size > limits.max_bytes:
        raise Refused(
            f"{what} is {size / 1e6:.3g} MB, over the {limits.max_bytes / 1e6:g} MB limit "
            "(MAX_DOWNLOAD_BYTES)"
        )


def local_identity(listed: Listed, limits: Limits) -> str:
    """A local file's sha256, once its size is within the limit (it reads the file once)."""
    assert listed.path is not None
    if listed.kind is None:
        raise Refused("not a PDF or an image; accepted: " + ", ".join(sorted(DOCUMENT_SUFFIXES)))
    return _read(listed.path, limits, None)


class CopyFailed(ValueError):
    """The private copy could not be written: this machine's disk, not the document (so the
    document is unfinished, for the next run, not refused)."""


def snapshot(listed: Listed, limits: Limits, sha256: str) -> Path:
    """A private copy of a local file, the one its pages are counted in and uploaded from, so
    that a file written while the run reads it is never sent as one version and named as
    another: Refused if the copy is not the content `sha256` was read from. The caller deletes
    it."""
    assert listed.path is not None
    fd, name = tempfile.mkstemp(prefix="vlm-ocr-submit-", suffix=listed.path.suffix.lower())
    copy = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            if _read(listed.path, limits, out) != sha256:
                raise Refused(CHANGED)
    except OSError as exc:  # writing the copy (reading the file is Refused): this machine's disk
        copy.unlink(missing_ok=True)
        raise CopyFailed(
            f"its copy to send could not be written in {tempfile.gettempdir()} ({exc.strerror}); "
            "free space there, or set TMPDIR to a folder with room"
        ) from None
    except BaseException:
        copy.unlink(missing_ok=True)
        raise
    return copy


def _read(path: Path, limits: Limits, out: IO[bytes] | None) -> str:
    """The file's sha256, read once (and copied to `out`), or Refused: not a regular file,
    empty or over the limit, removed, or changed while it was read."""
    try:
        # O_NONBLOCK: a pipe that took the file's place is refused, not waited on
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise Refused(REMOVED) from None
    except OSError as exc:
        raise Refused(f"cannot read the file ({exc.strerror})") from None
    with open(fd, "rb", buffering=0) as fh:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise Refused(NOT_REGULAR)
        check_size(before.st_size, limits, "the file")
        digest, size = hashlib.sha256(), 0
        while chunk := _chunk(fh):
            digest.update(chunk)
            size += len(chunk)
            if out is not None:
                out.write(chunk)
        if size != before.st_size or _version(os.fstat(fd)) != _version(before):
            raise Refused(CHANGED)  # written in place while it was read
    return digest.hexdigest()


def _chunk(fh: IO[bytes]) -> bytes:
    try:
        return fh.read(CHUNK)
    except OSError as exc:
        raise Refused(f"cannot read the file ({exc.strerror})") from None


def _version(info: os.stat_result) -> tuple[int, int, int]:
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns


def pdf_pages(path: Path) -> int:
    """The PDF's page count, or Refused in the words the worker would use."""
    with path.open("rb") as fh:
        head = fh.read(1024)
    if not is_pdf(head):
        raise Refused(NOT_A_PDF)
    try:
        doc = open_pdf(path)  # as the worker counts a damaged page tree's pages
    except Exception:
        raise Refused(UNREADABLE_PDF) from None
    with doc:
        if doc.needs_pass:
            raise Refused(ENCRYPTED_PDF)
        try:
            pages = doc.page_count  # MuPDF reads the page tree here, and may fail on it
        except Exception:  # (a tree it cannot count), as the worker says it
            raise Refused(UNREADABLE_PDF) from None
        if pages == 0:
            raise Refused(EMPTY_PDF)
        return pages


# what an image's upload is named, by its format, where its own name says otherwise
FORMAT_SUFFIXES = {"PNG": ".png", "JPEG": ".jpg", "MPO": ".jpg", "WEBP": ".webp", "TIFF": ".tiff"}


@dataclass(frozen=True)
class Content:
    """What a file holds, by its header: how a job reads it, its pages, and its suffix."""

    kind: Kind
    pages: int
    suffix: str


def examine(path: Path, named: Kind, limits: Limits) -> Content:
    """The file as its header tells it (a PNG named .pdf is an image); Refused, in the words
    the worker would use for what its name says, when it is neither a PDF nor an image."""
    with path.open("rb") as fh:
        head = fh.read(1024)
    if is_pdf(head):
        return Content("pdf", _held(pdf_pages(path), "PDF", limits), ".pdf")
    try:
        fmt, frames = check_image(path, limits)
    except Refused as exc:
        if named == "pdf" and str(exc) == NOT_AN_IMAGE:  # a refusal of what it is stays its own
            raise Refused(NOT_A_PDF) from None
        raise
    _held(frames, "TIFF", limits)
    suffix = path.suffix.lower()
    if CONTENT_TYPES.get(suffix) != CONTENT_TYPES[FORMAT_SUFFIXES[fmt]]:
        suffix = FORMAT_SUFFIXES[fmt]  # named as another kind: its upload is named as it is
    # a TIFF's pages are its frames: sent as `pdf`, which the worker makes a PDF of them
    return Content("pdf" if frames > 1 else "image", frames, suffix)


def _held(pages: int, what: str, limits: Limits) -> int:
    """The pages of a document within the most one may have, or Refused."""
    if pages > limits.max_pages:
        most = limits.max_pages
        raise Refused(
            f"the {what} has {pages:,} pages, over the {most:,} one submitted document may "
            f"have; split it into documents of at most {most:,} pages"
        )
    return pages


def check_image(path: Path, limits: Limits) -> tuple[str, int]:
    """The image's header, as the worker checks it before decoding: its format and its pages
    (a TIFF's frames, each held to MAX_IMAGE_PIXELS as the worker holds them; 1 for any other
    image, whose frames are no pages)."""
    try:
        with open_header(path, limits.max_image_pixels) as image:
            return str(image.format), check_pages(image, limits.max_image_pixels)
    except RefusedImage as exc:
        raise Refused(str(exc)) from None


TIFF_SUFFIXES = frozenset({".tif", ".tiff"})


async def inspect_object(bucket: Bucket, listed: Listed, limits: Limits) -> Facts:
    """An object in the bucket: its size from HEAD (unless listed), and for a PDF or a TIFF its
    pages, read from a temporary copy (any other image is checked by the worker that reads
    it)."""
    assert listed.key is not None
    kind = listed.kind
    if kind is None:
        raise Refused("not a PDF or an image; accepted: " + ", ".join(sorted(DOCUMENT_SUFFIXES)))
    size, etag = listed.size, listed.etag
    if size is None or etag is None:
        head = await bucket.head(listed.key)
        size, etag = int(head.get("ContentLength") or 0), str(head.get("ETag") or "")
    check_size(size, limits, "the object")
    suffix = Path(listed.key).suffix.lower()
    if kind == "image" and suffix not in TIFF_SUFFIXES:
        return Facts("image", 1, etag=etag, suffix=suffix)
    with tempfile.TemporaryDirectory(prefix="vlm-ocr-submit-") as tmp:
        path = Path(tmp) / f"document{suffix}"
        with path.open("wb") as out:
            try:
                await BucketInputs(bucket).fetch(listed.key, out, limits.max_bytes)
            except ObjectTooLarge as exc:
                raise Refused(f"{exc}, over the limit (MAX_DOWNLOAD_BYTES)") from None
        content = await bucket.run(examine, path, kind, limits)
        sha = await bucket.run(file_sha256, path)
    return Facts(content.kind, content.pages, sha256=sha, etag=etag, suffix=content.suffix)


def slug(stem: str) -> str:
    """The name in a document's folder. A name with letters a key may not hold (合約, été) is
    spelled as `contract.key_name` spells it; any other keeps the spelling earlier runs gave
    its folder (each character outside A-Z, digits, '_' and '-' a '-'), so they are found."""
    if any(c.isalnum() and not c.isascii() for c in stem):
        return key_name(stem, gap="-", limit=SLUG_CHARS, empty="document")
    kept = "".join(c if c.isalnum() or c in "-_" else "-" for c in stem)
    return kept.strip("-")[:SLUG_CHARS] or "document"


def folder_of(base: str, listed: Listed, identity: str) -> str:
    """A document's folder: `<base>/<name>-<12 hex of its identity>` (a local file's content
    hash, an object's key hash), so the same document always lands in the same place."""
    stem = Path(listed.name).stem
    return f"{base.strip('/')}/{slug(stem)}-{identity[:12]}"


def key_identity(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
