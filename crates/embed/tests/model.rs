//! The embedding model against an independent numpy forward pass over the original
//! safetensors (`scripts/minilm.py reference`, written by `scripts/setup.sh model`).

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::Value;
use sluice_contract::stages::Embedder;
use sluice_embed::MiniLm;

fn model_dir() -> PathBuf {
    sluice_testkit::services::model_dir()
}

fn model() -> &'static MiniLm {
    static MODEL: OnceLock<MiniLm> = OnceLock::new();
    MODEL.get_or_init(|| MiniLm::load(&model_dir()).expect("model (run `scripts/setup.sh model`)"))
}

struct Reference {
    text: String,
    ids: Vec<u32>,
    embedding: Vec<f32>,
}

fn reference() -> Vec<Reference> {
    let path = model_dir().join("reference.json");
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run `scripts/setup.sh model`)", path.display()));
    let rows: Vec<Value> = serde_json::from_slice(&bytes).unwrap();
    rows.into_iter()
        .map(|r| Reference {
            text: r["text"].as_str().unwrap().to_string(),
            ids: r["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect(),
            embedding: r["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect(),
        })
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn token_ids_match_the_reference_tokenizer_whatever_the_length() {
    sluice_testkit::needs!(Model);
    let rows = reference();
    assert!(
        rows.iter()
            .any(|r| r.ids.len() > 2 * sluice_embed::MAX_TOKENS),
        "the reference set should include an input read in three windows"
    );
    for r in &rows {
        assert_eq!(model().ids(&r.text).unwrap(), r.ids, "{}", r.text);
    }
}

#[test]
fn a_long_input_is_read_in_windows_not_cut_at_the_first() {
    sluice_testkit::needs!(Model);
    let rows = reference();
    let long = rows
        .iter()
        .find(|r| r.ids.len() > 2 * sluice_embed::MAX_TOKENS)
        .expect("a long reference input");
    // The reference (numpy, float64) reads it in windows too; the vectors match to 1e-4 in
    // `each_embedding_matches_the_numpy_reference_to_1e_4`. Its first window alone (what
    // truncation gives) is another vector.
    let whole = &model().embed(&[&long.text]).unwrap()[0];
    let first = MiniLm::load(&model_dir())
        .unwrap()
        .with_max_windows(1)
        .embed(&[&long.text])
        .unwrap()
        .remove(0);
    assert!(max_abs_diff(whole, &long.embedding) < 1e-4);
    assert!(
        cosine(whole, &first) < 0.99,
        "{}: the later windows changed nothing",
        cosine(whole, &first)
    );
}

#[test]
fn each_embedding_matches_the_numpy_reference_to_1e_4() {
    sluice_testkit::needs!(Model);
    for r in reference() {
        let v = &model().embed(&[&r.text]).unwrap()[0];
        let diff = max_abs_diff(v, &r.embedding);
        assert!(diff < 1e-4, "max |diff| {diff} for {:?}", r.text);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "not unit length: {norm}");
    }
}

#[test]
fn a_batch_gives_the_same_vectors_as_one_at_a_time() {
    sluice_testkit::needs!(Model);
    let rows = reference();
    let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
    let batch = model().embed(&texts).unwrap();
    for (v, r) in batch.iter().zip(&rows) {
        let diff = max_abs_diff(v, &r.embedding);
        assert!(diff < 1e-4, "max |diff| {diff} in a batch for {:?}", r.text);
    }
}

#[test]
fn a_batch_on_three_threads_gives_the_same_vectors_in_the_same_order_bit_for_bit() {
    sluice_testkit::needs!(Model);
    // More texts than threads, of very different lengths (so workers finish out of order),
    // one of them repeated: each vector must be the one-at-a-time vector of its own text.
    let rows = reference();
    let mut texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
    texts.extend(rows.iter().rev().map(|r| r.text.as_str()));
    let threaded = MiniLm::load(&model_dir()).unwrap().with_threads(3);
    let batch = threaded.embed(&texts).unwrap();
    assert_eq!(batch.len(), texts.len());
    for (v, text) in batch.iter().zip(&texts) {
        let alone = &model().embed(&[text]).unwrap()[0];
        assert!(
            v == alone,
            "a different vector on three threads for {text:?}"
        );
    }
}

#[test]
fn paraphrases_rank_above_unrelated_sentences() {
    sluice_testkit::needs!(Model);
    let cases = [
        (
            "How do I reset my online banking password?",
            "I forgot my internet banking password and need a new one.",
            "The train to Lyon leaves at nine.",
        ),
        (
            "What is the daily ATM withdrawal limit?",
            "How much cash can I take out of a cash machine per day?",
            "Photosynthesis turns light into chemical energy.",
        ),
        (
            "My card was stolen, what should I do?",
            "Someone took my debit card; how do I block it?",
            "The recipe needs two cups of flour.",
        ),
    ];
    for (query, paraphrase, unrelated) in cases {
        let v = model().embed(&[query, paraphrase, unrelated]).unwrap();
        let (p, u) = (cosine(&v[0], &v[1]), cosine(&v[0], &v[2]));
        assert!(
            p > u + 0.3,
            "{query:?}: paraphrase {p:.3} vs unrelated {u:.3}"
        );
    }
}

#[test]
fn token_count_excludes_special_tokens() {
    sluice_testkit::needs!(Model);
    let text = "Streaming responses reduce the time to first token.";
    assert_eq!(
        model().count_tokens(text) + 2,
        model().ids(text).unwrap().len()
    );
    assert_eq!(model().count_tokens(""), 0);
}

/// WordPiece reads a run of more than 100 characters as one unknown token; the LLM's
/// byte-level tokenizer may spend a token per byte on it. The count is the bound: no fewer
/// tokens than bytes in such a run, wherever it stands, while ordinary words count as before.
#[test]
fn a_long_run_without_spaces_counts_a_token_per_byte() {
    sluice_testkit::needs!(Model);
    let run = "x".repeat(1 << 20);
    assert_eq!(model().count_tokens(&run), 1 << 20);
    let words = "The card arrives in five days.";
    let within = format!("{words} {} {words}", "é".repeat(300));
    assert_eq!(
        model().count_tokens(&within),
        2 * model().count_tokens(words) + "é".repeat(300).len()
    );
}

/// A folder with links to the shared model's ONNX graph and tokenizer, and nothing else.
fn linked_model_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["model.onnx", "tokenizer.json", "word_embeddings.f32"] {
        std::os::unix::fs::symlink(model_dir().join(file), dir.path().join(file)).unwrap();
    }
    dir
}

