#!/usr/bin/env bash
# Build the dependency bundle for the GPU host (Python 3.12, torch 2.11.0+cu130, no vLLM, no
# network), in parts that each travel as 56 MiB chunks, one chunk a call:
#   w  the worker's pinned requirements (builder/requirements.txt less the CPU engine's packages,
#      which the host has or the worker does not use there), unpacked as wsite/; the
#      transformers 5.16.1 wheel (TF516=1 in dev/gpu/env.sh); and the files named in BUNDLE_EXTRA
#   a  vLLM 0.26.0, the release built for the host's torch, with what the host lacks
#      (dev/gpu/bundle-vllm-0.26.txt), unpacked as site/
#   b  vLLM 0.32.0, the image's version, with torch 2.13.0, triton 3.7.1, torchvision 0.28.0,
#      flashinfer 0.7.0.post1 and every other dependency whose required version the host lacks
#      (dev/gpu/bundle-vllm-0.32.txt), unpacked as site32/
#   d  optional: vLLM 0.33.0, the newest release PyPI can install, with torch 2.14.0, triton 3.8.0,
#      torchvision 0.29.0, flashinfer 0.7.2.post1 and the rest the host lacks
#      (dev/gpu/bundle-vllm-0.33.txt), unpacked as site33/
#   n  optional: the CUDA libraries torch 2.13.0 and 2.14.0 need newer than the host's own (NV_PKGS
#      below), unpacked as nv/; carry it only when dev/gpu/probe_host.sh says so
# Each part is tar | xz, split into .gpu-bundle/<part>00, <part>01, ... (keep .gpu-bundle/ ignored).
# The project's own code is not in it: it travels with the working tree on every call. On the
# host, dev/gpu/unpack.sh (which dev/gpu/env.sh runs) unpacks whichever parts were copied there.
#
# Usage, from the project's root:  bash dev/gpu/make_bundle.sh [PART...]     (default: w a b n)
#   BUNDLE_EXTRA="FILE..."  more files for part w; they land in /tmp/acc on the host
#   XZ_LEVEL=N              xz preset (default 1, and 3 for part n: most of the bytes are CUDA
#                           code that is already compressed; -6 saves perhaps one chunk in ten
#                           and takes ten times as long, hours for part b on a 2-core machine;
#                           -3 makes part n one chunk shorter in about 20 minutes)
#   NV_PKGS="NAME==VER..."  part n's packages (default: below)
#   WORK=DIR                scratch space (default ${TMPDIR:-/tmp}/gpu-bundle-work; about 8 GB)
# It rebuilds only the parts named, removing their old chunks; it prints each part's size before
# and after slimming and its chunks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
proj=$PWD
[ -f "$proj/builder/requirements.txt" ] || { echo "run from the project's root" >&2; exit 2; }
parts=${*:-w a b n}
work=${WORK:-${TMPDIR:-/tmp}/gpu-bundle-work}
out=$proj/.gpu-bundle
# torch 2.13.0 pins CUDA libraries through cuda-toolkit[...]==13.0.3 and four nvidia-* packages;
# the host's torch 2.11.0+cu130 pinned the same versions except these four:
#   nvidia-nccl-cu13       2.28.9 -> 2.29.7     libtorch_cuda.so 2.13 needs ncclCommMemStats,
#                                               ncclCommSuspend, ncclPutSignal, ... (new in 2.29):
#                                               import torch fails without it
#   nvidia-cudnn-cu13      9.19.0.56 -> 9.20.0.48  torch refuses a cuDNN minor older than its build's
#   nvidia-cublas          13.1.0.3 -> 13.1.1.3    13.1.0.3 exports every symbol torch 2.13 uses
#   nvidia-cusparselt-cu13 0.8.0 -> 0.8.1          0.8.0 exports every symbol torch 2.13 uses
# so part n holds the first two; NV_PKGS can add the other two, to follow torch's pins exactly.
# torch 2.14.0 (vLLM 0.33) pins the same but nvidia-nccl-cu13 2.30.7 and nvidia-cudnn-cu13
# 9.24.0.43; built before 2026-12-02 (with 2.29.7 and 9.20.0.48) part n served torch 2.13 alone.
# Its default now follows torch 2.14, which torch 2.13 loads too (a newer NCCL 2 and cuDNN 9 of
# the same major keep their ABI; torch refuses only an older cuDNN minor than its build's).
nv_pkgs=${NV_PKGS:-nvidia-nccl-cu13==2.30.7 nvidia-cudnn-cu13==9.24.0.43}

plat=(--only-binary=:all: --python-version 3.12 --implementation cp)
for v in $(seq 39 -1 17); do plat+=(--platform "manylinux_2_${v}_x86_64"); done
for p in manylinux2014 manylinux2010 manylinux1 linux; do plat+=(--platform "${p}_x86_64"); done
plat+=(--platform any)

