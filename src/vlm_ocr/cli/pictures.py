"""The pages' pictures for `vlm-ocr show` and `vlm-ocr review`: each page of the document the job
read, drawn as the worker read it (turned as it was), matched to the page by what the job
recorded, never by position.

The document comes from `--pdf FILE` or `--images DIR` (the same arguments in both commands),
else from the bucket when the job's input was a key there (its pages' `source` says `key:…`).
A page's report names its source: the file's name (a job's `name`, the last part of its URL or
bucket key) or `base64` when none was given; an image is found in `--images DIR` by that name,
and a PDF's page by its number in the PDF. A page whose picture cannot be told says why on the
page, and its blocks are drawn on a blank sheet; so does a picture that cannot be the page the job
read (a PDF's page where the job read an image, a page of another size or shape). A PDF MuPDF
cannot open, or opens only by repairing it (cut short), is refused, unless it is the very file
the job read; without any document, what to give is said by what the job recorded of its input
(`not_kept`)."""

from __future__ import annotations

import argparse
import functools
import io
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pymupdf
from PIL import Image, ImageOps

from ..blocks import PageBlocks
from ..contract import PageReport
from ..errors import StorageError
from ..pdf_file import file_sha256, is_pdf, open_pdf
from ..pipeline.render import is_image_file, tiff_pages_of
from ..storage import BucketInputs, ObjectMissing
from .usage import UsageError, input_file, input_folder

