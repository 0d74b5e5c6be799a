"""The serve line of every model in `examples/` pins the flags its family's defaults choose
(`vlm-ocr plan CONFIG --serve-line`, as a user types it, on one H200-sized GPU and 16 CPUs):
the batched-token budget, the API servers, prefix caching, the multimodal processor's cache,
the GDN prefill backend, the KV-cache dtype, the sequences, the context, the page's limits,
the start mode.

The values are read from where they are declared, never copied here: the family's class (an
attribute of that name, where the family declares one, and its own `serve_args`, which must
win), else the setting's declared default, else the worker's rule for the GPU and the CPUs. A
value chosen again after a GPU run changes in one place, and this test follows it."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

import pytest

from vlm_ocr.cli import main as cli
from vlm_ocr.engines.families import Family, detect
from vlm_ocr.engines.vllm import argv as serve_argv
from vlm_ocr.settings import RenderSettings, VllmSettings

from .support import ROOT

CONFIGS = sorted((ROOT / "examples").glob("*.config.json"))
MAX_PIXELS = RenderSettings.model_fields["max_pixels"].default
CPUS = 16  # `vlm-ocr plan --serve-line`'s host: 16 CPUs, one GPU of 141 GB, compute 9.0
GPU_GIB = 141 * 1e9 / 2**30
CAPABILITY = 9.0


def lines(capsys, config: Path) -> dict[str, list[str]]:
    """Each process's command line by role, the variables it starts with taken off its head
    (they are the worker's rule for every family: checked here)."""
    assert cli.main(["plan", str(config), "--serve-line"]) == 0
    out = capsys.readouterr().out
    argvs = [shlex.split(x) for x in out.splitlines() if x and not x.startswith("#")]
    env = [f"{k}={v}" for k, v in serve_argv.engine_env(VllmSettings()).items()]
    assert all(a[: len(env)] == env for a in argvs)
    return {("engine" if "--headless" in a else "server"): a[len(env) :] for a in argvs}


def last(argv: list[str], flag: str) -> str | None:
    """The flag's value as vLLM's parser takes it: the last one given."""
    found = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
    return found[-1] if found else None


def declared(family: Family, name: str, default: Any) -> Any:
    """The family's own value of `name` where its class declares one, else `default`."""
    value = getattr(family, name, None)
    return default if value is None else value


def setting(name: str) -> Any:
    return VllmSettings.model_fields[name].default


def family_of(config: Path) -> tuple[Family, str]:
    cfg = json.loads(config.read_text())
    model = str(cfg["_name_or_path"])
    return detect(cfg, model, max_pixels=MAX_PIXELS).family, model


def expected(family: Family) -> dict[str, str]:
    """Each pinned flag's value for this family on the plan's host."""
    pages = family.budget(MAX_PIXELS).max_pixels
    by_rule = max(1, min(math.ceil(pages / serve_argv.PIXELS_PER_API_SERVER), CPUS // 4))
    seqs = serve_argv.default_max_num_seqs(GPU_GIB)
    kv = "fp8" if CAPABILITY >= 8.9 else "auto"  # the GPU's fp8 KV cache, from compute 8.9
    utilization = declared(family, "gpu_memory_utilization", setting("gpu_memory_utilization"))
    return {
        # the plan's line is the image's vLLM's
        "--max-num-batched-tokens": str(
            setting("max_num_batched_tokens")
            or family.batched_tokens(serve_argv.vllm_release(serve_argv.IMAGE_VLLM))
        ),
        "--gdn-prefill-backend": str(
            declared(family, "gdn_prefill_backend", setting("gdn_prefill_backend"))
        ),
        "--kv-cache-dtype": str(declared(family, "kv_cache_dtype", kv)),
        "--max-num-seqs": str(declared(family, "max_num_seqs", seqs)),
        "--max-model-len": str(family.max_model_len),
        "--gpu-memory-utilization": f"{utilization:g}",
        # pages are never repeated: no processor cache, unless the family says otherwise
        "--mm-processor-cache-gb": str(declared(family, "mm_processor_cache_gb", 0)),
        "--limit-mm-per-prompt": json.dumps(family.limit_mm_per_prompt()),
        "--api-server-count": str(declared(family, "api_server_count", by_rule)),
    }


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name.removesuffix(".config.json"))
def test_the_serve_line_carries_the_familys_chosen_flags(capsys, config: Path) -> None:
    family, model = family_of(config)
    argvs = lines(capsys, config)
    server, engine = argvs["server"], argvs["engine"]
    assert server[4] == model == engine[4]
    for flag, value in expected(family).items():
        assert last(server, flag) == value, (family.name, flag)
        if flag != "--api-server-count":  # only the process that answers HTTP has them
            assert last(engine, flag) == value, (family.name, flag)
    assert "--api-server-count" not in engine
    # both through the fork launcher, one API server as several (the plan's vLLM is the image's)
    assert server[1:3] == serve_argv.FORK_LAUNCHER == engine[1:3]
    kwargs = family.processor_kwargs(MAX_PIXELS)
    shown = last(server, "--mm-processor-kwargs")
    assert (json.loads(shown) if shown else None) == kwargs


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name.removesuffix(".config.json"))
def test_the_familys_own_flags_are_on_both_lines_and_win(capsys, config: Path) -> None:
    family, _ = family_of(config)
    own = family.serve_args()
    argvs = lines(capsys, config)
    for argv in argvs.values():
        tail = argv[-len(own) :] if own else []
        for i, flag in enumerate(own):
            if not flag.startswith("--"):
                continue
            assert flag in argv, (family.name, flag)
            value = own[i + 1] if i + 1 < len(own) and not own[i + 1].startswith("--") else None
            if value is not None:
                assert last(argv, flag) == value, (family.name, flag)  # theirs, not the worker's
        assert all(x in argv for x in tail)
    caching = declared(family, "prefix_caching", None)
    off = "--no-enable-prefix-caching" in own or caching is False
    for argv in argvs.values():
        assert ("--no-enable-prefix-caching" in argv) == off, family.name
        if caching is True:
            assert "--enable-prefix-caching" in argv, family.name


@pytest.mark.parametrize(
    ("config", "before_032", "on_032"),
    [
        ("lightonocr-2-1b", 4096, 16384),  # Pixtral's encoder: one page a step before 0.32
        ("lightonocr-3-1b", 4096, 16384),
        # LightOnOCR-3's Qwen3.5 sizes: half the prefill steps on 0.32 (measured on the 0.8B)
        ("lightonocr-3-0.8b", 16384, 32768),
        ("lightonocr-3-4b", 16384, 32768),
        ("chandra-ocr-2", 16384, 16384),  # Qwen3.5 too, but its own family's budget
        ("olmocr-2-7b-1025-fp8", 16384, 16384),
    ],
)
def test_the_batched_tokens_follow_the_engines_vllm(
    config: str, before_032: int, on_032: int
) -> None:
    from vlm_ocr.engines.gpu import GpuFacts
    from vlm_ocr.settings import Settings

    family, model = family_of(ROOT / f"examples/{config}.config.json")
    settings = Settings(model_name=model)
    spec = serve_argv.ServeSpec.resolve(settings, GpuFacts(), family, cpus=CPUS)
    assert spec.on_vllm("0.26.0").max_num_batched_tokens == before_032
    assert spec.on_vllm("0.32.0").max_num_batched_tokens == on_032
    argv = serve_argv.server_argv(spec.on_vllm("0.26.0"), 8000)
    assert last(argv, "--max-num-batched-tokens") == str(before_032)
    # the setting, when set, wins on every version
    mine = Settings(model_name=model, max_num_batched_tokens=8192)
    spec = serve_argv.ServeSpec.resolve(mine, GpuFacts(), family, cpus=CPUS)
    assert spec.on_vllm("0.26.0").max_num_batched_tokens == 8192


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name.removesuffix(".config.json"))
def test_the_start_mode_is_the_familys_unless_the_setting_names_one(capsys, config: Path) -> None:
    from vlm_ocr.engines.gpu import GpuFacts
    from vlm_ocr.settings import Settings, StartMode

    family, model = family_of(config)
    fast = declared(family, "start_mode", StartMode.THROUGHPUT) is StartMode.FAST
    for argv in lines(capsys, config).values():  # START_MODE=auto, the default
        assert (last(argv, "--optimization-level") == "0") == fast, family.name
        config_arg = json.loads(last(argv, "--compilation-config") or "{}")
        # fast: whole decode steps as CUDA graphs alone; throughput: graphs at every padded size
        assert (config_arg.get("cudagraph_mode") == "FULL_DECODE_ONLY") == fast
    for mode in (StartMode.THROUGHPUT, StartMode.FAST):
        chosen = Settings(model_name=model, start_mode=mode)
        spec = serve_argv.ServeSpec.resolve(chosen, GpuFacts(), family, cpus=CPUS)
        argv = serve_argv.server_argv(spec, 8000)
        assert spec.start_mode is mode
        assert (last(argv, "--optimization-level") == "0") == (mode is StartMode.FAST)