fetch() {  # fetch DIR ARGS...: the wheels named, without their dependencies
  local dir=$1; shift
  rm -rf "$dir" && mkdir -p "$dir"
  pip download -q --no-deps --disable-pip-version-check "${plat[@]}" -d "$dir" "$@"
}

unpack_wheels() {  # unpack_wheels WHEEL_DIR SITE: unzip every wheel into SITE, as pip would lay it
  local w d s
  rm -rf "$2" && mkdir -p "$2"
  for w in "$1"/*.whl; do unzip -q -o "$w" -d "$2"; done
  # a wheel's .data/purelib and platlib belong in the site; its scripts and data are not used there
  for d in "$2"/*.data; do
    [ -d "$d" ] || continue
    for s in purelib platlib; do [ -d "$d/$s" ] && cp -a "$d/$s/." "$2/"; done
    rm -rf "$d"
  done
  (cd "$1" && ls *.whl) > "$2/.bundle-wheels.txt"
}

slim() {  # slim SITE: drop what nothing imports or loads at run time
  local f
  find "$1" -name __pycache__ -type d -prune -exec rm -rf {} +
  find "$1" -name '*.pyc' -delete
  # the test suites that ship inside numpy and numba
  rm -rf "$1"/numpy/*/tests "$1"/numpy/tests "$1"/numba/tests "$1"/numba/cuda/tests
  # the debug sections of the big libraries (triton's libtriton.so carries 240 MB of them); their
  # symbols and code stay as they are
  find "$1" -type f \( -name '*.so' -o -name '*.so.*' \) -size +10M -print0 |
    while IFS= read -r -d '' f; do
      if readelf -S "$f" 2> /dev/null | grep -q ' \.debug_'; then strip --strip-debug "$f"; fi
    done
}

pack() {  # pack PART: tar | xz the part's stage into .gpu-bundle/PART00, PART01, ...
  local part=$1 level=${XZ_LEVEL:-1}
  [ "$part" = n ] && level=${XZ_LEVEL:-3}
  rm -f "$out/$part"[0-9][0-9]
  (cd "$work/stage-$part" && tar -cf - .) | xz -T0 -"$level" | split -b 56M -d - "$out/$part"
  echo "part $part: xz -$level $(cat "$out/$part"[0-9][0-9] | wc -c) bytes in" \
    "$(cd "$out" && ls "$part"[0-9][0-9] | wc -l) chunks"
  rm -rf "$work/stage-$part"
}

size() { du -sh --apparent-size "$1" | cut -f1; }

mkdir -p "$work" "$out"
for part in $parts; do
  stage=$work/stage-$part
  rm -rf "$stage" && mkdir -p "$stage"
  case "$part" in
    w)
      # the worker's requirements less the CPU engine (RapidOCR, ONNX Runtime, OpenCV and their
      # own dependencies): the host has those packages, and the worker runs vLLM there
      grep -v '^#' "$proj/builder/requirements.txt" |
        grep -viE '^(rapidocr|onnxruntime|opencv-python-headless|shapely|pyclipper|omegaconf|flatbuffers|protobuf)==' \
        > "$work/worker-requirements.txt"
      fetch "$work/wheels-w" -r "$work/worker-requirements.txt"
      unpack_wheels "$work/wheels-w" "$stage/wsite"
      fetch "$work/wheels-tf" transformers==5.16.1
      cp "$work"/wheels-tf/transformers-5.16.1-*.whl "$stage/"
      for f in ${BUNDLE_EXTRA:-}; do cp "$f" "$stage/"; done
      site=$stage/wsite ;;
    a)
      fetch "$work/wheels-a" -r "$here/bundle-vllm-0.26.txt"
      unpack_wheels "$work/wheels-a" "$stage/site"
      site=$stage/site ;;
    b)
      fetch "$work/wheels-b" -r "$here/bundle-vllm-0.32.txt"
      unpack_wheels "$work/wheels-b" "$stage/site32"
      site=$stage/site32 ;;
    d)
      fetch "$work/wheels-d" -r "$here/bundle-vllm-0.33.txt"
      unpack_wheels "$work/wheels-d" "$stage/site33"
      site=$stage/site33 ;;
    n)
      # shellcheck disable=SC2086
      fetch "$work/wheels-n" $nv_pkgs
      unpack_wheels "$work/wheels-n" "$stage/nv"
      site=$stage/nv ;;
    *) echo "unknown part $part (w, a, b, d or n)" >&2; exit 2 ;;
  esac
  echo "part $part: wheels $(size "$work/wheels-$part"), unpacked $(size "$site")"
  slim "$site"
  echo "part $part: slimmed $(size "$site")"
  pack "$part"
  rm -rf "$work/wheels-$part" "$work/wheels-tf"
done
ls -l "$out"
