"""A setting no job can run with is refused when the worker starts, by name, with its value and
what is accepted; any value of any declared setting is either taken or refused so, never a
traceback."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlm_ocr.cli.main import main as vlm_ocr
from vlm_ocr.errors import ConfigError
from vlm_ocr.images import Budget
from vlm_ocr.pipeline.worker import build_worker, warmup_page
from vlm_ocr.settings import BUCKET_REQUIRED, Settings, declared_fields, env_name

NAMES = [name for name, _ in declared_fields()]
# Values a person might type, or a form might leave, for any setting.
odd = st.sampled_from(
    [
        "-1",
        "0",
        "1e400",
        "nan",
        "inf",
        "-inf",
        "0x10",
        " 5",
        "1.5",
        "99999999999999999999",
        "maybe",
        "yes",
        "TRUE",
        "none",
        "null",
        "[]",
        "{}",
        "'",
        '"',
        "\\",
        "a b",
        "\x00",
        "é",
        "/",
    ]
)
values = odd | st.text(max_size=30) | st.integers(-(10**12), 10**12).map(str)
relaxed = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@relaxed
@given(st.sampled_from(NAMES), values)
def test_any_value_of_any_setting_is_taken_or_refused_by_name(name: str, value: str) -> None:
    variable = env_name(name)
    try:
        Settings.from_env({variable: value})
    except ConfigError as exc:
        message = str(exc)
        # a rule over several settings (a key without its secret) names them all
        assert f"{variable}={value!r}: " in message or variable in message, message
        assert "accepted" in message or "needs" in message or "go together" in message, message


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"DEFAULT_PROMPT": "poetry"}, "DEFAULT_PROMPT='poetry': no such preset; accepted: "),
        ({"LOG_LEVEL": "chatty"}, "LOG_LEVEL='chatty': not a log level; accepted: DEBUG, INFO"),
        ({"MAX_PIXELS": "1000"}, "MAX_PIXELS='1000': Input should be greater than or equal to"),
        ({"REQUEST_TIMEOUT_S": "nan"}, "REQUEST_TIMEOUT_S='nan': Input should be a finite"),
        ({"ENGINE": "gpu"}, "ENGINE='gpu': Input should be 'auto', 'vllm', 'openai' or"),
        ({"KV_CACHE_DTYPE": "fp4"}, "KV_CACHE_DTYPE='fp4': not a KV-cache dtype; accepted: auto"),
        ({"GDN_PREFILL_BACKEND": "cuda"}, "GDN_PREFILL_BACKEND='cuda': not a GDN prefill"),
        ({"CUDA_GRAPH_SIZES": "1,x"}, "CUDA_GRAPH_SIZES='1,x': accepted: batch sizes from 1"),
        ({"VLLM_EXTRA_ARGS": "--a 'b"}, 'VLLM_EXTRA_ARGS="--a \'b": not shell words'),
        (  # a split start's engine never reads the API servers' shared memory: requests hang
            {"VLLM_EXTRA_ARGS": "--mm-tensor-ipc=torch_shm"},
            "VLLM_EXTRA_ARGS: `--mm-tensor-ipc torch_shm` needs one `vllm serve` process",
        ),
        ({"OPENAI_BASE_URL": "localhost:8000"}, "OPENAI_BASE_URL='localhost:8000': not a URL"),
        ({"BUCKET_PREFIX": "a//b"}, "BUCKET_PREFIX='a//b': not a key prefix; accepted: "),
        ({"RENDER_PROCESSES": "100000"}, "RENDER_PROCESSES='100000': Input should be less"),
        ({"BUCKET_ACCESS_KEY_ID": "k"}, "BUCKET_ACCESS_KEY_ID is set but BUCKET_ENDPOINT_URL,"),
        ({"ENGINE": "openai"}, "ENGINE=openai needs OPENAI_BASE_URL"),
        ({"MAX_PIXELS": "x", "MAX_TOKENS": "-2"}, "MAX_PIXELS='x': Input should be a valid"),
    ],
)
def test_each_unworkable_setting_is_named_with_its_value_and_what_is_accepted(
    env: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env(env)
    assert says in str(refused.value)
    if len(env) > 1:  # every bad variable at once, not the first alone
        assert all(f"{name}=" in str(refused.value) for name in env)


def test_vllms_shared_memory_tensors_are_taken_with_one_vllm_serve() -> None:
    from vlm_ocr.engines.gpu import GpuFacts
    from vlm_ocr.engines.vllm.argv import ServeSpec, launch_argvs

    one = Settings.from_env(
        {"VLLM_EXTRA_ARGS": "--mm-tensor-ipc torch_shm", "VLLM_SPLIT_START": "false"}
    )
    argvs = launch_argvs(ServeSpec.resolve(one, GpuFacts(), cpus=8), 8000, rpc_port=8100)
    assert list(argvs) == ["server"]  # one `vllm serve`, its engine core its own child
    at = argvs["server"].index("--mm-tensor-ipc")
    assert argvs["server"][at + 1] == "torch_shm"


BUCKET_VALUES = {
    "BUCKET_ENDPOINT_URL": "https://acct.r2.cloudflarestorage.com",
    "BUCKET_NAME": "ocr",
    "BUCKET_ACCESS_KEY_ID": "key-id",
    "BUCKET_SECRET_ACCESS_KEY": "secret-key",
}
PARTIAL_BUCKETS = [
    names
    for size in range(1, len(BUCKET_REQUIRED))
    for names in itertools.combinations([env_name(n) for n in BUCKET_REQUIRED], size)
]


@pytest.mark.parametrize("given", PARTIAL_BUCKETS, ids="+".join)
def test_a_part_of_the_bucket_settings_is_refused_naming_what_is_missing(
    given: tuple[str, ...], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a user meets it: `vlm-ocr run` with the variables in its environment.
    for name in given:
        monkeypatch.setenv(name, BUCKET_VALUES[name])
    assert vlm_ocr(["run", "some.pdf"]) == 2
    said = capsys.readouterr().err.strip()
    missing = [n for n in BUCKET_VALUES if n not in given]
    assert said.count("\n") == 0 and "the bucket settings go together" in said
    gave, lacks = said.split(" set but ")
    assert all(n in gave for n in given) and all(n not in gave for n in missing), said
    assert all(n in lacks for n in missing) and all(n not in lacks for n in given), said
    assert "secret-key" not in said and "key-id" not in said  # names, never values


def test_all_bucket_settings_or_none_are_taken() -> None:
    assert Settings.from_env(BUCKET_VALUES).bucket.configured
    assert not Settings.from_env({}).bucket.configured


@pytest.mark.parametrize("engine", ["rapidocr", "vllm", "openai"])
def test_a_results_folder_that_cannot_be_written_is_refused_at_start(
    tmp_path: Path, engine: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = {"ENGINE": engine, "OUTPUT_DIR": str(blocker / "out")}
    if engine == "openai":
        env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    with pytest.raises(ConfigError, match=r"OUTPUT_DIR='.*a-file/out': it cannot be written"):
        build_worker(Settings.from_env(env))


def test_a_model_family_no_family_knows_is_refused_at_start(tmp_path: Path) -> None:
    env = {"ENGINE": "vllm", "MODEL_FAMILY": "tesseract", "OUTPUT_DIR": str(tmp_path)}
    with pytest.raises(ConfigError, match=r"MODEL_FAMILY='tesseract': no such family; accepted"):
        build_worker(Settings.from_env(env))


def test_an_engine_interpreter_that_cannot_run_is_refused_by_name(loop, tmp_path: Path) -> None:
    settings = Settings(engine="vllm", vllm_python=str(tmp_path / "no-python"))
    worker = build_worker(settings.with_(output_dir=tmp_path / "out"))
    with pytest.raises(ConfigError, match=r"VLLM_PYTHON='.*no-python': it cannot be run"):
        loop.run(worker.engine.start(warmup_page(Budget(settings.render.max_pixels))))
