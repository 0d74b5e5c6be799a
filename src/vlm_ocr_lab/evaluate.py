"""`vlm-ocr-lab eval`: how well an engine reads, against ground truth or against another output.

Against ground truth (`vlm-ocr-lab eval PAGES.jsonl`): every page of a page set runs through the
same pipeline as a job, and its text is scored by `textsim.similarity` (1 − Levenshtein / longer
length over letters, digits and CJK characters only). Per page, per language, per tag, and the
mean.

Between two outputs (`vlm-ocr-lab eval --compare A B`): the character agreement of each page pair,
and the critical tokens (article numbers, other numbers and dates, the modal words 得, 應, 須,
不得, 應不), which must be identical; each difference is listed in context (`compare.py`, the same
comparison a job's second opinion uses).

A mistake in what the command is given (a file that is not there, a line of the page set that does
not read, a folder that holds no job) is one line naming the file, and its line, with status 2.
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

from vlm_ocr.cli.results import one_line
from vlm_ocr.cli.run import job_for_file
from vlm_ocr.cli.usage import JSON_KINDS, UsageError, say
from vlm_ocr.contract import JobResult
from vlm_ocr.pipeline.compare import agree
from vlm_ocr.pipeline.textsim import similarity
from vlm_ocr.settings import Settings

PAGES_ACCEPTED = "a page set's pages.jsonl"
LINE_ACCEPTED = (
    'one JSON object a line, e.g. {"image": "p1.png", "truth": "p1.md", "language": "en", '
    '"tags": ["legal"]}, its paths relative to the file'
)
OUTPUTS_ACCEPTED = "a folder of stored outputs (page-NNNN.md under it) or a job's manifest.json"


@dataclass
class EvalPage:
    id: str
    path: Path
    truth: Path
    language: str = "unknown"
    tags: list[str] = field(default_factory=list)


def load_pages(jsonl: Path, *, need_images: bool = True) -> list[EvalPage]:
    """A page set: one JSON object per line with `image` (or `pdf`), `truth`, optional
    `language` and `tags` (`source` and `layout` are read as tags too). Paths are relative to
    the file. Checked whole before any page is read: each truth file (and each image, unless
    `need_images` is false: stored outputs are scored) is there and is text."""
    text = _text_of(jsonl, "PAGES", PAGES_ACCEPTED)
    pages = [
        _page_of(line, f"{jsonl}:{n}", jsonl.parent, need_images)
        for n, line in enumerate(text.splitlines(), 1)
        if line.strip()
    ]
    if not pages:
        raise UsageError("PAGES", f"{jsonl} holds no pages; accepted: {LINE_ACCEPTED}")
    return pages


def _text_of(path: Path, argument: str, accepted: str) -> str:
    if path.is_dir():
        raise UsageError(argument, f"{path} is a folder; accepted: {accepted}")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(argument, f"no such file: {path}; accepted: {accepted}") from None
    except UnicodeDecodeError:
        raise UsageError(argument, f"{path} is not text (UTF-8); accepted: {accepted}") from None
    except OSError as exc:
        raise UsageError(argument, f"{path} cannot be read ({exc.strerror})") from None


def _page_of(line: str, where: str, root: Path, need_images: bool) -> EvalPage:
    """One line of a page set (`where`: its file and line number, for what is said)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(
            where, f"not JSON ({exc.msg} at column {exc.colno}); accepted: {LINE_ACCEPTED}"
        ) from None
    if not isinstance(row, dict):
        kind = JSON_KINDS.get(type(row), "a value")
        raise UsageError(where, f"{kind}, not a JSON object; accepted: {LINE_ACCEPTED}")
    name = "image" if row.get("image") else "pdf"
    for needed in (name, "truth"):
        if not isinstance(row.get(needed), str) or not row[needed]:
            said = "`image` (or `pdf`)" if needed == name else f"`{needed}`"
            raise UsageError(where, f"{said} is missing or not a path; accepted: {LINE_ACCEPTED}")
    tags = row.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise UsageError(where, f"`tags` is not a list of strings; accepted: {LINE_ACCEPTED}")
    path, truth = root / row[name], root / row["truth"]
    _text_of(truth, f"{where}: `truth`", "the page's ground truth, a text file")
    if need_images and not path.is_file():
        raise UsageError(where, f"`{name}`: no such file: {path}")
    tags = tags + [f"{k}:{row[k]}" for k in ("source", "layout") if row.get(k)]
    return EvalPage(page_id(path), path, truth, str(row.get("language") or "unknown"), tags)


