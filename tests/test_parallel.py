"""Workers with several GPUs: engine replicas (data parallel) by the GPU count, tensor parallel for
models one GPU cannot hold, and everything sized per replica follows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlm_ocr.cli import main as cli
from vlm_ocr.cli.plan import Layout, choose
from vlm_ocr.engines.factory import make_engine
from vlm_ocr.engines.gpu import GpuFacts
from vlm_ocr.engines.vllm.argv import (
    ServeSpec,
    launch_argvs,
    server_argv,
    through_fork_launcher,
)
from vlm_ocr.errors import ConfigError
from vlm_ocr.settings import Settings
from vlm_ocr_lab.standins.fakes import FakeEngine

from .support import ROOT, make_settings, new_worker


def h200s(n: int) -> GpuFacts:
    return GpuFacts.parse("NVIDIA H200, 143771 MiB, 9.0\n" * n)


L40S_X4 = GpuFacts.parse("NVIDIA L40S, 46068 MiB, 8.9\n" * 4)


@pytest.mark.parametrize(
    ("gpu", "values", "replicas", "seqs"),
    [
        (h200s(1), {}, 1, 256),
        (h200s(2), {}, 2, 256),  # a replica per GPU, each sized by its own GPU
        (h200s(4), {}, 4, 256),
        (h200s(4), {"tensor_parallel_size": 2}, 2, 256),
        (h200s(2), {"tensor_parallel_size": 2}, 1, 256),
        (L40S_X4, {"tensor_parallel_size": 2}, 2, 192),  # two L40S together: 90 GiB
        (h200s(4), {"data_parallel_size": 1}, 1, 256),  # a value set by hand wins
        (GpuFacts(), {}, 1, 192),  # no GPU to count: one
        (GpuFacts(), {"data_parallel_size": 2}, 2, 192),
    ],
)
def test_replicas_follow_the_gpus(gpu: GpuFacts, values: dict, replicas: int, seqs: int) -> None:
    spec = ServeSpec.resolve(Settings(**values), gpu, cpus=16)
    assert (spec.data_parallel_size, spec.max_num_seqs) == (replicas, seqs)
    assert spec.concurrency == replicas * seqs


def test_a_layout_the_gpus_cannot_hold_is_refused_naming_both_settings() -> None:
    with pytest.raises(ConfigError, match=r"DATA_PARALLEL_SIZE 2 × TENSOR_PARALLEL_SIZE 2 needs 4"):
        ServeSpec.resolve(Settings(data_parallel_size=2, tensor_parallel_size=2), h200s(2), cpus=16)
    # tensor parallel alone on a worker of one GPU (a preset for two, the endpoint left at one):
    # the fix is the endpoint's GPUs per worker, not a setting the user never set
    with pytest.raises(ConfigError) as info:
        ServeSpec.resolve(Settings(tensor_parallel_size=2), h200s(1), cpus=16)
    assert str(info.value).endswith(
        "needs 2 GPUs and this worker has 1; give each worker 2 GPUs (the endpoint's GPUs per "
        "worker), or lower TENSOR_PARALLEL_SIZE"
    )


def test_replicas_start_together_behind_one_server() -> None:
    spec = ServeSpec.resolve(Settings(vllm_split_start=True), h200s(2), cpus=32)
    argvs = launch_argvs(spec, 8000, rpc_port=8100)
    base = server_argv(spec, 8000)
    dp = ["--data-parallel-size", "2", "--data-parallel-address", "127.0.0.1"]
    dp += ["--data-parallel-rpc-port", "8100"]
    # one launcher starts both engine cores at once; they share the compile caches; the API
    # servers (two for 1.6 MP pages) feed both
    front = ["--api-server-count", "2"]
    # both through the fork launcher (VLLM_FORK_SERVER, the default): the engine cores and the
    # API servers are forked, not spawned
    forked = through_fork_launcher(base)
    assert argvs == {
        "server": [*forked, *dp, "--data-parallel-size-local", "0", *front],
        "engine": [*forked, *dp, "--data-parallel-size-local", "2", "--headless"],
    }
    assert base[base.index("--tensor-parallel-size") + 1] == "1"
    assert base[base.index("--max-num-seqs") + 1] == "256"  # per replica
    single = ServeSpec.resolve(Settings(vllm_split_start=False), h200s(2), cpus=32)
    assert launch_argvs(single, 8000)["server"][-4:] == ["--data-parallel-size", "2", *front]
    one = ServeSpec.resolve(Settings(vllm_split_start=False), h200s(1), cpus=32)
    assert "--data-parallel-size" not in launch_argvs(one, 8000)["server"]


def test_the_worker_keeps_every_replica_full(tmp_path: Path, loop, cpu_pool) -> None:
    engine = make_engine(Settings(engine="vllm", model_name="org/m"), gpu=h200s(2))
    assert (engine.replicas, engine.concurrency) == (2, 512)  # what the replicas batch
    assert engine.default_concurrency == 640  # and a quarter more waiting in the queue
    fake = FakeEngine(concurrency=engine.default_concurrency)
    fake.replicas = engine.replicas
    worker = new_worker(loop, make_settings(tmp_path), fake, cpu_pool)
    assert worker.engine_slots == 640  # pages in flight at the engine
    assert worker.jobs_at_once == 2 * Settings().job.max_concurrent_jobs


def test_the_planner_says_which_layout_fits(capsys) -> None:
    config = ROOT / "examples/qwen3-vl-32b-instruct.config.json"  # BF16: 66 GB of weights
    assert cli.main(["plan", str(config), "--gpus", "2", "--gpu-memory", "80", "--json"]) == 0
    found = [Layout(**x) for x in json.loads(capsys.readouterr().out)]
    assert [(x.data_parallel_size, x.tensor_parallel_size) for x in found] == [(2, 1), (1, 2)]
    split = found[1]
    assert split.fits and split.pages_per_replica > 32 and choose(found) == split
    awq = ROOT / "examples/qwen3-vl-32b-instruct-awq.config.json"
    assert cli.main(["plan", str(awq), "--gpus", "4", "--gpu-memory", "141"]) == 0
    out = capsys.readouterr().out
    assert "choose TENSOR_PARALLEL_SIZE=1" in out and "runs 4 replica(s)" in out


def test_the_planner_offers_and_takes_only_splits_the_models_heads_allow(capsys) -> None:
    # olmOCR 2 (Qwen2.5-VL 7B): 28 attention heads and 4 KV heads, which 8 GPUs cannot share out
    olmocr = ROOT / "examples/olmocr-2-7b-1025-fp8.config.json"
    assert cli.main(["plan", str(olmocr), "--gpus", "8", "--gpu-memory", "80", "--json"]) == 0
    found = [Layout(**x) for x in json.loads(capsys.readouterr().out)]
    assert [x.tensor_parallel_size for x in found] == [1, 2, 4]
    awq = str(ROOT / "examples/qwen3-vl-32b-instruct-awq.config.json")
    for args in (
        [awq, "--tensor-parallel-size", "3"],
        [str(olmocr), "--tensor-parallel-size", "8"],
    ):
        assert cli.main(["plan", *args]) == 2
        tp = args[-1]
        assert capsys.readouterr().err == (
            f"vlm-ocr plan: --tensor-parallel-size: {tp}: the model's heads do not split over "
            f"{tp} GPUs; accepted: {'1, 2, 4, 8' if args[0] == awq else '1, 2, 4'}\n"
        )
