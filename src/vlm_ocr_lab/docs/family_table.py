"""The README's table of the families' checkpoints and its "how to choose", written from
`FAMILIES` (each checkpoint's makers' figures, its licence, its shapes in `examples/` sized by
`vlm-ocr plan`) and from the GPU check's data file (`benchmarks/gpu.jsonl`, through
`vlm_ocr_lab.measured`: pages/s through the worker and straight to the engine, the cold start,
the cost of a million pages, and the vLLM that measured them). A checkpoint never run on the GPU
says so. The tests compare the README with what this writes now.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from vlm_ocr.cli.plan import A4_POINTS, PROMPT_TOKENS, plan
from vlm_ocr.engines.families import FAMILIES, Checkpoint, Family, detect
from vlm_ocr.settings import RenderSettings
from vlm_ocr_lab import measured
from vlm_ocr_lab.measured import Run

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
MAX_PIXELS = RenderSettings.model_fields["max_pixels"].default
GPU_PRICE = 3.99  # US$ an H200-hour, the price the GPU check's costs are at
# "Near-best": within this many points of the best olmOCR-bench figure, about the 95 % interval of
# a difference between two models there (each figure's own is ±0.8-0.9 on its makers' runs)
NEAR_POINTS = 1.5
PERMISSIVE = ("Apache-2.0", "MIT")
NOT_MEASURED = "not measured yet"


@dataclass(frozen=True)
class Row:
    family: type[Family]
    checkpoint: Checkpoint
    run: Run | None  # its newest fresh start at the family's defaults
    warm: Run | None  # and on warm caches
    #: and its newest fresh start in the start mode that is not the family's
    other: Run | None = None

    @property
    def licence(self) -> str:
        return self.checkpoint.licence or self.family.licence

    @property
    def cost(self) -> float | None:
        return self.run.usd_per_million_pages if self.run else None


def rows() -> list[Row]:
    found = []
    runs = measured.runs()
    for family in FAMILIES.values():
        for c in family.checkpoints:
            own = [r for r in runs if r.model == c.repo]
            # the newest fresh run that benched pages; a start alone only where none did
            benched = [r for r in own if r.pages]
            fresh = measured.latest(family.name, start="fresh", rows=benched) or measured.latest(
                family.name, start="fresh", rows=own
            )
            other_start = measured.other_start(family.name)
            other = measured.latest(family.name, overrides=other_start, rows=own)
            # on warm caches in the mode the table shows it in (`pace`)
            warm = measured.latest(
                family.name,
                start="warm",
                overrides=other_start if fresh is None and other else None,
                rows=own,
            )
            found.append(Row(family, c, fresh, warm, other))
    return found


@cache
def planned(example: str) -> str:
    """Weights and pages at once on 80 and 141 GB, as `vlm-ocr plan` sizes them at the
    family's defaults (an A4 page drawn as the family draws it)."""
    if not example:
        return "—"
    path = EXAMPLES / f"{example}.config.json"
    config = json.loads(path.read_text())
    family = detect(config, str(path), max_pixels=MAX_PIXELS).family
    budget = family.budget(MAX_PIXELS)
    prompt = family.prompt.text if family.prompt else ""
    plans = [
        plan(
            config,
            model_dir=None,
            gpu_memory_gb=gb,
            kv_cache_dtype="fp8",
            page_size=budget.size_for(*A4_POINTS, pdf=True),
            max_pixels=budget.max_pixels,
            max_tokens=family.sampling.max_tokens,
            max_model_len=family.max_model_len,
            gpu_memory_utilization=0.9,
            tensor_parallel_size=1,
            family=family,
            prompt_tokens=30 + len(prompt) // 3 if family.prompt else PROMPT_TOKENS,
        )
        for gb in (80, 141)
    ]
    pages = " / ".join(f"{p.pages_at_once:,}" if p.pages_at_once else "does not fit" for p in plans)
    return f"{plans[0].weights_gb:.1f} GB; {pages}"


def score(c: Checkpoint, best: float | None) -> str:
    if c.olmocr_bench is None:
        text = "—"
    else:
        text = f"{c.olmocr_bench:.1f}"
        text = f"**{text}**" if c.olmocr_bench == best else text
    notes = [
        n
        for n in (
            c.score_note,
            c.omnidocbench
            and f"OmniDocBench v1.0 edit {c.omnidocbench} (EN / ZH, lower is better)",
        )
        if n
    ]
    return text + (f" ({'; '.join(notes)})" if notes else "")


