"""The compile caches on the network volume: one folder per key, the key changed by everything
that changes what is compiled; two workers starting at once on one volume never leave a broken
cache for either (`engines/vllm/caches.py`)."""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vlm_ocr.engines.families import FAMILIES
from vlm_ocr.engines.gpu import GpuFacts
from vlm_ocr.engines.model_files import ModelFiles
from vlm_ocr.engines.vllm.argv import ServeSpec
from vlm_ocr.engines.vllm.caches import (
    CACHES,
    COMPLETE,
    STALE_BUILD_S,
    VolumeCache,
    cache_key,
    seed,
    vllm_cache_root,
)
from vlm_ocr.engines.vllm.logs import (
    AUTOTUNE_NOTHING,
    AUTOTUNE_OFF,
    AUTOTUNE_READ,
    AUTOTUNE_TUNED,
    NOTHING_COMPILED,
    RETRACED,
    StartLog,
    autotune_verdict,
    redone_on_warm_caches,
    summary,
)
from vlm_ocr.engines.vllm.server import VllmServer, _autotune_files
from vlm_ocr.settings import Settings

from .support import ROOT

H200 = GpuFacts.parse("NVIDIA H200, 143771 MiB, 9.0")
H100 = GpuFacts.parse("NVIDIA H100 80GB HBM3, 81559 MiB, 9.0")
TWO_H200 = GpuFacts.parse("NVIDIA H200, 143771 MiB, 9.0\nNVIDIA H200, 143771 MiB, 9.0")


def key(
    gpu: GpuFacts = TWO_H200,
    version: str = "0.32.0",
    env: dict | None = None,
    family: str | None = None,
    **values,
) -> str:
    found = FAMILIES[family]() if family else None
    spec = ServeSpec.resolve(Settings(**values), gpu, found, cpus=16)
    return cache_key(spec, version, env or {})


# Every setting that changes what vLLM compiles or tunes, or the memory its profiling measures
# (and so the KV cache size a later start reuses), makes another key.
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
        {"start_mode": "throughput"},  # the default model's family starts `fast`
        {"triton_autotune": True},  # kernels tuned or not
        {"enforce_eager": True},
        {"gdn_prefill_backend": "flashinfer"},
        {"gpu_memory_utilization": 0.8},
        {"gpu_memory_utilization": 0.91},
        {"vllm_extra_args": "--seed 1"},
        {"vllm_extra_args": "--kv-cache-memory-bytes 64G"},
        {"family": "chandra"},  # the family's own flags
        {"family": "lighton-ocr"},
    ],
)
def test_a_setting_that_changes_compiled_code_or_memory_changes_the_key(changed: dict) -> None:
    assert key(**changed) != key()


def test_the_encoders_graphs_change_the_key_where_they_are_captured() -> None:
    # captured at `throughput` only (and their memory with them); `fast` leaves them out
    compiled = {"start_mode": "throughput"}
    assert key(**compiled, encoder_cuda_graphs=True) != key(**compiled)
    assert key(encoder_cuda_graphs=True) == key()


# Settings that change neither what is compiled nor the engine's memory: the same folder.
@pytest.mark.parametrize(
    "unrelated",
    [
        {"vllm_port": 8123},
        {"api_server_count": 6},
        {"renderer_num_workers": 4},
        {"vllm_split_start": False},
        {"vllm_startup_timeout_s": 100.0},
        {"vllm_python": "/opt/other/bin/python"},
        {"vllm_cache_seed": "/elsewhere"},
        {"max_tokens": 100},
        {"max_attempts": 2},
        {"max_concurrent_pages": 10},
        {"render_processes": 3},
        {"second_opinion": True},
    ],
)
def test_a_setting_that_changes_neither_keeps_the_key(unrelated: dict) -> None:
    assert key(**unrelated) == key()


