//! Query embedding at 12, 64 and 128 tokens (single thread). `scripts/bench.sh` runs the same
//! inputs through onnxruntime on the same ONNX file in the same run for the ratio.
//!
//! And a long question (800 tokens, τ²-bench's average) read whole — four windows, run in
//! parallel — against its first window alone (what truncation costs), in the same run.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sluice_core::stages::Embedder;
use sluice_embed::MiniLm;

/// A text of exactly `tokens` model tokens including [CLS] and [SEP].
pub fn text_of(model: &MiniLm, tokens: usize) -> String {
    let words = "the bank sends international payments over the swift network and a transfer costs a flat fee plus any fees charged by correspondent banks along the way".split(' ').cycle();
    let mut text = String::new();
    for w in words {
        let candidate = if text.is_empty() {
            w.to_string()
        } else {
            format!("{text} {w}")
        };
        if model.ids(&candidate).map(|i| i.len()).unwrap_or(usize::MAX) > tokens {
            break;
        }
        text = candidate;
    }
    text
}

fn bench(c: &mut Criterion) {
    let dir = sluice_core::Config::from_env().expect("config").model_dir;
    let model = MiniLm::load(&dir).expect("model (run scripts/setup.sh model)");
    let mut group = c.benchmark_group("embed_query");
    for tokens in [12, 64, 128] {
        let text = text_of(&model, tokens);
        let n = model.ids(&text).unwrap().len();
        assert!(
            n + 1 >= tokens && n <= tokens,
            "{n} tokens for a {tokens}-token input"
        );
        group.bench_with_input(BenchmarkId::from_parameter(tokens), &text, |b, t| {
            b.iter(|| model.embed(&[t.as_str()]).unwrap())
        });
    }
    group.finish();

    let long = text_of(&model, 800);
    let first = MiniLm::load(&dir).expect("model").with_max_windows(1);
    let mut group = c.benchmark_group("embed_long_question_800_tokens");
    group.sample_size(20);
    group.bench_function("whole_4_windows", |b| {
        b.iter(|| model.embed(&[long.as_str()]).unwrap())
    });
    group.bench_function("first_window", |b| {
        b.iter(|| first.embed(&[long.as_str()]).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
