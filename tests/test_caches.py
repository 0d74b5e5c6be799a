"""The compile caches on the network volume: one folder per key, the key changed by everything
that changes what is compiled; two workers starting at once on one volume never leave a broken
cache for either (`engines/vllm/caches.py`)."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from vlm_ocr.engines.gpu import GpuFacts
from vlm_ocr.engines.model_files import ModelFiles
from vlm_ocr.engines.vllm.argv import ServeSpec
from vlm_ocr.engines.vllm.caches import (
    CACHES,
    COMPLETE,
    STALE_BUILD_S,
    VolumeCache,
    cache_key,
)
from vlm_ocr.engines.vllm.logs import StartLog, summary
from vlm_ocr.engines.vllm.server import VllmServer
from vlm_ocr.settings import Settings

H200 = GpuFacts.parse("NVIDIA H200, 143771 MiB, 9.0")
H100 = GpuFacts.parse("NVIDIA H100 80GB HBM3, 81559 MiB, 9.0")
TWO_H200 = GpuFacts.parse("NVIDIA H200, 143771 MiB, 9.0\nNVIDIA H200, 143771 MiB, 9.0")


def key(
    gpu: GpuFacts = TWO_H200, version: str = "0.32.0", env: dict | None = None, **values
) -> str:
    return cache_key(ServeSpec.resolve(Settings(**values), gpu, cpus=16), version, env or {})


# Every setting that changes what vLLM compiles or tunes makes another key.
@pytest.mark.parametrize(
    "changed",
    [
        {"model_name": "allenai/olmOCR-2-7B-1025-FP8"},
        {"model_revision": "abc123"},
        {"max_num_seqs": 128},
        {"max_num_batched_tokens": 32768},
        {"max_model_len": 4096},
        {"kv_cache_dtype": "auto"},
        {"max_pixels": 2_000_000},
        {"tensor_parallel_size": 2},
        {"data_parallel_size": 1},
        {"cuda_graph_sizes": "1,8,64"},
        {"start_mode": "fast"},
        {"enforce_eager": True},
        {"gdn_prefill_backend": "flashinfer"},
        {"gpu_memory_utilization": 0.8},
        {"vllm_extra_args": "--seed 1"},
    ],
)
def test_a_setting_that_changes_compiled_code_changes_the_key(changed: dict) -> None:
    assert key(**changed) != key()


def test_the_gpu_the_vllm_version_and_vllms_variables_change_the_key() -> None:
    assert key(H100) != key(H200) != key(TWO_H200)
    assert key(version="0.26.0") != key()
    assert key(env={"VLLM_USE_DEEP_GEMM": "1"}) != key()
    # what only says where things are, or how the worker is reached, does not
    assert key(env={"VLLM_CACHE_ROOT": "/x", "VLLM_LOGGING_LEVEL": "DEBUG", "PATH": "/y"}) == key()
    assert key(vllm_port=8123) == key() and key(api_server_count=6) == key()
    assert key().startswith("Qwen3-VL-32B-Instruct-AWQ-")


def test_every_cache_points_under_the_keys_folder(tmp_path: Path) -> None:
    cache = VolumeCache(tmp_path / "vllm-cache", key())
    folder = cache.prepare()
    env = cache.env(folder)
    assert set(CACHES) <= set(env) and env["TRITON_CACHE_AUTOTUNING"] == "1"
    assert all(Path(env[name]).parent == folder for name in CACHES)
    # built in place (vLLM writes absolute paths into its index), not yet whole
    assert folder == cache.published and not cache.whole


def test_a_build_is_marked_whole_once_the_engine_is_warm_and_reused_after(tmp_path: Path) -> None:
    root = tmp_path / "vllm-cache"
    first = VolumeCache(root, "k")
    built = first.prepare()
    (built / "vllm").mkdir()
    (built / "vllm" / "index.py").write_text("{}")
    assert not first.whole  # no reader takes a build in progress
    assert first.publish() == "built and published" and first.whole
    second = VolumeCache(root, "k")
    assert second.prepare() == root / "k" and second.publish() == "reused"
    second.discard()  # a reader's stop leaves the folder
    assert (root / "k" / "vllm" / "index.py").read_text() == "{}"


def test_a_start_beside_a_build_in_progress_builds_privately_and_cleans_up(tmp_path: Path) -> None:
    root = tmp_path / "vllm-cache"
    builder, beside = VolumeCache(root, "k"), VolumeCache(root, "k")
    builder.prepare()
    own = beside.prepare()
    assert own.name.startswith("k.private-") and own != builder.published
    assert beside.publish() == "built privately (another worker was building the same key)"
    beside.discard()
    assert not own.exists() and builder.publish() == "built and published"


def test_a_failed_start_leaves_no_build_and_stale_builds_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "vllm-cache"
    failed = VolumeCache(root, "k")
    failed.prepare()
    failed.discard()
    assert list(root.iterdir()) == []  # the next start of the key may build it
    stale = root / "dead-key"  # a worker died building it
    stale.mkdir()
    old = time.time() - STALE_BUILD_S - 60
    os.utime(stale, (old, old))
    VolumeCache(root, "other").prepare()
    assert not stale.exists()


def build_and_publish(root: str, name: str, files: int, out: multiprocessing.Queue[str]) -> None:
    """A worker's start, as the caches see it: find or build the folder, write what a compile
    writes (slowly, a file at a time), mark it whole, stop."""
    cache = VolumeCache(Path(root), "same-key")
    folder = cache.prepare()
    if not cache.whole:
        for n in range(files):
            (folder / f"kernel-{n}").write_text(json.dumps({"by": name, "n": n}))
            time.sleep(0.002)
        (folder / "index.json").write_text(json.dumps({"by": name, "files": files}))
    out.put(cache.publish())
    cache.discard()


def read_while_others_build(root: str, until: float, out: multiprocessing.Queue[str]) -> None:
    """A third worker starting meanwhile: whatever it finds marked whole must be whole."""
    published = Path(root) / "same-key"
    seen = "nothing published"
    while time.time() < until:
        if (published / COMPLETE).is_file():
            index = json.loads((published / "index.json").read_text())
            kernels = sorted(published.glob("kernel-*"))
            by = {json.loads(k.read_text())["by"] for k in kernels}
            whole = len(kernels) == index["files"] and by == {index["by"]}
            seen = "whole" if whole else f"broken: {len(kernels)} kernels, by {by}"
            if not whole:
                break
        time.sleep(0.001)
    out.put(seen)


def test_two_workers_starting_at_once_never_leave_a_broken_cache(tmp_path: Path) -> None:
    root = str(tmp_path / "vllm-cache")
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[str] = ctx.Queue()
    reads: multiprocessing.Queue[str] = ctx.Queue()
    reader = ctx.Process(target=read_while_others_build, args=(root, time.time() + 20, reads))
    builders = [ctx.Process(target=build_and_publish, args=(root, n, 200, out)) for n in "ab"]
    reader.start()
    for b in builders:
        b.start()
    for b in builders:
        b.join(60)
    outcomes = sorted(out.get(timeout=10) for _ in builders)
    assert outcomes[0] == "built and published"
    assert outcomes[1] in ("built privately (another worker was building the same key)", "reused")
    reader.join(60)
    assert reads.get(timeout=10) == "whole"
    # one folder for the key, whole, and no private build left behind
    assert [p.name for p in Path(root).iterdir()] == ["same-key"]
    again: multiprocessing.Queue[str] = ctx.Queue()
    build_and_publish(root, "c", 200, again)
    assert again.get(timeout=10) == "reused"


# vLLM's own lines (0.26's and 0.32's wording), as a start logs them
START_LOG = [
    "INFO 12-01 10:00:01 [api_server.py:1] vLLM API server version 0.32.0",
    "INFO 12-01 10:00:05 [serve.py:1] Launching 1 data parallel engine(s) in headless mode, with "
    "head node address tcp://127.0.0.1:22144.",
    "INFO 12-01 10:00:09 [core.py:1] Initializing a V1 LLM engine (v0.32.0) with config: ...",
    "INFO 12-01 10:00:15 [gpu_model_runner.py:1] Starting to load model /models/chandra...",
    "INFO 12-01 10:00:20 [default_loader.py:1] Loading weights took 3.21 seconds",
    "INFO 12-01 10:00:20 [gpu_model_runner.py:1] Model loading took 8.1 GiB memory and 4.512 "
    "seconds",
    "INFO 12-01 10:00:30 [backends.py:1] Dynamo bytecode transform time: 7.43 s",
    "INFO 12-01 10:00:31 [backends.py:1] Compiling a graph for compile range (1, 16384) takes "
    "30.12 s",
    "INFO 12-01 10:01:02 [monitor.py:1] torch.compile took 41.27 s in total",
    "INFO 12-01 10:01:10 [monitor.py:1] Initial profiling/warmup run took 6.05 s",
    "INFO 12-01 10:01:20 [gpu_model_runner.py:1] Graph capturing finished in 9 secs, took 0.50 GiB",
    "INFO 12-01 10:01:21 [core.py:1] init engine (profile, create kv cache, warmup model) took "
    "61.03 s (compilation: 41.27 s)",
    "INFO:     Application startup complete.",
]


def test_the_cold_start_is_taken_apart_from_vllms_log() -> None:
    start = StartLog()
    for n, line in enumerate(START_LOG):
        start.line(line, since_spawn_s=10.0 * (n + 1))
    facts = start.facts()
    assert {k: facts[k] for k in start.phases} == {
        "first_log_line_at_s": 10.0,
        "engine_config_at_s": 20.0,
        "engine_core_at_s": 30.0,
        "model_load_at_s": 40.0,
        "weights_s": 3.21,
        "model_load_s": 4.512,
        "dynamo_s": 7.43,
        "torch_compile_s": 41.27,
        "profiling_s": 6.05,
        "cuda_graphs_s": 9.0,
        "engine_init_s": 61.03,
        "engine_ready_at_s": 120.0,
        "api_server_ready_at_s": 130.0,
    }
    # what vLLM does not time, between its lines: engine init began at 120 - 61.03 s
    assert facts["untimed"] == {
        "engine_config_s": 10.0,
        "engine_core_start_s": 10.0,
        "worker_init_s": 10.0,
        "before_engine_init_s": round(120 - 61.03 - 40 - 4.512, 2),
        "api_servers_after_engine_s": 10.0,
    }
    assert facts["compile_cache"] == "miss"
    assert "Triton autotuning of the GDN layers (inside the profiling run)" in facts["not_logged"]
    line = start.summary()
    assert "torch.compile 41.27 s" in line and "compile cache miss" in line
    assert "not timed by vLLM: the engine launcher's config 10 s" in line
    assert summary(facts) == line  # the bench prints the engine facts' figures the same way
    # vLLM 0.26 on the H200 (olmOCR 2, a second start) logged neither the engine core's first
    # line nor the model load's beginning: one stretch from the first line to engine init
    h200 = StartLog()
    for text, at in (
        ("INFO [api_server.py] vLLM API server version 0.26.0", 32.89),
        ("INFO [gpu_model_runner.py] Model loading took 8.9 GiB memory and 4.28017 seconds", 50),
        ("INFO [core.py] init engine (profile, create kv cache, warmup model) took 14.34 s", 81.36),
        ("INFO:     Application startup complete.", 89.38),
    ):
        h200.line(text, at)
    assert h200.untimed() == {"before_engine_init_s": 29.85, "api_servers_after_engine_s": 8.02}
    warm = StartLog()
    warm.line(
        "Directly load the compiled graph(s) for compile range (1, 16384) from the cache, "
        "took 2.981 s",
        30.0,
    )
    warm.line("torch.compile takes 3.05 s in total", 31.0)  # 0.26's wording
    assert warm.facts()["compile_cache"] == "hit" and warm.phases["torch_compile_s"] == 3.05


def test_the_server_points_its_caches_at_the_volume_and_publishes_once_warm(
    loop, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    spec = ServeSpec.resolve(Settings(), TWO_H200, cpus=16)
    files = ModelFiles(Settings().model, volume=tmp_path)

    def started() -> VllmServer:
        server = VllmServer(spec, files)
        loop.run(server._prepare_caches())
        return server

    first = started()
    assert first.facts["caches"]["state"] == "building"
    root = Path(first.cache_env["VLLM_CACHE_ROOT"]).parent
    assert root.parent == tmp_path / "vllm-cache" and root.name.startswith("Qwen3-VL-32B")
    assert first.child_env()["TRITON_CACHE_DIR"] == str(root / "triton")
    assert loop.run(first.ready())["caches"]["state"] == "built and published"
    second = started()
    assert second.facts["caches"]["state"] == "reused" and second.cache_env == first.cache_env
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "mine"))  # the user's own: left alone
    assert started().facts["caches"] == {"state": "as VLLM_CACHE_ROOT and the others were set"}
