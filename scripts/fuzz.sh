#!/usr/bin/env bash
# `scripts/fuzz.sh [SECONDS]`: builds the cargo fuzz targets in fuzz/ (the machine's nightly
# toolchain; cargo-fuzz from crates.io, installed by `scripts/setup.sh cargo-tools`) and runs
# each for SECONDS (default 20), then prints one line per target: executions, corpus size,
# crashes. Exits non-zero on a crash; its input is kept under fuzz/artifacts/<target>/.
# `scripts/fuzz.sh build` only builds them (`make test` does so while the tests run).
#
# The corpus grows across runs in $SLUICE_HOME/fuzz-corpus/<target>, seeded from fuzz/seeds/.
# No sanitizer (-s none): the targets are safe Rust, so the findings are panics — failed
# assertions, overflow (debug assertions are on), out-of-bounds indexing, timeouts and
# memory blow-ups — and builds and runs are several times faster without ASan.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
secs=${1:-20}
export PATH="$cache/tools/bin:$PATH"
command -v cargo-fuzz >/dev/null || scripts/setup.sh cargo-tools
# The fuzz build is nightly's own: no clippy wrapper (an empty variable overrides
# .cargo/config.toml's), its own target dir.
unset CLIPPY_ARGS
export RUSTC_WORKSPACE_WRAPPER=
export CARGO_TARGET_DIR=$cache/fuzz-target
targets=(request upstream_sse chunker rerank_output convert_pdf convert_html convert_docx)

started=$SECONDS
cargo +nightly fuzz build -s none >/dev/null 2>"$cache/fuzz-build.log" || {
  tail -n 40 "$cache/fuzz-build.log" >&2
  exit 1
}
# What the build cost, for the CI budget's records: its wall time and the CPU of this
# script's children (bash's `times`, second line: user and system). `times` runs in this shell,
# not in a command substitution, whose subshell has no children of its own.
times >"$cache/fuzz-build.times"
echo "fuzz build: $((SECONDS - started)) s, CPU (user system) $(sed -n 2p "$cache/fuzz-build.times")" |
  tee -a "$cache/fuzz-build.log" >&2
[ "$secs" = build ] && exit 0
status=0
summary=()
for t in "${targets[@]}"; do
  corpus=$cache/fuzz-corpus/$t
  mkdir -p "$corpus" "fuzz/artifacts/$t"
  log=$(mktemp)
  set +e
  # The converters are also seeded with the conversion benchmark's real files, when they are
  # here (scripts/setup.sh docs).
  real=()
  case "$t" in
    convert_pdf) [ -d "$cache/docs-corpus/pdf" ] && real=("$cache/docs-corpus/pdf") ;;
    convert_html) [ -d "$cache/docs-corpus/html" ] && real=("$cache/docs-corpus/html") ;;
  esac
  cargo +nightly fuzz run -s none "$t" "$corpus" "fuzz/seeds/$t" "${real[@]}" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
  crashes=$(find "fuzz/artifacts/$t" -type f | wc -l)
  files=$(find "$corpus" -type f | wc -l)
  if [ "$rc" -ne 0 ]; then
    status=1
    tail -n 30 "$log" >&2
  fi
  summary+=("$t: $execs execs, $files corpus inputs, $crashes crashes")
  rm -f "$log"
done
printf 'fuzz (%ss each): %s\n' "$secs" "$(IFS=';'; echo "${summary[*]}" | sed 's/;/; /g')"
exit "$status"
