"""The GPU check's plan (`dev/gpu/check.sh`, `vlm_ocr_lab.bench.gpu_check`): pages per run from
the model's last pace, each run's time, and what a call of a given budget runs and skips."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vlm_ocr_lab import measured
from vlm_ocr_lab.bench import gpu_check
from vlm_ocr_lab.bench.gpu_check import MAX_PAGES, MIN_PAGES, PASS_S, TARGETS

from .support import ROOT, alive

OLMOCR = TARGETS["olmocr"].checkpoint


def run(model: str = OLMOCR, **values: object) -> measured.Run:
    row = {k: None for k in measured.REQUIRED} | {
        "date": "2026-12-01",
        "commit": "abc1234",
        "gpu": "NVIDIA H200",
        "vllm": "0.26.0",
        "transformers": "5.17.0",
        "family": "olmocr",
        "model": model,
        "overrides": {},
        "start": "fresh",
        "phases": {},
        "pages": 512,
        "failed": 0,
        "failed_by_reason": {},
        "start_mode": measured.family_start_mode("olmocr"),  # at its defaults
    }
    return measured.parse(json.dumps(row | values))


def compiled(**values: object) -> measured.Run:
    """An olmOCR run at `START_MODE=throughput`: off its family's start mode, set by hand."""
    return run(overrides={"START_MODE": "throughput"}, start_mode="throughput", **values)


@pytest.mark.parametrize("pace", [0.5, 3.02, 9.27, 10.85, 15.0, 40.0, 100.0])
def test_pages_keep_a_pass_30_s_and_fill_the_engine_twice_where_that_is_short(
    pace: float,
) -> None:
    pages = gpu_check.pages_for(pace)
    waves = gpu_check.WAVES * 256  # MAX_NUM_SEQS=0 on an H200
    assert MIN_PAGES <= pages <= MAX_PAGES and pages % gpu_check.PAGE_STEP == 0
    if pages < MAX_PAGES:
        assert pages / pace >= PASS_S
        # every sequence busy once, and two waves whenever they take at most a minute a pass
        assert pages >= 256
        assert pages >= waves or waves / pace > gpu_check.WAVE_PASS_S
        # one step fewer would be under 30 s a pass, under two short waves, or under the floor
        fewer = pages - gpu_check.PAGE_STEP
        assert (
            fewer < MIN_PAGES
            or fewer / pace < PASS_S
            or fewer < max(256, min(waves, gpu_check.WAVE_PASS_S * pace))
        )


def test_a_small_fast_model_gets_two_waves_and_the_32b_one() -> None:
    assert gpu_check.pages_for(12.62) == 512  # LightOnOCR-3-0.8B's direct pace
    assert gpu_check.pages_for(3.02) == 256  # Qwen3-VL-32B: its 256 sequences busy, not 170 s


def test_a_specs_sequences_size_its_waves() -> None:
    rows = [run(engine_ready_s=139.9, pages_per_s=13.15, direct_pages_per_s=13.74)]
    wide = gpu_check.step("olmocr,MAX_NUM_SEQS=512", rows, "0.32")
    # 512 sequences filled more than once: a minute a pass at the last pace, past one wave
    assert wide.pages == gpu_check.pages_for(13.74, 512) == 832
    assert gpu_check.step("olmocr", rows, "0.32").pages == gpu_check.pages_for(13.74) == 512


def test_a_fresh_run_is_sized_from_the_models_last_fresh_row_at_its_defaults() -> None:
    rows = [
        run(engine_ready_s=187.9, pages_per_s=9.44, direct_pages_per_s=10.54),
        run(engine_ready_s=169.5, pages_per_s=9.27, direct_pages_per_s=10.85),
        # a start with settings of its own, and a warm one, say nothing of the defaults' start
        compiled(engine_ready_s=124.5, pages_per_s=20.0),
        run(engine_ready_s=73.4, start="warm", pages_per_s=9.3),
    ]
    s = gpu_check.step("olmocr", rows)
    assert s.start == "fresh" and s.pages == gpu_check.pages_for(10.85)
    assert s.start_s == pytest.approx(169.5 * gpu_check.START_MARGIN)
    assert s.passes_s == pytest.approx(s.pages / 9.27 + s.pages / 10.85)
    assert s.estimate_s == pytest.approx(s.start_s + s.passes_s + gpu_check.OVERHEAD_S)
    assert "1c0a249" not in s.basis and "row of 2026-12-01 at abc1234" in s.basis


def test_a_run_off_the_defaults_is_sized_from_rows_at_its_settings_where_there_are_any() -> None:
    rows = [
        run(engine_ready_s=52.1, pages_per_s=11.75, direct_pages_per_s=11.77),
        compiled(engine_ready_s=108.5, pages_per_s=10.04, direct_pages_per_s=9.83),
    ]
    other = gpu_check.step("olmocr,START_MODE=throughput,PYSPY_HZ=20", rows)
    assert other.start_s == pytest.approx(108.5 * gpu_check.START_MARGIN)
    assert other.passes_s == pytest.approx(other.pages / 10.04 + other.pages / 9.83)
    # settings no row has: the defaults' rows, as before
    unseen = gpu_check.step("olmocr,MAX_NUM_SEQS=128", rows)
    assert unseen.start_s == pytest.approx(52.1 * gpu_check.START_MARGIN)


