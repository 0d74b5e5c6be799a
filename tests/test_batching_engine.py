"""The stand-in engine that batches as vLLM does (`vlm_ocr_lab.standins.batching_engine`), and
`vlm-ocr-lab bench --batching-engine` driven as a user types it."""

from __future__ import annotations

import json
import re
import threading
import urllib.request

import pytest

from vlm_ocr_lab import cli
from vlm_ocr_lab.standins.batching_engine import BatchingEngine


def ask(url: str, tokens: int) -> dict:
    body = json.dumps({"model": "ocr", "max_tokens": tokens, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=60) as resp:
        return json.loads(resp.read())


@pytest.mark.parametrize("busy", [0.0, 1.0])
def test_at_most_seqs_run_and_each_page_is_taken_in_by_a_step_of_its_own(busy: float) -> None:
    engine = BatchingEngine(seqs=1, intake_s=0.0, step_s=0.001, busy=busy)
    try:
        answers: list[dict] = []
        threads = [threading.Thread(target=lambda: answers.append(ask(engine.url, 3)))]
        threads += [threading.Thread(target=lambda: answers.append(ask(engine.url, 3)))]
        threads += [threading.Thread(target=lambda: answers.append(ask(engine.url, 3)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [a["usage"]["completion_tokens"] for a in answers] == [3, 3, 3]
        assert all(a["choices"][0]["finish_reason"] == "length" for a in answers)
        # one at a time: each page taken in (its first token), then two decoding steps alone
        assert engine.stats == {
            "requests": 3,
            "intake steps": 3,
            "decode steps": 6,
            "most running": 1,
        }
    finally:
        engine.close()


def test_the_bench_keeps_the_worker_beside_the_direct_path_and_says_what_the_engine_did(
    capsys, monkeypatch
) -> None:
    monkeypatch.setenv("AUTO_ROTATE", "false")
    flags = ["--pages", "6", "--direct", "--output-tokens", "5", "--progress", "0"]
    code = cli.main(["bench", "--batching-engine", "4,1,1,0.5", *flags])
    out = capsys.readouterr().out
    assert code == 0
    assert "concurrency=5" in out  # the worker sized for 4 sequences and a queue
    assert "worker/direct pages/s ratio" in out
    # the warm-up page, the worker's six and the direct path's six; never more than four at once
    assert "batching engine: 13 requests, 13 steps taking a page in" in out
    most = re.search(r"at most (\d+) running", out)
    assert most is not None and 1 <= int(most.group(1)) <= 4


@pytest.mark.parametrize("shape", ["4,1", "four,1,1", "0,1,1", "4,1,0", "4,1,1,2", "4,1,1,1,1"])
def test_a_shape_not_of_the_form_is_refused_naming_it(capsys, shape: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--batching-engine", shape])
    assert exit_.value.code == 2
    assert "--batching-engine" in capsys.readouterr().err
