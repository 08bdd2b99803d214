#!/usr/bin/env bash
# Builds rerank components from Rust source into WebAssembly components.
#
#   scripts/build-components.sh [DIR...]   DIR: a component crate (default: every one in
#                                          components/); its parent is its cargo workspace
#
# Uses Debian's rustc-web toolchain (std sources included) for wasm32-unknown-unknown and
# componentizes with jco from npm; both are installed here on first use. Prints the path of
# each `.component.wasm`, ready for `PUT /v1/components/rerank`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
out=${SLUICE_COMPONENTS_DIR:-$cache/components}
mkdir -p "$out"

if [ ! -x /usr/bin/wasm-ld-22 ] || [ ! -d /usr/lib/rustlib/src/rust ]; then
  echo "[components] installing rustc-web, rust-web-src and lld-22 (Debian)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rustc-web cargo-web rust-web-src lld-22 >/dev/null
fi
jco=$cache/npm/node_modules/.bin/jco
if [ ! -x "$jco" ]; then
  echo "[components] installing @bytecodealliance/jco@1.35.0 (npm)" >&2
  npm install --silent --prefix "$cache/npm" @bytecodealliance/jco@1.35.0 >/dev/null
fi

# The guests build with Debian's toolchain: a compiler wrapper of the host toolchain (clippy's,
# named by the repository's .cargo/config.toml, or a user's) must not wrap it. An empty
# variable overrides the config file.
unset RUSTC_WRAPPER CLIPPY_ARGS
export RUSTC_WORKSPACE_WRAPPER=
crates=("$@")
[ ${#crates[@]} -gt 0 ] || crates=($(cd "$here/components" && ls -d */ | tr -d / | grep -v '^sdk$' | sed "s|^|$here/components/|"))
for crate in "${crates[@]}"; do
  # A bare name is a crate of components/ (as before); a path's parent is its workspace (a
  # copy of components/, or one `sluice component new --dir` wrote into).
  case "$crate" in */*) workspace=$(cd "$(dirname "$crate")" && pwd) ;; *) workspace=$here/components ;; esac
  name=$(basename "$crate")
  # RUSTC_BOOTSTRAP lets the stable Debian toolchain use -Zbuild-std (no rust-std for this
  # target is packaged); Debian ships no rust-lld, hence the linker.
  (cd "$workspace" && \
    RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=wasm-ld-22 \
    CARGO_TARGET_DIR="$cache/components-target" \
    /usr/bin/cargo build -q --release --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort -p "$name")
  core=$cache/components-target/wasm32-unknown-unknown/release/${name//-/_}.wasm
  "$jco" new "$core" -o "$out/$name.component.wasm" >/dev/null
  echo "$out/$name.component.wasm"
done
