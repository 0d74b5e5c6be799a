#!/usr/bin/env bash
# On the GPU host, one cheap call (no bundle needed): print what decides which parts of the bundle
# (dev/gpu/make_bundle.sh) it needs: Python, the driver, nvcc, and the versions of the host's
# nvidia-*, torch, triton, transformers and the other packages part b counts on the host for,
# each against what vLLM 0.32 / torch 2.13 require; then whether part n (newer CUDA libraries for
# torch 2.13) is needed. Where /tmp/acc/site32 is already unpacked, it also starts torch 2.13 and
# vLLM 0.32 the way the engine would (VLLM=0.32 in dev/gpu/env.sh) and runs a matrix product, a
# convolution through cuDNN and an NCCL version query on the GPU: that settles it.
# Usage, from the project's root:  bash dev/gpu/probe_host.sh
set -u
echo "== python: $(python3 -c 'import sys; print(sys.version.split()[0], sys.executable)')"
echo "== driver: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)," \
  "$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*')"
echo "== nvcc: $( (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | grep -o 'release [0-9.]*' | head -1)"
python3 - <<'EOF'
import importlib.metadata as md
import re
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

host = {}
for d in md.distributions():
    name = d.metadata["Name"]
    if name:
        host[canonicalize_name(name)] = d.version
shown = re.compile(r"^(nvidia-|cuda-|torch|triton|transformers|tokenizers|huggingface-hub|hf-xet|"
                   r"numpy|numba|llvmlite|opencv|pillow|safetensors|sentencepiece|tiktoken|sympy|"
                   r"networkx|ninja|setuptools|protobuf|grpcio|flashinfer|xformers|vllm)")
print("== host packages:", ", ".join(f"{n} {v}" for n, v in sorted(host.items()) if shown.match(n)))

# what part b leaves to the host: the requirement on each, from vLLM 0.32.0's closure
counted_on = {
    "transformers": ">=5.16.1,<5.20.0", "tokenizers": ">=0.23.2,<0.24.0",
    "huggingface-hub": ">=1.31.0,<3.0", "safetensors": ">=0.6.2", "sentencepiece": "",
    "tiktoken": ">=0.7.0", "torchaudio": "==2.11.0", "sympy": ">=1.13.3", "networkx": ">=2.5.1",
    "opencv-python-headless": ">=4.13.0", "nvidia-ml-py": "", "ninja": "",
}
bad = []
print("== packages part b counts on the host for:")
for name, spec in counted_on.items():
    have = host.get(name)
    ok = have is not None and Version(have) in SpecifierSet(spec)
    print(f"  {name:24} {spec or 'any':20} host {have or 'missing':14} {'ok' if ok else 'NOT SATISFIED'}")
    if not ok:
        bad.append(name)
# torch 2.13.0's CUDA libraries (its metadata, through cuda-toolkit==13.0.3): part n carries NCCL
# (torch 2.13 links symbols new in 2.29) and cuDNN (torch refuses an older minor than its build's);
# the older cuBLAS and cuSPARSELt of torch 2.11's pins export every symbol torch 2.13 links
cuda_pins = {
    "nvidia-nccl-cu13": "2.29.7", "nvidia-cudnn-cu13": "9.20.0.48", "nvidia-cublas": "13.1.1.3",
    "nvidia-cusparselt-cu13": "0.8.1", "nvidia-nvshmem-cu13": "3.4.5",
    "nvidia-cuda-runtime": "13.0.96", "nvidia-cuda-nvrtc": "13.0.88", "nvidia-nvjitlink": "13.0.88",
    "nvidia-cufft": "12.0.0.61", "nvidia-curand": "10.4.0.35", "nvidia-cusolver": "12.0.4.66",
    "nvidia-cusparse": "12.6.3.3", "nvidia-cuda-cupti": "13.0.85", "nvidia-cufile": "1.15.1.6",
    "nvidia-nvtx": "13.0.85",
}
in_part_n = {"nvidia-nccl-cu13", "nvidia-cudnn-cu13"}
checked_older = {"nvidia-cublas": "13.1.0.3", "nvidia-cusparselt-cu13": "0.8.0"}
need_n, not_in_n = [], []
print("== torch 2.13's CUDA libraries:")
for name, pin in cuda_pins.items():
    have = host.get(name)
    if have is not None and Version(have) >= Version(pin):
        state = "ok"
    elif name in in_part_n:
        state = "older: part n carries it"
        need_n.append(name)
    elif have is not None and Version(have) >= Version(checked_older.get(name, pin)):
        state = "older, but exports every symbol torch 2.13 links"
    else:
        state = "OLDER OR MISSING, and not in part n: add it to NV_PKGS of make_bundle.sh"
        not_in_n.append(name)
    print(f"  {name:24} torch 2.13 pins {pin:12} host {have or 'missing':12} {state}")
print("== part n:", f"NEEDED ({', '.join(need_n)})" if need_n else "not needed")
if not_in_n:
    print("== part n lacks:", ", ".join(not_in_n))
if bad:
    print("== part b lacks what the host does not satisfy:", ", ".join(bad),
          "(add them to dev/gpu/bundle-vllm-0.32.txt)")
EOF
if [ -d /tmp/acc/site32 ]; then
  echo "== torch 2.13 and vLLM 0.32 as the engine starts them (nv: $([ -d /tmp/acc/nv ] && echo carried || echo absent)):"
  # shellcheck disable=SC1091
  ( VLLM=0.32 . dev/gpu/env.sh > /dev/null && "$VLLM_PYTHON" - <<'EOF'
import torch
x = torch.randn(512, 512, device="cuda")
print("  torch", torch.__version__, "cuda", torch.version.cuda, "matmul", float((x @ x).abs().sum()) > 0)
print("  nccl", torch.cuda.nccl.version(), "cudnn", torch.backends.cudnn.version())
c = torch.nn.Conv2d(3, 8, 3).cuda()
print("  cudnn conv", tuple(c(torch.randn(1, 3, 32, 32, device="cuda")).shape))
import triton, vllm, flashinfer
print("  triton", triton.__version__, "vllm", vllm.__version__, "flashinfer", flashinfer.__version__)
import cutlass, vllm._C_stable_libtorch, vllm._moe_C_stable_libtorch, vllm.vllm_flash_attn
print("  vLLM's CUDA extensions, flash-attention and the CUTLASS DSL load")
EOF
  ) 2>&1 | tail -15
fi
