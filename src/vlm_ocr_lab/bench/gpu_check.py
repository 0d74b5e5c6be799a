"""The plan of the one-lease GPU check (`dev/gpu/check.sh`): which runs fit in a call, how many
pages each, and how long each may take, from the data file's last row of each model.

A run is a target (a checkpoint's shapes, dummy weights) started `fresh` (its first start on the
host: empty caches) or `warm` (the second start on the caches the first published, as a second
worker on a network volume). A fresh run also benches the worker and the direct path, with the
fewest pages that keep each pass at least `PASS_S` seconds at the model's last pace and, where
that takes at most `WAVE_PASS_S`, fill the engine's sequences `WAVES` times (at least `MIN_PAGES`,
at most `MAX_PAGES`); a warm run is the start alone.

    python -m vlm_ocr_lab.bench.gpu_check plan BUDGET_S SPEC...   the plan, as a table
    python -m vlm_ocr_lab.bench.gpu_check step SPEC --left S      one run, for the shell
    python -m vlm_ocr_lab.bench.gpu_check summary ROWS.jsonl      the rows, one line each
    python -m vlm_ocr_lab.bench.gpu_check gauges METRICS.txt ROW.jsonl   vLLM's gauges into a row

SPEC is TARGET, TARGET:warm, and either with settings of its own after commas, a run off the
defaults (its row says so): `chandra,MAX_NUM_SEQS=512`, `olmocr:warm,START_MODE=fast`.
(`--data FILE`, repeatable: the rows to estimate from; default the repository's data file.)
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vlm_ocr.engines.vllm.argv import default_max_num_seqs
from vlm_ocr.settings import Settings, env_name
from vlm_ocr_lab import measured

MIN_PAGES = 128  # the floor: a pass of fewer pages says little about a batch of 256
MAX_PAGES = 1024
PASS_S = 30.0  # each pass (worker, direct) at least this long at the model's pace
PAGE_STEP = 32  # pages in steps of this (two jobs of equal halves)
# A pass no longer than the engine's sequences is one wave: every page starts at once and the
# slowest decides (LightOnOCR-3-0.8B's 320 pages at 256 sequences read 0.70 of the direct path).
# Two waves show the refill, where they take at most WAVE_PASS_S at the model's pace; one wave,
# every sequence busy, is the least a pass has (Qwen3-VL-32B's 192 pages kept 192 of its 256
# sequences running: a pace of the engine part-full).
WAVES = 2
WAVE_PASS_S = 60.0
# The lent cards' memory, which gives the engine its sequences at MAX_NUM_SEQS=0 (an H100 fewer
# than an H200) and so sizes a run's waves; another card is planned as the reference one.
CARD_GIB = {measured.REFERENCE_GPU: 139.0, "H100": 80.0}
START_MARGIN = 1.1  # a start on another host took up to 7 % longer (192.8 s and 206.0 s)
TIME_LIMIT_MARGIN = 1.5  # the bench's --time-limit over the estimate: a slower run still ends
OVERHEAD_S = 25.0  # the dummy folder, the jobs' PDFs, the direct path's renders, ending vLLM
RESERVE_S = 30.0  # kept back at the end of a call: the rows and logs packed for the way back
WARM_SHARE = 0.6  # a start on the caches a fresh one built, as a share of the fresh one's


@dataclass(frozen=True)
class Target:
    """What the check can run: a checkpoint's shapes and how the GPU host makes them."""

    name: str
    #: `dev/gpu/make_dummy_model.py`'s first argument for it (a family, or an example's name)
    generator: str
    checkpoint: str
    #: assumed before a row of it exists: its fresh start and its pace (its goal, where known)
    start_s: float
    pages_per_s: float
    #: environment by the engine's vLLM: transformers 5.16.1 first for LightOnOCR 2 on 0.26,
    #: whose Pixtral code imports a class transformers 5.17 renamed
    env_by_vllm: dict[str, dict[str, str]] = field(default_factory=dict)


