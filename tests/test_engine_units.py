"""Engine pieces that need no server: argv, GPU facts, think stripping, prompts, fingerprints,
selection, the log."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from vlm_ocr.engines.chat_client import ChatClient, strip_think
from vlm_ocr.engines.factory import choose_engine_kind, make_engine
from vlm_ocr.engines.families import FAMILIES
from vlm_ocr.engines.families.qwen import QwenVl
from vlm_ocr.engines.gpu import GpuFacts
from vlm_ocr.engines.model_files import ModelFiles
from vlm_ocr.engines.vllm import fork_launcher
from vlm_ocr.engines.vllm.argv import (
    FORK_LAUNCHER,
    IMAGE_VLLM,
    VLLM_CLI,
    ServeSpec,
    cuda_graph_sizes,
    default_max_num_seqs,
    kv_cache_dtype,
    launch_argvs,
    server_argv,
    through_fork_launcher,
    vllm_release,
)
from vlm_ocr.engines.vllm.logs import address_in_use, cause_in, exit_reason, facts_in
from vlm_ocr.engines.vllm.server import Child, StartFacts, VllmServer
from vlm_ocr.engines.vlm import ExternalServer, VlmEngine
from vlm_ocr.errors import EngineError
from vlm_ocr.prompts import PRESETS, Prompt, resolve
from vlm_ocr.settings import EngineKind, Settings

from .support import ROOT

# nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader, as it prints it
TWO_H200 = "NVIDIA H200, 143771 MiB, 9.0\nNVIDIA H200, 143771 MiB, 9.0\n"
H100 = GpuFacts.parse("NVIDIA H100 80GB HBM3, 81559 MiB, 9.0")
L40S = GpuFacts.parse("NVIDIA L40S, 46068 MiB, 8.9")
A100 = GpuFacts.parse("NVIDIA A100-SXM4-80GB, 81920 MiB, 8.0")
NO_GPU = GpuFacts()


def spec(gpu: GpuFacts = H100, **values: object) -> ServeSpec:
    return ServeSpec.resolve(Settings(**values), gpu, cpus=16)


# What the image runs for the default model on one 80 GB GPU (docs/models.md shows it).
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
    # its family starts `fast`: no torch.compile, decode steps captured at a few sizes
    "--optimization-level",
    "0",
    "--compilation-config",
    '{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64, '
    "128, 192]}",
    "--kernel-config",
    '{"enable_jit_warmup": false}',
]


def test_production_argv_for_default_model() -> None:
    # The settings' defaults on an 80 GB Hopper GPU: the KV-cache dtype resolves to fp8 and
    # MAX_NUM_SEQS to 192; the port is the one the start picked.
    assert server_argv(spec(H100), 8000) == PRODUCTION_ARGV


def test_inductor_options_only_where_vllm_compiles_for_a_gpu() -> None:
    # vLLM's CPU build has no combo kernels: without a GPU the compilation config leaves them be
    argv = server_argv(spec(NO_GPU, start_mode="throughput"), 8000)
    config = argv[argv.index("--compilation-config") + 1]
    assert config.startswith('{"cudagraph_capture_sizes": [') and "inductor" not in config


@pytest.mark.parametrize(
    ("gpu", "values", "flags"),
    [
        # (the GPU, settings, the flags they decide)
        (H100, {}, {"--kv-cache-dtype": "fp8", "--max-num-seqs": "192"}),
        (GpuFacts.parse(TWO_H200), {}, {"--kv-cache-dtype": "fp8", "--max-num-seqs": "256"}),
        (L40S, {}, {"--kv-cache-dtype": "fp8", "--max-num-seqs": "64"}),
        (A100, {}, {"--kv-cache-dtype": "auto", "--max-num-seqs": "192"}),
        (NO_GPU, {}, {"--kv-cache-dtype": "auto", "--max-num-seqs": "192"}),
        (A100, {"kv_cache_dtype": "fp8_e5m2"}, {"--kv-cache-dtype": "fp8_e5m2"}),
        (L40S, {"max_num_seqs": 100}, {"--max-num-seqs": "100"}),
        (H100, {"max_pixels": 2_000_000}, {"--mm-processor-kwargs": '{"max_pixels": 2000000}'}),
        (GpuFacts.parse(TWO_H200), {"tensor_parallel_size": 2}, {"--tensor-parallel-size": "2"}),
        (H100, {"model_revision": "abc123"}, {"--revision": "abc123"}),
        (H100, {"gdn_prefill_backend": "flashinfer"}, {"--gdn-prefill-backend": "flashinfer"}),
        (H100, {"served_model_name": "x"}, {"--served-model-name": "x"}),
    ],
)
def test_argv_by_gpu_and_settings(gpu: GpuFacts, values: dict, flags: dict[str, str]) -> None:
    argv = server_argv(spec(gpu, **values), 9000)
    assert {flag: argv[argv.index(flag) + 1] for flag in flags} == flags


def test_argv_options() -> None:
    s = spec(
        NO_GPU,
        enforce_eager=True,
        vllm_extra_args="--seed 7 --foo 'a b'",
        vllm_python="/opt/venv/bin/python",
    )
    argv = server_argv(s, 9000)
    assert argv[0] == "/opt/venv/bin/python" and "--revision" not in argv
    assert argv[argv.index("--port") + 1] == "9000"
    assert "--enforce-eager" in argv and "--compilation-config" not in argv
    assert argv[-4:] == ["--seed", "7", "--foo", "a b"]


def test_extra_keys_of_a_json_flag_join_the_workers_own_instead_of_replacing_it() -> None:
    names = ("--compilation-config", "--limit-mm-per-prompt")

    def flags(extra: str) -> tuple[list[str], dict[str, object], dict[str, object]]:
        argv = server_argv(spec(H100, start_mode="throughput", vllm_extra_args=extra), 9000)
        objects = [json.loads(argv[argv.index(f) + 1]) for f in names]
        assert [argv.count(f) for f in names] == [1, 1]  # one of each, which vLLM reads
        return argv, objects[0], objects[1]

    _, worker_config, worker_limits = flags("")
    pinned = worker_config["cudagraph_capture_sizes"]
    inductor = worker_config["inductor_compile_config"]
    assert pinned[-1] == 192 and inductor and worker_limits == {"image": 1, "video": 0}
    # vLLM's dotted keys, `=` or a word apart, its short name, `_` for `-`, JSON objects
    argv, config, limits = flags(
        "--seed 7 --compilation-config.compile_mm_encoder=true -cc.inductor_compile_config.x 1 "
        "--gpu_memory_utilization=0.85 --compilation_config.mode 3 "
        '--limit-mm-per-prompt=\'{"image": 2}\' -cc=\'{"pass_config": {"fuse_x": 0.5}}\''
    )
    assert config == {
        "cudagraph_capture_sizes": pinned,
        "inductor_compile_config": {**inductor, "x": 1},
        "compile_mm_encoder": True,
        "mode": 3,
        "pass_config": {"fuse_x": 0.5},
    }
    assert limits == {"image": 2, "video": 0}
    assert argv[-3:] == ["--seed", "7", "--gpu_memory_utilization=0.85"]
    # a key given wins; `+` appends to a list as in vLLM; an object's keys merge into the worker's
    _, config, _ = flags(
        "--compilation-config.cudagraph_capture_sizes+ 256,384 "
        '--compilation-config \'{"cudagraph_mode": "PIECEWISE"}\''
    )
    assert config == {
        **worker_config,
        "cudagraph_capture_sizes": [*pinned, 256, 384],
        "cudagraph_mode": "PIECEWISE",
    }
    _, config, _ = flags("-cc.cudagraph_capture_sizes [8]")
    assert config == {**worker_config, "cudagraph_capture_sizes": [8]}
    # what is not an object, or a JSON flag the worker does not pass, follows the worker's flags
    argv, config, _ = flags('-cc 3 --speculative-config \'{"method": "ngram"}\'')
    assert config == worker_config
    assert argv[-4:] == ["-cc", "3", "--speculative-config", '{"method": "ngram"}']


def test_a_split_start_is_one_server_and_one_headless_engine_on_the_same_flags() -> None:
    split = spec(H100, vllm_split_start=True)
    argvs = launch_argvs(split, 8000, rpc_port=8100)
    dp = [
        "--data-parallel-size",
        "1",
        "--data-parallel-address",
        "127.0.0.1",
        "--data-parallel-rpc-port",
        "8100",
    ]
    base = server_argv(split, 8000)
    # both run through the fork launcher (VLLM_FORK_SERVER, the default), on vLLM's flags
    forked = through_fork_launcher(base)
    # the default model's family declares one API server; the headless engine has none
    front = ["--api-server-count", "1"]
    assert argvs == {
        "server": [*forked, *dp, "--data-parallel-size-local", "0", *front],
        "engine": [*forked, *dp, "--data-parallel-size-local", "1", "--headless"],
    }
    unforked = launch_argvs(spec(H100, vllm_split_start=True, vllm_fork_server=False), 8000, 8100)
    assert unforked == {
        "server": [*base, *dp, "--data-parallel-size-local", "0", *front],
        "engine": [*base, *dp, "--data-parallel-size-local", "1", "--headless"],
    }
    single = spec(H100, vllm_split_start=False)
    assert launch_argvs(single, 8000, rpc_port=8100) == {"server": [*base, *front]}


@pytest.mark.parametrize(("version", "forked"), [("0.32.0", True), ("0.26.0", False)])
def test_one_api_server_goes_through_the_fork_launcher_from_vllm_032(
    version: str, forked: bool
) -> None:
    # From 0.32 the launcher starts one API server as several (a child of the server process,
    # which handshakes with the engine core at once); before, the engine's handshake waits for
    # every API server anyway, and one runs in the server's own process
    one = spec(H100, vllm_split_start=True, api_server_count=1).on_vllm(version)
    argvs = launch_argvs(one, 8000, rpc_port=8100)
    base = server_argv(one, 8000)
    head = through_fork_launcher(base) if forked else base
    server = argvs["server"]
    assert server[: len(head)] == head and server[server.index("--api-server-count") + 1] == "1"
    assert argvs["engine"][: len(base)] == through_fork_launcher(base)  # on either
    # several API servers go through it on either; without VLLM_FORK_SERVER, nothing does
    several = spec(H100, vllm_split_start=True, api_server_count=2).on_vllm(version)
    assert launch_argvs(several, 8000, 8100)["server"][1:3] == FORK_LAUNCHER
    plain = spec(H100, vllm_split_start=True, api_server_count=1, vllm_fork_server=False)
    assert launch_argvs(plain.on_vllm(version), 8000, 8100)["server"][1:3] == VLLM_CLI


def test_the_engine_cores_fork_server_imports_its_gpu_worker_but_never_flashinfer() -> None:
    # the GPU worker's imports overlap the launcher's; FlashInfer initializes CUDA when imported,
    # and an engine core forked after that died on its first CUDA call (on an H200)
    assert fork_launcher.ENGINE_CORE == ("vllm.v1.engine.core", "vllm.v1.worker.gpu_worker")
    preloaded = fork_launcher.ENGINE_CORE + fork_launcher.API_SERVER
    assert not [m for m in preloaded if m.split(".")[0] == "flashinfer"]


@pytest.mark.parametrize(
    ("version", "values", "front"),
    [
        # dots.mocr's 11 MP pages on 16 CPUs: four at once. From 0.32, four API servers (they
        # start beside the engine and each preprocesses on one thread); before, one API server
        # (the engine core waits for each) with four renderer threads, which preprocess there.
        ("0.32.0", {}, ["--api-server-count", "4"]),
        ("0.32.0+cpu", {}, ["--api-server-count", "4"]),
        ("0.26.0", {}, ["--api-server-count", "1", "--renderer-num-workers", "4"]),
        (
            "0.26.0",
            {"api_server_count": 2},
            ["--api-server-count", "2", "--renderer-num-workers", "2"],
        ),
        ("0.26.0", {"renderer_num_workers": 1}, ["--api-server-count", "1"]),
        (
            "0.32.0",
            {"renderer_num_workers": 8},
            ["--api-server-count", "4", "--renderer-num-workers", "8"],
        ),
        ("0.32.0", {"api_server_count": 1}, ["--api-server-count", "1"]),
        ("unknown", {}, ["--api-server-count", "4"]),  # the image's vLLM
    ],
)
def test_the_front_ends_follow_the_engines_vllm(
    version: str, values: dict, front: list[str]
) -> None:
    dots = ServeSpec.resolve(Settings(**values), H100, FAMILIES["dots-ocr"](), cpus=16)
    argvs = launch_argvs(dots.on_vllm(version), 8000, rpc_port=8100)
    assert argvs["server"][argvs["server"].index("--api-server-count") :] == front
    assert "--renderer-num-workers" not in argvs["engine"]  # the headless engine has no front
    assert "--mm-processor-cache-gb" in argvs["server"]  # which vLLM needs for renderer threads
    # replicas each get an API server at least, on either version
    four = ServeSpec.resolve(Settings(), GpuFacts.parse(TWO_H200 * 2), cpus=16)
    assert four.on_vllm(version).api_server_count >= 4


@pytest.mark.parametrize(("version", "jit_off"), [("0.32.0", True), ("0.26.0", False)])
def test_fast_turns_the_jit_warm_up_off_on_the_vllm_it_was_measured_on(
    version: str, jit_off: bool
) -> None:
    # vLLM 0.26's kernel config was never read here: its engine gets no flag it may refuse
    fast = Settings(start_mode="fast")
    for family in ("chandra", "olmocr"):
        spec = ServeSpec.resolve(fast, H100, FAMILIES[family](), cpus=16).on_vllm(version)
        engine = launch_argvs(spec, 8000, rpc_port=8100)["engine"]
        assert ("--kernel-config" in engine) is jit_off, (family, version)


def test_the_image_vllm_is_the_dockerfiles() -> None:
    for dockerfile in ("Dockerfile", ".runpod/Dockerfile"):
        text = (ROOT / dockerfile).read_text()
        assert f"ARG VLLM_VERSION=v{IMAGE_VLLM}\n" in text, dockerfile
    assert vllm_release("0.32.0+cpu") == (0, 32) and vllm_release("0.26.0") == (0, 26)
    assert vllm_release("unknown") == vllm_release(IMAGE_VLLM)


def test_the_server_sizes_the_front_ends_for_the_engines_own_vllm(loop, tmp_path: Path) -> None:
    python = tmp_path / "python"  # an interpreter whose vLLM is 0.26
    python.write_text("#!/bin/sh\necho 0.26.0\n")
    python.chmod(0o755)
    chandra = ServeSpec.resolve(
        Settings(vllm_python=str(python)), H100, FAMILIES["chandra"](), cpus=16
    )
    # the image's vLLM: an API server process a megapixel of its 6 MP pages, a quarter of 16 CPUs
    assert (chandra.api_server_count, chandra.renderer_num_workers) == (4, 1)
    server = VllmServer(chandra, ModelFiles(Settings().model))
    loop.run(server._size_for_engine())
    # 0.26: one API server (the engine waits for each), with as many renderer threads instead
    assert (server.spec.api_server_count, server.spec.renderer_num_workers) == (1, 4)
    assert server.spec.vllm_version == "0.26.0"


def test_a_family_that_declares_its_api_servers_gets_them_where_they_start_apart() -> None:
    qwen, dots = FAMILIES["qwen-vl"], FAMILIES["dots-ocr"]
    assert qwen.api_server_count == 1 and dots.api_server_count is None
    assert FAMILIES["qwen3.5"].api_server_count is None  # its subclass keeps the rule

    def front(family: type, gpu: GpuFacts = H100, **values: object) -> tuple[int, int]:
        model = Settings(**values).model.model_name
        served = family(model=model)
        spec = ServeSpec.resolve(Settings(**values), gpu, served, cpus=16).on_vllm("0.32.0")
        return spec.api_server_count, spec.renderer_num_workers

    assert front(qwen) == (1, 1)  # the default model: the 32B AWQ
    assert front(dots) == (4, 1)  # by its page budget: 11 MP, a quarter of 16 CPUs at most
    assert front(qwen, api_server_count=3) == (3, 1)  # the setting wins
    assert front(qwen, GpuFacts.parse(TWO_H200 * 2)) == (4, 1)  # one per replica at least
    # measured on the 32B only: a smaller one (or a sparse one) gets the rule's two
    for model in ("QuantTrio/Qwen3-VL-8B-Instruct-AWQ", "Qwen/Qwen3-VL-30B-A3B-Instruct"):
        assert front(qwen, model_name=model) == (2, 1), model
    assert ServeSpec.resolve(Settings(), H100, cpus=16).api_server_count == 1  # no family given


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
    content = QwenVl().content(ChatClient.image_url(b"\x89PNG"), Prompt("p", "1", "Transcribe."))
    body = ChatClient.request_body("ocr", content, temperature=0.0, max_tokens=99)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["repetition_detection"]["min_count"] >= 2
    assert body["max_tokens"] == 99 and body["temperature"] == 0.0 and "top_p" not in body
    image, text = body["messages"][0]["content"]
    assert image["image_url"]["url"].startswith("data:image/png;base64,")
    assert text == {"type": "text", "text": "Transcribe."}
    warm = ChatClient.request_body("ocr", content, temperature=0.2, max_tokens=9, top_p=0.9)
    assert warm["top_p"] == 0.9
    # a seeded request takes its whole batch off vLLM's fused top-p sampler, every step
    assert "seed" not in body and "seed" not in warm


def test_presets_and_their_rules() -> None:
    assert set(PRESETS) == {"legal-zh-tw", "markdown", "plain", "qwenvl-html"}
    assert PRESETS["qwenvl-html"].text == "qwenvl html"  # Qwen's own document-parsing prompt
    assert PRESETS["qwenvl-html"].answer == "qwenvl-html"
    legal = PRESETS["legal-zh-tw"].text
    for rule in ("背面", "【模糊】", "第十條", "「得」與「應」", "表格", "流程圖", "註腳"):
        assert rule in legal
    assert resolve(None, None, "plain") is PRESETS["plain"]
    custom = resolve(None, "Read the receipt.", "plain")
    assert custom.name == "custom" and custom.version == Prompt.custom("Read the receipt.").version
    assert custom.version != Prompt.custom("Read the invoice.").version


def external_engine(**values: object) -> VlmEngine:
    settings = Settings(**values)
    return VlmEngine(
        settings.vlm,
        settings.model,
        ExternalServer("http://127.0.0.1:1"),
        family=QwenVl(),
        concurrency=8,
    )


def test_fingerprint_changes_with_prompt_model_and_sampling() -> None:
    e = external_engine()
    fp = e.fingerprint(PRESETS["markdown"])
    assert fp["prompt"] == "markdown" and fp["prompt_version"] == "1"
    assert fp["sampling"]["temperatures"] == [0.0, 0.1, 0.1, 0.2]
    assert fp != e.fingerprint(PRESETS["plain"])
    other = external_engine(served_model_name="other")
    assert other.fingerprint(PRESETS["markdown"]) != fp
    fewer = external_engine(max_tokens=1000)
    assert fewer.fingerprint(PRESETS["markdown"]) != fp
    assert fp["family"] == "qwen-vl" and fp["sampling"]["max_tokens"] == 4096  # the family's
    assert external_engine(max_attempts=2).fingerprint(PRESETS["markdown"]) != fp


def test_auto_engine_choice(tmp_path: Path) -> None:
    kind, why = choose_engine_kind(Settings(model_name=str(tmp_path)), NO_GPU)
    assert kind is EngineKind.RAPIDOCR and "no CUDA GPU" in why
    kind, why = choose_engine_kind(Settings(model_name=str(tmp_path)), H100)
    assert kind is EngineKind.VLLM and "present" in why
    kind, why = choose_engine_kind(Settings(model_name="org/not-here"), H100)
    assert kind is EngineKind.RAPIDOCR and "model org/not-here not found" in why
    openai = Settings(engine="openai", openai_base_url="http://127.0.0.1:9/v1")
    assert choose_engine_kind(openai, NO_GPU)[0] is EngineKind.OPENAI
    # a hub id is present when the hub cache has it
    cache = tmp_path / "hub"
    (cache / "models--org--here").mkdir(parents=True)
    here = Settings(model_name="org/here", hf_hub_cache=str(cache))
    assert ModelFiles(here.model).present() and choose_engine_kind(here, H100)[0] is EngineKind.VLLM
    # the Hub image: no model baked, downloads allowed; on a GPU the vLLM engine downloads it,
    # and a later start finds it where that download put it (the network volume's cache)
    hub = Settings(model_name="org/later", hf_hub_offline=False)
    kind, why = choose_engine_kind(hub, H100)
    assert kind is EngineKind.VLLM and "downloaded at start (HF_HUB_OFFLINE=false)" in why
    assert choose_engine_kind(hub, NO_GPU)[0] is EngineKind.RAPIDOCR
    volume = tmp_path / "volume"
    (volume / "hf" / "hub" / "models--org--later").mkdir(parents=True)
    assert ModelFiles(hub.model, volume).present()


def test_a_taken_port_is_refused(loop) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = VllmServer(
            spec(NO_GPU, vllm_port=taken.getsockname()[1], vllm_python="false"),
            ModelFiles(Settings().model),
        )
        with pytest.raises(EngineError, match="already taken by another process"):
            loop.run(server.start())
    assert server.proc is None  # nothing was spawned


def test_an_exited_childs_log_is_read_to_its_end_though_its_group_holds_the_pipe(loop) -> None:
    # A launcher that exits while its fork server still imports vLLM leaves the log's pipe open:
    # the reason it wrote is read, and what is left of its process group is ended, so the log
    # ends rather than waiting on the importer
    import asyncio
    import os
    import signal

    server = VllmServer(spec(NO_GPU), ModelFiles(Settings().model))
    script = "sleep 600 & echo 'ValueError: max_model_len is too large'; sleep 0.2; exit 3"

    async def run() -> Child:
        proc = await asyncio.create_subprocess_exec(
            "sh", "-c", script, stdout=asyncio.subprocess.PIPE, start_new_session=True
        )
        child = Child("server", ["sh"], proc, asyncio.create_task(server._read_log(proc)))
        # as the server sees an exit: by its status (on Python 3.11 `wait()`, unless the exit
        # came first, also waits for the pipe, which the group's `sleep` holds)
        while proc.returncode is None:
            await asyncio.sleep(0.05)
        await server._read_to_end(child)
        return child

    child = loop.run(run())
    try:
        assert child.reader is not None and child.reader.done()  # the pipe closed: log ended
        assert "ValueError: max_model_len is too large" in server.tail
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]


def test_an_earlier_servers_connections_in_time_wait_do_not_take_its_port() -> None:
    import socket

    from vlm_ocr.loopback import port_taken

    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        served, _ = listener.accept()
        served.close()  # the server side closes first: its end waits in TIME_WAIT
        client.close()
        assert port_taken(port)  # still listening
    assert not port_taken(port)  # gone; what lingers is only TIME_WAIT


def test_nothing_runs_and_no_port_is_taken_before_start(monkeypatch) -> None:
    def no_probe() -> GpuFacts:
        raise AssertionError("the GPU was probed again")

    monkeypatch.setattr(GpuFacts, "probe", staticmethod(no_probe))
    picked: list[int] = []
    server = VllmServer(spec(NO_GPU), ModelFiles(Settings().model), pick_port=lambda: picked[9])
    assert server.children == [] and server.base_url == ""
    engine = make_engine(Settings(engine="vllm"), gpu=H100)  # the facts given: no probe
    assert engine.concurrency == 192 and engine.default_concurrency == 240  # a queue of 48


FAKE_VLLM = """
import sys, http.server, pathlib
port = int(sys.argv[sys.argv.index("--port") + 1])
taken = pathlib.Path(sys.argv[sys.argv.index("--taken") + 1])
if str(port) in taken.read_text().split():
    print(f"ERROR: [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): "
          "address already in use", flush=True)
    sys.exit(1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_a_starts_facts_read_as_the_engine_facts_carry_them() -> None:
    start = StartFacts(
        vllm_version="0.32.0",
        spawn_to_healthy_s=12.5,
        kv_cache_dtype="fp8",
        data_parallel_size=1,
        tensor_parallel_size=1,
        argv=["-m", "vllm.entrypoints.cli.main", "serve", "m"],
        split_start=True,
        fork_server=True,
        api_server_count=1,
        renderer_num_workers=1,
        start_mode="fast",
        max_num_batched_tokens=16384,
        triton_autotune="on",
        pid=42,
        cold_start={"engine_init_s": 7.2},
        caches={"state": "building", "folder": "/runpod-volume/vllm-cache/m-1"},
        logged={"gdn_prefill_kernel": "Triton/FLA", "kv_cache_tokens": "1,024"},
    )
    shown = start.as_json()
    # the log's facts beside the others; the version is the engine facts' own field; no
    # download where none ran
    assert shown["gdn_prefill_kernel"] == "Triton/FLA" and shown["kv_cache_tokens"] == "1,024"
    assert shown["api_server_count"] == 1 and shown["caches"]["state"] == "building"
    assert "logged" not in shown and "vllm_version" not in shown
    assert "downloaded" not in shown and "download_s" not in shown
    fetched = dataclasses.replace(start, downloaded={"resolved_commit": "abc"}, download_s=3.0)
    assert fetched.as_json()["downloaded"] == {"resolved_commit": "abc"}
    assert json.loads(json.dumps(shown)) == shown  # what the manifests and the log carry


def test_a_port_taken_before_the_server_bound_it_is_tried_again(loop, tmp_path: Path) -> None:
    # The first port picked as free is taken by the time the server binds it (another process
    # won the race): the server says "address already in use", and the start picks new ports.
    import sys

    from vlm_ocr.loopback import free_port

    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} {script} "$@"\n')
    python.chmod(0o755)
    taken = tmp_path / "taken"
    ports = [free_port() for _ in range(4)]
    taken.write_text(str(ports[0]))
    served = spec(
        NO_GPU, vllm_python=str(python), vllm_split_start=False, vllm_extra_args=f"--taken {taken}"
    )
    server = VllmServer(served, ModelFiles(Settings().model), pick_port=iter(ports).__next__)
    try:
        facts = loop.run(server.start())
    finally:
        loop.run(server.stop())
    assert server.base_url == f"http://127.0.0.1:{ports[2]}" and facts.spawn_to_healthy_s > 0


