#!/usr/bin/env bash
# Runs the DynamoDB emulator (moto_server from PyPI, installed by scripts/setup.sh tools) on
# 127.0.0.1. It keeps items in memory and supports the TTL API, but never expires items:
# Sluice checks `ttl` itself.
#
#   scripts/dynamodb.sh PORT            in the foreground
#   scripts/dynamodb.sh PORT --detach   in the background; prints its PID once it answers
#
# Point Sluice at it with AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:PORT plus any region
# and static credentials (AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test).
set -euo pipefail
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
port=${1:?usage: scripts/dynamodb.sh PORT [--detach]}
bin=$cache/venv/bin/moto_server
[ -x "$bin" ] || { echo "moto is not installed: run scripts/setup.sh tools" >&2; exit 1; }
if [ "${2:-}" != "--detach" ]; then
  exec "$bin" -H 127.0.0.1 -p "$port"
fi
mkdir -p "$cache/logs"
"$bin" -H 127.0.0.1 -p "$port" >"$cache/logs/moto-$port.log" 2>&1 &
pid=$!
for _ in $(seq 1 60); do
  if curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$port/moto-api/" 2>/dev/null; then
    echo "$pid"
    exit 0
  fi
  kill -0 "$pid" 2>/dev/null || { echo "moto_server exited; see $cache/logs/moto-$port.log" >&2; exit 1; }
  sleep 0.5
done
kill "$pid" 2>/dev/null || true
echo "moto_server did not answer in 30 s; see $cache/logs/moto-$port.log" >&2
exit 1
