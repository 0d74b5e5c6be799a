# Sourced on the GPU host from the project's root: the worker's environment there. The bundle
# (vLLM 0.26 and the worker's dependencies, built by the shared make-bundle script) is unpacked
# in /tmp/acc once: from its chunks, whichever way they were split (cNN or bNN).
#   . dev/gpu/env.sh            then: python3 -m vlm_ocr bench ...
# TF516=1 puts transformers 5.16.1 (/tmp/acc/tf, unpacked from its wheel) first on the engine's
# path: vLLM 0.26's Pixtral code (LightOnOCR) imports a class transformers 5.17 renamed.
# The compile caches go to /runpod-volume, as on a RunPod endpoint with a network volume, so
# they are keyed and published as the worker does there.
A=/tmp/acc
if [ ! -d $A/site ]; then
  cat $A/[bc][0-9][0-9] | xz -d -T0 | tar -x -C $A && rm -f $A/[bc][0-9][0-9]
fi
if [ -f $A/transformers-5.16.1-py3-none-any.whl ] && [ ! -d $A/tf ]; then
  python3 -m zipfile -e $A/transformers-5.16.1-py3-none-any.whl $A/tf
fi
engine_path=$A/site
[ "${TF516:-0}" = 1 ] && engine_path=$A/tf:$A/site
printf '#!/bin/sh\nPYTHONPATH=%s exec python3 "$@"\n' "$engine_path" > $A/vllm-python
chmod +x $A/vllm-python
mkdir -p /runpod-volume
if [ -n "${CACHE_DIR:-}" ]; then  # every cache in one folder given by hand (as set, not keyed)
  export VLLM_CACHE_ROOT=$CACHE_DIR/vllm TORCHINDUCTOR_CACHE_DIR=$CACHE_DIR/inductor \
    TRITON_CACHE_DIR=$CACHE_DIR/triton FLASHINFER_WORKSPACE_BASE=$CACHE_DIR/flashinfer \
    DG_JIT_CACHE_DIR=$CACHE_DIR/deep_gemm CUDA_CACHE_PATH=$CACHE_DIR/cuda TRITON_CACHE_AUTOTUNING=1
fi
export PYTHONPATH=$A/wsite:$PWD/src ENGINE=vllm VLLM_PYTHON=$A/vllm-python HF_HUB_OFFLINE=1 \
  VLLM_EXTRA_ARGS="${VLLM_EXTRA_ARGS:---load-format dummy}" VLLM_USE_FLASHINFER_SAMPLER=0 \
  AUTO_ROTATE=false PYTHONUNBUFFERED=1
[ -n "${CACHE_DIR:-}" ] || unset VLLM_CACHE_ROOT
