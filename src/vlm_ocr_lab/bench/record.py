"""`vlm-ocr-lab bench --record FILE`: the run as one row of the GPU figures' data
(`vlm_ocr_lab.measured`, `benchmarks/gpu.jsonl`), built from the bench's own figures, the engine
facts and the environment the worker ran with, and checked by the data's own reader before it is
appended, so a row that the docs could not read is never written.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlm_ocr.settings import Settings
from vlm_ocr_lab import measured
from vlm_ocr_lab.bench.report import all_failures, passes_of

# The settings groups whose values change what the worker does with a page or how it serves
# the model; the rest (the bucket, fetching, the client) are where things are.
GROUPS = ("job", "render", "vlm", "vllm", "cpu_models", "model")
# Settings of those groups that say where things are or how the bench reaches them, not how the
# worker reads: never an override (and never a credential in the data).
NOT_OVERRIDES = frozenset(
    {
        "engine",
        "output_dir",
        "log_level",
        "model_name",
        "model_revision",
        "hf_home",
        "hf_hub_cache",
        "hf_hub_offline",
        "model_downloader",
        "served_model_name",
        "openai_base_url",
        "openai_api_key",
        "vllm_python",
        "vllm_port",
        "vllm_cache_seed",  # where the image keeps what its build seeded: a path, not a choice
    }
)
# What every run on the GPU host sets to measure at all (dev/gpu/env.sh): dummy weights, and
# no orientation model for the bench's upright pages. Kept in the row's `bench_settings`, apart
# from the overrides, so a run at the family's defaults reads as one.
BENCH_OWN = {"auto_rotate": "false", "vllm_extra_args": "--load-format dummy"}
# vLLM's own variables that change what a run measures and that the host sets otherwise than the
# image does, kept in `bench_settings` as they were: the host samples with vLLM's Triton top-p
# filter (`dev/gpu/env.sh`), the image with FlashInfer's.
ENGINE_OWN = ("VLLM_USE_FLASHINFER_SAMPLER",)
_VERSIONS = (
    "import importlib.metadata as m\n"
    "for p in ('vllm', 'transformers'):\n"
    "    try: print(m.version(p))\n"
    "    except m.PackageNotFoundError: print('none')\n"
)


def overrides(environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The worker's settings the environment sets to other than their defaults, by their
    environment names as the environment spelled them, and the bench's own settings apart (with
    the engine's variables of `ENGINE_OWN` the environment sets)."""
    given = {k.lower(): v for k, v in environ.items() if v != ""}
    ran, default = Settings.from_env(environ), Settings()
    changed, bench = {}, {}
    for group in GROUPS:
        now, was = dict(getattr(ran, group)), dict(getattr(default, group))
        for name, value in now.items():
            if name in NOT_OVERRIDES or value == was[name] or name not in given:
                continue
            spelled = given[name]
            if name == "vllm_extra_args":
                spelled = _extra_args_beyond_dummy(spelled, bench)
            elif BENCH_OWN.get(name) == spelled.lower():
                bench[name.upper()] = spelled
                continue
            if spelled:
                changed[name.upper()] = spelled
    bench |= {name: environ[name] for name in ENGINE_OWN if environ.get(name, "") != ""}
    return changed, bench


def _extra_args_beyond_dummy(value: str, bench: dict[str, str]) -> str:
    args = shlex.split(value)
    dummy = ["--load-format", "dummy"]
    for i in range(len(args) - 1):
        if args[i : i + 2] == dummy:
            bench["VLLM_EXTRA_ARGS"] = shlex.join(dummy)
            return shlex.join(args[:i] + args[i + 2 :])
    return value


