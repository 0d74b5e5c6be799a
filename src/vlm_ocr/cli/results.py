"""A job's results as `vlm-ocr show` and `vlm-ocr review` read them, through the contract: the
manifest as a `JobResult`, each page's blocks as `PageBlocks`, its stored text and its second
reading.

RESULTS, the same argument in both, is a job's folder on disk (the one holding its
manifest.json), or its prefix in the store the settings select (the bucket under BUCKET_PREFIX
when one is configured, else OUTPUT_DIR). A prefix that already starts with BUCKET_PREFIX (a key
as `vlm-ocr run` prints it) and an s3:// address in the bucket are taken too. The manifest's keys
are the store's; a folder on disk may have been copied from anywhere, so there they are read
relative to the job's own prefix."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ..blocks import PageBlocks
from ..contract import JobResult, PageReport
from ..errors import StorageError
from ..settings import Settings
from ..storage import (
    BucketInputs,
    JobKeys,
    LocalStore,
    ObjectMissing,
    S3Store,
    Store,
    open_store,
)
from .usage import UsageError

READS_AT_ONCE = 16  # pages read from the store at once (a bucket answers in tens of ms)
NAMED = 5  # job folders named when RESULTS is the folder above them
ACCEPTED = (
    "a job's folder (the one holding its manifest.json), or the job's prefix in the store the "
    "settings select (the bucket under BUCKET_PREFIX when configured, else OUTPUT_DIR)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """RESULTS, as `show` and `review` both take it (and `--dir`, show's old way of naming a
    local results folder, hidden)."""
    parser.add_argument("results", metavar="RESULTS", help=ACCEPTED)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)


def stores(settings: Settings) -> tuple[Store, BucketInputs | None]:
    """The store RESULTS names a prefix in, and the reader of inputs named by key: the bucket's
    when one is configured, else OUTPUT_DIR, only read (a reader makes no folder)."""
    if settings.bucket.configured:
        return open_store(settings)
    return LocalStore(settings.job.output_dir), None


def one_line(exc: ValueError) -> str:
    """What was wrong, in one line: JSON's own message, or a manifest's first wrong field."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the document"
        more = f", and {exc.error_count() - 1} more" if exc.error_count() > 1 else ""
        return f"{where}: {first['msg']}{more}"
    return str(exc).splitlines()[0]


def jobs_below(path: Path, named: int = NAMED) -> str:
    """The job folders one level below `path` (`vlm-ocr run --out DIR` makes one per file), as
    the rest of a sentence saying to give one; "" when there are none."""
    try:
        found = sorted(d for d in path.iterdir() if (d / "manifest.json").is_file())
    except OSError:
        return ""
    return give_one([str(d) for d in found[:named]], len(found) - named)


def submitted_jobs(path: Path, named: int = NAMED) -> str:
    """Where the jobs are of a document whose folder `vlm-ocr submit --out` wrote (its
    document.json names them, in the bucket), as the rest of a sentence; "" for another folder."""
    try:
        document = json.loads((path / "document.json").read_text(encoding="utf-8"))
        keys = [str(p["manifest_key"]) for p in document["parts"] if p.get("manifest_key")]
    except (OSError, ValueError, TypeError, KeyError):
        return ""
    if not keys:
        return ""
    jobs = [key.removesuffix("/manifest.json") for key in keys]
    more = f" and {len(jobs) - named:,} more" if len(jobs) > named else ""
    return (
        f": it is the folder `vlm-ocr submit` wrote for {document.get('source', 'a document')}, "
        "whose jobs' results are in the bucket; give one of them as RESULTS, with the bucket "
        f"settings ({', '.join(jobs[:named])}{more})"
    )


