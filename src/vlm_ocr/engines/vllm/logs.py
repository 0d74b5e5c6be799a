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

# Phases whose length vLLM states (its own clock), by the line that states it; the first
# statement of each counts (with several replicas or API servers, each says it once).
_STATED = {
    "weights_s": re.compile(r"Loading weights took ([\d.]+) s"),
    "model_load_s": re.compile(r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) s"),
    "dynamo_s": re.compile(r"Dynamo bytecode transform time: ([\d.]+) s"),
    "torch_compile_s": re.compile(r"torch\.compile (?:takes|took) ([\d.]+) s in total"),
    "profiling_s": re.compile(r"Initial profiling/warmup run took ([\d.]+) s"),
    "cuda_graphs_s": re.compile(r"Graph capturing finished in ([\d.]+) sec"),
    "engine_init_s": re.compile(
        r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+)"
    ),
}
# Moments the log marks, timed here as the line arrives (seconds since the spawn).
_MARKED = {
    "first_log_line_at_s": re.compile(r"\S"),
    "engine_ready_at_s": re.compile(r"init engine \(profile, create kv cache, warmup model\)"),
    "api_server_ready_at_s": re.compile(r"Application startup complete|Starting vLLM API server"),
}
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
# What takes time at start that vLLM does not time in its log.
NOT_LOGGED = (
    "imports before the first log line",
    "the API servers' own start between the engine's readiness and theirs",
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
        for name, pattern in _STATED.items():
            if name not in self.phases and (m := pattern.search(text)):
                self.phases[name] = float(m.group(1))
        for name, pattern in _MARKED.items():
            if name not in self.phases and pattern.search(text):
                self.phases[name] = round(since_spawn_s, 2)
        for state, pattern in _COMPILE_CACHE:
            if self.compile_cache is None and pattern.search(text):
                self.compile_cache = state
        for state, pattern in _FLASHINFER_AUTOTUNE:
            if self.flashinfer_autotune is None and pattern.search(text):
                self.flashinfer_autotune = state

    def facts(self) -> dict[str, object]:
        out: dict[str, object] = dict(self.phases)
        out["compile_cache"] = self.compile_cache or "not logged (nothing compiled)"
        if self.flashinfer_autotune:
            out["flashinfer_autotune"] = self.flashinfer_autotune
        out["not_logged"] = list(NOT_LOGGED)
        return out

    def summary(self) -> str:
        """One line for the log: each phase with its figure."""
        words = {
            "first_log_line_at_s": "first log line at",
            "weights_s": "weights",
            "model_load_s": "model load",
            "dynamo_s": "dynamo",
            "torch_compile_s": "torch.compile",
            "profiling_s": "profiling run",
            "cuda_graphs_s": "CUDA graphs",
            "engine_init_s": "engine init",
            "engine_ready_at_s": "engine ready at",
            "api_server_ready_at_s": "API server ready at",
        }
        parts = [f"{words[k]} {v:g} s" for k, v in self.phases.items() if k in words]
        if self.compile_cache:
            parts.append(f"compile cache {self.compile_cache}")
        return ", ".join(parts) or "no phase logged"
