"""`dev/gpu/pyspy_summary.py` reads py-spy's speedscope output of a GPU-check run (samples in
order, each stack from its ancestors' process frames to the leaf) into each process's part, its
main thread's timeline, its slowest imports and its functions by time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .support import ROOT

SCRIPT = ROOT / "dev/gpu/pyspy_summary.py"
SITE = "/tmp/acc/site32"
FORKSERVER = (
    "python3 -P -c from multiprocessing.forkserver import main; "
    "main(3, 5, ['__main__', 'vllm.entrypoints.launchers.api_server.entry'])"
)


def frame(name: str, file: str = "", line: int = 0) -> dict:
    return {"name": name, "file": file, "line": line, "col": None}


def profile(pid: int, thread: str, samples: list[list[int]]) -> dict:
    return {
        "type": "sampled",
        "name": f'Process {pid} Thread {pid} "{thread}"',
        "unit": "seconds",
        "startValue": 0.0,
        "endValue": len(samples) / 10,
        "samples": samples,
        "weights": [0.1] * len(samples),
    }


def write_run(path: Path) -> None:
    """A launcher importing torch for 2 s then compiling vLLM's sources for 1 s, then waiting on
    its engine core for 3 s; the engine core, forked (its stacks start with its parent's
    process frame), loading its model; at 10 samples a second."""
    frames = [
        frame('process 10:"python3 -P fork_launcher.py serve m --headless"'),  # 0
        frame("<module>", f"{SITE}/torch/__init__.py", 1),  # 1
        frame("<module>", f"{SITE}/vllm/__init__.py", 1),  # 2
        frame("SourceLoader.source_to_code", "<frozen importlib._bootstrap_external>", 1),  # 3
        frame("monitor_engine_liveness", f"{SITE}/vllm/v1/engine/utils.py", 356),  # 4
        frame("select", "/usr/lib/python3.12/selectors.py", 415),  # 5
        frame('process 11:"VLLM::EngineCore"'),  # 6
        frame("load_model", f"{SITE}/vllm/model_executor/model_loader/base_loader.py", 92),  # 7
        frame(f'process 12:"{FORKSERVER}"'),  # 8: the API servers' fork server
        frame(f'process 13:"{FORKSERVER}"'),  # 9: an API server it forked, not yet retitled
    ]
    launcher = [[0, 1]] * 20 + [[0, 2, 3]] * 10 + [[0, 4, 5]] * 30
    core = [[0, 6, 7]] * 25
    server, forked = [[8, 5]] * 10, [[8, 9, 5]] * 10
    doc = {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "profiles": [
            profile(10, "MainThread", launcher),
            profile(11, "MainThread", core),
            profile(12, "MainThread", server),
            profile(13, "MainThread", forked),
        ],
        "shared": {"frames": frames},
        "activeProfileIndex": 0,
        "exporter": "py-spy",
        "name": "run",
    }
    path.write_text(json.dumps(doc))


def summary(path: Path, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(path), "--hz", "10", "--every", "1", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_each_process_its_part_timeline_and_imports(tmp_path: Path) -> None:
    run = tmp_path / "run-pyspy.json"
    write_run(run)
    out = summary(run)
    launcher, core = out.split("=== pid 12")[0].split("=== pid 11")
    assert "=== pid 10: engine launcher: 6.0 thread-seconds sampled" in launcher
    # the timeline: torch's import, then vLLM's, then the wait on the engine core
    steps = [line.split() for line in launcher.splitlines() if line.strip()[:1].isdigit()]
    assert [s[0] for s in steps[:3]] == ["0.0", "1.0", "2.0"]
    assert "<module> (torch/__init__.py:1)" in " ".join(steps[0])
    assert "<module> (vllm/__init__.py:1) | SourceLoader.source_to_code" in " ".join(steps[2])
    assert "monitor_engine_liveness (vllm/v1/engine/utils.py:356) | select" in launcher
    # its thread blocked in the selector half the run; the engine core never waited
    assert "  thread MainThread: 6.0 s, waiting 50 %\n" in launcher
    assert "  thread MainThread: 2.5 s, waiting 0 %\n" in core
    # inclusive seconds by module, from the site folder's path
    imports = launcher.split("imports, inclusive (s):")[1].split("functions")[0]
    assert [line.split() for line in imports.strip().splitlines()] == [
        ["2.0", "torch"],
        ["1.0", "vllm"],
    ]
    assert "1.0  SourceLoader.source_to_code" in launcher
    # the forked child is told by its own process frame, not its parent's
    assert core.startswith(": engine core: 2.5 thread-seconds sampled")
    assert "load_model (vllm/model_executor/model_loader/base_loader.py:92)" in core
    # a fork server's child keeps its command line until vLLM retitles it: told by its parent
    assert "=== pid 12: fork server of the API servers: 1.0" in out
    assert "=== pid 13: forked by the fork server of the API servers: 1.0" in out


def test_a_window_of_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run-pyspy.json"
    write_run(run)
    out = summary(run, "--from", "3", "--to", "6").split("=== pid 11")[0]
    assert "torch" not in out.split("timeline")[1]  # only the wait is in the window
    assert "3.0  monitor_engine_liveness" in out
    assert "waiting 100 %" in out  # the window's samples are all the wait


def test_a_thread_waiting_for_the_gpu_is_told_apart(tmp_path: Path) -> None:
    frames = [
        frame('process 20:"VLLM::EngineCore"'),
        frame("Worker.execute_model", f"{SITE}/vllm/v1/worker/gpu_worker.py", 1328),
        frame("Event.synchronize", f"{SITE}/torch/cuda/streams.py", 254),
        frame("Condition.wait", "/usr/lib/python3.12/threading.py", 355),
    ]
    # a step's work 6 samples, the GPU's queue 3, waiting for requests 1
    samples = [[0, 1]] * 6 + [[0, 1, 2]] * 3 + [[0, 3]]
    doc = {"profiles": [profile(20, "MainThread", samples)], "shared": {"frames": frames}}
    run = tmp_path / "core-pyspy.json"
    run.write_text(json.dumps(doc))
    assert "  thread MainThread: 1.0 s, waiting 40 % (on the GPU 30 %)\n" in summary(run)


def test_the_triton_compiles_of_a_thread_are_listed_by_burst(tmp_path: Path) -> None:
    frames = [
        frame('process 20:"VLLM::EngineCore"'),
        frame("Worker.execute_model", f"{SITE}/vllm/v1/worker/gpu_worker.py", 1328),
        frame("apply_top_k_top_p", f"{SITE}/vllm/v1/sample/ops/topk_topp_sampler.py", 467),
        frame("VllmTritonJitKernel.launch", f"{SITE}/vllm/model_executor/warmup/jit.py", 330),
        frame("JITFunction.run", f"{SITE}/triton/runtime/jit.py", 739),
        frame("JITFunction._do_compile", f"{SITE}/triton/runtime/jit.py", 884),
    ]
    step = [0, 1]
    compiling = [0, 1, 2, 3, 4, 5]
    # two bursts: 0.3 s, then steps, then 0.2 s (a gap of one sample inside it is the same burst)
    samples = [compiling] * 3 + [step] * 4 + [compiling, step, compiling] + [step] * 2
    doc = {"profiles": [profile(20, "MainThread", samples)], "shared": {"frames": frames}}
    run = tmp_path / "core-pyspy.json"
    run.write_text(json.dumps(doc))
    out = summary(run, "--compiles")
    assert "    Triton compiles: 2 bursts, 0.6 s\n" in out
    caller = "apply_top_k_top_p (vllm/v1/sample/ops/topk_topp_sampler.py:467)"
    assert f"        0.0-0.2 s   0.3 s  {caller}\n" in out
    assert f"        0.7-0.9 s   0.3 s  {caller}\n" in out
    assert "Triton compiles" not in summary(run)  # only when asked