SIDE = 1100  # pixels: the longer side of a page's picture in the review (the screen's)
# How far a picture's shape may stray from the page the job read: the image read fits the
# engine's budget, and a model's grid rounds each side by up to half a cell.
SHAPE_TOLERANCE = 0.05
POINTS_TOLERANCE = 0.01  # a PDF page's size in points, as the job recorded it
JPEG_QUALITY = 75
# A page whose reading shares fewer than half its words with the PDF page's own text is doubted
# (the same page read by any engine here shares most of them); fewer than 20 words tell nothing.
MIN_WORDS = 20
MIN_SHARED = 0.5
_MARKUP = re.compile(r"<[^<>]*>|\]\([^()\s]*\)|https?://\S+")  # tags, link targets, addresses
_WORD = re.compile(r"[^\W\d_]{4,}")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{2,}")
PDF_ACCEPTED = "the PDF the job read"
IMAGES_ACCEPTED = "the folder of the images the job read, under the names it gave them"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--pdf FILE` or `--images DIR`, as `show` and `review` both take them (and `--source`,
    show's old way of naming either, hidden)."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--pdf",
        type=Path,
        metavar="FILE",
        help="the PDF the job read, for the pages' pictures (default: read from the bucket "
        "when the job's input was a key there)",
    )
    source.add_argument(
        "--images",
        type=Path,
        metavar="DIR",
        help="the folder of the images the job read: each page's picture is the file of the "
        "name the job recorded for it",
    )
    source.add_argument("--source", type=Path, help=argparse.SUPPRESS)


def given(args: argparse.Namespace) -> tuple[Path | None, Path | None, Path | None]:
    """(pdf, images folder, one image) as given, each checked; `--source` read as the PDF, or
    as the one page's own image."""
    pdf, images, image = args.pdf, args.images, None
    if args.source is not None:
        input_file(args.source, "--source", f"{PDF_ACCEPTED}, or the page's image")
        if args.source.suffix.lower() == ".pdf":
            pdf = args.source
            _check_opens(pdf, "--source")
        else:
            image = args.source
    elif pdf is not None:
        input_file(pdf, "--pdf", PDF_ACCEPTED)
        if tiff_pages_of(pdf) > 1:  # a fax, which the worker reads as the PDF of its pages
            return pdf, images, image
        if not _is_pdf(pdf):
            raise UsageError("--pdf", f"{pdf} is not a PDF; accepted: {PDF_ACCEPTED}")
        _check_opens(pdf, "--pdf")
    elif images is not None:
        input_folder(images, "--images", IMAGES_ACCEPTED)
    return pdf, images, image


def _check_opens(pdf: Path, argument: str) -> None:
    """A PDF MuPDF cannot open (cut short, damaged) is said in one line, before anything is
    read; an encrypted one opens, and its pages are said to have no picture."""
    try:
        with open_pdf(pdf):
            pass
    except Exception:  # MuPDF says only that it failed to open the file
        raise UsageError(argument, _corrupt(pdf)) from None


def _corrupt(pdf: Path, how: str = "") -> str:
    return (
        f"{pdf} is corrupt or truncated: it starts as a PDF but cannot be read{how}; accepted: "
        f"{PDF_ACCEPTED}, complete"
    )


def check_repaired(args: argparse.Namespace, input_sha256: str | None) -> None:
    """A PDF given that MuPDF opened only by repairing it is refused as one it cannot open,
    unless it is the very file the job read (`input_sha256`, the job's): MuPDF rebuilds a file
    cut short from what is left, so its last pages come out blank, of a default size, or
    missing, and each page would be said to be another document's. The worker reads a repaired
    PDF (its notes say so), so the job's own is drawn as the job read it."""
    pdf = given(args)[0]
    if pdf is None or not _is_pdf(pdf) or not _opened(pdf).is_repaired:
        return
    if input_sha256 is not None and file_sha256(pdf) == input_sha256:
        return
    argument = "--source" if args.source is not None else "--pdf"
    raise UsageError(argument, _corrupt(pdf, " whole (MuPDF had to repair it)"))


def _opened(pdf: Path) -> pymupdf.Document:
    """The PDF, opened once for all its pages' pictures (opening walks its page tree), again
    when the file changes."""
    stat = pdf.stat()
    return _open_once(str(pdf.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _open_once(path: str, mtime_ns: int, size: int) -> pymupdf.Document:
    return open_pdf(path)


def _is_pdf(path: Path) -> bool:
    with path.open("rb") as f:
        return is_pdf(f.read(1024))


def _number_in(path: Path, page: PageReport) -> int:
    """The page's place in its file: its number in a PDF, and in a TIFF of several pages sent
    as the document (the worker reads it as the PDF of its pages); 1 in an image sent as one
    page (of a TIFF sent so, only the first page is read, and `frames` says so)."""
    if _is_pdf(path) or (page.frames is None and tiff_pages_of(path) > 1):
        return page.page
    return 1


def _open_frame(path: Path, number: int) -> Image.Image:
    """Page `number` of an image file (a TIFF's page; any other image is its own page 1),
    upright by its EXIF orientation as the worker reads it."""
    with Image.open(path) as opened:
        try:
            opened.seek(number - 1)
        except EOFError:
            raise IndexError(f"{path.name} has {_pages(tiff_pages_of(path))}") from None
        return ImageOps.exif_transpose(opened).convert("RGB")


@dataclass(frozen=True)
class Where:
    path: Path
    number: int  # the page in the file (an image is its own page 1)


@dataclass
class Pictures:
    pages: dict[int, Where] = field(default_factory=dict)
    #: why a page has no picture, by page
    missing: dict[int, str] = field(default_factory=dict)
    #: where the pictures come from, or why there are none, for the summary
    notes: list[str] = field(default_factory=list)
    #: why a page not named above has none
    otherwise: str = "no picture of this page: its document was not given (--pdf or --images)"

    def image(
        self,
        page: PageReport,
        size: tuple[int, int] | None,
        blocks: PageBlocks | None = None,
        text: str | None = None,
    ) -> tuple[Image.Image | None, str]:
        """The page's picture, turned as the worker read it, of `size` (the image the worker
        read: the blocks' boxes are in its pixels), or None and why; None too when the picture
        found cannot be the page the job read (`not_the_page`). With a picture, the second value
        is a doubt: the page `text` the job read is mostly not in the PDF page's own text
        (`words_elsewhere`), or ""."""
        where = self.pages.get(page.page)
        if where is None:
            return None, self.missing.get(page.page, self.otherwise)
        try:
            if why := not_the_page(where, page, blocks):
                return None, why
            size = size or _size_of(where)
            image = source_page(where.path, where.number, size, page.rotated)
            return image, words_elsewhere(where, text)
        except (OSError, ValueError, RuntimeError, IndexError, Image.DecompressionBombError) as exc:
            return None, f"the page could not be drawn from {where.path.name}: {exc}"

    def jpeg(
        self,
        page: PageReport,
        size: tuple[int, int] | None,
        blocks: PageBlocks | None = None,
        text: str | None = None,
    ) -> tuple[bytes | None, str]:
        """The page's picture as a JPEG of the shape of `size`, at most SIDE pixels long (and
        a doubt, as `image` says)."""
        where = self.pages.get(page.page)
        if where is not None and size is None:
            try:
                size = _size_of(where)
            except (OSError, ValueError, RuntimeError, IndexError) as exc:
                return None, f"the page could not be drawn from {where.path.name}: {exc}"
        if size is not None:
            # a PDF page is drawn afresh, as sharp as the screen's side, however small the job
            # read it; an image is never drawn larger than it was read
            scale = SIDE / max(size)
            if where is None or not _is_pdf(where.path):
                scale = min(1.0, scale)
            size = (max(1, round(size[0] * scale)), max(1, round(size[1] * scale)))
        image, why = self.image(page, size, blocks, text)
        if image is None:
            return None, why
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=JPEG_QUALITY, optimize=True)
        return buf.getvalue(), why


def source_page(
    source: Path, number: int, size: tuple[int, int], rotated: int | None
) -> Image.Image:
    """Page `number` of a PDF (an image file is its one page) as the worker read it: turned
    `rotated` degrees clockwise, at `size` (the read image's, or one of its shape)."""
    if _is_pdf(source):
        page = _opened(source)[number - 1]
        sideways = (rotated or 0) % 180
        width = size[1] if sideways else size[0]
        zoom = width / page.rect.width
        pix = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False)
        image = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
    else:
        image = _open_frame(source, number)
    if rotated:
        image = image.rotate(-rotated, expand=True)
    return image.resize(size)


def _size_of(where: Where) -> tuple[int, int]:
    width, height = _natural_size(where)
    return round(width), round(height)


def _natural_size(where: Where) -> tuple[float, float]:
    """A PDF page's size in points, an image's in pixels (upright by its EXIF orientation, as
    the worker reads it)."""
    if _is_pdf(where.path):
        rect = _opened(where.path)[where.number - 1].rect
        return rect.width, rect.height
    return _open_frame(where.path, where.number).size


def not_the_page(where: Where, page: PageReport, blocks: PageBlocks | None) -> str:
    """Why the picture at `where` cannot be the page the job read, or "": the job read an image
    where this is a PDF's page (its blocks have no size in points), or this page's size in
    points (against the PDF page's the blocks recorded) or its shape (against the image read,
    as the manifest recorded it) is not that page's. A picture of another page would lie under
    the blocks, stretched to their page."""
    pdf = _is_pdf(where.path)
    if pdf and blocks is not None and blocks.pdf_size is None:
        name = recorded_name(page)
        return (
            f"no picture: the job read page {page.page} from an image"
            f"{f' ({name})' if name else ''}, not from a PDF's page; give --images DIR, the "
            "folder holding it"
        )
    given = _natural_size(where)
    what = (
        f"page {where.number} of {where.path.name}" if pdf or where.number > 1 else where.path.name
    )
    if pdf and blocks is not None and blocks.pdf_size is not None:
        read = blocks.pdf_size
        if all(abs(a - b) <= POINTS_TOLERANCE * b for a, b in zip(given, read, strict=True)):
            return ""
        return (
            f"no picture: {what} is {_shape(given, 'pt')}, not the size of the page the job "
            f"read ({_shape(read, 'pt')}); give the document the job read"
        )
    width, height = (blocks.width, blocks.height) if blocks else (page.width, page.height)
    if not width or not height:
        return ""  # the job recorded nothing to tell it by
    sideways = bool((page.rotated or 0) % 180)  # the picture is turned as the job turned it
    turned_ratio = given[1] / given[0] if sideways else given[0] / given[1]
    if abs(turned_ratio - width / height) <= SHAPE_TOLERANCE * width / height:
        return ""
    turn = f" (turned {page.rotated}° as the job read it)" if sideways else ""
    return (
        f"no picture: {what} is {_shape(given, 'pt' if pdf else 'pixels')}{turn}, not the shape "
        f"of the page the job read ({_shape((width, height), 'pixels')}); give the document "
        "the job read"
    )


def words_elsewhere(where: Where, text: str | None) -> str:
    """A doubt, or "": the words the job read on its page (`text`) are mostly not in the PDF
    page's own text layer, so the PDF given may be another document of the same page size (a
    revised file under the same name, another document of one template). Only a doubt: a text
    layer can be garbled (fonts without a Unicode map), which is when pages are sent to be
    read, so the picture is still drawn. A scanned page, or a page of few words, tells
    nothing."""
    if text is None or not _is_pdf(where.path):
        return ""
    read = _words(text)
    if len(read) < MIN_WORDS:
        return ""
    own = _words(_opened(where.path)[where.number - 1].get_text("text"))
    if len(own) < MIN_WORDS:
        return ""
    shared = len(read & own)
    if shared >= MIN_SHARED * len(read):
        return ""
    return (
        f"page {where.number} of {where.path.name} may not be the page the job read: of the "
        f"{len(read)} words the job read on it, {shared} {'is' if shared == 1 else 'are'} in that "
        "page's own text; give the document the job read"
    )


def _words(text: str) -> set[str]:
    """Words of four letters or more, and each pair of CJK characters running together (a
    script without spaces): markup and numbers, which a reading writes its own way, left out."""
    text = _MARKUP.sub(" ", text).lower()
    words = set(_WORD.findall(_CJK_RUN.sub(" ", text)))
    for run in _CJK_RUN.findall(text):
        words.update(run[i : i + 2] for i in range(len(run) - 1))
    return words


def _pages(count: int) -> str:
    return f"{count} page{'' if count == 1 else 's'}"


def _shape(size: tuple[float, float], unit: str) -> str:
    width, height = size
    kind = "landscape" if width > height else "portrait" if height > width else "square"
    return f"{round(width)}×{round(height)} {unit}, {kind}"


def recorded_name(page: PageReport) -> str | None:
    """The file name the job recorded for the page's source: its `name`, or the last part of
    its bucket key or URL; None for base64 sent without a name."""
    parts = recorded_parts(page)
    return parts[-1] if parts else None


def recorded_parts(page: PageReport) -> tuple[str, ...]:
    """The path the job recorded for the page's source, folders first (a `name` given with
    folders, a bucket key, a URL's path), without any part that would climb out of a folder;
    () for base64 sent without a name."""
    source = page.source
    if source == "base64":
        return ()
    if source.startswith("key:"):
        source = source.removeprefix("key:")
    elif source.startswith(("http://", "https://")):
        source = unquote(urlsplit(source).path)
    return tuple(p for p in source.replace("\\", "/").split("/") if p not in ("", ".", ".."))


def from_pdf(pdf: Path, pages: Sequence[PageReport]) -> Pictures:
    """Each page by its number in the PDF; a page the job read from an image has none here."""
    frames = tiff_pages_of(pdf)
    tiff = frames > 1  # a fax: its pages are the job's, as the worker read it
    count = frames if tiff else _opened(pdf).page_count
    found = Pictures(notes=[f"page pictures from {pdf.name}"])
    others = set()
    for page in pages:
        name = recorded_name(page)
        if name is not None and is_image_file(Path(name)) and not (tiff and page.frames is None):
            found.missing[page.page] = (
                f"no picture: the job read page {page.page} from the image {name}, not from a "
                "PDF; give --images DIR, the folder holding it"
            )
        elif page.page > count:
            found.missing[page.page] = f"no picture: {pdf.name} has {_pages(count)}"
        else:
            found.pages[page.page] = Where(pdf, _number_in(pdf, page))
            if name is not None and name != pdf.name:
                others.add(name)
    if others:
        found.notes.append(
            f"the job read {', '.join(sorted(others))}: its pages are drawn from {pdf.name} by "
            "their page numbers"
        )
    if beyond := max((p.page for p in pages if p.page > count), default=0):
        found.notes.append(f"{pdf.name} has {_pages(count)}; the job has pages up to {beyond}")
    return found


def from_images(folder: Path, pages: Sequence[PageReport]) -> Pictures:
    """Each page's image by the name the job recorded for it, never by its place in the
    folder: a page whose name is not there, or that has no name, has no picture."""
    found = Pictures(notes=[f"page pictures from the images in {folder}"])
    sources: dict[str, set[tuple[str, ...]]] = {}  # by file name, the paths recorded
    for page in pages:
        if parts := recorded_parts(page):
            sources.setdefault(parts[-1], set()).add(parts)
    for page in pages:
        parts = recorded_parts(page)
        name = parts[-1] if parts else None
        # the recorded path below the folder, else its last folders and name, else the name
        tails = [folder.joinpath(*parts[n:]) for n in range(len(parts))]
        path = next((t for t in tails if t.is_file()), tails[-1] if tails else None)
        alike = sorted("/".join(p) for p in sources.get(name or "", ()))
        if path is None:
            found.missing[page.page] = (
                f"no picture: the job recorded no file name for page {page.page} (its image "
                "was sent as base64 without a `name`), so no image of the folder can be told "
                "to be it"
            )
        elif not path.is_file():
            found.missing[page.page] = (
                f"no picture: {folder} has no {'/'.join(parts)}, the file the job read as page "
                f"{page.page}"
            )
        elif path == tails[-1] and len(alike) > 1:  # found by its bare name, which is several's
            found.missing[page.page] = (
                f"no picture: the job read {len(alike)} files named {name} ({', '.join(alike)}) "
                f"and {folder} has them under that name alone; give --images the folder holding "
                "them in their folders"
            )
        else:
            found.pages[page.page] = Where(path, _number_in(path, page))
    return found


def from_image(image: Path, pages: Sequence[PageReport]) -> Pictures:
    """The one image the user named as the page's own (`show --source IMAGE`)."""
    return Pictures({p.page: Where(image, 1) for p in pages}, notes=[f"the page from {image}"])


async def from_bucket(
    inputs: BucketInputs | None, pages: Sequence[PageReport], into: Path, max_bytes: int
) -> Pictures:
    """The job's inputs named by key, fetched from the bucket once each."""
    keys = sorted({p.source.removeprefix("key:") for p in pages if p.source.startswith("key:")})
    if not keys:
        why = not_kept(pages)
        return Pictures(notes=[why], otherwise=why)
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
            found[page.page] = Where(path, _number_in(path, page))
    if files:
        notes.insert(0, f"page pictures from {', '.join(inputs.uri(k) for k in files)}")
    return Pictures(found, notes=notes)


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


NAMES_LISTED = 3  # the files a job read named in its summary line; the rest counted
GIVE = {
    "pdf": "the file it read: --pdf FILE",
    "images": "the folder of the images it read: --images DIR",
    None: "the file it read: --pdf FILE (or --images DIR, the folder of the images it read)",
}


def not_kept(pages: Sequence[PageReport]) -> str:
    """Why a job whose input was no key in the bucket has no pictures, and what to give, by
    what it recorded of its input: the name of the file it read (`vlm-ocr run` names each local
    file; a job may name what it sends; of a URL, its last part), or none (base64 sent without
    a `name`)."""
    kind = read_as(pages)
    names = sorted({name for p in pages if (name := recorded_name(p)) is not None})
    urls = all(p.source.startswith(("http://", "https://")) for p in pages)
    if names:
        listed = ", ".join(names[:NAMES_LISTED])
        if len(names) > NAMES_LISTED:
            listed += f" and {len(names) - NAMES_LISTED:,} more"
        read = f"fetched {listed} by URL" if urls else f"read {listed}"
    elif kind == "images":  # nothing names them, so no image given can be told to be theirs
        return (
            "no page pictures: the job's images were sent as base64 without a `name`, and the "
            "worker keeps no copy of a job's input; with no name recorded, no image can be told "
            "to be a page's"
        )
    else:
        read = "was sent its document as base64 without a `name`"
    return (
        f"no page pictures: the job {read}, and the worker keeps no copy of a job's input; "
        f"give {GIVE[kind]}"
    )


def read_as(pages: Sequence[PageReport]) -> str | None:
    """How the job read its input, "pdf" or "images", or None where its record cannot tell: a
    PDF's page has the dpi it was drawn at; else by the file names it recorded; else a page
    drawn without a dpi was an image."""
    if any(p.dpi is not None for p in pages):
        return "pdf"
    files = [Path(name) for p in pages if (name := recorded_name(p)) is not None]
    if any(is_image_file(file) for file in files):
        return "images"
    if any(file.suffix.lower() == ".pdf" for file in files):
        return "pdf"
    return "images" if any(p.status != "failed" for p in pages) else None


def scratch() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="vlm-ocr-pictures-")


async def find(
    args: argparse.Namespace,
    pages: Sequence[PageReport],
    inputs: BucketInputs | None,
    tmp: Path,
    max_bytes: int,
) -> Pictures:
    """The pictures the arguments point to, else the bucket's."""
    pdf, images, image = given(args)
    if pdf is not None:
        return from_pdf(pdf, pages)
    if images is not None:
        return from_images(images, pages)
    if image is not None:
        return from_image(image, pages)
    return await from_bucket(inputs, pages, tmp, max_bytes)
