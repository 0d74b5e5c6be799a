#!/usr/bin/env bash
# The GPU check of one lease: each target's fresh start at its defaults with a bench of the
# worker and the direct path (at least 128 pages, at least 30 s a pass, 800 output tokens a page),
# and second starts on the warm volume, one row a run of benchmarks/gpu.jsonl's schema. One call
# of the GPU host runs the targets it is given within BUDGET_S seconds: a run that would not fit
# in what is left is skipped (and said so), every vLLM process is ended between runs, and the
# call ends with about 30 s to spare. Pages and time per run are planned by
# `python -m vlm_ocr_lab.bench.gpu_check` from the data file's last row of each model.
#
# On the GPU host, from the project's root (the bundle in /tmp/acc, see dev/gpu/env.sh):
#   COMMIT=<the commit's short hash> [VLLM=0.26|0.32|0.33] [LABEL=call1] \
#     bash dev/gpu/check.sh BUDGET_S TARGET[:warm][,VAR=VALUE...]...
# Here, the plan alone with each run's estimate (nothing runs), on the card GPU names (H100 or
# H200, the default; on the host, the card nvidia-smi names): its rows first, its memory the waves
#   DRY_RUN=1 [GPU=H100] bash dev/gpu/check.sh 560 lighton-ocr olmocr olmocr:warm
# SAMPLER_BENCH=1 first times vLLM's top-p filter alone (dev/gpu/sampler_bench.py, sampler.txt).
# PAGE_ARITH=1 first times each family's page arithmetic alone on the host's own torch
# (dev/gpu/page_arith.py, PAGE_ARITH_PAGES's configs and pages; about a minute): page-arith.jsonl,
# rows to append to benchmarks/page_arith.jsonl.
# A target's PYSPY_HZ=N samples its run with py-spy (carry .gpu-bundle/py-spy with the call that
# starts the check; dev/gpu/pyspy_summary.py reads the samples); its
# ENGINES_ON_GPU=N runs N benches whose engines share the GPU (their rows: shared-rows.jsonl),
# with MPS=1 as clients of CUDA's Multi-Process Service (its daemon ended after the run); its
# DIRECT_FIRST=1 runs the direct path before the worker's pass (a first busy minute told apart).
# Every run sends a family's greedy attempt at temperature 1 (a stand-in's greedy answer repeats
# the prompt's last token: no text); a target's GREEDY_TEMPERATURE=0 keeps it greedy.
# TARGET: qwen-vl olmocr chandra dots-ocr lighton-ocr lighton-ocr-3-0.8b lighton-ocr-3-4b;
# TARGET:warm is its second start, after its fresh one on the same host (this call or an
# earlier one while the host stayed up). Settings after commas are the worker's, for that run
# alone (its row is then off the defaults): chandra,MAX_NUM_SEQS=512 olmocr:warm,START_MODE=fast
#
# What comes back in $OUT (3 files; at most 8 come back a call):
#   gpu-rows.jsonl      this call's rows: append them to benchmarks/gpu.jsonl
#   check-LABEL.tgz     each run's bench output and worker log (vLLM's own lines in it), vLLM's
#                       gauges every 10 s (dev/gpu/metrics.py), the plan; rewritten after each run
#   summary.txt         one line a run (also printed)
#   shared-rows.jsonl   the rows of ENGINES_ON_GPU runs, one an engine: kept out of the data
#   page-arith.jsonl    with PAGE_ARITH=1: one row a config
set -u
budget=${1:?usage: check.sh BUDGET_S TARGET[:warm][,VAR=VALUE...]...}
shift
t0=$(date +%s)
vllm=${VLLM:-0.26}
if [ "${DRY_RUN:-0}" = 1 ]; then
  py=${PYTHON:-python3}
  [ -x .venv/bin/python ] && py=${PYTHON:-.venv/bin/python}
  PYTHONPATH=$PWD/src exec "$py" -m vlm_ocr_lab.bench.gpu_check plan "$budget" "$@" \
    --vllm "$vllm" --gpu "${GPU:-H200}" --data benchmarks/gpu.jsonl
