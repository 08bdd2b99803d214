#!/usr/bin/env bash
# Prints the test targets `make check` runs besides every library's unit tests:
# - `--test NAME` for every integration test target that needs no service and no built binary:
#   one none of whose files (its file, or its folder when it is a `main.rs`) calls
#   `sluice_testkit::needs!` or runs a binary of its package (`CARGO_BIN_EXE_…`: cargo would
#   build and link the binary, seconds after every change to the engine, for a check of its
#   help text that `make test` runs);
# - `--bin NAME` for every binary with unit tests of its own (its file, or its folder when its
#   package has no library): a binary without them would only be linked for nothing;
# - `--exclude NAME` for a package whose library says `test = false` (no unit tests) and that
#   has no target above: `--lib` would link a test harness with nothing in it.
# `make test` runs every target.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo metadata --no-deps --format-version 1 --offline | python3 -c '
import json, os, subprocess, sys
def found(text, files):
    return subprocess.run(["grep", "-rqE", text, files]).returncode == 0
for package in json.load(sys.stdin)["packages"]:
    has_lib = any("lib" in t["kind"] for t in package["targets"])
    chosen = []
    for target in package["targets"]:
        path = target["src_path"]
        if target["kind"] == ["test"]:
            files = os.path.dirname(path) if os.path.basename(path) == "main.rs" else path
            if not found(r"needs!|CARGO_BIN_EXE_", files):
                chosen += ["--test", target["name"]]
        elif target["kind"] == ["bin"]:
            files = path if has_lib else os.path.dirname(path)
            if found(r"#\[(tokio::)?test", files):
                chosen += ["--bin", target["name"]]
    untested = any("lib" in t["kind"] and not t.get("test", True) for t in package["targets"])
    if untested and not chosen:
        chosen = ["--exclude", package["name"]]
    for i in range(0, len(chosen), 2):
        print(*chosen[i : i + 2])
'
