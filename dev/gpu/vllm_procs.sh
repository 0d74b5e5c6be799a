# vLLM's processes on the GPU host, for dev/gpu/check.sh (between runs) and
# dev/gpu/check_detached.sh (stopping a check): source it.

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