def test_the_gpu_the_vllm_version_and_vllms_variables_change_the_key() -> None:
    assert key(H100) != key(H200) != key(TWO_H200)
    assert key(version="0.26.0") != key()
    assert key(env={"VLLM_USE_DEEP_GEMM": "1"}) != key()
    # the allocator's settings change the memory the engine takes
    assert key(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}) != key()
    # what only says where things are, how much is logged, whether a failed load fails the start,
    # whether the memory measured is kept, or the worker's own settings: the same key
    same = {
        "VLLM_CACHE_ROOT": "/x",
        "VLLM_LOGGING_LEVEL": "DEBUG",
        "VLLM_FORCE_AOT_LOAD": "1",
        "VLLM_ENABLE_STARTUP_PLAN": "0",
        "VLLM_PYTHON": "/opt/venv/bin/python",
        "VLLM_SPLIT_START": "false",
        "VLLM_STARTUP_TIMEOUT_S": "100",
        "VLLM_CACHE_SEED": "/seed",
        "PATH": "/y",
    }
    assert key(env=same) == key()
    assert key().startswith("Qwen3-VL-32B-Instruct-AWQ-")
    # the front ends sized for another vLLM are no part of it: the version is, on its own (at
    # `throughput`, whose flags are the same on both; `fast` passes one more from 0.32 on)
    spec = ServeSpec.resolve(Settings(start_mode="throughput"), TWO_H200, cpus=16)
    assert cache_key(spec.on_vllm("0.26.0"), "0.32.0", {}) == cache_key(spec, "0.32.0", {})


def test_every_cache_points_under_the_keys_folder(tmp_path: Path) -> None:
    cache = VolumeCache(tmp_path / "vllm-cache", key())
    folder = cache.prepare()
    env = cache.env(folder)
    assert set(CACHES) <= set(env) and env["TRITON_CACHE_AUTOTUNING"] == "1"
    assert all(Path(env[name]).parent == folder for name in CACHES)
    # the memory profiling's result is kept in the key's folder, and used by the next start
    assert env["VLLM_ENABLE_STARTUP_PLAN"] == "1"
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


def read_while_others_build(root: str, done: Any, out: multiprocessing.Queue[str]) -> None:
    """A third worker starting meanwhile: whatever it finds marked whole must be whole, while
    the others build and once they are done."""
    published = Path(root) / "same-key"
    seen, last = "nothing published", False
    while not last:
        last = done.is_set()
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


def race(
    root: str, reader: Callable[..., None], racer: Callable[..., None], args: list[tuple[Any, ...]]
) -> tuple[list[str], str]:
    """Processes running `racer(root, *args, out)` at once while `reader(root, done, seen)`
    watches the folder until they end: their outcomes, sorted, and what the reader saw."""
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[str] = ctx.Queue()
    seen: multiprocessing.Queue[str] = ctx.Queue()
    done = ctx.Event()
    watcher = ctx.Process(target=reader, args=(root, done, seen))
    racers = [ctx.Process(target=racer, args=(root, *a, out)) for a in args]
    watcher.start()
    for r in racers:
        r.start()
    for r in racers:
        r.join(120)
    done.set()
    outcomes = sorted(out.get(timeout=10) for _ in racers)
    watcher.join(60)
    return outcomes, seen.get(timeout=10)


def test_two_workers_starting_at_once_never_leave_a_broken_cache(tmp_path: Path) -> None:
    root = str(tmp_path / "vllm-cache")
    outcomes, seen = race(
        root, read_while_others_build, build_and_publish, [("a", 200), ("b", 200)]
    )
    assert outcomes[0] == "built and published"
    assert outcomes[1] in ("built privately (another worker was building the same key)", "reused")
    assert seen == "whole"
    # one folder for the key, whole, and no private build left behind
    assert [p.name for p in Path(root).iterdir()] == ["same-key"]
    again: multiprocessing.Queue[str] = multiprocessing.get_context("spawn").Queue()
    build_and_publish(root, "c", 200, again)
    assert again.get(timeout=10) == "reused"


