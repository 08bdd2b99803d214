#!/usr/bin/env bash
# Runs the AWS emulator (moto_server from PyPI, installed by scripts/setup.sh tools) on
# 127.0.0.1: DynamoDB, S3 and Secrets Manager, all on one port, in memory. Its DynamoDB
# supports the TTL API but never expires items: Sluice checks `ttl` itself.
#
#   scripts/aws.sh PORT            in the foreground
#   scripts/aws.sh PORT --detach   in the background; prints its PID once it answers
#
# Point Sluice at it with AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_S3 and
# AWS_ENDPOINT_URL_SECRETS_MANAGER=http://127.0.0.1:PORT plus any region and static
# credentials (AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test).
set -euo pipefail
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
port=${1:?usage: scripts/aws.sh PORT [--detach]}
bin=$cache/venv/bin/moto_server
[ -x "$bin" ] || { echo "moto is not installed: run scripts/setup.sh tools" >&2; exit 1; }
if [ "${2:-}" != "--detach" ]; then
  exec "$bin" -H 127.0.0.1 -p "$port"
fi
source "$(dirname "$0")/detach.sh"
detach moto_server "http://127.0.0.1:$port/moto-api/" "$cache/logs/moto-$port.log" "$bin" -H 127.0.0.1 -p "$port"
