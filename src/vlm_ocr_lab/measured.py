"""The GPU figures as data: `benchmarks/gpu.jsonl`, one JSON object a run, appended by the GPU
check (`dev/gpu/check.sh`) and read by the docs generators, so no measured figure is typed by
hand in two places.

Each row says what measured it (date, commit, GPU, vLLM, transformers), what ran (the family,
the settings that differ from its defaults, a fresh or a warm start), and what came out (the
engine's start and its phases, pages, failures by reason, pages/s through the worker and
straight to the engine, and the cost of a million pages).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Literal

from vlm_ocr.engines.families import FAMILIES
from vlm_ocr.engines.vllm.argv import IMAGE_VLLM, vllm_release
from vlm_ocr.errors import ConfigError
from vlm_ocr.settings import Settings, StartMode

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu.jsonl"
REFERENCE_GPU = "H200"  # the card every measured figure in the docs is compared on


def card(gpu: str) -> str:
    """A card's short name as the tables write it: `NVIDIA H100 80GB HBM3` is `H100`."""
    return gpu.removeprefix("NVIDIA ").split(" ")[0]


Start = Literal["fresh", "warm"]
REQUIRED = (
    "date",
    "commit",
    "gpu",
    "vllm",
    "transformers",
    "family",
    "overrides",
    "start",
    "engine_ready_s",
    "phases",
    "pages",
    "failed",
    "failed_by_reason",
    "pages_per_s",
    "direct_pages_per_s",
    "usd_per_million_pages",
)


@dataclass(frozen=True)
class Run:
    date: str
    commit: str
    gpu: str
    vllm: str
    transformers: str
    family: str
    #: the settings that differed from the family's defaults when it ran ({} at its defaults)
    overrides: dict[str, Any]
    start: Start
    #: seconds from the worker's start to an engine that has read its warm-up page
    engine_ready_s: float | None
    #: the cold start's phases in seconds, as `engines/vllm/logs.summary` names them
    phases: dict[str, float]
    pages: int
    failed: int
    failed_by_reason: dict[str, int]
    #: pages that came back `ok` per second through the worker, the last pass's (None: no pace,
    #: e.g. all failed); `pages` and `failed` count every pass
    pages_per_s: float | None
    #: the same pages sent straight to the engine's server (None: not measured)
    direct_pages_per_s: float | None
    usd_per_million_pages: float | None
    #: the checkpoint whose shapes ran (dummy weights), and anything else a reader must know
    model: str = ""
    note: str = ""
    #: keys beyond these: how the bench ran (`jobs`, `output_tokens`, `greedy_temperature`,
    #: `bench_settings`), what the engine started with (`api_server_count`, `start_mode`,
    #: `max_num_batched_tokens`, `caches`, `compile_cache`), vLLM's gauges meanwhile (`gauges`),
    #: why a start failed (`start_error`), a cut run (`cut`), the direct path run before the
    #: worker's passes (`direct_first`), answers that came back with no text
    #: (`answers_without_text`: a stand-in's greedy answers, see the bench)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def start_mode(self) -> str:
        """What the engine compiled at start: as its facts say, else as the row set it (rows
        from before `fast` existed compiled everything)."""
        ran = self.extra.get("start_mode") or self.overrides.get("START_MODE")
        return str(ran or StartMode.THROUGHPUT.value)

    @cached_property  # read by every table for every row: parsed once
    def off_defaults(self) -> dict[str, Any]:
        """The overrides that differ from today's defaults: a run that set what has since
        become the default ran at the defaults (its row keeps what it set). The start mode is
        the family's own today (`START_MODE=auto`): a run in another is off its defaults."""
        off = beyond_defaults({k: v for k, v in self.overrides.items() if k != "START_MODE"})
        if self.start_mode != family_start_mode(self.family):
            off["START_MODE"] = self.start_mode
        # the tokens a step: the family's own on that vLLM today (`MAX_NUM_BATCHED_TOKENS=0`)
        # or not, by what the engine ran with where the row says it, else by what it set
        own = family_batched_tokens(self.family, self.model, self.vllm)
        ran = self.extra.get("max_num_batched_tokens")
        if ran is not None:
            off.pop("MAX_NUM_BATCHED_TOKENS", None)
            if own is not None and int(ran) != own:
                off["MAX_NUM_BATCHED_TOKENS"] = str(ran)
        elif own is not None and str(off.get("MAX_NUM_BATCHED_TOKENS")) == str(own):
            del off["MAX_NUM_BATCHED_TOKENS"]
        # the bench's order: with the direct path first, a fresh engine's first busy minute fell
        # on it and not on the worker, so neither pace compares with a row at the defaults
        if self.extra.get("direct_first"):
            off["DIRECT_FIRST"] = "1"
        # the sampler: the host's is vLLM's own Triton filter (dev/gpu/env.sh), since FlashInfer's
        # is compiled at its first page where flashinfer-jit-cache is missing (the host's case,
        # not the image's), so a FlashInfer row's start is not comparable with the others'
        if str(self.extra.get("sampler", "")).startswith("FlashInfer"):
            off["FLASHINFER_SAMPLER"] = "1"
        # a vLLM newer than the image's is a trial of an engine the image does not ship (older
        # rows were measured on the image's engine of their day, and name it)
        release = vllm_release(self.vllm or "")
        if release > vllm_release(IMAGE_VLLM):
            off["VLLM"] = ".".join(map(str, release))
        # the card: the docs' figures and goals are one H200's, and another card's pace and
        # memory are its own (an H100 holds fewer pages at once and reads them slower)
        if self.gpu and REFERENCE_GPU not in self.gpu:
            off["GPU"] = card(self.gpu)
        return off

    @property
    def at_defaults(self) -> bool:
        return not self.off_defaults

    @property
    def textless(self) -> str:
        """Said beside a pace whose answers came back with no text: a stand-in's greedy answers
        repeat one token that decodes to none (a skipped special token costs the API servers'
        detokenizer at every step, where a trained model's text costs it little: docs/models.md),
        so such a pace may be the stand-in's rather than the model's."""
        count = int(self.extra.get("answers_without_text") or 0)
        return f"{count:,} answers without text" if count else ""

    @property
    def ratio(self) -> float | None:
        """Worker over direct: how well the worker keeps the engine fed."""
        if self.pages_per_s is None or not self.direct_pages_per_s:
            return None
        return self.pages_per_s / self.direct_pages_per_s


