//! The query embedding and the ingest's batch embedding, tract beside onnxruntime in one run.
//!
//! onnxruntime runs in `scripts/bench_ort.py`, started here (`SLUICE_BENCH_PYTHON`, a Python
//! with onnxruntime; `scripts/bench.sh` sets it) and given work between tract's, round by
//! round, so that both engines meet the same noise on this shared machine. Printed, as
//! `embed:` lines that `make bench` summarises:
//! - a query of 12, 64 and 128 tokens, one thread each, on the same weights (tract on
//!   `model.onnx` with Sluice's attention operator, onnxruntime on its faster
//!   `model-unfused.onnx`): the median over [`ROUNDS`] rounds of each round's p50, and the
//!   median of the rounds' ratios;
//! - a batch of [`CHUNKS`] ingest-sized chunks: chunks per second for tract one text at a
//!   time on one thread, tract on every core ([`MiniLm::with_threads`]), and onnxruntime
//!   batched (sorted by length, padded, masked; every core) at each of [`ORT_BATCHES`];
//! - a long question (800 tokens, τ²-bench's average) read whole, four windows in parallel,
//!   against its first window alone.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_contract::stages::Embedder;
use sluice_embed::MiniLm;

const ROUNDS: usize = 8;
/// Query embeddings per engine, length and round.
const RUNS: usize = 25;
/// Chunks in the ingest batch, and their lengths in tokens (cycled): mostly full chunks
/// (`SLUICE_CHUNK_TOKENS` 256) and the shorter last chunks of documents.
const CHUNKS: usize = 48;
const CHUNK_TOKENS: [usize; 8] = [256, 256, 256, 224, 192, 128, 96, 48];
/// Rounds of the batch and long-question cases (each takes seconds).
const BATCH_ROUNDS: usize = 3;
/// onnxruntime's batch sizes: one sequence at a time (its threads split each matmul), 4, and
/// 32 (sentence-transformers' default); the best of them is the one compared.
const ORT_BATCHES: [usize; 3] = [1, 4, 32];

/// A text of exactly `tokens` model tokens including [CLS] and [SEP].
fn text_of(model: &MiniLm, tokens: usize) -> String {
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

/// The nearest-rank median (the definition every benchmark here reports).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    sluice_contract::stages::nearest_rank(&v, 0.5)
}

/// `scripts/bench_ort.py`, answering one JSON line per request.
struct Ort {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Ort {
    fn start(model_dir: &std::path::Path) -> Option<Self> {
        let python = std::env::var("SLUICE_BENCH_PYTHON").ok()?;
        // The package's folder when the bench runs (not where it was compiled: clones share
        // one target directory).
        let package = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
            || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            std::path::PathBuf::from,
        );
        let script = package.join("../../scripts/bench_ort.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(model_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting scripts/bench_ort.py");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Some(Self {
            child,
            stdin,
            stdout,
        })
    }

    fn ask(&mut self, request: Value) -> Value {
        writeln!(self.stdin, "{request}").expect("writing to bench_ort.py");
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("reading from bench_ort.py");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bench_ort.py said {line:?}: {e}"))
    }
}

impl Drop for Ort {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    // `cargo bench` passes filters and `--bench`; this harness runs everything.
    let dir = sluice_testkit::services::model_dir();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let model = MiniLm::load(&dir).expect("model (run scripts/setup.sh model)");
    let threaded = MiniLm::load(&dir).expect("model").with_threads(cores);
    let mut ort = Ort::start(&dir);
    if ort.is_none() {
        println!("embed: onnxruntime not run: set SLUICE_BENCH_PYTHON (scripts/bench.sh does)");
    }

