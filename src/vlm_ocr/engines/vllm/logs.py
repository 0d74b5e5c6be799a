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


def facts_in(line: str) -> dict[str, str]:
    """The facts one line of vLLM's log states; the worker keeps the first statement of each."""
    return {name: m.group(1) for name, pattern in _FACTS.items() if (m := pattern.search(line))}


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
        # the split start's engine launcher, its config made (the model's config and class read)
        ("engine_config_at_s", "engine launcher configured at", r"engine\(s\) in headless mode"),
        ("engine_core_at_s", "engine core up at", r"Initializing a V1 LLM engine"),
        ("model_load_at_s", "model load begun at", r"Starting to load model"),
        ("weights_s", "weights", r"Loading weights took ([\d.]+) s"),
        ("model_load_s", "model load", r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) s"),
        ("dynamo_s", "dynamo", r"Dynamo bytecode transform time: ([\d.]+) s"),
        ("torch_compile_s", "torch.compile", r"torch\.compile (?:takes|took) ([\d.]+) s in total"),
        ("profiling_s", "profiling run", r"Initial profiling/warmup run took ([\d.]+) s"),
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
# The stretches between those lines that vLLM does not time, worked out from them: (key, label,
# the moment it ends, the moments it may begin at, latest known first).
_CORE, _CONFIG, _FIRST = "engine_core_at_s", "engine_config_at_s", "first_log_line_at_s"
_UNTIMED = (
    ("engine_config_s", "the engine launcher's config", _CONFIG, (_FIRST,)),
    # the engine core logs its first line once its handshake with the API server is done
    ("engine_core_start_s", "the engine core's start and handshake", _CORE, (_CONFIG, _FIRST)),
    ("worker_init_s", "its worker's start and device init", "model_load_at_s", (_CORE,)),
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
_COMPILE_CACHE = (
    ("hit", re.compile(r"Directly load the compiled graph|from the cache, took")),
    ("miss", re.compile(r"Compiling a graph for (?:dynamic shape|compile range)")),
)
# Whether FlashInfer tuned its kernels at start or read earlier results (vLLM names the cache
# file either way, so that line alone says nothing).
_FLASHINFER_AUTOTUNE = (
    ("tuned at start", re.compile(r"No FlashInfer autotune cache entries found")),
    ("read from the cache", re.compile(r"FlashInfer autotune cache loaded")),
)
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
        self.compile_cache: str | None = None
        self.flashinfer_autotune: str | None = None

    def line(self, text: str, since_spawn_s: float) -> None:
        for name, _, pattern in _PHASES:
            if name in self.phases or not (m := pattern.search(text)):
                continue
            self.phases[name] = float(m.group(1)) if pattern.groups else round(since_spawn_s, 2)
        for state, pattern in _COMPILE_CACHE:
            if self.compile_cache is None and pattern.search(text):
                self.compile_cache = state
        for state, pattern in _FLASHINFER_AUTOTUNE:
            if self.flashinfer_autotune is None and pattern.search(text):
                self.flashinfer_autotune = state

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
        out["compile_cache"] = self.compile_cache or NOTHING_COMPILED
        if self.flashinfer_autotune:
            out["flashinfer_autotune"] = self.flashinfer_autotune
        out["not_logged"] = list(NOT_LOGGED)
        return out

    def summary(self) -> str:
        """One line for the log: each phase with its figure."""
        return summary(self.facts())


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
    if tuned := cold_start.get("flashinfer_autotune"):
        parts.append(f"FlashInfer autotune {tuned}")
    return ", ".join(parts) or "no phase logged"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
