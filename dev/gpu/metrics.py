"""Sample what the engine is doing while a benchmark runs: vLLM's own gauges (requests running and
waiting, KV-cache use) from its /metrics, what its counters grew by since the last sample (prompt
and output tokens a second, engine steps a second, tokens a step, the mean time between two
tokens of a request), and the open files of its processes against their limit (vLLM warns when
it cannot raise the open-file limit). One line per sample, until ended.

Steps a second at a full batch say whether the engine itself is slow (a decode step of 256
sequences of a 1B model should take about 10 ms) or is kept waiting; prompt tokens a second say
how much of its time goes to prefill. (vLLM logs none of this with several API servers: its
logging stat logger, `--enable-logging-iteration-details` included, is off then.)

    python3 dev/gpu/metrics.py PORT [SECONDS]
"""

from __future__ import annotations

import os
import re
import sys
import time
import urllib.request
from pathlib import Path

GAUGES = {
    "running": re.compile(r"^vllm:num_requests_running\{[^}]*\} ([\d.e+]+)", re.M),
    "waiting": re.compile(r"^vllm:num_requests_waiting\{[^}]*\} ([\d.e+]+)", re.M),
    "kv": re.compile(r"^vllm:(?:kv|gpu)_cache_usage_perc\{[^}]*\} ([\d.e+-]+)", re.M),
}
# Counters and histograms' sums and counts: their growth between two samples
COUNTERS = {
    "prompt_tokens": re.compile(r"^vllm:prompt_tokens_total\{[^}]*\} ([\d.e+]+)", re.M),
    "output_tokens": re.compile(r"^vllm:generation_tokens_total\{[^}]*\} ([\d.e+]+)", re.M),
    "steps": re.compile(r"^vllm:iteration_tokens_total_count\{[^}]*\} ([\d.e+]+)", re.M),
    "step_tokens": re.compile(r"^vllm:iteration_tokens_total_sum\{[^}]*\} ([\d.e+]+)", re.M),
    "itl_s": re.compile(r"^vllm:inter_token_latency_seconds_sum\{[^}]*\} ([\d.e+]+)", re.M),
    "itl_n": re.compile(r"^vllm:inter_token_latency_seconds_count\{[^}]*\} ([\d.e+]+)", re.M),
}


def gauges(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    # several API servers report one line each: the engine-side gauges are summed over them
    return {k: sum(float(v) for v in p.findall(text)) for k, p in (GAUGES | COUNTERS).items()}


def rates(now: dict[str, float], before: dict[str, float], seconds: float) -> str:
    """What the counters grew by since the last sample, as rates ('' before the first)."""
    if not before or seconds <= 0:
        return ""
    d = {k: now.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS}
    steps = d["steps"]
    return (
        f" prompt_tok/s={d['prompt_tokens'] / seconds:.0f}"
        f" output_tok/s={d['output_tokens'] / seconds:.0f} steps/s={steps / seconds:.1f}"
        f" tok/step={d['step_tokens'] / steps if steps else 0:.0f}"
        f" itl_ms={1000 * d['itl_s'] / d['itl_n'] if d['itl_n'] else 0:.1f}"
    )


def open_files() -> tuple[int, int, int | None]:
    """(processes of vLLM, their open files, the lowest open-file limit among them)."""
    count = files = 0
    limit = None
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            # vLLM's API servers and engine cores rename themselves (VLLM::APIServer_0, ...)
            if b"vllm" not in Path(f"/proc/{pid}/cmdline").read_bytes().lower():
                continue
            files += len(os.listdir(f"/proc/{pid}/fd"))
            soft = re.search(r"Max open files\s+(\d+)", Path(f"/proc/{pid}/limits").read_text())
        except OSError:
            continue
        count += 1
        if soft:
            limit = min(limit or 1 << 62, int(soft.group(1)))
    return count, files, limit


def main() -> None:
    port = int(sys.argv[1])
    every = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    t0 = time.time()
    before: dict[str, float] = {}
    t_before = t0
    while True:
        g = gauges(port)
        now = time.time()
        procs, files, limit = open_files()
        if g or procs:
            kv = 100 * g.get("kv", 0) if g.get("kv", 0) <= 1 else g.get("kv", 0)
            print(
                f"t={now - t0:6.0f}s running={g.get('running', 0):.0f} "
                f"waiting={g.get('waiting', 0):.0f} kv={kv:.0f}% vllm_processes={procs} "
                f"open_files={files} limit={limit}{rates(g, before, now - t_before)}",
                flush=True,
            )
        if g:
            before, t_before = g, now
        time.sleep(every)


if __name__ == "__main__":
    main()
