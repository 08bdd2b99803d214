#!/usr/bin/env bash
# Builds the Lambda model layer of sam/template.yaml (ModelLayer, mounted at /opt/model):
# tokenizer.json from SLUICE_MODEL_DIR and model.nnef.tar, written by `sluice model prepare`
# (the decluttered graph, which loads faster; its format does not depend on the CPU, so x86
# may build it for arm64 functions). The ONNX file is left out: 90 MB less of the 250 MB a
# function and its layers may unpack to. Output: build/model-layer/model.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$cache/target}
export SLUICE_MODEL_DIR=${SLUICE_MODEL_DIR:-$cache/models/all-MiniLM-L6-v2}
scripts/setup.sh model
out=build/model-layer/model
rm -rf "$out" && mkdir -p "$out"
cp "$SLUICE_MODEL_DIR/model.onnx" "$SLUICE_MODEL_DIR/tokenizer.json" "$out/"
# The demo's and the tests' build configuration, so that a built tree is not compiled again.
source scripts/cargo-env.sh
cargo run -q --bin sluice -- model prepare --dir "$out"
rm "$out/model.onnx"
du -sh "$out"
