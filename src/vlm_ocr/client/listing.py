"""The documents a submission names, as a stream: files, folders (walked recursively), list files
(one path or `s3://` key a line) and prefixes of the configured bucket (listed a page of keys at a
time). Nothing is collected: a 5,000-document folder or a bucket prefix of a million keys costs
the memory of one directory's names or one page of keys (and of which folders were walked, so
that a linked folder is followed once and a link back up is no loop).

Arguments are checked before anything runs (a missing path, another bucket, nothing but files
that are no documents, a list file that is no list of names: a usage error); a list file's lines
are read as the run goes, and a line that names nothing becomes one refused document in the
report. Folders are walked without recursion, so a tree of any depth is walked; one that cannot
be read is counted and named in the summary, and the walk goes on. A file that is not a PDF or
an image (by its name), in a folder, under a prefix or named, is left out and counted
(`LeftOut`), so the run can say what it did not send; a link to nothing is a refused document.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ..file_names import shown, stored_name
from ..storage import Bucket
from .documents import DOCUMENT_SUFFIXES, NOT_REGULAR, Listed

# (key, size, etag) of every object under a prefix, a page of keys at a time
KeyLister = Callable[[str], Iterable[tuple[str, int, str]]]


class UsageError(ValueError):
    """The command line names something that cannot be a corpus; the message says what."""


@dataclass(frozen=True)
class S3Target:
    bucket: str
    key: str

    @property
    def is_prefix(self) -> bool:
        """A key ending in `/`, or without a document's suffix, names a prefix to list."""
        return self.key == "" or self.key.endswith("/") or not _is_document(self.key)


def s3_target(text: str) -> S3Target | None:
    if not text.startswith("s3://"):
        return None
    bucket, _, key = text.removeprefix("s3://").partition("/")
    return S3Target(bucket, key)


def _is_document(name: str) -> bool:
    return Path(name).suffix.lower() in DOCUMENT_SUFFIXES


ACCEPTED = "PDFs and images: " + ", ".join(sorted(DOCUMENT_SUFFIXES))
ARCHIVE_SUFFIXES = frozenset(
    {".zip", ".tar", ".gz", ".tgz", ".bz2", ".tbz2", ".xz", ".txz", ".zst", ".7z", ".rar"}
)
UNPACK = "archives (.zip, .tar…) must be unpacked first"
NAMED = 5  # of the files left out, named in the summary


def is_archive(name: str) -> bool:
    return Path(name).suffix.lower() in ARCHIVE_SUFFIXES


@dataclass
class LeftOut:
    """What a listing passed over: files that are not documents (counted, a few named, and
    how many are archives) and folders that could not be read."""

    files: int = 0
    archives: int = 0
    names: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)
    #: linked folders not walked: their folder was walked already (a loop, or a second link)
    linked: list[str] = field(default_factory=list)

    def file(self, name: str) -> None:
        self.files += 1
        self.archives += is_archive(name)
        if len(self.names) < NAMED:
            self.names.append(stored_name(name))

    def folder(self, path: str, exc: OSError) -> None:
        self.folders.append(stored_name(f"{path} ({exc.strerror or exc})"))

    def walked(self, path: str, target: str | None) -> None:
        """A folder not walked again: `path` a link to `target`, or (None) the folder itself,
        reached through a link before."""
        said = f"{path} -> {target}" if target else f"{path} (through a link)"
        self.linked.append(stored_name(said))

    def lines(self) -> list[str]:
        """The summary's lines: none when nothing was left out (names as a terminal is given
        them)."""
        return [shown(line) for line in self._lines()]

    def _lines(self) -> list[str]:
        out = []
        if self.files:
            more = f" and {self.files - len(self.names):,} more" if self.files > NAMED else ""
            files = "1 file" if self.files == 1 else f"{self.files:,} files"
            said = f"{files} left out: not PDFs or images ({', '.join(self.names)}{more})"
            out.append(f"{said}; {UNPACK}" if self.archives else said)
        if self.folders:
            shown = ", ".join(self.folders[:NAMED])
            more = f" and {len(self.folders) - NAMED:,} more" if len(self.folders) > NAMED else ""
            out.append(f"folders that cannot be read, left out: {shown}{more}")
        if self.linked:
            shown = ", ".join(self.linked[:NAMED])
            more = f" and {len(self.linked) - NAMED:,} more" if len(self.linked) > NAMED else ""
            out.append(
                f"linked folders walked already (a loop, or a second link), left out: {shown}{more}"
            )
        return out

    def as_json(self) -> dict[str, object]:
        said: dict[str, object] = {
            "files": self.files,
            "archives": self.archives,
            "examples": self.names,
            "folders": self.folders,
        }
        if self.linked:  # (only when there are: the field came later)
            said["linked"] = self.linked
        return said


def nothing(left_out: LeftOut, named: Iterable[str | Path]) -> str:
    """Why a run finds nothing to send in what the command line `named`."""
    said = "; ".join(left_out.lines())
    where = shown(", ".join(map(str, named)))
    return f"no document found in {where}{f': {said}' if said else ''}; accepted: {ACCEPTED}"


