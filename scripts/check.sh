#!/usr/bin/env bash
# `make check`: the loop to run after each change. Formatting, clippy's lints (every warning
# denied, enforced by the build itself: .cargo/config.toml, so neither this nor `make test`
# rebuilds the other's work) and the in-process tests: every library's unit tests, every
# integration test target that needs no service, and binaries with unit tests. The rule: a test
# that needs a service, the model or an emulator says so with `sluice_testkit::needs!`; a target
# none of whose files does, and that runs no binary of its package, is in-process and runs here
# (scripts/in-process-tests.sh lists them). Needs no service, model or network; `make test`
# runs these and everything else.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
targets=$(scripts/in-process-tests.sh)
{
  # Three binaries at once and eight tests at a time in each, whatever the cores: in-process
  # tests mostly wait on timers and channels (the contract binary: 5.7 s with two threads,
  # 2.2 s with eight), and none shares the local LLM that limits `make test` to two.
  # shellcheck disable=SC2086 # one word per argument
  # The property tests check the first 200 of their seeded cases here, all 10,000 in `make
  # test` (SLUICE_TEST_CASES): at 1,000 they were a third of the lane's test CPU (the access
  # cases of the store suite on five stores, through HTTP for the remote ones, and the
  # contract's access property).
  SLUICE_TEST_CASES=${SLUICE_TEST_CASES:-200} \
  SLUICE_TEST_JOBS=${SLUICE_TEST_JOBS:-3} scripts/run-tests.py --workspace --lib $targets \
    -- --test-threads=8
  # The component templates `sluice component new` writes, their rules tested on this
  # machine (scripts/build-components.sh builds the same crates into components).
  cargo test --manifest-path components/Cargo.toml -p template -p prompt-template
} 2>&1 | tee /dev/stderr | awk '
    /^test result:/ { passed += $4; failed += $6; ignored += $8 }
    END { printf "check: %d passed, %d failed, %d ignored\n", passed, failed, ignored > "/dev/stderr"; exit (failed > 0) }'
