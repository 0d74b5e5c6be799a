"""What `vlm-ocr run` checks before it starts the engine, and says in the words the user typed:
each file (there, a file, a PDF or an image, within the size and pixel limits, the PDF readable
and `--pages` selecting some of it), the options (`--pages`, `--max-pixels`, … as the job's
fields check them) and the results folder `--out`. The engine's start costs seconds to minutes;
a typo should not. Each file's folder in the store is named here too (`result_folders`)."""

from __future__ import annotations

import hashlib
import re
import shlex
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from PIL import Image, UnidentifiedImageError

from ..contract import JobInput, key_name
from ..errors import InputError, PageError
from ..file_names import shown, stored_name
from ..images import tiff_pages
from ..pdf_file import file_sha256
from ..pipeline import render
from ..pipeline.cpu_pool import CpuPool, TaskFailed, TaskTimeout
from ..settings import Settings
from ..storage import cannot_write

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
FOLDER_CHARS = 100  # of the name kept in a folder's name; the prefix may have 200
LOOKED_AT = 1000  # entries of a folder given as a file looked at for the files to give instead
OUT_ACCEPTED = "accepted: a folder to write the results in (made if it is not there)"


@dataclass(frozen=True)
class LocalFile:
    path: Path
    kind: Kind
    #: the pages its job will read
    pages: int
    #: which document it is, as its job's result will say (`JobResult.input_sha256`)
    sha256: str = ""


def input_sha256(path: Path, kind: Kind) -> str:
    """The `input_sha256` its job's result will have: a PDF's (a TIFF's) own SHA-256, or for
    an image the SHA-256 of its SHA-256."""
    own = file_sha256(path)
    return own if kind == "pdf" else hashlib.sha256(own.encode()).hexdigest()


def file_kind(path: Path) -> Kind | None:
    """A PDF by its header, an image by what Pillow finds in its header, else None. A TIFF of
    several pages (a fax) is sent as the job's `pdf`, which reads every page of it."""
    with path.open("rb") as fh:
        if render.is_pdf(fh.read(1024)):
            return "pdf"
    try:
        with Image.open(path) as img:
            return "pdf" if tiff_pages(img) > 1 else "image"
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return None


def check_options(options: dict[str, Any], max_pages: int) -> list[str]:
    """The options' problems, as the job's fields are checked, in the options' names."""
    try:
        JobInput.parse({"pdf": {"key": "file"}} | options, max_pages=max_pages)
    except InputError as exc:
        return [in_our_words(line) for line in exc.lines()]
    return []


async def check_files(
    paths: list[Path], pages: str | None, settings: Settings
) -> list[LocalFile | str]:
    """Each file ready to run, or what is wrong with it, each checked in a render process of
    its own under RENDER_TIMEOUT_S and RENDER_MEMORY_MB, as the worker reads it: opening a
    crafted PDF or TIFF can take MuPDF or Pillow any time or memory, and no file may stall or
    swell `vlm-ocr run` before its engine starts."""
    pool = CpuPool(1, memory_limit_mb=settings.render.render_memory_mb)
    await pool.start()
    limit = settings.render.render_timeout_s
    checked: list[LocalFile | str] = []
    try:
        for path in paths:
            name = shown(str(path))
            try:
                checked.append(await pool.run(check_file, path, pages, settings, timeout_s=limit))
            except TaskTimeout:
                checked.append(
                    f"{name}: not opened within {limit:g} s (RENDER_TIMEOUT_S), so the worker "
                    "would not read it either; a damaged or crafted file is likely, or raise "
                    "RENDER_TIMEOUT_S"
                )
            except TaskFailed as exc:
                checked.append(
                    f"{name}: opening it failed ({exc}); a file that asks for more memory than "
                    "RENDER_MEMORY_MB allows fails so"
                )
    finally:
        await pool.close()
    return checked


def check_file(path: Path, pages: str | None, settings: Settings) -> LocalFile | str:
    """The file ready to run, or what is wrong with it, naming it (in this process: a look
    before the engine starts goes through `check_files`)."""
    if not path.exists():
        return f"{shown(str(path))}: no such file"
    if path.is_dir():
        return f"{shown(str(path))}: a folder, not a file{folder_hint(path)}"
    if not path.is_file():  # read once and gone (a pipe), or endless (a device): not a job's file
        return (
            f"{shown(str(path))}: not a regular file ({special_kind(path)}); save it to a file "
            f"first and give that; accepted: {ACCEPTED_FILES}"
        )
    size, limit = path.stat().st_size, settings.fetch.max_download_bytes
    if size == 0:
        return f"{shown(str(path))}: the file is empty"
    if size > limit:
        over = f"over the {limit / 1e6:,g} MB limit (MAX_DOWNLOAD_BYTES)"
        return f"{shown(str(path))}: {size / 1e6:,.1f} MB, {over}"
    kind = file_kind(path)
    if kind is None:
        return f"{shown(str(path))}: not a PDF or an image; accepted: {ACCEPTED_FILES}"
    try:
        if kind == "image":
            render.open_image(str(path), settings.render.max_image_pixels).close()
            return LocalFile(path, kind, 1, input_sha256(path, kind))
        count = _pdf_pages(path, pages, settings.job.max_pages_per_job)
        return LocalFile(path, kind, count, input_sha256(path, kind))
    except PageError as exc:
        return f"{shown(str(path))}: {exc.message}"
    except InputError as exc:
        return f"{shown(str(path))}: {in_our_words(str(exc))}"