MODELINFO = "vllm-model_executor-models-qwen3_vl-Qwen3VLForConditionalGeneration.json"


def image_seed(root: Path, size: int = 1) -> Path:
    """A seed as the image's build leaves it: vLLM's model-class inspection, one file a class."""
    infos = root / "modelinfos"
    infos.mkdir(parents=True)
    body = {"hash": "0" * 32, "modelinfo": {"architecture": "Qwen3VL", "pad": "x" * size}}
    (infos / MODELINFO).write_text(json.dumps(body))
    return root


def test_a_new_cache_folder_gets_the_images_model_inspection(tmp_path: Path) -> None:
    source = image_seed(tmp_path / "seed")
    cache = VolumeCache(tmp_path / "vllm-cache", "k", seed_from=source)
    folder = cache.prepare()
    assert cache.seeded == [f"modelinfos/{MODELINFO}"]
    assert (folder / "vllm" / "modelinfos" / MODELINFO).read_text() == (
        source / "modelinfos" / MODELINFO
    ).read_text()
    cache.publish()
    # a whole folder keeps what vLLM wrote itself; one made before the seed existed gets it
    (folder / "vllm" / "modelinfos" / MODELINFO).write_text("vLLM's own")
    (folder / "vllm" / "modelinfos" / "other.json").unlink(missing_ok=True)
    again = VolumeCache(tmp_path / "vllm-cache", "k", seed_from=source)
    assert again.prepare() == folder and again.seeded == []
    assert (folder / "vllm" / "modelinfos" / MODELINFO).read_text() == "vLLM's own"
    older = tmp_path / "older"
    assert seed(source, older / "vllm") == [f"modelinfos/{MODELINFO}"]
    # no seed in the image (a host without one, the CPU tests): nothing copied, nothing made
    assert seed(tmp_path / "none", tmp_path / "empty") == [] and not (tmp_path / "empty").exists()
    assert seed(None, tmp_path / "empty") == []
    # a cache folder that cannot be written (a read-only home): nothing copied, the start goes on
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder would be")
    assert seed(source, blocked / "vllm") == []


