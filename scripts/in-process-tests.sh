#!/usr/bin/env bash
# Prints `--test NAME` for every integration test target that needs no service: one none of
# whose files (its file, or its folder when it is a `main.rs`) calls `sluice_testkit::needs!`.
# `make check` runs these; `make test` runs every target.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo metadata --no-deps --format-version 1 --offline | python3 -c '
import json, os, subprocess, sys
for package in json.load(sys.stdin)["packages"]:
    for target in package["targets"]:
        if target["kind"] != ["test"]:
            continue
        path = target["src_path"]
        files = os.path.dirname(path) if os.path.basename(path) == "main.rs" else path
        if subprocess.run(["grep", "-rqF", "needs!", files]).returncode != 0:
            print("--test", target["name"])
'
