#!/usr/bin/env bash
# `make load`: the load sweep of the README. Starts the synthetic upstream (a benchmark
# fixture, not a model) and `sluice serve` on 127.0.0.1, ingests the sample documents, runs
# `sluice bench run` with the comparison against the fixture alone, prints one line per level,
# and stops both. Reports: $SLUICE_HOME/load/report.{json,csv,html}.
#
#   LEVELS=100,500,1000    concurrent streams per level
#   TOKENS_PER_SEC=10      per stream (a 256-token answer then lasts 25.6 s, as a long
#   TOKENS=256             answer from a loaded GPU does)
#   REQUESTS=1000          recorded per level, after WARMUP_S seconds of unrecorded load
#   WARMUP_S=26            (one answer's length: every stream is open before recording)
#   LAMBDA=64              instead of `sluice serve`, the answer function as one execution
#                          environment of Lambda Managed Instances: it takes up to LAMBDA
#                          invocations at once from cargo-lambda's emulator
#                          (AWS_LAMBDA_MAX_CONCURRENCY), streamed through the emulated function
#                          URL; LEVELS defaults to LAMBDA
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
# Cargo's target directory: the repository's target/ unless CARGO_TARGET_DIR says (CI shares one).
target=${CARGO_TARGET_DIR:-$PWD/target}
export SLUICE_MODEL_DIR=${SLUICE_MODEL_DIR:-$cache/models/all-MiniLM-L6-v2}
scripts/setup.sh model
# The build `make test` makes (every target, same features): nothing to compile after it. A
# plain `cargo build` would unify features differently and recompile half the tree.
cargo test --workspace --all-targets --no-run --quiet 2>/dev/null
sluice=$target/debug/sluice
llm_port=${SLUICE_LOAD_LLM_PORT:-18095}
port=${SLUICE_LOAD_PORT:-18096}
out=$cache/load
data=$(mktemp -d)
lambda=${LAMBDA:-}
"$sluice" fixture llm --addr "127.0.0.1:$llm_port" --tokens-per-sec "${TOKENS_PER_SEC:-10}" \
  --tokens "${TOKENS:-256}" 2>/dev/null &
fixture=$!
# One tenant carries the whole load: its rate and open-stream limits (50/s, 64 streams by
# default) would refuse most of it, so they are off here.
SLUICE_ADDR=127.0.0.1:$port SLUICE_DATA_DIR=$data SLUICE_LLM_URL=http://127.0.0.1:$llm_port/v1 \
  SLUICE_TENANT_RATE=0 SLUICE_TENANT_MAX_STREAMS=0 SLUICE_CACHE=off SLUICE_MAX_TOKENS=${TOKENS:-256} RUST_LOG=${RUST_LOG:-warn} \
  "$sluice" serve 2>"$data/serve.log" &
server=$!
# Stop both and wait for the server to flush its store before its folder goes.
emulator=
# The warnings and errors the server (or the function) logged are shown before its folder
# goes: a failed request's cause is often only there.
logged() {
  local log n
  for log in "$data/serve.log" "$data/answer.log"; do
    [ -f "$log" ] || continue
    n=$(grep -cE 'WARN|ERROR' "$log" || true)
    [ "$n" -gt 0 ] || continue
    echo "$(basename "$log"): $n warnings and errors; the last 5:"
    grep -E 'WARN|ERROR' "$log" | tail -n 5 | cut -c1-400
  done
}
trap 'kill "$fixture" "$server" $emulator 2>/dev/null || true; wait "$server" 2>/dev/null || true; logged; rm -rf "$data"' EXIT
for _ in $(seq 300); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done
"$sluice" ingest --url "http://127.0.0.1:$port" samples >/dev/null
url=http://127.0.0.1:$port
if [ -n "$lambda" ]; then
  # The served corpus is in $data; the answer function opens the same folder once the
  # server has closed it (an embedded store belongs to one process at a time).
  kill "$server"
  wait "$server" 2>/dev/null || true
  # The function's LAMBDA workers each hold a request for the next invocation, and the
  # emulator hands each its own. Not `--concurrency`: in cargo-lambda 1.9.2 that only sizes a
  # pool of instances the emulator starts itself with `cargo run` whenever an invocation
  # waits, `--only-lambda-apis` notwithstanding (started from a package with a binary, it
  # compiled the workspace on the cores being measured). From `tests`, which has no binary,
  # nothing could be built even so; the check after the run fails a run where it tried.
  (cd tests && exec "$cache/venv/bin/cargo-lambda" lambda watch --only-lambda-apis \
    -A 127.0.0.1 -P "$port") >"$data/emulator.log" 2>&1 &
  emulator=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.2
  done
  AWS_LAMBDA_RUNTIME_API=http://127.0.0.1:$port/.rt AWS_LAMBDA_FUNCTION_NAME=answer AWS_LAMBDA_FUNCTION_VERSION=1 \
    AWS_LAMBDA_FUNCTION_MEMORY_SIZE=2048 AWS_LAMBDA_MAX_CONCURRENCY=$lambda \
    SLUICE_DATA_DIR=$data SLUICE_LLM_URL=http://127.0.0.1:$llm_port/v1 SLUICE_TENANT_RATE=0 \
    SLUICE_TENANT_MAX_STREAMS=0 SLUICE_CACHE=off SLUICE_MAX_TOKENS=${TOKENS:-256} RUST_LOG=${RUST_LOG:-warn} \
    "$target/debug/answer" >"$data/answer.log" 2>&1 &
  server=$!
  url=http://127.0.0.1:$port/lambda-url/_
fi
# The machine's CPU counters (user nice system idle iowait irq softirq steal), to show what the
# run had of it: this kind of machine is shared, and its tails move with its neighbours.
machine() { awk '/^cpu /{print $2, $3, $4, $5, $6, $7, $8, $9}' /proc/stat; }
before=$(machine)
"$sluice" bench run --url "$url" --load concurrent \
  --levels "${LEVELS:-${lambda:-100,500,1000}}" --requests "${REQUESTS:-1000}" --warmup-s "${WARMUP_S:-26}" \
  --compare-llm "http://127.0.0.1:$llm_port/v1" --out "$out"
if [ -n "$lambda" ] && grep -q "spawning function instance" "$data/emulator.log"; then
  echo "the emulator started function instances of its own during the run: not a measurement of one environment" >&2
  exit 1
fi
echo "server peak RSS (VmHWM): $(grep VmHWM "/proc/$server/status" | awk '{print $2/1024 " MB"}')"
# CPU the server used over the whole sweep (user + system, from /proc/PID/stat).
cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f s", ($14 + $15) / hz}' "/proc/$1/stat"; }
echo "server CPU (user + system): $(cpu "$server")"
# Under the emulator every token event is relayed once more, by the emulator, on the same cores.
[ -z "$lambda" ] || echo "emulator CPU (user + system): $(cpu "$emulator")"
echo "$before $(machine)" | awk '{for (i = 1; i <= 8; i++) d[i] = $(i + 8) - $i;
  t = 0; for (i = 1; i <= 8; i++) t += d[i];
  if (t > 0) printf "machine over the run: %.0f %% busy, %.1f %% stolen by the host\n", 100 * (t - d[4] - d[5]) / t, 100 * d[8] / t}'
