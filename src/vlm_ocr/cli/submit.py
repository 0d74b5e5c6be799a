"""`vlm-ocr submit PATH... --endpoint ID`: documents spread over an endpoint's workers
(`client.corpus`): one PDF put back together as before, or a corpus of files, folders, list
files and bucket prefixes, with one display over it all, a corpus report and its cost; safe to
stop (Ctrl-C cancels the jobs at RunPod) and to run again (what is finished is skipped).

Exit status: 0 every document ok, 1 some not (failed, partial, refused, unfinished), 2 a usage
error or no document found (nothing was sent), 130 interrupted."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..settings import Settings
from .usage import prompt_help

if TYPE_CHECKING:  # the client is imported when a submission runs, not with the command line
    from ..client.corpus import CorpusRun
    from ..client.submit import DocumentManifest, Options


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "sources",
        nargs="*",
        metavar="PATH",
        help="PDFs and images, folders (walked recursively) and s3://BUCKET/PREFIX of the "
        "configured bucket (those documents are not uploaded again)",
    )
    p.add_argument(
        "--list",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="a file naming documents, one path or s3:// key a line ('-': standard input)",
    )
    p.add_argument("--endpoint", required=True, help="the RunPod endpoint id")
    p.add_argument(
        "--pages-per-job",
        type=int,
        default=50,
        help="pages per job (default 50: 8 such jobs keep one worker's engine full, and a "
        "2,000-page document still spreads over many workers); a smaller document is one job",
    )
    p.add_argument(
        "--max-in-flight",
        type=int,
        metavar="N",
        help="jobs queued or running at RunPod at once (default: from the endpoint's workers "
        "and the jobs' size, said at the start)",
    )
    p.add_argument(
        "--prefix",
        help="where in the bucket: one document's folder (default documents/<name>-<content "
        "hash>), or for a corpus the folder its documents' folders go in (default documents)",
    )
    _run_arguments(p)


def _run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--retries",
        type=int,
        default=2,
        help="times a job that did not complete (a worker lost, a time-out) is sent again",
    )
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="send again the pages that failed for their own reasons in an earlier run",
    )
    p.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)  # always, now
    p.add_argument(
        "--out",
        type=Path,
        help="also write document.json, .md and .txt here (a folder per document for a "
        "corpus, with the corpus report; those of documents finished earlier are copied from "
        "the bucket)",
    )
    p.add_argument(
        "--report",
        type=Path,
        help="the corpus report, one JSON line per document (default: corpus.jsonl in --out, "
        "or here; for one document, none unless asked)",
    )
    p.add_argument(
        "--gpu-price",
        type=float,
        metavar="USD_PER_HOUR",
        help="what a worker costs an hour (all its GPUs), to price the run's GPU time",
    )
    p.add_argument("--prompt", help=prompt_help("every job reads its pages with"))
    p.add_argument(
        "--headers-footers",
        choices=("drop", "keep"),
        help="page headers and footers in the page texts (default: drop)",
    )


class Usage(ValueError):
    """A command line nothing can be sent for; exit status 2."""


def check(args: argparse.Namespace) -> None:
    from ..contract import check_prefix
    from ..errors import InputError
    from ..prompts import PRESETS

    if not args.sources and not args.list:
        raise Usage("name at least one file, folder, --list FILE or s3:// prefix")
    for name, low in (("--pages-per-job", 1), ("--max-in-flight", 1), ("--retries", 0)):
        value = getattr(args, name[2:].replace("-", "_"))
        if value is not None and value < low:
            raise Usage(f"{name} {value}: at least {low}")
    if args.gpu_price is not None and args.gpu_price < 0:
        raise Usage(f"--gpu-price {args.gpu_price:g}: a price in US$ an hour, at least 0")
    if args.prompt is not None and args.prompt not in PRESETS:
        raise Usage(
            f"--prompt {args.prompt}: no such preset; accepted: {', '.join(sorted(PRESETS))}"
        )
    if args.prefix is not None:
        try:
            check_prefix(args.prefix.strip("/"))
        except InputError as exc:
            raise Usage(f"--prefix: {exc.message}") from None
    check_files(args)


REPORT_ACCEPTED = "accepted: a file to write the report in (made if it is not there)"


def check_files(args: argparse.Namespace) -> None:
    """--out and --report, before anything is sent: a job's results would be lost to a folder
    that cannot be written, and a run's report to a name that is a folder."""
    from .local_files import cannot_write, check_out

    problem = check_out(str(args.out)) if args.out is not None else None
    if problem:
        raise Usage(problem)
    if args.report is None:
        return
    report = args.report.absolute()
    if report.is_dir():
        raise Usage(f"--report: {args.report} is a folder, not a file; {REPORT_ACCEPTED}")
    there = next(p for p in report.parents if p.exists())
    if not there.is_dir():
        raise Usage(
            f"--report: {there} is a file, so {args.report} cannot be made; {REPORT_ACCEPTED}"
        )
    if why := cannot_write(report if report.exists() else there):
        raise Usage(f"--report: {args.report} cannot be written ({why})")


