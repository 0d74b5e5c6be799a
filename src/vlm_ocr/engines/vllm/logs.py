"""Reading vLLM's log: the facts a user needs to tell one engine from another, and why it died."""

from __future__ import annotations

import re
import signal

# The line of the engine's log that says why it did not start (the last one that names an error).
# Errors that only say another error happened: the cause is the one before them.
_WRAPPER = re.compile(r"EngineDeadError|See stack trace|RuntimeError: Engine core initialization")
_CAUSE = re.compile(r"((?:[A-Z]\w*(?:Error|Exception))|RuntimeError|ValueError): (.+)")
# pydantic states the reason on the line after its header: "  Value error, max_model_len ...".
_DETAIL = re.compile(r"^\s+(?:Value error, )?(.+?)(?: \[type=.*)?$")
# uvicorn's and ZeroMQ's words when a port picked as free was taken before the server bound it.
_ADDRESS_IN_USE = re.compile(r"address already in use", re.IGNORECASE)

# Lines of vLLM's log that carry facts worth reporting.
_FACTS = {
    "gdn_prefill_kernel": re.compile(r"Using (\S+(?: \S+)?) GDN prefill kernel"),
    "kv_cache_tokens": re.compile(r"KV cache size: ([\d,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"),
    "kv_cache_dtype_resolved": re.compile(r"kv_cache_dtype=(\w+)"),
    "attention_backend": re.compile(r"Using (\S+) (?:attention )?backend"),
    # The GEMM kernel of the quantized weights: what the speed of a worker hangs on (on an H200,
    # FP8 weights ran at 3.44 pages/s on DeepGEMM and about 1.7 on CUTLASS).
    "linear_kernel": re.compile(r"(?:Selected|Using) (\w+Kernel) for \w+"),
}


# Which kernel samples at top_p < 1: FlashInfer's fused sampler, or where it is off or cannot run,
# vLLM's own (a Triton filter that compiles for each new batch shape at its first use when the
# JIT warm-up is off, which holds up a fresh engine's first busy minute: docs/models.md).
_SAMPLER = re.compile(
    r"Using FlashInfer for top-p"
    r"|FlashInfer top-p/top-k sampling (?:disabled via (\S+?)\.?$|unavailable: (.+?); falling back)"
)


def facts_in(line: str) -> dict[str, str]:
    """The facts one line of vLLM's log states; the worker keeps the first statement of each."""
    facts = {name: m.group(1) for name, pattern in _FACTS.items() if (m := pattern.search(line))}
    if m := _SAMPLER.search(line):
        why = m.group(1) or m.group(2)
        facts["sampler"] = f"vLLM's own, FlashInfer's not used: {why}" if why else "FlashInfer"
    return facts


def cause_in(lines: list[str]) -> str:
    """The last error a log states that is not a wrapper of another; "" when none does."""
    for i in range(len(lines) - 1, -1, -1):
        m = _CAUSE.search(lines[i])
        if not m or _WRAPPER.search(lines[i]):
            continue
        detail = _DETAIL.match(lines[i + 1]) if i + 1 < len(lines) else None
        if m.group(1) == "ValidationError" and detail:
            return f"{m.group(2)}: {detail.group(1)}"
        return m.group(0)
    return ""


def address_in_use(lines: list[str]) -> bool:
    """The log says a port was taken: a start that picked free ports may try new ones."""
    return any(_ADDRESS_IN_USE.search(line) for line in lines)


def exit_reason(role: str, when: str, code: int | None, lines: list[str]) -> str:
    """Why a vLLM process ended, as a user reads it."""
    killed = "killed: out of memory is the usual cause"
    hint = f" ({killed})" if code in (-signal.SIGKILL, 137) else ""
    cause = cause_in(lines)
    if code == 0 and not cause:
        # vLLM's own processes end quietly when their engine core vanished; a core that raised
        # would have left its error in the log.
        cause = f"its engine core process died without an error in the log ({killed})"
    return f"the vLLM {role} exited {when} with code {code}{hint}" + (
        f": {cause[:400]}" if cause else ""
    )


# --- the cold start, phase by phase -------------------------------------------------------------

