#!/usr/bin/env bash
# `make soak [ROUNDS=N]`: the soak test's long form (make test runs 3 rounds): N rounds of 150
# answers (default 14, about five minutes) against `sluice serve` in front of the synthetic
# upstream, memory and descriptors read after each. Needs the embedding model (make demo or
# make test installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
export SLUICE_MODEL_DIR=${SLUICE_MODEL_DIR:-$cache/models/all-MiniLM-L6-v2}
export SLUICE_SOAK_ROUNDS=${1:-14}
cargo test -p sluice --test soak -- --nocapture