fi
A=${ACC:-/tmp/acc}  # where the bundle is unpacked (dev/gpu/env.sh)
out=${OUT:?set OUT: the folder whose files come back}
# py-spy comes with the call that starts the check (carry .gpu-bundle/py-spy) and is put beside
# the bundle; a PYSPY_HZ target without it would run unsampled, its row none the wiser: refuse
# before anything runs
[ -x .gpu-bundle/py-spy ] && [ ! -x "$A/py-spy" ] && mkdir -p "$A" && cp .gpu-bundle/py-spy "$A/"
case " $* " in *,PYSPY_HZ=*)
  if [ ! -x "$A/py-spy" ]; then
    echo "a target sets PYSPY_HZ but $A/py-spy is missing: carry .gpu-bundle/py-spy with the" \
      "call that starts the check" >&2
    exit 3
  fi ;;
esac
# The GPU host's alone: env.sh makes /runpod-volume for the compile caches, and on another machine
# the worker would then take that folder for RunPod's network volume
if ! command -v nvidia-smi > /dev/null; then
  echo "check.sh runs on the GPU host (no nvidia-smi here); DRY_RUN=1 prints its plan anywhere" >&2
  exit 3
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)  # the planner's card
label=${LABEL:-call-$(date +%H%M%S)}
work=$A/check
logs=$work/logs-$label
mkdir -p "$logs"
rows=$work/rows.jsonl  # every row of this lease so far: later calls plan from them too
port=${PORT:-8765}
commit=${COMMIT:-unknown}
py=python3
[ "$commit" = unknown ] && echo "COMMIT is not set: the rows will say commit 'unknown'" >&2

say() { echo "$*" | tee -a "$out/summary.txt"; }

pack() {  # everything of this call so far, in one file
  tar -czf "$out/.check-$label.tmp" -C "$work" "logs-$label" && \
    mv "$out/.check-$label.tmp" "$out/check-$label.tgz"
}

vllm_pids() {  # vLLM's processes, by their command lines (its own rename them VLLM::...): a
  # Python process or a renamed one, never the shell whose command line names the launcher
  ps -ww -eo pid=,args= |
    awk '$2 ~ /^VLLM::/ || ($2 ~ /python/ && /vllm\.entrypoints|fork_launcher\.py/) {print $1}'
}

stop_vllm() {  # nothing of a run may hold the port or the GPU for the next one
  local pids n
  pids=$(vllm_pids)
  [ -z "$pids" ] && return 0
  # shellcheck disable=SC2086
  kill $pids 2> /dev/null
  for n in $(seq 15); do [ -z "$(vllm_pids)" ] && break; sleep 1; done
  pids=$(vllm_pids)
  # shellcheck disable=SC2086
  [ -n "$pids" ] && kill -9 $pids 2> /dev/null
  for n in $(seq 30); do  # the GPU's memory given back
    [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2> /dev/null)" ] && break
    sleep 1
  done
}

make_model() {  # $1 generator family, $2 folder
  [ -d "$2" ] && return 0
  if python3 dev/gpu/make_dummy_model.py "$1" "$2" > "$logs/make-$1.txt" 2>&1; then return 0; fi
  rm -rf "$2"
  if [ "$1" = qwen-vl ] && [ -f $A/make_dummy_qwen3vl.py ]; then  # the shared generator
    PYTHONPATH=$A/site python3 $A/make_dummy_qwen3vl.py "$2" --awq >> "$logs/make-$1.txt" 2>&1 \
      && return 0
    rm -rf "$2"
  fi
  return 1
}

