"""The command lines vLLM is started with: a pure function of the settings and the GPU.

Nothing here runs a process or reads the machine: `ServeSpec.resolve` takes the settings and the
GPU and CPU facts read once at start, and `launch_argvs` turns a spec and its ports into the
command line of each process vLLM runs as. The tests check them as tables.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError
from ...settings import Settings, StartMode, VllmSettings
from ..families import Family, default_family
from ..families.base import BATCHED_TOKENS
from ..gpu import GpuFacts
from .extra_args import merge_extra_args

# What the `vllm` command runs, after vLLM's interpreter
VLLM_CLI = ["-m", "vllm.entrypoints.cli.main"]
# What `VLLM_FORK_SERVER` runs in place of VLLM_CLI (the engine launcher, and the API-server
# process where it has several, or from vLLM 0.32 one): a script of this package that vLLM's
# interpreter runs by path (it imports only vLLM and the stdlib), its folder not put on the module
# path (-P)
FORK_LAUNCHER = ["-P", str(Path(__file__).with_name("fork_launcher.py"))]


def through_fork_launcher(argv: list[str]) -> list[str]:
    """A `vllm` command line (the interpreter, VLLM_CLI, its arguments) run by FORK_LAUNCHER."""
    return [argv[0], *FORK_LAUNCHER, *argv[1 + len(VLLM_CLI) :]]


# `MAX_NUM_SEQS=0`: sequences by the memory the engine has (GiB, all its GPUs). On an H200 the 32B
# AWQ model ran 3.0 pages/s at 256, 2.5-2.75 at 192 and 2.4 at 320 (its decoding slowed); below
# that, about what the KV cache beside the 32B AWQ weights holds for pages that end well before
# `MAX_TOKENS` (docs/deploying.md, "Choose a GPU").
MAX_NUM_SEQS_BY_MEMORY = ((120.0, 256), (70.0, 192), (40.0, 64), (0.0, 32))
# No GPU here to read: the server runs elsewhere (`openai`) or on a CPU build of vLLM.
MAX_NUM_SEQS_UNKNOWN_GPU = 192


def default_max_num_seqs(memory_gib: float | None) -> int:
    if memory_gib is None:
        return MAX_NUM_SEQS_UNKNOWN_GPU
    return next(seqs for floor, seqs in MAX_NUM_SEQS_BY_MEMORY if memory_gib >= floor)


def kv_cache_dtype(vllm: VllmSettings, capability: float | None) -> str:
    """The user's value when set; else fp8 where the GPU has an fp8 KV cache (8.9+)."""
    if vllm.kv_cache_dtype:
        return vllm.kv_cache_dtype
    return "fp8" if capability is not None and capability >= 8.9 else "auto"


def cuda_graph_sizes(vllm: VllmSettings, max_num_seqs: int) -> list[int]:
    """The decode batch sizes to capture: every size vLLM pads a batch up to. Fewer sizes than
    vLLM's default (one per 8 or 16 sequences) cut the capture at start; a batch between two
    sizes runs at the larger one, which costs little in memory-bound decoding."""
    if vllm.cuda_graph_sizes.strip():
        return sorted({int(x) for x in vllm.cuda_graph_sizes.split(",") if x.strip()})
    sizes = {n for n in (1, 2, 4, 8, 16, 32, 64) if n < max_num_seqs}
    sizes |= set(range(96, max_num_seqs, 32)) | {max_num_seqs}
    return sorted(sizes)


def fast_graph_sizes(max_num_seqs: int) -> list[int]:
    """`START_MODE=fast`'s decode batch sizes: powers of two up to MAX_NUM_SEQS, and it."""
    sizes = {1 << n for n in range(13) if 1 << n < max_num_seqs}
    return sorted(sizes | {max_num_seqs})


# Inductor's options on a GPU unless `TRITON_AUTOTUNE`: vLLM's horizontal fusion (combo kernels,
# for the query's and key's norm and rotary embedding) kept, but not timed against the kernels it
# fuses at compile time, which vLLM's default does for every combo kernel of every graph.
INDUCTOR_UNTIMED = {"combo_kernels": True, "benchmark_combo_kernel": False}


