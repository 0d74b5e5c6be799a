# Sourced on the GPU host from the project's root: the worker's environment there. The bundle
# (dev/gpu/make_bundle.sh, or the shared make-bundle script's cNN chunks) is unpacked in /tmp/acc
# by dev/gpu/unpack.sh, each part once.
#   . dev/gpu/env.sh            then: python3 -m vlm_ocr_lab bench ...
# VLLM=0.26 (default) runs the engine on vLLM 0.26 and the host's torch 2.11 (/tmp/acc/site);
# VLLM=0.32 on vLLM 0.32 and torch 2.13 (/tmp/acc/site32), VLLM=0.33 on vLLM 0.33 and torch 2.14
# (/tmp/acc/site33), with the CUDA libraries of part n (/tmp/acc/nv) ahead of the host's own
# where it was carried.
# TF516=1 puts transformers 5.16.1 (/tmp/acc/tf, unpacked from its wheel) first on the engine's
# path: vLLM 0.26's Pixtral code (LightOnOCR) imports a class transformers 5.17 renamed.
# VLLM_USE_FLASHINFER_SAMPLER=0: FlashInfer's top-p kernel is compiled at its first use where
# flashinfer-jit-cache is not installed (the bundle has not got it, the image's vLLM has), and a
# failed compile kills the engine in its profiling run; so the host measures vLLM's Triton top-p
# unless FLASHINFER_SAMPLER=1 (a GPU check's own variable: `lighton-ocr,FLASHINFER_SAMPLER=1`).
# (Inside the engine, at 6a7fb4a on vLLM 0.32, it compiled on the warm-up page, which took some
# 80 s longer: a start not comparable with the image's. The two differ by about 1.4 ms a step at
# 256 sequences, and the Triton filter compiles again for new batch shapes in a fresh engine's
# first busy minute: docs/models.md.)
# The compile caches go to /runpod-volume, as on a RunPod endpoint with a network volume, so
# they are keyed and published as the worker does there.
A=/tmp/acc
bash dev/gpu/unpack.sh
if [ -f $A/transformers-5.16.1-py3-none-any.whl ] && [ ! -d $A/tf ]; then
  python3 -m zipfile -e $A/transformers-5.16.1-py3-none-any.whl $A/tf
fi
engine_ld=
case "${VLLM:-0.26}" in
  0.26) engine_path=$A/site ;;
  0.32 | 0.33)
    engine_path=$A/site${VLLM#0.}
    [ -d $A/nv ] && engine_path=$engine_path:$A/nv
    # torch 2.13's RPATH names its own site's nvidia/ folders, which hold none of its libraries
    for d in $A/nv/nvidia/*/lib \
      "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"/nvidia/*/lib; do
      [ -d "$d" ] && engine_ld=$engine_ld${engine_ld:+:}$d
    done
    engine_ld="LD_LIBRARY_PATH=$engine_ld\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} " ;;
  *) echo "VLLM=$VLLM: 0.26, 0.32 or 0.33" >&2; return 2 ;;
esac
[ "${TF516:-0}" = 1 ] && engine_path=$A/tf:$engine_path
# Bytecode, once per host, as the image compiles it at build (builder/compile_bytecode.py): the
# bundle carries none, and the host runs Python with PYTHONDONTWRITEBYTECODE, so without this
# every process of every start compiled each module it imported from source (py-spy on a warm
# Chandra 2 start at 9e6e64a: 13.7 s of the engine launcher's 24 s of imports). The engine's
# site, the worker's, and the host's packages the engine imports from its own site.
# (each folder once: a mark in it, gone when unpack.sh replaces the folder)
host_site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
read -r -a bc_dirs <<< "${engine_path//:/ } $A/wsite"
host_pkgs="transformers tokenizers huggingface_hub safetensors sympy mpmath networkx jinja2"
[ "${VLLM:-0.26}" = 0.26 ] && host_pkgs="$host_pkgs torch"  # 0.26 runs on the host's torch
for p in $host_pkgs; do [ -d "$host_site/$p" ] && bc_dirs+=("$host_site/$p"); done
bc_todo=()
for d in "${bc_dirs[@]}"; do [ -d "$d" ] && [ ! -e "$d/.bytecode" ] && bc_todo+=("$d"); done
if [ "${#bc_todo[@]}" -gt 0 ]; then
  t_bc=$(date +%s)
  python3 -m compileall -q -q -j 0 "${bc_todo[@]}" > /dev/null 2>&1
  for d in "${bc_todo[@]}"; do touch "$d/.bytecode"; done
  echo "bytecode compiled in $(($(date +%s) - t_bc)) s: ${bc_todo[*]}" >&2
fi
printf '#!/bin/sh\n%sPYTHONPATH=%s exec python3 "$@"\n' "$engine_ld" "$engine_path" > $A/vllm-python
chmod +x $A/vllm-python
mkdir -p /runpod-volume
# The image's seed of vLLM's model-class inspection (builder/seed_vllm_cache.py; the Dockerfile
# makes it at build), so a fresh start here skips that step as the image's does. Made off the host
# with the CPU build of the same vLLM (the entries are keyed by the model modules' source):
#   .venv-engine/bin/python builder/seed_vllm_cache.py --out .gpu-bundle/vllm-cache-seed examples/
# and carried with a chunk (it is a few kilobytes).
if [ -d .gpu-bundle/vllm-cache-seed/modelinfos ] && [ ! -d $A/seed ]; then
  cp -r .gpu-bundle/vllm-cache-seed $A/seed
fi
[ -d $A/seed ] && export VLLM_CACHE_SEED=$A/seed
if [ -n "${CACHE_DIR:-}" ]; then  # every cache in one folder given by hand (as set, not keyed)
  export VLLM_CACHE_ROOT=$CACHE_DIR/vllm TORCHINDUCTOR_CACHE_DIR=$CACHE_DIR/inductor \
    TRITON_CACHE_DIR=$CACHE_DIR/triton FLASHINFER_WORKSPACE_BASE=$CACHE_DIR/flashinfer \
    DG_JIT_CACHE_DIR=$CACHE_DIR/deep_gemm CUDA_CACHE_PATH=$CACHE_DIR/cuda TRITON_CACHE_AUTOTUNING=1
fi
# Dummy weights always: a run's own VLLM_EXTRA_ARGS (a flag being tried) comes with them, not
# in their place (else the engine looks for weights the bundle does not have and does not start).
case " ${VLLM_EXTRA_ARGS:-} " in
  *" --load-format "*) ;;
  *) VLLM_EXTRA_ARGS="${VLLM_EXTRA_ARGS:+$VLLM_EXTRA_ARGS }--load-format dummy" ;;
esac
export PYTHONPATH=$A/wsite:$PWD/src ENGINE=vllm VLLM_PYTHON=$A/vllm-python HF_HUB_OFFLINE=1 \
  VLLM_EXTRA_ARGS VLLM_USE_FLASHINFER_SAMPLER="${FLASHINFER_SAMPLER:-0}" \
  AUTO_ROTATE=false PYTHONUNBUFFERED=1
[ -n "${CACHE_DIR:-}" ] || unset VLLM_CACHE_ROOT
