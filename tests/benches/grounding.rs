//! What the grounding check adds to an answer, with the real lexicon (WordNet,
//! `SLUICE_CACHE_LEXICON`, default beside the model):
//!
//! - **evidence** (highlights and the extract, before `meta`, so before the LLM call): each
//!   question of a set asked over 5 sources — the sample corpus's documents, and chunks of
//!   τ²-bench's banking documents (`scripts/setup.sh eval`) — 200 times;
//! - **verdict** (before `done`, after the last token): a 256-token answer (about 1,000
//!   characters, 10 sentences taken from the sources, one number in three changed) over the
//!   same 5 sources, 200 times.
//!
//! Prints p50, p99 and the largest time of each, in microseconds.

use std::time::Instant;

use sluice_core::grounding::{evidence, verdict};
use sluice_core::language::lexicon::Lexicon;

const ROUNDS: usize = 200;

fn main() {
    let lexicon = sluice_tests::lexicon();
    let lexicon = lexicon.as_ref();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");

    // The sample corpus: its five Markdown documents, each one source.
    let samples: Vec<String> = [
        "lost-card.md",
        "card-limits.md",
        "savings-rates.md",
        "international-transfers.md",
        "password-reset.md",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(repo.join("samples").join(f)).expect("a sample"))
    .collect();
    let questions = [
        "How long does a replacement card take to arrive?",
        "What is the daily ATM limit on a premium account?",
        "What interest does the Goal Saver pay?",
        "How much does an international transfer cost?",
        "How do I reset my password?",
    ];
    report(
        "evidence, sample corpus",
        &time_evidence(&questions, &samples, lexicon),
    );
    report("verdict, sample corpus", &time_verdict(&samples, lexicon));

    // τ²-bench's banking documents, cut into 1,000-character chunks: five from one document
    // after another, the question its title.
    let home = std::env::var("SLUICE_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/sluice")
        });
    let documents = home.join("eval/tau2-banking/documents.json");
    let Ok(text) = std::fs::read_to_string(&documents) else {
        panic!(
            "{} is missing: run scripts/setup.sh eval",
            documents.display()
        );
    };
    let docs: Vec<serde_json::Value> = serde_json::from_str(&text).expect("τ²-bench documents");
    let chunks: Vec<String> = docs
        .iter()
        .take(40)
        .filter_map(|d| d["content"].as_str())
        .map(|c| c.chars().take(1000).collect())
        .collect();
    let titles: Vec<String> = docs
        .iter()
        .take(40)
        .filter_map(|d| d["title"].as_str())
        .map(String::from)
        .collect();
    let mut evidence_times = Vec::new();
    let mut verdict_times = Vec::new();
    for (group, title) in chunks.chunks(5).zip(titles.iter().step_by(5)) {
        evidence_times.extend(time_evidence(&[title.as_str()], group, lexicon));
        verdict_times.extend(time_verdict(group, lexicon));
    }
    report("evidence, τ²-bench chunks", &evidence_times);
    report("verdict, τ²-bench chunks", &verdict_times);
}

fn time_evidence(questions: &[&str], sources: &[String], lexicon: &Lexicon) -> Vec<u64> {
    let sources: Vec<&str> = sources.iter().map(String::as_str).collect();
    let mut times = Vec::with_capacity(questions.len() * ROUNDS);
    for question in questions {
        for _ in 0..ROUNDS {
            let t = Instant::now();
            std::hint::black_box(evidence(question, &sources, lexicon));
            times.push(t.elapsed().as_nanos() as u64);
        }
    }
    times
}

/// An answer of about 1,000 characters: sentences of the sources in turn, every third with
/// its first number changed.
fn answer_from(sources: &[String]) -> String {
    let sentences: Vec<&str> = sources
        .iter()
        .flat_map(|s| s.split(". "))
        .filter(|s| s.len() > 30 && !s.starts_with('#') && !s.starts_with("---"))
        .collect();
    let mut answer = String::new();
    for (i, sentence) in sentences.iter().cycle().enumerate().take(40) {
        if answer.len() >= 1000 {
            break;
        }
        let mut sentence = sentence.replace('\n', " ");
        if i % 3 == 2
            && let Some(at) = sentence.find(|c: char| c.is_ascii_digit())
        {
            sentence.replace_range(at..at + 1, "9");
        }
        answer.push_str(&sentence);
        answer.push_str(&format!(" [{}]. ", i % sources.len() + 1));
    }
    answer
}

fn time_verdict(sources: &[String], lexicon: &Lexicon) -> Vec<u64> {
    let answer = answer_from(sources);
    let texts: Vec<&str> = sources.iter().map(String::as_str).collect();
    let mut times = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let t = Instant::now();
        std::hint::black_box(verdict(&answer, &texts, lexicon));
        times.push(t.elapsed().as_nanos() as u64);
    }
    times
}

fn report(what: &str, times: &[u64]) {
    let mut times = times.to_vec();
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    println!(
        "grounding {what}: {} runs, p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs",
        times.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
}
