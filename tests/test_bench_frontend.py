"""`vlm-ocr-lab bench --front-end`'s own parts: the pages it sends and the CPU it reads (the run
itself needs the engine's server: docs/tools.md says how to make one on the CPU build)."""

from __future__ import annotations

import io
import subprocess
import sys

from PIL import Image

from vlm_ocr.images import Budget
from vlm_ocr_lab.bench.frontend import group_cpu_s, pages_of


def test_a_family_on_a_grid_is_measured_on_it_and_off_it_with_the_same_page() -> None:
    drawn = pages_of(Budget(2048 * 2048, max_side=2048, grid=32))
    off, on = drawn.values()
    assert list(drawn) == ["off its processor's grid", "on its processor's 32 px grid"]
    assert (off.width, off.height) == (1448, 2048) and (on.width, on.height) == (1440, 2048)
    # the PNGs sent are those sizes
    for page in (off, on):
        assert Image.open(io.BytesIO(page.png)).size == (page.width, page.height)
    # a family without a grid (Pixtral's): the page as it draws it, once
    (alone,) = pages_of(Budget(1540 * 1540, max_side=1540)).values()
    assert (alone.width, alone.height) == (1089, 1540)


# A process of a group of its own: the suite's group holds processes that end between two reads,
# and a process's CPU leaves the sum with it. It burns some CPU and says so, then more at a word.
BURN = (
    "import sys; sum(i * i for i in range(1_000_000)); print(flush=True); sys.stdin.readline(); "
    "sum(i * i for i in range(3_000_000)); print(flush=True); sys.stdin.readline()"
)


def test_the_cpu_of_a_process_group_is_read_from_proc() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", BURN],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        child.stdout.readline()  # up, some CPU spent
        before = group_cpu_s(child.pid)
        child.stdin.write("\n")
        child.stdin.flush()
        child.stdout.readline()  # some CPU in its group
        assert group_cpu_s(child.pid) > before > 0
    finally:
        child.kill()
        child.wait()
    assert group_cpu_s(2**22 + 12_345) == 0.0  # a group with no process: nothing to read
