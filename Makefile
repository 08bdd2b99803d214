# The two commands: `make demo` (install what is missing, serve on 127.0.0.1:8080 with the
# sample corpus) and `make test` (every test, with the local services they need); `make check`
# is the fast lane to run after each change.
SHELL := /bin/bash

.PHONY: demo test check soak fuzz bench load lint setup llm

demo:
	scripts/demo.sh

test:
	scripts/test.sh

# The fast lane: formatting, lints and the in-process tests (no services), after each change.
check:
	scripts/check.sh

# The long forms of what `make test` runs briefly: the soak (ROUNDS of 150 answers, default 14)
# and every fuzz target (SECONDS each, default 180).
soak:
	scripts/soak.sh $(ROUNDS)

fuzz:
	scripts/fuzz.sh $(or $(SECONDS),180)

bench:
	scripts/bench.sh

load:
	scripts/load.sh

# The build is the lint (.cargo/config.toml compiles the workspace with clippy-driver, every
# warning denied by [workspace.lints]): `cargo clippy` would only rebuild the same.
lint:
	cargo fmt --all --check
	cargo test --workspace --all-targets --no-run

setup:
	scripts/setup.sh all

llm:
	scripts/llm.sh 8081
