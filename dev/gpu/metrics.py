"""Sample what the engine is doing while a benchmark runs: vLLM's own gauges (requests running and
waiting, KV-cache use) from its /metrics, what its counters grew by since the last sample (prompt
and output tokens a second, engine steps a second, tokens a step, the mean time between two
tokens of a request), the open files of its processes against their limit (vLLM warns when
it cannot raise the open-file limit), the share of a CPU each part of the run used since the last
sample (`cpu%:`: the engine core, each API server, the worker's process and its pool of render
and CPU-model processes, vLLM's other processes) and the GPU's busy share as nvidia-smi reads it.
One line per sample, until ended.

Steps a second at a full batch say whether the engine itself is slow (a decode step of 256
sequences of a 1B model should take about 10 ms) or is kept waiting; prompt tokens a second say
how much of its time goes to prefill. An engine core near 100 % of a CPU with the GPU short of
busy is bound by that one thread; API servers near 100 % by their preprocessing. (vLLM logs none
of this with several API servers: its logging stat logger, `--enable-logging-iteration-details`
included, is off then.)

    python3 dev/gpu/metrics.py PORT [SECONDS]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    argv: str  # the command line, its arguments joined by spaces (a retitled process's title)
    cpu_s: float  # user and system time so far


def processes() -> dict[int, Proc]:
    """Every process this sampler may read, by pid."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            argv = (
                Path(f"/proc/{pid}/cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
        except OSError:
            continue
        # the fields after the command's name, which may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(pid)] = Proc(
            int(pid), int(fields[1]), argv.strip(), (int(fields[11]) + int(fields[12])) / tick
        )
    return found


def open_files(procs: dict[int, Proc]) -> tuple[int, int, int | None]:
    """(processes of vLLM, their open files, the lowest open-file limit among them), of the
    process table `processes` read."""
    count = files = 0
    limit = None
    for pid, proc in procs.items():
        # vLLM's API servers and engine cores rename themselves (VLLM::APIServer_0, ...)
        if "vllm" not in proc.argv.lower():
            continue
        try:
            files += len(os.listdir(f"/proc/{pid}/fd"))
            soft = re.search(r"Max open files\s+(\d+)", Path(f"/proc/{pid}/limits").read_text())
        except OSError:
            continue
        count += 1
        if soft:
            limit = min(limit or 1 << 62, int(soft.group(1)))
    return count, files, limit


def named_api_server(proc: Proc) -> bool:
    """One of the API servers vLLM starts beside its server process (it retitles them)."""
    return "APIServer" in proc.argv or "ApiServer" in proc.argv


def serves_alone(proc: Proc, procs: dict[int, Proc]) -> bool:
    """The `vllm serve` process that is itself the API server: with one API server vLLM starts
    none apart (`--api-server-count 1`) and serves from the process it was started as (unless
    the worker's fork launcher starts it as several: vLLM 0.32 on, a split start); an engine
    launched apart (`--headless`) serves nothing."""
    words = proc.argv.split()
    return (
        "serve" in words
        and "--headless" not in words
        and "vllm" in " ".join(words[:3]).lower()
        and not any(named_api_server(p) for p in procs.values())
    )


def part(proc: Proc, procs: dict[int, Proc]) -> str | None:
    """A process's part in the run: `core`, `api`, `vllm` (vLLM's others: its launcher, its fork
    server), `worker` (the bench's process) or `pool` (the worker's children that are not
    vLLM's); None for the rest (this sampler, py-spy, the shell). The nearest of the process and
    its ancestors that is vLLM's or the worker's decides the side: vLLM's engine is itself a
    child of the worker."""
    if "EngineCore" in proc.argv:
        return "core"
    if named_api_server(proc) or serves_alone(proc, procs):
        return "api"
    seen, p = set(), proc
    while p is not None and p.pid not in seen:
        seen.add(p.pid)
        head = " ".join(p.argv.split()[:3]).lower()
        if "vllm" in head:
            return "vllm"
        if "vlm_ocr" in head or "vlm-ocr" in head:
            return "worker" if p is proc else "pool"
        p = procs.get(p.ppid)
    return None


def cpu_shares(now: dict[int, Proc], before: dict[int, Proc], seconds: float) -> str:
    """Each part's share of a CPU since the last sample, in per cent: `cpu%: core=97 api=41,38
    worker=12 pool=48/16 vllm=2` (the pool's processes summed, over their count); '' before
    the first sample or where no part ran."""
    if not before or seconds <= 0:
        return ""
    used: dict[str, list[float]] = {}
    for pid, proc in now.items():
        name = part(proc, now)
        if name is not None:
            earlier = before.get(pid)
            spent = proc.cpu_s - (earlier.cpu_s if earlier else 0.0)
            used.setdefault(name, []).append(100 * max(0.0, spent) / seconds)
    if not used:
        return ""
    said = []
    for name in ("core", "api", "worker", "pool", "vllm"):
        shares = used.get(name)
        if not shares:
            continue
        if name == "api":
            said.append("api=" + ",".join(f"{s:.0f}" for s in sorted(shares, reverse=True)))
        elif name in ("pool", "vllm"):
            said.append(f"{name}={sum(shares):.0f}/{len(shares)}")
        else:
            said.append(f"{name}={max(shares):.0f}")
    return " cpu%: " + " ".join(said)


def gpu_busy() -> str:
    """The GPU's busy share as nvidia-smi reads it (the time a kernel ran over its last sample
    period), '' without one."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f" gpu%={out[0]}" if out and out[0].isdigit() else ""


def main() -> None:
    port = int(sys.argv[1])
    every = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    t0 = time.time()
    before: dict[str, float] = {}
    t_before = t0
    procs_before: dict[int, Proc] = {}
    t_procs = t0
    while True:
        g = gauges(port)
        now = time.time()
        running = processes()  # read once a sample: its open files and its CPU shares
        procs, files, limit = open_files(running)
        cpu = cpu_shares(running, procs_before, now - t_procs)
        procs_before, t_procs = running, now
        if g or procs:
            kv = 100 * g.get("kv", 0) if g.get("kv", 0) <= 1 else g.get("kv", 0)
            print(
                f"t={now - t0:6.0f}s running={g.get('running', 0):.0f} "
                f"waiting={g.get('waiting', 0):.0f} kv={kv:.0f}% vllm_processes={procs} "
                f"open_files={files} limit={limit}{rates(g, before, now - t_before)}"
                f"{cpu}{gpu_busy()}",
                flush=True,
            )
        if g:
            before, t_before = g, now
        time.sleep(every)


if __name__ == "__main__":
    main()