def test_a_start_mode_its_model_never_started_in_is_scaled_as_the_others_were() -> None:
    rows = [
        # olmOCR started in both modes: at `fast` in 0.4 of the time (its own mode is `fast`)
        run(engine_ready_s=40.0, pages_per_s=11.0),
        compiled(engine_ready_s=100.0, pages_per_s=10.0),
        # the 4B only at its own `throughput`
        run(
            TARGETS["lighton-ocr-3-4b"].checkpoint,
            family="lighton-ocr-3",
            engine_ready_s=120.0,
            pages_per_s=6.5,
            start_mode="throughput",
        ),
    ]
    assert gpu_check.fast_share(rows) == pytest.approx(0.4)
    fast = gpu_check.step("lighton-ocr-3-4b,START_MODE=fast", rows)
    assert fast.start_s == pytest.approx(120.0 * 0.4 * gpu_check.START_MARGIN)
    assert "times 0.40 (fast)" in fast.basis
    # a row in the asked mode itself wins, and the family's own mode is never scaled
    assert gpu_check.step("olmocr,START_MODE=throughput", rows).start_s == pytest.approx(
        100.0 * gpu_check.START_MARGIN
    )
    assert gpu_check.step("lighton-ocr-3-4b", rows).start_s == pytest.approx(
        120.0 * gpu_check.START_MARGIN
    )
    # no model with both: the row as it is
    lone = [r for r in rows if r.model != OLMOCR]
    assert gpu_check.fast_share(lone) is None
    assert gpu_check.step("lighton-ocr-3-4b,START_MODE=fast", lone).start_s == pytest.approx(
        120.0 * gpu_check.START_MARGIN
    )


def test_a_warm_run_is_the_start_alone() -> None:
    rows = [run(engine_ready_s=169.5, pages_per_s=9.27), run(engine_ready_s=73.4, start="warm")]
    warm = gpu_check.step("olmocr:warm", rows)
    assert (warm.start, warm.pages, warm.passes_s) == ("warm", 0, 0.0)
    assert warm.start_s == pytest.approx(73.4 * gpu_check.START_MARGIN)
    # never started warm: half its fresh start
    never = gpu_check.step("olmocr:warm", rows[:1])
    assert never.start_s == pytest.approx(169.5 / 2 * gpu_check.START_MARGIN)


def test_a_target_without_rows_is_planned_from_its_own_guess() -> None:
    target = TARGETS["lighton-ocr-3-4b"]
    s = gpu_check.step("lighton-ocr-3-4b", [run(engine_ready_s=100.0, pages_per_s=50.0)])
    assert s.start_s == pytest.approx(target.start_s * gpu_check.START_MARGIN)
    assert s.pages == gpu_check.pages_for(target.pages_per_s)
    assert "the target's guess" in s.basis


def test_the_rows_of_the_engines_vllm_come_first() -> None:
    rows = [run(engine_ready_s=100.0, vllm="0.32.0"), run(engine_ready_s=170.0)]
    assert gpu_check.step("olmocr", rows, "0.32").start_s == pytest.approx(
        100.0 * gpu_check.START_MARGIN
    )
    assert gpu_check.step("olmocr", rows, "0.26").start_s == pytest.approx(
        170.0 * gpu_check.START_MARGIN
    )


def test_a_check_on_an_h100_plans_from_the_h100s_rows_and_its_fewer_sequences() -> None:
    h100 = "NVIDIA H100 80GB HBM3"  # as nvidia-smi names it on the host
    rows = [
        run(engine_ready_s=120.0, pages_per_s=11.0, direct_pages_per_s=11.0),
        run(gpu=h100, engine_ready_s=70.0, pages_per_s=7.0, direct_pages_per_s=7.0),
        run(gpu=h100, overrides={"API_SERVER_COUNT": "1"}, engine_ready_s=60.0, pages_per_s=6.5),
    ]
    on_h100 = gpu_check.step("olmocr", rows, gpu=h100)
    assert on_h100.start_s == pytest.approx(70.0 * gpu_check.START_MARGIN)
    assert "H100" in on_h100.basis
    # the H100's engine holds 192 sequences at MAX_NUM_SEQS=0: its waves are of 192
    assert on_h100.pages == gpu_check.pages_for(7.0, 192) != gpu_check.pages_for(7.0)
    # its rows at the spec's settings first, then its defaults, before the H200's
    assert gpu_check.step("olmocr,API_SERVER_COUNT=1", rows, gpu="H100").start_s == pytest.approx(
        60.0 * gpu_check.START_MARGIN
    )
    assert gpu_check.step("olmocr,MAX_NUM_SEQS=128", rows, gpu="H100").start_s == pytest.approx(
        70.0 * gpu_check.START_MARGIN
    )
    # the H200 (named, or by default) and a card the planner does not know: the H200's rows
    for gpu in ("NVIDIA H200", "", "NVIDIA A100-SXM4-80GB"):
        s = gpu_check.step("olmocr", rows, gpu=gpu)
        assert s.start_s == pytest.approx(120.0 * gpu_check.START_MARGIN)
        assert s.pages == gpu_check.pages_for(11.0)
    # an H100 without rows of the model: the H200's, its waves the H100's
    bare = gpu_check.step("olmocr", rows[:1], gpu=h100)
    assert bare.start_s == pytest.approx(120.0 * gpu_check.START_MARGIN)
    assert bare.pages == gpu_check.pages_for(11.0, 192)


