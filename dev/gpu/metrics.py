"""Sample what the engine is doing while a benchmark runs: vLLM's own gauges (requests running and
waiting, KV-cache use) from its /metrics, and the open files of its processes against their
limit (vLLM warns when it cannot raise the open-file limit). One line per sample, until ended.

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


def gauges(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    # several API servers report one line each: the engine-side gauges are summed over them
    return {k: sum(float(v) for v in p.findall(text)) for k, p in GAUGES.items()}


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
    while True:
        g = gauges(port)
        procs, files, limit = open_files()
        if g or procs:
            kv = 100 * g.get("kv", 0) if g.get("kv", 0) <= 1 else g.get("kv", 0)
            print(
                f"t={time.time() - t0:6.0f}s running={g.get('running', 0):.0f} "
                f"waiting={g.get('waiting', 0):.0f} kv={kv:.0f}% vllm_processes={procs} "
                f"open_files={files} limit={limit}",
                flush=True,
            )
        time.sleep(every)


if __name__ == "__main__":
    main()