def test_the_cause_of_a_failed_start_is_one_line_of_the_engine_log() -> None:
    lines = [
        "INFO 11-30 engine.py:12] starting",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/site-packages/vllm/config.py", line 1, in check',
        "ValueError: max_model_len (8192) is greater than the derived max_model_len (4096)",
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ]
    reason = exit_reason("server", "while starting", 1, lines)
    assert reason == (
        "the vLLM server exited while starting with code 1: ValueError: max_model_len (8192) is "
        "greater than the derived max_model_len (4096)"
    )
    assert not address_in_use(lines)
    assert address_in_use(["[Errno 98] error while attempting to bind: address already in use"])


def test_an_engine_that_ends_quietly_or_is_killed_gets_the_likely_reason() -> None:
    server = VllmServer(spec(NO_GPU), ModelFiles(Settings().model))
    server.tail.append("INFO [core_client.py] MPClient: engine core exited unexpectedly")
    quiet = Child("engine", [], proc=SimpleNamespace(returncode=0))  # type: ignore[arg-type]
    killed = Child("server", [], proc=SimpleNamespace(returncode=-9))  # type: ignore[arg-type]
    assert server._exit_reason("while serving", quiet) == (
        "the vLLM engine exited while serving with code 0: its engine core process died "
        "without an error in the log (killed: out of memory is the usual cause)"
    )
    assert server._exit_reason("while serving", killed) == (
        "the vLLM server exited while serving with code -9 (killed: out of memory is the usual "
        "cause)"
    )