    // Queries: per round, each length on tract then onnxruntime (the order swapped every
    // other round).
    let lengths = [12usize, 64, 128];
    let texts: Vec<String> = lengths.iter().map(|&n| text_of(&model, n)).collect();
    for (text, &n) in texts.iter().zip(&lengths) {
        let got = model.ids(text).unwrap().len();
        assert!(
            got + 1 >= n && got <= n,
            "{got} tokens for a {n}-token input"
        );
    }
    let mut tract_p50 = vec![Vec::new(); lengths.len()];
    let mut ort_p50 = vec![Vec::new(); lengths.len()];
    let mut ratios = vec![Vec::new(); lengths.len()];
    for round in 0..=ROUNDS {
        for (i, text) in texts.iter().enumerate() {
            let tract = || {
                let samples: Vec<f64> = (0..RUNS)
                    .map(|_| {
                        let t = Instant::now();
                        model.embed(&[text.as_str()]).unwrap();
                        ms(t.elapsed())
                    })
                    .collect();
                median(samples)
            };
            let ids = model.ids(text).unwrap();
            let onnx = |ort: &mut Ort| {
                let answer = ort.ask(json!({"op": "query", "ids": ids, "runs": RUNS}));
                let ns: Vec<f64> = serde_json::from_value(answer["ns"].clone()).unwrap();
                median(ns.into_iter().map(|n| n / 1e6).collect())
            };
            let (t, o) = match ort.as_mut() {
                Some(ort) if round % 2 == 1 => {
                    let o = onnx(ort);
                    (tract(), Some(o))
                }
                Some(ort) => {
                    let t = tract();
                    (t, Some(onnx(ort)))
                }
                None => (tract(), None),
            };
            // Round 0 warms both up and is not counted.
            if round > 0 {
                tract_p50[i].push(t);
                if let Some(o) = o {
                    ort_p50[i].push(o);
                    ratios[i].push(t / o);
                }
            }
        }
    }
    for (i, n) in lengths.iter().enumerate() {
        let t = median(tract_p50[i].clone());
        match ort_p50[i].is_empty() {
            true => println!("embed: query {n:>3} tokens: tract p50 {t:.2} ms"),
            false => println!(
                "embed: query {n:>3} tokens: tract p50 {t:.2} ms, onnxruntime p50 {:.2} ms, ratio {:.2} (median of {ROUNDS} rounds' ratios; min {:.2}, max {:.2})",
                median(ort_p50[i].clone()),
                median(ratios[i].clone()),
                ratios[i].iter().copied().fold(f64::INFINITY, f64::min),
                ratios[i].iter().copied().fold(0.0, f64::max),
            ),
        }
    }

    // The ingest's batch: chunks per second.
    let chunks: Vec<String> = (0..CHUNKS)
        .map(|i| text_of(&model, CHUNK_TOKENS[i % CHUNK_TOKENS.len()]))
        .collect();
    let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
    let tokens: usize = refs.iter().map(|c| model.ids(c).unwrap().len()).sum();
    let ids: Vec<Vec<u32>> = refs.iter().map(|c| model.ids(c).unwrap()).collect();
    let (mut one, mut all) = (Vec::new(), Vec::new());
    let mut onnx = vec![Vec::new(); ORT_BATCHES.len()];
    for _ in 0..BATCH_ROUNDS {
        let t = Instant::now();
        model.embed(&refs).unwrap();
        one.push(CHUNKS as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        threaded.embed(&refs).unwrap();
        all.push(CHUNKS as f64 / t.elapsed().as_secs_f64());
        if let Some(ort) = ort.as_mut() {
            for (batch, rates) in ORT_BATCHES.iter().zip(&mut onnx) {
                let answer = ort
                    .ask(json!({"op": "batch", "chunks": ids, "batch": batch, "threads": cores}));
                rates.push(CHUNKS as f64 / answer["seconds"].as_f64().unwrap());
            }
        }
    }
    let (one, all) = (median(one), median(all));
    print!(
        "embed: batch of {CHUNKS} chunks ({tokens} tokens): tract one thread {one:.1} chunks/s, tract {cores} threads {all:.1} chunks/s ({:.2}x)",
        all / one
    );
    if ort.is_none() {
        println!();
    } else {
        let rates: Vec<f64> = onnx.into_iter().map(median).collect();
        let best = rates.iter().copied().fold(0.0, f64::max);
        let each: Vec<String> = (ORT_BATCHES.iter().zip(&rates))
            .map(|(b, r)| format!("{b} a batch {r:.1}"))
            .collect();
        println!(
            "; onnxruntime, {cores} threads: {} chunks/s; tract {cores} threads / onnxruntime's best {:.2} (medians of {BATCH_ROUNDS} rounds)",
            each.join(", "),
            all / best
        );
    }

    // A long question: whole (4 windows, in parallel) against its first window.
    let long = text_of(&model, 800);
    let first = MiniLm::load(&dir).expect("model").with_max_windows(1);
    let (mut whole, mut window) = (Vec::new(), Vec::new());
    for _ in 0..BATCH_ROUNDS * 4 {
        let t = Instant::now();
        model.embed(&[long.as_str()]).unwrap();
        whole.push(ms(t.elapsed()));
        let t = Instant::now();
        first.embed(&[long.as_str()]).unwrap();
        window.push(ms(t.elapsed()));
    }
    let (whole, window) = (median(whole), median(window));
    println!(
        "embed: 800-token question: whole (4 windows) p50 {whole:.1} ms, first window p50 {window:.1} ms, ratio {:.2}",
        whole / window
    );
}
