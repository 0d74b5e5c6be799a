"""Every environment variable the worker reads, declared once.

The README table, `.runpod/hub.json` and the Dockerfile's `ENV` lines are checked against this
class by the test suite; `python -m vlm_ocr.settings` prints the README table.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class EngineKind(StrEnum):
    AUTO = "auto"
    VLLM = "vllm"
    OPENAI = "openai"
    RAPIDOCR = "rapidocr"


DEFAULT_MODEL = "QuantTrio/Qwen3-VL-32B-Instruct-AWQ"
# The range a page pixel budget may take, here and in a job's `max_pixels` / `max_side`.
MIN_PIXELS = 65_536
MAX_PIXELS_LIMIT = 16_000_000
MIN_SIDE = 256
MAX_SIDE_LIMIT = 8192


# Plumbing the image sets and an endpoint's form should not offer: paths and interpreters inside
# the image, the engine's loopback port, local-development switches, the worker's internal
# timeouts and pools, and the fan-out client's own settings. They stay settable as environment
# variables; the Hub form leaves them out.
HUB_OMITTED = frozenset(
    {
        "output_dir",
        "allow_private_urls",
        "render_processes",
        "render_memory_mb",
        "decode_pixels",
        "bucket_connect_timeout_s",
        "bucket_read_timeout_s",
        "vllm_python",
        "vllm_port",
        "vllm_split_start",
        "vllm_startup_timeout_s",
        "hf_home",
        "hf_hub_cache",
        "hf_hub_offline",
        "model_downloader",
        "cuda_graph_sizes",
        "request_timeout_s",
        "cpu_model_processes",
        "runpod_api_key",
        "runpod_api_base",
    }
)


class Settings(BaseSettings):
    """Worker settings; each field is one environment variable of the same name, upper-cased."""

    # An empty variable in an endpoint's form means "not set", not "set to nothing".
    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", env_ignore_empty=True)

    # --- job pipeline -------------------------------------------------------------------------
    engine: EngineKind = Field(
        EngineKind.AUTO,
        description="`auto` (vLLM when a CUDA GPU and a model are present, else the CPU engine), "
        "`vllm`, `openai` (an external OpenAI-compatible server) or `rapidocr` (CPU).",
    )
    output_dir: Path = Field(
        Path("output"),
        description="Local results folder, used when no bucket is configured.",
    )
    default_prompt: str = Field("markdown", description="Prompt preset used when a job names none.")
    max_pixels: int = Field(
        1_600_000,
        ge=MIN_PIXELS,
        le=MAX_PIXELS_LIMIT,
        description="Default page pixel budget (width × height) for rendering and for the model.",
    )
    max_image_pixels: int = Field(
        50_000_000,
        ge=MIN_PIXELS,
        description="Largest source image accepted, in pixels (a 600 dpi A4 scan is 35 MP).",
    )
    decode_pixels: int = Field(
        100_000_000,
        ge=MIN_PIXELS,
        description="Source pixels being decoded at once across all jobs; bounds decode memory.",
    )
    max_download_bytes: int = Field(
        200_000_000, description="Largest document or image accepted from any source, in bytes."
    )
    max_job_bytes: int = Field(
        500_000_000, description="Most bytes one job's inputs may add up to, from all sources."
    )
    download_timeout_s: float = Field(
        60.0, description="Time limit for one URL download, in seconds."
    )
    fetch_timeout_s: float = Field(
        600.0,
        description="Time one job may spend fetching its inputs in all (wall time while any "
        "download runs), in seconds.",
    )
    render_timeout_s: float = Field(
        60.0, gt=0, description="Time limit for decoding or rendering one page, in seconds."
    )
    render_processes: int = Field(
        0, ge=0, description="Processes that decode and render pages; 0 = one per CPU core."
    )
    render_memory_mb: int = Field(
        4096,
        ge=0,
        description="Memory one page may take in a render process beyond what the process "
        "has mapped at start (0 = no limit), MB.",
    )
    allow_private_urls: bool = Field(
        False,
        description="Allow `http://` and private, loopback or link-local URL targets. "
        "Only for local development and tests.",
    )
    max_pages_per_job: int = Field(2000, description="Most pages one job may select.")
    job_max_concurrent_pages: int = Field(
        0,
        ge=0,
        description="Pages of one job in flight at once; 0 = as many as the engine takes "
        "(`MAX_CONCURRENT_PAGES`) plus two per render process, so one large job fills the engine "
        "while its next pages render and its last ones upload.",
    )
    max_concurrent_pages: int = Field(
        0,
        ge=0,
        description="Pages in flight at the engine across all jobs; 0 = the engine's own "
        "default (`MAX_NUM_SEQS` for vLLM and `openai`, 1 for the CPU engine).",
    )
    max_concurrent_jobs: int = Field(
        8, ge=1, description="Jobs one worker takes at once (RunPod `concurrency_modifier`)."
    )
    log_level: str = Field("INFO", description="Python log level.")

    # --- bucket (Cloudflare R2 or any S3 endpoint) --------------------------------------------
    bucket_endpoint_url: str | None = Field(
        None, description="S3 endpoint, for R2 `https://<ACCOUNT_ID>.r2.cloudflarestorage.com`."
    )
    bucket_name: str | None = Field(None, description="Bucket for inputs named by key and results.")
    bucket_access_key_id: str | None = Field(None, description="Bucket access key id.")
    bucket_secret_access_key: str | None = Field(None, description="Bucket secret access key.")
    bucket_prefix: str = Field(
        "ocr", description="Key prefix under which every job's results are stored."
    )
    presign_expires_s: int = Field(
        3600, ge=1, le=604_800, description="Lifetime of presigned result URLs, in seconds."
    )
    bucket_max_attempts: int = Field(
        5, ge=1, description="Attempts per bucket request (throttling, 5xx, timeouts)."
    )
    bucket_connect_timeout_s: float = Field(5.0, description="Bucket connect timeout, seconds.")
    bucket_read_timeout_s: float = Field(30.0, description="Bucket read timeout, seconds.")

    # --- GPU engine (vLLM) --------------------------------------------------------------------
    model_name: str = Field(
        DEFAULT_MODEL, description="Model: a Hugging Face id or a local directory."
    )
    model_revision: str | None = Field(None, description="Model revision (commit or tag).")
    served_model_name: str = Field("ocr", description="Name the engine serves the model under.")
    gdn_prefill_backend: str = Field(
        "triton",
        description="`--gdn-prefill-backend`; `triton` avoids the FlashInfer kernel that is "
        "JIT-compiled (and can be OOM-killed) on Hopper.",
    )
    kv_cache_dtype: str | None = Field(
        None,
        description="`--kv-cache-dtype`, always passed explicitly. Unset: `fp8` on GPUs of compute "
        "capability 8.9 or newer (Ada, Hopper, Blackwell), `auto` (the model's dtype) on older "
        "ones such as A100 and A40, which have no fp8 KV cache; the choice is in the engine facts.",
    )
    max_model_len: int = Field(8192, description="`--max-model-len` (prompt + output tokens).")
    max_num_seqs: int = Field(
        0,
        ge=0,
        description="`--max-num-seqs`: sequences the engine batches; 0 = by the memory of the "
        "engine's GPUs: 256 from 120 GiB (H200, B200), 192 from 70 GiB (A100, H100), 64 from 40 "
        "GiB (L40S, A6000), else 32; 192 for `openai`.",
    )
    max_num_batched_tokens: int = Field(16384, description="`--max-num-batched-tokens`.")
    gpu_memory_utilization: float = Field(
        0.90, gt=0, le=1, description="`--gpu-memory-utilization`."
    )
    tensor_parallel_size: int = Field(1, ge=1, description="`--tensor-parallel-size`.")
    cuda_graph_sizes: str = Field(
        "",
        description="Batch sizes vLLM captures CUDA graphs for, comma-separated; empty = 1, 2, 4, "
        "8, 16, 32, 64, then every 32 up to `MAX_NUM_SEQS` (fewer graphs than vLLM's default: "
        "a faster start).",
    )
    enforce_eager: bool = Field(
        False, description="`--enforce-eager`: skip CUDA graphs (faster start, slower pages)."
    )
    vllm_extra_args: str = Field("", description="Extra `vllm serve` flags, shell-quoted.")
    vllm_python: str = Field(
        "python3", description="Interpreter of the environment that has vLLM installed."
    )
    vllm_port: int = Field(
        0,
        ge=0,
        description="Loopback port of the vLLM server; 0 = a free port. A port that is taken "
        "is refused, so the worker never talks to a server it did not start.",
    )
    vllm_split_start: bool = Field(
        True,
        description="Start vLLM as two processes at once: its API server with no engine of its "
        "own, and a headless engine launcher that forks the engine core. Their imports overlap "
        "and the engine core imports nothing again (a faster cold start). `false`: one `vllm "
        "serve`, which spawns its engine core only after its own imports.",
    )
    vllm_startup_timeout_s: float = Field(
        900.0, description="Time allowed from spawning the server to a healthy warm engine."
    )
    hf_home: str | None = Field(
        None,
        description="Hugging Face home; the image bakes the weights into its cache here "
        "(`/models/hf`) with a record of what was baked (`baked-model.json`).",
    )
    hf_hub_cache: str | None = Field(
        None,
        description="Hugging Face hub cache, when not `HF_HOME/hub`; where `ENGINE=auto` looks for "
        "the model (the engine reads it too).",
    )
    hf_hub_offline: bool = Field(
        True,
        description="Never contact the Hugging Face hub at run time: weights are baked into the "
        "image or MODEL_NAME is a local directory. `false` (the Hub image): the worker downloads "
        "the model at start into the network volume, once per endpoint.",
    )
    model_downloader: str = Field(
        "/opt/builder/download_model.py",
        description="The script that downloads and checks a model when `HF_HUB_OFFLINE` is "
        "false (the Hub image, which bakes no weights), run with `VLLM_PYTHON`.",
    )
    openai_base_url: str | None = Field(
        None, description="Base URL of an external OpenAI-compatible server (`ENGINE=openai`)."
    )
    openai_api_key: str | None = Field(None, description="API key for `OPENAI_BASE_URL`.")
    max_tokens: int = Field(4096, ge=16, description="Output token cap per page request.")
    max_attempts: int = Field(
        4, ge=1, description="Attempts per page when it stops by length or repetition."
    )
    request_timeout_s: float = Field(600.0, description="Time limit for one page request.")

    # --- the CPU engine's models beside the engine: orientation, second opinion -------------
    auto_rotate: bool = Field(
        True,
        description="Turn scanned pages (images, PDF pages without a text layer) upright when "
        "they lie sideways or upside down.",
    )
    second_opinion: bool = Field(
        False,
        description="Default for a job's `second_opinion`: the CPU engine reads every page too, "
        "and pages where the two readings disagree are flagged for review.",
    )
    second_opinion_min_agreement: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Agreement of the two readings below which a page is flagged for review.",
    )
    cpu_model_processes: int = Field(
        0,
        ge=0,
        description="Processes (one core each) that run the CPU engine's models beside the "
        "engine, page orientation and the second opinion; 0 = half the CPU cores.",
    )

    # --- the fan-out client (`vlm-ocr submit`), not the worker -----------------------------
    runpod_api_key: str | None = Field(
        None, description="RunPod API key for `vlm-ocr submit` (client side; never logged)."
    )
    runpod_api_base: str = Field(
        "https://api.runpod.ai/v2",
        description="RunPod's endpoint API base URL for `vlm-ocr submit`.",
    )

    @field_validator("log_level")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()

    @property
    def bucket_configured(self) -> bool:
        return bool(self.bucket_name)


def env_name(field: str) -> str:
    return field.upper()


def settings_table() -> list[tuple[str, str, str]]:
    """(variable, default, description) for every setting, in declaration order."""
    rows = []
    for name, field in Settings.model_fields.items():
        default = field.default
        if default is None:
            shown = ""
        elif isinstance(default, bool):
            shown = str(default).lower()
        elif isinstance(default, StrEnum):
            shown = default.value
        else:
            shown = str(default)
        rows.append((env_name(name), shown, field.description or ""))
    return rows


def markdown_table() -> str:
    lines = ["| Variable | Default | What it does |", "|---|---|---|"]
    for var, default, desc in settings_table():
        lines.append(f"| `{var}` | {f'`{default}`' if default else '—'} | {desc} |")
    return "\n".join(lines)


def image_env(dockerfile: str) -> dict[str, str]:
    """The settings a Dockerfile's `ENV` lines give the image (`${ARG}` values left out)."""
    text = dockerfile.replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            for key, value in re.findall(r"([A-Z][A-Z0-9_]*)=(\S+)", line):
                if not value.startswith("$"):
                    env[key] = value
    return env


