# Sourced by the scripts that build (test, load): the one build configuration of the
# workspace, so that they share every compiled artefact.
#
# Lint in the same build: clippy-driver wraps rustc for the workspace's own crates only
# (RUSTC_WORKSPACE_WRAPPER), so the lints of `make lint` (-D warnings) are enforced while the
# tests are compiled, and dependencies are compiled once, in full, instead of a second time in
# check mode (on a fresh machine that second pass cost about 9 of `.ci/run`'s minutes). The
# wrapper is part of Cargo's fingerprint: a build without it recompiles the workspace.
driver=$(dirname "$(rustup which cargo 2>/dev/null || command -v cargo)")/clippy-driver
if [ ! -x "$driver" ]; then
  # The build is what enforces the lints (.ci/run promises them): no lints, no build.
  echo "clippy-driver not found next to cargo ($driver): install it with \`rustup component add clippy\`" >&2
  return 1 2>/dev/null || exit 1
fi
export RUSTC_WORKSPACE_WRAPPER=$driver CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