def pace(row: Row, cheapest: float | None) -> tuple[str, str, str, str]:
    """Pages/s worker / direct, the cold start, the cost, and what measured them; a checkpoint
    measured only in the start mode that is not its family's (since changed) is shown in it,
    so named."""
    run, mode = row.run, ""
    if run is None and row.other is not None:
        run, mode = row.other, f"`START_MODE={row.other.start_mode}`: "
    if run is None:
        return NOT_MEASURED, NOT_MEASURED, "—", "—"
    if run.pages_per_s is None:
        reasons = "; ".join(f"{why}" for why in run.failed_by_reason) or "no pace"
        speed = f"no figure: {run.failed} of {run.pages} pages failed ({reasons})"
    else:
        direct = f"{run.direct_pages_per_s:g}" if run.direct_pages_per_s else "—"
        pages = f"{run.pages} pages" + (f", {run.textless}" if run.textless else "")
        speed = f"{mode}{run.pages_per_s:g} / {direct} ({pages})"
    start = f"{mode}{run.engine_ready_s:g} s fresh" if run.engine_ready_s is not None else "—"
    if row.warm is not None and row.warm.engine_ready_s is not None:
        other = f", vLLM {row.warm.vllm}" if row.warm.vllm != run.vllm else ""
        start += f", {row.warm.engine_ready_s:g} s on warm caches{other}"
    other = row.other  # beside the default's start only when on the same vLLM: comparable
    if other not in (None, run) and other.engine_ready_s is not None and other.vllm == run.vllm:
        paced = f" and {other.pages_per_s:g} pages/s" if other.pages_per_s is not None else ""
        start += f"; `START_MODE={other.start_mode}`: {other.engine_ready_s:g} s fresh{paced}"
    cost = "—" if run.usd_per_million_pages is None else f"{run.usd_per_million_pages:.0f}"
    if run.usd_per_million_pages is not None and run.usd_per_million_pages == cheapest:
        cost = f"**{cost}**"
    return speed, start, cost, f"vLLM {run.vllm}, {run.gpu}, {run.date}"


def readme_table() -> str:
    lines = [
        "| family (`MODEL_FAMILY`) | checkpoint | olmOCR-bench | licence of the weights | "
        "weights; pages at once on 80 / 141 GB, each at the family's largest page and answer "
        "(`vlm-ocr plan`) | pages/s on one H200, "
        "worker / direct (dummy weights, 800 output tokens a page) | cold start | US$ per "
        f"million pages at US${GPU_PRICE} an H200-hour | measured with |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    found = rows()
    best = max((r.checkpoint.olmocr_bench or 0 for r in found), default=None)
    cheapest = min((r.cost for r in found if r.cost is not None), default=None)
    seen: set[str] = set()
    for row in found:
        c, name = row.checkpoint, row.family.name
        first = name not in seen
        seen.add(name)
        default = " (the default)" if first and name == next(iter(FAMILIES)) else ""
        cells = [
            f"`{name}`{default}" if first else "",
            f"`{c.repo}` ({c.what})",
            score(c, best),
            row.licence,
            planned(c.example),
            *pace(row, cheapest),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def named(row: Row) -> str:
    what = "layout blocks" if row.family.boxes and row.family.prompt else "Markdown"
    return f"{row.checkpoint.short} ({row.checkpoint.olmocr_bench:.1f}; {what})"


def how_to_choose() -> str:
    """The README's advice, following the figures: the best reading, the lowest cost at
    near-best reading (of what the GPU measured; the rest named as not measured yet), and the
    family for a job's own prompts."""
    found = rows()
    scored = [r for r in found if r.checkpoint.olmocr_bench is not None]
    top = max(scored, key=lambda r: r.checkpoint.olmocr_bench or 0)
    best = top.checkpoint.olmocr_bench or 0
    near = sorted(
        (r for r in scored if (r.checkpoint.olmocr_bench or 0) >= best - NEAR_POINTS),
        key=lambda r: -(r.checkpoint.olmocr_bench or 0),
    )
    text = f"**How to choose.** For the best reading on olmOCR-bench, {named(top)}"
    if not top.licence.startswith(PERMISSIVE):
        text += f", if its licence fits you: {top.licence}"
        free = [r for r in near if r.licence.startswith(PERMISSIVE)]
        if free:
            text += f"; else {named(free[0])} under {free[0].licence}"
    text += f". For the lowest cost at near-best reading (within {NEAR_POINTS:g} points): "
    priced = sorted((r for r in near if r.cost is not None), key=lambda r: r.cost or 0)
    unpriced = [r.checkpoint.short for r in near if r.cost is None]
    if priced:
        run = priced[0].run
        assert run is not None
        text += (
            f"{named(priced[0])} at US${priced[0].cost:.0f} a million pages "
            f"(vLLM {run.vllm} on an {run.gpu})"
        )
    if unpriced:
        text += f"{'; ' if priced else ''}{_and(unpriced)} read as near but are {NOT_MEASURED}"
    cheapest = min((r for r in found if r.cost is not None), key=lambda r: r.cost or 0)
    if cheapest not in near and cheapest.run is not None:
        text += (
            f". Of all measured, {cheapest.checkpoint.short} costs least: "
            f"US${cheapest.cost:.0f} a million pages ({cheapest.checkpoint.olmocr_bench:.1f} on "
            f"olmOCR-bench, vLLM {cheapest.run.vllm})"
        )
    chat = next(iter(FAMILIES.values()))
    return text + (
        f". Keep the default, {chat.checkpoints[0].short}, when you need your "
        "own prompts or `json_schema` extraction: the OCR models take only their own prompt."
    )


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
