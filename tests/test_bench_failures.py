"""`vlm-ocr-lab bench` never gives a pace for failed pages: pages/s counts the pages that came
back ok, a run with failed pages says so first, by reason, and exits non-zero. Driven as a user
types it, against the instant engine losing every request (or all but the first few)."""

from __future__ import annotations

import os
import re
import threading
import time

from vlm_ocr_lab import cli

INSTANT = ["bench", "--instant-engine", "--slow", "0", "--jobs", "1", "--progress", "0"]
A_PACE = re.compile(r"pages/s:? \d")


def bench(capsys, *args: str) -> tuple[int, list[str]]:
    code = cli.main([*INSTANT, *args])
    return code, capsys.readouterr().out.splitlines()


def test_an_engine_that_fails_every_request_gives_no_pace(capsys) -> None:
    code, lines = bench(capsys, "--faults", "1", "--pages", "3", "--direct", "--gpu-price", "3.99")
    assert code == 1
    # the warm-up page failed too: the engine never started, and that is the first thing said
    assert lines[0].startswith("FAILED: the engine did not start")
    assert "warm-up page failed" in lines[0]
    assert not any(A_PACE.search(line) or "cost at" in line for line in lines)


def test_pages_that_all_fail_after_a_good_start_give_no_pace(capsys) -> None:
    # the warm-up page is answered (--spare 1), then every request is lost: the engine that
    # died at its first batch
    code, lines = bench(
        capsys, "--faults", "1", "--spare", "1", "--pages", "3", "--direct", "--gpu-price", "3.99"
    )
    assert code == 1
    assert lines[0] == (
        "FAILED: 3 of 3 pages through the worker, 3 of 3 on the direct path; no page came back "
        "ok, so there is no pace"
    )
    assert lines[1].startswith("failed: ") and "engine: the engine server" in lines[1]
    assert any("failed on the direct path: " in line for line in lines)
    assert "pages: 3  failed: 3" in "\n".join(lines)
    assert not any(A_PACE.search(line) or "cost at" in line for line in lines)
    assert "pages/s: none (no page came back ok)" in "\n".join(lines)


def test_some_failed_pages_come_first_and_the_pace_is_the_ok_pages(capsys) -> None:
    # the warm-up page and the first three pages' requests are answered, the rest all lost
    code, lines = bench(capsys, "--faults", "1", "--spare", "4", "--pages", "6")
    assert code == 1
    assert lines[0].startswith("FAILED: 3 of 6 pages through the worker; the pace below counts ")
    reasons = [n for n, line in enumerate(lines) if line.startswith("failed: ")]
    figures = next(n for n, line in enumerate(lines) if line.startswith("pages: 6"))
    assert reasons and max(reasons) < figures
    assert sum(int(re.match(r"failed: (\d+) ×", lines[n]).group(1)) for n in reasons) == 3  # type: ignore[union-attr]
    wall = float(re.search(r"wall: ([\d.]+) s", lines[figures]).group(1))  # type: ignore[union-attr]
    pace = float(re.search(r"pages/s: ([\d.]+) \(the 3 ok pages\)", lines[figures]).group(1))  # type: ignore[union-attr]
    assert abs(pace - 3 / wall) < 0.01  # the ok pages over the pass, not all six


def test_a_run_without_failures_exits_0_with_its_pace(capsys) -> None:
    code, lines = bench(capsys, "--faults", "0", "--pages", "3")
    assert code == 0
    assert not any(line.startswith(("FAILED", "failed")) for line in lines)
    assert re.search(r"pages: 3  failed: 0  wall: [\d.]+ s  pages/s: [\d.]+  ", "\n".join(lines))


def test_a_run_cut_by_its_time_limit_counts_what_was_not_done(capsys) -> None:
    # the warm-up page is answered at once, every page after it not for ten minutes: whenever the
    # start ends, the pass is cut at the limit with nothing answered
    code, lines = bench(
        capsys, "--slow", "1", "--slow-s", "600", "--spare", "1", "--faults", "0",
        "--pages", "3", "--direct", "--time-limit", "10",
    )  # fmt: skip
    text = "\n".join(lines)
    assert code == 1
    assert lines[0].startswith("FAILED: 3 of 3 pages through the worker; no page came back ok")
    assert "failed: 3 × not done within --time-limit (the run was cut)" in text
    assert "(cut by --time-limit)" in text
    assert "direct: skipped (no time left within --time-limit)" in text
    assert not A_PACE.search(text)


def test_benches_sharing_a_gpu_start_their_passes_together(capsys, tmp_path) -> None:
    # dev/gpu/check.sh (ENGINES_ON_GPU): each bench says its engine is ready, then waits for the
    # go file; after its passes it says so again and waits for GO.second before the direct path
    go = tmp_path / "go"
    done: list[int] = []
    argv = [*INSTANT, "--faults", "0", "--pages", "2", "--direct", "--start-together", str(go)]
    t = threading.Thread(target=lambda: done.append(cli.main(argv)))
    t.start()

    def said_ready(name: str) -> list[str]:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(f"{name}.ready-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # and it waits there
        assert t.is_alive() and not done
        return [p.name for p in tmp_path.glob(f"{name}.ready-*")]

    assert said_ready("go") == [f"go.ready-{os.getpid()}"]  # no pass before the go
    go.touch()
    # its passes done, no direct path before the second go (the figures are printed at the end)
    assert said_ready("go.second") == [f"go.second.ready-{os.getpid()}"]
    (tmp_path / "go.second").touch()
    t.join(120)
    out = capsys.readouterr().out
    assert done == [0]
    assert re.search(r"pages: 2  failed: 0  wall: [\d.]+ s  pages/s: [\d.]+  ", out)
    assert f"engine ready; waiting for {go} to start the passes" in out
    assert f"engine ready; waiting for {go}.second to start the direct path" in out
    assert re.search(r"direct to server: pages/s: [\d.]+", out)
