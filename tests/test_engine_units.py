"""Engine pieces that need no server: argv, think stripping, prompts, fingerprints, selection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlm_ocr.app import choose_engine_kind
from vlm_ocr.engines.chat_client import ChatClient, strip_think
from vlm_ocr.engines.vllm_server import default_max_num_seqs, launch_argvs, server_argv
from vlm_ocr.engines.vlm import ExternalServer, VlmEngine
from vlm_ocr.prompts import PRESETS, Prompt, resolve
from vlm_ocr.settings import EngineKind, Settings

# What the image runs for the default model on one 80 GB GPU (README "Engine" shows it).
PRODUCTION_ARGV = [
    "python3",
    "-m",
    "vllm.entrypoints.cli.main",
    "serve",
    "QuantTrio/Qwen3-VL-32B-Instruct-AWQ",
    "--served-model-name",
    "ocr",
    "--host",
    "127.0.0.1",
    "--port",
    "8000",
    "--gdn-prefill-backend",
    "triton",
    "--kv-cache-dtype",
    "fp8",
    "--max-model-len",
    "8192",
    "--max-num-seqs",
    "192",
    "--max-num-batched-tokens",
    "16384",
    "--gpu-memory-utilization",
    "0.9",
    "--tensor-parallel-size",
    "1",
    "--limit-mm-per-prompt",
    '{"image": 1, "video": 0}',
    "--mm-processor-kwargs",
    '{"max_pixels": 1600000}',
    "--mm-processor-cache-gb",
    "0",
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
    "--compilation-config",
    '{"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192]}',
]


def test_production_argv_for_default_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    settings = Settings()
    # VLLM_PORT=0 picks a free port; on an 80 GB Hopper GPU the KV-cache dtype resolves to fp8
    # and MAX_NUM_SEQS to 192 (make_engine)
    settings = settings.model_copy(update={"max_num_seqs": default_max_num_seqs(79.6)})
    assert server_argv(settings, 8000, "fp8") == PRODUCTION_ARGV


def test_argv_options() -> None:
    s = Settings(
        model_revision="abc123",
        enforce_eager=True,
        vllm_extra_args="--seed 7 --foo 'a b'",
        vllm_python="/opt/venv/bin/python",
        max_pixels=2_000_000,
        tensor_parallel_size=2,
    )
    argv = server_argv(s, 9000)
    assert argv[0] == "/opt/venv/bin/python"
    assert argv[argv.index("--revision") + 1] == "abc123"
    assert argv[argv.index("--port") + 1] == "9000"
    assert json.loads(argv[argv.index("--mm-processor-kwargs") + 1]) == {"max_pixels": 2_000_000}
    assert "--enforce-eager" in argv and argv[-4:] == ["--seed", "7", "--foo", "a b"]


def test_a_split_start_is_one_server_and_one_headless_engine_on_the_same_flags() -> None:
    settings = Settings(vllm_split_start=True)
    argvs = launch_argvs(settings, 8000, "fp8", rpc_port=8100)
    dp = [
        "--data-parallel-size",
        "1",
        "--data-parallel-address",
        "127.0.0.1",
        "--data-parallel-rpc-port",
        "8100",
    ]
    base = server_argv(settings, 8000, "fp8")
    assert argvs == {
        "server": [*base, *dp, "--data-parallel-size-local", "0"],
        "engine": [*base, *dp, "--data-parallel-size-local", "1", "--headless"],
    }
    single = Settings(vllm_split_start=False)
    assert launch_argvs(single, 8000, "fp8", rpc_port=8100) == {"server": base}


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("<think>plan the page</think>\n第一條 本法", "第一條 本法"),
        ("hidden reasoning whose tag was in the prompt</think>Article 1", "Article 1"),
        ("Text <think>a</think>more<think>b</think> end", "Text more end"),
        ("Answer first <think>and then it never closes", "Answer first"),
        ("No reasoning at all.", "No reasoning at all."),
    ],
)
def test_strip_think(raw: str, clean: str) -> None:
    assert strip_think(raw) == clean


def test_request_body_pins_thinking_off_and_loop_detection() -> None:
    body = ChatClient.request_body("ocr", b"\x89PNG", "Transcribe.", temperature=0.0, max_tokens=99)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["repetition_detection"]["min_count"] >= 2
    assert body["max_tokens"] == 99 and body["temperature"] == 0.0
    image, text = body["messages"][0]["content"]
    assert image["image_url"]["url"].startswith("data:image/png;base64,")
    assert text == {"type": "text", "text": "Transcribe."}


def test_presets_and_their_rules() -> None:
    assert set(PRESETS) == {"legal-zh-tw", "markdown", "plain"}
    legal = PRESETS["legal-zh-tw"].text
    for rule in ("背面", "【模糊】", "第十條", "「得」與「應」", "表格", "流程圖", "註腳"):
        assert rule in legal
    assert resolve(None, None, "plain") is PRESETS["plain"]
    custom = resolve(None, "Read the receipt.", "plain")
    assert custom.name == "custom" and custom.version == Prompt.custom("Read the receipt.").version
    assert custom.version != Prompt.custom("Read the invoice.").version


def test_fingerprint_changes_with_prompt_model_and_sampling() -> None:
    s = Settings(openai_base_url="http://127.0.0.1:1")
    e = VlmEngine(s, ExternalServer(s))
    fp = e.fingerprint(PRESETS["markdown"])
    assert fp["prompt"] == "markdown" and fp["prompt_version"] == "1"
    assert fp["sampling"]["temperatures"] == [0.0, 0.1, 0.1, 0.2]
    assert fp != e.fingerprint(PRESETS["plain"])
    other = VlmEngine(s.model_copy(update={"served_model_name": "other"}), ExternalServer(s))
    assert other.fingerprint(PRESETS["markdown"]) != fp
    fewer = VlmEngine(s.model_copy(update={"max_tokens": 1000}), ExternalServer(s))
    assert fewer.fingerprint(PRESETS["markdown"]) != fp


def test_auto_engine_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import vlm_ocr.app as app

    monkeypatch.setattr(app, "has_cuda_gpu", lambda: False)
    kind, why = choose_engine_kind(Settings(model_name=str(tmp_path)))
    assert kind is EngineKind.RAPIDOCR and "no CUDA GPU" in why
    monkeypatch.setattr(app, "has_cuda_gpu", lambda: True)
    kind, why = choose_engine_kind(Settings(model_name=str(tmp_path)))
    assert kind is EngineKind.VLLM and "present" in why
    kind, why = choose_engine_kind(Settings(model_name="org/not-here"))
    assert kind is EngineKind.RAPIDOCR and "model org/not-here not found" in why
    assert choose_engine_kind(Settings(engine="openai"))[0] is EngineKind.OPENAI


def test_a_taken_port_is_refused(loop) -> None:
    import socket

    from vlm_ocr.engines.vllm_server import VllmServer
    from vlm_ocr.errors import EngineError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = VllmServer(Settings(vllm_port=taken.getsockname()[1], vllm_python="false"))
        with pytest.raises(EngineError, match="already taken by another process"):
            loop.run(server.start())
    assert server.proc is None  # nothing was spawned


def test_the_cause_of_a_failed_start_is_one_line_of_the_engine_log() -> None:
    from vlm_ocr.engines.vllm_server import VllmServer

    server = VllmServer(Settings())
    server.tail.extend(
        [
            "INFO 11-30 engine.py:12] starting",
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3/site-packages/vllm/config.py", line 1, in check',
            "ValueError: max_model_len (8192) is greater than the derived max_model_len (4096)",
            "RuntimeError: Engine core initialization failed. See root cause above.",
        ]
    )
    reason = server._exit_reason("while starting")
    assert reason.endswith(
        ": ValueError: max_model_len (8192) is greater than the derived max_model_len (4096)"
    )


def test_an_engine_that_ends_quietly_or_is_killed_gets_the_likely_reason() -> None:
    from types import SimpleNamespace

    from vlm_ocr.engines.vllm_server import Child, VllmServer

    server = VllmServer(Settings())
    server.tail.append("INFO [core_client.py] MPClient: engine core exited unexpectedly")
    quiet = Child("engine", [], proc=SimpleNamespace(returncode=0))
    killed = Child("server", [], proc=SimpleNamespace(returncode=-9))
    assert server._exit_reason("while serving", quiet) == (
        "the vLLM engine exited while serving with code 0: its engine core process died "
        "without an error in the log (killed: out of memory is the usual cause)"
    )
    assert server._exit_reason("while serving", killed) == (
        "the vLLM server exited while serving with code -9 (killed: out of memory is the usual "
        "cause)"
    )


def test_a_pydantic_error_is_told_by_its_detail_line() -> None:
    from vlm_ocr.engines.vllm_server import cause_in

    log = [  # vLLM 0.32 refusing MAX_MODEL_LEN above the model's context, as it prints it
        "Traceback (most recent call last):",
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        "  Value error, User-specified max_model_len (8192) is greater than the derived "
        "max_model_len (max_position_embeddings=4096.0 or model_max_length=None in model's "
        "config.json). [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]",
    ]
    assert cause_in(log) == (
        "1 validation error for ModelConfig: User-specified max_model_len (8192) is greater than "
        "the derived max_model_len (max_position_embeddings=4096.0 or model_max_length=None in "
        "model's config.json)."
    )
    assert cause_in(["INFO all is well"]) == ""


def test_kv_cache_dtype_follows_the_gpu_unless_set() -> None:
    from vlm_ocr.engines.vllm_server import resolve_kv_cache_dtype

    unset = Settings()
    assert resolve_kv_cache_dtype(unset, 9.0) == "fp8"  # H100, H200
    assert resolve_kv_cache_dtype(unset, 8.9) == "fp8"  # L40S, RTX 4090
    assert resolve_kv_cache_dtype(unset, 8.6) == "auto"  # A40, A6000
    assert resolve_kv_cache_dtype(unset, 8.0) == "auto"  # A100
    assert resolve_kv_cache_dtype(unset, None) == "auto"  # no GPU (the CPU build)
    assert resolve_kv_cache_dtype(Settings(kv_cache_dtype="fp8_e5m2"), 8.0) == "fp8_e5m2"


def test_cuda_graph_sizes() -> None:
    from vlm_ocr.engines.vllm_server import cuda_graph_sizes

    assert cuda_graph_sizes(Settings(max_num_seqs=48)) == [1, 2, 4, 8, 16, 32, 48]
    assert cuda_graph_sizes(Settings(max_num_seqs=256))[-3:] == [192, 224, 256]
    assert cuda_graph_sizes(Settings(cuda_graph_sizes="8, 1,64")) == [1, 8, 64]
    argv = server_argv(Settings(enforce_eager=True), 1)
    assert "--enforce-eager" in argv and "--compilation-config" not in argv


def test_max_num_seqs_follows_the_gpu_memory_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    import vlm_ocr.app as app
    from vlm_ocr.engines import vllm_server
    from vlm_ocr.engines.vllm_server import gpu_memory_gib

    gpus = {"memory.total": ["143771 MiB", "143771 MiB"]}  # two H200s, as nvidia-smi says it
    monkeypatch.setattr(vllm_server, "nvidia_smi", lambda *fields: gpus.get(",".join(fields)))
    assert gpu_memory_gib(1) == pytest.approx(140.4, abs=0.1)
    assert gpu_memory_gib(2) == pytest.approx(280.8, abs=0.1)
    seqs = [default_max_num_seqs(gib) for gib in (140.4, 79.6, 44.99, 23.6, None)]
    assert seqs == [256, 192, 64, 32, 192]  # H200, H100, L40S, RTX 4090, no GPU to read

    def flag(engine: object) -> str:
        argv = engine.server.children[0].argv  # type: ignore[attr-defined]
        return argv[argv.index("--max-num-seqs") + 1]

    # Resolved once in make_engine: the server's flag and the worker's concurrency agree.
    gpus["memory.total"] = ["46068 MiB"]  # an L40S
    engine = app.make_engine(Settings(engine="vllm", max_num_seqs=0))
    assert engine.default_concurrency == 64 and flag(engine) == "64"
    engine = app.make_engine(Settings(engine="vllm", max_num_seqs=100))
    assert engine.default_concurrency == 100 and flag(engine) == "100"
    external = app.make_engine(
        Settings(engine="openai", openai_base_url="http://127.0.0.1:1", max_num_seqs=0)
    )
    assert external.default_concurrency == 192
    gpus.clear()
    assert gpu_memory_gib(1) is None


def test_benchmarks_fix_the_answer_length() -> None:
    body = ChatClient.request_body("m", b"", "p", temperature=0, max_tokens=5)
    assert "ignore_eos" not in body and body["repetition_detection"]
    fixed = ChatClient.request_body("m", b"", "p", temperature=0, max_tokens=800, ignore_eos=True)
    assert fixed["ignore_eos"] is True and "repetition_detection" not in fixed


def test_the_engine_facts_name_the_gemm_kernel_of_the_weights() -> None:
    from vlm_ocr.engines.vllm_server import facts_in

    # Lines of vLLM 0.26's log on an H200: FP8 weights on DeepGEMM, AWQ weights on Machete.
    fp8 = (
        "INFO [__init__.py:604] Selected FlashInferFp8DeepGEMMDynamicBlockScaledKernel"
        " for Fp8LinearMethod"
    )
    awq = "INFO [auto_awq.py:473] Using MacheteLinearKernel for AutoAWQMarlinLinearMethod"
    assert facts_in(fp8) == {"linear_kernel": "FlashInferFp8DeepGEMMDynamicBlockScaledKernel"}
    assert facts_in(awq) == {"linear_kernel": "MacheteLinearKernel"}
    attention = "INFO [cuda.py:482] Using FLASH_ATTN attention backend out of potential backends"
    assert facts_in(attention) == {"attention_backend": "FLASH_ATTN"}
