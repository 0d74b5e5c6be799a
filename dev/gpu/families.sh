#!/usr/bin/env bash
# Measure one model family on the GPU host (dummy weights of its real shapes, a fixed 800 output
# tokens a page). Needs the bundle in /tmp/acc (dev/gpu/env.sh unpacks it); from the project's
# root:
#
#   bash dev/gpu/families.sh FAMILY PHASE PAGES
#
# FAMILY: a family (its first checkpoint), or a checkpoint by its example config's name
# (lightonocr-3-4b); the dummy folder is named for the checkpoint, as the family is told by name.
# PHASE: worker  the worker on its own server, PAGES pages in 2 jobs, then the direct path
#        warm    a second worker start on the caches the first published (PAGES pages, no direct)
#        fast    START_MODE=fast: its start and its pages/s (PAGES pages, then the direct path)
#        makers  the same pages through the worker to a server started with its makers' flags
# Output: $OUT/FAMILY-PHASE.txt (the bench's figures and the worker's log),
# $OUT/FAMILY-PHASE-metrics.txt (vLLM's running/waiting/KV gauges and open files, every 10 s), and
# for worker, warm and fast the run's row in $OUT/gpu-rows.jsonl (benchmarks/gpu.jsonl's schema;
# COMMIT=<hash> names the commit). Settings in the environment are the worker's
# (API_SERVER_COUNT=4, ...). For every family in one lease, dev/gpu/check.sh plans the runs.
set -u
family=$1 phase=$2 pages=${3:-128}
A=/tmp/acc
. dev/gpu/env.sh
case "$family" in
  olmocr) dir=$A/olmOCR-2-7B-1025-FP8-dummy ;;
  chandra) dir=$A/chandra-ocr-2-dummy ;;
  dots-ocr) dir=$A/dots.mocr-dummy ;;
  lighton-ocr) dir=$A/LightOnOCR-2-1B-dummy ;;
  lighton-ocr-3) dir=$A/LightOnOCR-3-0.8B-dummy ;;
  *) dir=$A/$family-dummy ;;  # a checkpoint's example config (the generator checks the name)
esac
[ -d "$dir" ] || python3 dev/gpu/make_dummy_model.py "$family" "$dir" > /dev/null
out=${OUT:-/tmp}/$family-$phase.txt
metrics=${OUT:-/tmp}/$family-$phase-metrics.txt
port=${PORT:-8765}
export MODEL_NAME=$dir VLLM_PORT=$port LOG_LEVEL=${LOG_LEVEL:-INFO}
checkpoint=$(python3 -c "from vlm_ocr_lab.bench.gpu_check import TARGETS; \
print(TARGETS['$family'].checkpoint)")
bench=(python3 -m vlm_ocr_lab bench --pages $((pages / 2)) --jobs 2 --output-tokens 800 --gpu-price 3.99
  --progress 15)
record=(--record "${OUT:-/tmp}/gpu-rows.jsonl" --commit "${COMMIT:-unknown}" --model "$checkpoint"
  --note "dev/gpu/families.sh $family $phase")
python3 dev/gpu/metrics.py $port 10 > "$metrics" 2>&1 &
sampler=$!

case "$phase" in
  worker) timeout "${LIMIT:-560}" "${bench[@]}" "${record[@]}" --direct > "$out" 2>&1 ;;
  warm) timeout "${LIMIT:-300}" "${bench[@]}" "${record[@]}" > "$out" 2>&1 ;;
  fast) START_MODE=fast timeout "${LIMIT:-400}" "${bench[@]}" "${record[@]}" --direct > "$out" 2>&1 ;;
  makers)
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
      lighton-ocr-3|lightonocr-3-0.8b|lightonocr-3-4b)
        flags=(--limit-mm-per-prompt '{"image": 1}' --max-model-len 18000
               --default-chat-template-kwargs '{"enable_thinking": false}'
               --mm-processor-cache-gb 0 --no-enable-prefix-caching --served-model-name loocr)
        name=loocr ;;
    esac
    log=${OUT:-/tmp}/$family-makers-server.log
    t0=$(date +%s)
    HF_HUB_OFFLINE=1 setsid "$VLLM_PYTHON" -m vllm.entrypoints.cli.main serve "$dir" \
      "${flags[@]}" --load-format dummy --host 127.0.0.1 --port $port > "$log" 2>&1 &
    server=$!
    until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health')" \
        2> /dev/null; do
      if ! kill -0 $server 2> /dev/null; then echo "the makers' server exited" >> "$out"; break; fi
      [ $(( $(date +%s) - t0 )) -gt 420 ] && { echo "not healthy in 420 s" >> "$out"; break; }
      sleep 2
    done
    echo "makers' server healthy after $(( $(date +%s) - t0 )) s" >> "$out"
    ENGINE=openai OPENAI_BASE_URL=http://127.0.0.1:$port SERVED_MODEL_NAME=$name \
      MODEL_FAMILY=${family/#lightonocr-3-*/lighton-ocr-3} MAX_NUM_SEQS=256 timeout 300 "${bench[@]}" >> "$out" 2>&1
    kill -- -$server 2> /dev/null; sleep 3; kill -9 -- -$server 2> /dev/null
    tail -40 "$log" >> "$out"
    ;;
esac
echo "exit $?" >> "$out"
kill $sampler 2> /dev/null
# nothing of this phase may hold the port or the GPU for the next one: vLLM's processes, by PID
vllm_pids() { ps -eo pid=,args= | awk '/vllm\.entrypoints|VLLM::/ && !/awk/ {print $1}'; }
pids=$(vllm_pids)
# shellcheck disable=SC2086
[ -n "$pids" ] && kill $pids 2> /dev/null && sleep 3
pids=$(vllm_pids)
# shellcheck disable=SC2086
[ -n "$pids" ] && kill -9 $pids 2> /dev/null
true