@cache
def _defaults() -> dict[str, Any]:
    return Settings().flat()


def family_start_mode(family: str) -> str:
    """The start mode `START_MODE=auto` gives a family today."""
    found = FAMILIES.get(family)
    return (found.start_mode if found else StartMode.THROUGHPUT).value


def family_batched_tokens(family: str, model: str, vllm: str) -> int | None:
    """The tokens a step `MAX_NUM_BATCHED_TOKENS=0` gives this checkpoint of the family on
    that vLLM today (None: a family the worker no longer has)."""
    found = FAMILIES.get(family)
    return found(model=model).batched_tokens(vllm_release(vllm)) if found and vllm else None


def other_start(family: str) -> dict[str, str]:
    """The overrides of a run in the start mode that is not its family's: the tables set its
    start beside the defaults'."""
    mine = family_start_mode(family)
    other = StartMode.THROUGHPUT if mine == StartMode.FAST.value else StartMode.FAST
    return {"START_MODE": other.value}


def beyond_defaults(overrides: dict[str, Any]) -> dict[str, Any]:
    """The settings among `overrides` (environment names and values, as a row spells them)
    whose values are not today's defaults; a name that is no setting is kept."""
    defaults = _defaults()
    kept = {}
    for key, value in overrides.items():
        name = key.lower()
        if name in defaults:
            try:
                if Settings.from_env({key: str(value)}).flat()[name] == defaults[name]:
                    continue
            except ConfigError:  # not a value a worker takes today: an override still
                pass
        kept[key] = value
    return kept


class BadRow(ValueError):
    pass


def parse(line: str, where: str = "") -> Run:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadRow(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise BadRow(f"{where}: a row is a JSON object")
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        raise BadRow(f"{where}: missing {', '.join(missing)}")
    if obj["start"] not in ("fresh", "warm"):
        raise BadRow(f"{where}: start is 'fresh' or 'warm', not {obj['start']!r}")
    for key in ("overrides", "phases", "failed_by_reason"):
        if not isinstance(obj[key], dict):
            raise BadRow(f"{where}: {key} is an object")
    if sum(obj["failed_by_reason"].values()) != obj["failed"]:
        raise BadRow(f"{where}: failed_by_reason does not add up to failed")
    if obj["failed"] and obj["pages_per_s"] is not None and obj["failed"] == obj["pages"]:
        raise BadRow(f"{where}: a run whose every page failed has no pace")
    known = set(REQUIRED) | {"model", "note"}
    extra = {k: v for k, v in obj.items() if k not in known}
    return Run(**{k: v for k, v in obj.items() if k in known}, extra=extra)


def runs(path: Path = DATA) -> list[Run]:
    """Every row, oldest first (the file's order)."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [parse(line, f"{path.name}:{n}") for n, line in enumerate(lines, 1) if line.strip()]


def latest(
    family: str,
    *,
    start: Start = "fresh",
    overrides: dict[str, Any] | None = None,
    rows: list[Run] | None = None,
    model: str | None = None,
) -> Run | None:
    """The newest run of a family with these overrides beyond today's defaults ({}: at its
    defaults); with `model`, of that checkpoint only (a family's rows may be of several:
    Qwen3-VL AWQ, FP8, 8B)."""
    want = overrides or {}
    found = [
        r
        for r in (runs() if rows is None else rows)
        if r.family == family
        and r.start == start
        and r.off_defaults == want
        and (model is None or r.model == model)
    ]
    return found[-1] if found else None


def usd_per_million(pages_per_s: float, usd_per_hour: float) -> float:
    return usd_per_hour / 3600 / pages_per_s * 1e6