def hub_env(image: dict[str, str] | None = None) -> list[dict[str, object]]:
    """The `config.env` entries of `.runpod/hub.json`: every setting but the plumbing
    (`HUB_OMITTED`), each with the default the image runs with (its `ENV`, else the code's)."""
    image = image or {}
    entries: list[dict[str, object]] = []
    for name, field in Settings.model_fields.items():
        if name in HUB_OMITTED:
            continue
        kind = field.annotation
        text = str(kind)
        if kind is bool:
            hub_type = "boolean"
        elif kind in (int, float):
            hub_type = "number"
        else:
            hub_type = "string"
        spec: dict[str, object] = {
            "name": name.replace("_", " ").title().replace("Vllm", "vLLM").replace("Gpu", "GPU"),
            "type": hub_type,
            "description": (field.description or "").replace("`", ""),
        }
        default = field.default
        if env_name(name) in image:
            default = Settings(**{name: image[env_name(name)]}).model_dump()[name]
        if default is not None:
            spec["default"] = (
                default.value
                if isinstance(default, StrEnum)
                else (str(default) if isinstance(default, Path) else default)
            )
        if "EngineKind" in text:
            spec["options"] = [{"label": k.value, "value": k.value} for k in EngineKind]
        entries.append({"key": env_name(name), "input": spec})
    return entries


if __name__ == "__main__":
    import json
    import sys

    if sys.argv[1:2] == ["--hub-env"]:  # --hub-env DOCKERFILE
        image = image_env(Path(sys.argv[2]).read_text()) if sys.argv[2:] else {}
        print(json.dumps(hub_env(image), ensure_ascii=False, indent=2))
    else:
        print(markdown_table())