TARGETS = {
    t.name: t
    for t in (
        Target("qwen-vl", "qwen-vl", "QuantTrio/Qwen3-VL-32B-Instruct-AWQ", 200.0, 3.0),
        Target("olmocr", "olmocr", "allenai/olmOCR-2-7B-1025-FP8", 180.0, 10.5),
        Target("chandra", "chandra", "datalab-to/chandra-ocr-2", 280.0, 5.0),
        Target("dots-ocr", "dots-ocr", "rednote-hilab/dots.mocr", 140.0, 4.0),
        Target(
            "lighton-ocr",
            "lighton-ocr",
            "lightonai/LightOnOCR-2-1B",
            170.0,
            15.0,
            {"0.26": {"TF516": "1"}},
        ),
        # Qwen3.5 shapes (gated-delta-net layers, autotuned at a fresh start, like Chandra 2); the
        # generator takes an example config's name as well as a family's
        Target(
            "lighton-ocr-3-0.8b", "lightonocr-3-0.8b", "lightonai/LightOnOCR-3-0.8B", 240.0, 10.0
        ),
        Target("lighton-ocr-3-4b", "lightonocr-3-4b", "lightonai/LightOnOCR-3-4B", 280.0, 5.0),
        # the Qwen3.5 chat family (no example config of its own checkpoints' shapes here): the
        # Qwen3.5-0.8B base, whose shapes its fine-tune LightOnOCR-3-0.8B keeps, in a folder
        # named for the base, so the family is told as `qwen3.5` and asked as it asks
        Target("qwen3.5-0.8b", "lightonocr-3-0.8b", "Qwen/Qwen3.5-0.8B", 240.0, 7.7),
    )
}


@dataclass(frozen=True)
class Step:
    """One run of the check: what to run, how many pages, and its time."""

    target: Target
    start: measured.Start
    pages: int  # in all, over the jobs; 0 for the start alone
    start_s: float  # the start expected
    passes_s: float  # the worker pass and the direct path expected
    #: from a row of the data ("row of 2026-12-01 at 1c0a249") or the target's own guess
    basis: str
    env: dict[str, str]
    #: the worker's settings the spec names (its run is off the defaults)
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The run's name in the plan and its logs: `chandra:fresh,MAX_NUM_SEQS=512`."""
        return ",".join([f"{self.target.name}:{self.start}", *_pairs(self.settings)])

    @property
    def tag(self) -> str:
        """The name as a file name: `chandra-fresh-MAX_NUM_SEQS-512`."""
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", self.name.replace(":", "-"))

    @property
    def engines(self) -> int:
        """The check's `ENGINES_ON_GPU`: benches whose engines share the one GPU, each with
        that share of its memory (1: the engine alone)."""
        return int(self.settings.get("ENGINES_ON_GPU", "1"))

    @property
    def estimate_s(self) -> float:
        if self.engines > 1:
            # each engine starts once the one before is ready (the later ones on its caches),
            # then their worker passes run at once, then their direct paths, each engine no
            # faster than its share of the GPU
            starts = self.start_s * (1 + WARM_SHARE * (self.engines - 1))
            return starts + self.passes_s * self.engines + OVERHEAD_S
        return self.start_s + self.passes_s + OVERHEAD_S

    def time_limit_s(self, left_s: float) -> int:
        """The bench's --time-limit: room for a slower run than expected, within what is left
        of the call (less the reserve for packing)."""
        return max(1, math.floor(min(self.estimate_s * TIME_LIMIT_MARGIN, left_s - RESERVE_S)))

    def shell(self, left_s: float) -> str:
        """The step as shell assignments (`eval` in check.sh)."""
        values = {
            "target": self.target.name,
            "kind": self.start,
            "generator": self.target.generator,
            "checkpoint": self.target.checkpoint,
            "tag": self.tag,
            "pages": str(self.pages),
            "estimate": str(math.ceil(self.estimate_s)),
            "limit": str(self.time_limit_s(left_s)),
            # each pair quoted: check.sh exports them with `eval`, a value may hold spaces
            "run_env": " ".join(shlex.quote(p) for p in _pairs(self.env | self.settings)),
            "engines": str(self.engines),
            "skip": "",
        }
        return " ".join(f"{k}={shlex.quote(v)}" for k, v in values.items())


