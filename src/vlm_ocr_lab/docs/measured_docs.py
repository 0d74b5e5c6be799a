"""The measured figures in the docs, written from the GPU figures' data (`benchmarks/gpu.jsonl`,
read by `vlm_ocr_lab.measured`) and checked against it by the tests, so a figure is typed once:
as a row of the data. Each table below is one marked part of a document.

    python -m vlm_ocr_lab.docs.measured_docs                 every table
    python -m vlm_ocr_lab.docs.measured_docs --write FILE    rewrite the tables FILE marks

  gpu-starts      docs/models.md, Cold start: every start, by phase
  gpu-limits      docs/models.md, What limits each family: each model's last run at its defaults
  start-summary   docs/deploying.md, Keeping the start short: fresh, second worker, other mode
  bench-runs      docs/tools.md, Benchmark: every run with pages, its settings and its pace
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from vlm_ocr_lab import measured
from vlm_ocr_lab.docs import generated

GPU_PRICE = 3.99  # US$ an H200-hour, the example price the rows' costs are at

# The cold start's phases in the order they come, as the table names them: vLLM's own lines
# (`engines/vllm/logs.py`), the stretches worked out between them, and those earlier runs timed
# by hand from the log's timestamps.
PHASES = (
    ("first_log_line_at_s", "first log line at"),
    ("engine_config_s", "the launcher's config"),
    ("engine_core_start_s", "the engine core's start and handshake"),
    ("engine_core_at_s", "engine core up at"),
    ("worker_init_s", "its worker's start"),
    ("before_engine_init_s", "until engine init, the model load aside"),
    ("model_load_s", "model load"),
    ("weights_s", "weights"),
    ("engine_core_to_ready_s", "engine core to ready"),
    ("dynamo_s", "dynamo"),
    ("torch_compile_s", "torch.compile"),
    ("profiling_s", "profiling run"),
    ("deep_gemm_warmup_s", "DeepGEMM's kernels"),
    ("cuda_graphs_s", "CUDA graphs"),
    ("engine_init_s", "engine init"),
    ("engine_ready_at_s", "engine ready at"),
    ("api_servers_after_engine_s", "the API servers after the engine"),
    ("api_server_ready_at_s", "API servers ready at"),
    ("spawn_to_healthy_s", "spawn to healthy"),
    ("warmup_page_s", "warm-up page"),
)


def _model(run: measured.Run) -> str:
    return run.model.rsplit("/", 1)[-1] or run.family


def _settings(run: measured.Run) -> str:
    if not run.off_defaults:
        return "defaults"
    return ", ".join(f"`{k}={v}`" for k, v in run.off_defaults.items())


def _measured(run: measured.Run) -> str:
    return f"{run.date}, {run.commit}, vLLM {run.vllm}"


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:g} s"


def _pace(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _worker_pace(run: measured.Run) -> str:
    return _pace(run.pages_per_s) + (f" ({run.textless})" if run.textless else "")


def _phases(run: measured.Run) -> str:
    parts = [f"{label} {run.phases[key]:g} s" for key, label in PHASES if key in run.phases]
    return "; ".join(parts) or "not taken apart"


def _by_model(rows: list[measured.Run]) -> list[measured.Run]:
    """The rows grouped by model in the order each first appears, the file's order within."""
    order = list(dict.fromkeys(r.model for r in rows))
    return sorted(rows, key=lambda r: order.index(r.model))


def _table(header: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cells) + " |" for cells in lines]
    return "\n".join(out)


def starts_table(rows: list[measured.Run]) -> str:
    """Every start the data has, by phase."""
    lines = [
        [
            _model(r),
            r.start,
            _settings(r),
            f"**{_seconds(r.engine_ready_s)}**",
            _phases(r),
            _measured(r),
        ]
        for r in _by_model([r for r in rows if r.engine_ready_s is not None])
    ]
    header = [
        "model",
        "start",
        "settings",
        "engine ready, warm-up page included",
        "where the time went (vLLM's log)",
        "measured",
    ]
    return _table(header, lines)


def _ratio(run: measured.Run) -> str:
    return "—" if run.ratio is None else f"{run.ratio:.2f}"


