"""`vlm-ocr submit FILE.pdf --endpoint ID`: a large PDF spread over an endpoint's workers and put
back together (`client.submit`), with a progress bar over pages; Ctrl-C cancels the jobs it
submitted."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..contract import PageReport
from ..settings import Settings
from .usage import prompt_help

if TYPE_CHECKING:  # the client is imported when a submission runs, not with the command line
    from ..client.submit import DocumentManifest, Options


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, metavar="FILE", help="the PDF to read")
    p.add_argument("--endpoint", required=True, help="the RunPod endpoint id")
    p.add_argument(
        "--pages-per-job",
        type=int,
        default=50,
        help="pages per job (default 50: 8 such jobs keep one worker's engine full, and a "
        "2,000-page document still spreads over many workers)",
    )
    p.add_argument("--prefix", help="where in the bucket (default documents/<name>-<content hash>)")
    p.add_argument(
        "--retries", type=int, default=2, help="resubmissions of a job that did not complete"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="skip the jobs the document manifest of an earlier run records as complete",
    )
    p.add_argument("--out", type=Path, help="also write document.json and .txt here")
    p.add_argument("--prompt", help=prompt_help("every job reads its pages with"))
    p.add_argument(
        "--headers-footers",
        choices=("drop", "keep"),
        help="page headers and footers in the page texts (default: drop)",
    )


async def submit_main(settings: Settings, args: argparse.Namespace) -> int:
    """Run a submission with a progress bar over pages; Ctrl-C cancels the jobs it submitted."""
    import signal

    from tqdm import tqdm

    from ..client.endpoint import EndpointError
    from ..client.submit import Submission, pdf_page_count
    from ..contract import format_ranges
    from ..errors import StorageError

    if not args.file.is_file():
        print(f"vlm-ocr submit: no such file: {args.file}", file=sys.stderr)
        return 2
    try:
        total = pdf_page_count(args.file)
        bar = tqdm(total=total, unit="page", desc=args.file.name)
        done: set[int] = set()

        def on_page(page: PageReport) -> None:
            if page.page not in done and page.stored:
                done.add(page.page)
                bar.update(1)

        submission = Submission(
            args.file, settings.bucket, settings.client, options_of(args), on_page=on_page
        )
    except ValueError as exc:
        print(f"vlm-ocr submit: {exc}", file=sys.stderr)
        return 2
    task = asyncio.ensure_future(submission.run())
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, task.cancel)
    try:
        manifest = await task
    except asyncio.CancelledError:
        bar.close()
        cancelled = await submission.cancel_active()
        m = submission.manifest
        stored = sorted(p.page for p in (m.pages if m else []) if p.stored)
        print(
            f"interrupted: cancelled {len(cancelled)} job(s); pages stored: "
            f"{format_ranges(stored) or 'none'}; run again (with --resume) to finish",
            file=sys.stderr,
        )
        return 130
    except (ValueError, EndpointError, StorageError) as exc:
        bar.close()
        print(f"vlm-ocr submit: {exc}", file=sys.stderr)
        return 1
    bar.close()
    print_outcome(args.file, manifest, submission.store.uri)
    return 0 if manifest.complete else 1


def options_of(args: argparse.Namespace) -> Options:
    from ..client.submit import Options

    job_options = {
        k: v for k, v in (("prompt", args.prompt), ("headers_footers", args.headers_footers)) if v
    }
    return Options(
        args.endpoint,
        pages_per_job=args.pages_per_job,
        prefix=args.prefix,
        retries=args.retries,
        resume=args.resume,
        out=args.out,
        job_options=job_options or None,
    )


def print_outcome(path: Path, manifest: DocumentManifest, uri: Callable[[str], str]) -> None:
    t = manifest.totals
    print(
        f"{path}: {t.pages} pages in {t.jobs} jobs ({t.submissions} submissions): "
        f"{t.ok} ok, {t.blank} blank, {t.failed} failed, {t.reused} reused; "
        f"{manifest.wall_s:.1f} s"
    )
    print(f"manifest: {uri(manifest.manifest_key)}")
    if manifest.text_key:
        print(f"text:     {uri(manifest.text_key)}")
    if manifest.markdown_key:
        print(f"markdown: {uri(manifest.markdown_key)}")
    for part in manifest.parts:
        if part.status != "ok":
            print(f"  pages {part.pages}: {part.status}: {part.error}")
