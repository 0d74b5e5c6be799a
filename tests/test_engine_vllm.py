"""The GPU engine path for real: vLLM's CPU build serving a tiny generated Qwen3-VL on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from vlm_ocr import samples
from vlm_ocr.engines.base import EngineOptions
from vlm_ocr.engines.factory import make_engine
from vlm_ocr.engines.families import QwenVl
from vlm_ocr.engines.vllm.argv import FORK_LAUNCHER
from vlm_ocr.pipeline.worker import build_worker, start_worker
from vlm_ocr.settings import EngineKind, Settings
from vlm_ocr_lab.standins.local_endpoint import worker_environ

from .support import ROOT, alive, b64, page_image, png_bytes, start_api
from .support.engine import (
    ENGINE_PYTHON,
    SERVER_ENV,
    SERVER_PIXELS,
    engine_env,
    engine_python,
    make_tiny_model,
    settings_from,
)
from .support.fault_proxy import FaultProxy, first_try_of_each_page

pytestmark = pytest.mark.engine
TWO_PAGES = {"pdf": {"base64": b64(samples.pdf_from_pages(samples.numbered_pages(2)))}}


@contextmanager
def serving(loop, settings: Settings):
    """A worker started as in production, its engine's server with what vLLM's CPU build reads
    from the environment; closed at the end."""
    with pytest.MonkeyPatch.context() as env:
        for key, value in SERVER_ENV.items():
            env.setenv(key, value)
        worker = loop.run(start_worker(settings))
        try:
            yield worker
        finally:
            loop.run(worker.close())


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("model") / "tiny-qwen3-vl")


@pytest.fixture(scope="module")
def vllm(loop, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """One engine server for the module, started by the worker as in production."""
    settings = settings_from(engine_env(tiny_model), output_dir=tmp_path_factory.mktemp("out"))
    with serving(loop, settings) as worker:
        yield worker, settings


def test_cold_start_records_engine_facts(vllm) -> None:
    worker, _ = vllm
    facts = worker.engine_facts()
    assert facts["name"] == "vllm" and facts["version"] == "0.32.0"
    assert facts["spawn_to_healthy_s"] > 0 and facts["warmup_s"] > 0
    assert facts["warmup_prompt_tokens"] > 100  # the warm-up page's image tokens came back
    assert int(facts["kv_cache_tokens"].replace(",", "")) > 0
    assert float(facts["max_concurrency"]) > 1
    assert facts["kv_cache_dtype"] == "auto" and facts["gpu"] == "none"
    assert facts["compute_capability"] is None
    assert facts["split_start"] is True  # the default: an API server and a headless engine
    assert "gdn_prefill_kernel" in facts
    argv = facts["argv"]
    assert argv[argv.index("--gdn-prefill-backend") + 1] == "triton"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "auto"
    # the cold start by vLLM's own lines; the CPU build compiles nothing (ENFORCE_EAGER)
    start = facts["cold_start"]
    assert 0 < start["first_log_line_at_s"] < start["api_server_ready_at_s"]
    assert start["engine_init_s"] > 0 and "not_logged" in start
    # and what vLLM does not time, between the lines that mark it
    assert start["first_log_line_at_s"] <= start["engine_config_at_s"]
    assert start["engine_config_at_s"] < start["engine_core_at_s"] < start["model_load_at_s"]
    assert set(start["untimed"]) >= {
        "engine_config_s",
        "engine_core_start_s",
        "worker_init_s",
        "before_engine_init_s",
    }
    assert facts["caches"] == {"state": "the container's own (no network volume)"}


def test_one_api_server_starts_as_several_a_child_of_the_fork_launcher(vllm) -> None:
    # On vLLM 0.32 the launcher runs one API server as vLLM runs several: a child of the server
    # process (which handshakes with the engine core meanwhile), forked from its fork server,
    # its counters on /metrics as a server in its own process has them
    worker, _ = vllm
    facts = worker.engine_facts()
    assert facts["api_server_count"] == 1 and facts["fork_server"] is True
    assert facts["argv"][:2] == FORK_LAUNCHER
    assert facts["argv"][facts["argv"].index("--api-server-count") + 1] == "1"
    server = worker.engine.server  # type: ignore[attr-defined]
    titles = [process_title(p) for p in descendants(server.proc.pid)]
    assert [t for t in titles if t.startswith("VLLM::APIServer")] == ["VLLM::APIServer_0"]
    metrics = httpx.get(server.base_url + "/metrics").text
    prompt = re.search(r"^vllm:prompt_tokens_total\{[^}]*\} ([\d.e+]+)", metrics, re.M)
    assert prompt is not None and float(prompt.group(1)) > 0, metrics[:2000]  # the warm-up's


def test_two_api_servers_forked_share_the_image_preprocessing_with_a_split_start(
    loop, tiny_model: Path, tmp_path: Path
) -> None:
    # One server for three things (each vLLM start on the CPU is most of a test's time):
    # - two API servers beside a headless engine (the split start), each preprocessing images;
    # - START_MODE=fast's flags, which vLLM 0.32 (the image's) takes: no torch.compile, decode
    #   steps as CUDA graphs (the CPU build captures none);
    # - VLLM_FORK_SERVER: the engine launcher and the API-server process each start a fork server
    #   before vLLM builds its config and hand vLLM that context, so the engine core and the API
    #   servers are the fork servers' children, not spawned ones.
    settings = settings_from(
        engine_env(tiny_model),
        output_dir=tmp_path,
        api_server_count=2,
        renderer_num_workers=2,  # vLLM takes it beside --mm-processor-cache-gb 0
        start_mode="fast",
        enforce_eager=False,
        vllm_fork_server=True,
    )
    with serving(loop, settings) as worker:
        server = worker.engine.server.proc.pid  # type: ignore[attr-defined]
        fronts = [p for p in descendants(server) if process_name(p).startswith("VLLM::APIServer")]
        children = {c.role: c for c in worker.engine.server.children}  # type: ignore[attr-defined]
        helpers = {
            role: {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in child_pids(c.proc.pid)}
            for role, c in children.items()
        }
        forked = {
            role: child_pids(p)
            for role, found in helpers.items()
            for p, cmd in found.items()
            if b"multiprocessing.forkserver" in cmd
        }
        titles = {role: sorted(process_title(p) for p in pids) for role, pids in forked.items()}
        result = loop.run(worker.run("two-fronts", TWO_PAGES))
        base_url = worker.engine.server.base_url  # type: ignore[attr-defined]
        metrics = httpx.get(base_url + "/metrics").text
    facts = result.engine
    assert facts["api_server_count"] == 2 and facts["split_start"] is True
    assert facts["renderer_num_workers"] == 2 and "--renderer-num-workers" in facts["argv"]
    assert facts["start_mode"] == "fast" and "--optimization-level" in facts["argv"]
    assert "--kernel-config" in facts["argv"]  # the JIT warm-up off, which 0.32 takes
    batched = facts["argv"][facts["argv"].index("--max-num-batched-tokens") + 1]
    assert str(facts["max_num_batched_tokens"]) == batched  # what the data's rows record
    assert facts["triton_autotune"] == "off (first valid config)"
    assert len(fronts) == 2  # the server process runs two API servers
    assert [p.status for p in result.pages] != [] and all(p.tries for p in result.pages)
    for role in ("engine", "server"):
        assert children[role].argv[1:3] == FORK_LAUNCHER
        # each launcher's children are multiprocessing's fork server and resource tracker alone
        assert all(b"multiprocessing." in cmd for cmd in helpers[role].values())
    # named by vLLM as its own (check.sh finds vLLM's processes by those names)
    assert titles == {
        "engine": ["VLLM::EngineCore"],
        "server": ["VLLM::APIServer_0", "VLLM::APIServer_1"],
    }
    assert facts["fork_server"] is True
    # the API servers' counters reach vLLM's /metrics (summed over its servers), as spawned ones'
    prompt = re.search(r"^vllm:prompt_tokens_total\{[^}]*\} ([\d.e+]+)", metrics, re.M)
    assert prompt is not None and float(prompt.group(1)) > 0, metrics[:2000]


def process_title(pid: int) -> str:
    """The command line a process shows (vLLM sets its processes' as their names)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_multi_page_job_records_tokens_finish_reasons_and_ladder(loop, vllm) -> None:
    worker, settings = vllm
    pdf = samples.pdf_from_pages(samples.numbered_pages(3, lines=2))
    result = loop.run(
        worker.run(
            "v1",
            {"pdf": {"base64": b64(pdf)}, "output_prefix": "vllm/one", "prompt": "legal-zh-tw"},
        )
    )
    out = settings.job.output_dir
    assert len(result.pages) == 3
    assert result.engine["name"] == "vllm" and result.engine["kv_cache_tokens"]
    assert result.fingerprint["prompt"] == "legal-zh-tw" and result.fingerprint["model"]
    for page in result.pages:
        assert (page.prompt_tokens or 0) > 100 and (page.output_tokens or 0) > 0
        # Random weights run on greedily to the token cap, so every page climbs the retry ladder;
        # at a raised temperature a page may stop on its own (then it is stored as good).
        assert page.attempts >= 2
        if page.finish_reason == "stop":
            assert page.status == "ok" and (out / str(page.key)).is_file()
        else:
            assert page.finish_reason in {"repetition", "length"}
            assert page.attempts == settings.vlm.max_attempts
            assert page.status == "failed" and "on all 3 attempts" in (page.error or "")
            assert not (out / f"vllm/one/page-{page.page:04d}.md").exists()
            if page.partial_key:
                assert page.partial_key == f"vllm/one/failed/page-{page.page:04d}.partial.md"
    manifest = json.loads((out / "vllm/one/manifest.json").read_text())
    assert [p["attempts"] for p in manifest["pages"]] == [p.attempts for p in result.pages]
    assert manifest["engine"]["version"] == "0.32.0"


def test_prompt_tokens_follow_the_pixel_budget(loop, vllm) -> None:
    # The model sees each page as it was rendered: a job's budget up to the server's MAX_PIXELS
    # is used as given, and one above it is capped (a note says so), never scaled down twice.
    worker, _ = vllm
    large = page_image(["Budget page."]).resize((1400, 1980))
    image = {"base64": b64(png_bytes(large))}
    seen = []
    for budget in (200_000, 800_000, 2_500_000):
        result = loop.run(worker.run(f"px{budget}", {"images": [image], "max_pixels": budget}))
        page = result.pages[0]
        w, h = page.width or 0, page.height or 0
        assert w * h <= min(budget, SERVER_PIXELS)
        seen.append((page.prompt_tokens or 0, QwenVl().image_tokens(w, h, SERVER_PIXELS)))
    assert "above this worker's page budget" in result.notes[0]
    (p0, i0), (p1, i1), (p2, i2) = seen
    assert i0 < i1 < i2
    # 32×32 pixels per token, as the processor counts
    assert p1 - p0 == i1 - i0 and p2 - p1 == i2 - i1


def second_client(worker, settings: Settings, out: Path) -> Settings:
    """Settings of another worker that uses the module's server as ENGINE=openai."""
    return settings.with_(
        engine=EngineKind.OPENAI, openai_base_url=worker.engine.base_url, output_dir=out
    )


def test_openai_engine_uses_the_same_client(loop, vllm, tmp_path: Path) -> None:
    worker, settings = vllm
    remote = loop.run(start_worker(second_client(worker, settings, tmp_path)))
    try:
        result = loop.run(
            remote.run("o1", {"images": [{"base64": b64(png_bytes(page_image(["x"])))}]})
        )
    finally:
        loop.run(remote.close())
    assert result.engine["name"] == "openai"
    assert (result.pages[0].prompt_tokens or 0) > 0 and result.pages[0].attempts >= 2


@contextmanager
def through_a_fault_proxy(loop, worker, settings: Settings, out: Path, **values: Any):
    """A second worker on ENGINE=openai whose page requests reach the module's server through
    the fault proxy; every answer 8 tokens long, taken as it comes (the weights are random)."""
    host, port = worker.engine.base_url.removeprefix("http://").split(":")
    proxy = FaultProxy((host, int(port)))
    other = second_client(worker, settings, out).with_(openai_base_url=proxy.url, **values)
    exact = None if values else 8
    remote = build_worker(other, make_engine(other, EngineOptions(exact_output_tokens=exact)))
    try:
        yield remote, proxy
    finally:
        loop.run(remote.close())
        proxy.close()


@pytest.mark.parametrize("fault", ["drop", "503", "cut"])
def test_a_page_request_lost_on_the_way_to_vllm_is_sent_again(
    loop, vllm, tmp_path: Path, fault: str
) -> None:
    worker, settings = vllm
    with through_a_fault_proxy(loop, worker, settings, tmp_path) as (remote, proxy):
        proxy.body_rule = first_try_of_each_page(fault)
        loop.run(remote.start())  # the warm-up page loses its first request too
        result = loop.run(remote.run("lost", TWO_PAGES))
    assert result.status == "ok", result.errors
    assert [(p.status, p.attempts, p.tries) for p in result.pages] == [("ok", 1, 2)] * 2
    assert sum(outcome == fault for _, _, outcome in proxy.seen) == 3


def test_an_http_400_from_vllm_fails_the_page_at_once_with_its_message(
    loop, vllm, tmp_path: Path
) -> None:
    worker, settings = vllm
    # more answer than the model's context (MAX_MODEL_LEN 2048): vLLM refuses the request
    with through_a_fault_proxy(loop, worker, settings, tmp_path, max_tokens=100_000) as (
        remote,
        proxy,
    ):
        loop.run(remote.start())
        result = loop.run(remote.run("too-long", TWO_PAGES))
    for page in result.pages:
        assert page.status == "failed" and page.tries == 1, page
        assert page.error and page.error.startswith("the engine server answered HTTP 400")
    assert [outcome for _, path, outcome in proxy.seen if "chat" in path].count("pass") == 3


def child_pids(pid: int) -> list[int]:
    """The direct children of a process the test started (Linux /proc)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def descendants(pid: int) -> list[int]:
    children = child_pids(pid)
    return children + [d for c in children for d in descendants(c)]


def engine_pids(worker_pid: int) -> dict[str, int]:
    """The worker's vLLM children by role: the API server, and the headless engine launcher."""
    pids = {}
    for pid in child_pids(worker_pid):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"vllm.entrypoints" in cmdline or b"fork_launcher.py" in cmdline:
            pids["engine" if b"--headless" in cmdline else "server"] = pid
    assert set(pids) == {"server", "engine"}, f"the worker's vLLM children: {pids}"
    return pids


def test_killing_the_engine_core_mid_job_fails_fast_and_exits(
    tiny_model: Path, tmp_path: Path
) -> None:
    env = worker_environ() | engine_env(
        tiny_model,
        MAX_TOKENS="200",
        MAX_CONCURRENT_PAGES="1",
        OUTPUT_DIR=str(tmp_path / "out"),
        RUNPOD_LOG_LEVEL="ERROR",
        LOG_LEVEL="INFO",
    )
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log_file:
        proc, url = start_api(env, timeout_s=600, stdout=subprocess.DEVNULL, stderr=log_file)
    first_page = threading.Event()

    def watch_log() -> None:  # the worker logs each page as it finishes
        with log_path.open() as lines:
            while not first_page.is_set() and proc.poll() is None:
                line = lines.readline()
                if re.search(r"job \S+: page \d+ \w+ \(1/40\)", line):
                    first_page.set()
                elif not line:
                    threading.Event().wait(0.1)  # at the end of the log: wait for more

    threading.Thread(target=watch_log, daemon=True).start()
    try:
        # The engine core, where an out-of-memory kill lands: forked by the launcher's fork
        # server (VLLM_FORK_SERVER, the default)
        launcher = engine_pids(proc.pid)["engine"]
        (core,) = [p for p in descendants(launcher) if _comm(p).startswith("VLLM::EngineCor")]
        pdf = samples.pdf_from_pages(samples.numbered_pages(40, lines=1))
        job = {"input": {"pdf": {"base64": b64(pdf)}, "output_prefix": "crash"}}

        def kill_after_first_page() -> None:
            if first_page.wait(600):
                os.kill(core, signal.SIGKILL)

        killer = threading.Thread(target=kill_after_first_page, daemon=True)
        killer.start()
        body = httpx.post(url + "/runsync", json=job, timeout=600).json()
        assert first_page.is_set()
        # The job ends with its error (RunPod marks it failed; the SDK's local server lists the
        # streamed pages, then the error).
        error = body.get("error") or body["output"][-1]["error"]
        assert "the vLLM engine exited while serving with code 0: its engine core process " in error
        assert "died without an error in the log (killed: out of memory" in error
        assert "this worker will be replaced" in error
        # The SDK's local API server drops the output of a failed job; the manifest has it.
        manifest = json.loads((tmp_path / "out/crash/manifest.json").read_text())
        pages = manifest["pages"]
        assert len(pages) == 40
        stored = [p for p in pages if p["status"] != "failed"]
        assert manifest["status"] == ("partial" if stored else "failed") and manifest["retry"]
        assert "this worker will be replaced" in manifest["error"]
        # Each page was read before the kill, or failed naming why the engine is gone.
        done = [p for p in pages if p.get("attempts")]
        gone = [p for p in pages if "exited while serving" in (p.get("error") or "")]
        assert done and gone and len(done) + len(gone) == 40
        for page in done:
            stored = page.get("key") or page.get("partial_key")
            if stored:
                assert (tmp_path / "out" / stored).is_file()
        assert proc.wait(timeout=60) == 1, "the worker exits non-zero so RunPod replaces it"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# SIGTERM (RunPod stopping a worker) through the worker's handler, which SIGINT shares
# (`entry/runpod.py`); SIGKILL (the kernel's out-of-memory kill) through the kernel alone.
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_engine_outlives_its_worker(
    sig: signal.Signals, tiny_model: Path, tmp_path: Path
) -> None:
    env = worker_environ() | engine_env(
        tiny_model, OUTPUT_DIR=str(tmp_path / "out"), RUNPOD_LOG_LEVEL="ERROR"
    )
    proc, _ = start_api(env, timeout_s=600, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # the two children and what they started: the engine core, its helpers
        engines = [p for pid in engine_pids(proc.pid).values() for p in (pid, *descendants(pid))]
        assert len(engines) > 2
        proc.send_signal(sig)
        proc.wait(timeout=60)
        for _ in range(300):  # the engine gets SIGTERM from the kernel or the worker
            if not any(alive(pid) for pid in engines):
                break
            threading.Event().wait(0.1)
        assert not any(alive(pid) for pid in engines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


@pytest.mark.parametrize("split", [True, False], ids=["split", "single"])
def test_a_failed_start_says_why_and_leaves_no_process(loop, tiny_model: Path, split) -> None:
    # The tiny model's context is 4,096 tokens: vLLM refuses 8,192 while reading its config,
    # and the error carries vLLM's own line; no process of the start is left over.
    from vlm_ocr.engines.gpu import GpuFacts, host_cores
    from vlm_ocr.engines.model_files import ModelFiles
    from vlm_ocr.engines.vllm.argv import ServeSpec
    from vlm_ocr.engines.vllm.server import VllmServer
    from vlm_ocr.errors import EngineError

    settings = settings_from(engine_env(tiny_model), max_model_len=8192, vllm_split_start=split)
    server = VllmServer(
        ServeSpec.resolve(settings, GpuFacts(), cpus=host_cores()), ModelFiles(settings.model)
    )
    with pytest.raises(EngineError) as failed:
        loop.run(server.start())
    message = str(failed.value)
    assert message.startswith("the vLLM ") and " exited while starting with code 1: " in message
    assert "max_model_len" in message and "8192" in message, message
    assert [c.proc.returncode is not None for c in server.children] == [True] * (1 + split)


def test_a_json_schema_is_answered_by_guided_decoding(loop, vllm) -> None:
    # Random weights write anything; guided decoding lets them write only JSON of the schema,
    # and the worker validates it before storing page-0001.json.
    import jsonschema

    worker, settings = vllm
    # Small enough for the test's MAX_TOKENS (24) with the tiny model's near-character tokens.
    schema = {
        "type": "object",
        "properties": {"currency": {"enum": ["EUR", "USD"]}},
        "required": ["currency"],
        "additionalProperties": False,
    }
    pdf = samples.pdf_from_pages([["Invoice 7", "Total 12.50 EUR", "Paid in full"]])
    job = {"pdf": {"base64": b64(pdf)}, "output_prefix": "vllm/json", "json_schema": schema}
    result = loop.run(worker.run("json-1", job))
    page = result.pages[0]
    out = settings.job.output_dir
    partial = page.partial_key and (out / page.partial_key).read_text()
    assert page.status == "ok", (page.error, partial)
    assert page.key == "vllm/json/page-0001.json"
    stored = json.loads((out / page.key).read_text())
    jsonschema.validate(stored, schema)
    assert result.fingerprint["prompt"] == "extract-json+json"


def test_a_second_opinion_beside_real_engine_requests(loop, vllm, tmp_path: Path) -> None:
    # Through the same server as a second client (ENGINE=openai), every answer 8 tokens long
    # (ignore_eos): each page is stored, and the CPU engine's reading disagrees with the random
    # text, so every page is flagged for review with its agreement.
    worker, settings = vllm
    other = second_client(worker, settings, tmp_path)
    remote = build_worker(other, make_engine(other, EngineOptions(exact_output_tokens=8)))
    loop.run(remote.start())
    try:
        pdf = samples.pdf_from_pages(samples.numbered_pages(2, lines=2))
        job = {"pdf": {"base64": b64(pdf)}, "second_opinion": True}
        result = loop.run(remote.run("o2", job))
    finally:
        loop.run(remote.close())
    assert [p.status for p in result.pages] == ["ok", "ok"], result.error
    for page in result.pages:
        assert page.output_tokens == 8 and page.review is True
        assert 0 <= (page.agreement or 0) < 0.5
    assert result.totals.review == 2


def test_an_olmocr_model_is_served_and_read_as_its_family(loop, tmp_path_factory) -> None:
    # A tiny Qwen2.5-VL in a folder named like olmOCR: the config's architecture and the name
    # make it the olmocr family, served with its flags and asked with its prompt and ladder.
    # Its random answers have no front matter: every attempt is refused by the parser, and the
    # PDF page falls back to its text layer, flagged; an image page has none and fails.
    model = make_tiny_model(tmp_path_factory.mktemp("model") / "tiny-olmOCR-2", "qwen2_5_vl")
    out = tmp_path_factory.mktemp("olmocr-out")
    settings = settings_from(engine_env(model), output_dir=out, max_attempts=2)
    with serving(loop, settings) as worker:
        facts = worker.engine_facts()
        pdf = samples.pdf_from_pages([["Clause 9: the text layer of this page."]])
        on_pdf = loop.run(worker.run("olm-pdf", {"pdf": {"base64": b64(pdf)}}))
        image = {"base64": b64(png_bytes(page_image(["An image has no text layer."])))}
        on_image = loop.run(worker.run("olm-img", {"images": [image]}))
        refused = loop.run(worker.run("olm-prompt", {"images": [image], "prompt": "plain"}))
    assert facts["family"] == "olmocr" and "tiny-olmOCR-2" in facts["family_detected_by"]
    assert facts["prompt"] == "olmocr-v4-yaml" and facts["thinking_checked"]
    argv = facts["argv"]
    assert "--mm-processor-kwargs" not in argv  # Qwen2.5-VL's processor as it ships
    [page] = on_pdf.pages
    assert page.status == "ok" and page.attempts == 2, page
    assert (page.fallback or "").endswith(
        "on all 2 attempts (temperatures 0.1, 0.1; MAX_TOKENS 24)"
    )
    assert (out / str(page.key)).read_text() == "Clause 9: the text layer of this page."
    assert max(page.width or 0, page.height or 0) == 1288  # olmOCR's page size
    assert (
        on_pdf.fingerprint["family"] == "olmocr"
        and on_pdf.fingerprint["prompt"] == "olmocr-v4-yaml"
    )
    [failed] = on_image.pages
    assert failed.status == "failed" and failed.fallback is None and failed.attempts == 2
    assert (refused.error or "").startswith("input.prompt: ") and "olmocr family" in (
        refused.error or ""
    )


def test_a_lightonocr_3_model_is_served_by_its_makers_flags_and_reads_its_grounding(
    loop, tmp_path_factory
) -> None:
    # A tiny Qwen3.5 (gated-delta-net layers, LightOnOCR-3-0.8B's shapes scaled down) in a folder
    # named like it: its config and its name make it the lighton-ocr-3 family, served with its
    # makers' flags (vLLM 0.32 takes them), thinking off by the chat template's switch, its
    # pages at 2,048 px and asked with the page and the word `grounding`. Its random answers
    # carry no block marker: each is kept as text, with a note.
    model = make_tiny_model(tmp_path_factory.mktemp("model") / "tiny-LightOnOCR-3-0.8B", "qwen3_5")
    out = tmp_path_factory.mktemp("lighton3-out")
    # room for a whole page at 2,048 px (2,880 image tokens) in the context and in one batch
    env = engine_env(model, MAX_MODEL_LEN="4096", MAX_NUM_BATCHED_TOKENS="4096")
    settings = settings_from(env, output_dir=out, max_attempts=2)
    with serving(loop, settings) as worker:
        facts = worker.engine_facts()
        image = {"base64": b64(png_bytes(page_image(["A page for LightOnOCR-3."])))}
        result = loop.run(worker.run("l3", {"images": [image]}))
    assert (
        facts["family"] == "lighton-ocr-3"
        and "tiny-LightOnOCR-3-0.8B" in (facts["family_detected_by"])
    )
    assert facts["prompt"] == "lightonocr-grounding" and facts["thinking"] == "off"
    assert facts["thinking_checked"] and facts["gdn_layers"] == 3
    assert facts["warmup_prompt_tokens"] > 2880  # the warm-up page at 2,048 px, as sent
    assert facts["gdn_prefill_kernel"] == "CPU"  # what vLLM's CPU build runs them with
    argv = facts["argv"]
    assert argv[argv.index("--limit-mm-per-prompt") + 1] == '{"image": 1}'
    assert "--no-enable-prefix-caching" in argv and "--mm-processor-kwargs" not in argv
    assert argv[argv.index("--default-chat-template-kwargs") + 1] == '{"enable_thinking": false}'
    assert argv[argv.index("--gdn-prefill-backend") + 1] == "triton"
    [page] = result.pages
    assert page.status in ("ok", "failed") and page.tries, page  # a random model's answer
    assert result.fingerprint["family"] == "lighton-ocr-3"


def test_two_workers_starting_at_once_on_one_volume_and_a_third_after_them(
    loop, tiny_model: Path, tmp_path: Path
) -> None:
    # vLLM's CPU build compiling (no ENFORCE_EAGER): it writes its AOT compiled model into the
    # key's folder. Two starts at once on one volume: one builds the key's folder, the other a
    # private one; both get the image's model-class inspection (made here as the image's build
    # makes it) and never run their own. A third start reuses the published folder and loads
    # what it can of it; whatever it had to do again is in its facts, and it starts all the same.
    from vlm_ocr.engines.gpu import GpuFacts, host_cores
    from vlm_ocr.engines.model_files import ModelFiles
    from vlm_ocr.engines.vllm.argv import ServeSpec
    from vlm_ocr.engines.vllm.caches import COMPLETE
    from vlm_ocr.engines.vllm.server import StartFacts, VllmServer

    seed = tmp_path / "seed"
    script = ROOT / "builder/seed_vllm_cache.py"
    made = subprocess.run(
        [str(ENGINE_PYTHON), str(script), "--out", str(seed), str(tiny_model)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0 and "Qwen3VLForConditionalGeneration: inspected" in made.stdout
    volume = tmp_path / "volume"
    volume.mkdir()
    settings = settings_from(
        engine_env(tiny_model),
        enforce_eager=False,
        start_mode="throughput",  # compiled (its family, Qwen3-VL's, starts `fast`)
        vllm_cache_seed=str(seed),
        vllm_startup_timeout_s=1800,
    )

    def server() -> VllmServer:
        spec = ServeSpec.resolve(settings, GpuFacts(), cpus=host_cores())
        return VllmServer(spec, ModelFiles(settings.model, volume=volume))

    async def start_and_publish(
        servers: list[VllmServer],
    ) -> list[tuple[StartFacts, dict[str, Any] | None]]:
        """Each start's facts, and its caches' state once the engine served (published)."""
        try:
            facts = await asyncio.gather(*(s.start() for s in servers))
            published = await asyncio.gather(*(s.ready() for s in servers))
        finally:
            await asyncio.gather(*(s.stop() for s in servers), return_exceptions=True)
        return list(zip(facts, published, strict=True))

    with pytest.MonkeyPatch.context() as env:
        for key, value in (SERVER_ENV | {"VLLM_LOGGING_LEVEL": "DEBUG"}).items():
            env.setenv(key, value)
        env.delenv("VLLM_CACHE_ROOT", raising=False)
        two = loop.run(start_and_publish([server(), server()]))
        [(third, caches)] = loop.run(start_and_publish([server()]))
    assert sorted(published["state"] for _, published in two if published) == [
        "built and published",
        "built privately (another worker was building the same key)",
    ]
    for facts, published in two:
        assert facts.cold_start["model_inspection_s"] < 1  # read from the seeded entry
        assert published is not None
        assert any("Qwen3VLForConditionalGeneration" in e for e in published["seeded"])
    [key] = [p for p in (volume / "vllm-cache").iterdir()]  # the private folder is gone
    assert (key / COMPLETE).is_file()
    assert list(key.glob("vllm/modelinfos/*Qwen3VLForConditionalGeneration.json"))
    assert list(key.glob("vllm/torch_compile_cache/torch_aot_compile/*/rank_0_0/model"))
    cold = third.cold_start
    assert caches == {"state": "reused", "folder": str(key)}
    assert "seeded" not in caches  # the folder had the entries already
    # the CPU build's eager backend saves a compiled model it cannot load again: that start
    # compiles again, says why, and serves
    assert cold["compile_cache"] in ("hit", "miss")
    if cold["compile_cache"] == "miss":
        assert cold["compile_cache_load_failure"]
        assert cold["redone_on_warm_caches"][0].startswith("torch.compile (miss: ")
    else:
        assert "redone_on_warm_caches" not in cold


def test_the_sampler_bench_times_vllms_own_top_p_filter() -> None:
    # dev/gpu/sampler_bench.py, run on the GPU host, on the engine's build here: each case is
    # timed or says why it cannot run (the CPU build has neither Triton kernels nor FlashInfer)
    script = ROOT / "dev/gpu/sampler_bench.py"
    args = ["--device", "cpu", "--vocab", "4096", "--batches", "4", "--top-p", "0.9"]
    run = subprocess.run(
        [str(ENGINE_PYTHON), str(script), *args, "--repeat", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    for kind in ("flat", "peaked"):
        assert any(
            re.fullmatch(rf"batch +4 {kind} +softmax \+ sample +\d+\.\d{{3}}", x) for x in lines
        )
        timed = rf"batch +4 {kind} +top-p, PyTorch +p=0\.9 +\d+\.\d{{3}}"
        assert any(re.fullmatch(timed, line) for line in lines), run.stdout
        for name in ("Triton", "FlashInfer"):
            said = rf"batch +4 {kind} +top-p, {name} +p=0\.9: (not loaded|failed) \(.+\)"
            assert any(re.fullmatch(said, line) for line in lines), run.stdout


def test_vllm_reads_a_key_given_in_vllm_extra_args_into_the_workers_compilation_config() -> None:
    # vLLM's own parser on the worker's line: the key the user added, the CUDA graph sizes and
    # Inductor options the worker pinned in the same object, and a plain flag after them
    from vlm_ocr.engines.gpu import GpuFacts
    from vlm_ocr.engines.vllm.argv import ServeSpec, server_argv

    extra = "--compilation-config.compile_mm_encoder=true --seed 7"
    settings = Settings(start_mode="throughput", vllm_extra_args=extra)
    h100 = GpuFacts.parse("NVIDIA H100 80GB HBM3, 81559 MiB, 9.0")
    argv = server_argv(ServeSpec.resolve(settings, h100, cpus=16), 9000)
    assert argv[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]
    read = (
        "import json, sys\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "from vllm.entrypoints.launchers.cli_args import make_arg_parser\n"
        "args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])\n"
        "c = args.compilation_config\n"
        "print(json.dumps([args.seed, c.compile_mm_encoder, c.cudagraph_capture_sizes,"
        " c.inductor_compile_config]))\n"
    )
    done = subprocess.run(
        [str(engine_python()), "-c", read, *argv[5:]], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seed, compiled, sizes, inductor = json.loads(done.stdout.splitlines()[-1])
    assert seed == 7 and compiled is True and sizes[-1] == 192
    assert inductor["combo_kernels"] and not inductor["benchmark_combo_kernel"]