#[test]
fn the_prepared_graph_gives_the_same_vectors_bit_for_bit_and_a_stale_one_is_ignored() {
    sluice_testkit::needs!(Model);
    let onnx_only = linked_model_dir();
    let from_onnx = MiniLm::load(onnx_only.path()).unwrap();
    assert_eq!(from_onnx.source(), onnx_only.path().join("model.onnx"));

    let prepared_dir = linked_model_dir();
    let prepared = sluice_embed::prepare(prepared_dir.path()).unwrap();
    assert_eq!(prepared, prepared_dir.path().join("model.nnef.tar"));
    let from_nnef = MiniLm::load(prepared_dir.path()).unwrap();
    assert_eq!(from_nnef.source(), prepared);
    let texts = [
        "How long does a replacement card take to arrive?",
        "a",
        &"long input ".repeat(200),
    ];
    let (a, b) = (
        from_onnx.embed(&texts).unwrap(),
        from_nnef.embed(&texts).unwrap(),
    );
    assert_eq!(a, b);

    // Older than the ONNX graph (a model exported again since): not used.
    std::fs::File::options()
        .write(true)
        .open(&prepared)
        .unwrap()
        .set_modified(std::time::UNIX_EPOCH)
        .unwrap();
    let stale = MiniLm::load(prepared_dir.path()).unwrap();
    assert_eq!(stale.source(), prepared_dir.path().join("model.onnx"));

    // Alone (as the Lambda layer ships it), it is used whatever its age.
    std::fs::remove_file(prepared_dir.path().join("model.onnx")).unwrap();
    let alone = MiniLm::load(prepared_dir.path()).unwrap();
    assert_eq!(alone.source(), prepared);
    assert_eq!(alone.embed(&texts).unwrap(), a);
}

#[test]
fn a_model_folder_without_a_whole_word_embedding_table_is_refused_naming_it() {
    sluice_testkit::needs!(Model);
    let load_error = |dir: &std::path::Path| match MiniLm::load(dir) {
        Ok(_) => panic!("loaded without a usable table"),
        Err(e) => e.to_string(),
    };
    let dir = tempfile::tempdir().unwrap();
    for file in ["model.onnx", "tokenizer.json"] {
        std::os::unix::fs::symlink(model_dir().join(file), dir.path().join(file)).unwrap();
    }
    let missing = load_error(dir.path());
    assert!(missing.contains("word_embeddings.f32"), "{missing}");
    assert!(
        missing.contains("set SLUICE_MODEL_DIR"),
        "what to do: {missing}"
    );
    // Cut in the middle of a row: not a table.
    std::fs::write(
        dir.path().join("word_embeddings.f32"),
        vec![0u8; 384 * 4 + 2],
    )
    .unwrap();
    let cut = load_error(dir.path());
    assert!(cut.contains("not a table"), "{cut}");
}