def give_one(found: list[str], more: int = 0) -> str:
    """The rest of a sentence naming the job folders `found` inside RESULTS (and `more` others),
    saying to give one; "" when there are none."""
    if not found:
        return ""
    if len(found) == 1 and more <= 0:
        return f", but the job folder {found[0]} is inside it: give that as RESULTS"
    others = f" and {more:,} more" if more > 0 else ""
    listed = ", ".join(found)
    return f", but job folders are inside it: give one of them as RESULTS ({listed}{others})"


def prefixes_of(results: str, store: Store) -> list[str]:
    """The job prefixes RESULTS may name in the store, in the order tried: under BUCKET_PREFIX,
    then as given when it starts with BUCKET_PREFIX already (a key as `vlm-ocr run` prints it);
    an s3:// address in the store's bucket is its key."""
    if results.startswith("s3://") and store.kind == "s3":
        bucket = store.uri("")
        if not results.startswith(bucket):
            raise UsageError(
                "RESULTS", f"{results} is not in the bucket the settings name ({bucket})"
            )
        return [results.removeprefix(bucket).strip("/")]
    name = results.strip("/")
    if store.key_prefix and name.startswith(store.key_prefix):
        return [store.key_prefix + name, name]
    return [store.key_prefix + name]


async def jobs_in_store(store: Store, prefix: str, named: int = NAMED) -> str:
    """As `jobs_below`, for a prefix in the store: the job folders right under it (a `vlm-ocr
    submit` document's folder holds one per job), named as RESULTS takes them; "" when there
    are none, or the store cannot say."""
    if isinstance(store, LocalStore):
        try:
            below = sorted(d.name for d in (store.root / prefix).iterdir())
        except OSError:
            return ""
        folders = [f"{prefix}/{name}" for name in below if (store.root / prefix / name).is_dir()]
        jobs = [(store.root / f / "manifest.json").is_file() for f in folders]
        found = [f for f, job in zip(folders, jobs, strict=True) if job]
        return give_one(found[:named], len(found) - named)
    if not isinstance(store, S3Store):
        return ""
    folders = await _bucket_folders(store, prefix)
    jobs = await asyncio.gather(*(_has_manifest(store, f) for f in folders[:named]))
    found = [f for f, job in zip(folders[:named], jobs, strict=True) if job]
    shown = [f.removeprefix(store.key_prefix) for f in found]
    return give_one(shown, len(folders) - named)


async def _bucket_folders(store: S3Store, prefix: str) -> list[str]:
    """The folders right under `prefix` in the bucket: one listing (S3's delimiter), whatever
    they hold; none when the bucket refuses it (this is only a hint)."""
    try:
        return await store.bucket.folders(prefix)
    except StorageError:
        return []


async def _has_manifest(store: S3Store, folder: str) -> bool:
    try:
        await store.bucket.head(f"{folder}/manifest.json")
    except StorageError:
        return False
    return True


def blocks_unread(key: str, exc: ValidationError) -> str:
    """Why a page's blocks file cannot be read, in one line: damaged (not JSON), or JSON of
    another shape (another version's, or edited)."""
    if any(error["type"] == "json_invalid" for error in exc.errors()):
        return (
            f"its blocks file {key} is not valid JSON (damaged?); run the job again to rewrite it"
        )
    return f"its blocks file {key} is not one this version reads ({one_line(exc)})"


class ResultsError(Exception):
    """The job's results cannot be read; the message says where and why."""


@dataclass(frozen=True)
class PageView:
    """One page as stored: its report, its text (a failed page's partial text), its blocks and
    the CPU engine's reading; `problems` says what could not be read."""

    report: PageReport
    text: str | None = None
    text_key: str | None = None
    partial: bool = False
    blocks: PageBlocks | None = None
    second: str | None = None
    problems: tuple[str, ...] = ()


