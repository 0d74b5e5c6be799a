"""What `vlm-ocr run` checks before it starts the engine, and says in the words the user typed:
each file (there, a file, a PDF or an image, within the size and pixel limits, the PDF readable
and `--pages` selecting some of it) and the options (`--pages`, `--max-pixels`, … as the job's
fields check them). The engine's start costs seconds to minutes; a typo should not."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from PIL import Image, UnidentifiedImageError

from ..contract import JobInput
from ..errors import InputError, PageError
from ..pipeline import render
from ..settings import Settings

Kind = Literal["pdf", "image"]
ACCEPTED_FILES = "PDF, PNG, JPEG, WebP or TIFF files (.pdf, .png, .jpg, .webp, .tif, …)"
#: the job's fields as `vlm-ocr run` spells them
OPTION_OF_FIELD = {
    "input.pages": "--pages",
    "input.prompt": "--prompt",
    "input.max_pixels": "--max-pixels",
    "input.headers_footers": "--headers-footers",
    "input.searchable_pdf": "--searchable-pdf",
}
# The field of the file itself: the line that reports it already names the file.
_SOURCE_FIELD = re.compile(r"input\.(?:pdf|images\[0\])(?:\.base64)?: ")


@dataclass(frozen=True)
class LocalFile:
    path: Path
    kind: Kind
    #: the pages its job will read
    pages: int


def file_kind(path: Path) -> Kind | None:
    """A PDF by its header, an image by what Pillow finds in its header, else None."""
    with path.open("rb") as fh:
        if render.is_pdf(fh.read(1024)):
            return "pdf"
    try:
        with Image.open(path):
            return "image"
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return None


def check_options(options: dict[str, Any], max_pages: int) -> list[str]:
    """The options' problems, as the job's fields are checked, in the options' names."""
    try:
        JobInput.parse({"pdf": {"key": "file"}} | options, max_pages=max_pages)
    except InputError as exc:
        return [in_our_words(line) for line in exc.lines()]
    return []


def check_file(path: Path, pages: str | None, settings: Settings) -> LocalFile | str:
    """The file ready to run, or what is wrong with it, naming it."""
    if not path.exists():
        return f"{path}: no such file"
    if not path.is_file():
        return f"{path}: a folder, not a file; accepted: {ACCEPTED_FILES}"
    size, limit = path.stat().st_size, settings.fetch.max_download_bytes
    if size == 0:
        return f"{path}: the file is empty"
    if size > limit:
        over = f"over the {limit / 1e6:,g} MB limit (MAX_DOWNLOAD_BYTES)"
        return f"{path}: {size / 1e6:,.1f} MB, {over}"
    kind = file_kind(path)
    if kind is None:
        return f"{path}: not a PDF or an image; accepted: {ACCEPTED_FILES}"
    try:
        if kind == "image":
            render.open_image(str(path), settings.render.max_image_pixels).close()
            return LocalFile(path, kind, 1)
        return LocalFile(path, kind, _pdf_pages(path, pages, settings.job.max_pages_per_job))
    except PageError as exc:
        return f"{path}: {exc.message}"
    except InputError as exc:
        return f"{path}: {in_our_words(str(exc))}"


def _pdf_pages(path: Path, pages: str | None, max_pages: int) -> int:
    from ..pipeline.sources import select_pages

    info = render.inspect_pdf(str(path))
    return len(select_pages(pages, info.page_count, max_pages)[0])


def in_our_words(text: str) -> str:
    """A job's error as `vlm-ocr run` says it: options by their names, and no field for the
    file (the line names the file)."""
    text = _SOURCE_FIELD.sub("", text)
    for field, option in OPTION_OF_FIELD.items():
        text = text.replace(f"{field}: ", f"{option}: ")
    return text