# The first vLLM release whose kernel config the worker sets (`fast`'s JIT warm-up off): the one
# it was measured on, and the image's.
KERNEL_CONFIG_FROM = (0, 32)


def compilation_args(
    vllm: VllmSettings,
    mode: StartMode,
    max_num_seqs: int,
    cuda: bool,
    release: tuple[int, int],
) -> list[str]:
    """How much is compiled and captured at start. `throughput`: vLLM's torch.compile and
    CUDA graphs at every size a batch is padded to (on a GPU, Inductor's timing of its combo
    kernels off with `TRITON_AUTOTUNE`). `fast`: no torch.compile, Inductor or FlashInfer
    autotuning (`--optimization-level 0`), but whole decode steps still captured as CUDA graphs
    at a few sizes, where most of the time of a page goes; and from vLLM 0.32 no JIT warm-up
    (`release`: the engine's)."""
    if vllm.enforce_eager:
        return ["--enforce-eager"]
    if mode is StartMode.FAST:
        sizes = (
            cuda_graph_sizes(vllm, max_num_seqs)
            if vllm.cuda_graph_sizes.strip()
            else fast_graph_sizes(max_num_seqs)
        )
        config = {"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": sizes}
        argv = ["--optimization-level", "0", "--compilation-config", json.dumps(config)]
        # vLLM's JIT warm-up runs a batch of short prefills and three decode steps with every
        # sampler feature on, so that Triton compiles their kernels before the graphs are
        # captured (vLLM skips it itself under `--enforce-eager`). Off, on the H200 (vLLM 0.32),
        # a fresh engine init at `fast` took 15-22 s less, and the warm-up page, which then
        # compiles what its own steps use, about 2 s more; a batch shape it does not make may
        # compile in a fresh worker's first busy minute (the models' doc says what was seen).
        if release >= KERNEL_CONFIG_FROM:
            argv += ["--kernel-config", json.dumps({"enable_jit_warmup": False})]
        return argv
    config: dict[str, object] = {"cudagraph_capture_sizes": cuda_graph_sizes(vllm, max_num_seqs)}
    if cuda and not vllm.triton_autotune:  # (vLLM's CPU build turns combo kernels off)
        config["inductor_compile_config"] = INDUCTOR_UNTIMED
    if cuda and vllm.encoder_cuda_graphs:
        config["cudagraph_mm_encoder"] = True
    return ["--compilation-config", json.dumps(config)]


# Variables every vLLM process of the worker starts with (where the environment does not set
# them). vLLM 0.32 imports humming-kernels in each of its processes, and humming's import starts
# two Python processes in the background to prebuild its launcher and compiler (each spent
# 12-15 s importing torch on the H200 host, 14 of them beside the start of an engine with four
# API servers, seen with py-spy); no family here runs a humming kernel (AWQ on Machete, FP8 on
# CUTLASS), and one that did would build it at first use. vLLM's usage statistics gather the
# host's CPU facts in a subprocess and report to vLLM's server from every engine core; a worker
# that reads users' documents sends nothing anywhere unless told to.
QUIET_ENGINE = {"HUMMING_DISABLE_PARALLEL_BUILD": "1", "VLLM_NO_USAGE_STATS": "1"}


def engine_env(vllm: VllmSettings) -> dict[str, str]:
    """Variables vLLM's processes are started with, beside its flags: `QUIET_ENGINE`, and
    unless `TRITON_AUTOTUNE`, vLLM's Triton autotuners (the gated-delta-net layers' prefill
    kernels; no other family runs an autotuned kernel of vLLM's), which compile and time every
    configuration of each kernel at its first call, most of a fresh start's profiling run, forced
    to their first valid configuration: they compile one each."""
    tuned = {} if vllm.triton_autotune else {"VLLM_TRITON_FORCE_FIRST_CONFIG": "1"}
    return tuned | QUIET_ENGINE