def test_a_pydantic_error_is_told_by_its_detail_line() -> None:
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
    unset = Settings().vllm
    assert kv_cache_dtype(unset, 9.0) == "fp8"  # H100, H200
    assert kv_cache_dtype(unset, 8.9) == "fp8"  # L40S, RTX 4090
    assert kv_cache_dtype(unset, 8.6) == "auto"  # A40, A6000
    assert kv_cache_dtype(unset, 8.0) == "auto"  # A100
    assert kv_cache_dtype(unset, None) == "auto"  # no GPU (the CPU build)
    assert kv_cache_dtype(Settings(kv_cache_dtype="fp8_e5m2").vllm, 8.0) == "fp8_e5m2"


def test_cuda_graph_sizes() -> None:
    vllm = Settings().vllm
    assert cuda_graph_sizes(vllm, 48) == [1, 2, 4, 8, 16, 32, 48]
    assert cuda_graph_sizes(vllm, 256)[-3:] == [192, 224, 256]
    assert cuda_graph_sizes(Settings(cuda_graph_sizes="8, 1,64").vllm, 256) == [1, 8, 64]


def test_gpu_facts_are_read_from_nvidia_smi_once(monkeypatch: pytest.MonkeyPatch) -> None:
    two = GpuFacts.parse(TWO_H200)
    assert two.memory_gib(1) == pytest.approx(140.4, abs=0.1)
    assert two.memory_gib(2) == pytest.approx(280.8, abs=0.1)
    assert two.capability == 9.0 and two.describe().startswith("NVIDIA H200, 143771 MiB; ")
    assert NO_GPU.memory_gib(1) is None and NO_GPU.describe() == "none" and not NO_GPU.present
    assert GpuFacts.parse("garbage\n").gpus == ()
    seqs = [default_max_num_seqs(gib) for gib in (140.4, 79.6, 44.99, 23.6, None)]
    assert seqs == [256, 192, 64, 32, 192]  # H200, H100, L40S, RTX 4090, no GPU to read
    calls: list[int] = []

    def probe() -> GpuFacts:
        calls.append(1)
        return L40S

    monkeypatch.setattr(GpuFacts, "probe", staticmethod(probe))

    def flag(engine: object) -> str:
        argv = server_argv(engine.server.spec, 0)  # type: ignore[attr-defined]
        return argv[argv.index("--max-num-seqs") + 1]

    # Resolved once in make_engine: the server's flag and the worker's concurrency agree.
    engine = make_engine(Settings(engine="vllm", max_num_seqs=0))
    assert engine.concurrency == 64 and flag(engine) == "64" and calls == [1]
    assert engine.default_concurrency == 80  # and 16 more waiting in the server's queue
    engine = make_engine(Settings(engine="vllm", max_num_seqs=100))
    assert engine.concurrency == 100 and flag(engine) == "100"
    external = make_engine(
        Settings(engine="openai", openai_base_url="http://127.0.0.1:1", max_num_seqs=0)
    )
    assert external.concurrency == 192


