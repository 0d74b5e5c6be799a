"""`vlm-ocr`: the worker's pipeline and tools on the command line.

vlm-ocr run FILE... [--out DIR]   OCR local PDFs and images, as a job would
vlm-ocr bench [--pages N]         pages/s and per-stage time through the pipeline
vlm-ocr eval PAGES.jsonl          accuracy against ground truth (or --compare A B)
vlm-ocr plan CONFIG.json          GPU memory, and the pages that fit in the KV cache
vlm-ocr submit FILE.pdf --endpoint ID   a large PDF spread over an endpoint's workers
vlm-ocr show PREFIX --page N      a page drawn with the blocks found on it
vlm-ocr review RESULTS -o FILE    one HTML page to review a job's pages on
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

from ..contract import JobResult, PageReport
from ..settings import Settings
from . import evaluate, plan, review, show


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vlm-ocr", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="OCR local PDFs and images through the worker pipeline")
    run.add_argument("files", nargs="+", type=Path)
    run.add_argument(
        "--out",
        type=Path,
        help="local results folder (default: the store "
        "the settings select: the bucket if configured, else OUTPUT_DIR)",
    )
    run.add_argument("--pages", help='page selection for PDFs, e.g. "1-3,7"')
    run.add_argument("--prompt", help="prompt preset")
    run.add_argument("--max-pixels", type=int, help="page pixel budget")
    run.add_argument(
        "--headers-footers",
        choices=("drop", "keep"),
        help="page headers and footers in the page text (default: drop)",
    )
    run.add_argument(
        "--searchable-pdf", action="store_true", help="also store the file as a searchable PDF"
    )
    run.add_argument("--json", action="store_true", help="print each job result as JSON")

    bench = sub.add_parser("bench", help="measure pages/s and per-stage time per page")
    bench.add_argument(
        "--pages", type=int, help="pages per job (default 12; with --fanout, per document: 60)"
    )
    bench.add_argument("--jobs", type=int, default=1, help="jobs run at once (default 1)")
    bench.add_argument(
        "--passes",
        type=int,
        default=1,
        help="run the jobs N times on the same engine and print each pass (default 1); "
        "--direct compares with the last",
    )
    bench.add_argument("--out", type=Path, help="local results folder (default: a temp folder)")
    bench.add_argument("--bucket", action="store_true", help="store in the configured bucket")
    bench.add_argument(
        "--loopback-s3",
        action="store_true",
        help="store in an S3 server started on loopback (needs moto)",
    )
    bench.add_argument(
        "--output-tokens",
        type=int,
        help="make every answer exactly N tokens (ignore_eos), in the worker and the direct "
        "path alike: like-for-like figures on dummy weights",
    )
    bench.add_argument(
        "--memory",
        action="store_true",
        help="print the worker's peak memory for one page, 64 large images and a 2,000-page "
        "PDF (no engine), and the render cost per page",
    )
    bench.add_argument("--scenario", help=argparse.SUPPRESS)
    bench.add_argument(
        "--fanout",
        action="store_true",
        help="one document as one job on one worker, then spread over --workers local workers "
        "behind a stand-in for RunPod's endpoint (needs moto)",
    )
    bench.add_argument("--workers", type=int, default=2, help="workers for --fanout (default 2)")
    bench.add_argument(
        "--pages-per-job", type=int, default=10, help="job size for --fanout (default 10)"
    )
    bench.add_argument(
        "--layout",
        action="store_true",
        help="what blocks, figure crops and the searchable PDF cost per page (no engine; "
        "--pages scanned pages, default 24)",
    )
    bench.add_argument(
        "--second-opinion",
        action="store_true",
        help="jobs ask for the CPU engine's second opinion on every page (its cost per page)",
    )
    bench.add_argument(
        "--direct",
        action="store_true",
        help="also send the same pages straight to the engine's server",
    )

    evaluate.add_arguments(
        sub.add_parser(
            "eval", help="score an engine against ground truth, or compare two stored outputs"
        )
    )
    plan.add_arguments(sub.add_parser("plan", help="GPU memory and pages at once for a model"))

    submit = sub.add_parser(
        "submit", help="spread a large PDF over an endpoint's workers and put it back together"
    )
    submit.add_argument("file", type=Path)
    submit.add_argument("--endpoint", required=True, help="the RunPod endpoint id")
    submit.add_argument(
        "--pages-per-job",
        type=int,
        default=50,
        help="pages per job (default 50: 8 such jobs keep one worker's engine full, and a "
        "2,000-page document still spreads over many workers)",
    )
    submit.add_argument(
        "--prefix", help="where in the bucket (default documents/<name>-<content hash>)"
    )
    submit.add_argument(
        "--retries", type=int, default=2, help="resubmissions of a job that did not complete"
    )
    submit.add_argument(
        "--resume",
        action="store_true",
        help="skip the jobs the document manifest of an earlier run records as complete",
    )
    submit.add_argument("--out", type=Path, help="also write document.json and .txt here")
    submit.add_argument("--prompt", help="prompt preset for every job")
    submit.add_argument(
        "--headers-footers",
        choices=("drop", "keep"),
        help="page headers and footers in the page texts (default: drop)",
    )

    show.add_arguments(sub.add_parser("show", help="draw a page with the blocks found on it"))
    review.add_arguments(
        sub.add_parser("review", help="write one HTML page to review a job's pages on")
    )

    args = parser.parse_args(argv)
    if args.command == "plan":
        return plan.plan_main(args)
    settings = Settings.from_env(os.environ)
    logging.basicConfig(
        level=settings.job.log_level, format="%(levelname)s %(name)s: %(message)s", force=True
    )
    if args.command == "run":
        return asyncio.run(_run(settings, args))
    if args.command == "eval":
        return asyncio.run(evaluate.eval_main(settings, args))
    if args.command == "submit":
        return asyncio.run(_submit(settings, args))
    if args.command == "show":
        return show.run(settings, args)
    if args.command == "review":
        return review.run(settings, args)
    if args.command == "bench" and args.memory:
        from .bench import memory_main, render_overhead

        if not args.scenario:
            render_overhead()
        return memory_main(settings, args.scenario)
    if args.command == "bench" and args.layout:
        from .layout_bench import layout_main

        return asyncio.run(layout_main(settings, args.pages or 24))
    if args.command == "bench" and args.fanout:
        from .fanout_bench import fanout_main

        return fanout_main(
            settings,
            pages=args.pages or 60,
            workers=args.workers,
            pages_per_job=args.pages_per_job,
        )
    if args.command == "bench":
        from .bench import bench_main

        args.pages = args.pages or 12
        return asyncio.run(bench_main(settings, args))
    return 2


def job_for_file(path: Path, *, output_prefix: str | None = None, **options: Any) -> dict[str, Any]:
    """The job input that carries a local file, as a RunPod request would carry it."""
    from ..pipeline.render import is_image_file

    source = {"base64": base64.b64encode(path.read_bytes()).decode(), "name": path.name}
    job: dict[str, Any] = {"images": [source]} if is_image_file(path) else {"pdf": source}
    job["output_prefix"] = output_prefix or (
        re.sub(r"[^A-Za-z0-9._-]+", "_", path.stem).strip("._-") or "file"
    )
    return job | {k: v for k, v in options.items() if v is not None}


async def _run(settings: Settings, args: argparse.Namespace) -> int:
    from ..pipeline.assemble import start_worker
    from ..pipeline.render import is_image_file

    missing = [str(p) for p in args.files if not p.is_file()]
    if missing:
        print(f"vlm-ocr run: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    worker = await start_worker(settings, out_dir=args.out)
    failed = 0
    try:
        for path in args.files:
            pages = args.pages if not is_image_file(path) else None
            job = job_for_file(
                path,
                pages=pages,
                prompt=args.prompt,
                max_pixels=args.max_pixels,
                headers_footers=args.headers_footers,
                searchable_pdf=args.searchable_pdf or None,
            )
            result = await worker.run(path.stem, job)
            failed += bool(result.error)
            if args.json:
                print(json.dumps(result.wire(), ensure_ascii=False, indent=2))
            else:
                print(_summary(path, result, worker.store.uri))
    finally:
        await worker.close()
    return 1 if failed else 0


async def _submit(settings: Settings, args: argparse.Namespace) -> int:
    """Run a submission with a progress bar over pages; Ctrl-C cancels the jobs it submitted."""
    import signal

    from tqdm import tqdm

    from ..client.endpoint import EndpointError
    from ..client.submit import Options, Submission, pdf_page_count
    from ..contract import format_ranges
    from ..errors import StorageError

    if not args.file.is_file():
        print(f"vlm-ocr submit: no such file: {args.file}", file=sys.stderr)
        return 2
    options = Options(
        args.endpoint,
        pages_per_job=args.pages_per_job,
        prefix=args.prefix,
        retries=args.retries,
        resume=args.resume,
        out=args.out,
        job_options={
            k: v
            for k, v in (("prompt", args.prompt), ("headers_footers", args.headers_footers))
            if v
        }
        or None,
    )
    try:
        total = pdf_page_count(args.file)
        bar = tqdm(total=total, unit="page", desc=args.file.name)
        done: set[int] = set()

        def on_page(page: PageReport) -> None:
            if page.page not in done and page.stored:
                done.add(page.page)
                bar.update(1)

        submission = Submission(
            args.file, settings.bucket, settings.client, options, on_page=on_page
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
    t = manifest.totals
    uri = submission.store.uri
    print(
        f"{args.file}: {t.pages} pages in {t.jobs} jobs ({t.submissions} submissions): "
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
    return 0 if manifest.complete else 1


def _summary(path: Path, result: JobResult, uri: Any) -> str:
    if not result.pages:
        return f"{path}: FAILED: {result.error}"
    t = result.totals
    lines = [
        f"{path}: {t.ok}/{t.pages} pages ok, {t.chars} characters, "
        f"{result.timings['total_s']:.1f} s -> {uri(result.manifest_key or result.prefix)}"
    ]
    for page in result.pages:
        lines.append(f"  page {page.page:>4}  {page.status:<6} {page.key or page.error}")
    for label, key in (("document", result.document_key), ("pdf", result.searchable_pdf_key)):
        if key:
            lines.append(f"  {label + ':':<10}{uri(key)}")
    if result.error:
        lines.append(f"  error: {result.error}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
