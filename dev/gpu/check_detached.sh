#!/usr/bin/env bash
# The GPU check (dev/gpu/check.sh) run apart from the host's calls, so one check may be longer
# than a call: a host call ends at its time limit, but a process started apart from it (setsid)
# keeps running while calls keep coming (the host stays up while it is called). No run is then
# skipped for want of a call's time, and no call keeps 30 s back for packing.
#
#   start: copies the project (the check's code and data, beside the bundle in /tmp/acc) to
#     /tmp/acc/tree, so that the next calls' copies of the working tree do not change the code
#     under a running check, starts the check there apart from the call, its files going to
#     /tmp/acc/detached, and prints its plan:
#       COMMIT=<hash> VLLM=0.32 LABEL=k1 bash dev/gpu/check_detached.sh start BUDGET_S TARGET...
#   collect: waits up to WAIT_S for the check to end or to pack a run's files it has not yet
#     brought back, then copies its files so far to $OUT (they come back with the call) and
#     prints its summary; call it again until it says done:
#       bash dev/gpu/check_detached.sh collect WAIT_S
#     (A host can be taken back between calls: each run's files come back with the first call
#     after it ends, never a whole WAIT_S later.)
#   stop: ends the check still running here and every process below it (the bench, the worker,
#     its vLLM), so that another may start:  bash dev/gpu/check_detached.sh stop
# A start while a check still runs is refused: the plan's "skipped" is decided again at each run
# from the time left, so a check may still be running a target its plan skipped, and two checks
# would share the GPU and the port.
set -u
A=${ACC:-/tmp/acc}
away=$A/detached

alive() { ps -o stat= -p "$1" 2> /dev/null | grep -qv '^Z'; }  # a zombie has ended

running() {  # the pid of the check still running here, if any
  local pid
  pid=$(cat "$away/.check.pid" 2> /dev/null) || return 1
  [ -n "$pid" ] && alive "$pid" && echo "$pid"
}

tree_of() {  # $1 and every process below it (the worker's vLLM too, in a session of its own)
  ps -eo pid=,ppid= | awk -v root="$1" '
    { parent[$1] = $2 }
    END {
      for (p in parent)
        for (q = p; q != "" && q > 1; q = parent[q])
          if (q == root) { print p; break }
    }'
}

case "${1:-}" in
  start)
    shift
    [ "$#" -ge 2 ] || { echo "usage: check_detached.sh start BUDGET_S TARGET..." >&2; exit 2; }
    if pid=$(running); then
      echo "a check is still running here (pid $pid; $(tail -1 "$away/summary.txt" 2> /dev/null)):" \
        "collect it until its summary says done, or end it first: check_detached.sh stop" >&2
      exit 4
    fi
    # A check without the bundle fails every run at once, and a call that then waits on it wastes
    # the host: refuse here, naming what is missing (a host given back loses /tmp/acc entirely).
    if [ "${DRY_RUN:-0}" != 1 ]; then
      ACC=$A bash dev/gpu/unpack.sh
      case "${VLLM:-0.26}" in 0.26) site=site ;; *) site=site${VLLM#0.} ;; esac  # as env.sh
      missing=
      for d in wsite "$site"; do [ -d "$A/$d" ] || missing="$missing $d"; done
      if [ -n "$missing" ]; then
        echo "the bundle is not unpacked in $A (missing:$missing): copy all its chunks there first" \
          "(dev/gpu/unpack.sh says which part is short)" >&2
        exit 3
      fi
    fi
    rm -rf "$A/tree" "$away" && mkdir -p "$A/tree" "$away" || exit 1
    cp -r benchmarks builder dev examples src pyproject.toml "$A/tree/" || exit 1
    for part in vllm-cache-seed py-spy; do  # carried with this call: the check looks for them
      if [ -e ".gpu-bundle/$part" ]; then
        mkdir -p "$A/tree/.gpu-bundle" && cp -r ".gpu-bundle/$part" "$A/tree/.gpu-bundle/"
      fi
    done
    touch "$away/.collected"  # what collect brought back last: nothing yet
    (cd "$A/tree" || exit 1
      OUT=$away setsid nohup bash dev/gpu/check.sh "$@" > "$away/check.log" 2>&1 < /dev/null &
      echo $! > "$away/.check.pid")  # setsid's own pid: no group leader here, so it does not fork
    # the plan is the check's first output, once the bundle is unpacked and compiled
    for _ in $(seq 120); do
      grep -q '^run ' "$away/check.log" 2> /dev/null && break
      alive "$(cat "$away/.check.pid")" || break
      sleep 1
    done
    sleep 1
    if ! grep -q '^run ' "$away/check.log" && ! alive "$(cat "$away/.check.pid")"; then
      cat "$away/check.log" >&2  # it ended before its plan: its refusal
      exit 3
    fi
    cat "$away/check.log"
    ;;
  collect)
    wait_s=${2:?usage: check_detached.sh collect WAIT_S}
    out=${OUT:?set OUT: the folder whose files come back}
    # no check on this host (it was given back and started afresh): say so now, not after WAIT_S
    if [ ! -f "$away/check.log" ]; then
      echo "no check was started on this host ($away/check.log is missing): the host was likely" \
        "given back and started afresh; upload the bundle and start the check again" >&2
      exit 3
    fi
    for _ in $(seq "$wait_s"); do
      grep -q '^check .*: done in' "$away/summary.txt" 2> /dev/null && break
      # the check packs its logs after each run: one newer than the last collect ends the wait
      [ -n "$(find "$away" -maxdepth 1 -name '*.tgz' -newer "$away/.collected")" ] && break
      sleep 1
    done
    touch "$away/.collected"  # before the copy: a run packed meanwhile ends the next wait
    find "$away" -maxdepth 1 -type f ! -name '.*' -exec cp {} "$out/" \;
    cat "$away/summary.txt" 2> /dev/null || tail -5 "$away/check.log"
    ;;
  stop)  # the check's processes alone: nothing else of the host's is touched
    if pid=$(running); then
      procs=$(tree_of "$pid")
      # shellcheck disable=SC2086
      kill -TERM $procs 2> /dev/null
      for _ in $(seq 15); do alive "$pid" || break; sleep 1; done
      # shellcheck disable=SC2086
      kill -KILL $procs 2> /dev/null
      echo "check $pid ended"
    else
      echo "no check is running here"
    fi
    ;;
  *)
    echo "usage: check_detached.sh start BUDGET_S TARGET... | collect WAIT_S | stop" >&2
    exit 2
    ;;
esac
