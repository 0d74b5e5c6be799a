#!/usr/bin/env bash
# On the GPU host: unpack the parts of the bundle (dev/gpu/make_bundle.sh) whose chunks were copied
# to /tmp/acc, each once: w -> /tmp/acc/wsite (and the transformers 5.16.1 wheel and any extra
# files, beside it), a -> /tmp/acc/site (vLLM 0.26), b -> /tmp/acc/site32 (vLLM 0.32),
# d -> /tmp/acc/site33 (vLLM 0.33),
# n -> /tmp/acc/nv (CUDA libraries for torch 2.13), c -> the older single bundle (site and wsite).
# A part is unpacked only once all its chunks are there (its xz stream ends in the last one); then
# its chunks are removed, so a part copied again later is unpacked again. Run or source it from the
# project's root (dev/gpu/env.sh runs it):  bash dev/gpu/unpack.sh
(
  set -u -o pipefail
  A=${ACC:-/tmp/acc}
  for p in w a b d n c; do
    set -- "$A/$p"[0-9][0-9]
    [ -e "$1" ] || continue
    last=${!#}
    n=${last##*/$p}
    n=$((10#$n + 1))
    if [ "$#" -ne "$n" ] || [ "$(tail -c 2 "$last")" != YZ ]; then
      echo "part $p: $# chunk(s) here, up to ${last##*/}, and the stream does not end there: not yet" >&2
      continue
    fi
    t0=$(date +%s)
    rm -rf "$A/.unpack-$p" && mkdir -p "$A/.unpack-$p"
    if cat "$@" | xz -d -T0 | tar -x -C "$A/.unpack-$p"; then
      for d in "$A/.unpack-$p"/* "$A/.unpack-$p"/.[!.]*; do
        [ -e "$d" ] || continue
        rm -rf "$A/${d##*/}" && mv "$d" "$A/"
        d=$A/${d##*/}
        # a site that is only on PYTHONPATH has its .pth files ignored (nvidia-cutlass-dsl puts its
        # cutlass package on sys.path with one): read them at start-up, as an installed site would
        if [ -d "$d" ] && ls "$d"/*.pth > /dev/null 2>&1; then
          cat > "$d/sitecustomize.py" << 'EOF'
# Written by dev/gpu/unpack.sh: this folder is on PYTHONPATH, where Python reads no .pth files.
# Read them as an installed site would, then run the interpreter's own sitecustomize, if any.
import importlib.machinery
import importlib.util
import os
import site
import sys

_read = sys.__dict__.setdefault("_pth_sites_read", set())
_here = os.path.dirname(os.path.realpath(__file__))
_read.add(_here)
site.addsitedir(_here)
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.realpath(p or ".") not in _read])
if _spec is not None and _spec.loader is not None:
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
EOF
        fi
      done
      rm -rf "$A/.unpack-$p" && rm -f "$@"
      echo "part $p: unpacked in $(( $(date +%s) - t0 )) s"
    else
      echo "part $p: unpacking failed; its chunks are kept" >&2
      rm -rf "$A/.unpack-$p"
    fi
  done
)