def test_lightonocr_2_gets_transformers_5_16_on_vllm_0_26_only() -> None:
    assert gpu_check.step("lighton-ocr", [], "0.26").env == {"TF516": "1"}
    assert gpu_check.step("lighton-ocr", [], "0.32").env == {}
    assert gpu_check.step("olmocr", [], "0.26").env == {}


def test_a_call_skips_what_would_not_fit_in_what_is_left() -> None:
    rows = [
        run(engine_ready_s=169.5, pages_per_s=9.27, direct_pages_per_s=10.85),
        run(engine_ready_s=73.4, start="warm"),
    ]
    olmocr = gpu_check.step("olmocr", rows)
    budget = gpu_check.RESERVE_S + olmocr.estimate_s + 1
    fates = [fate for _, fate in gpu_check.plan(["olmocr", "olmocr:warm"], budget, rows)]
    assert fates[0] == "runs"
    assert fates[1].startswith("skipped: needs about ")
    # the printed plan says the check decides again when that run's turn comes
    printed = gpu_check.plan_table(gpu_check.plan(["olmocr", "olmocr:warm"], budget, rows), budget)
    assert "left; it runs if the runs before it leave that much;" in printed.splitlines()[-1]
    # with room for both, both run, in the order given
    fates = [f for _, f in gpu_check.plan(["olmocr", "olmocr:warm"], budget + 200, rows)]
    assert fates == ["runs", "runs"]


def test_a_warm_start_needs_its_fresh_one_on_the_host_first() -> None:
    rows = [run(engine_ready_s=169.5, pages_per_s=9.27)]
    # its fresh run skipped for time: the warm one has no caches to start on
    small = gpu_check.RESERVE_S + 150
    fates = [f for _, f in gpu_check.plan(["olmocr", "olmocr:warm"], small, rows)]
    assert fates[0].startswith("skipped: needs") and "no fresh start" in fates[1]
    # in a call of its own: only when an earlier call started it fresh on this host
    assert "no fresh start" in gpu_check.plan(["olmocr:warm"], 600, rows, "", set())[0][1]
    assert gpu_check.plan(["olmocr:warm"], 600, rows, "", {"olmocr"})[0][1] == "runs"


def test_a_step_for_the_shell_ends_inside_the_call() -> None:
    rows = [run(engine_ready_s=169.5, pages_per_s=9.27, direct_pages_per_s=10.85)]
    s = gpu_check.step("olmocr", rows)
    left = s.estimate_s + gpu_check.RESERVE_S + 5  # it fits, with little room for overrun
    values = dict(part.split("=", 1) for part in shlex.split(s.shell(left)))
    assert values["target"] == "olmocr" and values["kind"] == "fresh" and values["skip"] == ""
    assert int(values["pages"]) == s.pages and values["checkpoint"] == OLMOCR
    assert int(values["limit"]) <= left - gpu_check.RESERVE_S
    roomy = dict(part.split("=", 1) for part in shlex.split(s.shell(5000)))
    assert int(roomy["limit"]) == math.floor(s.estimate_s * gpu_check.TIME_LIMIT_MARGIN)


def test_an_unknown_target_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown target 'olmo'; the check knows qwen-vl"):
        gpu_check.step("olmo", [])
    with pytest.raises(ValueError, match="NAME or NAME:warm"):
        gpu_check.step("olmocr:tepid", [])


