"""The GPU figures as data: every row of benchmarks/gpu.jsonl holds to its schema."""

from __future__ import annotations

import json

import pytest

from vlm_ocr_lab import measured


def test_every_row_of_the_data_file_reads() -> None:
    rows = measured.runs()
    assert rows, "benchmarks/gpu.jsonl has no rows"
    for row in rows:
        assert row.gpu and row.vllm and row.family and row.commit
        assert row.pages_per_s is None or row.failed < row.pages


def _row(**change: object) -> str:
    row = {k: None for k in measured.REQUIRED} | {
        "start": "fresh",
        "overrides": {},
        "phases": {},
        "failed_by_reason": {},
        "failed": 0,
        "pages": 4,
    }
    return json.dumps(row | change)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"start": "lukewarm"}, "start is 'fresh' or 'warm'"),
        ({"failed": 2, "failed_by_reason": {"timeout": 1}}, "does not add up"),
        ({"failed": 4, "failed_by_reason": {"oom": 4}, "pages_per_s": 1.0}, "has no pace"),
        ({"phases": []}, "phases is an object"),
    ],
)
def test_a_bad_row_is_refused_with_its_reason(change: dict[str, object], said: str) -> None:
    with pytest.raises(measured.BadRow, match=said):
        measured.parse(_row(**change), "gpu.jsonl:1")


def test_a_row_without_a_key_names_it() -> None:
    row = json.loads(_row())
    del row["engine_ready_s"]
    with pytest.raises(measured.BadRow, match="missing engine_ready_s"):
        measured.parse(json.dumps(row))


def test_the_latest_run_at_defaults_is_told_from_one_with_overrides() -> None:
    rows = [
        measured.parse(_row(family="f", commit="a", pages_per_s=1.0)),
        measured.parse(_row(family="f", commit="b", pages_per_s=2.0, overrides={"X": 1})),
    ]
    assert measured.latest("f", rows=rows).commit == "a"  # type: ignore[union-attr]
    assert measured.latest("f", overrides={"X": 1}, rows=rows).commit == "b"  # type: ignore[union-attr]
    assert measured.latest("g", rows=rows) is None


def test_a_run_that_set_what_is_now_the_default_ran_at_the_defaults() -> None:
    # TRITON_AUTOTUNE=false was set by hand before it became the default: the row keeps what
    # ran, the tables count it at the defaults; a value off today's default stays an override
    now_default = measured.parse(_row(overrides={"TRITON_AUTOTUNE": "false"}))
    assert now_default.at_defaults and now_default.off_defaults == {}
    assert now_default.overrides == {"TRITON_AUTOTUNE": "false"}
    for kept in (
        {"TRITON_AUTOTUNE": "true"},
        {"MAX_NUM_SEQS": "512"},
        {"X": 1},
        {"MAX_NUM_SEQS": "x"},
    ):
        assert measured.parse(_row(overrides=kept)).off_defaults == kept
    mixed = measured.parse(_row(overrides={"TRITON_AUTOTUNE": "false", "START_MODE": "fast"}))
    assert mixed.off_defaults == {"START_MODE": "fast"}
    assert measured.latest(
        "f", rows=[measured.parse(_row(family="f", overrides={"TRITON_AUTOTUNE": "0"}))]
    )


def test_the_latest_run_of_one_checkpoint_of_a_family() -> None:
    rows = [
        measured.parse(_row(family="lighton-ocr-3", model="org/0.8B", commit="a")),
        measured.parse(_row(family="lighton-ocr-3", model="org/4B", commit="b")),
    ]
    assert measured.latest("lighton-ocr-3", rows=rows).commit == "b"  # type: ignore[union-attr]
    assert measured.latest("lighton-ocr-3", model="org/0.8B", rows=rows).commit == "a"  # type: ignore[union-attr]


def test_a_run_is_at_its_defaults_in_its_familys_start_mode() -> None:
    from vlm_ocr.engines.families import FAMILIES
    from vlm_ocr.settings import StartMode

    fast = next(n for n, f in FAMILIES.items() if f.start_mode is StartMode.FAST)
    compiled = next(n for n, f in FAMILIES.items() if f.start_mode is StartMode.THROUGHPUT)
    for family, mine, other in ((fast, "fast", "throughput"), (compiled, "throughput", "fast")):
        assert measured.family_start_mode(family) == mine
        assert measured.other_start(family) == {"START_MODE": other}
        # as the engine's facts say it ran; or, in a row without them, as the row set it
        at = measured.parse(_row(family=family, start_mode=mine))
        assert at.at_defaults and at.start_mode == mine
        off = measured.parse(_row(family=family, start_mode=other))
        assert off.off_defaults == {"START_MODE": other}
        told = measured.parse(_row(family=family, overrides={"START_MODE": other}))
        assert told.off_defaults == {"START_MODE": other}
    # a row from before the start modes compiled everything: off a fast family's defaults
    old = measured.parse(_row(family=fast, overrides={"MAX_NUM_SEQS": "512"}))
    assert old.off_defaults == {"MAX_NUM_SEQS": "512", "START_MODE": "throughput"}
    assert measured.parse(_row(family=compiled)).at_defaults


