"""`vlm-ocr run FILE... [--out DIR]`: local PDFs and images through the worker's pipeline, each
file as one job, carried as a RunPod request would carry it (`job_for_file`). The store is the
one the handler would use: the bucket when bucket settings are present, else `OUTPUT_DIR`;
`--out DIR` asks for a local folder."""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
from pathlib import Path
from typing import Any

from ..contract import JobResult
from ..settings import Settings
from .usage import prompt_help


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
    p.add_argument("--pages", help='page selection for PDFs, e.g. "1-3,7"')
    p.add_argument("--prompt", help=prompt_help("the pages are read with"))
    p.add_argument("--max-pixels", type=int, help="page pixel budget")
    p.add_argument(
        "--headers-footers",
        choices=("drop", "keep"),
        help="page headers and footers in the page text (default: drop)",
    )
    p.add_argument(
        "--searchable-pdf", action="store_true", help="also store the file as a searchable PDF"
    )
    p.add_argument("--json", action="store_true", help="print each job result as JSON")


def job_for_file(path: Path, *, output_prefix: str | None = None, **options: Any) -> dict[str, Any]:
    """The job input that carries a local file, as a RunPod request would carry it."""
    from ..pipeline.render import is_image_file

    source = {"base64": base64.b64encode(path.read_bytes()).decode(), "name": path.name}
    job: dict[str, Any] = {"images": [source]} if is_image_file(path) else {"pdf": source}
    job["output_prefix"] = output_prefix or (
        re.sub(r"[^A-Za-z0-9._-]+", "_", path.stem).strip("._-") or "file"
    )
    return job | {k: v for k, v in options.items() if v is not None}


async def run_main(settings: Settings, args: argparse.Namespace) -> int:
    from ..pipeline.render import is_image_file
    from ..pipeline.worker import start_worker

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
                print(summary(path, result, worker.store.uri))
    finally:
        await worker.close()
    return 1 if failed else 0


def summary(path: Path, result: JobResult, uri: Any) -> str:
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
