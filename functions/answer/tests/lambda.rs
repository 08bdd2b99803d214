//! The answer function under local Lambda emulation: cargo-lambda's runtime-API emulator
//! (`cargo lambda watch --only-lambda-apis`, PyPI `cargo-lambda==1.9.2`) serves function URLs
//! on 127.0.0.1 and streams; the function is this package's `answer` binary, started against
//! the emulator's runtime API with the real model, a fresh Qdrant Edge folder and the test LLM
//! that `make test` runs. The emulator is not a model of AWS concurrency, cold starts or
//! limits: it checks the function speaks the runtime's streaming protocol end to end.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

/// Kills the child when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn cargo_lambda() -> PathBuf {
    let home = std::env::var_os("SLUICE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/sluice")
        });
    let path = home.join("venv/bin/cargo-lambda");
    assert!(
        path.is_file(),
        "{} is missing: run `scripts/setup.sh tools`",
        path.display()
    );
    path
}

#[tokio::test]
async fn the_function_url_streams_an_answer_token_by_token() {
    let port = free_port();
    let _emulator = Killed(
        Command::new(cargo_lambda())
            .args([
                "lambda",
                "watch",
                "--only-lambda-apis",
                "-A",
                "127.0.0.1",
                "-P",
            ])
            .arg(port.to_string())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cargo-lambda starts"),
    );
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the emulator never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let data = tempfile::tempdir().unwrap();
    let _function = Killed(
        Command::new(env!("CARGO_BIN_EXE_answer"))
            // What the emulator says a function needs (Lambda sets the same in AWS).
            .env(
                "AWS_LAMBDA_RUNTIME_API",
                format!("http://127.0.0.1:{port}/.rt"),
            )
            .env("AWS_LAMBDA_FUNCTION_NAME", "_")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "2048")
            .env("SLUICE_LLM_URL", sluice_tests::llm_url())
            .env("SLUICE_DATA_DIR", data.path())
            .env("SLUICE_CACHE", "off")
            .env("SLUICE_MAX_TOKENS", "24")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the answer function starts"),
    );

    // The emulator holds the invocation until the function has initialised and asks for it.
    let base = format!("http://127.0.0.1:{port}/lambda-url/_");
    let answer = sluice_tests::answer_at(
        &base,
        None,
        &json!({"query": "How long does a replacement card take to arrive?"}),
    )
    .await;
    answer.assert_well_formed();
    let names = answer.names();
    assert_eq!(names.first(), Some(&"meta"));
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    let tokens: Vec<_> = answer.events.iter().filter(|e| e.name == "token").collect();
    assert!(tokens.len() >= 2, "{names:?}");
    // Incremental delivery: the first token reached the client well before the stream ended
    // (a buffered response would deliver every event at the same moment).
    let done = answer.first("done");
    let spread = done.at - tokens[0].at;
    assert!(
        spread > Duration::from_millis(50),
        "first token at {:?}, done at {:?}: not streamed",
        tokens[0].at,
        done.at
    );
}