def test_a_run_at_what_is_now_its_familys_batched_tokens_ran_at_the_defaults() -> None:
    def row(family: str, model: str, vllm: str, tokens: str) -> measured.Run:
        overrides = {"MAX_NUM_BATCHED_TOKENS": tokens}
        mode = measured.family_start_mode(family)  # in its family's start mode
        return measured.parse(
            _row(family=family, model=model, vllm=vllm, overrides=overrides, start_mode=mode)
        )

    for family, model, vllm in (
        ("lighton-ocr-3", "lightonai/LightOnOCR-3-0.8B", "0.32.0"),
        ("lighton-ocr", "lightonai/LightOnOCR-2-1B", "0.26.0"),
        ("olmocr", "allenai/olmOCR-2-7B-1025-FP8", "0.32.0"),
    ):
        own = measured.family_batched_tokens(family, model, vllm)
        assert own is not None
        assert row(family, model, vllm, str(own)).at_defaults, family
        assert row(family, model, vllm, str(own * 2)).off_defaults == {
            "MAX_NUM_BATCHED_TOKENS": str(own * 2)
        }
    # the family's own differs by vLLM: on another, the same tokens are the run's own
    small = measured.family_batched_tokens("lighton-ocr-3", "lightonai/LightOnOCR-3-0.8B", "0.26.0")
    big = measured.family_batched_tokens("lighton-ocr-3", "lightonai/LightOnOCR-3-0.8B", "0.32.0")
    assert small != big
    assert not row("lighton-ocr-3", "lightonai/LightOnOCR-3-0.8B", "0.26.0", str(big)).at_defaults
    assert measured.family_batched_tokens("gone", "org/model", "0.32.0") is None


def test_the_batched_tokens_the_engine_ran_with_decide_over_what_the_row_set() -> None:
    model, vllm = "lightonai/LightOnOCR-3-0.8B", "0.32.0"
    own = measured.family_batched_tokens("lighton-ocr-3", model, vllm)
    assert own is not None

    def row(ran: int, **overrides: str) -> measured.Run:
        facts = {"max_num_batched_tokens": ran, "start_mode": "throughput"}
        return measured.parse(
            _row(family="lighton-ocr-3", model=model, vllm=vllm, overrides=overrides, **facts)
        )

    # at the defaults before the family's own changed: off today's, though it set nothing
    assert row(own // 2).off_defaults == {"MAX_NUM_BATCHED_TOKENS": str(own // 2)}
    assert row(own).at_defaults
    assert row(own, MAX_NUM_BATCHED_TOKENS=str(own)).at_defaults  # set to what is now its own


def test_a_run_with_flashinfers_sampler_is_off_the_hosts_defaults() -> None:
    # the host samples with vLLM's Triton filter; FlashInfer's compiles at its first page there
    flashinfer = measured.parse(_row(family="lighton-ocr", start_mode="fast", sampler="FlashInfer"))
    assert flashinfer.off_defaults == {"FLASHINFER_SAMPLER": "1"}
    own = "vLLM's own, FlashInfer's not used: VLLM_USE_FLASHINFER_SAMPLER=0"
    for row in (
        _row(family="lighton-ocr", start_mode="fast", sampler=own),
        _row(family="lighton-ocr", start_mode="fast"),
    ):
        assert measured.parse(row).at_defaults


def test_a_run_on_a_vllm_newer_than_the_images_is_a_trial_off_the_defaults() -> None:
    from vlm_ocr.engines.vllm.argv import IMAGE_VLLM, vllm_release

    major, minor = vllm_release(IMAGE_VLLM)
    newer = measured.parse(_row(family="olmocr", start_mode="fast", vllm=f"{major}.{minor + 1}.0"))
    assert newer.off_defaults == {"VLLM": f"{major}.{minor + 1}"}
    for vllm in (IMAGE_VLLM, f"{major}.{minor - 1}.0", f"{IMAGE_VLLM}+cu130"):  # the image's, and
        # an older image's engine, whose rows name it
        assert measured.parse(_row(family="olmocr", start_mode="fast", vllm=vllm)).at_defaults


def test_a_run_on_another_card_stands_apart_from_the_h200s() -> None:
    h100 = measured.parse(_row(family="olmocr", start_mode="fast", gpu="NVIDIA H100 80GB HBM3"))
    assert h100.off_defaults == {"GPU": "H100"}
    h200 = measured.parse(_row(family="olmocr", start_mode="fast", gpu="NVIDIA H200"))
    assert h200.at_defaults
    rows = [h200, h100]
    assert measured.latest("olmocr", rows=rows) is h200
    assert measured.latest("olmocr", rows=rows, overrides={"GPU": "H100"}) is h100
