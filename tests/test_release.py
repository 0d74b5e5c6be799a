"""The image and its release files agree with the code: settings, Hub files, Dockerfile, builder."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from vlm_ocr.contract import JobInput
from vlm_ocr.engines.families import FAMILIES, detect
from vlm_ocr.settings import ModelSettings, Settings
from vlm_ocr_lab.docs.hub_presets import description, hub_presets
from vlm_ocr_lab.docs.settings_docs import HUB_OMITTED, hub_env, image_env, settings_table

from .support import ROOT, make_snapshot
from .support.engine import engine_python

DOWNLOAD = ROOT / "builder" / "download_model.py"
DEFAULT_MODEL = ModelSettings.model_fields["model_name"].default


def test_hub_json_lists_every_setting_with_the_images_default() -> None:
    hub = json.loads((ROOT / ".runpod/hub.json").read_text())
    assert hub["type"] == "serverless" and hub["config"]["runsOn"] == "GPU"
    assert hub["config"]["containerDiskInGb"] >= 40 and hub["config"]["gpuCount"] >= 1
    listed = {e["key"]: e["input"] for e in hub["config"]["env"]}
    declared = [name for name, _, _ in settings_table()]
    omitted = {name.upper() for name in HUB_OMITTED}
    # every setting is in the form, or left out on purpose (plumbing), never both or neither
    assert list(listed) == [name for name in declared if name not in omitted]
    assert omitted <= set(declared)
    # the form's defaults are what the Hub's image runs with: its ENV where it sets one
    image = image_env((ROOT / ".runpod/Dockerfile").read_text())
    for entry in hub_env(image):
        spec = listed[entry["key"]]
        assert spec.get("default") == entry["input"].get("default"), entry["key"]
        assert spec["type"] in {"string", "number", "boolean"} and spec["description"]
    assert listed["ENGINE"]["default"] == image["ENGINE"] == "vllm"
    # the form's descriptions too: written from the declarations (and the families)
    assert hub["config"]["env"] == hub_env(image), "run settings_docs --hub-env"
    for preset in hub["config"]["presets"]:
        assert set(preset["defaults"]) <= set(listed)


def test_every_family_has_a_hub_preset_that_names_its_licence() -> None:
    hub = json.loads((ROOT / ".runpod/hub.json").read_text())
    told: dict[str, str] = {}
    for preset in hub["config"]["presets"]:
        found = detect(None, preset["defaults"]["MODEL_NAME"])
        assert found.warning is None, preset["name"]
        told[preset["defaults"]["MODEL_NAME"]] = found.family.name
        assert "licence" in preset["name"] or "Apache-2.0" in preset["name"], preset["name"]
    assert set(told.values()) == set(FAMILIES)
    # written from the families' checkpoints, as is the description that names them
    assert hub["config"]["presets"] == hub_presets(), "run family_docs --hub .runpod/hub.json"
    assert hub["description"] == description()


def test_the_release_matrix_builds_the_default_an_fp8_and_an_ocr_image() -> None:
    text = (ROOT / ".github/workflows/release.yml").read_text()
    matrix = json.loads(re.search(r"echo 'matrix=(\[.*?\])'", text).group(1))
    assert matrix[0] == DEFAULT_MODEL
    assert any(m.endswith("-FP8") and detect(None, m).family.name == "qwen-vl" for m in matrix)
    assert any(detect(None, m).family.name not in {"qwen-vl", "qwen3.5"} for m in matrix)


def test_every_test_input_validates_against_the_job_schema() -> None:
    tests = json.loads((ROOT / ".runpod/tests.json").read_text())
    assert tests["tests"]
    for case in tests["tests"]:
        JobInput.parse(case["input"])
        assert case["timeout"] > 0
    JobInput.parse(json.loads((ROOT / "test_input.json").read_text())["input"])


def test_dockerfile_env_names_are_declared_settings() -> None:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    names = set()
    for line in text.splitlines():
        if line.startswith("ENV "):
            names |= set(re.findall(r"([A-Z][A-Z0-9_]*)=", line))
    declared = {name for name, _, _ in settings_table()}
    assert names and names <= declared, names - declared
    assert {"VLLM_PYTHON", "GDN_PREFILL_BACKEND", "HF_HUB_OFFLINE"} <= names
    assert "KV_CACHE_DTYPE" not in names  # resolved per GPU at start unless a user sets it
    assert "FROM vllm/vllm-openai:${VLLM_VERSION}" in text and "ARG VLLM_VERSION=v0.32.0" in text
    # the token is a build secret, never a build argument
    assert "--mount=type=secret,id=hf_token" in text and "ARG HF_TOKEN" not in text
    # the weights come first (a stage of their own), then the requirements, then the code, so
    # neither a dependency bump nor a code change downloads or pushes the weights again
    assert (
        text.index("COPY --from=weights /models /models")
        < text.index("COPY builder/requirements.txt")
        < text.index("COPY src")
    )
    # the product's package alone: the lab (benchmarks, evaluation, stand-ins) stays out
    assert "COPY src/vlm_ocr ./src/vlm_ocr" in text and "COPY src ./src" not in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".venv-engine", "tests"} <= set(ignored)


def test_image_defaults_match_the_default_model() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert f"ARG MODEL_NAME={DEFAULT_MODEL}" in text


# --- builder/download_model.py --------------------------------------------------------------


def bake(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(engine_python()), str(DOWNLOAD), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_complete_snapshot_from_the_hub_cache_is_baked_and_recorded(tmp_path: Path) -> None:
    """The real snapshot_download, offline, against a cache laid out as the hub lays it out."""
    import os

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--acme--tiny-vl"
    make_snapshot(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    record = tmp_path / "baked-model.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = bake(
        "--model",
        "acme/tiny-vl",
        "--cache-dir",
        str(tmp_path / "hub"),
        "--token-file",
        str(tmp_path / "no-token"),
        "--record",
        str(record),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 weight files" in proc.stdout
    doc = json.loads(record.read_text())
    assert doc["repo"] == "acme/tiny-vl" and doc["resolved_commit"] == commit
    assert (
        doc["files"]["model-00002-of-00002.safetensors"]
        == 8
        + len(json.dumps({"w": {"dtype": "F32", "shape": [500], "data_offsets": [0, 2000]}}))
        + 2000
    )
    assert doc["bytes"] == sum(doc["files"].values())


def test_the_code_a_config_names_is_downloaded_with_the_weights() -> None:
    # dots.ocr's config.json names its configuration class in `auto_map`: without the module the
    # engine cannot read the config (transformers has no dots_ocr), so the worker never starts
    import fnmatch
    import importlib.util

    spec = importlib.util.spec_from_file_location("download_model", DOWNLOAD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = json.loads((ROOT / "examples" / "dots.ocr.config.json").read_text())
    named = {ref.split(".")[0] + ".py" for ref in config.get("auto_map", {}).values()}
    for name in named | {"configuration_dots.py", "config.json", "model.safetensors"}:
        assert any(fnmatch.fnmatch(name, p) for p in module.ALLOW_PATTERNS), name


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (
            lambda d: (d / "model-00002-of-00002.safetensors").unlink(),
            "model-00002-of-00002.safetensors: listed in the index but missing",
        ),
        (
            lambda d: (d / "model-00001-of-00002.safetensors").write_bytes(
                (d / "model-00001-of-00002.safetensors").read_bytes()[:-100]
            ),
            "model-00001-of-00002.safetensors: 3,975 bytes, its header says 4,075",
        ),
        (
            lambda d: (d / "model-00002-of-00002.safetensors").write_bytes(b"\x01\x02"),
            "model-00002-of-00002.safetensors: shorter than a safetensors header",
        ),
    ],
)
def test_missing_or_truncated_shard_fails_naming_the_file(
    tmp_path: Path, damage, says: str
) -> None:
    folder = make_snapshot(tmp_path / "model")
    damage(folder)
    record = tmp_path / "baked-model.json"
    proc = bake("--model", str(folder), "--record", str(record))
    assert proc.returncode == 1
    assert says in proc.stderr, proc.stderr
    assert not record.exists()


# The CUDA version each vLLM base image is built for (vLLM's images are CUDA 13 since v0.20).
BASE_IMAGE_CUDA = {"v0.32.0": "13.0"}


def test_hub_hosts_can_run_the_base_image() -> None:
    tag = re.search(r"ARG VLLM_VERSION=(\S+)", (ROOT / "Dockerfile").read_text()).group(1)
    needs = tuple(int(x) for x in BASE_IMAGE_CUDA[tag].split("."))
    for name in ("hub.json", "tests.json"):
        allowed = json.loads((ROOT / ".runpod" / name).read_text())["config"]["allowedCudaVersions"]
        assert allowed, name
        for version in allowed:
            assert tuple(int(x) for x in version.split(".")) >= needs, (name, version)


def test_an_empty_variable_means_unset() -> None:
    # An endpoint's form sends empty strings for fields left blank.
    s = Settings.from_env({"MAX_NUM_SEQS": "", "HF_HOME": "", "KV_CACHE_DTYPE": ""})
    assert s == Settings()
    assert s.vllm.max_num_seqs == 0 and s.model.hf_home is None and s.vllm.kv_cache_dtype is None
    # names are case-insensitive; variables that are no setting are ignored
    assert Settings.from_env({"max_tokens": "99", "PATH": "/bin"}).vlm.max_tokens == 99


def test_fingerprint_names_the_revision_the_image_baked(tmp_path: Path) -> None:
    from vlm_ocr.engines.factory import make_engine
    from vlm_ocr.engines.gpu import GpuFacts
    from vlm_ocr.prompts import PRESETS

    record = {"repo": "org/model", "revision": "main", "resolved_commit": "abc123"}
    (tmp_path / "baked-model.json").write_text(json.dumps(record))
    s = Settings(
        engine="vllm", model_name="org/model", model_revision="main", hf_home=str(tmp_path)
    )
    engine = make_engine(s, gpu=GpuFacts())
    assert engine.fingerprint(PRESETS["plain"])["revision"] == "abc123"
    other = make_engine(s.with_(model_name="org/other"), gpu=GpuFacts())
    assert other.fingerprint(PRESETS["plain"])["revision"] == "main"


def test_release_workflow_names_images_safely() -> None:
    text = (ROOT / ".github/workflows/release.yml").read_text()
    default = DEFAULT_MODEL
    assert f"DEFAULT_MODEL: {default}" in text and f"default: {default}" in text
    assert 'echo "IMAGE=${IMAGE_NAME,,}"' in text  # references are lower case
    assert "cache-to: type=inline" in text and "mode=max" not in text  # no 40 GB layer cache
    assert "suffix=-${{ env.MODEL_SLUG }}" in text  # the model and revision are in the tags
    assert "runs-on: ${{ inputs.runner || vars.RUNNER || 'ubuntu-latest' }}" in text


def test_the_hub_image_bakes_no_weights_and_downloads_at_start() -> None:
    hub = (ROOT / ".runpod/Dockerfile").read_text()
    main = (ROOT / "Dockerfile").read_text()
    assert "download_model.py --model" not in hub and "AS weights" not in hub
    env = image_env(hub)
    assert env["HF_HUB_OFFLINE"] == "false" and "HF_HOME" not in env
    assert "COPY builder/download_model.py /opt/builder/download_model.py" in hub
    assert Settings().model.model_downloader == "/opt/builder/download_model.py"
    # the rest is the main image's: same base, same pinned settings, same model by default
    for line in ("ARG VLLM_VERSION=v0.32.0", "GDN_PREFILL_BACKEND=triton", "ENGINE=vllm"):
        assert line in hub and line in main
    assert f"MODEL_NAME={DEFAULT_MODEL}" in hub


def test_the_hub_test_runs_in_the_time_the_hub_gives_it() -> None:
    # The Hub runs tests.json right after building: no model download (the CPU engine reads the
    # pages), and time to pull the 20 GB image first.
    tests = json.loads((ROOT / ".runpod/tests.json").read_text())
    env = {e["key"]: e["value"] for e in tests["config"]["env"]}
    assert env["ENGINE"] == "rapidocr"
    assert all(case["timeout"] >= 15 * 60 * 1000 for case in tests["tests"])


# --- the engine's packages a family pins (builder/engine_pins.py) -----------------------------

PINS = ROOT / "builder" / "engine_pins.py"


def engine_pins(
    tmp_path: Path, vllm: str = "0.32.0", **env: str
) -> subprocess.CompletedProcess[str]:
    """The build step's script, as the image runs it: the worker's interpreter with the worker's
    package, the image's environment (MODEL_NAME, HF_HOME) and nothing of this shell's."""
    import os
    import sys

    environ = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT / "src"), "HOME": str(tmp_path)}
    return subprocess.run(
        [sys.executable, str(PINS), "--vllm", vllm],
        env=environ | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("dockerfile", ["Dockerfile", ".runpod/Dockerfile"])
def test_the_image_installs_its_familys_engine_pins_into_the_engines_python(
    dockerfile: str,
) -> None:
    text = (ROOT / dockerfile).read_text().replace("\\\n", " ")
    step = next(line for line in text.splitlines() if "engine_pins.py --vllm" in line)
    assert "COPY builder/engine_pins.py /opt/builder/engine_pins.py" in text
    # the family is told by the worker's own package, installed before the step
    assert text.index("COPY src/vlm_ocr ./src/vlm_ocr") < text.index(step)
    assert "/opt/worker/bin/python /opt/builder/engine_pins.py" in step
    assert "/usr/local/bin/vllm-python -m pip install --no-cache-dir $pins" in step
    assert "importlib.metadata" in step and 'print(m.version("vllm"))' in step


def test_each_checkpoints_image_build_pins_what_its_family_needs(tmp_path: Path) -> None:
    for family in FAMILIES.values():
        for c in family.checkpoints:
            proc = engine_pins(tmp_path, MODEL_NAME=c.repo)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.split() == list(family.engine_pins), c.repo
    # LightOn's pin, for every LightOnOCR checkpoint: transformers 5.16.1
    proc = engine_pins(tmp_path, MODEL_NAME="lightonai/LightOnOCR-3-1B")
    assert proc.stdout == "transformers==5.16.1\n"
    assert engine_pins(tmp_path, MODEL_NAME=DEFAULT_MODEL).stdout == ""


def test_the_pins_follow_the_baked_config_and_refuse_a_vllm_the_family_breaks_on(
    tmp_path: Path,
) -> None:
    # a fine-tune baked under a name of its own: its config and its name tell its family
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf" / "hub" / "models--acme--lightonocr-3-receipts"
    config = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5"}
    make_snapshot(repo / "snapshots" / commit, config)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = {"MODEL_NAME": "acme/lightonocr-3-receipts", "HF_HOME": str(tmp_path / "hf")}
    assert engine_pins(tmp_path, **env).stdout == "transformers==5.16.1\n"
    broken = engine_pins(tmp_path, vllm="0.27.1+cu129", **env)
    assert broken.returncode != 0 and not broken.stdout
    assert "lighton-ocr-3 family, which does not run on vLLM 0.27.1" in broken.stderr
    assert "loop" in broken.stderr


def test_the_images_compile_the_engines_packages_to_bytecode_at_build(tmp_path: Path) -> None:
    # both images run the builder's script on the engine's packages
    for dockerfile in ("Dockerfile", ".runpod/Dockerfile"):
        text = (ROOT / dockerfile).read_text()
        assert "/opt/builder/compile_bytecode.py torch transformers vllm" in text, dockerfile
    # the script, as the build runs it: each package's site folder compiled, wherever it lies,
    # and a file that does not compile (a template, a test for another Python) left as it is
    sites = [tmp_path / "site-a", tmp_path / "site-b"]
    for site, name in zip(sites, ("alpha", "beta"), strict=True):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("VALUE = 1\n")
        (site / name / "part.py").write_text("def f():\n    return 2\n")
    (sites[1] / "beta" / "template.py").write_text("def {{ name }}():\n")
    proc = subprocess.run(
        ["python3", str(ROOT / "builder/compile_bytecode.py"), "alpha", "beta"],
        env={"PYTHONPATH": ":".join(map(str, sites)), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"compiled: {site}" for site in sites]
    for site, name in zip(sites, ("alpha", "beta"), strict=True):
        cached = {p.name.split(".")[0] for p in (site / name / "__pycache__").iterdir()}
        assert {"__init__", "part"} <= cached
    assert not list((sites[1] / "beta" / "__pycache__").glob("template.*"))