# A setting's value in a spec: one word (an `=` inside it is a vLLM flag's own, as in
# `--kernel-config.enable_jit_warmup=false`); vLLM's extra flags may be several words, one space
# apart (the check's shell exports each VAR=VALUE quoted)
_VALUE = re.compile(r"[A-Za-z0-9_.:/+=-]+")
_WORDS = re.compile(rf"{_VALUE.pattern}( {_VALUE.pattern})*")
_SETTINGS = {env_name(name) for name in Settings.GROUP_OF}
# The check's own variables a spec may set: check.sh reads them, the worker does not, so a row's
# overrides never hold them (its note does). PYSPY_HZ: sample the run's processes with py-spy.
# ENGINES_ON_GPU: that many benches whose engines share the GPU, their passes run at once and
# then their direct paths (is a second engine core worth half the memory?), their rows kept
# apart from the data's.
# DIRECT_FIRST=1: the direct path before the worker's pass (is the worker's gap the engine's
# first busy minute after its start?). FLASHINFER_SAMPLER=1: vLLM's FlashInfer top-p sampler, as
# in the image, in place of the Triton filter the host runs otherwise (dev/gpu/env.sh; the row's
# `bench_settings` say which ran). PAGES=N: the pages of its passes, in place of `pages_for`'s
# (a pass of whole waves against one with a tail: `chandra,PAGES=512`). GREEDY_TEMPERATURE=T:
# the temperature a family's greedy attempt is sent at (1 unless set; 0 keeps it greedy, whose
# answers on dummy weights repeat the prompt's last token: the bench's `--greedy-temperature`).
# MPS=1, with ENGINES_ON_GPU: the engines' processes as clients of CUDA's Multi-Process Service,
# whose kernels may then run side by side on the GPU's SMs where without it the GPU takes the
# processes' kernels in turns (do two engines on one GPU lose their time to the turns, or to a
# GPU already full?).
_CHECK_OWN = {
    "PYSPY_HZ",
    "ENGINES_ON_GPU",
    "MPS",
    "DIRECT_FIRST",
    "FLASHINFER_SAMPLER",
    "PAGES",
    "GREEDY_TEMPERATURE",
}


def _pairs(env: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in env.items()]


def parse_spec(spec: str) -> tuple[Target, measured.Start, dict[str, str]]:
    """TARGET[:warm][,VAR=VALUE...]: the target, its start, and the settings it names (the
    worker's, and the check's own)."""
    head, *pairs = spec.split(",")
    name, _, kind = head.partition(":")
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}; the check knows {', '.join(TARGETS)}")
    if kind not in ("", "fresh", "warm"):
        raise ValueError(f"{spec!r}: a target is NAME or NAME:warm, not :{kind}")
    settings = {}
    for pair in pairs:
        var, eq, value = pair.partition("=")
        plain = (_WORDS if var == "VLLM_EXTRA_ARGS" else _VALUE).fullmatch(value)
        if not eq or var not in _SETTINGS | _CHECK_OWN or not plain:
            raise ValueError(
                f"{spec!r}: {pair!r} is not VAR=VALUE with VAR one of the worker's settings "
                f"(or the check's own: {', '.join(sorted(_CHECK_OWN))}) "
                "and VALUE letters, digits and ._:/+=- alone "
                "(VLLM_EXTRA_ARGS: such words, one space apart)"
            )
        settings[var] = value
    engines = settings.get("ENGINES_ON_GPU", "1")
    if not (engines.isdigit() and 1 <= int(engines) <= 4):
        raise ValueError(f"{spec!r}: ENGINES_ON_GPU is 1 to 4, not {engines!r}")
    mps = settings.get("MPS", "0")
    if mps not in ("0", "1") or (mps == "1" and engines == "1"):
        raise ValueError(f"{spec!r}: MPS is 0 or 1, and 1 only with ENGINES_ON_GPU of 2 or more")
    pages = settings.get("PAGES", str(PAGE_STEP))
    if not (pages.isdigit() and int(pages) % 2 == 0 and PAGE_STEP <= int(pages) <= MAX_PAGES):
        raise ValueError(
            f"{spec!r}: PAGES is an even number of pages (two jobs of equal halves) from "
            f"{PAGE_STEP} to {MAX_PAGES}, not {pages!r}"
        )
    return TARGETS[name], "warm" if kind == "warm" else "fresh", settings


