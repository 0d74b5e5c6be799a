"""What a corpus needs at each family's measured pace: the table in docs/deploying.md, written
from benchmarks/gpu.jsonl (through `vlm_ocr_lab.measured`) and checked against it by the tests.

    python -m vlm_ocr_lab.docs.corpus_docs               the table
    python -m vlm_ocr_lab.docs.corpus_docs --write FILE  rewrite it where FILE marks it
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from vlm_ocr.engines.families import FAMILIES
from vlm_ocr_lab import measured
from vlm_ocr_lab.docs import generated

PAGES = 100_000  # the corpus a row prices
DAY_PAGES = 1_000_000  # the corpus a row sizes a fleet for, to be read in a day


def defaults_of(family: str, rows: list[measured.Run]) -> list[measured.Run]:
    """A family's runs at its defaults, of its first checkpoint (the one the family is served
    with unless told otherwise) where it has any: a family's other sizes are not its pace."""
    mine = [r for r in rows if r.family == family and r.at_defaults]
    checkpoints = FAMILIES[family].checkpoints
    first = [r for r in mine if checkpoints and r.model == checkpoints[0].repo]
    return first or mine


def paced(family: str, rows: list[measured.Run]) -> measured.Run | None:
    """The newest run of a family at its defaults that has a pace (fresh or warm)."""
    found = [r for r in defaults_of(family, rows) if r.pages_per_s]
    return found[-1] if found else None


def started(family: str, rows: list[measured.Run]) -> measured.Run | None:
    """The newest fresh start of a family at its defaults (its engine's time to ready)."""
    found = [r for r in defaults_of(family, rows) if r.start == "fresh" and r.engine_ready_s]
    return found[-1] if found else None


def price_of(run: measured.Run) -> float | None:
    """The GPU's price an hour the run was costed at (its US$ a million pages over its pace)."""
    if not run.usd_per_million_pages or not run.pages_per_s:
        return None
    return round(run.usd_per_million_pages * run.pages_per_s * 3600 / 1e6, 2)


def row(family: str, rows: list[measured.Run]) -> str:
    run, start = paced(family, rows), started(family, rows)
    ready = f"{start.engine_ready_s:.0f} s" if start and start.engine_ready_s else "—"
    if run is None or run.pages_per_s is None:
        return f"| `{family}` | not measured | — | — | — | — | {ready} |"
    hours = PAGES / run.pages_per_s / 3600
    price = price_of(run)
    cost = f"{hours * price:,.0f} (US${price:g} an hour)" if price else "—"
    fleet = math.ceil(DAY_PAGES / (run.pages_per_s * 86_400))
    source = f"{run.gpu}, {run.date}, {run.pages} pages ({run.commit})"
    return (
        f"| `{family}` | {source} | {run.pages_per_s:g} | {hours:,.1f} | {cost} | {fleet} | "
        f"{ready} |"
    )


def sizing_table(rows: list[measured.Run] | None = None) -> str:
    rows = measured.runs() if rows is None else rows
    lines = [
        f"| family | measured on | pages/s a worker | GPU-hours for {PAGES:,} pages | "
        f"US$ for {PAGES:,} pages | workers to read {DAY_PAGES:,} pages in 24 h | "
        "a fresh worker's start |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [row(family, rows) for family in FAMILIES]
    return "\n".join(lines)


REGIONS = {"corpus-sizing": sizing_table}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        generated.write(Path(sys.argv[2]), {name: make() for name, make in REGIONS.items()})
    else:
        print(sizing_table())