def not_a_document(name: str) -> str:
    """Why a file named alone is not sent."""
    unpack = ": an archive, to unpack first" if is_archive(name) else ""
    return f"{shown(name)}: not a PDF or an image{unpack}; accepted: {ACCEPTED}"


@dataclass
class Corpus:
    """What the command line names, checked; `documents()` streams it (again on each call)."""

    arguments: list[str]
    list_files: list[Path]
    bucket: str | None
    #: keys under this prefix are results (the store's BUCKET_PREFIX/), never documents
    results_prefix: str
    lister: KeyLister | None = None

    def check(self) -> None:
        for arg in self.arguments:
            problem = self._problem(arg)
            if problem is not None:
                raise UsageError(problem)
        for path in self.list_files:
            if str(path) != "-" and not path.is_file():
                raise UsageError(f"--list {shown(str(path))}: no such file")
            if str(path) != "-":
                with path.open("rb") as fh:
                    for _ in _lines_of(path, fh):  # said now, not when the run reaches it
                        pass
        # Only files, none a document: nothing can be sent, said before anything runs.
        files = [a for a in self.arguments if s3_target(a) is None and Path(a).is_file()]
        if self.list_files or not files or len(files) < len(self.arguments):
            return
        if not any(_is_document(arg) for arg in files):
            left_out = LeftOut()
            for arg in files:
                left_out.file(arg)
            one = len(files) == 1
            raise UsageError(not_a_document(files[0]) if one else nothing(left_out, files))

    def _problem(self, arg: str) -> str | None:
        """None if the argument (or a list file's line) names something; else why not."""
        target = s3_target(arg)
        if target is not None:
            problem = None
            if self.bucket is None:
                problem = "s3:// keys are read from the configured bucket, and BUCKET_NAME is unset"
            elif target.bucket != self.bucket:
                problem = (
                    f"{shown(arg)}: the endpoint reads bucket {self.bucket!r} (BUCKET_NAME), "
                    f"not {target.bucket!r}"
                )
        else:
            try:
                there = Path(arg).exists()
            except (OSError, ValueError) as exc:  # too long a name, or a NUL in it
                return f"{shown(arg)}: no file can be so named ({getattr(exc, 'strerror', exc)})"
            problem = None if there else f"{shown(arg)}: no such file or folder"
        return problem

    @property
    def single_file(self) -> Path | None:
        """The one local file the command names, when it names nothing else."""
        if (
            len(self.arguments) == 1
            and not self.list_files
            and s3_target(self.arguments[0]) is None
        ):
            path = Path(self.arguments[0])
            return path if path.is_file() else None
        return None

    def documents(self, left_out: LeftOut | None = None) -> Iterator[Listed]:
        """The documents, in order; what is not one is counted in `left_out`."""
        left_out = left_out if left_out is not None else LeftOut()
        walked: set[tuple[int, int]] = set()  # the folders walked, each once
        for arg in self.arguments:
            yield from self._expand(arg, left_out, walked)
        for path in self.list_files:
            yield from self._listed_in(path, left_out, walked)

    def _listed_in(
        self, path: Path, left_out: LeftOut, walked: set[tuple[int, int]]
    ) -> Iterator[Listed]:
        import sys

        stdin = str(path) == "-"
        lines = getattr(sys.stdin, "buffer", sys.stdin) if stdin else path.open("rb")
        try:
            for line in _lines_of(path, lines):
                problem = self._problem(line)
                if problem is not None:
                    yield Listed(line, problem=problem)
                else:
                    yield from self._expand(line, left_out, walked)
        finally:
            if not stdin:
                lines.close()

    def _expand(
        self, arg: str, left_out: LeftOut, walked: set[tuple[int, int]]
    ) -> Iterator[Listed]:
        target = s3_target(arg)
        if target is None:
            path = Path(arg)
            if path.is_dir():
                yield from walk(path, left_out, walked)
            elif path.is_file() and not _is_document(arg):
                left_out.file(arg)
            elif path.exists() and not path.is_file():  # a pipe, a device: as in a folder
                yield Listed(arg, problem=NOT_REGULAR)
            else:
                yield Listed(arg, path=path)
        elif not target.is_prefix:
            yield Listed(arg, key=target.key)
        else:
            assert self.lister is not None, "a bucket prefix needs the bucket's lister"
            for key, size, etag in self.lister(target.key):
                if key.startswith(self.results_prefix) or key.endswith("/"):
                    continue  # results, and the folder markers some tools write
                if _is_document(key):
                    yield Listed(f"s3://{target.bucket}/{key}", key=key, size=size, etag=etag)
                else:
                    left_out.file(f"s3://{target.bucket}/{key}")


LIST_LINE_BYTES = 1 << 16  # a path or a key is far shorter; a longer line is no list's
LIST_IS = "a list holds one path or key per line"


