"""A job's results as `vlm-ocr show` and `vlm-ocr review` read them, through the contract: the
manifest as a `JobResult`, each page's blocks as `PageBlocks`, its stored text and its second
reading.

RESULTS, the same argument in both, is a job's folder on disk (the one holding its
manifest.json), or its prefix in the store the settings select (the bucket under BUCKET_PREFIX
when one is configured, else OUTPUT_DIR). The manifest's keys are the store's; a folder on disk
may have been copied from anywhere, so there they are read relative to the job's own prefix."""

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
from ..storage import BucketInputs, JobKeys, LocalStore, ObjectMissing, Store
from .usage import UsageError

READS_AT_ONCE = 16  # pages read from the store at once (a bucket answers in tens of ms)
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
        from ..pipeline.assemble import make_store

        return make_store(settings)
    return LocalStore(settings.job.output_dir), None


def one_line(exc: ValueError) -> str:
    """What was wrong, in one line: JSON's own message, or a manifest's first wrong field."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the document"
        more = f", and {exc.error_count() - 1} more" if exc.error_count() > 1 else ""
        return f"{where}: {first['msg']}{more}"
    return str(exc).splitlines()[0]


def jobs_below(path: Path, named: int = 5) -> str:
    """The job folders one level below `path` (`vlm-ocr run --out DIR` makes one per file), as
    the rest of a sentence saying to give one; "" when there are none."""
    try:
        found = sorted(d for d in path.iterdir() if (d / "manifest.json").is_file())
    except OSError:
        return ""
    if not found:
        return ""
    if len(found) == 1:
        return f", but the job folder {found[0]} is inside it: give that as RESULTS"
    more = f" and {len(found) - named:,} more" if len(found) > named else ""
    listed = ", ".join(str(d) for d in found[:named])
    return f", but job folders are inside it: give one of them as RESULTS ({listed}{more})"


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

    def __init__(self, store: Store, manifest_key: str, *, folder: bool) -> None:
        self.store = store
        self.manifest_key = manifest_key
        self.folder = folder  # a job's folder on disk: keys are read relative to its prefix
        self._strip = ""

    @classmethod
    def at(cls, results: str, store: Store, folder: Path | None = None) -> Results:
        """RESULTS as a folder holding a manifest (under `folder`, show's old `--dir`), else
        as a prefix in `store`."""
        path = Path(results) if folder is None else folder / results
        if (path / "manifest.json").is_file():
            return cls(LocalStore(path), "manifest.json", folder=True)
        if path.is_dir() or folder is not None:
            said = jobs_below(path) or f"; accepted: {ACCEPTED}"
            raise UsageError("RESULTS", f"{path} holds no manifest.json{said}")
        if path.is_file():
            raise UsageError("RESULTS", f"{path} is a file; accepted: {ACCEPTED}")
        return cls(store, JobKeys(store.key_prefix + results.strip("/")).manifest, folder=False)

    async def job(self) -> JobResult:
        where = self.store.uri(self.manifest_key)
        try:
            raw = await self.store.read_text(self.manifest_key)
            job = JobResult.model_validate(json.loads(raw))
        except ObjectMissing:
            raise UsageError(
                "RESULTS",
                f"no such folder here, and no job manifest at {where}; accepted: {ACCEPTED}",
            ) from None
        except StorageError as exc:
            raise ResultsError(f"the job manifest at {where} cannot be read ({exc})") from None
        except ValueError as exc:  # not JSON, or not a manifest (ValidationError)
            raise UsageError(
                "RESULTS", f"{where} is not a job manifest ({one_line(exc)}); accepted: {ACCEPTED}"
            ) from None
        if self.folder and job.prefix:
            self._strip = f"{job.prefix}/"
        return job

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
                problems.append(f"its blocks file is not one this version reads: {exc}")
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