def _rows_of(
    target: Target,
    rows: list[measured.Run],
    vllm: str,
    settings: dict[str, str] | None = None,
    card: str = measured.REFERENCE_GPU,
) -> list[measured.Run]:
    """The model's rows at the spec's worker settings on the check's `card`, else at the defaults
    on that card (an H100's start and pace are its own: its engine holds fewer sequences, and its
    hosts start engines at their own speed), else at the settings on the reference card, else at
    the defaults there (`START_MODE=fast` starts apart from the defaults'); those of this vLLM
    first."""
    want = {k: v for k, v in (settings or {}).items() if k not in _CHECK_OWN}
    on_card = {} if card == measured.REFERENCE_GPU else {"GPU": card}
    model = [r for r in rows if r.model == target.checkpoint]
    for off in (want | on_card, on_card, want, {}):
        if mine := [r for r in model if r.off_defaults == off]:
            same = [r for r in mine if vllm and r.vllm.startswith(vllm)]
            return same or mine
    return []


def fast_share(rows: list[measured.Run], vllm: str = "") -> float | None:
    """A fresh start at `fast` over one at `throughput`, the median over the models that have
    both (each its last, at settings that differ from the defaults in the start mode alone; this
    vLLM's where it has any): what a run in the other mode is expected to take where its model
    has no row in that mode yet. None where no model has both."""
    same = [r for r in rows if vllm and r.vllm.startswith(vllm)] or rows
    starts: dict[str, dict[str, float]] = {}
    for r in same:
        if r.start == "fresh" and r.engine_ready_s and set(r.off_defaults) <= {"START_MODE"}:
            starts.setdefault(r.model, {})[r.start_mode] = r.engine_ready_s
    shares = [m["fast"] / m["throughput"] for m in starts.values() if len(m) == 2]
    return statistics.median(shares) if shares else None


def _last(rows: list[measured.Run], have: str, start: str | None = None) -> measured.Run | None:
    found = [
        r for r in rows if getattr(r, have) is not None and (start is None or r.start == start)
    ]
    return found[-1] if found else None


def step(spec: str, rows: list[measured.Run], vllm: str = "", gpu: str = "") -> Step:
    """The run a spec asks for on the card `gpu` (the reference card where empty), sized from
    the model's last rows."""
    target, start, settings = parse_spec(spec)
    card = measured.card(gpu)
    card = card if card in CARD_GIB else measured.REFERENCE_GPU  # one it knows, else the H200
    mine = _rows_of(target, rows, vllm, settings, card)
    env = target.env_by_vllm.get(vllm or "0.26", {})
    fresh = _last(mine, "engine_ready_s", "fresh")
    fresh_s = fresh.engine_ready_s if fresh and fresh.engine_ready_s else target.start_s
    start_basis = _basis(fresh)
    # a start mode its model has not started in yet: the other mode's start, scaled as the
    # models that started in both did (a skip for a start guessed three times too long wastes
    # the end of a lease)
    mode = settings.get("START_MODE")
    other = fresh is not None and mode in ("fast", "throughput") and fresh.start_mode != mode
    if other and (share := fast_share(rows, vllm)):
        factor = share if mode == "fast" else 1 / share
        fresh_s *= factor
        start_basis += f", times {factor:.2f} ({mode})"
    if start == "warm":
        warm = _last(mine, "engine_ready_s", "warm")
        # a second start never seen: half the fresh one (olmOCR's was 43 %, Chandra's 33 %)
        warm_s = warm.engine_ready_s if warm and warm.engine_ready_s else fresh_s / 2
        basis = _basis(warm) if warm else f"half the fresh start ({_basis(fresh)})"
        return Step(target, start, 0, warm_s * START_MARGIN, 0.0, basis, env, settings)
    paced = _last(mine, "pages_per_s", "fresh") or _last(mine, "pages_per_s")  # with its direct
    worker = paced.pages_per_s if paced and paced.pages_per_s else target.pages_per_s
    direct = paced.direct_pages_per_s if paced and paced.direct_pages_per_s else worker
    # a spec's MAX_NUM_SEQS is what the engine's waves are made of (0: the card's default)
    seqs = int(settings.get("MAX_NUM_SEQS") or 0) or default_max_num_seqs(CARD_GIB[card])
    pages = int(settings.get("PAGES") or 0) or pages_for(max(worker, direct), seqs)
    basis = f"start: {start_basis}; pace: {_basis(paced)}"
    passes_s = pages / worker + pages / direct
    return Step(target, start, pages, fresh_s * START_MARGIN, passes_s, basis, env, settings)


