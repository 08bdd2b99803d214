//! What the `sluice` command tests share: the binary, `sluice serve` in a child process on a
//! free port, and waiting helpers. Each test file uses part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn sluice() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.env("RUST_LOG", "warn");
    c
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub struct Server {
    pub child: Child,
    pub url: String,
    pub _data: tempfile::TempDir,
}

impl Server {
    /// Waits until the server exits, failing unless it does so with success within `limit`.
    pub fn assert_exits_cleanly_within(&mut self, limit: Duration) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "exit status {status}");
                return;
            }
            assert!(started.elapsed() < limit, "no exit within {limit:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn llm_url() -> String {
    std::env::var("SLUICE_TEST_LLM_URL")
        .expect("SLUICE_TEST_LLM_URL is not set: run the tests with `make test`")
}

pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

pub fn serve() -> Server {
    serve_with(&[])
}

/// `sluice serve` on a free port with a fresh data folder and `env` on top.
pub fn serve_with(env: &[(&str, &str)]) -> Server {
    let port = free_port();
    let data = tempfile::tempdir().unwrap();
    let log = data.path().join("serve.log");
    let child = sluice()
        .arg("serve")
        .env("SLUICE_ADDR", format!("127.0.0.1:{port}"))
        .env("SLUICE_DATA_DIR", data.path())
        .env("SLUICE_LLM_URL", llm_url())
        .env("SLUICE_MAX_TOKENS", "16")
        // One llama-server on two shared cores serves every concurrent test, and a stream can
        // sit silent for seconds while another slot's prompt is read: the tests assert the
        // contract, not the LLM's pace.
        .env("SLUICE_LLM_IDLE_TIMEOUT_MS", "60000")
        // The load and soak tests go past the default tenant limits on purpose.
        .env("SLUICE_TENANT_RATE", "0")
        .env("SLUICE_TENANT_MAX_STREAMS", "0")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let mut server = Server {
        child,
        url,
        _data: data,
    };
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!("sluice serve exited with {status}:\n{log}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "sluice serve did not start listening in 60 s:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

/// Sends moto one DynamoDB call and waits for the answer: its first call loads the DynamoDB
/// backend (seconds on a loaded machine), longer than the client's 2 s attempt timeout, and a
/// start-up check that times out only warns — `sluice serve` would then keep running.
pub fn warm_up_moto(port: u16) {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let request = format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    tcp.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "moto: {answer}");
}

/// Runs `command` to its end, or kills it and fails after `limit`.
pub fn output_within(command: &mut Command, limit: Duration) -> std::process::Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {limit:?}:\n{}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

/// Waits until something listens on `port`.
pub fn wait_for_port(port: u16, what: &str) {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what} did not listen on {port} in 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn samples() -> PathBuf {
    sluice_tests::repo().join("samples")
}

/// `sluice fixture llm` (the synthetic upstream, a benchmark fixture) on a free port, at
/// `tokens_per_sec` per stream, `tokens` per answer; killed when dropped.
pub struct Fixture {
    pub child: Child,
    /// Its OpenAI base URL, `http://127.0.0.1:PORT/v1`.
    pub url: String,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn fixture(tokens_per_sec: u32, tokens: u32) -> Fixture {
    fixture_with(&[
        "--tokens-per-sec",
        &tokens_per_sec.to_string(),
        "--tokens",
        &tokens.to_string(),
    ])
}

/// `sluice fixture llm ARGS` on a free port; killed when dropped.
pub fn fixture_with(args: &[&str]) -> Fixture {
    let port = free_port();
    let child = sluice()
        .args(["fixture", "llm", "--addr", &format!("127.0.0.1:{port}")])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sluice fixture llm");
    wait_for_port(port, "the synthetic upstream");
    Fixture {
        child,
        url: format!("http://127.0.0.1:{port}/v1"),
    }
}

/// `sluice ingest samples/` into `server`.
pub fn ingest(server: &Server) {
    let out = output_within(
        sluice()
            .args(["ingest", "--url", &server.url])
            .arg(samples()),
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{}", text(&out));
}

/// `GET path` with `Host: host` on 127.0.0.1:`port`, by hand (any `Host`, no runtime needed);
/// the status code and the raw response.
pub fn get_as_host(port: u16, host: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    tcp.read_to_string(&mut response).unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, response)
}

impl Server {
    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap()
    }
}