run_one() {  # in a subshell: the run's own environment, and env.sh sourced with it
  local dir=$1 log=$2 n=$3 pages_args
  # the planner quotes each VAR=VALUE (a value may hold spaces: two flags in VLLM_EXTRA_ARGS)
  [ -n "$run_env" ] && eval "export $run_env"
  . dev/gpu/env.sh
  if [ "$kind" = fresh ]; then
    pages_args=(--pages $((pages / 2)) --jobs 2 --direct)
    [ "${DIRECT_FIRST:-0}" = 1 ] && pages_args+=(--direct-first)
  else
    pages_args=(--pages 0 --jobs 1)
  fi
  # PYSPY_HZ=N (a run's setting: chandra:warm,PYSPY_HZ=20) samples every process of the run with
  # py-spy (at $A/py-spy: see the top), idle threads too, into TAG-pyspy.json (speedscope's format,
  # samples in order): dev/gpu/pyspy_summary.py reads where each process's time went
  local profile=()
  if [ -n "${PYSPY_HZ:-}" ] && [ -x "$A/py-spy" ]; then
    profile=("$A/py-spy" record --subprocesses --idle --nonblocking --format speedscope
      -r "$PYSPY_HZ" -o "${log%.txt}-pyspy.json" --)
  fi
  if [ "${ENGINES_ON_GPU:-1}" -gt 1 ]; then
    run_shared "$dir" "$log"
    return
  fi
  # the run's kind as planned: a start that fails has no caches to tell it by
  VLLM_PORT=$port bench "$log" "${pages_args[@]}" --start "$kind" --record "$work/row.jsonl" \
    --note "GPU check $label, its $kind run: engine start $n on this host${run_env:+, $run_env}"
}

bench() {  # the worker's bench of the run's model ($dir), its output to $1, then its own flags
  local out=$1
  shift
  # DEBUG: vLLM's own lines go to the run's log with the worker's (a phase that grew is read there).
  # Greedy attempts sampled at 1: on dummy weights a greedy answer repeats the prompt's last token
  # (a special token or a newline: no text; a skipped token costs the API servers' CPU at every
  # step), where a trained model writes text; GREEDY_TEMPERATURE=0 keeps them greedy.
  local greedy=()
  [ "${GREEDY_TEMPERATURE:-1}" != 0 ] && greedy=(--greedy-temperature "${GREEDY_TEMPERATURE:-1}")
  LOG_LEVEL=${LOG_LEVEL:-DEBUG} MODEL_NAME=$dir timeout -k 5 $((limit + 20)) \
    "${profile[@]}" $py -m vlm_ocr_lab bench --output-tokens 800 --gpu-price 3.99 --progress 15 \
    "${greedy[@]}" \
    --time-limit "$limit" --commit "$commit" --model "$checkpoint" "$@" > "$out" 2>&1
}

said_ready() {  # said_ready GO: how many benches have said they are ready for GO (GO.ready-PID,
  # the bench's --start-together)
  find "$work" -maxdepth 1 -name "${1##*/}.ready-*" | wc -l
}

release() {  # release GO PID...: once every bench still running has said it is ready for GO,
  # make GO; a bench that ended is waited for no more
  local go=$1 alive p
  shift
  while :; do
    alive=0
    for p in "$@"; do kill -0 "$p" 2> /dev/null && alive=$((alive + 1)); done
    [ "$(said_ready "$go")" -ge "$alive" ] && break
    sleep 1
  done
  touch "$go"
}

