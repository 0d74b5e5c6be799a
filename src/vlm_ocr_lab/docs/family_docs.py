"""The model families as users read them: the docs' two family tables, the README's table of
checkpoints and its "how to choose" (`family_table`), the Hub's presets (`hub_presets`), and each
family's value of the settings whose default is the family's own, all written from `FAMILIES`
(the families' classes) and checked against it by the tests. A family whose checkpoints are
served differently (its `variants`) has a row for each.

    python -m vlm_ocr_lab.docs.family_docs               the docs' tables (docs/models.md)
    python -m vlm_ocr_lab.docs.family_docs --write FILE  rewrite the parts FILE marks
                                                         (docs/models.md, README.md)
    python -m vlm_ocr_lab.docs.family_docs --hub FILE    rewrite .runpod/hub.json's presets
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from vlm_ocr.engines.families import FAMILIES, Attempt, Family
from vlm_ocr.engines.vllm.argv import preprocessing_parallelism
from vlm_ocr.images import Budget
from vlm_ocr.prompts import Prompt
from vlm_ocr.settings import RenderSettings
from vlm_ocr_lab.docs import family_table, generated, hub_presets

MAX_PIXELS = RenderSettings.model_fields["max_pixels"].default
CPUS = 16  # the host the API servers' column counts for

# Settings whose 0 means "the model family's own": each family's value, for their descriptions.
PER_FAMILY: dict[str, Callable[[type[Family] | Family], int]] = {
    "max_tokens": lambda f: f.sampling.max_tokens,
    "max_attempts": lambda f: len(f.sampling.attempts),
    "max_model_len": lambda f: f.max_model_len,
}


def by_family(value: Callable[[type[Family] | Family], int]) -> str:
    """`qwen-vl` and `qwen3.5` 4096, `olmocr` 8000, …: each value once, with its families; a
    family's checkpoints served otherwise say theirs after it (`chandra` and `lighton-ocr-3`
    18000 (lighton-ocr-3's 1B: 16384))."""
    groups: dict[int, list[str]] = {}
    notes: dict[int, list[str]] = {}
    for name, family in FAMILIES.items():
        own = value(family)
        groups.setdefault(own, []).append(f"`{name}`")
        notes.setdefault(own, []).extend(
            f"{name}'s {label}: {value(v)}"
            for label, v in family.variants().items()
            if value(v) != own
        )
    return ", ".join(
        f"{_and(names)} {v}" + (f" ({'; '.join(notes[v])})" if notes[v] else "")
        for v, names in groups.items()
    )


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def page_size(budget: Budget) -> str:
    """How a family draws its pages, from its budget at the default `MAX_PIXELS`."""
    if budget.max_pixels == MAX_PIXELS and not (budget.dpi or budget.min_side or budget.max_side):
        grid = f", on a {budget.grid} px grid" if budget.grid else ""
        return f"`MAX_PIXELS` ({MAX_PIXELS:,} px){grid}"
    parts = [f"{budget.dpi:g} dpi"] if budget.dpi else []
    if budget.min_side:
        parts.append(f"at least {budget.min_side:,} px a side")
    if budget.max_side:
        parts.append(f"{budget.max_side:,} px on the longest side")
    else:
        parts.append(f"at most {budget.max_pixels:,} px")
    if budget.grid:
        parts.append(f"on a {budget.grid} px grid")
    return ", ".join(parts)


def prompt_of(family: Family) -> str:
    own = family.prompt
    order = [c["type"] for c in family.content("data:", own or Prompt("p", "1", "p"))]
    if own is None:
        return "the job's: a preset, `custom_prompt` or `json_schema`"
    if order == ["image_url"]:
        return f"none: the image alone (`{own.name}`)"
    where = "before the image" if order[0] == "text" else "after the image"
    return f"its own, `{own.name}`, {where}"


def ladder(attempts: tuple[Attempt, ...]) -> str:
    """The temperatures of a family's attempts, each run of one top_p together."""
    runs: list[tuple[float | None, list[str]]] = []
    for a in attempts:
        if not runs or runs[-1][0] != a.top_p:
            runs.append((a.top_p, []))
        runs[-1][1].append(f"{a.temperature:g}")
    return "; ".join(
        ", ".join(temps) + (f" (top_p {top_p:g})" if top_p is not None else "")
        for top_p, temps in runs
    )


def behaviour_table() -> str:
    lines = [
        "| family (`MODEL_FAMILY`) | page size | prompt | temperatures of its attempts "
        "(`MAX_ATTEMPTS`) | answer tokens (`MAX_TOKENS`) | context (`MAX_MODEL_LEN`) | "
        "answer, checked before it is stored | engine flags | start (`START_MODE=auto`) | "
        f"API servers (`API_SERVER_COUNT=0`, vLLM 0.32 on, {CPUS} CPUs) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, cls in FAMILIES.items():
        for label, family in cls.variants().items():
            flags = shlex.join(family.serve_args())
            cells = [
                f"`{name}`" + (f" ({label})" if label else ""),
                page_size(family.budget(MAX_PIXELS)),
                prompt_of(family),
                ladder(family.sampling.attempts),
                f"{family.sampling.max_tokens:,}",
                f"{family.max_model_len:,}",
                family.answer
                + ("; thinking off, per request and at launch" if family.thinks else ""),
                f"`{flags}`" if flags else "—",
                f"`{family.start_mode.value}`",
                api_servers(family),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def api_servers(family: Family) -> str:
    """Its API servers on one GPU: the count it declares, else its page budget's; where its
    checkpoints get different counts (told by their names), each count with theirs."""
    kind = type(family)
    cells: dict[str, list[str]] = {}
    for checkpoint in kind.checkpoints:
        served = kind(family.model_type, model=checkpoint.repo)
        cells.setdefault(api_server_cell(served), []).append(checkpoint.short)
    if len(cells) < 2:
        return next(iter(cells), api_server_cell(family))
    return "; ".join(f"{cell} for {_and(names)}" for cell, names in cells.items())


def api_server_cell(family: Family) -> str:
    if family.api_server_count is not None:
        return f"{family.api_server_count} (measured: more add no pages/s)"
    parallel = preprocessing_parallelism(family.budget(MAX_PIXELS).max_pixels, CPUS)
    return f"{parallel} (by its page size)"


def detection_table() -> str:
    lines = [
        "| family | title | config.json `architectures` | names it is told by | "
        "image token (px a side) | blocks | vLLM at least | the engine's packages | "
        "licence of the weights |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, cls in FAMILIES.items():
        arch = ", ".join(f"`{a}`" for a in sorted(cls.architectures))
        hints = ", ".join(f"`{h}`" for h in cls.name_hints)
        if cls.fine_tune:
            hints += " (a fine-tune: its name tells it from its base)"
        engine = [f"`{pin}`" for pin in cls.engine_pins]
        engine += [f"not vLLM {v}: {why}" for v, why in cls.broken_vllm.items()]
        cells = [
            f"`{name}`",
            cls.title,
            arch,
            hints,
            per_variant(cls, lambda f: f"{f.patch}"),
            "with boxes" if cls.boxes else "none",
            per_variant(cls, lambda f: f.min_vllm),
            "; ".join(engine) or "the image's",
            cls.licence,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_variant(cls: type[Family], value: Callable[[Family], str]) -> str:
    """A fact of the family, and where one kind of its checkpoints differs, theirs."""
    variants = cls.variants()
    values = {label: value(v) for label, v in variants.items()}
    first = next(iter(values.values()))
    if len(set(values.values())) == 1:
        return first
    return "; ".join(f"{v} ({label})" for label, v in values.items())


REGIONS: dict[str, Callable[[], str]] = {
    "families": behaviour_table,
    "families-told": detection_table,
    "family-table": family_table.readme_table,
    "how-to-choose": family_table.how_to_choose,
}


def write(path: Path) -> None:
    """Rewrite every part of `path` that a region here makes (the others are left)."""
    text = path.read_text(encoding="utf-8")
    marked = {n: make() for n, make in REGIONS.items() if generated.region(text, n) is not None}
    if not marked:
        raise SystemExit(f"{path}: marks none of {', '.join(REGIONS)}")
    generated.write(path, marked)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        for name in sys.argv[2:]:
            write(Path(name))
    elif sys.argv[1:2] == ["--hub"]:
        hub_presets.write(Path(sys.argv[2]))
    else:
        print(behaviour_table() + "\n\n" + detection_table())