def engine_versions(facts: dict[str, Any], vllm_python: str) -> tuple[str, str]:
    """vLLM's and transformers' versions as the engine's own Python has them (asked of it: the
    worker imports neither), or the facts' version for an engine without one."""
    if facts.get("name") != "vllm":
        return str(facts.get("version") or "unknown"), "unknown"
    try:
        out = subprocess.run(
            [vllm_python, "-c", _VERSIONS], capture_output=True, text=True, timeout=120
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        out = []
    vllm, transformers = [*out, "unknown", "unknown"][:2]
    if facts.get("version") not in (None, "", "unknown"):
        vllm = str(facts["version"])  # what the server said it is
    return vllm, transformers


def phases(facts: dict[str, Any]) -> dict[str, float]:
    """The engine facts' cold start flattened to seconds: vLLM's timed phases and moments, the
    stretches worked out between them, and the warm-up page."""
    cold = facts.get("cold_start") or {}
    flat = {k: v for k, v in cold.items() if _number(v)}
    flat |= {k: v for k, v in (cold.get("untimed") or {}).items() if _number(v)}
    if _number(facts.get("warmup_s")):
        flat["warmup_page_s"] = facts["warmup_s"]
    return flat


def start_kind(facts: dict[str, Any], given: str | None) -> measured.Start:
    """Warm when the engine reused the volume's caches or hit its compile cache, fresh when it
    built them, whatever the run was planned as (a second "fresh" run of one model and settings
    on a host reuses the first one's caches); `given` only where the start said neither."""
    state = (facts.get("caches") or {}).get("state")
    compiled = (facts.get("cold_start") or {}).get("compile_cache")
    if state == "reused" or compiled == "hit":
        return "warm"
    if state is not None or compiled is not None or given not in ("fresh", "warm"):
        return "fresh"
    return given  # type: ignore[return-value]


def gpu_name(facts: dict[str, Any]) -> str:
    """`NVIDIA H200` of the facts' `NVIDIA H200, 143771 MiB` (several GPUs: each once)."""
    names = [g.rsplit(",", 1)[0].strip() for g in str(facts.get("gpu") or "none").split(";")]
    return " + ".join(dict.fromkeys(names))


def head_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=measured.DATA.parents[1],
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def row(
    run: Any,
    facts: dict[str, Any],
    args: Any,
    settings: Settings,
    environ: Mapping[str, str],
    family: str,
) -> dict[str, Any]:
    """The run as one row: what measured it, what ran, and what came out."""
    vllm, transformers = engine_versions(facts, settings.vllm.vllm_python)
    changed, bench = overrides(environ)
    fig = run.figures
    direct = fig.get("direct") or {}
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "commit": args.commit or head_commit(),
        "gpu": gpu_name(facts),
        "vllm": vllm,
        "transformers": transformers,
        "family": family,
        "model": args.model or facts.get("model") or settings.model.model_name,
        "overrides": changed,
        "start": start_kind(facts, args.start),
        "engine_ready_s": round(run.cold_start, 1) if run.start_error is None else None,
        "phases": phases(facts),
        **_pages(run, args),
        "direct_pages_per_s": _round(direct.get("pages_per_s")),
        "note": args.note,
        **_details(run, facts, args, bench),
    }


def _pages(run: Any, args: Any) -> dict[str, Any]:
    """Pages, failures by reason, the pace of the ok pages (the last pass's) and its cost."""
    if run.start_error is not None:
        pages = args.pages * args.jobs * args.passes
        reasons = {f"start: {run.start_error}"[:200]: pages} if pages else {}
        return {
            "pages": pages,
            "failed": pages,
            "failed_by_reason": reasons,
            "pages_per_s": None,
            "usd_per_million_pages": None,
        }
    fig = run.figures
    failures: Counter[str] = all_failures(fig)
    pace = _round(fig.get("pages_per_s"))  # the cost follows the pace as the row gives it
    price = args.gpu_price
    return {
        "pages": sum(p["pages"] for p in passes_of(fig)),
        "failed": failures.total(),
        "failed_by_reason": dict(failures.most_common()),
        "pages_per_s": pace,
        "usd_per_million_pages": round(measured.usd_per_million(pace, price), 1)
        if pace and price
        else None,
    }


def _details(run: Any, facts: dict[str, Any], args: Any, bench: dict[str, str]) -> dict[str, Any]:
    """What else a reader of the row may need: how the bench ran and what the engine started
    with."""
    fig = run.figures
    direct = fig.get("direct") or {}
    out: dict[str, Any] = {
        "output_tokens": args.output_tokens,
        "greedy_temperature": args.greedy_temperature,
        "jobs": args.jobs,
        "api_server_count": facts.get("api_server_count"),
        "start_mode": facts.get("start_mode"),
        "max_num_batched_tokens": facts.get("max_num_batched_tokens"),
        "caches": (facts.get("caches") or {}).get("state"),
        "compile_cache": (facts.get("cold_start") or {}).get("compile_cache"),
        "sampler": facts.get("sampler"),
        "bench_settings": bench,
    }
    if run.start_error is not None:
        out["start_error"] = run.start_error
    if any(p.get("cut") for p in passes_of(fig)) or direct.get("cut"):
        out["cut"] = f"by --time-limit {args.time_limit:g} s"
    if direct.get("failed"):
        out["direct_failed_by_reason"] = dict(direct["failures"])
    if "skipped" in direct:
        out["direct_skipped"] = direct["skipped"]
    if direct.get("first"):  # the direct path took the engine's first busy minute, not the worker
        out["direct_first"] = True
    if textless := answers_without_text(fig):
        out["answers_without_text"] = textless
    return {k: v for k, v in out.items() if v not in (None, {}, "")}


def answers_without_text(fig: dict[str, Any]) -> int:
    """Answers of the worker's passes and the direct path that came back with no text."""
    runs = [*passes_of(fig), fig.get("direct") or {}]
    return sum((r.get("timeline") or {}).get("answers_without_text", 0) for r in runs)


def append(path: Path, data: dict[str, Any]) -> str:
    """Append the row to `path` once the data's reader accepts it; says what was written."""
    line = json.dumps(data, ensure_ascii=False)
    measured.parse(line, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")
    pace = data["pages_per_s"]
    return (
        f"{data['family']} {data['start']}, engine ready in {data['engine_ready_s']} s, "
        f"{data['pages']} pages, {data['failed']} failed, pages/s {pace}"
    )


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
