#!/usr/bin/env bash
# `make demo`: install what is missing, start the local LLM and `sluice serve` on
# 127.0.0.1:8080, ingest the sample corpus, print a curl example, then serve until Ctrl-C.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
# Cargo's target directory: the repository's target/ unless CARGO_TARGET_DIR says (CI shares one).
target=${CARGO_TARGET_DIR:-$PWD/target}
export SLUICE_DATA_DIR=${SLUICE_DATA_DIR:-$cache/demo-data}
export SLUICE_ADDR=${SLUICE_ADDR:-127.0.0.1:8080}

scripts/setup.sh demo
# The CLI alone, with the features the whole workspace resolves (`--workspace` picks the
# features, `--bin` the one binary): the same compiled libraries as `make test`, so whichever
# runs first the other compiles only what is its own, without the Lambda functions' crates and
# links the demo does not run (a plain `cargo build -p sluice` unifies features differently and
# compiled most of the tree a second time).
cargo build --workspace --bin sluice
sluice=$target/debug/sluice

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
if [ -z "${SLUICE_LLM_URL:-}" ]; then
  export SLUICE_LLM_URL=http://127.0.0.1:8081/v1
  if ! curl -fsS -m 2 http://127.0.0.1:8081/health >/dev/null 2>&1; then
    pids+=("$(scripts/llm.sh 8081 --detach)")
  fi
fi

"$sluice" serve &
pids+=($!)
for _ in $(seq 1 120); do
  curl -fsS -m 2 "http://$SLUICE_ADDR/readyz" >/dev/null 2>&1 && break
  sleep 0.5
done
"$sluice" ingest samples

cat <<EOT

Sluice is serving on http://$SLUICE_ADDR (LLM: $SLUICE_LLM_URL, data: $SLUICE_DATA_DIR).
Try:
  curl -N http://$SLUICE_ADDR/v1/answer -d '{"query": "How long does a replacement card take to arrive?"}'
  $sluice ask "What is the daily ATM limit on a premium account?"
Ctrl-C stops the server and the local LLM.
EOT
wait "${pids[@]: -1}"