def _lines_of(path: Path, lines: IO[bytes] | IO[str]) -> Iterator[str]:
    """A list file's lines that name something (no comment, no blank), as UTF-8 text; a
    UsageError naming the line where the file is not such a list (not text, a PDF by mistake).
    A line is read up to its limit, so a file of no lines is not read whole into memory."""
    where, number = f"--list {shown(str(path))}", 0
    while read := lines.readline(LIST_LINE_BYTES + 1):
        number += 1
        raw = read.encode("utf-8", "surrogateescape") if isinstance(read, str) else read
        if len(raw) > LIST_LINE_BYTES:
            raise UsageError(f"{where}: line {number} is over {LIST_LINE_BYTES:,} bytes; {LIST_IS}")
        if number == 1 and raw.lstrip().startswith(b"%PDF"):  # given as the list by mistake
            raise UsageError(f"{where}: a PDF, not a list; {LIST_IS} (a PDF is given as PATH)")
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            line = "\0"  # (said as a NUL is: no text)
        if "\0" in line:
            raise UsageError(f"{where}: line {number} is not UTF-8 text; {LIST_IS}")
        if line and not line.startswith("#"):
            yield line


def walk(
    folder: Path, left_out: LeftOut | None = None, walked: set[tuple[int, int]] | None = None
) -> Iterator[Listed]:
    """The folder's documents, depth first in name order (the same order on every run), one
    directory's names in memory at a time. Linked folders are followed, each folder walked once
    (a link back up, or a second link to a folder, is counted in `left_out`, not walked again);
    hidden entries are left out unsaid, other files and folders that cannot be read are counted
    in `left_out`, and a link to nothing is a document refused with its reason."""
    left_out = left_out if left_out is not None else LeftOut()
    walked = walked if walked is not None else set()
    # the names of each folder open, the deepest last: walked with no recursion, so a tree of
    # any depth ends (Python's own stack ends at about a thousand)
    stack = [names] if (names := _names(folder, left_out, walked)) is not None else []
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        if entry.name.startswith("."):
            continue
        try:
            mode = _mode(entry)
        except OSError as exc:  # a link to nothing, or a loop of links
            yield from _broken_link(entry, exc, left_out)
            continue
        if stat.S_ISDIR(mode):
            if (names := _inner(entry, left_out, walked)) is not None:
                stack.append(names)
        elif not _is_document(entry.name):
            left_out.file(entry.path)
        elif stat.S_ISREG(mode):
            yield Listed(entry.path, path=Path(entry.path))
        else:  # a pipe, a socket, a device: read once or never ends, no job's file
            yield Listed(entry.path, problem=NOT_REGULAR)


def _names(
    folder: Path, left_out: LeftOut, walked: set[tuple[int, int]]
) -> Iterator[os.DirEntry[str]] | None:
    """The folder's entries in name order, or None (counted in `left_out`) when it cannot be
    read."""
    try:
        info = folder.stat()
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        left_out.folder(str(folder), exc)
        return None
    walked.add((info.st_dev, info.st_ino))
    return iter(entries)


def _mode(entry: os.DirEntry[str]) -> int:
    """What the entry is (through a link, what it names): from the directory's listing, with no
    system call a file, except for a link."""
    if entry.is_symlink():
        return entry.stat().st_mode
    if entry.is_dir(follow_symlinks=False):
        return stat.S_IFDIR
    return stat.S_IFREG if entry.is_file(follow_symlinks=False) else 0


def _inner(
    entry: os.DirEntry[str], left_out: LeftOut, walked: set[tuple[int, int]]
) -> Iterator[os.DirEntry[str]] | None:
    """A folder's entries, unless it was walked already or cannot be read."""
    try:
        info = entry.stat()
    except OSError as exc:  # gone since its folder was listed
        left_out.folder(entry.path, exc)
        return None
    if (info.st_dev, info.st_ino) in walked:  # a link back up, or to a folder walked already
        target = os.path.realpath(entry.path) if entry.is_symlink() else None
        left_out.walked(entry.path, target)
        return None
    return _names(Path(entry.path), left_out, walked)


def _broken_link(entry: os.DirEntry[str], exc: OSError, left_out: LeftOut) -> Iterator[Listed]:
    """A link whose target is not there: a document refused (named as a document, or with no
    suffix: perhaps a folder, a share not mounted); any other name is left out as its file
    would be."""
    if not _is_document(entry.name) and Path(entry.name).suffix:
        left_out.file(entry.path)
        return
    try:
        target = os.readlink(entry.path)
    except OSError:
        target = "?"
    said = "does not exist" if exc.errno == errno.ENOENT else f"cannot be read ({exc.strerror})"
    yield Listed(entry.path, problem=f"a link to {target}, which {said}")


def bucket_lister(bucket: Bucket) -> KeyLister:
    """Every object under a prefix, one page of up to 1,000 keys at a time; a StorageError
    that says what to check when the bucket refuses the listing."""

    return bucket.objects


def count(documents: Iterator[Listed]) -> int:
    """How many documents a listing holds, keeping none of them."""
    return sum(1 for _ in documents)