def page_id(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", path.stem).strip("._-")[:150] or "page"


def load_outputs(where: Path, argument: str = "--outputs") -> dict[str, str]:
    """Stored page texts by id: from a folder (`<id>/page-0001.md` → `<id>`; other pages keep
    their number) or from one job manifest (`page-0001` …). Failed partial texts are skipped,
    and so is a job's document.md (its pages together). A folder or manifest that is not there,
    or a manifest that does not read, is a UsageError naming `argument`."""
    if where.is_file():
        return manifest_outputs(where, argument)
    if not where.is_dir():
        raise UsageError(
            argument, f"no such folder or manifest: {where}; accepted: {OUTPUTS_ACCEPTED}"
        )
    out = {}
    for md in sorted(where.rglob("*.md")):
        rel = md.relative_to(where)
        if "failed" in rel.parts or is_job_document(md):
            continue
        key = (
            str(rel.parent)
            if rel.name == "page-0001.md" and rel.parent != Path(".")
            else str(rel.with_suffix(""))
        )
        out[key] = _text_of(md, argument, OUTPUTS_ACCEPTED)
    return out


def is_job_document(md: Path) -> bool:
    return md.name == "document.md" and (md.parent / "manifest.json").is_file()


def manifest_outputs(where: Path, argument: str) -> dict[str, str]:
    """The ok pages' texts of one job manifest, read beside it: a page's key relative to the
    manifest's own, so a job's folder reads wherever it was copied to."""
    try:
        job = JobResult.model_validate(json.loads(_text_of(where, argument, OUTPUTS_ACCEPTED)))
    except ValueError as exc:  # not JSON, or not a manifest (ValidationError)
        raise UsageError(
            argument,
            f"{where} is not a job manifest ({one_line(exc)}); accepted: {OUTPUTS_ACCEPTED}",
        ) from None
    folder = (job.manifest_key or "manifest.json").rpartition("/")[0]
    out = {}
    for page in job.pages:
        if page.status != "ok" or not page.key:
            continue
        path = where.parent / page.key.removeprefix(f"{folder}/" if folder else "")
        if not path.is_file():
            raise UsageError(
                argument, f"{where}: page {page.page}'s text is missing ({path} is not there)"
            )
        out[f"page-{page.page:04d}"] = _text_of(path, argument, OUTPUTS_ACCEPTED)
    return out


def job_outputs(where: Path, argument: str) -> dict[str, str]:
    """`load_outputs` of a folder or manifest the user named, refused when it holds no job."""
    found = load_outputs(where, argument)
    if not found:
        raise UsageError(
            argument,
            f"{where} holds no job: no stored page text in it; accepted: {OUTPUTS_ACCEPTED}",
        )
    return found


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
    try:
        if args.compare:
            return compare_command(args)
        return await score_command(settings, args)
    except UsageError as exc:
        return say("vlm-ocr-lab eval", exc)


def compare_command(args: argparse.Namespace) -> int:
    a, b = (job_outputs(p, "--compare") for p in args.compare)
    report = compare(a, b)
    print_comparison(report)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, ensure_ascii=False, indent=2))
    return 0 if report["critical_ok"] else 1


async def score_command(settings: Settings, args: argparse.Namespace) -> int:
    if args.pages is None:
        print("vlm-ocr-lab eval: give PAGES.jsonl, or --compare A B", file=sys.stderr)
        return 2
    pages = load_pages(args.pages, need_images=args.outputs is None)
    engine: dict[str, Any] = {}
    if args.outputs is None:
        engine = await recognize_pages(settings, pages, args.out, args.detection_order)
        outputs = load_outputs(args.out)
    else:
        outputs = job_outputs(args.outputs, "--outputs")
    report = score(pages, outputs) | {"engine": engine}
    print_scores(report)
    path = args.report or (args.outputs or args.out) / "report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, ensure_ascii=False, indent=2))
    print(f"report: {path}", file=sys.stderr)
    return 0