# On vLLM 0.26 one API server decoded and preprocessed about 6 MP of page images a second on an
# H200 host: 3.5 MP pages (a layout model's) ran at 1.80 pages/s through one and 4.03 through four,
# where the GPU took over. So one per megapixel of the family's page budget, within what the CPUs
# leave: the engine core, the worker, its render and CPU-model processes need the other three
# quarters. On 0.32 one API server preprocesses far more (some 45-50 MP a second at about one
# CPU, the fastest family's pages) and, started as several by the fork launcher, no longer holds
# the engine core's handshake. The rule stays for a family not measured otherwise; a family
# whose pace more API servers did not raise on the GPU declares its count (`api_server_count`).
PIXELS_PER_API_SERVER = 1_000_000
# The image's vLLM (the Dockerfiles' VLLM_VERSION, a test holds them together): what a spec is
# resolved for until the engine's own version is read at start (`vlm-ocr plan` prints its line).
IMAGE_VLLM = "0.32.0"
# How vLLM's front ends start and work changed between the two releases read (0.26 and 0.32).
# Before: the engine core's handshake waits until every API server has imported vLLM and built
# its processor (`entrypoints/cli/serve.py`, `launch_core_engines`), so each one beyond the first
# adds an import to the start; and an API server preprocesses images on its renderer threads
# (`renderers/base.py`: one pool for tokens and images). From 0.32: the API servers start beside
# the engine (the parent binds the engine's sockets itself), and images are preprocessed on one
# thread of each API server whatever `--renderer-num-workers` says (a pool of their own).
FRONT_ENDS_APART = (0, 32)


def vllm_release(version: str) -> tuple[int, int]:
    """(major, minor) of a vLLM version as its metadata says it ("0.32.0+cpu"); the image's
    when it cannot be read."""
    m = re.match(r"(\d+)\.(\d+)", version) or re.match(r"(\d+)\.(\d+)", IMAGE_VLLM)
    assert m is not None
    return int(m.group(1)), int(m.group(2))


def front_ends_apart(version: str) -> bool:
    """Whether this vLLM starts its API servers beside the engine (FRONT_ENDS_APART)."""
    return vllm_release(version) >= FRONT_ENDS_APART


