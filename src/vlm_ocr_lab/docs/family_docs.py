"""The model families as users read them: the docs' two family tables and each family's value of
the settings whose default is the family's own, all written from `FAMILIES` (the families'
classes) and checked against it by the tests.

    python -m vlm_ocr_lab.docs.family_docs               both tables (docs/models.md)
    python -m vlm_ocr_lab.docs.family_docs --write FILE  rewrite them where FILE marks them
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from vlm_ocr.engines.families import FAMILIES, Attempt, Family
from vlm_ocr.images import Budget
from vlm_ocr.prompts import Prompt
from vlm_ocr.settings import RenderSettings
from vlm_ocr_lab.docs import generated

MAX_PIXELS = RenderSettings.model_fields["max_pixels"].default

# Settings whose 0 means "the model family's own": each family's value, for their descriptions.
PER_FAMILY: dict[str, Callable[[type[Family]], int]] = {
    "max_tokens": lambda f: f.sampling.max_tokens,
    "max_attempts": lambda f: len(f.sampling.attempts),
    "max_model_len": lambda f: f.max_model_len,
}


def by_family(value: Callable[[type[Family]], int]) -> str:
    """`qwen-vl` and `qwen3.5` 4096, `olmocr` 8000, …: each value once, with its families."""
    groups: dict[int, list[str]] = {}
    for name, family in FAMILIES.items():
        groups.setdefault(value(family), []).append(f"`{name}`")
    return ", ".join(f"{_and(names)} {v}" for v, names in groups.items())


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def page_size(budget: Budget) -> str:
    """How a family draws its pages, from its budget at the default `MAX_PIXELS`."""
    if budget == Budget(MAX_PIXELS):
        return f"`MAX_PIXELS` ({MAX_PIXELS:,} px)"
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
        "answer, checked before it is stored | engine flags |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, cls in FAMILIES.items():
        family = cls()
        flags = shlex.join(family.serve_args())
        cells = [
            f"`{name}`",
            page_size(family.budget(MAX_PIXELS)),
            prompt_of(family),
            ladder(cls.sampling.attempts),
            f"{cls.sampling.max_tokens:,}",
            f"{cls.max_model_len:,}",
            cls.answer + ("; thinking off, per request and at launch" if cls.thinks else ""),
            f"`{flags}`" if flags else "—",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detection_table() -> str:
    lines = [
        "| family | title | config.json `architectures` | names it is told by | "
        "image token (px a side) | blocks | vLLM at least | licence of the weights |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, cls in FAMILIES.items():
        arch = ", ".join(f"`{a}`" for a in sorted(cls.architectures))
        hints = ", ".join(f"`{h}`" for h in cls.name_hints)
        if cls.fine_tune:
            hints += " (a fine-tune: its name tells it from its base)"
        cells = [
            f"`{name}`",
            cls.title,
            arch,
            hints,
            f"{cls.patch}",
            "with boxes" if cls.boxes else "none",
            cls.min_vllm,
            cls.licence,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


REGIONS = {"families": behaviour_table, "families-told": detection_table}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        generated.write(Path(sys.argv[2]), {name: make() for name, make in REGIONS.items()})
    else:
        print(behaviour_table() + "\n\n" + detection_table())
