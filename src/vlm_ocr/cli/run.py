"""`vlm-ocr run FILE... [--out DIR]`: local PDFs and images through the worker's pipeline, each
file as one job, carried as a RunPod request would carry it (`job_for_file`). The store is the
one the handler would use: the bucket when bucket settings are present, else `OUTPUT_DIR`;
`--out DIR` asks for a local folder.

The files and options are checked before the engine starts (`local_files`), and errors name the
file or the option the user gave. Each file gets a folder of its own, named from its name
(`local_files.result_folders`). While pages are read, progress goes to stderr (`progress`).
Ctrl-C stops the run where it is: one line says how many pages are stored, which the same
command reuses when run again; a second Ctrl-C leaves at once."""

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..contract import JobResult
from ..settings import Settings
from ..storage import JobKeys, ObjectMissing
from .local_files import (
    Held,
    LocalFile,
    check_file,
    check_options,
    check_out,
    file_kind,
    folder_name,
    in_our_words,
    pages_unused,
    result_folders,
)
from .progress import PageProgress
from .usage import prompt_help

if TYPE_CHECKING:
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
        help="when stderr is not a terminal, a progress line this often "
        f"(default {PROGRESS_EVERY_S:g}; on a terminal the line is live)",
    )


def job_for_file(path: Path, *, output_prefix: str | None = None, **options: Any) -> dict[str, Any]:
    """The job input that carries a local file, as a RunPod request would carry it: a PDF by
    its header, anything else as an image."""
    source = {"base64": base64.b64encode(path.read_bytes()).decode(), "name": path.name}
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


def check(
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
    checked = [check_file(path, pages, settings) for path in paths]
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
    from ..pipeline.worker import build_worker

    files, problems, notes = check(settings, args)
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
    worker = build_worker(settings, out_dir=Path(args.out) if args.out is not None else None)
    progress = PageProgress(
        sum(f.pages for f in files),
        sys.stderr,
        live=sys.stderr.isatty() and not args.quiet,
        every_s=math.inf if args.quiet else args.progress_every,
    )
    stop = Interrupt(asyncio.current_task(), progress)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop)
    try:
        await worker.start()
        failed = await run_files(worker, files, args, progress)
    except asyncio.CancelledError:
        if not stop.pressed:
            raise
        stop.task.uncancel()
        stop.say()
        return INTERRUPTED_STATUS
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        progress.clear()
        await worker.close()
    return 1 if failed else 0


async def run_files(
    worker: Worker, files: list[LocalFile], args: argparse.Namespace, progress: PageProgress
) -> int:
    """Each file as one job in its own folder, in turn, its summary printed as it ends; how
    many failed."""
    failed = 0

    async def held(folder: str) -> Held | None:
        try:
            manifest = json.loads(await worker.store.read_text(JobKeys(folder).manifest))
        except ObjectMissing:
            return None
        except ValueError:  # not a manifest of ours: the folder is not this file's
            return Held("?", frozenset())
        names = frozenset(str(page.get("source")) for page in manifest.get("pages") or [])
        return Held(manifest.get("input_sha256"), names)

    for file, folder in zip(files, await result_folders(files, held), strict=True):
        options = job_options(args)
        if file.kind == "image":
            options.pop("pages", None)
        progress.file(file.path.name)
        job = job_for_file(file.path, output_prefix=folder, **options)
        result = await worker.run(file.path.stem, job, progress)
        failed += bool(result.error)
        progress.clear()
        if args.json:
            print(json.dumps(result.wire(), ensure_ascii=False, indent=2), flush=True)
        else:
            shared = folder != folder_name(file.path)  # another file's results are there
            print(summary(file.path, result, worker.store.uri, shared=shared), flush=True)
    return failed


class Interrupt:
    """The SIGINT handler: the first Ctrl-C cancels the run (the pages stored stay stored); a
    second one says the same line and leaves at once."""

    def __init__(self, task: asyncio.Task[Any] | None, progress: PageProgress) -> None:
        assert task is not None  # made in a coroutine
        self.task, self.progress = task, progress
        self.pressed = False

    def __call__(self) -> None:
        if self.pressed:
            self.say()
            os._exit(INTERRUPTED_STATUS)  # the child processes end with this one (PDEATHSIG)
        self.pressed = True
        self.task.cancel()

    def say(self) -> None:
        self.progress.clear()
        print(
            f"vlm-ocr run: interrupted: {self.progress.stored} of {self.progress.total} pages "
            "stored; run the same command again to go on (the pages stored are reused, not read "
            "again)",
            file=sys.stderr,
            flush=True,
        )


def summary(path: Path, result: JobResult, uri: Any, *, shared: bool = False) -> str:
    """The file's outcome: its pages, where they are, and its folder (`shared`: another file of
    the run has the same name, and took the name first)."""
    if not result.pages:
        return f"{path}: FAILED: {in_our_words(result.error or '')}"
    t = result.totals
    reused = f" ({t.reused} reused from an earlier run)" if t.reused else ""
    lines = [
        f"{path}: {t.ok}/{t.pages} pages ok{reused}, {t.chars} characters, "
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
