"""`vlm-ocr-lab bench --greedy-temperature T` (`EngineOptions.greedy_temperature`): on dummy
weights a greedy answer repeats the prompt's last token (a special token or a newline: no text),
so the GPU check sends a family's greedy attempt sampled instead. What reaches the server: the
greedy attempt at T without its top-p, every sampled attempt as the family sends it, and nothing
changed without the option; the row and the fingerprint say it was set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vlm_ocr.engines.base import EngineOptions
from vlm_ocr.engines.factory import make_engine
from vlm_ocr_lab import cli, measured
from vlm_ocr_lab.standins.instant_engine import InstantEngine

from .support import b64, make_settings, new_worker, page_image, png_bytes, run_job

CHANDRA = "datalab-to/chandra-ocr-2"  # greedy first, with a top-p of 0.1 that greedy ignores
QWEN_VL = "Qwen/Qwen3-VL-8B-Instruct-AWQ"  # the chat family: greedy first, no top-p
LIGHTON3 = "lightonai/LightOnOCR-3-0.8B"  # samples from its first attempt


def first_requests(
    loop, tmp_path: Path, cpu_pool, model: str, options: EngineOptions
) -> list[dict[str, Any]]:
    """The requests of one page's first attempt (the warm-up page's among them), as sent."""
    seen: list[dict[str, Any]] = []

    def answer(request: dict[str, Any]) -> str:
        seen.append(request)
        return "A page."

    server = InstantEngine(answer=answer)
    settings = make_settings(
        tmp_path, engine="openai", openai_base_url=server.url, model_name=model, max_attempts=1
    )
    worker = new_worker(loop, settings, make_engine(settings, options), cpu_pool)
    try:
        loop.run(worker.start())
        job = {"images": [{"base64": b64(png_bytes(page_image(["One page."])))}]}
        result = run_job(loop, worker, job)
    finally:
        loop.run(worker.close())
        server.close()
    assert result.pages[0].attempts == 1
    fingerprint = result.fingerprint["sampling"]
    assert fingerprint.get("greedy_temperature") == options.greedy_temperature
    return seen


def sampling(request: dict[str, Any]) -> tuple[float, float | None]:
    return request["temperature"], request.get("top_p")


@pytest.mark.parametrize(
    ("model", "as_sent", "with_option"),
    [
        (CHANDRA, (0.0, 0.1), (1.0, None)),
        (QWEN_VL, (0.0, None), (1.0, None)),
        (LIGHTON3, (0.1, 1.0), (0.1, 1.0)),
    ],
)
def test_only_a_greedy_attempt_is_sampled_and_only_with_the_option(
    loop, tmp_path: Path, cpu_pool, model: str, as_sent: tuple, with_option: tuple
) -> None:
    plain = first_requests(loop, tmp_path / "plain", cpu_pool, model, EngineOptions())
    assert {sampling(r) for r in plain} == {as_sent}  # the warm-up page and the job's page
    sampled = EngineOptions(greedy_temperature=1.0)
    changed = first_requests(loop, tmp_path / "sampled", cpu_pool, model, sampled)
    assert len(changed) == len(plain) == 2
    assert {sampling(r) for r in changed} == {with_option}


def test_the_bench_sends_it_and_the_row_records_it(capsys, tmp_path: Path) -> None:
    data = tmp_path / "gpu.jsonl"
    bench = ["bench", "--instant-engine", "--slow", "0", "--progress", "0", "--pages", "2"]
    bench += ["--record", str(data)]
    assert cli.main([*bench, "--greedy-temperature", "1"]) == 0
    assert cli.main(bench) == 0
    with_option, without = measured.runs(data)
    assert with_option.extra["greedy_temperature"] == 1.0
    assert "greedy_temperature" not in without.extra
    assert "greedy_temperature" not in json.loads(data.read_text().splitlines()[1])


@pytest.mark.parametrize("value", ["0", "-1", "3", "warm"])
def test_a_temperature_that_would_not_sample_is_refused_by_name(capsys, value: str) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.main(["bench", "--instant-engine", "--greedy-temperature", value])
    assert stop.value.code == 2
    assert "--greedy-temperature" in capsys.readouterr().err