def test_the_images_seed_covers_every_family() -> None:
    """Both images run vLLM's inspection at build over the families' configs in examples/ (one
    each), into the folder the worker copies from by default."""
    found = importlib.util.spec_from_file_location("seed", ROOT / "builder/seed_vllm_cache.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    inspected = set(module.architectures([ROOT / "examples"]))
    for name, family in FAMILIES.items():
        assert family.architectures & inspected, name
    out = Settings().vllm.vllm_cache_seed
    for dockerfile in ("Dockerfile", ".runpod/Dockerfile"):
        text = (ROOT / dockerfile).read_text()
        assert "COPY examples/*.config.json /tmp/seed-configs/" in text, dockerfile
        assert f"seed_vllm_cache.py --out {out}" in text, dockerfile
    assert "!examples/*.config.json" in (ROOT / ".dockerignore").read_text()


def test_vllms_cache_root_follows_its_own_rule(tmp_path: Path) -> None:
    assert vllm_cache_root({"VLLM_CACHE_ROOT": str(tmp_path)}) == tmp_path
    assert vllm_cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "vllm"
    assert vllm_cache_root({}) == Path("~/.cache/vllm").expanduser()


def seed_and_publish(root: str, source: str, out: multiprocessing.Queue[str]) -> None:
    """A worker's start on a volume with the image's seed."""
    cache = VolumeCache(Path(root), "same-key", seed_from=Path(source))
    cache.prepare()
    out.put(cache.publish())
    cache.discard()


def read_seeded_entries(root: str, done: Any, out: multiprocessing.Queue[str]) -> None:
    """Every model-inspection entry a reader (vLLM in another worker) finds must be whole,
    while the workers seed and once they are done."""
    seen, last = "nothing seen", False
    while not last:
        last = done.is_set()
        for entry in Path(root).glob(f"*/vllm/modelinfos/{MODELINFO}"):
            try:
                json.loads(entry.read_text())
                seen = "whole"
            except ValueError:
                out.put(f"broken: {entry}")
                return
            except FileNotFoundError:  # a private folder removed meanwhile
                continue
    out.put(seen)


def test_two_workers_seeding_one_volume_at_once_leave_whole_entries(tmp_path: Path) -> None:
    source = str(image_seed(tmp_path / "seed", size=2_000_000))  # large: a copy takes time
    root = str(tmp_path / "vllm-cache")
    outcomes, seen = race(root, read_seeded_entries, seed_and_publish, [(source,)] * 3)
    assert outcomes.count("built and published") == 1
    assert seen == "whole"
    entry = Path(root) / "same-key" / "vllm" / "modelinfos" / MODELINFO
    assert json.loads(entry.read_text())["modelinfo"]["architecture"] == "Qwen3VL"
    assert not list(entry.parent.glob(".*.part"))  # no copy left half-way


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
    "INFO 12-01 10:01:02 [decorators.py:744] saved AOT compiled function to /runpod-volume/"
    "vllm-cache/chandra-ocr-2-0a1b2c3d4e5f6a7b/vllm/torch_compile_cache/torch_aot_compile/"
    "5d1c0e/rank_0_0/model",
    "INFO 12-01 10:01:10 [monitor.py:1] Initial profiling/warmup run took 6.05 s",
    "INFO 12-01 10:01:14 [gpu_worker.py:760] Available KV cache memory: 104.02 GiB",
    "INFO 12-01 10:01:20 [gpu_model_runner.py:1] Graph capturing finished in 9 secs, took 0.50 GiB",
    "INFO 12-01 10:01:21 [startup_plan.py:189] Saved startup plan to /runpod-volume/vllm-cache/"
    "chandra-ocr-2-0a1b2c3d4e5f6a7b/vllm/startup_plan/startup_plan_9f3e2a1b0c4d5e6f.json",
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
        "profiling_done_at_s": 110.0,
        "kv_cache_sized_at_s": 120.0,
        "cuda_graphs_s": 9.0,
        "engine_init_s": 61.03,
        "engine_ready_at_s": 150.0,
        "api_server_ready_at_s": 160.0,
    }
    # what vLLM does not time, between its lines: engine init began at 150 - 61.03 s
    assert facts["untimed"] == {
        "engine_config_s": 10.0,
        "engine_core_start_s": 10.0,
        "worker_init_s": 10.0,
        "memory_profiling_s": 10.0,
        "before_engine_init_s": round(150 - 61.03 - 40 - 4.512, 2),
        "api_servers_after_engine_s": 10.0,
    }
    assert facts["compile_cache"] == "miss"
    assert facts["memory_profile"] == "measured, kept for the next start"
    assert "Triton autotuning of the GDN layers (inside the profiling run)" in facts["not_logged"]
    line = start.summary()
    assert "torch.compile 41.27 s" in line and "compile cache miss" in line
    assert "KV cache memory measured, kept for the next start" in line
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