class Results:
    """Reads one job's objects from a store."""

    def __init__(
        self, store: Store, manifest_key: str, *, folder: bool, others: Sequence[str] = ()
    ) -> None:
        self.store = store
        self.manifest_key = manifest_key
        self.folder = folder  # a job's folder on disk: keys are read relative to its prefix
        self.others = tuple(others)  # manifests tried after the first when it is not there
        self._strip = ""

    @classmethod
    def at(cls, results: str, store: Store, folder: Path | None = None) -> Results:
        """RESULTS as a folder holding a manifest (under `folder`, show's old `--dir`), else
        as a prefix in `store`."""
        path = Path(results) if folder is None else folder / results
        if (path / "manifest.json").is_file():
            return cls(LocalStore(path), "manifest.json", folder=True)
        if path.is_dir() or folder is not None:
            said = jobs_below(path) or submitted_jobs(path) or f"; accepted: {ACCEPTED}"
            raise UsageError("RESULTS", f"{path} holds no manifest.json{said}")
        if path.is_file():
            raise UsageError("RESULTS", f"{path} is a file; accepted: {ACCEPTED}")
        if path.is_absolute():  # a folder meant, not a prefix in the store
            raise UsageError("RESULTS", f"no such folder: {path}; accepted: {ACCEPTED}")
        first, *others = (JobKeys(p).manifest for p in prefixes_of(results, store))
        return cls(store, first, folder=False, others=others)

    async def job(self) -> JobResult:
        raw = await self._manifest()
        where = self.store.uri(self.manifest_key)
        try:
            job = JobResult.model_validate(json.loads(raw))
        except ValueError as exc:  # not JSON, or not a manifest (ValidationError)
            raise UsageError(
                "RESULTS", f"{where} is not a job manifest ({one_line(exc)}); accepted: {ACCEPTED}"
            ) from None
        if self.folder and job.prefix:
            self._strip = f"{job.prefix}/"
        return job

    async def _manifest(self) -> str:
        """The manifest's text, from the first of the keys RESULTS may mean that is there."""
        for key in (self.manifest_key, *self.others):
            try:
                raw = await self.store.read_text(key)
            except ObjectMissing:
                continue
            except StorageError as exc:
                where = self.store.uri(key)
                raise ResultsError(f"the job manifest at {where} cannot be read ({exc})") from None
            self.manifest_key = key
            return raw
        for key in (self.manifest_key, *self.others):
            if below := await jobs_in_store(self.store, key.removesuffix("/manifest.json")):
                where = self.store.uri(key)
                raise UsageError("RESULTS", f"no job manifest at {where}{below}")
        raise UsageError(
            "RESULTS",
            f"no such folder here, and no job manifest at {self.store.uri(self.manifest_key)}; "
            f"accepted: {ACCEPTED}",
        )

    async def pages(self, reports: Sequence[PageReport]) -> list[PageView]:
        """The pages, in the order given, read a few at a time."""
        gate = asyncio.Semaphore(READS_AT_ONCE)

        async def one(report: PageReport) -> PageView:
            async with gate:
                return await self.page(report)

        return list(await asyncio.gather(*(one(r) for r in reports)))

    async def page(self, report: PageReport) -> PageView:
        problems: list[str] = []
        text_key = report.key or report.partial_key
        text = await self._text(text_key, "text", problems)
        second = await self._text(report.second_key, "second reading", problems)
        blocks = None
        raw = await self._text(report.blocks_key, "blocks", problems)
        if raw is not None:
            try:
                blocks = PageBlocks.model_validate_json(raw)
            except ValidationError as exc:
                problems.append(blocks_unread(report.blocks_key or "", exc))
        return PageView(
            report,
            text,
            text_key,
            partial=report.key is None and text is not None,
            blocks=blocks,
            second=second,
            problems=tuple(problems),
        )

    async def _text(self, key: str | None, what: str, problems: list[str]) -> str | None:
        if key is None:
            return None
        try:
            return await self.store.read_text(key.removeprefix(self._strip))
        except (StorageError, UnicodeDecodeError) as exc:
            problems.append(f"its {what} ({key}) could not be read: {exc}")
            return None

    def where(self, key: str) -> str:
        return self.store.uri(key.removeprefix(self._strip))
