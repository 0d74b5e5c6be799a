"""The documents a submission names, as a stream: files, folders (walked recursively), list files
(one path or `s3://` key a line) and prefixes of the configured bucket (listed a page of keys at a
time). Nothing is collected: a 5,000-document folder or a bucket prefix of a million keys costs
the memory of one directory's names or one page of keys.

Arguments are checked before anything runs (a missing path, another bucket: a usage error); a
list file's lines are read as the run goes, and a line that names nothing becomes one refused
document in the report.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..storage import Bucket
from .documents import DOCUMENT_SUFFIXES, Listed

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
                raise UsageError(f"--list {path}: no such file")

    def _problem(self, arg: str) -> str | None:
        """None if the argument (or a list file's line) names something; else why not."""
        target = s3_target(arg)
        if target is not None:
            problem = None
            if self.bucket is None:
                problem = "s3:// keys are read from the configured bucket, and BUCKET_NAME is unset"
            elif target.bucket != self.bucket:
                problem = (
                    f"{arg}: the endpoint reads bucket {self.bucket!r} (BUCKET_NAME), "
                    f"not {target.bucket!r}"
                )
        else:
            problem = None if Path(arg).exists() else f"{arg}: no such file or folder"
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

    def documents(self) -> Iterator[Listed]:
        for arg in self.arguments:
            yield from self._expand(arg)
        for path in self.list_files:
            yield from self._listed_in(path)

    def _listed_in(self, path: Path) -> Iterator[Listed]:
        import sys

        lines = sys.stdin if str(path) == "-" else path.open(encoding="utf-8")
        try:
            for raw in lines:
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                problem = self._problem(line)
                if problem is not None:
                    yield Listed(line, problem=problem)
                else:
                    yield from self._expand(line)
        finally:
            if lines is not sys.stdin:
                lines.close()

    def _expand(self, arg: str) -> Iterator[Listed]:
        target = s3_target(arg)
        if target is None:
            path = Path(arg)
            yield from walk(path) if path.is_dir() else [Listed(arg, path=path)]
        elif not target.is_prefix:
            yield Listed(arg, key=target.key)
        else:
            assert self.lister is not None, "a bucket prefix needs the bucket's lister"
            for key, size, etag in self.lister(target.key):
                if _is_document(key) and not key.startswith(self.results_prefix):
                    yield Listed(f"s3://{target.bucket}/{key}", key=key, size=size, etag=etag)


def walk(folder: Path) -> Iterator[Listed]:
    """The folder's documents, depth first in name order (the same order on every run), one
    directory's names in memory at a time; hidden entries and linked folders are left out."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_dir(follow_symlinks=False):
            yield from walk(Path(entry.path))
        elif entry.is_file() and _is_document(entry.name):
            yield Listed(entry.path, path=Path(entry.path))


def bucket_lister(bucket: Bucket) -> KeyLister:
    """Every object under a prefix, one page of up to 1,000 keys at a time; a StorageError
    that says what to check when the bucket refuses the listing."""

    def keys(prefix: str) -> Iterator[tuple[str, int, str]]:
        lister = bucket.client.get_paginator("list_objects_v2")
        pages = iter(lister.paginate(Bucket=bucket.name, Prefix=prefix))
        while True:
            try:
                page = next(pages, None)
            except Exception as exc:
                raise bucket.error("LIST", prefix, exc) from None
            if page is None:
                return
            for obj in page.get("Contents") or []:
                yield obj["Key"], int(obj.get("Size") or 0), str(obj.get("ETag") or "")

    return keys


def count(documents: Iterator[Listed]) -> int:
    """How many documents a listing holds, keeping none of them."""
    return sum(1 for _ in documents)