def test_a_setting_with_spaces_reaches_its_run_whole() -> None:
    # two flags in VLLM_EXTRA_ARGS: the planner's output evaluated and exported as check.sh does
    flags = "--mm-processor-cache-type=shm --mm-processor-cache-gb=8"
    s = gpu_check.step(f"lighton-ocr-3-0.8b,VLLM_EXTRA_ARGS={flags},MAX_NUM_SEQS=384", [], "0.32")
    assert s.settings["VLLM_EXTRA_ARGS"] == flags
    [export] = [
        x.strip()
        for x in (ROOT / "dev/gpu/check.sh").read_text().splitlines()
        if "export $run_env" in x
    ]
    script = f'eval "$STEP"; {export}; printf "%s|%s" "$VLLM_EXTRA_ARGS" "$MAX_NUM_SEQS"'
    ran = subprocess.run(
        ["bash", "-c", script],
        env={"STEP": s.shell(5000), "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"{flags}|384"


def test_a_spec_names_the_workers_settings_for_its_run_alone() -> None:
    rows = [run(engine_ready_s=276.8, pages_per_s=3.96, direct_pages_per_s=3.24)]
    s = gpu_check.step("chandra,MAX_NUM_SEQS=512,START_MODE=fast", rows, "0.32")
    assert s.settings == {"MAX_NUM_SEQS": "512", "START_MODE": "fast"}
    assert s.name == "chandra:fresh,MAX_NUM_SEQS=512,START_MODE=fast"
    assert s.tag == "chandra-fresh-MAX_NUM_SEQS-512-START_MODE-fast"
    values = dict(part.split("=", 1) for part in shlex.split(s.shell(5000)))
    # exported for the run (the bench records them as the row's settings off the defaults)
    assert values["run_env"] == "MAX_NUM_SEQS=512 START_MODE=fast"
    assert values["tag"] == s.tag and values["target"] == "chandra"
    # the target's own environment stays, the spec's settings after it
    lighton = gpu_check.step("lighton-ocr,MAX_NUM_BATCHED_TOKENS=8192", [], "0.26")
    assert lighton.env | lighton.settings == {"TF516": "1", "MAX_NUM_BATCHED_TOKENS": "8192"}
    warm = gpu_check.step("olmocr:warm,START_MODE=fast", [])
    assert warm.start == "warm" and warm.settings == {"START_MODE": "fast"}
    # a warm start still needs its target's fresh one, whatever their settings
    fates = gpu_check.plan(["olmocr,MAX_NUM_SEQS=512", "olmocr:warm"], 5000, [], "", set())
    assert [f for _, f in fates] == ["runs", "runs"]
    # the check's own variables travel the same way; the worker never reads them
    profiled = gpu_check.step("chandra:warm,PYSPY_HZ=20", [])
    assert profiled.settings == {"PYSPY_HZ": "20"}
    values = dict(part.split("=", 1) for part in shlex.split(profiled.shell(5000)))
    assert values["run_env"] == "PYSPY_HZ=20" and values["engines"] == "1"
    # the direct path first is an order of the passes, not a setting: sized from the defaults'
    at_defaults = [run(engine_ready_s=100.0, pages_per_s=10.0, direct_pages_per_s=10.0)]
    ordered = gpu_check.step("olmocr,DIRECT_FIRST=1", at_defaults)
    assert ordered.settings == {"DIRECT_FIRST": "1"}
    assert ordered.pages == gpu_check.step("olmocr", at_defaults).pages
    assert "row of 2026-12-01 at abc1234" in ordered.basis
    # the image's top-p sampler in place of the host's: the check's own, handed to vLLM by env.sh
    sampled = gpu_check.step("lighton-ocr,FLASHINFER_SAMPLER=1", [], "0.32")
    values = dict(part.split("=", 1) for part in shlex.split(sampled.shell(5000)))
    assert values["run_env"] == "FLASHINFER_SAMPLER=1"
    env_sh = (ROOT / "dev/gpu/env.sh").read_text()
    assert 'VLLM_USE_FLASHINFER_SAMPLER="${FLASHINFER_SAMPLER:-0}"' in env_sh
    # a pass of the pages asked for (whole waves, say), sized as before otherwise
    waves = gpu_check.step("olmocr,PAGES=512", at_defaults)
    assert waves.pages == 512 and waves.passes_s == pytest.approx(512 / 10.0 * 2)
    for odd in ("PAGES=0", "PAGES=257", "PAGES=4096", "PAGES=lots"):
        with pytest.raises(ValueError, match="PAGES is an even number"):
            gpu_check.step(f"olmocr,{odd}", at_defaults)


def test_engines_sharing_the_gpu_are_planned_as_such() -> None:
    rows = [run(engine_ready_s=100.0, pages_per_s=10.0, direct_pages_per_s=10.0)]
    alone = gpu_check.step("chandra", rows, "0.32")
    shared = gpu_check.step("chandra,ENGINES_ON_GPU=2", rows, "0.32")
    assert shared.engines == 2 and shared.pages == alone.pages
    values = dict(part.split("=", 1) for part in shlex.split(shared.shell(5000)))
    assert values["engines"] == "2" and values["run_env"] == "ENGINES_ON_GPU=2"
    # the second engine starts once the first is ready, on its caches; the worker passes run
    # at once, then the direct paths, each engine at its share of the GPU
    starts = alone.start_s * (1 + gpu_check.WARM_SHARE)
    assert shared.estimate_s == starts + 2 * alone.passes_s + gpu_check.OVERHEAD_S
    for bad in ("0", "5", "two"):
        with pytest.raises(ValueError, match="ENGINES_ON_GPU is 1 to 4"):
            gpu_check.parse_spec(f"chandra,ENGINES_ON_GPU={bad}")
    # CUDA's Multi-Process Service is the check's own, for engines that share the GPU alone
    mps = gpu_check.step("chandra,ENGINES_ON_GPU=2,MPS=1", rows, "0.32")
    assert mps.engines == 2 and mps.estimate_s == shared.estimate_s
    assert dict(part.split("=", 1) for part in shlex.split(mps.shell(5000)))["run_env"] == (
        "ENGINES_ON_GPU=2 MPS=1"
    )
    for bad in ("chandra,MPS=1", "chandra,ENGINES_ON_GPU=2,MPS=yes"):
        with pytest.raises(ValueError, match="MPS is 0 or 1"):
            gpu_check.parse_spec(bad)


def test_the_summary_adds_up_engines_that_shared_the_gpu() -> None:
    rows = [run(pages_per_s=7.5), run(pages_per_s=8.0)]
    lines = gpu_check.summary(rows, together=True).splitlines()
    assert len(lines) == 3 and lines[-1] == "together, 2 engines sharing the GPU: pages/s 15.50"
    assert gpu_check.summary([run(pages_per_s=None)], together=True).endswith(
        "no pace (an engine gave none)"
    )
    # their direct paths, also run at once, add up too, where every engine has one
    direct = [
        run(pages_per_s=7.5, direct_pages_per_s=8.0),
        run(pages_per_s=8.0, direct_pages_per_s=9.0),
    ]
    assert gpu_check.summary(direct, together=True).splitlines()[-1] == (
        "together, 2 engines sharing the GPU: pages/s 15.50 / direct 17.00"
    )
    one_direct = [run(pages_per_s=7.5, direct_pages_per_s=8.0), run(pages_per_s=8.0)]
    assert gpu_check.summary(one_direct, together=True).endswith("pages/s 15.50")
    # answers that came back empty (a stand-in's greedy answers) are said beside the pace
    textless = run(pages_per_s=7.0, answers_without_text=960)
    assert gpu_check.summary([textless]).endswith("pages/s 7, 960 answers without text")


@pytest.mark.parametrize(
    "spec",
    [
        "chandra,MAX_SEQS=512",
        "chandra,max_num_seqs=512",
        "chandra,MAX_NUM_SEQS",
        "chandra,MAX_NUM_SEQS=5 12",
        "chandra,START_MODE=$(x)",
    ],
)
def test_a_setting_in_a_spec_is_a_declared_one_with_a_plain_value(spec: str) -> None:
    with pytest.raises(ValueError, match="is not VAR=VALUE with VAR one of the worker's settings"):
        gpu_check.parse_spec(spec)


def test_a_spec_may_pass_a_vllm_flag_with_its_own_value() -> None:
    _, start, settings = gpu_check.parse_spec(
        "chandra,VLLM_EXTRA_ARGS=--kernel-config.enable_jit_warmup=false"
    )
    assert start == "fresh"
    assert settings == {"VLLM_EXTRA_ARGS": "--kernel-config.enable_jit_warmup=false"}


def test_every_target_plans_from_the_data_file() -> None:
    rows = measured.runs()
    for name in TARGETS:
        fresh = gpu_check.step(name, rows)
        assert fresh.pages >= MIN_PAGES and fresh.estimate_s > 0
        assert gpu_check.step(f"{name}:warm", rows).pages == 0


def test_check_sh_dry_run_prints_the_plan() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OUT"} | {
        "DRY_RUN": "1",
        "PYTHON": sys.executable,
    }
    out = subprocess.run(
        ["bash", "dev/gpu/check.sh", "560", "olmocr", "olmocr:warm", "nope"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "plan for a call of 560 s (30 s kept for packing):"
    assert any(
        line.startswith("olmocr:fresh") and " runs; start: row of " in line for line in lines
    )
    assert any(line.startswith("olmocr:warm") for line in lines)


def test_a_detached_check_runs_from_its_own_copy_and_its_files_are_collected(tmp_path) -> None:
    acc, out = tmp_path / "acc", tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "OUT"} | {
        "ACC": str(acc),
        "DRY_RUN": "1",  # the plan alone: the detached check prints it and ends
        "PYTHON": sys.executable,
    }

    def detached(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "dev/gpu/check_detached.sh", *args],
            cwd=ROOT,
            env=env | {"OUT": str(out)},
            capture_output=True,
            text=True,
            timeout=180,
        )

    started = detached("start", "560", "olmocr")
    assert started.returncode == 0, started.stderr
    assert "plan for a call of 560 s" in started.stdout  # printed by the check it started
    tree = acc / "tree"
    for part in ("dev/gpu/check.sh", "src/vlm_ocr/settings.py", "benchmarks/gpu.jsonl"):
        assert (tree / part).is_file()  # the code it runs, apart from the working tree
    # its files so far come back, and the summary once the check says it is done
    (acc / "detached" / "gpu-rows.jsonl").write_text("{}\n")
    (acc / "detached" / "summary.txt").write_text("olmocr: ...\ncheck k1: done in 9 s of 560\n")
    collected = detached("collect", "5")
    assert collected.returncode == 0, collected.stderr
    assert collected.stdout.endswith("check k1: done in 9 s of 560\n")
    assert {p.name for p in out.iterdir()} == {"check.log", "gpu-rows.jsonl", "summary.txt"}
    assert "plan for a call" in (out / "check.log").read_text()
    assert detached("wait").returncode == 2
    # a check still running: a run's archive packed since the last collect ends the wait at once
    # (the host may be taken back before WAIT_S), and the next collect waits for the next one
    (acc / "detached" / "summary.txt").write_text("olmocr: 512 pages, about 173 s\n")
    (acc / "detached" / "check-k1.tgz").write_bytes(b"run 1")
    early = detached("collect", "600")  # returns long before its 600 s (the call's limit: 180)
    assert early.returncode == 0, early.stderr
    assert (out / "check-k1.tgz").read_bytes() == b"run 1"
    waited = detached("collect", "2")  # nothing new: the whole WAIT_S, then the files so far
    assert waited.returncode == 0 and waited.stdout == "olmocr: 512 pages, about 173 s\n"


def test_a_second_check_is_refused_while_one_runs_and_stop_ends_it(tmp_path) -> None:
    # a plan's "skipped" is decided again at run time: a check may still be running a target its
    # plan skipped, and a second one started beside it would share the GPU and the port
    acc, out = tmp_path / "acc", tmp_path / "out"
    (acc / "detached").mkdir(parents=True)
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "OUT"} | {
        "ACC": str(acc),
        "OUT": str(out),
        "DRY_RUN": "1",
        "PYTHON": sys.executable,
    }
    # a check, and below it a process of a session of its own (as the worker's vLLM)
    check = subprocess.Popen(
        ["bash", "-c", "setsid sleep 120 & echo $!; wait"],
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert check.stdout is not None
    below = int(check.stdout.readline())
    try:
        (acc / "detached" / ".check.pid").write_text(f"{check.pid}\n")
        (acc / "detached" / "summary.txt").write_text("chandra: 320 pages, about 254 s\n")

        def detached(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["bash", "dev/gpu/check_detached.sh", *args],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )

        refused = detached("start", "560", "olmocr")
        assert refused.returncode == 4
        assert f"a check is still running here (pid {check.pid}; chandra: 320 pages" in (
            refused.stderr
        )
        assert check.poll() is None  # nothing of it touched
        assert (acc / "detached" / "summary.txt").exists()
        stopped = detached("stop")
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.startswith(f"check {check.pid} ended")
        assert check.wait(timeout=30) is not None
        assert not alive(below)  # ended too, though in a session of its own
        started = detached("start", "560", "olmocr")
        assert started.returncode == 0, started.stderr
        assert "plan for a call of 560 s" in started.stdout
        assert detached("stop").stdout.startswith(("no check is running here", "check "))
    finally:
        check.kill()
        check.wait()


def test_a_detached_check_is_refused_where_the_bundle_is_not_unpacked(tmp_path) -> None:
    # a host given back between calls comes back without /tmp/acc: the check must not start there
    # (every run would fail at once while the next call waited on it)
    acc, out = tmp_path / "acc", tmp_path / "out"
    acc.mkdir()
    out.mkdir()
    (acc / "b00").write_bytes(b"part of a stream")  # a chunk of part b, not its last
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "DRY_RUN")}
    started = subprocess.run(
        ["bash", "dev/gpu/check_detached.sh", "start", "560", "olmocr"],
        cwd=ROOT,
        env=env | {"ACC": str(acc), "OUT": str(out), "VLLM": "0.32", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 3
    assert "part b: 1 chunk(s) here, up to b00" in started.stderr
    assert f"not unpacked in {acc} (missing: wsite site32)" in started.stderr
    assert not (acc / "detached").exists()  # nothing started
    # and a collect there says at once that no check runs, rather than waiting its WAIT_S
    collected = subprocess.run(
        ["bash", "dev/gpu/check_detached.sh", "collect", "540"],
        cwd=ROOT,
        env=env | {"ACC": str(acc), "OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert collected.returncode == 3
    assert "no check was started on this host" in collected.stderr


def test_a_check_that_would_sample_with_py_spy_is_refused_where_py_spy_is_not(tmp_path) -> None:
    # py-spy comes with the call that starts the check: a PYSPY_HZ run without it would run
    # unsampled while its row's note still named the setting
    acc, out, project = tmp_path / "acc", tmp_path / "out", tmp_path / "project"
    for site in ("wsite", "site32"):  # the bundle unpacked, py-spy not beside it
        (acc / site).mkdir(parents=True)
    out.mkdir()
    project.mkdir()  # the project without a developer's .gpu-bundle (py-spy may be in it)
    for part in ("benchmarks", "builder", "dev", "examples", "src", "pyproject.toml"):
        (project / part).symlink_to(ROOT / part)
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "DRY_RUN")}
    started = subprocess.run(
        ["bash", "dev/gpu/check_detached.sh", "start", "560", "olmocr", "chandra,PYSPY_HZ=20"],
        cwd=project,
        env=env | {"ACC": str(acc), "OUT": str(out), "VLLM": "0.32", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 3, started.stdout
    assert f"a target sets PYSPY_HZ but {acc}/py-spy is missing" in started.stderr
    assert "carry .gpu-bundle/py-spy" in started.stderr
    assert not (acc / "check").exists()  # nothing of a run began


def test_the_check_runs_on_the_gpu_host_alone(tmp_path) -> None:
    # its env.sh makes /runpod-volume for the compile caches: on a machine without a GPU the
    # worker would then take that folder for RunPod's network volume
    path = tmp_path / "bin"  # a machine without nvidia-smi, whatever this one has
    path.mkdir()
    (path / "date").symlink_to(shutil.which("date") or "/bin/date")
    ran = subprocess.run(
        [shutil.which("bash") or "/bin/bash", "dev/gpu/check.sh", "560", "olmocr"],
        cwd=ROOT,
        env={"PATH": str(path), "ACC": str(tmp_path / "acc"), "OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 3
    assert "check.sh runs on the GPU host (no nvidia-smi here)" in ran.stderr
    assert "DRY_RUN=1 prints its plan anywhere" in ran.stderr
    assert not (tmp_path / "acc" / "check").exists()  # nothing of a run began


def test_the_check_ends_vllms_processes_but_not_the_shell_that_names_the_launcher() -> None:
    # its stop_vllm kills what vllm_pids lists between runs: once it listed the host command's own
    # shell, whose line named fork_launcher.py, and the call died after its plan
    listing = [
        "101 /opt/venv/bin/python3 -P src/vlm_ocr/engines/vllm/fork_launcher.py serve m --headless",
        "102 VLLM::EngineCore",
        "103 python3 -m vllm.entrypoints.cli.main serve m --api-server-count 2",
        "104 VLLM::APIServer_1",
        "105 bash -c sed -i /x/d src/vlm_ocr/engines/vllm/fork_launcher.py; bash check.sh",
        "106 python3 -m vlm_ocr_lab bench --output-tokens 800",
        "107 grep vllm.entrypoints",
    ]
    check = (ROOT / "dev/gpu/check.sh").read_text()
    function = re.search(r"^vllm_pids\(\) \{.*?^\}$", check, re.S | re.M)
    assert function is not None
    script = f"ps() {{ printf '%s\\n' {shlex.join(listing)}; }}\n{function.group(0)}\nvllm_pids\n"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["101", "102", "103", "104"]


def test_vllms_gauges_go_into_the_row_as_medians_over_the_busy_samples(tmp_path) -> None:
    metrics = tmp_path / "metrics.txt"
    metrics.write_text(
        "t=     0s running=0 waiting=0 kv=0% vllm_processes=3 open_files=90 limit=20000\n"
        "t=    10s running=256 waiting=0 kv=8% vllm_processes=3 open_files=300 limit=20000\n"
        "t=    20s running=256 waiting=4 kv=12% vllm_processes=3 open_files=300 limit=20000\n"
        "t=    30s running=39 waiting=0 kv=6% vllm_processes=3 open_files=300 limit=20000\n"
    )
    said = gpu_check.gauges(metrics.read_text())
    assert said == (
        "running 256 (39-256), waiting 0 (0-4), KV 8 % (6-12 %): medians over 3 samples with "
        "requests"
    )
    row = tmp_path / "row.jsonl"
    row.write_text(
        json.dumps({k: v for k, v in run(engine_ready_s=1.0).__dict__.items() if k != "extra"})
        + "\n"
    )
    assert gpu_check.add_gauges(metrics, row) == said
    (back,) = measured.runs(row)
    assert back.extra["gauges"] == said
    assert gpu_check.gauges("t=     0s running=0 waiting=0 kv=0%\n") is None


def test_the_engines_step_rate_joins_the_gauges_where_the_sampler_read_vllms_counters() -> None:
    # lines as dev/gpu/metrics.py prints them once it has read vLLM's counters twice
    tail = " vllm_processes=5 open_files=300 limit=20000"
    metrics = (
        f"t=     0s running=0 waiting=0 kv=0%{tail}\n"
        f"t=    10s running=256 waiting=60 kv=20%{tail} prompt_tok/s=9000 output_tok/s=5800 "
        "steps/s=22.5 tok/step=660 itl_ms=44.1\n"
        f"t=    20s running=256 waiting=58 kv=24%{tail} prompt_tok/s=8000 output_tok/s=6000 "
        "steps/s=23.0 tok/step=610 itl_ms=43.0\n"
        f"t=    30s running=40 waiting=0 kv=5%{tail} prompt_tok/s=0 output_tok/s=0 steps/s=0.0 "
        "tok/step=0 itl_ms=0.0\n"
    )
    assert gpu_check.gauges(metrics) == (
        "running 256 (40-256), waiting 58 (0-60), KV 20 % (5-24 %): medians over 3 samples with "
        "requests; output tokens/s 5800 (5800-6000), engine steps/s 22.5 (22.5-23), time between "
        "tokens 43 ms (43-44.1 ms) over 2 samples"
    )
    # two API servers each counted every step: the engine took half as many
    assert "engine steps/s 11.2 (11.2-11.5), " in gpu_check.gauges(metrics, api_servers=2)


def _metrics_script():
    """dev/gpu/metrics.py as a module (it runs on the GPU host by path, with the host's Python)."""
    found = importlib.util.spec_from_file_location("gpu_metrics", ROOT / "dev/gpu/metrics.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    sys.modules[found.name] = module  # its dataclass looks its module up by name
    found.loader.exec_module(module)
    return module


def test_the_sampler_tells_each_process_of_a_run_by_its_part() -> None:
    m = _metrics_script()
    py = "/opt/venv/bin/python3"
    forkserver = "-c from multiprocessing.forkserver import main"
    # (pid, parent, command line, its part): a check's run as `ps` shows it on the host
    table = [
        (1, 0, "bash dev/gpu/check.sh 1420 lighton-ocr", None),
        (10, 1, "timeout -k 5 300 /tmp/acc/py-spy record --subprocesses --", None),
        (11, 10, "/tmp/acc/py-spy record --subprocesses --idle --", None),
        (12, 11, f"{py} -m vlm_ocr_lab bench --output-tokens 800", "worker"),
        (13, 12, f"{py} {forkserver}", "pool"),  # the render pool's fork server
        (14, 13, f"{py} {forkserver}", "pool"),  # a render process
        (20, 12, "/tmp/acc/vllm-python -m vllm.entrypoints.cli.main serve /m", "vllm"),
        (21, 20, "VLLM::EngineCore", "core"),
        (22, 20, "VLLM::APIServer_0", "api"),
        (23, 20, f"python3 -P {forkserver}; main(3)", "vllm"),  # vLLM's own fork server
        (24, 23, "VLLM::ApiServer_1", "api"),
        (30, 1, "python3 dev/gpu/metrics.py 8765 10", None),  # the sampler itself
    ]
    procs = {pid: m.Proc(pid, parent, argv, 0.0) for pid, parent, argv, _ in table}
    assert {pid: m.part(procs[pid], procs) for pid in procs} == {t[0]: t[3] for t in table}
    # one API server (API_SERVER_COUNT=1): vLLM serves from the process it was started as, and
    # the engine, split apart, is a headless launcher of its own
    serve = "/tmp/acc/vllm-python -m vllm.entrypoints.cli.main serve /m"
    alone = [
        (12, 1, f"{py} -m vlm_ocr_lab bench --output-tokens 800", "worker"),
        (20, 12, f"{serve} --data-parallel-size-local 0 --api-server-count 1", "api"),
        (25, 12, "/tmp/acc/vllm-python -P /w/fork_launcher.py serve /m --headless", "vllm"),
        (26, 25, "VLLM::EngineCore", "core"),
    ]
    procs = {pid: m.Proc(pid, parent, argv, 0.0) for pid, parent, argv, _ in alone}
    assert {pid: m.part(procs[pid], procs) for pid in procs} == {t[0]: t[3] for t in alone}


def test_the_sampler_gives_each_part_its_share_of_a_cpu_since_the_last_sample() -> None:
    m = _metrics_script()

    def table(core: float, api: tuple[float, float], worker: float, pool: float) -> dict:
        rows = [
            m.Proc(12, 1, "python3 -m vlm_ocr_lab bench", worker),
            m.Proc(13, 12, "python3 -c from multiprocessing.spawn import spawn_main", pool),
            m.Proc(14, 12, "python3 -c from multiprocessing.spawn import spawn_main", pool),
            m.Proc(20, 12, "python3 -m vllm.entrypoints.cli.main serve /m", 1.0),
            m.Proc(21, 20, "VLLM::EngineCore", core),
            m.Proc(22, 20, "VLLM::APIServer_0", api[0]),
            m.Proc(23, 20, "VLLM::APIServer_1", api[1]),
        ]
        return {p.pid: p for p in rows}

    before = table(100.0, (10.0, 10.0), 5.0, 2.0)
    now = table(109.7, (14.1, 12.0), 6.2, 2.5)
    assert m.cpu_shares(now, {}, 10.0) == ""  # the first sample has nothing to compare
    assert m.cpu_shares(now, before, 10.0) == (
        " cpu%: core=97 api=41,20 worker=12 pool=10/2 vllm=0/1"
    )
    # this machine's own table: the test's process is found, with its parent and its time
    mine = m.processes()[os.getpid()]
    assert mine.ppid == os.getppid() and mine.cpu_s > 0 and "python" in mine.argv.lower()


def test_the_cpu_shares_join_the_gauges_over_the_busy_samples() -> None:
    tail = " vllm_processes=5 open_files=300 limit=20000"
    metrics = (
        f"t=     0s running=0 waiting=0 kv=0%{tail}\n"
        f"t=    10s running=0 waiting=0 kv=0%{tail} cpu%: core=30 api=2,1 worker=90 pool=800/16"
        " vllm=1/1 gpu%=0\n"
        f"t=    20s running=256 waiting=64 kv=20%{tail} prompt_tok/s=9000 output_tok/s=5800 "
        "steps/s=22.5 tok/step=660 itl_ms=44.1 cpu%: core=99 api=96,94,90 worker=12 pool=40/16"
        " vllm=1/1 gpu%=71\n"
        f"t=    30s running=256 waiting=10 kv=24%{tail} prompt_tok/s=8000 output_tok/s=6000 "
        "steps/s=23.0 tok/step=610 itl_ms=43.0 cpu%: core=97 api=88,80,79 worker=10 pool=0/16"
        " vllm=1/1 gpu%=75\n"
        f"t=    40s running=12 waiting=0 kv=2%{tail} cpu%: core=95 api=20,3,1 worker=9\n"
    )
    said = gpu_check.gauges(metrics)
    assert said is not None
    assert said.endswith(
        "; CPU (per cent of one): the engine core 97 % (95-99 %), the busiest API server 88 % "
        "(20-96 %), the worker 10 % (9-12 %), its render and CPU-model processes in all 0 % "
        "(0-40 %), GPU busy 71 % (71-75 %)"
    )
    # a sampler from before these fields: the gauges as they were
    assert "CPU" not in (gpu_check.gauges(metrics.replace(" cpu%:", " x:")) or "")


def test_the_plan_of_a_call_on_the_host_knows_what_started_fresh_there(capsys) -> None:
    data = ["--data", str(ROOT / "benchmarks/gpu.jsonl")]
    assert gpu_check.main(["plan", "600", "olmocr:warm", "--on-host", *data]) == 0
    assert "skipped: no fresh start of it on this host" in capsys.readouterr().out
    argv = ["plan", "600", "olmocr:warm", "--on-host", "--fresh-done", "olmocr", *data]
    assert gpu_check.main(argv) == 0
    assert re.search(r"^olmocr:warm .* runs; ", capsys.readouterr().out, re.M)


BUNDLE_LISTS = sorted((ROOT / "dev/gpu").glob("bundle-vllm-*.txt"))


@pytest.mark.parametrize("path", BUNDLE_LISTS, ids=lambda p: p.name)
def test_a_bundle_list_pins_its_own_vllm_once_and_leaves_the_host_its_own(path: Path) -> None:
    # dev/gpu/make_bundle.sh fetches these lists without dependencies: each package pinned once,
    # the vLLM the file is named for among them, and none of what the host's own satisfies
    # (transformers, on the engine's path from the host or the TF516 wheel) or part n holds
    version = path.stem.removeprefix("bundle-vllm-")
    pins = [line.split("==") for line in path.read_text().splitlines() if line and line[0] != "#"]
    names = [re.sub(r"[-_.]+", "-", name.lower()) for name, _ in pins]
    assert all(len(pin) == 2 and pin[1] for pin in pins)
    assert len(names) == len(set(names))
    assert [v for (name, v) in pins if name == "vllm"] == [f"{version}.0"]
    assert not {"transformers", "nvidia-nccl-cu13", "nvidia-cudnn-cu13"} & set(names)
