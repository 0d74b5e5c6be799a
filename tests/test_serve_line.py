"""The `vllm serve` line(s) the worker runs, visible before any GPU: `vlm-ocr plan --serve-line`
for every family on hosts of 1 and 4 GPUs and 4 and 16 CPUs, table-driven, as an argument
builder is tested."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from vlm_ocr.cli import main as cli
from vlm_ocr.engines.families import FAMILIES
from vlm_ocr.engines.vllm.argv import FORK_LAUNCHER

from .support import ROOT

# each family's own example: its first checkpoint's shapes
CONFIGS = {
    name: family.checkpoints[0].example
    for name, family in FAMILIES.items()
    if family.checkpoints and family.checkpoints[0].example
}


def serve_lines(capsys, family: str, *args: str, env: bool = False) -> dict[str, list[str]]:
    """Each process's command line, by role; with `env`, the variables it is started with
    (`NAME=value` words before the interpreter) kept at its head."""
    config = ROOT / f"examples/{CONFIGS[family]}.config.json"
    assert cli.main(["plan", str(config), "--serve-line", *args]) == 0
    out = capsys.readouterr().out
    lines = [shlex.split(line) for line in out.splitlines() if line and not line.startswith("#")]
    if not env:
        lines = [[w for w in argv if not re.fullmatch(r"[A-Z_]+=.*", w)] for argv in lines]
    return {("engine" if "--headless" in argv else "server"): argv for argv in lines}


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


# family, GPUs, CPUs -> the model served, API servers, replicas; the family's own flags
@pytest.mark.parametrize(
    ("family", "gpus", "cpus", "model", "api_servers", "replicas", "family_flags"),
    [
        (
            "chandra",
            1,
            16,
            "datalab-to/chandra-ocr-2",
            "4",  # its 6.3 MP pages: one a megapixel, a quarter of the CPUs at most
            "1",
            ["--default-chat-template-kwargs"],
        ),
        ("chandra", 1, 4, "datalab-to/chandra-ocr-2", "1", "1", ["--default-chat-template-kwargs"]),
        ("chandra", 4, 16, "datalab-to/chandra-ocr-2", "4", "4", []),
        ("chandra", 4, 4, "datalab-to/chandra-ocr-2", "4", "4", []),  # one per replica at least
        # its family's declared count, not its 1.7 MP pages' two
        ("olmocr", 1, 16, "allenai/olmOCR-2-7B-1025-FP8", "1", "1", []),
        ("olmocr", 1, 4, "allenai/olmOCR-2-7B-1025-FP8", "1", "1", []),
        ("olmocr", 4, 16, "allenai/olmOCR-2-7B-1025-FP8", "4", "4", []),
        (
            "lighton-ocr",
            1,
            16,
            "lightonai/LightOnOCR-2-1B",
            "3",  # pages within 1,540² px: 2.4 MP
            "1",
            ["--no-enable-prefix-caching"],
        ),
        (
            "lighton-ocr",
            4,
            4,
            "lightonai/LightOnOCR-2-1B",
            "4",
            "4",
            ["--no-enable-prefix-caching"],
        ),
        (
            "lighton-ocr-3",
            1,
            16,
            "lightonai/LightOnOCR-3-0.8B",
            "4",  # pages within 2,048² px: 4.2 MP, a quarter of the CPUs
            "1",
            ["--no-enable-prefix-caching", "--default-chat-template-kwargs"],
        ),
        (
            "lighton-ocr-3",
            4,
            4,
            "lightonai/LightOnOCR-3-0.8B",
            "4",
            "4",
            ["--no-enable-prefix-caching", "--default-chat-template-kwargs"],
        ),
        ("dots-ocr", 1, 16, "rednote-hilab/dots.mocr", "4", "1", ["--trust-remote-code"]),
        ("dots-ocr", 4, 4, "rednote-hilab/dots.mocr", "4", "4", ["--chat-template-content-format"]),
        # its family's declared count, not its 1.6 MP pages' two
        ("qwen-vl", 1, 16, "QuantTrio/Qwen3-VL-32B-Instruct-AWQ", "1", "1", []),
        ("qwen-vl", 4, 4, "QuantTrio/Qwen3-VL-32B-Instruct-AWQ", "4", "4", []),
    ],
)
def test_the_serve_line_per_family_and_host(
    capsys, family, gpus, cpus, model, api_servers, replicas, family_flags
) -> None:
    argvs = serve_lines(capsys, family, "--gpus", str(gpus), "--cpus", str(cpus))
    server, engine = argvs["server"], argvs["engine"]  # the split start: both at once
    assert server[4] == model == engine[4]
    assert flag(server, "--api-server-count") == api_servers
    assert "--api-server-count" not in engine  # a headless engine refuses it
    assert flag(server, "--data-parallel-size") == replicas == flag(engine, "--data-parallel-size")
    assert flag(engine, "--data-parallel-size-local") == replicas
    assert flag(server, "--data-parallel-size-local") == "0"
    assert flag(server, "--max-num-seqs") == "256"  # an H200's memory, per replica
    assert all(f in server and f in engine for f in family_flags)


def test_a_single_vllm_serve_carries_its_api_servers_and_replicas(capsys, monkeypatch) -> None:
    monkeypatch.setenv("VLLM_SPLIT_START", "false")
    argvs = serve_lines(capsys, "chandra", "--gpus", "4", "--cpus", "16")
    assert list(argvs) == ["server"]
    assert flag(argvs["server"], "--api-server-count") == "4"
    assert flag(argvs["server"], "--data-parallel-size") == "4"
    monkeypatch.setenv("API_SERVER_COUNT", "6")
    assert flag(serve_lines(capsys, "olmocr", "--gpus", "1")["server"], "--api-server-count") == "6"


def test_a_fork_server_changes_the_interpreter_lines_of_the_processes_that_start_children(
    capsys, monkeypatch
) -> None:
    monkeypatch.setenv("API_SERVER_COUNT", "3")
    monkeypatch.setenv("VLLM_FORK_SERVER", "false")
    before = serve_lines(capsys, "chandra", "--gpus", "1")
    monkeypatch.setenv("VLLM_FORK_SERVER", "true")
    after = serve_lines(capsys, "chandra", "--gpus", "1")
    assert Path(FORK_LAUNCHER[1]).is_file()
    for role in ("engine", "server"):  # the engine core; the API servers
        assert before[role][1:3] == ["-m", "vllm.entrypoints.cli.main"]
        assert after[role][1:3] == FORK_LAUNCHER and after[role][3:] == before[role][3:]
    # one API server too: the image's vLLM (0.32) is started so that it runs as several do, a
    # child of the server process, which handshakes with the engine core meanwhile
    monkeypatch.setenv("API_SERVER_COUNT", "1")
    single = serve_lines(capsys, "chandra", "--gpus", "1")
    assert single["server"][1:3] == FORK_LAUNCHER == single["engine"][1:3]


@pytest.mark.parametrize("family", list(CONFIGS))
def test_start_modes_in_the_serve_line(capsys, monkeypatch, family: str) -> None:
    monkeypatch.setenv("START_MODE", "throughput")  # named: `auto` is the family's own
    throughput = serve_lines(capsys, family, "--gpus", "1")["engine"]
    config = flag(throughput, "--compilation-config")
    assert config is not None and "--optimization-level" not in throughput
    assert '"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64, 96, 128' in config
    untimed = '"inductor_compile_config": {"combo_kernels": true, "benchmark_combo_kernel": false}'
    assert untimed in config  # combo kernels fused, not timed at compile
    started = serve_lines(capsys, family, "--gpus", "1", env=True)
    for argv in started.values():  # Triton's autotuners off in every process
        assert argv[:4] == [
            "VLLM_TRITON_FORCE_FIRST_CONFIG=1",
            "HUMMING_DISABLE_PARALLEL_BUILD=1",  # no background prebuilds beside every process
            "VLLM_NO_USAGE_STATS=1",  # nothing reported to vLLM's server
            "python3",
        ]
    monkeypatch.setenv("TRITON_AUTOTUNE", "true")
    tuned = serve_lines(capsys, family, "--gpus", "1", env=True)["engine"]
    quiet = ["HUMMING_DISABLE_PARALLEL_BUILD=1", "VLLM_NO_USAGE_STATS=1"]
    assert tuned[:2] == quiet  # no Triton variable: tuned, and combo kernels timed
    assert tuned[2:] == [w.replace(", " + untimed, "") for w in throughput]
    monkeypatch.setenv("TRITON_AUTOTUNE", "")
    monkeypatch.setenv("ENCODER_CUDA_GRAPHS", "true")  # the vision encoder captured too
    graphs = json.loads(
        flag(serve_lines(capsys, family, "--gpus", "1")["engine"], "--compilation-config")
    )
    assert graphs == json.loads(config) | {"cudagraph_mm_encoder": True}
    monkeypatch.setenv("ENCODER_CUDA_GRAPHS", "")
    # a key added by VLLM_EXTRA_ARGS joins the worker's compilation config, which keeps its own
    monkeypatch.setenv("VLLM_EXTRA_ARGS", "--compilation-config.compile_mm_encoder=true")
    compiled = serve_lines(capsys, family, "--gpus", "1")["engine"]
    assert compiled.count("--compilation-config") == 1
    assert json.loads(flag(compiled, "--compilation-config") or "") == json.loads(config) | {
        "compile_mm_encoder": True
    }
    monkeypatch.setenv("VLLM_EXTRA_ARGS", "")
    monkeypatch.setenv("START_MODE", "fast")
    fast = serve_lines(capsys, family, "--gpus", "1")["engine"]
    assert flag(fast, "--optimization-level") == "0"  # no torch.compile, no autotuning
    assert flag(fast, "--compilation-config") == (
        '{"cudagraph_mode": "FULL_DECODE_ONLY", '
        '"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256]}'
    )
    # no JIT warm-up of every sampler feature: the warm-up page compiles what pages use
    assert flag(fast, "--kernel-config") == '{"enable_jit_warmup": false}'
    assert "--kernel-config" not in throughput  # compiled at start there, as vLLM does
    monkeypatch.setenv("ENFORCE_EAGER", "true")
    eager = serve_lines(capsys, family, "--gpus", "1")["engine"]
    assert "--enforce-eager" in eager and "--compilation-config" not in eager


def plan_json(capsys, config: Path, *args: str) -> dict:
    assert cli.main(["plan", str(config), *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_model_that_does_not_fit_is_refused_saying_what_would(capsys) -> None:
    config = ROOT / "examples/qwen3-vl-32b-instruct.config.json"  # BF16: 66 GB of weights
    assert plan_json(capsys, config, "--gpu-memory", "48")["pages_at_once"] == 0
    assert cli.main(["plan", str(config), "--serve-line", "--gpu-memory", "48"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err  # one line, and no line that cannot run
    assert err.startswith("vlm-ocr plan: --serve-line: Qwen/Qwen3-VL-32B-Instruct does not fit")
    assert "its weights take 66.3 GB a GPU" in err
    # what would fit, each of which the command then takes
    said = ["a GPU of 80 GB", "--tensor-parallel-size 2", "an FP8 checkpoint of it"]
    assert all(s in err for s in said), err
    assert cli.main(["plan", str(config), "--serve-line", "--gpu-memory", "80"]) == 0
    two = ["--gpu-memory", "48", "--gpus", "2", "--tensor-parallel-size", "2"]
    assert cli.main(["plan", str(config), "--serve-line", *two]) == 0
    fp8 = ROOT / "examples/qwen3-vl-32b-instruct-fp8.config.json"
    assert cli.main(["plan", str(fp8), "--serve-line", "--gpu-memory", "48"]) == 0


def seqs_note(capsys, *args: str) -> tuple[str, dict[str, list[str]]]:
    config = ROOT / f"examples/{CONFIGS['qwen-vl']}.config.json"
    assert cli.main(["plan", str(config), "--serve-line", *args]) == 0
    out = capsys.readouterr().out
    note = next(line for line in out.splitlines() if line.startswith("# --max-num-seqs"))
    lines = [shlex.split(line) for line in out.splitlines() if line and not line.startswith("#")]
    return note, {("engine" if "--headless" in argv else "server"): argv for argv in lines}


def test_the_lines_numbers_agree_with_the_plan_or_it_says_why(capsys, monkeypatch) -> None:
    config = ROOT / f"examples/{CONFIGS['qwen-vl']}.config.json"
    planned = plan_json(capsys, config, "--gpu-memory", "141")
    pages, tokens = planned["pages_at_once"], planned["page_tokens"]
    note, argvs = seqs_note(capsys, "--gpu-memory", "141")
    seqs = int(flag(argvs["server"], "--max-num-seqs") or 0)
    assert seqs > pages  # 256 sequences by the H200's memory, 135 pages at the full size
    assert note.startswith(f"# --max-num-seqs {seqs} (MAX_NUM_SEQS=0: by the GPU's memory)")
    assert f"the KV cache holds {pages:,} pages at once at the full page size ({tokens:,}" in note
    assert "the rest wait" in note
    # Fewer sequences than pages: the note says how many more would run.
    monkeypatch.setenv("MAX_NUM_SEQS", "64")
    note, argvs = seqs_note(capsys, "--gpu-memory", "141")
    assert flag(argvs["server"], "--max-num-seqs") == "64"
    assert f"would hold {pages:,} pages at once" in note and f"MAX_NUM_SEQS up to {pages}" in note
    monkeypatch.setenv("MAX_NUM_SEQS", str(pages))
    note, _ = seqs_note(capsys, "--gpu-memory", "141")
    assert note.endswith(
        f"holds {pages:,} pages at once at the full page size ({tokens:,} tokens: "
        "image, prompt and answer cap)"
    )
    # A flag of the plan is a setting of the line: both read the same context.
    monkeypatch.delenv("MAX_NUM_SEQS")
    shorter = plan_json(capsys, config, "--gpu-memory", "141", "--max-model-len", "4096")
    note, argvs = seqs_note(capsys, "--gpu-memory", "141", "--max-model-len", "4096")
    assert flag(argvs["server"], "--max-model-len") == "4096" == str(shorter["page_tokens"])
    assert f"holds {shorter['pages_at_once']:,} pages at once" in note
