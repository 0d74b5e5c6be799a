"""`vlm-ocr run FILE... [--out DIR]`: local PDFs and images through the worker's pipeline, each
file as one job, carried as a RunPod request would carry it (`job_for_file`). The store is the
one the handler would use: the bucket when bucket settings are present, else `OUTPUT_DIR`;
`--out DIR` asks for a local folder.

The files and options are checked before the engine starts (`local_files`), and errors name the
file or the option the user gave. Each file gets a folder of its own, named from its name
(`local_files.result_folders`), before the engine starts, so a bucket that cannot be read is
said first, as the settings' problem. While pages are read, progress goes to stderr (`progress`).
Ctrl-C stops the run where it is: one line says how many pages are stored, which the same
command reuses when run again, and the run leaves once the stopped job's manifest is written and
the engine closed; a second Ctrl-C leaves at once."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import math
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..contract import JobResult
from ..errors import ConfigError, StorageError
from ..file_names import shown
from ..settings import Settings
from ..storage import JobKeys, ObjectMissing
from .local_files import (
    Held,
    LocalFile,
    check_files,
    check_options,
    check_out,
    file_kind,
    folder_name,
    in_our_words,
    pages_unused,
    result_folders,
    shown_name,
)
from .progress import CountingEngine, PageProgress, heartbeat
from .usage import prompt_help

if TYPE_CHECKING:
    from ..engines.base import Engine
    from ..pipeline.worker import Worker

PROGRESS_EVERY_S = 30.0  # a line this often when stderr is not a terminal
INTERRUPTED_STATUS = 130  # a shell's status for a command ended by Ctrl-C (128 + SIGINT)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="PDFs and images, each read as one job"
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="local results folder, each file in a folder of its own named from the file's name "
        "(default: the store the settings select: the bucket if configured, else OUTPUT_DIR)",
    )
    p.add_argument(
        "--pages", help='page selection for PDFs, e.g. "1-3,7" or "5-" (an image is read whole)'
    )
    p.add_argument("--prompt", help=prompt_help("the pages are read with"))
    p.add_argument("--max-pixels", type=int, help="page pixel budget (width × height)")
    p.add_argument(
        "--headers-footers",
        choices=("drop", "keep"),
        help="page headers and footers in the page text (default: drop)",
    )
    p.add_argument(
        "--searchable-pdf", action="store_true", help="also store the file as a searchable PDF"
    )
    p.add_argument("--json", action="store_true", help="print each job result as JSON")
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress and no log below warnings on stderr; the results still print",
    )
    p.add_argument(
        "--progress-every",
        type=float,
        default=PROGRESS_EVERY_S,
        metavar="SECONDS",
        help="when stderr is not a terminal, a progress line at least this often while pages "
        f"are read, 0 one as each page finishes (default {PROGRESS_EVERY_S:g}; on a terminal "
        "the line is live)",
    )


def job_for_file(path: Path, *, output_prefix: str | None = None, **options: Any) -> dict[str, Any]:
    """The job input that carries a local file, as a RunPod request would carry it: a PDF by
    its header, anything else as an image."""
    source = {"base64": base64.b64encode(path.read_bytes()).decode(), "name": shown_name(path)}
    job: dict[str, Any] = {"pdf": source} if file_kind(path) == "pdf" else {"images": [source]}
    job["output_prefix"] = output_prefix or folder_name(path)
    return job | {k: v for k, v in options.items() if v is not None}


def job_options(args: argparse.Namespace) -> dict[str, Any]:
    """The job fields the options set (those given)."""
    options = {
        "pages": args.pages,
        "prompt": args.prompt,
        "max_pixels": args.max_pixels,
        "headers_footers": args.headers_footers,
        "searchable_pdf": args.searchable_pdf or None,
    }
    return {k: v for k, v in options.items() if v is not None}


async def check(
    settings: Settings, args: argparse.Namespace
) -> tuple[list[LocalFile], list[str], list[str]]:
    """The files ready to run, every problem of the files and options (one line each), and the
    notes on options that do not apply to some files."""
    problems = check_options(job_options(args), settings.job.max_pages_per_job)
    if args.out is not None and (wrong := check_out(args.out)):
        problems.append(wrong)
    if args.progress_every < 0:
        problems.append(f"--progress-every: got {args.progress_every:g}; accepted: 0 or more")
    pages = None if problems else args.pages  # a bad selection is said once, not per file
    paths, twice = once_each(args.files)
    checked = await check_files(paths, pages, settings)
    problems += [f for f in checked if isinstance(f, str)]
    files = [f for f in checked if isinstance(f, LocalFile)]
    if problems:
        return files, problems, []
    refused, notes = pages_unused(args.pages, files)
    return files, [refused] if refused else [], twice + notes


def once_each(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """The files given, each once (the first spelling kept), and a note for each given more
    than once: it is one job, read once, not a second job that would find the first's pages
    and call them reused."""
    first: dict[Path, Path] = {}
    again: dict[Path, list[Path]] = {}
    for path in paths:
        try:
            same = path.resolve()
        except (OSError, RuntimeError):  # a link loop: check_file says what it is
            same = path.absolute()
        if same in first:
            again.setdefault(same, []).append(path)
        else:
            first[same] = path
    notes = []
    for same, more in again.items():
        spelt = sorted({str(p) for p in more} - {str(first[same])})
        also = f" (also as {', '.join(spelt)})" if spelt else ""
        notes.append(f"{first[same]}: given {len(more) + 1} times{also}; read once")
    return list(first.values()), notes


async def run_main(settings: Settings, args: argparse.Namespace) -> int:
    from ..engines.factory import make_engine
    from ..pipeline.worker import build_worker

    files, problems, notes = await check(settings, args)
    for problem in problems:  # all of them, before the engine starts
        print(f"vlm-ocr run: {problem}", file=sys.stderr)
    if problems:
        return 2
    for note in notes:
        print(f"vlm-ocr run: note: {note}", file=sys.stderr)
    if args.quiet:
        logging.getLogger().setLevel(logging.WARNING)
    if args.max_pixels is not None and args.max_pixels > settings.flat()["max_pixels"]:
        # the run starts its own engine: with the page budget asked for, not the default's
        settings = settings.with_(max_pixels=args.max_pixels)
    progress = PageProgress(
        sum(f.pages for f in files),
        sys.stderr,
        live=sys.stderr.isatty() and not args.quiet,
        every_s=math.inf if args.quiet else args.progress_every,
    )
    engine = cast("Engine", CountingEngine(make_engine(settings), progress))
    worker = build_worker(
        settings, engine, out_dir=Path(args.out) if args.out is not None else None
    )
    stop = Interrupt(asyncio.current_task(), progress)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop)
    try:  # a second Ctrl-C while the worker closes leaves at once, too
        return await run_worker(worker, files, args, progress, stop)
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def run_worker(
    worker: Worker,
    files: list[LocalFile],
    args: argparse.Namespace,
    progress: PageProgress,
    stop: Interrupt,
) -> int:
    """The files' folders (before the engine starts: a bucket that cannot be reached is said
    at once), the engine, and the files; on Ctrl-C, the line that says so, and out."""
    ticking = None
    try:
        folders = await file_folders(worker, files)
        await worker.start()
        progress.ready()
        if progress.live or 0 < progress.every_s < math.inf:
            ticking = asyncio.create_task(heartbeat(progress))
        failed = await run_files(worker, list(zip(files, folders, strict=True)), args, progress)
    except asyncio.CancelledError:
        if not stop.pressed:
            raise
        stop.task.uncancel()
        stop.say()
    finally:
        if ticking is not None:
            ticking.cancel()
        progress.clear()
        await worker.close()
    if stop.pressed:
        stop.leave()
        return INTERRUPTED_STATUS  # where `exit` returns (a test's)
    return 1 if failed else 0


async def file_folders(worker: Worker, files: list[LocalFile]) -> list[str]:
    """Each file's folder in the store (`local_files.result_folders`), found by the manifests
    earlier runs left there. A bucket that cannot be read is the settings' problem: said as
    one, with the key read in full."""

    async def held(folder: str) -> Held | None:
        key = JobKeys(worker.store.key_prefix + folder).manifest  # where the job writes it
        try:
            manifest = json.loads(await worker.store.read_text(key))
        except ObjectMissing:
            return None
        except ValueError:  # not a manifest of ours: the folder is not this file's
            return Held("?", frozenset())
        names = frozenset(str(page.get("source")) for page in manifest.get("pages") or [])
        return Held(manifest.get("input_sha256"), names)

    try:
        return await result_folders(files, held)
    except StorageError as exc:
        if worker.store.kind != "s3":
            raise
        raise ConfigError(f"{exc}; {bucket_fix(worker.settings)}") from None


def bucket_fix(settings: Settings) -> str:
    """The settings that select the bucket, as given, and the way round it."""
    bucket = settings.bucket
    return (
        f"the results go to the bucket the settings name (BUCKET_NAME={bucket.bucket_name} at "
        f"BUCKET_ENDPOINT_URL={bucket.bucket_endpoint_url}, under BUCKET_PREFIX="
        f"{bucket.bucket_prefix}, with BUCKET_ACCESS_KEY_ID and BUCKET_SECRET_ACCESS_KEY): mend "
        "them, or give --out DIR to write the results to a local folder"
    )


async def run_files(
    worker: Worker,
    files: list[tuple[LocalFile, str]],
    args: argparse.Namespace,
    progress: PageProgress,
) -> int:
    """Each file as one job in its folder, in turn, its summary printed as it ends; how many
    failed."""
    failed = 0
    for file, folder in files:
        options = job_options(args)
        if file.kind == "image":
            options.pop("pages", None)
        progress.file(shown_name(file.path))
        job = job_for_file(file.path, output_prefix=folder, **options)
        result = await worker.run(Path(shown_name(file.path)).stem, job, progress)
        failed += bool(result.error)
        progress.clear()
        if args.json:
            print(json.dumps(result.wire(), ensure_ascii=False, indent=2), flush=True)
        else:
            shared = folder != folder_name(file.path)  # another file's results are there
            print(summary(file.path, result, worker.store.uri, shared=shared), flush=True)
    return failed


class Interrupt:
    """The SIGINT handler: the first Ctrl-C cancels the run (the pages stored stay stored, the
    stopped job's manifest is written), closes the engine, and leaves without waiting for the
    pages the engine had in hand; a second one says the same line and leaves at once."""

    def __init__(
        self,
        task: asyncio.Task[Any] | None,
        progress: PageProgress,
        exit: Callable[[int], object] = os._exit,
    ) -> None:
        assert task is not None  # made in a coroutine
        self.task, self.progress, self.exit = task, progress, exit
        self.pressed = False
        self.in_hand = 0

    def __call__(self) -> None:
        if self.pressed:
            self.say(again=True)
            self.leave()
            return
        self.pressed = True
        self.in_hand = self.progress.reading  # the count is gone once their tasks are cancelled
        self.task.cancel()

    def say(self, *, again: bool = False) -> None:
        self.progress.clear()
        if again:
            waiting = ""
        else:
            pages = f", dropping the {plural(self.in_hand, 'page')} in hand" if self.in_hand else ""
            waiting = f"; stopping the engine{pages} (Ctrl-C again leaves at once)"
        print(
            f"vlm-ocr run: interrupted: {self.progress.stored} of {self.progress.total} pages "
            "stored; run the same command again to go on (the pages stored are reused, not read "
            f"again){waiting}",
            file=sys.stderr,
            flush=True,
        )

    def leave(self) -> None:
        """Out now, status 130. After the first Ctrl-C the manifest is written and the engine
        closed: a page an engine's thread may still be reading is nobody's, and waiting for it
        took seconds. The child processes end with this one (PDEATHSIG)."""
        sys.stdout.flush()
        sys.stderr.flush()
        self.exit(INTERRUPTED_STATUS)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def summary(path: Path, result: JobResult, uri: Any, *, shared: bool = False) -> str:
    """The file's outcome: its pages, where they are, and its folder (`shared`: another file of
    the run has the same name, and took the name first)."""
    if not result.pages:
        return f"{shown(str(path))}: FAILED: {in_our_words(result.error or '')}"
    t = result.totals
    reused = f" ({t.reused} reused from an earlier run)" if t.reused else ""
    lines = [
        f"{shown(str(path))}: {t.ok}/{t.pages} pages ok{reused}, {t.chars} characters, "
        f"{result.timings['total_s']:.1f} s -> {uri(result.manifest_key or result.prefix)}"
    ]
    note = f" (not {folder_name(path)}: it holds another file's results)" if shared else ""
    lines.append(f"  {'folder:':<10}{uri(result.prefix)}{note}")
    for page in result.pages:
        lines.append(
            f"  page {page.page:>4}  {page.status:<6} {page.key or in_our_words(page.error or '')}"
        )
    for label, key in (("document", result.document_key), ("pdf", result.searchable_pdf_key)):
        if key:
            lines.append(f"  {label + ':':<10}{uri(key)}")
    lines += [f"  note: {in_our_words(note)}" for note in result.notes]
    if result.error:
        lines.append(f"  error: {in_our_words(result.error)}")
    return "\n".join(lines)