VOLUME_KEY = "/runpod-volume/vllm-cache/olmOCR-2-7B-1025-FP8-0a1b2c3d4e5f6a7b/vllm"
AOT_MODEL = f"{VOLUME_KEY}/torch_compile_cache/torch_aot_compile/5d1c0e/rank_0_0/model"
AUTOTUNE_FILE = f"{VOLUME_KEY}/flashinfer_autotune_cache/0.6.11/90a/3e5b/autotune_configs.json"
CORE = "(EngineCore_DP0 pid=2811) INFO 12-01 11:02:13"
# A second worker on the volume, vLLM 0.26 (the format strings of its decorators.py,
# startup_plan.py, gpu_worker.py and kernel_warmup.py): the compiled model loaded whole (no
# dynamo), the memory measured by the first start applied, FlashInfer's results file named.
WARM_026 = [
    f"{CORE} [decorators.py:312] Directly load AOT compilation from path {AOT_MODEL}",
    f"{CORE} [monitor.py:48] torch.compile took 3.86 s in total",
    f"{CORE} [monitor.py:82] Initial profiling/warmup run took 0.61 s",
    f"{CORE} [startup_plan.py:153] Applying persisted startup plan (fingerprint 9f3e2a1b0c4d5e6f): "
    "kv_cache_memory_bytes=121943670784 (113.57 GiB), recorded free-memory baseline 139.21 GiB, "
    "current 139.21 GiB. Memory profiling will be skipped.",
    f"{CORE} [gpu_worker.py:475] Initial free memory 139.21 GiB, reserved 113.57 GiB memory for "
    "KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This "
    "does not respect the gpu_memory_utilization config.",
    f"{CORE} [kernel_warmup.py:227] Using FlashInfer autotune cache file: {AUTOTUNE_FILE}",
    f"{CORE} [kernel_warmup.py:268] FlashInfer autotune cache loaded on rank 0 from "
    f"{AUTOTUNE_FILE}.",
]
# The same start on a folder whose compiled model no longer loads (vLLM 0.32's wording).
STALE_032 = [
    f"(EngineCore pid=90) WARNING 12-03 09:00:01 [decorators.py:334] Compiling model again due "
    f"to a load failure from {AOT_MODEL}, reason: Source code has changed since the last "
    "compilation. Recompiling the model.",
    "(EngineCore pid=90) INFO 12-03 09:00:09 [backends.py:1167] Dynamo bytecode transform time: "
    "7.02 s",
    "(EngineCore pid=90) INFO 12-03 09:00:40 [backends.py:399] Compiling a graph for compile "
    "range (1, 16384) takes 30.50 s",
    "(EngineCore pid=90) INFO 12-03 09:00:52 [startup_plan.py:120] Startup plan not applied: "
    "current free memory (138.90 GiB) is below the recorded baseline (139.21 GiB); falling back "
    "to full memory profiling.",
    "(EngineCore pid=90) INFO 12-03 09:00:55 [gpu_worker.py:760] Available KV cache memory: "
    "113.20 GiB",
    f"(EngineCore pid=90) INFO 12-03 09:00:58 [kernel_warmup.py:460] Using FlashInfer autotune "
    f"cache file: {AUTOTUNE_FILE.replace('.json', '_dp0_rank0.json')}",
]


def read(lines: list[str]) -> StartLog:
    start = StartLog()
    for n, line in enumerate(lines):
        start.line(line, since_spawn_s=float(n))
    return start


def test_a_warm_start_that_loaded_its_compiled_model_and_memory_says_so() -> None:
    facts = read(WARM_026).facts()
    assert facts["compile_cache"] == "hit" and "dynamo_s" not in facts
    assert facts["torch_compile_s"] == 3.86
    assert facts["memory_profile"] == "reused"
    assert redone_on_warm_caches(facts) == []


# vLLM 0.32 compiling the vision encoder too (`compile_mm_encoder`): each module tagged, the
# vision block's compiled function loaded again for each of its layers.
ENCODER_COMPILED_032 = [
    "(EngineCore pid=7) INFO 12-07 01:23:00 [monitor.py:62] [Qwen3_VisionPatchEmbed] "
    "torch.compile took 1.58 s in total",
    "(EngineCore pid=7) INFO 12-07 01:23:06 [monitor.py:62] [Qwen3_VisionBlock] torch.compile "
    "took 4.96 s in total",
    "(EngineCore pid=7) INFO 12-07 01:23:06 [monitor.py:62] [Qwen3_VisionBlock] torch.compile "
    "took 0.06 s in total",
    "(EngineCore pid=7) INFO 12-07 01:23:12 [backends.py:1166] [backbone] Dynamo bytecode "
    "transform time: 4.46 s",
    "(EngineCore pid=7) INFO 12-07 01:23:27 [monitor.py:62] [backbone] torch.compile took 19.28 "
    "s in total",
]