def folder_hint(path: Path, looked_at: int = LOOKED_AT) -> str:
    """What to give instead of a folder, as the rest of its line: the files in it that are
    accepted, by the shell's pattern that names them alone (`DIR/*` names a subfolder or a
    text file too, each refused again), and `vlm-ocr submit`, which walks folders."""
    try:
        entries = sorted(e for e in path.iterdir() if not e.name.startswith("."))[:looked_at]
    except OSError as exc:
        return f"; accepted: {ACCEPTED_FILES} (and it cannot be read: {exc.strerror})"
    accepted = [e for e in entries if _accepted(e)]
    if not accepted:
        return f"; accepted: {ACCEPTED_FILES}, of which it holds none"
    folder = shlex.quote(str(path))
    if len(accepted) == len(entries):
        patterns = [f"{folder}/*"]
    else:  # by their extensions, as typed: the shell's patterns tell case apart
        patterns = [f"{folder}/*{s}" for s in sorted({e.suffix for e in accepted}) if s]
    some = "at least " if len(entries) == looked_at else ""
    count = f"{some}{len(accepted)} PDFs and images: give them"
    if len(accepted) == 1:
        count = "1 PDF or image: give it"
    example = " ".join(patterns) or shlex.quote(str(accepted[0]))
    return (
        f"; it holds {count}, e.g. vlm-ocr run {example} (vlm-ocr submit walks folders, over an "
        "endpoint's workers)"
    )


def _accepted(path: Path) -> bool:
    try:
        return path.is_file() and file_kind(path) is not None
    except OSError:  # unreadable: not one to suggest
        return False


def special_kind(path: Path) -> str:
    """What a path that is neither a file nor a folder is, in a few words."""
    mode = path.stat().st_mode
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file"


def _pdf_pages(path: Path, pages: str | None, max_pages: int) -> int:
    from ..pipeline.sources import select_pages

    with path.open("rb") as fh:
        tiff = render.is_tiff(fh.read(4))
    # a TIFF's pages are its frames (the worker makes it a PDF of them)
    count = render.tiff_pages_of(path) if tiff else render.inspect_pdf(str(path)).page_count
    return len(select_pages(pages, count, max_pages)[0])


def in_our_words(text: str) -> str:
    """A job's error as `vlm-ocr run` says it: options by their names, and no field for the
    file (the line names the file)."""
    text = _SOURCE_FIELD.sub("", text)
    for field, option in OPTION_OF_FIELD.items():
        text = text.replace(f"{field}: ", f"{option}: ")
        text = text.replace(f"the job's `{field.removeprefix('input.')}`", f"`{option}`")
    return text


def shown_name(path: Path) -> str:
    """The file's name as a job carries it and its manifest keeps it (`file_names`)."""
    return stored_name(path.name)


def folder_name(path: Path) -> str:
    """The file's results folder: its name without the extension as a stored key may spell it
    (`contract.key_name`: 'Case 42.pdf' is Case_42, 合約.pdf file- and 8 hex digits of the name),
    the same on every run."""
    return key_name(path.stem, limit=FOLDER_CHARS)


@dataclass(frozen=True)
class Held:
    """Whose results a folder holds, by the manifest an earlier job left there."""

    sha256: str | None  # `JobResult.input_sha256`; None from a worker that did not say it
    names: frozenset[str]  # the files its pages came from

    def of(self, file: LocalFile) -> bool:
        return self.sha256 == file.sha256 if self.sha256 else shown_name(file.path) in self.names


async def result_folders(
    files: list[LocalFile], held: Callable[[str], Awaitable[Held | None]]
) -> list[str]:
    """Each file's results folder, in the order given: its name, or the name with -2, -3, …
    where that folder is another file's, of this run (two.pdf and sub/two.pdf, scan.png and
    scan.pdf) or of an earlier one (`held`: by the manifest there); a file given twice is one
    folder. So a file finds its own folder again, whatever else a later command names, and
    reuses what is stored there, and no file's results are written over another's."""
    names = [folder_name(file.path) for file in files]
    own = {name.casefold() for name in names}  # a folder on macOS is the same in any case
    taken: set[str] = set()
    by_file: dict[Path, str] = {}
    folders = []
    for file, name in zip(files, names, strict=True):
        folder = by_file.get(file.path.resolve())
        n = 1
        while folder is None:
            candidate = name if n == 1 else f"{name}-{n}"
            key = candidate.casefold()
            if key not in taken and (n == 1 or key not in own):
                earlier = await held(candidate)
                if earlier is None or earlier.of(file):
                    folder = candidate
            n += 1
        taken.add(folder.casefold())
        by_file[file.path.resolve()] = folder
        folders.append(folder)
    return folders


def check_out(out: str) -> str | None:
    """What is wrong with `--out`, or None; before the engine starts, and creating nothing."""
    if not out.strip():
        return f"--out: {out!r} is empty (an unset shell variable?); {OUT_ACCEPTED}"
    path = Path(out)
    if path.exists() and not path.is_dir():
        return f"--out: {out} is a file, not a folder; {OUT_ACCEPTED}"
    there = next(p for p in (path.absolute(), *path.absolute().parents) if p.exists())
    if not there.is_dir():
        return f"--out: {there} is a file, so {out} cannot be made; {OUT_ACCEPTED}"
    if why := cannot_write(there):
        return f"--out: {there} cannot be written ({why}); {OUT_ACCEPTED}"
    return None


def pages_unused(pages: str | None, files: list[LocalFile]) -> tuple[str | None, list[str]]:
    """`--pages` selects pages of PDFs; an image is read whole. The problem when no file is a
    PDF (the option would do nothing), else a note for each image it does not apply to."""
    images = [f.path for f in files if f.kind == "image"]
    if pages is None or not images:
        return None, []
    if len(images) == len(files):
        refused = "--pages: selects pages of PDFs, and no file given is a PDF; an image is read"
        return f"{refused} whole: leave --pages out", []
    return None, [f"{shown(str(p))}: an image, read whole: --pages is for the PDFs" for p in images]
