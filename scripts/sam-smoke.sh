#!/usr/bin/env bash
# `scripts/sam-smoke.sh`: runs what `sam build` packaged before it is deployed. The ingest and
# answer functions' `bootstrap` files from .aws-sam/build run under cargo-lambda's runtime-API
# emulator on 127.0.0.1 (the one the Lambda tests use), with the model layer's folder
# (scripts/package-model.sh) where Lambda mounts it, a fresh Qdrant Edge folder and the local
# LLM: samples/ is ingested through the ingest function's URL, then a question is asked through
# the answer function's, and the stream must carry `meta` naming a sample, tokens and `done`.
# A build for this machine's architecture runs as it is; an arm64 build on x86_64 runs under
# QEMU's user-mode emulator when Debian's qemu-user-static and libc6-arm64-cross are installed
# (slowly: the model's init takes seconds there).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
build=.aws-sam/build
layer=build/model-layer/model
for f in AnswerFunction IngestFunction; do
  [ -x "$build/$f/bootstrap" ] || { echo "no $build/$f/bootstrap: run sam build first" >&2; exit 1; }
done
[ -f "$layer/word_embeddings.f32" ] || { echo "no $layer (or one from before the word embedding table): run scripts/package-model.sh" >&2; exit 1; }
runner=()
if ! file -L "$build/AnswerFunction/bootstrap" | grep -q "$(uname -m | tr _ -)"; then
  if file -L "$build/AnswerFunction/bootstrap" | grep -q aarch64 && [ -x /usr/bin/qemu-aarch64-static ] \
      && [ -d /usr/aarch64-linux-gnu ]; then
    runner=(env QEMU_LD_PREFIX=/usr/aarch64-linux-gnu /usr/bin/qemu-aarch64-static)
  else
    echo "the build is not for this machine ($(uname -m)): $(file -bL "$build/AnswerFunction/bootstrap");" \
      "for arm64 install qemu-user-static and libc6-arm64-cross (Debian)" >&2
    exit 1
  fi
fi
scripts/setup.sh llm >/dev/null
scripts/setup.sh tools >/dev/null

tmp=$(mktemp -d)
# The functions and their emulators, stopped between the two; the LLM serves both.
pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait "${pids[@]}" 2>/dev/null || true; pids=(); }
llm_port=${SLUICE_SMOKE_LLM_PORT:-18091}
llm_pid=$(scripts/llm.sh "$llm_port" --detach)
trap 'stop; kill "$llm_pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT

# Starts function $1 under an emulator on port $2 and waits until its URL answers /healthz.
function_up() {
  local name=$1 port=$2
  # The emulator reads the package metadata of the folder it starts in.
  (cd functions/answer && exec "$cache/venv/bin/cargo-lambda" lambda watch --only-lambda-apis \
    -A 127.0.0.1 -P "$port") >"$tmp/$name-emulator.log" 2>&1 &
  pids+=($!)
  sleep 1
  # What Lambda sets for every function (no AWS call is made: no bucket, table or secret).
  AWS_LAMBDA_RUNTIME_API="http://127.0.0.1:$port/.rt" AWS_LAMBDA_FUNCTION_NAME=_ \
    AWS_LAMBDA_FUNCTION_VERSION=1 AWS_LAMBDA_FUNCTION_MEMORY_SIZE=2048 AWS_REGION=us-east-1 \
    SLUICE_MODEL_DIR="$here/$layer" SLUICE_DATA_DIR="$tmp/data" SLUICE_STORE=edge \
    SLUICE_LLM_URL="http://127.0.0.1:$llm_port/v1" SLUICE_CACHE=off SLUICE_MAX_TOKENS=24 \
    "${runner[@]}" "$build/$name/bootstrap" >"$tmp/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  # The emulator holds a request until the function asks for one: a function that died in
  # its init would make it wait forever.
  for _ in $(seq 1 180); do
    curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$port/lambda-url/_/healthz" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
  done
  tail -n 30 "$tmp/$name.log" >&2
  echo "$name did not start under the emulator" >&2
  exit 1
}

function_up IngestFunction 19101
body=$(python3 -c 'import json, pathlib, sys
docs = [{"id": str(p), "text": p.read_text()} for p in sorted(pathlib.Path("samples").glob("*.md"))]
print(json.dumps({"documents": docs}))')
ingested=$(curl -fsS -m 120 -H 'content-type: application/json' -d "$body" \
  http://127.0.0.1:19101/lambda-url/_/v1/documents)
echo "ingest function: $ingested"
# Qdrant Edge holds its folder's lock: the answer function opens it after ingest has stopped.
stop

function_up AnswerFunction 19102
question=${1:-How do I report a lost card?}
stream=$(curl -fsS -m 120 -N -H 'content-type: application/json' \
  -d "$(python3 -c 'import json, sys; print(json.dumps({"query": sys.argv[1]}))' "$question")" \
  http://127.0.0.1:19102/lambda-url/_/v1/answer)
python3 - "$stream" <<'EOF'
import json, sys
events = [(e.split("\n")[0][len("event: "):], json.loads(e.split("\n", 1)[1][len("data: "):]))
          for e in sys.argv[1].strip().split("\n\n") if e.startswith("event: ")]
kinds = [k for k, _ in events]
assert kinds[0] == "meta" and kinds[-1] == "done" and "token" in kinds, kinds
meta = events[0][1]
sources = [d["source"] for d in meta["documents"]]
assert any(s.startswith("samples/") for s in sources), sources
done = events[-1][1]
text = "".join(d.get("text", "") for k, d in events if k == "token")
print(f"answer function: {kinds.count('token')} tokens, sources {sources[:3]}, "
      f"timings {done.get('timings')}")
print(f"answer: {text.strip()[:200]}")
EOF
echo "sam-smoke: ok"
