#!/usr/bin/env bash
# Runs the local LLM (SmolLM2-135M-Instruct on llama.cpp's llama-server) on 127.0.0.1.
#
#   scripts/llm.sh PORT            in the foreground
#   scripts/llm.sh PORT --detach   in the background; prints its PID once /health answers
#
# One thread (-t 1): on two loaded cores, two threads collapse. Two parallel slots so that
# a test and a readiness probe never queue behind each other. Batches of 256 tokens (not
# 2048): each step of the server reads at most that much of one slot's prompt before the
# other slot's next token, so one long prompt never silences the other stream for seconds.
set -euo pipefail
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
port=${1:?usage: scripts/llm.sh PORT [--detach]}
bin=$cache/bin/llama-server
model=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -x "$bin" ] && [ -f "$model" ] || { echo "the local LLM is not installed: run scripts/setup.sh llm" >&2; exit 1; }
args=(-m "$model" --alias SmolLM2-135M-Instruct --host 127.0.0.1 --port "$port"
      -t 1 -tb 1 -c 8192 -np 2 -b 256 -ub 256 --no-webui --log-disable)
if [ "${2:-}" != "--detach" ]; then
  exec "$bin" "${args[@]}"
fi
source "$(dirname "$0")/detach.sh"
detach llama-server "http://127.0.0.1:$port/health" "$cache/logs/llama-$port.log" "$bin" "${args[@]}"
