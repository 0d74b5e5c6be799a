"""Where each process of a GPU-check run spent its time, from py-spy's samples (check.sh's
PYSPY_HZ: `py-spy record --subprocesses --idle --format speedscope`, samples in order).

    python3 dev/gpu/pyspy_summary.py RUN-pyspy.json [--hz 20] [--every 2] [--top 25]
        [--from S] [--to S] [--compiles]

For each process (its role told from its command line or vLLM's title) and each thread with
samples: seconds sampled, and the share of them in the window spent blocked (`waiting`: the leaf a
call that waits for work, a lock, a pipe, a socket or the GPU; `on the GPU`: of those, in CUDA's
synchronize, the thread waiting for the GPU's queue to drain; a wait inside another call, as a copy
to the GPU that waits for the queue, counts as work); for the main thread, a timeline (every
--every seconds, the most sampled frame of vLLM, the worker or an imported module's top level, and
the leaf under it), the modules whose import took longest (inclusive) and the functions with the
most inclusive time.
Time is sample count over the rate (py-spy samples without stopping the process); --from/--to
cut a thread's window. Where py-spy falls behind (some 25 processes and their threads at 20 Hz) it
drops samples: the engine core of a LightOnOCR-3-0.8B run at 522b0f5 logged over 172-181 s and was
sampled for 141-156 s. Shares within a window hold; seconds and moments on a timeline run short,
later ones more (the n-th sample is n/rate seconds or more after py-spy found the thread), so
compare threads by share and line a timeline up with the run's log before reading a gap in it.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys

_PROFILE = re.compile(r'Process (\d+) Thread (\d+) "?([^"]*)"?')
_ROOT = re.compile(r'process (\d+):"(.*)"', re.S)
# where a frame's file is, shortened to the package path
_SITE = re.compile(r".*/(?:site-packages|site\d*|dist-packages|src)/|.*/lib/python3\.\d+/")
_OURS = ("vllm/", "vlm_ocr", "transformers/", "torch/", "flashinfer/", "triton/")
# Leaves where a thread blocks (py-spy's --idle samples end at the Python frame around the wait):
# a pool's worker on its queue, a pipe's read, a selector or poller, an event loop's run in native
# code, a condition, a lock, a sleep; CUDA's synchronize is the wait for the GPU
_WAITS = re.compile(
    r"^(\w+\.)?(_worker|_?recv(_bytes|_multipart)?|select|poll|run_forever|(_?wait\w*)|sleep"
    r"|get|accept|synchronize)$|^Runner\.run$"
)
_GPU_WAITS = re.compile(r"^((Event|Stream)\.)?synchronize$")


def role(cmdline: str) -> str:
    """A process's part in the run, from its command line as py-spy first saw it (a forked
    child keeps its parent's until vLLM retitles it)."""
    for needle, name in (
        ("EngineCore", "engine core"),
        ("APIServer", "API server"),
        ("ApiServer", "API server"),
        ("forkserver import main", "fork server"),
        ("resource_tracker", "resource tracker"),
        ("multiprocessing.spawn", "spawned child"),
        ("humming", "humming-kernels helper"),
        ("--headless", "engine launcher"),
        ("vllm-python", "engine launcher"),
        ("os.execv", "API server process"),
    ):
        if needle in cmdline:
            if name == "fork server":
                served = "the engine core" if "engine.core" in cmdline else "the API servers"
                return f"fork server of {served}"
            return name
    return "worker" if not cmdline.strip() or "vlm_ocr" in cmdline else cmdline.split()[0][-40:]


def short(frame: dict) -> str:
    path = _SITE.sub("", frame.get("file") or "")
    return f"{frame['name']} ({path}:{frame.get('line') or 0})"


def module_of(frame: dict) -> str | None:
    """The module a `<module>` frame runs (an import's top level), by its file."""
    if frame["name"] != "<module>":
        return None
    path = _SITE.sub("", frame.get("file") or "")
    return path.removesuffix("/__init__.py").removesuffix(".py").replace("/", ".") or None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("profile")
    p.add_argument("--hz", type=float, default=20.0, help="py-spy's rate (-r) of the run")
    p.add_argument("--every", type=float, default=2.0, help="the timeline's step, seconds")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--from", dest="start", type=float, default=0.0)
    p.add_argument("--to", dest="end", type=float, default=float("inf"))
    p.add_argument("--min-s", type=float, default=0.5, help="leave out threads sampled less")
    p.add_argument(
        "--compiles",
        action="store_true",
        help="each thread's Triton compiles in the window: a line a burst, the kernel's caller",
    )
    args = p.parse_args(argv)
    with open(args.profile) as f:
        data = json.load(f)
    frames = data["shared"]["frames"]
    by_pid: dict[str, list[dict]] = collections.defaultdict(list)
    for prof in data["profiles"]:
        m = _PROFILE.match(prof["name"])
        by_pid[m.group(1) if m else prof["name"]].append(prof)
    for pid, profs in by_pid.items():
        cmdline, parent = "", ""
        for prof in profs:
            for sample in prof["samples"][:50]:
                # a child's stacks begin with its ancestors' process frames, then its own
                chain = [r for i in sample if (r := _ROOT.match(frames[i]["name"]))]
                mine = [k for k, r in enumerate(chain) if r.group(1) == pid]
                if mine:
                    cmdline = chain[mine[0]].group(2)
                    parent = chain[mine[0] - 1].group(2) if mine[0] else ""
                    break
            if cmdline:
                break
        part = role(cmdline)
        if part.startswith("fork server") and "forkserver import main" in parent:
            # forked, not yet retitled by vLLM: it keeps the fork server's command line
            part = f"forked by the {role(parent)}"
        total = sum(len(pr["samples"]) for pr in profs) / args.hz
        print(f"\n=== pid {pid}: {part}: {total:.1f} thread-seconds sampled")
        print(f"    {' '.join(cmdline.split())[:220]}")
        for prof in sorted(profs, key=lambda pr: -len(pr["samples"])):
            n = len(prof["samples"])
            if n / args.hz < args.min_s:
                continue
            m = _PROFILE.match(prof["name"])
            name = m.group(3) if m else prof["name"]
            window = [
                s for k, s in enumerate(prof["samples"]) if args.start <= k / args.hz < args.end
            ]
            shown = name or m.group(2) if m else ""
            print(f"  thread {shown}: {n / args.hz:.1f} s{waits(window, frames)}")
            if args.compiles:
                compiles(window, frames, args.hz, offset=args.start)
            if name != "MainThread" and prof is not profs[0]:
                continue
            describe(window, frames, args, offset=args.start)
    return 0


