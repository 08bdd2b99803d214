#!/usr/bin/env bash
# Runs the local LLM (SmolLM2-135M-Instruct on llama.cpp's llama-server) on 127.0.0.1.
#
#   scripts/llm.sh PORT            in the foreground
#   scripts/llm.sh PORT --detach   in the background; prints its PID once /health answers
#
# One thread (-t 1): on two loaded cores, two threads collapse. Two parallel slots so that
# a test and a readiness probe never queue behind each other.
set -euo pipefail
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
port=${1:?usage: scripts/llm.sh PORT [--detach]}
bin=$cache/bin/llama-server
model=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -x "$bin" ] && [ -f "$model" ] || { echo "the local LLM is not installed: run scripts/setup.sh llm" >&2; exit 1; }
args=(-m "$model" --alias SmolLM2-135M-Instruct --host 127.0.0.1 --port "$port"
      -t 1 -tb 1 -c 8192 -np 2 --no-webui --log-disable)
if [ "${2:-}" != "--detach" ]; then
  exec "$bin" "${args[@]}"
fi
mkdir -p "$cache/logs"
"$bin" "${args[@]}" >"$cache/logs/llama-$port.log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do
  if curl -fsS -m 2 "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
    echo "$pid"
    exit 0
  fi
  kill -0 "$pid" 2>/dev/null || { echo "llama-server exited; see $cache/logs/llama-$port.log" >&2; exit 1; }
  sleep 0.5
done
kill "$pid" 2>/dev/null || true
echo "llama-server did not become healthy in 60 s; see $cache/logs/llama-$port.log" >&2
exit 1