def pages_for(pages_per_s: float, seqs: int | None = None) -> int:
    """The fewest pages, in steps of PAGE_STEP, that keep a pass PASS_S long at this pace and
    fill the engine's `seqs` sequences (the reference card's default when None) once, and WAVES
    times where that is a pass of at most WAVE_PASS_S."""
    seqs = seqs or default_max_num_seqs(CARD_GIB[measured.REFERENCE_GPU])
    waves = max(seqs, min(WAVES * seqs, math.floor(WAVE_PASS_S * pages_per_s)))
    want = max(MIN_PAGES, math.ceil(PASS_S * pages_per_s), waves)
    return min(MAX_PAGES, math.ceil(want / PAGE_STEP) * PAGE_STEP)


def _basis(row: measured.Run | None) -> str:
    if not row:
        return "the target's guess"
    return f"row of {row.date} at {row.commit}, vLLM {row.vllm}, {measured.card(row.gpu)}"


def plan(
    specs: list[str],
    budget_s: float,
    rows: list[measured.Run],
    vllm: str = "",
    fresh_done: set[str] | None = None,
    gpu: str = "",
) -> list[tuple[Step, str]]:
    """Each spec's step on the card `gpu` and what becomes of it in a call of `budget_s`
    seconds: `runs`, or why it is skipped, each run taking its estimate from what is left. A
    warm start needs its target's fresh start before it on this host: in this plan, or in
    `fresh_done` (the runs of earlier calls; None: not known, as in a dry run, where it is
    assumed)."""
    left = budget_s - RESERVE_S
    done = set(fresh_done or ())
    out = []
    for spec in specs:
        s = step(spec, rows, vllm, gpu)
        if s.start == "warm" and fresh_done is not None and s.target.name not in done:
            out.append((s, "skipped: no fresh start of it on this host before it"))
            continue
        if s.estimate_s > left:
            out.append((s, f"skipped: needs about {s.estimate_s:.0f} s, {max(0, left):.0f} s left"))
            if s.start == "fresh" and fresh_done is None:
                fresh_done = done  # from here on, a warm start needs its fresh one here
            continue
        left -= s.estimate_s
        done.add(s.target.name)
        out.append((s, "runs"))
    return out


def plan_table(steps: list[tuple[Step, str]], budget_s: float) -> str:
    w = max([26] + [len(s.name) + 2 for s, _ in steps])
    lines = [
        f"plan for a call of {budget_s:.0f} s ({RESERVE_S:.0f} s kept for packing):",
        f"{'run':<{w}}{'pages':>6}{'start s':>9}{'passes s':>10}{'total s':>9}{'at s':>7}  what",
    ]
    at = 0.0
    for s, fate in steps:
        at += s.estimate_s if fate == "runs" else 0.0
        if fate.startswith("skipped: needs about"):  # the check decides again at its turn
            fate += "; it runs if the runs before it leave that much"
        ends = f"{at:>7.0f}" if fate == "runs" else f"{'-':>7}"
        lines.append(
            f"{s.name:<{w}}{s.pages:>6}{s.start_s:>9.0f}{s.passes_s:>10.0f}"
            f"{s.estimate_s:>9.0f}{ends}  {fate}; {s.basis}"
        )
    return "\n".join(lines)