def preprocessing_parallelism(page_pixels: int, cpus: int) -> int:
    """Page images to preprocess at once: one per megapixel of the page budget, at most a
    quarter of the CPUs."""
    return min(math.ceil(page_pixels / PIXELS_PER_API_SERVER), max(1, cpus // 4))


def front_ends(
    vllm: VllmSettings, parallel: int, replicas: int, version: str, declared: int | None = None
) -> tuple[int, int]:
    """(API servers, renderer threads of each): the settings' where set; else `parallel` page
    images preprocessed at once, as API server processes on a vLLM whose engine does not wait
    for them (or the family's `declared` count there), as threads of one API server on one that
    does. At least one API server per replica (vLLM's own default)."""
    apart = front_ends_apart(version)
    servers = vllm.api_server_count or max(replicas, (declared or parallel) if apart else 1)
    threads = vllm.renderer_num_workers or (1 if apart else math.ceil(parallel / servers))
    return servers, threads


def data_parallel_size(vllm: VllmSettings, gpu: GpuFacts) -> int:
    """Engine replicas: `DATA_PARALLEL_SIZE`, or as many as the worker's GPUs hold at
    `TENSOR_PARALLEL_SIZE` GPUs each (one without a GPU to count). Pages are independent, so
    replicas add pages/s where splitting a model that fits one GPU would only add all-reduces."""
    tp = vllm.tensor_parallel_size
    dp = vllm.data_parallel_size or max(1, len(gpu.gpus) // tp)
    if gpu.present and dp * tp > len(gpu.gpus):
        fix = (
            "lower one of them, or unset DATA_PARALLEL_SIZE to use every GPU"
            if vllm.data_parallel_size
            else f"give each worker {tp} GPUs (the endpoint's GPUs per worker), or lower "
            "TENSOR_PARALLEL_SIZE"
        )
        raise ConfigError(
            f"DATA_PARALLEL_SIZE {dp} × TENSOR_PARALLEL_SIZE {tp} needs {dp * tp} GPUs and this "
            f"worker has {len(gpu.gpus)}; {fix}"
        )
    return dp


@dataclass(frozen=True)
class ServeSpec:
    """What the server's command line is made of, every choice resolved."""

    vllm: VllmSettings
    model: str
    revision: str | None
    served_model_name: str
    max_num_seqs: int
    kv_cache_dtype: str
    max_model_len: int
    limit_mm_per_prompt: dict[str, int]
    processor_kwargs: dict[str, object] | None
    family_args: tuple[str, ...] = ()
    #: engine replicas, each on `TENSOR_PARALLEL_SIZE` GPUs with `max_num_seqs` sequences
    data_parallel_size: int = 1
    #: vLLM's front-end processes (HTTP, image decoding and preprocessing)
    api_server_count: int = 1
    #: threads of each API server that tokenize (and, before vLLM 0.32, preprocess images)
    renderer_num_workers: int = 1
    #: page images to preprocess at once, which the front ends are sized by
    preprocessing: int = 1
    #: the vLLM the front ends and the batched tokens were sized for: the image's until the
    #: engine's is read
    vllm_version: str = IMAGE_VLLM
    #: `--max-num-batched-tokens`: the setting's, else the family's for that vLLM
    max_num_batched_tokens: int = BATCHED_TOKENS
    #: the model family it was resolved for (what sizes it by the engine's vLLM)
    family: Family | None = dataclasses.field(default=None, compare=False, repr=False)
    #: the GPUs it was resolved for, as the engine facts name them (the caches' key has them)
    gpus: str = "none"
    #: whether it was resolved for CUDA GPUs (Inductor's GPU options), not vLLM's CPU build
    cuda: bool = False
    #: how much is compiled at start: `START_MODE`, else (`auto`) the family's
    start_mode: StartMode = StartMode.THROUGHPUT

    @property
    def concurrency(self) -> int:
        """Pages the engine batches at once, over all its replicas."""
        return self.max_num_seqs * self.data_parallel_size

    def on_vllm(self, version: str) -> ServeSpec:
        """This spec for the engine's own vLLM, its version read at start: the front ends
        sized for it."""
        family = self.family or default_family(model=self.model)
        servers, threads = front_ends(
            self.vllm, self.preprocessing, self.data_parallel_size, version, family.api_server_count
        )
        batched = self.vllm.max_num_batched_tokens or family.batched_tokens(vllm_release(version))
        return dataclasses.replace(
            self,
            vllm_version=version,
            api_server_count=servers,
            renderer_num_workers=threads,
            max_num_batched_tokens=batched,
        )

    @classmethod
    def resolve(
        cls,
        settings: Settings,
        gpu: GpuFacts,
        family: Family | None = None,
        *,
        cpus: int,
        vllm_version: str = IMAGE_VLLM,
    ) -> ServeSpec:
        """The spec for these settings on these GPUs and CPUs and this model family: the
        replicas by the GPUs' count, `MAX_NUM_SEQS=0` by one replica's memory, the KV-cache
        dtype by their compute capability, the API servers and their threads by the CPUs, the
        family's page size and the vLLM (`vllm_version`; the server sizes them again for the
        engine's own at start), the page and context sizes and the extra flags by the family."""
        vllm = settings.vllm
        model = settings.model.model_name
        family = family or default_family(model=model, max_pixels=settings.render.max_pixels)
        memory = gpu.memory_gib(vllm.tensor_parallel_size)
        replicas = data_parallel_size(vllm, gpu)
        page_pixels = family.budget(settings.render.max_pixels).max_pixels
        parallel = preprocessing_parallelism(page_pixels, cpus)
        return cls(
            vllm=vllm,
            model=model,
            revision=settings.model.model_revision,
            served_model_name=settings.vlm.served_model_name,
            max_num_seqs=vllm.max_num_seqs or default_max_num_seqs(memory),
            kv_cache_dtype=kv_cache_dtype(vllm, gpu.capability),
            max_model_len=vllm.max_model_len or family.max_model_len,
            limit_mm_per_prompt=family.limit_mm_per_prompt(),
            processor_kwargs=family.processor_kwargs(settings.render.max_pixels),
            family_args=tuple(family.serve_args()),
            data_parallel_size=replicas,
            preprocessing=parallel,
            gpus=f"{gpu.describe()}; compute capability {gpu.capability}",
            cuda=gpu.present,
            family=family,
            start_mode=family.start_mode if vllm.start_mode is StartMode.AUTO else vllm.start_mode,
        ).on_vllm(vllm_version)


def server_argv(spec: ServeSpec, port: int) -> list[str]:
    """The exact command line of the engine server."""
    vllm = spec.vllm
    argv = [vllm.vllm_python, *VLLM_CLI, "serve", spec.model]
    if spec.revision:
        argv += ["--revision", spec.revision]
    argv += [
        "--served-model-name",
        spec.served_model_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--gdn-prefill-backend",
        vllm.gdn_prefill_backend,
        "--kv-cache-dtype",
        spec.kv_cache_dtype,
        "--max-model-len",
        str(spec.max_model_len),
        "--max-num-seqs",
        str(spec.max_num_seqs),
        "--max-num-batched-tokens",
        str(spec.max_num_batched_tokens),
        "--gpu-memory-utilization",
        f"{vllm.gpu_memory_utilization:g}",
        "--tensor-parallel-size",
        str(vllm.tensor_parallel_size),
        "--limit-mm-per-prompt",
        json.dumps(spec.limit_mm_per_prompt),
    ]
    if spec.processor_kwargs is not None:
        argv += ["--mm-processor-kwargs", json.dumps(spec.processor_kwargs)]
    argv += [
        "--mm-processor-cache-gb",
        "0",
        # Jobs with a JSON schema: guided decoding by xgrammar, with no free whitespace between
        # tokens, so a model cannot pad an answer with blank lines until MAX_TOKENS.
        "--structured-outputs-config",
        json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
    ]
    argv += compilation_args(
        vllm, spec.start_mode, spec.max_num_seqs, spec.cuda, vllm_release(spec.vllm_version)
    )
    argv += spec.family_args
    return merge_extra_args(argv, shlex.split(vllm.vllm_extra_args))


def launch_argvs(spec: ServeSpec, port: int, rpc_port: int = 0) -> dict[str, list[str]]:
    """The command line of each process vLLM runs as, by role: one `server` (with its
    replicas, `--data-parallel-size N`); or, split, a `server` with no local engine and an
    `engine` launcher of every replica that handshakes with it on `rpc_port` (vLLM's
    data-parallel mode, with one engine or several: they start at once and share the caches)."""
    argv = server_argv(spec, port)
    replicas = str(spec.data_parallel_size)
    # only the process that answers HTTP has API servers; a headless engine refuses the flag
    front = ["--api-server-count", str(spec.api_server_count)]
    if spec.renderer_num_workers > 1:  # vLLM takes it with `--mm-processor-cache-gb 0` only
        front += ["--renderer-num-workers", str(spec.renderer_num_workers)]
    if not spec.vllm.vllm_split_start:
        several = ["--data-parallel-size", replicas] if spec.data_parallel_size > 1 else []
        return {"server": [*argv, *several, *front]}
    dp = ["--data-parallel-size", replicas, "--data-parallel-address", "127.0.0.1"]
    dp += ["--data-parallel-rpc-port", str(rpc_port)]
    forked = through_fork_launcher(argv)
    fork = spec.vllm.vllm_fork_server
    # one API server: from vLLM 0.32 the launcher starts it as several (a child, the engine's
    # handshake at once); before, it runs in the server's own process, which starts no child
    apart = front_ends_apart(spec.vllm_version)
    server = forked if fork and (spec.api_server_count > 1 or apart) else argv
    engine = forked if fork else argv
    return {
        "server": [*server, *dp, "--data-parallel-size-local", "0", *front],
        "engine": [*engine, *dp, "--data-parallel-size-local", replicas, "--headless"],
    }
