"""`vlm-ocr-lab bench --record FILE`: the run as one row of the GPU figures' data, every key the
data's reader requires, from the bench's figures, the engine facts and the environment the worker
ran with; checked before it is appended, and read back by the reader the docs use."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from vlm_ocr.engines.vllm.logs import StartLog
from vlm_ocr_lab import cli, measured
from vlm_ocr_lab.bench import record

INSTANT = ["bench", "--instant-engine", "--slow", "0", "--jobs", "1", "--progress", "0"]


def test_runs_are_appended_as_rows_and_read_back(capsys, monkeypatch, tmp_path: Path) -> None:
    data = tmp_path / "gpu.jsonl"
    # the GPU host's own settings (dummy weights, no orientation) and two of the user's
    monkeypatch.setenv("AUTO_ROTATE", "false")
    monkeypatch.setenv("VLLM_EXTRA_ARGS", "--load-format dummy --enforce-eager")
    monkeypatch.setenv("MAX_NUM_BATCHED_TOKENS", "8192")
    monkeypatch.setenv("VLLM_PORT", "8765")  # where the server listens: no override
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "0")  # the host's sampler, not the image's
    rec = ["--record", str(data), "--commit", "abc1234", "--model", "org/some-checkpoint"]
    ok = [*INSTANT, "--faults", "0", "--pages", "4", "--gpu-price", "3.99", *rec]
    assert cli.main([*ok, "--note", "first"]) == 0
    failing = [*INSTANT, "--faults", "1", "--spare", "1", "--pages", "2", *rec, "--start", "warm"]
    assert cli.main(failing) == 1
    out = capsys.readouterr().out
    assert out.count(f"recorded: one row appended to {data}") == 2

    first, second = measured.runs(data)
    raw = json.loads(data.read_text().splitlines()[0])
    assert set(measured.REQUIRED) <= set(raw)
    assert (first.commit, first.model, first.family, first.note) == (
        "abc1234",
        "org/some-checkpoint",
        "qwen-vl",
        "first",
    )
    assert first.overrides == {
        "MAX_NUM_BATCHED_TOKENS": "8192",
        "VLLM_EXTRA_ARGS": "--enforce-eager",
    }
    assert first.extra["bench_settings"] == {
        "AUTO_ROTATE": "false",
        "VLLM_EXTRA_ARGS": "--load-format dummy",
        "VLLM_USE_FLASHINFER_SAMPLER": "0",
    }
    assert first.start == "fresh" and first.engine_ready_s is not None and first.engine_ready_s > 0
    assert (first.pages, first.failed, first.failed_by_reason) == (4, 0, {})
    assert first.pages_per_s is not None and first.pages_per_s > 0
    assert first.usd_per_million_pages == round(
        measured.usd_per_million(first.pages_per_s, 3.99), 1
    )
    assert "warmup_page_s" in first.phases
    assert first.gpu == "none" and first.date[:2] == "20"

    assert second.start == "warm"  # as the option said
    assert (second.pages, second.failed, second.pages_per_s) == (2, 2, None)
    assert sum(second.failed_by_reason.values()) == 2
    assert all(reason.startswith("engine: ") for reason in second.failed_by_reason)


def test_a_start_that_failed_is_recorded_with_its_reason(capsys, tmp_path: Path) -> None:
    data = tmp_path / "gpu.jsonl"
    argv = [*INSTANT, "--faults", "1", "--pages", "3", "--record", str(data), "--commit", "x"]
    assert cli.main(argv) == 1
    capsys.readouterr()
    (run,) = measured.runs(data)
    assert run.engine_ready_s is None and run.pages_per_s is None
    assert (run.pages, run.failed) == (3, 3)
    (reason,) = run.failed_by_reason
    assert reason.startswith("start: warm-up page failed")
    assert run.extra["start_error"].startswith("warm-up page failed")


def test_a_row_the_reader_refuses_is_never_written(tmp_path: Path) -> None:
    data = tmp_path / "gpu.jsonl"
    data.write_text("")
    with pytest.raises(measured.BadRow, match="missing"):
        record.append(data, {"family": "olmocr"})
    assert data.read_text() == ""


def test_the_cold_start_is_flattened_to_seconds() -> None:
    log = StartLog()
    for line, at in [
        ("INFO first line", 25.0),
        ("INFO Initializing a V1 LLM engine (v0.26.0) with config: ...", 50.0),
        ("INFO torch.compile takes 45.8 s in total", 100.0),
        ("INFO init engine (profile, create kv cache, warmup model) took 70.2 seconds", 130.0),
        ("INFO Application startup complete.", 138.0),
    ]:
        log.line(line, at)
    facts = {"cold_start": log.facts(), "warmup_s": 0.9}
    phases = record.phases(facts)
    assert phases == {
        "first_log_line_at_s": 25.0,
        "engine_core_at_s": 50.0,
        "torch_compile_s": 45.8,
        "engine_init_s": 70.2,
        "engine_ready_at_s": 130.0,
        "api_server_ready_at_s": 138.0,
        "engine_core_start_s": 25.0,
        "before_engine_init_s": 9.8,
        "api_servers_after_engine_s": 8.0,
        "warmup_page_s": 0.9,
    }
    assert all(isinstance(v, float) for v in phases.values())


@pytest.mark.parametrize(
    ("facts", "given", "kind"),
    [
        ({"caches": {"state": "reused"}}, None, "warm"),
        ({"cold_start": {"compile_cache": "hit"}}, None, "warm"),
        (
            {"caches": {"state": "built and published"}, "cold_start": {"compile_cache": "miss"}},
            None,
            "fresh",
        ),
        # what the caches say wins over the plan: a second "fresh" run on one host reused them
        ({"caches": {"state": "reused"}}, "fresh", "warm"),
        ({"caches": {"state": "built and published"}}, "warm", "fresh"),
        ({}, "warm", "warm"),  # a start that failed before saying: as the bench was told
        ({}, None, "fresh"),
    ],
)
def test_a_start_is_warm_when_it_reused_the_caches(facts, given, kind) -> None:
    assert record.start_kind(facts, given) == kind


def test_overrides_are_the_workers_settings_off_their_defaults() -> None:
    environ = {
        "MAX_NUM_SEQS": "512",
        "api_server_count": "1",  # names are case-insensitive, as the worker reads them
        "START_MODE": "auto",  # the default, set by hand: no override
        "MODEL_NAME": "/tmp/some-dummy-folder",
        "ENGINE": "vllm",
        "OPENAI_API_KEY": "never-in-the-data",
        "BUCKET_ENDPOINT_URL": "http://127.0.0.1:9",
        "BUCKET_NAME": "bench",
        "BUCKET_SECRET_ACCESS_KEY": "never-in-the-data",
        "BUCKET_ACCESS_KEY_ID": "never-in-the-data",
        "VLLM_EXTRA_ARGS": "--load-format dummy",
        "AUTO_ROTATE": "false",
        "TF516": "1",  # not a setting of the worker
    }
    changed, bench = record.overrides(environ)
    # the bucket is the harness's, and its keys never reach the data
    assert changed == {"MAX_NUM_SEQS": "512", "API_SERVER_COUNT": "1"}
    assert bench == {"VLLM_EXTRA_ARGS": "--load-format dummy", "AUTO_ROTATE": "false"}


def test_the_engines_versions_are_its_own_pythons() -> None:
    facts = {"name": "vllm", "version": "unknown"}
    vllm, transformers = record.engine_versions(facts, sys.executable)
    assert vllm != "unknown" and transformers != "unknown"  # asked, found or "none"
    assert record.engine_versions(facts | {"version": "0.26.0"}, sys.executable)[0] == "0.26.0"
    assert record.engine_versions({"name": "openai", "version": "x"}, sys.executable) == (
        "x",
        "unknown",
    )


def test_the_gpu_is_named_without_its_memory() -> None:
    assert record.gpu_name({"gpu": "NVIDIA H200, 143771 MiB"}) == "NVIDIA H200"
    assert record.gpu_name({"gpu": "NVIDIA H200, 143771 MiB; NVIDIA H200, 143771 MiB"}) == (
        "NVIDIA H200"
    )
    assert record.gpu_name({}) == "none"


def test_a_row_names_the_sampler_the_engine_chose() -> None:
    run = SimpleNamespace(figures={}, start_error=None)
    args = SimpleNamespace(output_tokens=800, greedy_temperature=None, jobs=1, time_limit=0)
    details = record._details(run, {"sampler": "FlashInfer"}, args, {})
    assert details["sampler"] == "FlashInfer"
    assert "sampler" not in record._details(run, {}, args, {})


def test_answers_without_text_are_summed_over_the_passes_and_the_direct_path() -> None:
    # the row says how many answers came back empty (a stand-in's degenerate answers), or nothing
    fig = {
        "earlier_passes": [{"timeline": {"answers_without_text": 1}}],
        "timeline": {"answers_without_text": 3},
        "direct": {"timeline": {"answers_without_text": 2}},
    }
    assert record.answers_without_text(fig) == 6
    assert record.answers_without_text({"timeline": {}, "direct": {"skipped": "no server"}}) == 0
