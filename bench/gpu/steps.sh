# Sourced by the GPU scripts: `step NAME LIMIT_S LOG COMMAND...` runs COMMAND with its own time
# limit, appends its output to LOG and one line "NAME: rc=N in S s" to $summary, and counts a
# failing step in $failed (the next step runs anyway).
failed=${failed:-0}
step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  local line="$name: rc=$rc in $((SECONDS - start)) s"
  [ "$rc" -eq 124 ] && line="$line (stopped at its ${limit} s limit)"
  echo "$line" | tee -a "$summary"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
}