run_shared() {  # ENGINES_ON_GPU=N: N benches whose engines share the GPU, each with its share of
  # GPU_MEMORY_UTILIZATION; each starts once the one before is ready (no two profiling runs at
  # once: each would count the other's memory as its own), then all run their worker passes at
  # once (--start-together), then their direct paths at once (GO.second; DIRECT_FIRST=1 the other
  # way round); their rows go to TAG-shared-K.jsonl, apart
  local dir=$1 log=$2 k pid pids=() go=$work/go-$tag share profile=()  # (py-spy: one engine only)
  local phases=(--direct)
  [ "${DIRECT_FIRST:-0}" = 1 ] && phases+=(--direct-first)
  rm -f "$go" "$go".ready-* "$go".second "$go".second.ready-* "$work"/shared-*.jsonl
  share=$(python3 -c "print(round(${GPU_MEMORY_UTILIZATION:-0.9} / $ENGINES_ON_GPU, 3))")
  # MPS=1: the engines as clients of CUDA's Multi-Process Service, whose kernels may share the
  # SMs; the GPU's compute mode stays as it is, and the daemon, on a pipe of this run's own (no
  # other run is its client), is ended after it
  local mps=0 mps_note=${run_env:+, $run_env}
  if [ "${MPS:-0}" = 1 ]; then
    export CUDA_MPS_PIPE_DIRECTORY=$work/mps-$tag CUDA_MPS_LOG_DIRECTORY=$logs/mps-$tag
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d > "$CUDA_MPS_LOG_DIRECTORY/start.txt" 2>&1; then
      mps=1
    else
      echo "MPS: the control daemon did not start ($(head -c 300 \
        "$CUDA_MPS_LOG_DIRECTORY/start.txt")): the engines share the GPU without it" >&2
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
      mps_note="$mps_note, without MPS: its daemon did not start"
    fi
  fi
  for k in $(seq "$ENGINES_ON_GPU"); do
    VLLM_PORT=$((port + 1000 * k)) GPU_MEMORY_UTILIZATION=$share bench "${log%.txt}-$k.txt" \
      --pages $((pages / 2)) --jobs 2 "${phases[@]}" --start-together "$go" \
      --record "$work/shared-$k.jsonl" \
      --note "GPU check $label: engine $k of $ENGINES_ON_GPU sharing the GPU$mps_note" &
    pid=$!
    pids+=("$pid")
    while [ "$(said_ready "$go")" -lt "$k" ] && kill -0 "$pid" 2> /dev/null; do
      sleep 1
    done
  done
  touch "$go"
  release "$go.second" "${pids[@]}" &  # the second phase at once too
  wait
  [ "$mps" = 1 ] && { echo quit | nvidia-cuda-mps-control; } > /dev/null 2>&1
  return 0
}

. dev/gpu/env.sh  # the bundle unpacked (once), the worker's Python path: the planner imports it
fresh_done() {  # the targets started fresh on this host so far (their warm starts may run)
  local f
  for f in "$work"/fresh-*; do [ -e "$f" ] && echo "--fresh-done" "${f##*/fresh-}"; done
}
# shellcheck disable=SC2046
$py -m vlm_ocr_lab.bench.gpu_check plan "$budget" "$@" --vllm "$vllm" --gpu "$gpu" \
  --on-host $(fresh_done) --data benchmarks/gpu.jsonl --data "$rows" > "$logs/plan.txt" 2>&1
cat "$logs/plan.txt"
if [ "${SAMPLER_BENCH:-0}" = 1 ]; then  # vLLM's top-p filter alone, before the runs (about 1 min)
  timeout 240 "$A/vllm-python" dev/gpu/sampler_bench.py > "$logs/sampler.txt" 2>&1
  say "sampler bench: exit $?, $(grep -c '^batch' "$logs/sampler.txt") cases (sampler.txt)"
  pack
fi
# the pages the GPU check's benches send each family (a letter page at the family's sizing)
page_arith_pages=${PAGE_ARITH_PAGES:-lightonocr-2-1b:1190x1540 dots.ocr:1700x2200 \
chandra-ocr-2:1632x2112 lightonocr-3-0.8b:1583x2048 lightonocr-3-4b:1583x2048}
if [ "${PAGE_ARITH:-0}" = 1 ]; then  # the host's own python3 and torch: no bundle needed
  for cp in $page_arith_pages; do
    timeout 90 env -u PYTHONPATH python3 dev/gpu/page_arith.py "examples/${cp%%:*}.config.json" \
      --page "${cp##*:}" --repeat 5 --commit "${COMMIT:-unknown}" \
      >> "$out/page-arith.jsonl" 2>> "$logs/page-arith.txt"
  done
  timed=$(cat "$out/page-arith.jsonl" 2> /dev/null | wc -l)
  say "page arithmetic: $timed of $(wc -w <<< "$page_arith_pages") configs (page-arith.jsonl)"
  pack