def waits(samples: list[list[int]], frames: list[dict]) -> str:
    """`, waiting 80 % (on the GPU 12 %)` of the samples in the window, by their leaf frame."""
    leaves = [frames[s[-1]]["name"] for s in samples if s]
    if not leaves:
        return ""
    blocked = sum(1 for leaf in leaves if _WAITS.match(leaf))
    gpu = sum(1 for leaf in leaves if _GPU_WAITS.match(leaf))
    said = f", waiting {100 * blocked // len(leaves)} %"
    return said + (f" (on the GPU {100 * gpu // len(leaves)} %)" if gpu else "")


def compiles(samples: list[list[int]], frames: list[dict], hz: float, offset: float) -> None:
    """The window's Triton compiles (`JITFunction._do_compile` in the stack): a line a burst of
    samples at most two apart, its time and the frame that called the kernel being compiled."""
    bursts: list[list[int]] = []  # [first sample, last sample]
    callers: list[collections.Counter] = []
    for k, sample in enumerate(samples):
        names = [frames[i]["name"] for i in sample]
        if "JITFunction._do_compile" not in names:
            continue
        if not bursts or k - bursts[-1][1] > 2:
            bursts.append([k, k])
            callers.append(collections.Counter())
        bursts[-1][1] = k
        callers[-1][_kernel_caller(sample, frames)] += 1
    if not bursts:
        return
    total = sum(b - a + 1 for a, b in bursts) / hz
    print(f"    Triton compiles: {len(bursts)} bursts, {total:.1f} s")
    for (a, b), caller in zip(bursts, callers, strict=True):
        when = f"{offset + a / hz:7.1f}-{offset + b / hz:.1f} s"
        print(f"      {when}  {(b - a + 1) / hz:4.1f} s  {caller.most_common(1)[0][0]}")


def _kernel_caller(sample: list[int], frames: list[dict]) -> str:
    """The deepest frame of vLLM's own code above Triton's (its launch wrappers aside): the
    function whose kernel is being compiled."""
    found = "?"
    for i in sample:
        path = frames[i].get("file") or ""
        if "/triton/" in path:
            break
        if "vllm/" in path and "/warmup/" not in path:
            found = short(frames[i])
    return found


def describe(samples: list[list[int]], frames: list[dict], args, offset: float) -> None:
    hz, step = args.hz, max(1, round(args.every * args.hz))
    print("    timeline (s: the deepest frame of vLLM/the worker/a module's top level | leaf)")
    for b in range(0, len(samples), step):
        chunk = samples[b : b + step]
        counts = collections.Counter(_marker(s, frames) for s in chunk)
        (mark, n) = counts.most_common(1)[0]
        print(f"      {offset + b / hz:7.1f}  {n * 100 // len(chunk):3d}%  {mark}")
    inclusive = collections.Counter()
    modules = collections.Counter()
    for s in samples:
        seen = set()
        for i in s:
            if i in seen:
                continue
            seen.add(i)
            inclusive[i] += 1
            if mod := module_of(frames[i]):
                modules[mod] += 1
    print("    imports, inclusive (s):")
    for mod, n in modules.most_common(args.top):
        print(f"      {n / hz:7.1f}  {mod}")
    print("    functions, inclusive (s):")
    for i, n in inclusive.most_common(args.top + 5):
        if _ROOT.match(frames[i]["name"]):
            continue
        print(f"      {n / hz:7.1f}  {short(frames[i])}")


def _marker(sample: list[int], frames: list[dict]) -> str:
    # py-spy's speedscope stacks run from the root (the process frame) to the leaf
    ours = [i for i in sample if any(k in (frames[i].get("file") or "") for k in _OURS)]
    mods = [i for i in sample if frames[i]["name"] == "<module>"]
    pick = ours[-1] if ours else (mods[-1] if mods else sample[-1])
    if _ROOT.match(frames[pick]["name"]):
        return "(no Python frame: between calls, or native code)"
    mark = short(frames[pick])
    if mods and mods[-1] != pick:
        mark = f"import {module_of(frames[mods[-1]])} > {mark}"
    return f"{mark} | {frames[sample[-1]]['name']}" if sample[-1] != pick else mark


if __name__ == "__main__":
    sys.exit(main())