def test_compiles_of_several_modules_are_summed_each_once() -> None:
    phases = read(ENCODER_COMPILED_032).phases
    assert phases["torch_compile_s"] == round(1.58 + 4.96 + 19.28, 2)
    assert phases["dynamo_s"] == 4.46
    # an untagged line (vLLM 0.26) said again by another replica counts once
    twice = read(WARM_026 + WARM_026).phases
    assert twice["torch_compile_s"] == 3.86


def test_a_warm_start_that_had_to_compile_or_profile_again_says_why() -> None:
    facts = read(STALE_032).facts()
    assert facts["compile_cache"] == "miss"
    assert facts["compile_cache_load_failure"].startswith("Source code has changed")
    assert facts["memory_profile"].startswith("measured (a kept measurement was not applied")
    assert redone_on_warm_caches(facts) == [
        "torch.compile (miss: Source code has changed since the last compilation. Recompiling "
        "the model.)",
        "memory profiling (measured (a kept measurement was not applied: less free GPU memory "
        "than when it was made))",
    ]
    # dynamo traced again, each graph loaded from the per-graph cache: not a whole hit
    retraced = read(
        [
            "INFO [backends.py:1156] Dynamo bytecode transform time: 1.75 s",
            "INFO [backends.py:293] Directly load the compiled graph(s) for compile range "
            "(1, 16384) from the cache, took 2.981 s",
        ]
    ).facts()
    assert retraced["compile_cache"] == RETRACED
    assert redone_on_warm_caches(retraced) == [
        f"torch.compile ({RETRACED}: no compiled model found for it)"
    ]
    # nothing compiled (START_MODE=fast, the CPU build's eager mode): nothing to redo
    assert read(["INFO:     Application startup complete."]).facts()["compile_cache"] == (
        NOTHING_COMPILED
    )
    saved = read(
        [
            "WARNING [decorators.py:714] unable to save AOT compiled function to "
            f"{AOT_MODEL}: disk full"
        ]
    ).facts()
    assert saved["compile_cache_save_failure"] == "disk full"
    # a compiled model that fails to load is compiled again, whatever else the log says (vLLM's
    # CPU build compiles with its eager backend and logs no graph of it)
    cpu = read(
        [
            "(EngineCore pid=8842) WARNING 12-02 05:20:01 [decorators.py:334] Compiling model "
            f"again due to a load failure from {AOT_MODEL}, reason: 'function' object has no "
            "attribute 'finalize_loading'"
        ]
    ).facts()
    assert cpu["compile_cache"] == "miss"


@pytest.mark.parametrize(
    ("lines", "before", "after", "verdict"),
    [
        # 0.26 and 0.32 name the file; the file says what happened
        (WARM_026, True, True, AUTOTUNE_READ),
        (WARM_026, False, True, AUTOTUNE_TUNED),  # 0.26 says "cache loaded" on a fresh start too
        (STALE_032, False, False, AUTOTUNE_NOTHING),  # 0.32 writes nothing when nothing tuned
        (
            [
                f"{CORE} [kernel_warmup.py:227] Using FlashInfer autotune cache file: "
                f"{AUTOTUNE_FILE}",
                f"{CORE} [kernel_warmup.py:258] No FlashInfer autotune cache entries found."
                "Falling back to default tactics.",
            ],
            False,
            False,
            AUTOTUNE_NOTHING,
        ),
        (
            ["INFO [kernel_warmup.py:119] Skipping FlashInfer autotune because it is disabled."],
            False,
            False,
            AUTOTUNE_OFF,
        ),  # START_MODE=fast (-O0)
        (["INFO:     Application startup complete."], False, False, None),  # before Hopper
    ],
)
def test_flashinfer_autotuning_is_told_by_its_results_file(
    lines: list[str], before: bool, after: bool, verdict: str | None
) -> None:
    start = read(lines)
    found = autotune_verdict(
        start.autotune_file, start.autotune_off, there_before=before, there_now=after
    )
    assert found == verdict


