"""Ctrl-C at any moment of `handler.py --test_input`: one line and exit status 130, no traceback
from the handler or from its render processes (a terminal sends SIGINT to all of them)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from vlm_ocr.entry.runtime import WorkerLoop
from vlm_ocr.pipeline.cpu_pool import CpuPool, TaskFailed

from .support import ROOT, SPARE_LIMITS, b64, foreground, handler_env, write_pdf

TASK_S = SPARE_LIMITS["render_timeout_s"]
#: the one line an interrupted handler ends with: after its SIGINT handler is set, or before
STOPPED = "WARNING vlm_ocr.handler: got SIGINT; stopping the engine and exiting"
INTERRUPTED = "handler.py: interrupted"


def test_render_processes_started_off_the_main_thread_ignore_ctrl_c_as_they_start(
    loop: WorkerLoop,
) -> None:
    # The worker starts its pool on the worker loop's thread, where no signal handler can be
    # set; a SIGINT sent while the children import must not end them.
    pool = CpuPool(2)
    try:
        loop.run(pool.start())
        started = pool.pids()
        for pid in started:  # long before a child has run a line of the pool's own code
            os.kill(pid, signal.SIGINT)
        for _ in started:
            got = loop.run(pool.run(signal.getsignal, signal.SIGINT, timeout_s=TASK_S))
            assert got == signal.SIG_IGN
            blocked = loop.run(
                pool.run(signal.pthread_sigmask, signal.SIG_BLOCK, (), timeout_s=TASK_S)
            )
            assert signal.SIGINT not in blocked  # ignored, not left blocked
        assert sorted(pool.pids()) == sorted(started)  # none died and was replaced
    finally:
        pool.terminate()

    async def mask() -> set[signal.Signals]:
        return signal.pthread_sigmask(signal.SIG_BLOCK, ())

    assert signal.SIGINT not in loop.run(mask())  # the starting thread's mask is as it was


def test_a_pool_ended_mid_task_starts_no_child_in_place_of_those_it_killed(
    loop: WorkerLoop,
) -> None:
    # The worker's SIGINT handler ends the pool on the main thread while a page's task is in
    # flight on the loop's: a child started in place of the one killed would be half-started
    # when the worker exits, and print a traceback.
    pool = CpuPool(1)
    try:
        loop.run(pool.start())
        task = asyncio.run_coroutine_threadsafe(
            pool.run(time.sleep, 3600, timeout_s=TASK_S), loop.loop
        )
        pool.terminate()
        with pytest.raises(TaskFailed):
            task.result()
        assert pool.pids() == []
    finally:
        pool.terminate()


def test_a_task_waiting_on_a_busy_loop_wakes_when_the_pool_is_ended(loop: WorkerLoop) -> None:
    # The race a busy machine showed: the pool ended on the main thread while the loop's thread,
    # busy elsewhere, had not yet polled the task's pipe. The pipe must still wake the task
    # (its process died) rather than leave it waiting until its timeout.
    pool = CpuPool(1)
    inside, go = threading.Event(), threading.Event()

    def busy() -> None:  # the loop's thread, held while the pool is ended
        inside.set()
        go.wait(60)

    try:
        loop.run(pool.start())
        task = asyncio.run_coroutine_threadsafe(
            pool.run(time.sleep, 3600, timeout_s=TASK_S), loop.loop
        )
        assert pool.started
        for _ in range(6000):  # until the task has its child, and waits for its answer
            if not pool.idle():
                break
            time.sleep(0.01)
        assert not pool.idle()
        loop.loop.call_soon_threadsafe(busy)
        assert inside.wait(60)
        pool.terminate()  # the child is gone before the loop polls again
        go.set()
        with pytest.raises(TaskFailed, match="its process died"):
            task.result()
    finally:
        go.set()
        pool.terminate()


def interrupt_at(marker: str, job: dict, tmp_path: Path) -> tuple[int, str, list[str]]:
    """Run `handler.py --test_input JOB` in a process group of its own, send SIGINT to the
    group (as a terminal's Ctrl-C does) once stderr has a line with `marker`, and return the
    exit status, stdout and the stderr lines after the marker's."""
    proc = subprocess.Popen(
        foreground([sys.executable, "handler.py", "--test_input", json.dumps(job)]),
        cwd=ROOT,
        env=handler_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stderr is not None
        before = []
        for line in proc.stderr:
            before.append(line)
            if marker in line:
                os.killpg(proc.pid, signal.SIGINT)
                break
        else:
            pytest.fail(f"no line with {marker!r}:\n{''.join(before)[-3000:]}")
        out, err = proc.communicate(timeout=300)
        return proc.returncode, out, err.splitlines()
    finally:
        with contextlib.suppress(ProcessLookupError):  # a render process left behind
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize(
    "marker",
    [
        "vlm_ocr.engines.factory: engine: ",  # the render processes are about to start
        "vlm_ocr.handler: job local_test: page ",  # in the job, under the SDK's own loop
    ],
)
def test_ctrl_c_while_the_handler_starts_or_reads_is_one_line_and_status_130(
    marker: str, tmp_path: Path
) -> None:
    # Long enough that the job is still reading when its first page is done.
    pdf = write_pdf(tmp_path / "long.pdf", 40).read_bytes()
    status, out, lines = interrupt_at(marker, {"input": {"pdf": {"base64": b64(pdf)}}}, tmp_path)
    rest = [
        line
        for line in lines
        if " INFO " not in line and not line.startswith("--- Starting Serverless Worker")
    ]
    assert (status, out) == (130, ""), "\n".join(lines)
    assert len(rest) == 1, "\n".join(lines)  # no traceback, from the handler or its children
    assert rest[0].endswith(STOPPED) or rest[0] == INTERRUPTED, rest[0]


def test_ctrl_c_during_the_first_imports_is_one_line_and_status_130(tmp_path: Path) -> None:
    # Ctrl-C before any handler is set: while handler.py imports the SDK (seconds), here at
    # the moment it does.
    interrupt_on_import = (
        "import runpy, sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'runpod':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "sys.argv = ['handler.py', '--test_input', '{\"input\": {}}']\n"
        "runpy.run_path('handler.py', run_name='__main__')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", interrupt_on_import],
        cwd=ROOT,
        env=handler_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", INTERRUPTED + "\n")
