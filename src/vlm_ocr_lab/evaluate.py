"""`vlm-ocr-lab eval`: how well an engine reads, against ground truth or against another output.

Against ground truth (`vlm-ocr-lab eval PAGES.jsonl`): every page of a page set runs through the
same pipeline as a job, and its text is scored by `textsim.similarity` (1 − Levenshtein / longer
length over letters, digits and CJK characters only). Per page, per language, per tag, and the
mean.

Between two outputs (`vlm-ocr-lab eval --compare A B`): the character agreement of each page pair,
and the critical tokens (article numbers, other numbers and dates, the modal words 得, 應, 須,
不得, 應不), which must be identical; each difference is listed in context (`compare.py`, the same
comparison a job's second opinion uses).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vlm_ocr.cli.run import job_for_file
from vlm_ocr.pipeline.compare import agree
from vlm_ocr.pipeline.textsim import similarity
from vlm_ocr.settings import Settings


@dataclass
class EvalPage:
    id: str
    path: Path
    truth: Path
    language: str = "unknown"
    tags: list[str] = field(default_factory=list)


def load_pages(jsonl: Path) -> list[EvalPage]:
    """A page set: one JSON object per line with `image` (or `pdf`), `truth`, optional
    `language` and `tags` (`source` and `layout` are read as tags too). Paths are relative to
    the file."""
    pages = []
    for n, line in enumerate(jsonl.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        rel = row.get("image") or row.get("pdf")
        if not rel or "truth" not in row:
            raise ValueError(f"{jsonl}:{n}: each line needs `image` (or `pdf`) and `truth`")
        tags = list(row.get("tags") or []) + [
            f"{k}:{row[k]}" for k in ("source", "layout") if row.get(k)
        ]
        path = jsonl.parent / rel
        pages.append(
            EvalPage(
                page_id(path),
                path,
                jsonl.parent / row["truth"],
                row.get("language", "unknown"),
                tags,
            )
        )
    return pages


def page_id(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", path.stem).strip("._-")[:150] or "page"


def load_outputs(where: Path) -> dict[str, str]:
    """Stored page texts by id: from a folder (`<id>/page-0001.md` → `<id>`; other pages keep
    their number) or from one job manifest (`page-0001` …). Failed partial texts are skipped."""
    if where.is_file():
        manifest = json.loads(where.read_text())
        root = where.parents[manifest.get("manifest_key", "m").count("/")]
        return {
            f"page-{p['page']:04d}": (root / p["key"]).read_text(encoding="utf-8")
            for p in manifest["pages"]
            if p.get("status") == "ok" and p.get("key")
        }
    out = {}
    for md in sorted(where.rglob("*.md")):
        rel = md.relative_to(where)
        if "failed" in rel.parts:
            continue
        key = (
            str(rel.parent)
            if rel.name == "page-0001.md" and rel.parent != Path(".")
            else str(rel.with_suffix(""))
        )
        out[key] = md.read_text(encoding="utf-8")
    return out


# --- against ground truth -----------------------------------------------------------------------


async def recognize_pages(
    settings: Settings, pages: list[EvalPage], out: Path, detection_order: bool
) -> dict[str, Any]:
    """Run each page through the worker pipeline into `out/<id>/`; returns the engine facts."""
    from vlm_ocr.engines.base import EngineOptions
    from vlm_ocr.engines.factory import make_engine
    from vlm_ocr.pipeline.worker import build_worker

    engine = make_engine(settings, EngineOptions(detection_order=detection_order))
    worker = build_worker(settings, engine, out_dir=out)
    await worker.start()
    try:
        for page in pages:
            result = await worker.run(page.id, job_for_file(page.path, output_prefix=page.id))
            print(f"  {page.id[:60]:<60} {result.status}", file=sys.stderr)
        return worker.engine_facts()
    finally:
        await worker.close()


def score(pages: list[EvalPage], outputs: dict[str, str]) -> dict[str, Any]:
    rows = []
    for page in pages:
        truth = page.truth.read_text(encoding="utf-8")
        text = outputs.get(page.id, "")
        rows.append(
            {
                "id": page.id,
                "language": page.language,
                "tags": page.tags,
                "similarity": round(similarity(text, truth), 4),
                "chars": len(text),
                "truth_chars": len(truth),
                "missing": page.id not in outputs,
            }
        )
    groups: dict[str, dict[str, list[float]]] = {
        "language": defaultdict(list),
        "tag": defaultdict(list),
    }
    for row in rows:
        groups["language"][row["language"]].append(row["similarity"])
        for tag in row["tags"]:
            groups["tag"][tag].append(row["similarity"])
    return {
        "pages": rows,
        "by_language": {k: _mean(v) for k, v in sorted(groups["language"].items())},
        "by_tag": {k: _mean(v) for k, v in sorted(groups["tag"].items())},
        "mean": _mean([r["similarity"] for r in rows]),
    }


def _mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 4) if values else 0.0


def print_scores(report: dict[str, Any]) -> None:
    print(f"{'page':<62}{'language':<20}{'similarity':>10}")
    for row in report["pages"]:
        flag = "  (no output)" if row["missing"] else ""
        print(f"{row['id'][:60]:<62}{row['language']:<20}{row['similarity']:>10.4f}{flag}")
    for lang, value in report["by_language"].items():
        print(f"{'language ' + lang:<82}{value:>10.4f}")
    for tag, value in report["by_tag"].items():
        print(f"{'tag ' + tag:<82}{value:>10.4f}")
    print(f"{'mean':<82}{report['mean']:>10.4f}")


# --- between two outputs ------------------------------------------------------------------------


def compare(outputs_a: dict[str, str], outputs_b: dict[str, str]) -> dict[str, Any]:
    rows = []
    for pid in sorted(set(outputs_a) | set(outputs_b)):
        a, b = outputs_a.get(pid), outputs_b.get(pid)
        if a is None or b is None:
            rows.append({"id": pid, "missing": "A" if a is None else "B"})
            continue
        found = agree(a, b)
        rows.append(
            {
                "id": pid,
                "agreement": found.agreement,
                "critical_ok": not found.differences,
                "differences": [asdict(d) for d in found.differences],
            }
        )
    paired = [r for r in rows if "agreement" in r]
    return {
        "pages": rows,
        "mean_agreement": _mean([r["agreement"] for r in paired]),
        "critical_ok": all(r.get("critical_ok", False) for r in rows),
    }


def print_comparison(report: dict[str, Any]) -> None:
    print(f"{'page':<52}{'agreement':>10}  critical tokens")
    for row in report["pages"]:
        if "missing" in row:
            print(f"{row['id'][:50]:<52}{'':>10}  missing in {row['missing']}")
            continue
        verdict = "identical" if row["critical_ok"] else f"{len(row['differences'])} differences"
        print(f"{row['id'][:50]:<52}{row['agreement']:>10.4f}  {verdict}")
        for d in row["differences"]:
            print(f"    {d['kind']}: A {d['a']!r} … {d['context_a']!r}")
            print(f"    {'':{len(d['kind'])}}  B {d['b']!r} … {d['context_b']!r}")
    print(
        f"{'mean agreement':<52}{report['mean_agreement']:>10.4f}  "
        f"{'critical tokens identical' if report['critical_ok'] else 'CRITICAL TOKENS DIFFER'}"
    )


# --- command line -------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "pages", nargs="?", type=Path, help="pages.jsonl of a page set with ground truth"
    )
    p.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("A", "B"),
        help="compare two stored outputs (folders or job manifests)",
    )
    p.add_argument(
        "--outputs", type=Path, help="score stored outputs from this folder instead of running"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("eval-out"),
        help="where the engine's page texts go (default eval-out/)",
    )
    p.add_argument("--report", type=Path, help="JSON report path (default <out>/report.json)")
    p.add_argument(
        "--detection-order",
        action="store_true",
        help="CPU engine: join lines in detection order (the baseline reading order)",
    )


async def eval_main(settings: Settings, args: argparse.Namespace) -> int:
    if args.compare:
        a, b = (load_outputs(p) for p in args.compare)
        report = compare(a, b)
        print_comparison(report)
        if args.report:
            args.report.write_text(json.dumps(report, ensure_ascii=False, indent=2))
        return 0 if report["critical_ok"] else 1
    if args.pages is None:
        print("vlm-ocr-lab eval: give PAGES.jsonl, or --compare A B", file=sys.stderr)
        return 2
    pages = load_pages(args.pages)
    engine: dict[str, Any] = {}
    if args.outputs is None:
        engine = await recognize_pages(settings, pages, args.out, args.detection_order)
    report = score(pages, load_outputs(args.outputs or args.out)) | {"engine": engine}
    print_scores(report)
    path = args.report or (args.outputs or args.out) / "report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, ensure_ascii=False, indent=2))
    print(f"report: {path}", file=sys.stderr)
    return 0
