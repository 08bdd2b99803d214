#!/usr/bin/env bash
# `make test`: installs what is missing, starts the test LLM and the DynamoDB emulator on
# 127.0.0.1, builds every target with clippy's lints, runs every test, stops both, and prints
# one summary line.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cache=${SLUICE_HOME:-$HOME/.cache/sluice}

# The example components (Debian's rustc-web and jco from npm on first use), before the
# background steps below so that no two apt-get runs contend for dpkg's lock.
scripts/build-components.sh >/dev/null
# A fresh machine spends most of an hour here, nearly all of it compiling on every core. What
# only the tests need is installed beside the build (downloads and venvs wait on the network,
# not the CPU). cargo-deny, cargo-fuzz, the fuzz targets and the short fuzz runs of every
# target (the long form: `make fuzz`) go at the lowest CPU priority, so they take what the
# build and the tests leave idle: on a warm machine the fuzz runs are over while the tests
# still wait on the LLM; on a fresh one they come after the build. Each run is bounded in
# time, not in work, so sharing the CPU costs executions, not minutes. Their output goes to
# logs, shown if they fail.
mkdir -p "$cache"
scripts/setup.sh tests >"$cache/setup-tests.log" 2>&1 &
setup_pid=$!
fuzz_log="$cache/fuzz-short.log"
(nice -n 19 scripts/setup.sh cargo-tools && nice -n 19 scripts/fuzz.sh build &&
  nice -n 19 scripts/fuzz.sh "${SLUICE_FUZZ_SECONDS:-8}" >"$fuzz_log") \
  >"$cache/setup-after.log" 2>&1 &
after_pid=$!
llm_pid= aws_pid=
trap 'kill $setup_pid $after_pid $llm_pid $aws_pid 2>/dev/null || true' EXIT
# Waits for background step $1 (pid $2, log $3); shows its log and fails if it failed.
await() {
  if ! wait "$2"; then
    tail -n 40 "$3" >&2
    echo "[test] $1 failed; the whole log is $3" >&2
    exit 1
  fi
}

port=${SLUICE_TEST_LLM_PORT:-18081}
aws_port=${SLUICE_TEST_AWS_PORT:-18082}
export SLUICE_TEST_LLM_URL="http://127.0.0.1:$port/v1"
# The standard AWS variables: the SDK finds the emulator with no code hook.
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$aws_port"
export AWS_ENDPOINT_URL_S3="http://127.0.0.1:$aws_port"
export AWS_ENDPOINT_URL_SECRETS_MANAGER="http://127.0.0.1:$aws_port"
export AWS_ENDPOINT_URL_STS="http://127.0.0.1:$aws_port"
export AWS_ENDPOINT_URL_SQS="http://127.0.0.1:$aws_port"
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
export SLUICE_TEST_MOTO_SERVER="$cache/venv/bin/moto_server"
export SLUICE_MODEL_DIR=${SLUICE_MODEL_DIR:-$cache/models/all-MiniLM-L6-v2}
export RUST_LOG=${RUST_LOG:-warn}
log=$(mktemp)
set +e
# Every target (benches and examples too, as `make lint` checks them), then the tests.
cargo test --workspace --all-targets --no-run --color never 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
await "scripts/setup.sh tests" "$setup_pid" "$cache/setup-tests.log"
# The test LLM and the DynamoDB emulator, now that setup has installed them.
llm_pid=$(scripts/llm.sh "$port" --detach)
aws_pid=$(scripts/aws.sh "$aws_port" --detach)
set +e
if [ "$status" -eq 0 ]; then
  # Every test binary, several at once (scripts/run-tests.py says why), then the doc tests.
  (
    rc=0
    scripts/run-tests.py --workspace --color never || rc=$?
    cargo test --workspace --doc --color never || rc=$?
    exit "$rc"
  ) 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
fi
# The fuzz runs, over by now on a warm machine.
fuzz=0
wait "$after_pid" || fuzz=$?
if [ "$fuzz" -ne 0 ]; then
  tail -n 40 "$cache/setup-after.log" >&2
  echo "[test] cargo-deny, cargo-fuzz or the fuzz runs failed; the whole log is $cache/setup-after.log" >&2
fi
cat "$fuzz_log" 2>/dev/null
# Supply chain: licences, banned crates, sources (the advisory database is on GitHub, which
# this machine cannot reach, so `advisories` is not checked).
deny=0
"$cache/tools/bin/cargo-deny" deny --log-level error check licenses bans sources || deny=$?
set -e
passed=$(grep -Eo '[0-9]+ passed' "$log" | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s+=$1} END {print s+0}')
# A test binary that crashed (a signal, an abort) prints no result line of its own: cargo says
# it failed, and it counts here as one failure more than its results show.
crashed=$(( $(grep -c '^error: test failed, to rerun pass' "$log" || true) - $(grep -c '^test result: FAILED' "$log" || true) ))
[ "$crashed" -gt 0 ] && failed=$((failed + crashed))
ignored=$(grep -Eo '[0-9]+ ignored' "$log" | awk '{s+=$1} END {print s+0}')
# A test whose service is missing (outside CI) stops at once and says so on a `skipped:` line
# (sluice_testkit::needs!); libtest counted it as passed.
skipped=$(grep -c '^skipped: ' "$log" || true)
passed=$((passed - skipped)) ignored=$((ignored + skipped))
grep '^skipped: ' "$log" >&2 || true
rm -f "$log"
echo
echo "tests: $passed passed, $failed failed, $ignored skipped; cargo deny: $([ "$deny" -eq 0 ] && echo ok || echo FAILED); fuzz: $([ "$fuzz" -eq 0 ] && echo ok || echo FAILED)"
[ "$status" -ne 0 ] && exit "$status"
[ "$deny" -ne 0 ] || [ "$fuzz" -ne 0 ] && exit 1
exit 0
