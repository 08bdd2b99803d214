#!/usr/bin/env bash
# `make bench`: every benchmark in one run, then a summary of medians and ratios.
# Benches use the single `dev` profile (opt-levels per kind of code: Cargo.toml) so that
# they share the test build; `--workspace` keeps feature unification identical to `make test`
# so nothing is rebuilt.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
# Cargo's target directory: the repository's target/ unless CARGO_TARGET_DIR says (CI shares one).
target=${CARGO_TARGET_DIR:-$PWD/target}
export SLUICE_MODEL_DIR=${SLUICE_MODEL_DIR:-$cache/models/all-MiniLM-L6-v2}
# The benches reuse what `make test` compiled (one build configuration: .cargo/config.toml).
scripts/setup.sh model
scripts/build-components.sh >/dev/null
aws_port=${SLUICE_BENCH_AWS_PORT:-18083}
aws_pid=$(scripts/aws.sh "$aws_port" --detach)
trap 'kill "$aws_pid" 2>/dev/null || true' EXIT
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$aws_port"
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
crit=$target/criterion
log=$(mktemp)

# onnxruntime's batched baseline needs the encoder with an attention mask.
scripts/setup.sh model-batched
# tract and onnxruntime side by side, round by round (bench_ort.py runs beside the bench).
SLUICE_BENCH_PYTHON="$cache/venv/bin/python" \
  cargo bench --profile dev --workspace --bench embed 2>&1 | tee -a "$log"
cargo bench --profile dev --workspace --bench hybrid -- --noplot 2>&1 | tee -a "$log"
cargo bench --profile dev --workspace --bench remote -- --noplot 2>&1 | tee -a "$log"
cargo bench --profile dev --workspace --bench pipeline -- --noplot 2>&1 | tee -a "$log"
cargo bench --profile dev --workspace --bench sandbox -- --noplot 2>&1 | tee -a "$log"
cargo bench --profile dev --workspace --bench lookup -- --noplot 2>&1 | tee -a "$log"
cargo bench --profile dev --workspace --bench quality 2>&1 | tee -a "$log"
cargo bench --profile dev --workspace --bench sync 2>&1 | tee -a "$log"
cargo bench --profile dev --workspace --bench guard 2>&1 | tee -a "$log"
cargo bench --profile dev --workspace --bench verify 2>&1 | tee -a "$log"
# The answer cache while τ²-bench's documents change (edits, additions, deletions), and for end users
# who share groups.
scripts/setup.sh eval
cargo bench --profile dev --workspace --bench churn 2>&1 | tee -a "$log"
cargo bench --profile dev --workspace --bench init 2>&1 | tee -a "$log"
# File conversion against pdftotext and trafilatura on Debian's documentation.
scripts/setup.sh docs
cargo bench --profile dev --workspace --bench convert 2>&1 | tee -a "$log"
# Whether answers over those PDFs cite the page the answer is on (hit@1, hit@3).
cargo test --workspace --all-targets --no-run --quiet 2>/dev/null
"$target/debug/sluice" eval pages --out "$cache/eval-pages" 2>&1 | tee -a "$log"

median() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['median']['point_estimate'])" "$1"; }
echo
echo "== summary (medians; this machine is shared, compare within one run) =="
grep -h "^embed:" "$log" || true
for f in "" _filter_1pct _filter_50pct _access_1000_principals; do
  python3 -c "import sys; print(f'hybrid search, 10,000 chunks, k=5{sys.argv[2] or \" (no filter)\"}: {float(sys.argv[1])/1e3:.0f} µs')" \
    "$(median "$crit/hybrid_search_10k_chunks_k5$f/new/estimates.json")" "$f"
done
grep -h "^convert:" "$log" || true
grep -ho "PDFs (.*hit@3 [0-9.]*" "$log" | sed 's/^/page citations: /' || true
grep -h "^cache churn\|^cache users\|^identity:" "$log" || true
grep -h "^eval run\|^feedback:" "$log" || true
grep -h "^sync:" "$log" || true
grep -h "^guard\|pipeline overhead before the LLM call\|pipeline stages\|^usage:\|^sandbox:\|^cache-hit ttft\|^cache lookup\|client overhead per query\|^answer function init" "$log" || true
python3 -c "import sys; print(f'sandbox: compile + smoke run at upload (keyword-boost): {float(sys.argv[1])/1e3:.0f} µs')" "$(median "$crit/sandbox_compile_upload/new/estimates.json")"
rm -f "$log"