fi
starts=$(cat $work/starts 2> /dev/null || echo 0)
for spec in "$@"; do
  left=$((budget - ($(date +%s) - t0)))
  read -r -a done_args <<< "$(fresh_done | tr '\n' ' ')"
  target=$spec tag='' skip='' kind='' generator='' checkpoint='' pages=0 estimate=0 limit=0 run_env=''
  engines=1
  eval "$($py -m vlm_ocr_lab.bench.gpu_check step "$spec" --left "$left" --vllm "$vllm" \
    --gpu "$gpu" --data benchmarks/gpu.jsonl --data "$rows" "${done_args[@]}")"
  [ -z "$skip$kind" ] && skip="skipped: the planner gave no step (see plan.txt)"
  if [ -n "$skip" ]; then say "$spec: $skip"; continue; fi
  dir=$A/dummy/${checkpoint##*/}  # the checkpoint's name: a fine-tune is told by it
  if ! make_model "$generator" "$dir"; then
    say "$spec: skipped: dev/gpu/make_dummy_model.py cannot make '$generator' (logs: make-$generator.txt)"
    pack
    continue
  fi
  stop_vllm
  starts=$((starts + 1)) && echo $starts > $work/starts
  log=$logs/$tag.txt
  # vLLM's gauges every 10 s (of the first engine, where several share the GPU)
  python3 dev/gpu/metrics.py "$((engines > 1 ? port + 1000 : port))" 10 \
    > "$logs/$tag-metrics.txt" 2>&1 &
  sampler=$!
  say "$spec: $pages pages, about $estimate s, at most $((limit + 20)) s (${left} s left)"
  rm -f "$work/row.jsonl"
  # A fresh run starts on no caches of its model, as on a new host: the caches' key leaves out
  # what only the front ends change (API_SERVER_COUNT), so a run of the same model before it
  # would have made it warm (its row would say so)
  [ "$kind" = fresh ] && rm -rf /runpod-volume/vllm-cache/"${dir##*/}"-*
  (run_one "$dir" "$log" "$starts")
  rc=$?
  kill "$sampler" 2> /dev/null
  stop_vllm
  if [ "$engines" -gt 1 ]; then  # the engines' rows kept apart from the data's
    if compgen -G "$work/shared-*.jsonl" > /dev/null; then
      cat "$work"/shared-*.jsonl | tee "$logs/$tag-shared.jsonl" >> "$out/shared-rows.jsonl"
      $py -m vlm_ocr_lab.bench.gpu_check summary --together "$work"/shared-*.jsonl \
        | sed 's/^/  /' | tee -a "$out/summary.txt"
    else
      say "  no rows: the benches exited before recording; see $tag-K.txt"
    fi
    pack
    continue
  fi
  if [ -s "$work/row.jsonl" ]; then
    $py -m vlm_ocr_lab.bench.gpu_check gauges "$logs/$tag-metrics.txt" "$work/row.jsonl" \
      > /dev/null 2>> "$log"
    cat "$work/row.jsonl" >> "$out/gpu-rows.jsonl"
    cat "$work/row.jsonl" >> "$rows"
    say "  $($py -m vlm_ocr_lab.bench.gpu_check summary "$work/row.jsonl")"
    grep -q '"engine_ready_s": null' "$work/row.jsonl" || touch "$work/fresh-$target"
  else
    say "  no row: the bench exited $rc before recording (124: ended at its limit); see $tag.txt"
    tail -5 "$log" | sed 's/^/    /' | tee -a "$out/summary.txt"
  fi
  pack
done
pack
say "check $label: done in $(($(date +%s) - t0)) s of $budget"