def test_a_server_on_reused_caches_says_what_it_did_again(tmp_path: Path) -> None:
    """The server looks at FlashInfer's results file before and after the start, and on a key
    folder found whole names in the engine facts what the caches should have spared."""
    spec = ServeSpec.resolve(Settings(), TWO_H200, cpus=16)
    server = VllmServer(spec, ModelFiles(Settings().model, volume=tmp_path))
    root = tmp_path / "vllm"
    results = root / "flashinfer_autotune_cache" / "0.6.11" / "90a" / "autotune_configs.json"
    results.parent.mkdir(parents=True)
    results.write_text("{}")  # an earlier start's
    server._autotune_before = _autotune_files({"VLLM_CACHE_ROOT": str(root)})
    server.caches = {"state": "reused"}
    for line in [*STALE_032[:3], f"INFO Using FlashInfer autotune cache file: {results}"]:
        server.start_log.line(line, 1.0)
    facts = server._cold_start()
    assert facts["flashinfer_autotune"] == AUTOTUNE_READ
    assert facts["redone_on_warm_caches"] == [
        "torch.compile (miss: Source code has changed since the last compilation. Recompiling "
        "the model.)"
    ]
    assert "on warm caches, done again: torch.compile" in summary(facts)
    # a folder this start built: compiling is what it had to do
    server.caches = {"state": "building"}
    assert "redone_on_warm_caches" not in server._cold_start()


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
    assert first.caches["state"] == "building"
    root = Path(first.cache_env["VLLM_CACHE_ROOT"]).parent
    assert root.parent == tmp_path / "vllm-cache" and root.name.startswith("Qwen3-VL-32B")
    assert first.child_env()["TRITON_CACHE_DIR"] == str(root / "triton")
    assert first.child_env()["VLLM_TRITON_FORCE_FIRST_CONFIG"] == "1"  # TRITON_AUTOTUNE=false
    assert first.child_env()["HUMMING_DISABLE_PARALLEL_BUILD"] == "1"
    monkeypatch.setenv("VLLM_NO_USAGE_STATS", "0")  # a user who reports usage to vLLM: as set
    assert first.child_env()["VLLM_NO_USAGE_STATS"] == "0"
    monkeypatch.delenv("VLLM_NO_USAGE_STATS")
    assert first.child_env()["VLLM_NO_USAGE_STATS"] == "1"
    assert loop.run(first.ready())["state"] == "built and published" == first.caches["state"]
    second = started()
    assert second.caches["state"] == "reused" and second.cache_env == first.cache_env
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "mine"))  # the user's own: left alone
    assert started().caches == {"state": "as VLLM_CACHE_ROOT and the others were set"}


def test_what_the_images_seed_added_is_still_said_once_the_caches_are_published(
    loop, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    seed_dir = tmp_path / "seed" / "modelinfos"
    seed_dir.mkdir(parents=True)
    (seed_dir / "vllm-model_executor-models-x-X.json").write_text("{}")
    (tmp_path / "volume").mkdir()
    settings = Settings(vllm_cache_seed=str(tmp_path / "seed"))
    server = VllmServer(
        ServeSpec.resolve(settings, TWO_H200, cpus=16),
        ModelFiles(settings.model, volume=tmp_path / "volume"),
    )
    loop.run(server._prepare_caches())
    seeded = ["modelinfos/vllm-model_executor-models-x-X.json"]
    assert server.caches["seeded"] == seeded
    folder = server.caches["folder"]
    assert loop.run(server.ready()) == {
        "state": "built and published",
        "folder": folder,
        "seeded": seeded,
    }