def prepare(settings: Settings, args: argparse.Namespace) -> CorpusRun:
    """The run the command line asks for, or Usage / ValueError saying why none can be."""
    from ..client.corpus import CorpusOptions, CorpusRun
    from ..client.listing import Corpus, bucket_lister

    check(args)
    b = settings.bucket
    corpus = Corpus(args.sources, args.list, b.bucket_name, results_prefix=f"{b.bucket_prefix}/")
    corpus.check()
    single = corpus.single_file is not None
    options = options_of(args, single=single)
    report = args.report
    if report is None and not single:
        report = (args.out or Path(".")) / "corpus.jsonl"
    run = CorpusRun(
        corpus,
        settings,
        options,
        CorpusOptions(max_in_flight=args.max_in_flight, report=report, gpu_price=args.gpu_price),
    )
    corpus.lister = bucket_lister(run.shared.store.bucket)
    return run


def options_of(args: argparse.Namespace, *, single: bool = True) -> Options:
    from ..client.submit import Options

    job_options = {
        k: v for k, v in (("prompt", args.prompt), ("headers_footers", args.headers_footers)) if v
    }
    prefix = args.prefix.strip("/") if args.prefix else None
    return Options(
        args.endpoint,
        pages_per_job=args.pages_per_job,
        prefix=prefix if single else None,
        base=(prefix or "documents") if not single else "documents",
        retries=args.retries,
        resume=True,
        retry_failed=args.retry_failed,
        out=args.out,
        out_folders=not single,
        job_options=job_options or None,
    )


async def submit_main(settings: Settings, args: argparse.Namespace) -> int:
    from ..client.listing import UsageError
    from ..file_names import shown
    from .submit_view import View

    try:
        run = prepare(settings, args)
    except (Usage, UsageError, ValueError) as exc:
        print(f"vlm-ocr submit: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a list file that cannot be read
        said = f"{exc.filename}: cannot be read ({exc.strerror})"
        print(f"vlm-ocr submit: {shown(said)}", file=sys.stderr)
        return 2
    single = run.corpus.single_file
    view = View(run.progress, single=shown(single.name) if single else None)
    run.note = view.write
    with view.showing_logs():
        code = await _supervised(run, view)
    if code is not None:
        return code
    if single is not None:
        return _single_outcome(run.corpus.arguments[0], run)
    if run.summary.exit_code == 2:  # the listing held no document: nothing was sent
        from ..client.listing import nothing

        named = [*run.corpus.arguments, *(f"--list {p}" for p in run.corpus.list_files)]
        print(f"vlm-ocr submit: {nothing(run.summary.left_out, named)}", file=sys.stderr)
        return 2
    for line in ["", *run.summary.lines(), *_report_lines(run)]:
        print(line)
    return run.summary.exit_code


def _report_lines(run: CorpusRun) -> list[str]:
    """Where the corpus report and its summary are, once the run wrote them."""
    report = run.report
    if report.path is None:
        return []
    return [f"report: {report.path}", f"summary: {report.summary_path}"]


async def _supervised(run: CorpusRun, view) -> int | None:  # type: ignore[no-untyped-def]
    """The run with its display, Ctrl-C and its failures; an exit status when it ends early."""
    from ..client.endpoint import EndpointError
    from ..client.listing import UsageError
    from ..errors import StorageError

    task = asyncio.ensure_future(run.run())
    drawing = asyncio.ensure_future(view.run())
    _on_interrupt(task, view.write)
    try:
        await task
    except asyncio.CancelledError:
        view.close()
        print(_interrupted(run), file=sys.stderr)
        return 130
    except UsageError as exc:  # a list read as the run goes (standard input) that is no list
        view.close()
        print(f"vlm-ocr submit: {exc}", file=sys.stderr)
        for line in [*run.summary.lines(), *_report_lines(run)] if run.summary.documents else []:
            print(line)
        return 2
    except (EndpointError, StorageError) as exc:
        view.close()
        started = run.progress.documents_taken > 0
        print(f"vlm-ocr submit: {exc}", file=sys.stderr)
        if not started:  # the endpoint or the bucket refused this client: nothing was sent
            return 1 if getattr(exc, "unreachable", False) else 2
        for line in [*run.summary.lines(), *_report_lines(run)]:
            print(line)
        return 1
    finally:
        drawing.cancel()
        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
    view.close()
    return None


def _on_interrupt(task: asyncio.Future[object], say: Callable[[str], None]) -> None:
    """The first Ctrl-C stops the run cleanly (its jobs at RunPod cancelled); a second one
    leaves at once."""

    def interrupted() -> None:
        if task.cancelled() or getattr(task, "_stopping", False):
            say("stopping now; jobs still at RunPod run on (they are in the bucket for a rerun)")
            os._exit(130)
        task._stopping = True  # type: ignore[attr-defined]
        say("stopping: cancelling the jobs at RunPod (Ctrl-C again to leave at once)")
        task.cancel()

    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, interrupted)


