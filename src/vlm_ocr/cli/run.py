"""`vlm-ocr run FILE... [--out DIR]`: local PDFs and images through the worker's pipeline, each
file as one job, carried as a RunPod request would carry it (`job_for_file`). The store is the
one the handler would use: the bucket when bucket settings are present, else `OUTPUT_DIR`;
`--out DIR` asks for a local folder.

The files and options are checked before the engine starts (`local_files`), and errors name the
file or the option the user gave. While pages are read, progress goes to stderr (`progress`)."""

from __future__ import annotations

import argparse
import base64
import json
import logging
import math
import re
import sys
from pathlib import Path
from typing import Any

from ..contract import JobResult
from ..settings import Settings
from .local_files import LocalFile, check_file, check_options, file_kind, in_our_words
from .progress import PageProgress
from .usage import prompt_help

PROGRESS_EVERY_S = 30.0  # a line this often when stderr is not a terminal


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="PDFs and images, each read as one job"
    )
    p.add_argument(
        "--out",
        type=Path,
        help="local results folder (default: the store "
        "the settings select: the bucket if configured, else OUTPUT_DIR)",
    )
    p.add_argument("--pages", help='page selection for PDFs, e.g. "1-3,7" or "5-"')
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
    job["output_prefix"] = output_prefix or (
        re.sub(r"[^A-Za-z0-9._-]+", "_", path.stem).strip("._-") or "file"
    )
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


def check(settings: Settings, args: argparse.Namespace) -> tuple[list[LocalFile], list[str]]:
    """The files ready to run, and every problem of the files and options, one line each."""
    problems = check_options(job_options(args), settings.job.max_pages_per_job)
    if args.progress_every < 0:
        problems.append(f"--progress-every: got {args.progress_every:g}; accepted: 0 or more")
    pages = None if problems else args.pages  # a bad selection is said once, not per file
    checked = [check_file(path, pages, settings) for path in args.files]
    problems += [f for f in checked if isinstance(f, str)]
    return [f for f in checked if isinstance(f, LocalFile)], problems


async def run_main(settings: Settings, args: argparse.Namespace) -> int:
    from ..pipeline.worker import start_worker

    files, problems = check(settings, args)
    for problem in problems:  # all of them, before the engine starts
        print(f"vlm-ocr run: {problem}", file=sys.stderr)
    if problems:
        return 2
    if args.quiet:
        logging.getLogger().setLevel(logging.WARNING)
    worker = await start_worker(settings, out_dir=args.out)
    progress = PageProgress(
        sum(f.pages for f in files),
        sys.stderr,
        live=sys.stderr.isatty() and not args.quiet,
        every_s=math.inf if args.quiet else args.progress_every,
    )
    failed = 0
    try:
        for file in files:
            options = job_options(args)
            if file.kind == "image":
                options.pop("pages", None)
            progress.file(file.path.name)
            result = await worker.run(file.path.stem, job_for_file(file.path, **options), progress)
            failed += bool(result.error)
            progress.clear()
            if args.json:
                print(json.dumps(result.wire(), ensure_ascii=False, indent=2), flush=True)
            else:
                print(summary(file.path, result, worker.store.uri), flush=True)
    finally:
        progress.clear()
        await worker.close()
    return 1 if failed else 0


def summary(path: Path, result: JobResult, uri: Any) -> str:
    if not result.pages:
        return f"{path}: FAILED: {in_our_words(result.error or '')}"
    t = result.totals
    lines = [
        f"{path}: {t.ok}/{t.pages} pages ok, {t.chars} characters, "
        f"{result.timings['total_s']:.1f} s -> {uri(result.manifest_key or result.prefix)}"
    ]
    for page in result.pages:
        lines.append(
            f"  page {page.page:>4}  {page.status:<6} {page.key or in_our_words(page.error or '')}"
        )
    for label, key in (("document", result.document_key), ("pdf", result.searchable_pdf_key)):
        if key:
            lines.append(f"  {label + ':':<10}{uri(key)}")
    if result.error:
        lines.append(f"  error: {in_our_words(result.error)}")
    return "\n".join(lines)
