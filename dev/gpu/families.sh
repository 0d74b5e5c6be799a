#!/usr/bin/env bash
# Measure one model family on the GPU host (dummy weights of its real shapes, a fixed 800 output
# tokens a page): the worker on its own server with the direct path beside it, the worker again
# on warm caches, and the same pages through the worker to a server started with its makers'
# own flags. Needs the bundle unpacked in /tmp/acc (on-gpu.sh); run from the project's root:
#
#   bash dev/gpu/families.sh FAMILY worker|warm|makers PAGES
#
# Output goes to $OUT/FAMILY-PHASE.txt (the bench's figures, then the engine's log tail).
set -u
family=$1 phase=$2 pages=${3:-128}
A=/tmp/acc
case "$family" in
  olmocr) dir=$A/olmOCR-2-7B-1025-FP8-dummy ;;
  chandra) dir=$A/chandra-ocr-2-dummy ;;
  dots-ocr) dir=$A/dots.ocr-dummy ;;
  lighton-ocr) dir=$A/LightOnOCR-2-1B-dummy ;;
  *) echo "unknown family $family" >&2; exit 2 ;;
esac
[ -d "$dir" ] || PYTHONPATH=$A/site python3 dev/gpu/make_dummy_model.py "$family" "$dir" > /dev/null
out=${OUT:-/tmp}/$family-$phase.txt
export AUTO_ROTATE=false LOG_LEVEL=${LOG_LEVEL:-INFO}
bench=(python3 -m vlm_ocr bench --pages "$pages" --jobs 2 --output-tokens 800)

if [ "$phase" = worker ]; then
  MODEL=$dir timeout ${LIMIT:-560} bash $A/on-gpu.sh "${bench[@]}" --direct > "$out" 2>&1
elif [ "$phase" = warm ]; then
  MODEL=$dir timeout 300 bash $A/on-gpu.sh python3 -m vlm_ocr bench --pages 8 --output-tokens 800 \
    > "$out" 2>&1
elif [ "$phase" = makers ]; then
  # the makers' own `vllm serve` line (with dummy weights), as their tools start it
  case "$family" in
    olmocr) flags=(--served-model-name olmocr --tensor-parallel-size 1 --data-parallel-size 1
                   --limit-mm-per-prompt '{"video": 0}' --max-model-len 16384) name=olmocr ;;
    chandra) flags=(--no-enforce-eager --max-num-seqs 64 --dtype bfloat16 --max-model-len 18000
                    --max_num_batched_tokens 8192 --gpu-memory-utilization .85
                    --enable-prefix-caching
                    --mm-processor-kwargs '{"min_pixels": 3136, "max_pixels": 6291456}'
                    --served-model-name chandra) name=chandra ;;
    dots-ocr) flags=(--tensor-parallel-size 1 --gpu-memory-utilization 0.9
                     --chat-template-content-format string --served-model-name model
                     --trust-remote-code) name=model ;;
    lighton-ocr) flags=(--limit-mm-per-prompt '{"image": 1}' --mm-processor-cache-gb 0
                        --no-enable-prefix-caching --served-model-name lighton) name=lighton ;;
  esac
  log=${OUT:-/tmp}/$family-makers-server.log
  VLLM_CACHE_ROOT=$A/vllm-cache HF_HUB_OFFLINE=1 PYTHONPATH=$A/site setsid python3 \
    -m vllm.entrypoints.cli.main serve "$dir" "${flags[@]}" --load-format dummy \
    --host 127.0.0.1 --port 8765 > "$log" 2>&1 &
  server=$!
  t0=$(date +%s)
  until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8765/health')" \
      2> /dev/null; do
    if ! kill -0 $server 2> /dev/null; then echo "the makers' server exited" >> "$out"; break; fi
    [ $(( $(date +%s) - t0 )) -gt 420 ] && { echo "not healthy in 420 s" >> "$out"; break; }
    sleep 2
  done
  echo "makers' server healthy after $(( $(date +%s) - t0 )) s" >> "$out"
  ENGINE=openai OPENAI_BASE_URL=http://127.0.0.1:8765 SERVED_MODEL_NAME=$name MODEL=$dir \
    MODEL_FAMILY=$family MAX_NUM_SEQS=256 timeout 300 bash $A/on-gpu.sh "${bench[@]}" \
    >> "$out" 2>&1
  kill -- -$server 2> /dev/null; sleep 3; kill -9 -- -$server 2> /dev/null
  tail -40 "$log" >> "$out"
fi
echo "exit $?" >> "$out"