_INIT_ENGINE = r"init engine \(profile, create kv cache, warmup model\)"
# The phases of a start, in the order they come: (key, label, its line). A line with a group
# states a phase's length (vLLM's own clock; the first statement counts: with several replicas or
# API servers each says it once); one without marks a moment, the time its line arrives here in
# seconds since the spawn.
_PHASES = tuple(
    (key, label, re.compile(line))
    for key, label, line in (
        ("first_log_line_at_s", "first log line at", r"\S"),
        # at DEBUG: reading what vLLM needs to know of the model's class, from its cache or by
        # importing it in a subprocess (the image seeds that cache)
        (
            "model_inspection_s",
            "model class inspection",
            r"Registry inspect model class: Elapsed time ([\d.]+) sec",
        ),
        # the split start's engine launcher, its config made (the model's config and class read)
        ("engine_config_at_s", "engine launcher configured at", r"engine\(s\) in headless mode"),
        ("engine_core_at_s", "engine core up at", r"Initializing a V1 LLM engine"),
        ("model_load_at_s", "model load begun at", r"Starting to load model"),
        ("weights_s", "weights", r"Loading weights took ([\d.]+) s"),
        ("model_load_s", "model load", r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) s"),
        ("dynamo_s", "dynamo", r"Dynamo bytecode transform time: ([\d.]+) s"),
        ("torch_compile_s", "torch.compile", r"torch\.compile (?:takes|took) ([\d.]+) s in total"),
        ("profiling_s", "profiling run", r"Initial profiling/warmup run took ([\d.]+) s"),
        ("profiling_done_at_s", "profiling run done at", r"Initial profiling/warmup run took"),
        # the KV cache's size decided: measured, or taken from a start's measurement
        (
            "kv_cache_sized_at_s",
            "KV cache sized at",
            r"Available KV cache memory|skipped memory profiling",
        ),
        ("cuda_graphs_s", "CUDA graphs", r"Graph capturing finished in ([\d.]+) sec"),
        ("engine_init_s", "engine init", _INIT_ENGINE + r" took ([\d.]+)"),
        ("engine_ready_at_s", "engine ready at", _INIT_ENGINE),
        (
            "api_server_ready_at_s",
            "API server ready at",
            r"Application startup complete|Starting vLLM API server",
        ),
    )
)
_LABELS = {key: label for key, label, _ in _PHASES}
# Phases vLLM states once for each module it compiles, tagged since 0.32 (`[backbone]`, and
# `[Qwen3_VisionBlock]` with `compile_mm_encoder`): summed over the tags, each tag's first
# statement counting (a compiled block used many times states its load again for each).
_PER_MODULE = frozenset({"dynamo_s", "torch_compile_s"})
_MODULE_TAG = re.compile(r"\[(\w+)\] (?:torch\.compile|Dynamo)")
# The stretches between those lines that vLLM does not time, worked out from them: (key, label,
# the moment it ends, the moments it may begin at, latest known first).
_CORE, _CONFIG, _FIRST = "engine_core_at_s", "engine_config_at_s", "first_log_line_at_s"
_UNTIMED = (
    ("engine_config_s", "the engine launcher's config", _CONFIG, (_FIRST,)),
    # the engine core logs its first line once its handshake with the API server is done
    ("engine_core_start_s", "the engine core's start and handshake", _CORE, (_CONFIG, _FIRST)),
    ("worker_init_s", "its worker's start and device init", "model_load_at_s", (_CORE,)),
    # the rest of the profiling run and the memory measured (CUDA graphs' estimate included):
    # what a kept measurement (`VLLM_ENABLE_STARTUP_PLAN`) skips
    (
        "memory_profiling_s",
        "memory profiling after the profiling run",
        "kv_cache_sized_at_s",
        ("profiling_done_at_s",),
    ),
    # from the last of those lines seen, less the model load (vLLM times that)
    (
        "before_engine_init_s",
        "until engine init, model load aside",
        "engine_init_began_at_s",
        ("model_load_at_s", _CORE, _CONFIG, _FIRST),
    ),
    (
        "api_servers_after_engine_s",
        "the API servers after the engine",
        "api_server_ready_at_s",
        ("engine_ready_at_s",),
    ),
)
_LABELS |= {key: label for key, label, *_ in _UNTIMED}
NOTHING_COMPILED = "not logged (nothing compiled)"
# vLLM's compile cache, by what a start's lines say happened (0.26's and 0.32's wording; 0.32 puts
# a "[tag] " before some). The AOT path (torch 2.10+) loads a whole compiled model and traces
# nothing; the per-graph cache still traces the model (dynamo) and loads each graph.
_COMPILE_LINES = {
    "aot_loaded": re.compile(r"Directly load AOT compilation from path"),
    "graphs_loaded": re.compile(r"Directly load the compiled graph"),
    "traced": re.compile(r"Dynamo bytecode transform time"),
    "compiled": re.compile(r"Compiling a graph for (?:dynamic shape|compile range)"),
}
_COMPILE_TROUBLE = {
    "compile_cache_load_failure": re.compile(
        r"Compiling model again due to a load failure from \S+, reason: (.+)"
    ),
    "compile_cache_save_failure": re.compile(r"unable to save AOT compiled function to \S+: (.+)"),
}
HIT, MISS = "hit", "miss"
RETRACED = "traced again (dynamo), the compiled graphs from the cache"
# How the KV cache's memory was decided (the first of these lines a start logs).
_MEMORY = (
    ("reused", re.compile(r"Applying persisted startup plan")),
    (
        "measured (a kept measurement was not applied: less free GPU memory than when it was made)",
        re.compile(r"Startup plan not applied"),
    ),
    ("as --kv-cache-memory-bytes set it", re.compile(r"skipped memory profiling")),
    ("measured", re.compile(r"Available KV cache memory")),
)
_MEMORY_KEPT = re.compile(r"Saved startup plan to")
_MEMORY_NOT_KEPT = re.compile(r"Failed to save startup plan to \S+: (.+)")
# FlashInfer's autotuning (Hopper and newer). Both versions name the results file, 0.26 then says
# "cache loaded" once it wrote the file (a fresh start too) or "No ... entries found" when nothing
# was tunable; 0.32 says nothing more. So what happened is told by the file: there before the
# start (read), there after it (tuned and kept), or never written (nothing to tune).
_AUTOTUNE_FILE = re.compile(r"Using FlashInfer autotune cache file: (\S+)")
_AUTOTUNE_OFF = re.compile(r"Skipping FlashInfer autotune because it is disabled")
AUTOTUNE_OFF = "off"
AUTOTUNE_READ = "read from the cache (tuned by an earlier start)"
AUTOTUNE_TUNED = "tuned at start, results kept"
AUTOTUNE_NOTHING = "nothing to tune (no tunable FlashInfer kernel in this model)"


