# shellcheck shell=bash
# Sourced by the long builds: numbered steps with stated estimates, and a
# line every minute with the time left, so that a first run never looks
# stuck. No TTY needed; the lines read the same in a CI log.
#
# progress_plan "PREFIX" SECONDS...: the estimate of every step, in order.
# progress_step N "WHAT" COMMAND...: runs step N and reports how long it took.
# The estimates, stated by the callers, are for 2 idle cores; a busy
# machine takes longer (docs/benchmarks.md), and a line says so.

progress_plan() {
  progress_prefix=$1
  shift
  progress_estimates=("$@")
}

progress_left() { # step index (1-based): the estimate of it and the steps after it
  local i total=0
  for ((i = $1; i <= ${#progress_estimates[@]}; i++)); do
    total=$((total + progress_estimates[i - 1]))
  done
  echo "$total"
}

progress_fmt() { # seconds -> "4 min" / "40 s"
  if [ "$1" -ge 90 ]; then echo "$((($1 + 30) / 60)) min"; else echo "$1 s"; fi
}

progress_step() {
  local n=$1 what=$2 total=${#progress_estimates[@]}
  shift 2
  local est=${progress_estimates[n - 1]} after start=$SECONDS pid rc=0 elapsed left
  after=$(($(progress_left "$n") - est))
  echo "$progress_prefix: step $n/$total: $what (about $(progress_fmt "$(progress_left "$n")") left)"
  "$@" &
  pid=$!
  while ! progress_wait "$pid" 60; do
    elapsed=$((SECONDS - start))
    if [ "$elapsed" -lt "$est" ]; then
      left=$((est - elapsed + after))
      echo "$progress_prefix: step $n/$total: $what, $(progress_fmt "$elapsed") so far (about $(progress_fmt "$left") left)"
    else
      left=
      [ "$after" -eq 0 ] || left="; after it about $(progress_fmt "$after")"
      echo "$progress_prefix: step $n/$total: $what, $(progress_fmt "$elapsed") so far: past its estimate of $(progress_fmt "$est") (a busy machine is slower)$left"
    fi
  done
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || { echo "$progress_prefix: step $n/$total: $what failed" >&2; return "$rc"; }
  echo "$progress_prefix: step $n/$total: $what took $(progress_fmt $((SECONDS - start)))"
}

# progress_wait PID SECONDS: true when PID has exited, false after SECONDS.
progress_wait() {
  local i
  for ((i = 0; i < $2; i++)); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 1
  done
  ! kill -0 "$1" 2>/dev/null
}
