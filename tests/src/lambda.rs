//! A Lambda function under local emulation: cargo-lambda's runtime-API emulator (`cargo
//! lambda watch --only-lambda-apis`, PyPI `cargo-lambda==1.9.2`, installed by
//! `scripts/setup.sh tools`) on a free 127.0.0.1 port, and a function binary started against
//! its runtime API. The emulator serves the function's URL (`/lambda-url/_/…`, streaming when
//! the function streams) and the Invoke API (`/2015-03-31/functions/_/invocations`, for
//! events such as S3 notifications). It is not a model of AWS scaling, cold starts or limits:
//! it checks that a function speaks the runtime's protocol end to end. With a concurrency
//! above one ([`Function::start_concurrent`]) it stands for one execution environment of
//! Lambda Managed Instances: the function runs that many workers (`AWS_LAMBDA_MAX_CONCURRENCY`),
//! each holding a request for the next invocation, and the emulator hands each waiting request
//! its own invocation, so the one process has that many in flight at once.
//!
//! The emulator is never given `--concurrency`: in cargo-lambda 1.9.2 that flag only sizes a
//! pool of function instances the emulator starts itself (`cargo run` in the folder it runs
//! in), and above one it starts them whenever an invocation waits, `--only-lambda-apis`
//! notwithstanding — it does not know the function started here. Run from the answer
//! function's folder (as `make load` did), that compiled the workspace again, with that
//! package's features, on the cores being measured, to start a second, unconfigured function.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

impl Drop for Function {
    fn drop(&mut self) {
        if std::env::var_os("SLUICE_TEST_FUNCTION_LOGS").is_some() {
            eprintln!(
                "{}",
                std::fs::read_to_string(self.log.path()).unwrap_or_default()
            );
        }
    }
}

/// Kills the child when dropped, however the test ends.
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

/// An emulated function; both processes stop when it is dropped.
pub struct Function {
    port: u16,
    // Dropped in this order: the function, then its emulator.
    function: Killed,
    _emulator: Killed,
    /// The function's stdout: its JSON log lines and EMF metric lines.
    log: tempfile::NamedTempFile,
}

impl Function {
    /// Starts the emulator and `binary` against it, with the test LLM, 24-token answers, the
    /// answer cache off, then `env` (later values win). The emulator holds invocations until
    /// the function has initialised and asks for one.
    pub fn start(binary: &Path, env: &[(&str, String)]) -> Self {
        Self::start_concurrent(binary, env, 1)
    }

    /// [`Function::start`] as one environment of Lambda Managed Instances: up to
    /// `concurrency` invocations in the one process at once.
    pub fn start_concurrent(binary: &Path, env: &[(&str, String)], concurrency: u32) -> Self {
        let port = free_port();
        let emulator = Killed(
            Command::new(crate::venv_tool("venv", "cargo-lambda"))
                .args([
                    "lambda",
                    "watch",
                    "--only-lambda-apis",
                    "-A",
                    "127.0.0.1",
                    "-P",
                ])
                .arg(port.to_string())
                // It reads the package metadata of the folder it starts in; `tests` has no
                // binary, so a `cargo run` there would build nothing (see the top).
                .current_dir(crate::repo().join("tests"))
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
        let log = tempfile::NamedTempFile::new().expect("log file");
        let mut command = Command::new(binary);
        command
            // What the emulator says a function needs (Lambda sets the same in AWS).
            .env(
                "AWS_LAMBDA_RUNTIME_API",
                format!("http://127.0.0.1:{port}/.rt"),
            )
            .env("AWS_LAMBDA_FUNCTION_NAME", "_")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "2048")
            .env("SLUICE_LLM_URL", crate::llm_url())
            .env("SLUICE_CACHE", "off")
            .env("SLUICE_MAX_TOKENS", "24")
            // As in `config`: the shared test LLM may pause a stream for seconds.
            .env("SLUICE_LLM_IDLE_TIMEOUT_MS", "60000")
            // The function's log (JSON lines on stdout) is kept for `log()`, and printed at
            // the end with SLUICE_TEST_FUNCTION_LOGS set; stderr carries panics.
            .stdout(log.reopen().expect("log file"))
            .stderr(Stdio::inherit());
        if concurrency > 1 {
            // What Lambda sets in a Managed Instances environment; classic Lambda sets none,
            // and the runtime then polls for one invocation at a time.
            command.env("AWS_LAMBDA_MAX_CONCURRENCY", concurrency.to_string());
        }
        for (k, v) in env {
            command.env(k, v);
        }
        let function = Killed(command.spawn().expect("the function starts"));
        Self {
            port,
            function,
            _emulator: emulator,
            log,
        }
    }

    /// Sends the function SIGTERM (what Lambda sends at shutdown) and waits up to `within`
    /// for it to exit: its exit status, or `None` if it still runs.
    pub async fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let pid = self.function.0.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        let started = Instant::now();
        while started.elapsed() < within {
            if let Ok(Some(status)) = self.function.0.try_wait() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// What the function has written to stdout so far, one JSON object per line.
    pub fn log(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.log.path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The function URL's base: `http://127.0.0.1:PORT/lambda-url/_`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/lambda-url/_", self.port)
    }

    /// Invokes the function with `event` through the Invoke API: its output, or `Err` with
    /// the error it reported (Lambda would retry an asynchronous invocation then).
    pub async fn invoke(&self, event: &serde_json::Value) -> Result<serde_json::Value, String> {
        let url = format!(
            "http://127.0.0.1:{}/2015-03-31/functions/_/invocations",
            self.port
        );
        let r = crate::http()
            .post(url)
            .json(event)
            .send()
            .await
            .expect("invoke");
        let failed = !r.status().is_success() || r.headers().contains_key("x-amz-function-error");
        let body = r.text().await.expect("invocation output");
        if failed {
            return Err(body);
        }
        serde_json::from_str(&body).map_err(|e| format!("output is not JSON ({e}): {body}"))
    }
}
