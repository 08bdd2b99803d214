#!/usr/bin/env bash
# `make check`: the loop to run after each change. Formatting, clippy's lints (-D warnings,
# enforced by the build through the same wrapper as `make test`, so neither rebuilds the
# other's work) and the in-process tests: every crate's unit tests, the API contract on test
# doubles, the sandbox's hostile-component and registry tests, the stores on a real Qdrant
# Edge shard and on stand-ins, and the docs held to the code. Needs no service, model or
# network; `make test` runs these and everything else.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${SLUICE_HOME:-$HOME/.cache/sluice}/target}
source scripts/cargo-env.sh
cargo fmt --all --check
cargo test --workspace --no-fail-fast --lib --bins \
  --test contract --test hostile --test registry --test store --test remote --test files \
  2>&1 | tee /dev/stderr | awk '
    /^test result:/ { passed += $4; failed += $6; ignored += $8 }
    END { printf "check: %d passed, %d failed, %d ignored\n", passed, failed, ignored > "/dev/stderr"; exit (failed > 0) }'