def summary(rows: list[measured.Run], together: bool = False) -> str:
    """One line a row, as the check prints them at the end of a call; `together`: the rows of
    engines that shared the GPU, their passes at once, so their paces add up."""
    out = []
    for r in rows:
        pace = "no pace" if r.pages_per_s is None else f"pages/s {r.pages_per_s:g}"
        if r.direct_pages_per_s:
            pace += f" / direct {r.direct_pages_per_s:g}"
        failed = f", {r.failed} of {r.pages} failed" if r.failed else ""
        if textless := r.extra.get("answers_without_text"):  # a stand-in's: see the bench
            failed += f", {textless} answers without text"
        ready = (
            "did not start" if r.engine_ready_s is None else f"engine ready {r.engine_ready_s:g} s"
        )
        settings = " " + json.dumps(r.overrides) if r.overrides else ""
        out.append(
            f"{r.model} ({r.family}){settings} {r.start}, vLLM {r.vllm}: {ready}, "
            f"{r.pages} pages, {pace}{failed}"
        )
    if together:
        paces = [r.pages_per_s for r in rows]
        direct = [r.direct_pages_per_s for r in rows]
        if None in paces or not paces:
            total = "no pace (an engine gave none)"
        else:
            total = f"pages/s {sum(p or 0.0 for p in paces):.2f}"
            if all(direct):
                total += f" / direct {sum(d or 0.0 for d in direct):.2f}"
        out.append(f"together, {len(rows)} engines sharing the GPU: {total}")
    return "\n".join(out)


# A line of dev/gpu/metrics.py: `t=    30s running=256 waiting=0 kv=12% vllm_processes=...`
_GAUGES = re.compile(r"running=(\d+) waiting=(\d+) kv=(\d+)%")
# The counters' rates of dev/gpu/metrics.py, on the lines that have them
_RATES = re.compile(
    r"running=(\d+) .*output_tok/s=(\d+) steps/s=([\d.]+) tok/step=(\d+) itl_ms=([\d.]+)"
)

# Each part's share of a CPU and the GPU's busy share, on the lines of samplers that read them
_CPU = re.compile(r"running=(\d+) .*cpu%: ([^\n]*?)(?: gpu%=(\d+))?$", re.M)
_CPU_PART = re.compile(r"(core|api|worker|pool|vllm)=([\d,]+)(?:/\d+)?")
_CPU_NAMES = {
    "core": "the engine core",
    "api": "the busiest API server",
    "worker": "the worker",
    "pool": "its render and CPU-model processes in all",
}


def _median(values: list[float] | list[int], unit: str = "") -> str:
    """The median, and the range where the values differ: `43 ms (43-44.1 ms)`."""
    lo, mid, hi = min(values), statistics.median_low(values), max(values)
    fmt = "{:g}".format
    return fmt(mid) + unit + ("" if lo == hi else f" ({fmt(lo)}-{fmt(hi)}{unit})")


def cpu_use(metrics: str) -> str | None:
    """Each part's share of a CPU over the samples with requests, by its median, and the GPU's
    busy share where nvidia-smi read it: an engine core near 100 % beside a GPU short of busy is
    bound by its one thread; API servers near 100 % by their preprocessing."""
    by_part: dict[str, list[int]] = {}
    gpu: list[int] = []
    for running, parts, busy in _CPU.findall(metrics):
        if int(running) == 0:
            continue
        for name, shares in _CPU_PART.findall(parts):
            if name in _CPU_NAMES:
                by_part.setdefault(name, []).append(max(int(v) for v in shares.split(",")))
        if busy:
            gpu.append(int(busy))
    said = [f"{_CPU_NAMES[n]} {_median(by_part[n], ' %')}" for n in _CPU_NAMES if n in by_part]
    if gpu:
        said.append(f"GPU busy {_median(gpu, ' %')}")
    return "CPU (per cent of one): " + ", ".join(said) if said else None


def gauges(metrics: str, api_servers: int = 1) -> str | None:
    """What vLLM's gauges showed while the engine had requests: each gauge's median and range
    over those samples (none: it never had any); then, where the sampler read vLLM's counters,
    the engine's output tokens a second, its steps a second and the mean time between two
    tokens of a request, over the samples that had requests and steps; and where it read them,
    each part's share of a CPU and the GPU's busy share (`cpu_use`).

    Each API server counts every engine step that brought its requests tokens (vLLM's iteration
    histogram is kept by the front ends), so the summed count is the engine's steps times the API
    servers; it is divided back (checked on the H200: the quotient is one over the time between
    tokens while every sequence decodes)."""
    busy = [tuple(map(int, m)) for m in _GAUGES.findall(metrics) if int(m[0]) > 0]
    if not busy:
        return None
    said = (
        f"running {_median([b[0] for b in busy])}, waiting {_median([b[1] for b in busy])}, "
        f"KV {_median([b[2] for b in busy], ' %')}: medians over {len(busy)} samples with requests"
    )
    rates = [
        (int(out), round(float(steps) / max(1, api_servers), 1), float(itl))
        for running, out, steps, _, itl in _RATES.findall(metrics)
        if int(running) > 0 and float(steps) > 0
    ]
    if rates:
        said += (
            f"; output tokens/s {_median([r[0] for r in rates])}, engine steps/s "
            f"{_median([r[1] for r in rates])}, time between tokens "
            f"{_median([r[2] for r in rates], ' ms')} over {len(rates)} samples"
        )
    cpu = cpu_use(metrics)
    return f"{said}; {cpu}" if cpu else said