def test_benchmarks_fix_the_answer_length() -> None:
    body = ChatClient.request_body("m", [], temperature=0, max_tokens=5)
    assert "ignore_eos" not in body and body["repetition_detection"]
    fixed = ChatClient.request_body("m", [], temperature=0, max_tokens=800, ignore_eos=True)
    assert fixed["ignore_eos"] is True and "repetition_detection" not in fixed


def test_the_engine_facts_name_the_gemm_kernel_of_the_weights() -> None:
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


def test_the_engine_facts_name_the_sampler() -> None:
    # vLLM 0.32's and 0.33's words: FlashInfer's sampler, or vLLM's own and why.
    line = "INFO [topk_topp_sampler.py:149] Using FlashInfer for top-p & top-k sampling."
    assert facts_in(line) == {"sampler": "FlashInfer"}
    off = (
        "INFO [topk_topp_sampler.py:95] FlashInfer top-p/top-k sampling disabled via "
        "VLLM_USE_FLASHINFER_SAMPLER=0."
    )
    assert facts_in(off) == {
        "sampler": "vLLM's own, FlashInfer's not used: VLLM_USE_FLASHINFER_SAMPLER=0"
    }
    missing = (
        "WARNING [topk_topp_sampler.py:157] FlashInfer top-p/top-k sampling unavailable: "
        "unsupported compute capability 7.0; falling back. Set VLLM_USE_FLASHINFER_SAMPLER=0 "
        "to silence."
    )
    assert facts_in(missing) == {
        "sampler": "vLLM's own, FlashInfer's not used: unsupported compute capability 7.0"
    }


