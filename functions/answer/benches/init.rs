//! Init time of each Lambda function: from process start to its first request for an
//! invocation (`GET …/runtime/invocation/next`), which the Lambda runtime makes once
//! everything is built — the embedding model loaded, the store open, the sandbox started.
//! That is the init phase AWS bills and a cold request waits for (plus AWS's own start-up of
//! the execution environment, which no local measure includes).
//!
//! A minimal runtime API on 127.0.0.1 stands in for Lambda's and never answers (the process
//! is killed once it asks); the function runs with the real model, a fresh Qdrant Edge
//! folder, the memory cache and no reachable LLM (nothing at init connects to it). The
//! function's own log gives the share of the model load. Both model forms are measured in one
//! run, alternating: the ONNX graph alone, and with `model.nnef.tar` (`sluice model prepare`,
//! what the Lambda model layer ships). Then the ingest function (model and store, no LLM pool)
//! and the registry (the sandbox and the tokenizer; no model, store or LLM pool) from the
//! prepared graph, each built beside the answer function by the workspace build.
//!
//! `cargo bench --profile dev --workspace --bench init` (`SLUICE_INIT_RUNS`, default 15).

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One start of `function`: (spawn → asks for an invocation, the model load as the function
/// logged it; zero when it loads none).
fn start_once(function: &str, model_dir: &std::path::Path) -> (Duration, Duration) {
    let api = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = api.local_addr().expect("addr").port();
    let data = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_answer")).with_file_name(function);
    let mut child = Command::new(&binary)
        .env("AWS_LAMBDA_RUNTIME_API", format!("127.0.0.1:{port}"))
        .env("AWS_LAMBDA_FUNCTION_NAME", function)
        .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "2048")
        // Lambda always sets the region; without it the AWS SDK asks the instance metadata
        // service, which is not here.
        .env("AWS_REGION", "us-east-1")
        .env("SLUICE_DATA_DIR", data.path())
        .env("SLUICE_MODEL_DIR", model_dir)
        .env("SLUICE_CACHE", "memory")
        .env("SLUICE_LLM_URL", "http://127.0.0.1:9/v1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{} starts: {e}", binary.display()));
    // Accepted within a minute or the start failed: polled every millisecond.
    api.set_nonblocking(true).expect("non-blocking");
    let mut conn = loop {
        match api.accept() {
            Ok((conn, _)) => break conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("{function} exited before asking for an invocation: {status}");
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "{function} did not ask for an invocation within 60 s"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    conn.set_nonblocking(false).expect("blocking");
    let mut head = [0u8; 256];
    let n = conn.read(&mut head).expect("request");
    let ready = started.elapsed();
    let request = String::from_utf8_lossy(&head[..n]);
    assert!(
        request.contains("/runtime/invocation/next"),
        "expected the first request for an invocation, got: {request}"
    );
    let _ = child.kill();
    let _ = child.wait();
    // The log's model-load line: {"fields": {"message": "embedding model loaded", "ms": N, ...}}.
    let mut model = Duration::ZERO;
    let stdout = child.stdout.take().expect("stdout");
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
            && v["fields"]["message"] == "embedding model loaded"
        {
            model = Duration::from_millis(v["fields"]["ms"].as_u64().unwrap_or(0));
        }
    }
    (ready, model)
}

/// A folder with links to the installed model's ONNX graph, tokenizer, word table and the
/// cache guard's lexicon (which ships beside the model, and without which a function with a
/// cache does not start).
fn linked_model_dir() -> tempfile::TempDir {
    let model = sluice_testkit::services::model_dir();
    let dir = tempfile::tempdir().expect("temp dir");
    for file in [
        "model.onnx",
        "tokenizer.json",
        "word_embeddings.f32",
        "lexicon.txt",
    ] {
        std::os::unix::fs::symlink(model.join(file), dir.path().join(file)).expect("link");
    }
    dir
}

fn main() {
    let runs: usize = std::env::var("SLUICE_INIT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let onnx = linked_model_dir();
    let prepared = linked_model_dir();
    sluice_embed::prepare(prepared.path()).expect("sluice model prepare");
    // One start of each first, untimed: the binary and the model files then come from the
    // page cache, as they do on a warm Lambda host; a first start from disk is slower still.
    start_once("answer", onnx.path());
    start_once("answer", prepared.path());
    let mut runs_of = [(vec![], vec![]), (vec![], vec![])];
    for _ in 0..runs {
        for (dir, (ready, model)) in [onnx.path(), prepared.path()]
            .iter()
            .zip(runs_of.iter_mut())
        {
            let (r, m) = start_once("answer", dir);
            ready.push(r);
            model.push(m);
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut medians = vec![];
    for (name, (ready, model)) in ["model.onnx", "model.nnef.tar"]
        .iter()
        .zip(runs_of.iter_mut())
    {
        let p = |v: &mut Vec<Duration>, q: f64| ms(sluice_tests::percentile(v, q));
        let median = p(ready, 0.5);
        medians.push(median);
        println!(
            "answer function init from {name} (process start → asks for an invocation), {runs} starts: \
             median {median:.0} ms, p90 {:.0} ms, min {:.0} ms; of which the embedding model load: median {:.0} ms",
            p(ready, 0.9),
            p(ready, 0.0),
            p(model, 0.5),
        );
    }
    println!(
        "answer function init: model.nnef.tar / model.onnx = {:.2}",
        medians[1] / medians[0]
    );
    // The other two functions, alternating, from the prepared graph.
    for function in ["ingest", "registry"] {
        start_once(function, prepared.path());
    }
    let mut starts = [vec![], vec![]];
    for _ in 0..runs {
        for (function, ready) in ["ingest", "registry"].iter().zip(starts.iter_mut()) {
            ready.push(start_once(function, prepared.path()).0);
        }
    }
    for (function, ready) in ["ingest", "registry"].iter().zip(starts.iter_mut()) {
        println!(
            "{function} function init (process start → asks for an invocation), {runs} starts: \
             median {:.0} ms, p90 {:.0} ms, min {:.0} ms",
            ms(sluice_tests::percentile(ready, 0.5)),
            ms(sluice_tests::percentile(ready, 0.9)),
            ms(sluice_tests::percentile(ready, 0.0)),
        );
    }
}