def add_gauges(metrics: Path, row_file: Path) -> str | None:
    """Write the gauges into the one row of `row_file` (checked again by the data's reader)."""
    row = json.loads(row_file.read_text(encoding="utf-8"))
    text = metrics.read_text(encoding="utf-8", errors="replace")
    said = gauges(text, row.get("api_server_count") or 1)
    if said is None:
        return None
    line = json.dumps(row | {"gauges": said}, ensure_ascii=False)
    measured.parse(line, str(row_file))
    row_file.write_text(line + "\n", encoding="utf-8")
    return said


def _rows(paths: list[Path]) -> list[measured.Run]:
    return [r for p in paths for r in measured.runs(p)]


def _plan_command(
    specs: list[str],
    budget_s: float,
    rows: list[measured.Run],
    vllm: str,
    fresh_done: set[str] | None = None,
    gpu: str = "",
) -> str:
    """The plan of the specs the check knows, then those it does not, each with its reason."""
    known, refused = [], []
    for spec in specs:
        try:
            parse_spec(spec)
            known.append(spec)
        except ValueError as exc:
            refused.append(f"{spec}: skipped: {exc}")
    steps = plan(known, budget_s, rows, vllm, fresh_done, gpu)
    return "\n".join([plan_table(steps, budget_s), *refused])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("plan", "step"):
        q = sub.add_parser(name)
        if name == "plan":
            q.add_argument("budget_s", type=float)
            q.add_argument("specs", nargs="+")
            q.add_argument(
                "--on-host",
                action="store_true",
                help="the plan of a call on the host: a warm start runs only after its fresh one "
                "there (this call's, or one --fresh-done names)",
            )
        else:
            q.add_argument("spec")
            q.add_argument("--left", type=float, required=True)
        q.add_argument(
            "--fresh-done",
            action="append",
            help="a target started fresh on this host by an earlier run (its warm start may run)",
        )
        q.add_argument("--data", type=Path, action="append")
        q.add_argument("--vllm", default="", help="the engine's vLLM (0.26, 0.32): its rows first")
        q.add_argument(
            "--gpu",
            default="",
            help="the card the check runs on (nvidia-smi's name, or H100, H200): its rows first, "
            "and its memory sizes the engine's waves",
        )
    q = sub.add_parser("summary")
    q.add_argument("rows", type=Path, nargs="+")
    q.add_argument("--together", action="store_true", help="engines that shared the GPU")
    q = sub.add_parser("gauges")
    q.add_argument("metrics", type=Path)
    q.add_argument("row", type=Path)
    args = p.parse_args(argv)
    if args.command == "summary":
        print(summary([r for f in args.rows for r in measured.runs(f)], args.together))
        return 0
    if args.command == "gauges":
        print(add_gauges(args.metrics, args.row) or "no sample with requests")
        return 0
    rows = _rows(args.data or [measured.DATA])
    try:
        if args.command == "plan":
            done = set(args.fresh_done or ()) if args.on_host or args.fresh_done else None
            print(_plan_command(args.specs, args.budget_s, rows, args.vllm, done, args.gpu))
            return 0
        done = set(args.fresh_done or ())
        ((s, fate),) = plan([args.spec], args.left, rows, args.vllm, done, args.gpu)
    except ValueError as exc:
        print(f"skip={shlex.quote(str(exc))}")
        return 0
    skipped = f"target={shlex.quote(s.target.name)} skip={shlex.quote(fate)}"
    print(s.shell(args.left) if fate == "runs" else skipped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