def test_the_engines_vllm_is_read_without_importing_it(loop, tmp_path: Path) -> None:
    import sys

    from vlm_ocr.engines.vllm.server import _engine_vllm_version

    # unpacked wheels with no package metadata (the GPU host's bundle): the version vLLM's build
    # wrote beside it, and vLLM itself never imported (its __init__ here would fail the read)
    package = tmp_path / "site" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit(3)\n")
    (package / "_version.py").write_text("__version__ = version = '0.26.0'\n")
    python = tmp_path / "vllm-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "site"} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    assert loop.run(_engine_vllm_version(str(python))) == "0.26.0"
    assert loop.run(_engine_vllm_version("false")) == "unknown"


def test_an_engine_python_without_vllm_is_said_with_the_cpu_engine_beside_it(tmp_path: Path):
    import subprocess
    import sys

    from vlm_ocr import samples
    from vlm_ocr_lab.standins.local_endpoint import worker_environ

    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(samples.pdf_from_pages(samples.LEGAL_PAGES[:1]))
    # this interpreter (the worker's own environment) has no vLLM
    env = worker_environ(ENGINE="vllm", VLLM_PYTHON=sys.executable, HF_HUB_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-m", "vlm_ocr", "run", str(pdf), "--out", str(tmp_path / "out")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2, done.stderr
    assert last.startswith("vlm-ocr run: the settings cannot work: "), last
    assert f"vLLM is not installed for VLLM_PYTHON={sys.executable!r}" in last
    assert "ENGINE=rapidocr for the CPU engine, which needs no GPU" in last
    assert "unexpectedly" not in done.stderr and "Traceback" not in done.stderr


def test_a_server_elsewhere_that_does_not_answer_is_named_by_its_setting(loop) -> None:
    from vlm_ocr.images import Budget
    from vlm_ocr.loopback import free_port
    from vlm_ocr.pipeline.worker import warmup_page

    url = f"http://127.0.0.1:{free_port()}/v1"  # a loopback port nothing listens on
    settings = Settings(engine="openai", openai_base_url=url, transport_retries=1)
    engine = make_engine(settings, gpu=NO_GPU)
    try:
        with pytest.raises(EngineError) as failed:
            loop.run(engine.start(warmup_page(Budget(settings.render.max_pixels))))
    finally:
        loop.run(engine.close())
    said = str(failed.value)
    assert said.startswith(f"warm-up page failed: the server at OPENAI_BASE_URL={url}"), said
    assert "did not answer (ConnectError" in said and "2 tries); start that server" in said
    assert "log lines" not in said and "\n" not in said  # one line, no log of ours to show


def test_rapidocrs_own_lines_go_through_the_workers_logging_without_colour(capfd) -> None:
    import io
    import logging

    import numpy as np

    from vlm_ocr.engines.rapidocr import load_ocr, read_lines

    ocr = load_ocr(threads=1)
    said = io.StringIO()
    handler = logging.StreamHandler(said)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        assert read_lines(ocr, np.full((256, 256, 3), 255, np.uint8)) == []  # a blank page
    finally:
        root.removeHandler(handler)
    assert "WARNING RapidOCR: The text detection result is empty" in said.getvalue()
    assert "\x1b[" not in said.getvalue() + capfd.readouterr().err  # no colour codes anywhere