def autotune_verdict(
    file: str | None, off: bool, *, there_before: bool, there_now: bool
) -> str | None:
    """What FlashInfer's autotuning did at a start, from its lines and its results file."""
    if off:
        return AUTOTUNE_OFF
    if file is None:
        return None  # not run: a GPU older than Hopper, or no FlashInfer
    if there_before:
        return AUTOTUNE_READ
    return AUTOTUNE_TUNED if there_now else AUTOTUNE_NOTHING


# What takes time at start that no line of vLLM's log times or bounds on its own.
NOT_LOGGED = (
    "imports before the first log line",
    "Triton autotuning of the GDN layers (inside the profiling run)",
    "FlashInfer and DeepGEMM JIT warm-up (inside engine init)",
    "the multimodal processor's warm-up in the API server",
)


class StartLog:
    """The cold start taken apart from vLLM's own log lines as they arrive."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._modules: set[tuple[str, str]] = set()  # (phase, module tag) already counted
        self.compiles: set[str] = set()  # which of _COMPILE_LINES came
        self.trouble: dict[str, str] = {}  # the compile cache's load or save failure
        self.memory: str | None = None
        self.memory_kept: str | None = None
        self.autotune_file: str | None = None
        self.autotune_off = False
        #: set by whoever can look at the file: what FlashInfer's autotuning did
        self.flashinfer_autotune: str | None = None

    def line(self, text: str, since_spawn_s: float) -> None:
        for name, _, pattern in _PHASES:
            per_module = name in _PER_MODULE
            if (name in self.phases and not per_module) or not (m := pattern.search(text)):
                continue
            if not per_module:
                self.phases[name] = float(m.group(1)) if pattern.groups else round(since_spawn_s, 2)
                continue
            module = _MODULE_TAG.search(text)
            tag = (name, module.group(1) if module else "")
            if tag not in self._modules:
                self._modules.add(tag)
                self.phases[name] = round(self.phases.get(name, 0.0) + float(m.group(1)), 2)
        self.compiles |= {what for what, pattern in _COMPILE_LINES.items() if pattern.search(text)}
        for key, pattern in _COMPILE_TROUBLE.items():
            if key not in self.trouble and (m := pattern.search(text)):
                self.trouble[key] = m.group(1)[:300]
        if self.memory is None:
            self.memory = next((state for state, p in _MEMORY if p.search(text)), None)
        if _MEMORY_KEPT.search(text):
            self.memory_kept = "kept for the next start"
        elif m := _MEMORY_NOT_KEPT.search(text):
            self.memory_kept = f"not kept: {m.group(1)[:200]}"
        if m := _AUTOTUNE_FILE.search(text):
            self.autotune_file = self.autotune_file or m.group(1)
        self.autotune_off = self.autotune_off or bool(_AUTOTUNE_OFF.search(text))

    @property
    def compile_cache(self) -> str:
        """What became of torch.compile: loaded whole, traced again with its graphs loaded,
        compiled, or nothing compiled at all."""
        seen = self.compiles
        failed = "compile_cache_load_failure" in self.trouble  # vLLM then compiles again
        if failed or "compiled" in seen or ("traced" in seen and "graphs_loaded" not in seen):
            return MISS
        if "traced" in seen:
            return RETRACED
        return HIT if seen & {"aot_loaded", "graphs_loaded"} else NOTHING_COMPILED

    def untimed(self) -> dict[str, float]:
        """The stretches vLLM does not time, from the moments its lines came (those it logged)."""
        at = dict(self.phases)
        if "engine_ready_at_s" in at and "engine_init_s" in at:
            at["engine_init_began_at_s"] = at["engine_ready_at_s"] - at["engine_init_s"]
        out = {}
        for key, _, end, begins in _UNTIMED:
            begin = next((b for b in begins if b in at), None)
            if end not in at or begin is None:
                continue
            # the model load lies inside the stretch before engine init, whichever line began it
            timed = at.get("model_load_s", 0.0) if key == "before_engine_init_s" else 0.0
            out[key] = round(max(0.0, at[end] - at[begin] - timed), 2)
        return out

    def facts(self) -> dict[str, object]:
        out: dict[str, object] = dict(self.phases)
        out["untimed"] = self.untimed()
        out["compile_cache"] = self.compile_cache
        out |= self.trouble
        if self.memory:
            out["memory_profile"] = ", ".join(filter(None, (self.memory, self.memory_kept)))
        if self.flashinfer_autotune:
            out["flashinfer_autotune"] = self.flashinfer_autotune
        out["not_logged"] = list(NOT_LOGGED)
        return out

    def summary(self) -> str:
        """One line for the log: each phase with its figure."""
        return summary(self.facts())


def redone_on_warm_caches(cold_start: dict[str, object]) -> list[str]:
    """What a start on caches an earlier start completed did again that those caches should
    have spared it: torch.compile, the memory profiling, FlashInfer's autotuning."""
    redone = []
    cache = cold_start.get("compile_cache")
    if cache in (MISS, RETRACED):
        why = cold_start.get("compile_cache_load_failure") or "no compiled model found for it"
        redone.append(f"torch.compile ({cache}: {why})")
    memory = str(cold_start.get("memory_profile") or "")
    if memory.startswith("measured"):
        redone.append(f"memory profiling ({memory})")
    if cold_start.get("flashinfer_autotune") == AUTOTUNE_TUNED:
        redone.append("FlashInfer autotuning")
    return redone


def summary(cold_start: dict[str, object]) -> str:
    """The engine facts' `cold_start` as one line: each phase with its figure, then what vLLM
    does not time, the compile cache and FlashInfer's autotuning."""
    parts = [
        f"{_LABELS[k]} {v:g} s" for k, v in cold_start.items() if k in _LABELS and _is_number(v)
    ]
    untimed = cold_start.get("untimed")
    if isinstance(untimed, dict) and untimed:
        parts.append(
            "not timed by vLLM: " + ", ".join(f"{_LABELS[k]} {v:g} s" for k, v in untimed.items())
        )
    if (cache := cold_start.get("compile_cache")) and cache != NOTHING_COMPILED:
        parts.append(f"compile cache {cache}")
    if memory := cold_start.get("memory_profile"):
        parts.append(f"KV cache memory {memory}")
    if tuned := cold_start.get("flashinfer_autotune"):
        parts.append(f"FlashInfer autotune {tuned}")
    if redone := cold_start.get("redone_on_warm_caches"):
        parts.append("on warm caches, done again: " + "; ".join(map(str, redone)))  # type: ignore[call-overload]
    return ", ".join(parts) or "no phase logged"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
