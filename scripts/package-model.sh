#!/usr/bin/env bash
# Builds the Lambda model layer of sam/template.yaml (ModelLayer, mounted at /opt/model):
# model.onnx, word_embeddings.f32 (the token embedding table the graph takes its input from)
# tokenizer.json and the cache guard's lexicon.txt (WordNet) from SLUICE_MODEL_DIR. Since the table left the graph, the ONNX file
# (43 MB) loads faster than the prepared `model.nnef.tar` (README, Benchmarks: init), so the
# layer ships the ONNX file. Output: build/model-layer/model.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
export SLUICE_MODEL_DIR=${SLUICE_MODEL_DIR:-$cache/models/all-MiniLM-L6-v2}
scripts/setup.sh model
out=build/model-layer/model
rm -rf "$out" && mkdir -p "$out"
cp "$SLUICE_MODEL_DIR/model.onnx" "$SLUICE_MODEL_DIR/tokenizer.json" \
  "$SLUICE_MODEL_DIR/word_embeddings.f32" "$SLUICE_MODEL_DIR/lexicon.txt" "$out/"
du -sh "$out"
