# Sourced by the scripts that start local services (llm.sh, aws.sh).
#
#   detach NAME URL LOG COMMAND...
#
# Starts COMMAND in the background with its output in LOG, waits up to 60 s until URL
# answers, then prints the PID. Fails, naming LOG, when the service exits or never answers.
detach() {
  local name=$1 url=$2 log=$3
  shift 3
  mkdir -p "$(dirname "$log")"
  "$@" >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 120); do
    if curl -fsS -m 2 -o /dev/null "$url" 2>/dev/null; then
      echo "$pid"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "$name exited; see $log" >&2; return 1; }
    sleep 0.5
  done
  kill "$pid" 2>/dev/null || true
  echo "$name did not answer in 60 s; see $log" >&2
  return 1
}