def _interrupted(run: CorpusRun) -> str:
    from ..contract import format_ranges

    cancelled = len(getattr(run, "cancelled", []))
    if run.corpus.single_file is not None:
        m = run.last_manifest
        stored = sorted(p.page for p in (m.pages if m else []) if p.stored)
        return (
            f"interrupted: cancelled {cancelled} job(s); pages stored: "
            f"{format_ranges(stored) or 'none'}; run again to finish (what is stored is kept)"
        )
    p = run.progress
    return (
        f"interrupted: cancelled {cancelled} job(s); {p.documents['ok']} documents finished, "
        f"{p.documents_done - p.duplicates - p.documents['ok']} not; run again to go on "
        "(finished documents are skipped)"
    )


def _single_outcome(typed: str, run: CorpusRun) -> int:
    """One document's outcome; a refusal names the file as it was typed."""
    from ..file_names import shown

    path = Path(typed)
    manifest, line = run.last_manifest, run.last_line
    if line is not None and line.status == "refused":
        print(shown(f"vlm-ocr submit: {typed}: {line.error}"), file=sys.stderr)
        return 1
    if manifest is None:
        said = line.error if line else "nothing was sent"
        print(shown(f"vlm-ocr submit: {said}"), file=sys.stderr)
        return 1
    print_outcome(path, manifest, run.shared.store.uri, earlier=bool(line and line.earlier))
    return 0 if manifest.complete else 1


def print_outcome(
    path: Path, manifest: DocumentManifest, uri: Callable[[str], str], *, earlier: bool = False
) -> None:
    from ..file_names import shown

    t = manifest.totals
    unread = f", {t.not_read} not read" if t.not_read else ""
    path = Path(shown(str(path)))  # (a name's control characters escaped)
    if earlier:
        print(
            f"{path}: finished by an earlier run, nothing sent: {t.pages} pages in {t.jobs} "
            f"jobs: {t.ok} ok, {t.blank} blank, {t.failed} failed{unread}"
        )
    else:
        print(
            f"{path}: {t.pages} pages in {t.jobs} jobs ({t.submissions} submissions): "
            f"{t.ok} ok, {t.blank} blank, {t.failed} failed{unread}, {t.reused} reused; "
            f"{manifest.wall_s or 0:.1f} s"
        )
    print(f"manifest: {uri(manifest.manifest_key)}")
    if manifest.text_key:
        print(f"text:     {uri(manifest.text_key)}")
    if manifest.markdown_key:
        print(f"markdown: {uri(manifest.markdown_key)}")
    for part in manifest.parts:
        if part.status != "ok":
            print(f"  pages {part.pages}: {part.status}: {part.error}")