def _failed(run: measured.Run) -> str:
    if not run.failed:
        return "0"
    reasons = "; ".join(f"{n} × {why}" for why, n in run.failed_by_reason.items())
    return f"**{run.failed} of {run.pages}**: {reasons}"


def limits_table(rows: list[measured.Run]) -> str:
    """Each model's last run with pages at its defaults: its pace through the worker and
    straight to the engine, its failures, and what vLLM's gauges showed meanwhile."""
    last: dict[str, measured.Run] = {}
    for r in rows:  # a fresh run has the direct path beside it: the last of those, else any
        if r.at_defaults and r.pages and (r.start == "fresh" or last.get(r.model) is None):
            last[r.model] = r
    lines = [
        [
            _model(r),
            f"{r.pages:,}",
            _worker_pace(r),
            _pace(r.direct_pages_per_s),
            _ratio(r),
            _failed(r),
            str(r.extra.get("gauges") or "—"),
            _measured(r),
        ]
        for r in last.values()
    ]
    header = [
        "model",
        "pages",
        "pages/s through the worker",
        "straight to the engine",
        "worker / direct",
        "failed",
        "vLLM's gauges meanwhile",
        "measured",
    ]
    return _table(header, lines)


def start_summary_table(rows: list[measured.Run]) -> str:
    """Per model, its last start at its defaults fresh and warm, and fresh in the start mode
    that is not its family's (`START_MODE=fast` for most)."""
    kinds = {
        "fresh": lambda r: r.at_defaults and r.start == "fresh",
        "warm": lambda r: r.at_defaults and r.start == "warm",
        "other": lambda r: r.off_defaults == measured.other_start(r.family) and r.start == "fresh",
    }
    models = list(dict.fromkeys(r.model for r in rows if r.engine_ready_s is not None))
    lines = []
    for model in models:
        mine = [r for r in rows if r.model == model and r.engine_ready_s is not None]
        found = {k: next((r for r in reversed(mine) if ok(r)), None) for k, ok in kinds.items()}
        if not any(found.values()):
            continue
        cells = [_seconds(r.engine_ready_s) if r else "—" for r in found.values()]
        if found["other"]:
            cells[-1] = f"{cells[-1]} (`{found['other'].start_mode}`)"
        when = sorted({f"{r.commit} (vLLM {r.vllm})" for r in found.values() if r})
        lines.append([model.rsplit("/", 1)[-1], *cells, ", ".join(when)])
    header = [
        "model",
        "fresh host",
        "second start, on the first's caches (a network volume)",
        "fresh in the other `START_MODE` (`fast` unless the family's is)",
        "measured at",
    ]
    return _table(header, lines)


def bench_runs_table(rows: list[measured.Run]) -> str:
    """Every run with pages: its settings, pace and cost."""
    lines = [
        [
            _model(r),
            _settings(r),
            r.start,
            f"{r.pages:,}",
            _failed(r),
            _worker_pace(r),
            _pace(r.direct_pages_per_s),
            _ratio(r),
            "—" if r.usd_per_million_pages is None else f"{r.usd_per_million_pages:,.0f}",
            _measured(r),
        ]
        for r in _by_model([r for r in rows if r.pages])
    ]
    header = [
        "model",
        "settings",
        "start",
        "pages",
        "failed",
        "pages/s",
        "direct",
        "worker / direct",
        f"US$ a million pages at US${GPU_PRICE} an hour",
        "measured",
    ]
    return _table(header, lines)


REGIONS: dict[str, Callable[[list[measured.Run]], str]] = {
    "gpu-starts": starts_table,
    "gpu-limits": limits_table,
    "start-summary": start_summary_table,
    "bench-runs": bench_runs_table,
}


def parts(text: str, rows: list[measured.Run] | None = None) -> dict[str, str]:
    """Each table a document marks, as the data gives it now."""
    rows = measured.runs() if rows is None else rows
    return {
        name: make(rows)
        for name, make in REGIONS.items()
        if generated.region(text, name) is not None
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        path = Path(sys.argv[2])
        generated.write(path, parts(path.read_text(encoding="utf-8")))
    else:
        runs = measured.runs()
        print("\n\n".join(f"{name}:\n{make(runs)}" for name, make in REGIONS.items()))
