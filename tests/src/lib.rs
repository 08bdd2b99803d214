//! Harness for the end-to-end tests: a real server (the router over the real model, a
//! Qdrant Edge store in a temporary folder, and the local LLM named by SLUICE_TEST_LLM_URL)
//! on 127.0.0.1, and an SSE client that records what arrives and when.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::cache::CacheStore;
use sluice_contract::cancel::Cancel;
use sluice_contract::stages::Store;
use sluice_core::{Config, Pipeline};
use sluice_embed::MiniLm;
use sluice_http::Server;

pub use sluice_testkit::services::sluice_home;
pub use sluice_testkit::{BrokenCache, BrokenKeys, SlowComponents, Troubled, tenant};

pub mod aws;
pub mod lambda;
pub mod proxy;
pub mod stand_in;

/// The URL of the local LLM started by `make test`.
pub fn llm_url() -> String {
    std::env::var("SLUICE_TEST_LLM_URL")
        .expect("SLUICE_TEST_LLM_URL is not set: run the tests with `make test`, which starts the local LLM")
}

/// A fresh DynamoDB cache table on the emulator `make test` starts (named by the standard
/// `AWS_ENDPOINT_URL_DYNAMODB`), for `config`'s `SLUICE_CACHE_TABLE`.
pub async fn dynamodb(config: &sluice_aws::AwsConfig) -> sluice_cache_dynamodb::DynamoCache {
    assert!(
        std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_some(),
        "AWS_ENDPOINT_URL_DYNAMODB is not set: run the tests with `make test`, which starts the DynamoDB emulator"
    );
    let table = sluice_cache_dynamodb::DynamoCache::connect(
        &config.cache_table,
        config.cache_tenant_role_arn.as_deref(),
    )
    .await
    .expect("DynamoDB client");
    table.create_table().await.expect("cache table");
    table
}

/// The cache guard's lexicon from the configured model folder, read once per test process.
pub fn lexicon() -> Arc<sluice_core::language::lexicon::Lexicon> {
    static LEXICON: OnceLock<Arc<sluice_core::language::lexicon::Lexicon>> = OnceLock::new();
    LEXICON
        .get_or_init(|| {
            let path = Config::from_env()
                .expect("configuration")
                .cache
                .lexicon
                .expect("SLUICE_CACHE_LEXICON is not none");
            Arc::new(
                sluice_core::language::lexicon::Lexicon::load(&path)
                    .expect("the guard's lexicon (run `scripts/setup.sh model`)"),
            )
        })
        .clone()
}

/// The embedding model, loaded once per test binary.
pub fn model() -> Arc<MiniLm> {
    static MODEL: OnceLock<Arc<MiniLm>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = sluice_testkit::services::model_dir();
            Arc::new(MiniLm::load(&dir).expect("embedding model (run `scripts/setup.sh model`)"))
        })
        .clone()
}

/// The repository's root, found when the test runs rather than when it was compiled: clones
/// may share one target directory (CI's `~/.cache/sluice/target`) and Cargo does not rebuild a
/// test whose workspace moved, so a path compiled in can name another clone's files. Cargo and
/// nextest set `CARGO_MANIFEST_DIR` for the test they run; the root is the nearest folder at or
/// above it holding `Cargo.lock`. A test binary started by hand falls back to where it was built.
pub fn repo() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .and_then(|package| {
            package
                .ancestors()
                .find(|dir| dir.join("Cargo.lock").is_file())
                .map(PathBuf::from)
        })
        .unwrap_or(built)
}

/// The repository's `samples/` folder.
pub fn samples_dir() -> PathBuf {
    repo().join("samples")
}

/// The sandbox's well-behaved test component (`crates/rerank/tests/reverse.wat`): it
/// reverses the fused order.
pub const REVERSE: &str = include_str!("../../crates/rerank/tests/reverse.wat");

/// `method {base}{path}` with `headers` and `body`: status, response headers and the JSON
/// body (Null when it is not JSON).
pub async fn request(
    base: &str,
    headers: &[(&str, &str)],
    method: reqwest::Method,
    path: &str,
    body: Vec<u8>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut request = http().request(method, format!("{base}{path}")).body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let r = request.send().await.expect("request");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.json().await.unwrap_or(Value::Null))
}

/// The `code` of an error body `{"error": {"code", ...}}` (Sluice's or OpenAI's shape).
pub fn error_code(body: &Value) -> &str {
    body["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error body: {body}"))
}

/// The documents of `samples/`, ids `samples/<file name>`.
pub fn sample_documents() -> Vec<sluice_contract::document::Document> {
    let mut documents = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(samples_dir())
        .expect("samples")
        .map(|e| e.expect("entry").path())
        .collect();
    paths.sort();
    for p in paths {
        let bytes = std::fs::read(&p).expect("read sample");
        let name = format!(
            "samples/{}",
            p.file_name().and_then(|n| n.to_str()).expect("name")
        );
        documents.extend(
            sluice_convert::parse_file(&name, &bytes, &Default::default()).expect("sample parses"),
        );
    }
    documents
}

/// [`sample_documents`] `copies` times over, each copy's ids suffixed `#<copy>`: a corpus of
/// the benchmarks' size made of pages whose questions are known.
pub fn sample_copies(copies: usize) -> Vec<sluice_contract::document::Document> {
    let documents = sample_documents();
    (0..copies)
        .flat_map(|copy| {
            documents.iter().cloned().map(move |mut d| {
                d.id = format!("{}#{copy}", d.id);
                d
            })
        })
        .collect()
}

/// What a benchmark's server is built from: the environment's configuration over the folder
/// `data`, with the tenant's request rate and streams unlimited (one client sends requests
/// back to back: a limit would refuse most of them, and the bench measures Sluice, not the
/// limiter), and the Qdrant Edge store opened there.
pub fn bench_parts(data: &std::path::Path) -> (Config, sluice_http::WireConfig, Arc<dyn Store>) {
    let mut config = Config::from_env().expect("config");
    config.data_dir = data.to_path_buf();
    let mut wire = sluice_http::WireConfig::from_lookup(
        &|name: &str| std::env::var(name).ok(),
        &config.data_dir,
    )
    .expect("config");
    wire.limits.tenant_rate = 0.0;
    wire.limits.tenant_max_streams = 0;
    let store = sluice_retrieve::EdgeStore::open(&config.data_dir, sluice_embed::DIM)
        .expect("a Qdrant Edge store");
    (config, wire, Arc::new(store))
}

/// An upstream that records when it was called and answers "ok" at once: a benchmark
/// fixture, not a model (what is timed is Sluice's own work).
#[derive(Default)]
pub struct Stopwatch(pub std::sync::Mutex<Option<Instant>>);

#[async_trait::async_trait]
impl sluice_contract::stages::Llm for Stopwatch {
    fn model_id(&self) -> &str {
        "bench-fixture"
    }
    async fn stream(
        &self,
        _: Vec<sluice_contract::stages::ChatMessage>,
        _: u32,
        _: &str,
    ) -> Result<sluice_contract::stages::LlmStream, sluice_contract::error::LlmError> {
        use sluice_contract::stages::LlmEvent;
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let events = vec![
            Ok(LlmEvent::Token("ok".into())),
            Ok(LlmEvent::Finish {
                finish_reason: "stop".into(),
                completion_tokens: Some(1),
                prompt_tokens: None,
            }),
        ];
        Ok(Box::pin(futures::stream::iter(events)))
    }
    async fn ready(&self) -> Result<(), sluice_contract::error::LlmError> {
        Ok(())
    }
}

/// A key file (auth on with `SLUICE_API_KEYS_FILE`) with one new key per `(tenant,
/// permissions)`: the folder holding it (deleted when dropped), its path and the keys in order.
pub fn key_file(
    entries: &[(&str, &[sluice_contract::auth::Permission])],
) -> (tempfile::TempDir, String, Vec<String>) {
    use sluice_contract::{auth::KeyRecord, auth::Principal, auth::new_key};
    use sluice_local::append_to_file;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("keys.json");
    let keys = entries
        .iter()
        .map(|(tenant, permissions)| {
            let key = new_key();
            let tenant = Tenant::new(tenant).expect("a tenant");
            let principal = Principal::new(tenant, permissions.to_vec());
            let record = KeyRecord::new(&key, principal, None);
            append_to_file(&path, record).expect("key file");
            key
        })
        .collect();
    let path = path.display().to_string();
    (dir, path, keys)
}

/// A running server and what it is made of.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// What the router serves (its metrics, quotas and registry).
    pub server: Arc<Server>,
    /// The pipeline behind the router (`server.answers`).
    pub pipeline: Arc<Pipeline>,
    /// The document ingestion behind the router (`server.ingest`).
    pub ingest: Arc<sluice_core::Ingest>,
    /// Dropped (or sent) to begin a graceful shutdown.
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// Configuration for a test server: the environment, then the test LLM and a fresh data
/// folder, then `overrides`. Answers are capped at 24 tokens to keep the suite fast.
pub fn settings(data: &std::path::Path, overrides: &[(&str, &str)]) -> sluice_app::Settings {
    let mut vars: HashMap<String, String> = std::env::vars().collect();
    vars.insert("SLUICE_LLM_URL".into(), llm_url());
    vars.insert("SLUICE_DATA_DIR".into(), data.display().to_string());
    vars.insert("SLUICE_MAX_TOKENS".into(), "24".into());
    // One llama-server on two shared cores serves every concurrent test: a stream can sit
    // silent for seconds while another slot's prompt is read. The tests about the LLM's
    // timeouts set their own; the rest assert the contract, not the LLM's pace.
    vars.insert("SLUICE_LLM_IDLE_TIMEOUT_MS".into(), "60000".into());
    // Tests send requests back to back; the ones about limits set their own.
    vars.insert("SLUICE_TENANT_RATE".into(), "0".into());
    vars.insert("SLUICE_TENANT_MAX_STREAMS".into(), "0".into());
    for (k, v) in overrides {
        vars.insert(k.to_string(), v.to_string());
    }
    sluice_app::Settings::from_lookup(|k| vars.get(k).cloned()).expect("test configuration")
}

/// Starts a server with the real stages; `wrap_store` may put a test double around the store.
pub async fn start_with(
    overrides: &[(&str, &str)],
    wrap_store: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
) -> TestServer {
    start_adjusted(overrides, |p| p.store = p.store.take().map(wrap_store)).await
}

/// Starts a server with the real stages and the answer cache over `cache` (a test double).
pub async fn start_with_cache(
    overrides: &[(&str, &str)],
    cache: Arc<dyn CacheStore>,
) -> TestServer {
    start_adjusted(overrides, |p| {
        p.cache = Some(Arc::new(sluice_core::cache::SemanticCache::new(
            cache,
            sluice_core::cache::CacheSettings::from_config(&p.config.cache),
            sluice_embed::DIM,
        )))
    })
    .await
}

pub use sluice_app::Parts;

/// Starts a server with the real stages — the model, a Qdrant Edge store in a fresh folder,
/// the LLM client, the component registry (in `<data>/components`), the answer cache and the
/// API keys as the configuration says, built by `sluice-app` as `sluice serve` builds them —
/// after `adjust` has had its way with them (test doubles in place of stages, a stage taken
/// away).
pub async fn start_adjusted(
    overrides: &[(&str, &str)],
    adjust: impl FnOnce(&mut Parts),
) -> TestServer {
    let data = tempfile::tempdir().expect("temp dir");
    let settings = settings(data.path(), overrides);
    let mut parts = sluice_app::parts(settings, sluice_app::Role::All, Some(model()))
        .await
        .expect("the server's parts");
    adjust(&mut parts);
    serve(parts.into_server(), data).await
}

/// Ingests `documents` for `tenant` into the Qdrant Edge store in the folder `data`, as the
/// ingest function would, and closes the store: the corpus of a function started on that
/// folder afterwards (an embedded store belongs to one process at a time).
pub async fn ingest_into(
    data: &std::path::Path,
    tenant: &str,
    documents: Vec<sluice_contract::document::Document>,
) {
    let parts = sluice_app::parts(
        settings(data, &[]),
        sluice_app::Role::Documents,
        Some(model()),
    )
    .await
    .expect("the ingest function's parts");
    let ingest = parts.into_server().ingest.expect("a server that ingests");
    ingest
        .ingest(&self::tenant(tenant), documents)
        .await
        .expect("ingest");
}

/// Serves `server` on a free port of 127.0.0.1; `data` is deleted once the server stops.
async fn serve(server: Server, data: tempfile::TempDir) -> TestServer {
    let server = Arc::new(server);
    let pipeline = server.answers.clone().expect("a server that answers");
    let ingest = server.ingest.clone().expect("a server that ingests");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let serving = Arc::clone(&server);
    let header_timeout = server.limits.header_timeout;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        // The data folder lives in the server task, declared first so that it is deleted
        // last: when the runtime drops this task, the store is dropped (and flushes its
        // files) while its folder still exists.
        let _data = data;
        let router = sluice_http::router(serving);
        let _ = sluice_http::serve(listener, router, header_timeout, async move {
            let _ = stopped.await;
        })
        .await;
    });
    TestServer {
        url,
        server,
        pipeline,
        ingest,
        stop,
        task,
    }
}

/// Starts a server with the real stages.
pub async fn start(overrides: &[(&str, &str)]) -> TestServer {
    start_with(overrides, |s| s).await
}

/// The `/v1` URL of a port on 127.0.0.1 that nothing listens on: an LLM (or a store) that is
/// down. Port 9 (discard), not a freed ephemeral port: the tests' servers bind port 0, which
/// the kernel draws from the ephemeral range, so a port freed there can be handed to another
/// test's server before the connection is tried (a "closed" Qdrant answering a 404 there
/// reads as corpus version 0); none of them can take a port under 1024.
pub fn closed_llm_url() -> String {
    const PORT: u16 = 9;
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", PORT)).is_err(),
        "127.0.0.1:{PORT} must be closed for the tests that need a service that is down"
    );
    format!("http://127.0.0.1:{PORT}/v1")
}

/// `name` from the venv `venv` under [`sluice_home`], which `scripts/setup.sh tools` makes;
/// the assertion says so when it is missing.
pub fn venv_tool(venv: &str, name: &str) -> PathBuf {
    let path = sluice_home().join(venv).join("bin").join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `scripts/setup.sh tools`",
        path.display()
    );
    path
}

/// The `q` quantile (0 to 1) of `samples` (sorted in place; nearest rank). For benchmarks.
pub fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    assert!(!samples.is_empty(), "no samples");
    samples.sort();
    samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)]
}

/// A plain HTTP client with a timeout on every call.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client")
}

impl TestServer {
    /// Fails unless `tenant` has no chunks and a corpus version of 0: nothing was ingested.
    pub async fn assert_nothing_written(&self, tenant: &str) {
        let tenant = &sluice_contract::Tenant::new(tenant).expect("a tenant");
        let store = &self.pipeline.store;
        assert_eq!(
            store.count(tenant).await.expect("count"),
            0,
            "chunks of {tenant}"
        );
        let version = store.corpus_version(tenant).await.expect("corpus version");
        assert_eq!(version, 0, "corpus version of {tenant}");
    }

    /// Stops the server and waits until it has: its connections closed, the store dropped
    /// (flushed) and then its data folder deleted. Tests that start several servers call it,
    /// so that none is left for the runtime to drop in an arbitrary order (a store dropped
    /// after its folder fails to flush).
    pub async fn stop(self) {
        let TestServer {
            server,
            pipeline,
            ingest,
            stop,
            task,
            ..
        } = self;
        drop((server, pipeline, ingest));
        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    }

    /// Ingests every sample document through `POST /v1/documents`.
    pub async fn ingest_samples(&self) -> Value {
        self.ingest_samples_as("default").await
    }

    /// Ingests every sample document for `tenant`.
    pub async fn ingest_samples_as(&self, tenant: &str) -> Value {
        let body = json!({ "documents": sample_documents() })
            .to_string()
            .into_bytes();
        let (status, body) = self
            .send_as(tenant, reqwest::Method::POST, "/v1/documents", body)
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// POSTs JSON and returns status and JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, body.to_string()).await
    }

    /// Sends `method path` with `body` as `tenant`; returns status and JSON body.
    pub async fn send_as(
        &self,
        tenant: &str,
        method: reqwest::Method,
        path: &str,
        body: Vec<u8>,
    ) -> (u16, Value) {
        self.send(Some(tenant), method, path, body.into()).await
    }

    /// POSTs raw bytes and returns status and JSON body (Null when it is not JSON).
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        self.send(None, reqwest::Method::POST, path, body.into())
            .await
    }

    /// GETs a path and returns status and JSON body.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(
            None,
            reqwest::Method::GET,
            path,
            reqwest::Body::from(Vec::new()),
        )
        .await
    }

    /// DELETEs a path and returns status and JSON body.
    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(
            None,
            reqwest::Method::DELETE,
            path,
            reqwest::Body::from(Vec::new()),
        )
        .await
    }

    async fn send(
        &self,
        tenant: Option<&str>,
        method: reqwest::Method,
        path: &str,
        body: reqwest::Body,
    ) -> (u16, Value) {
        let mut request = http()
            .request(method, format!("{}{path}", self.url))
            .body(body);
        if let Some(t) = tenant {
            request = request.header("x-sluice-tenant", t);
        }
        let r = request.send().await.expect("request");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Asks through `POST /v1/answer` and records every event.
    pub async fn answer(&self, body: &Value) -> Answer {
        self.answer_as(None, body).await
    }

    /// Asks as `tenant` (the `x-sluice-tenant` header), or as the default tenant.
    pub async fn answer_as(&self, tenant: Option<&str>, body: &Value) -> Answer {
        answer_at(&self.url, tenant, body).await
    }
}

/// Asks the server at `base` (`POST {base}/v1/answer`) as `tenant`, records every event with
/// its arrival time, and checks the status and that no `content-length` was sent (events
/// must leave as they are made).
pub async fn answer_at(base: &str, tenant: Option<&str>, body: &Value) -> Answer {
    let headers: Vec<(&str, &str)> = tenant.map(|t| ("x-sluice-tenant", t)).into_iter().collect();
    answer_with_headers(base, &headers, body).await
}

/// [`answer_at`] with any request headers (`authorization` for a server with auth on).
pub async fn answer_with_headers(base: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    answer_reporting(base, headers, body, None).await
}

/// [`answer_with_headers`], telling `report` each event's name as it arrives: a test waits on
/// that (tokens have reached the client) instead of guessing how long it takes.
pub async fn answer_reporting(
    base: &str,
    headers: &[(&str, &str)],
    body: &Value,
    report: Option<tokio::sync::mpsc::UnboundedSender<String>>,
) -> Answer {
    let sent = Instant::now();
    let mut request = http().post(format!("{base}/v1/answer")).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let r = request.send().await.expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    assert!(
        r.headers().get("content-length").is_none(),
        "a streamed answer has no length"
    );
    let mut events = Vec::new();
    // Comment lines (keep-alives) are counted as they pass; the SSE parser drops them.
    let raw = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&raw);
    let mut stream = r
        .bytes_stream()
        .inspect(move |chunk| {
            if let (Ok(bytes), Ok(mut raw)) = (chunk, seen.lock()) {
                raw.extend_from_slice(bytes);
            }
        })
        .eventsource();
    while let Some(e) = stream.next().await {
        let e = e.expect("well-formed SSE");
        let data: Value = serde_json::from_str(&e.data).expect("every data line is JSON");
        // Every event a client can decode as the contract's (what `sluice ask` and the load
        // generator read), not only as JSON.
        if let Err(broken) = sluice_client::decode(&e.event, &e.data) {
            panic!("{broken}");
        }
        if let Some(report) = &report {
            let _ = report.send(e.event.clone());
        }
        events.push(Received {
            name: e.event,
            data,
            at: sent.elapsed(),
        });
    }
    let raw = raw.lock().map(|r| r.clone()).unwrap_or_default();
    let comments = String::from_utf8_lossy(&raw)
        .lines()
        .filter(|l| l.starts_with(':'))
        .count();
    Answer {
        events,
        ended: sent.elapsed(),
        comments,
    }
}

/// One received SSE event.
#[derive(Debug)]
pub struct Received {
    /// Event name.
    pub name: String,
    /// Its JSON data.
    pub data: Value,
    /// When it arrived, counted from sending the request.
    pub at: Duration,
}

/// A whole answer stream.
#[derive(Debug)]
pub struct Answer {
    /// Events in arrival order.
    pub events: Vec<Received>,
    /// When the response body ended, counted from sending the request.
    pub ended: Duration,
    /// SSE comment lines (keep-alives) the stream carried.
    pub comments: usize,
}

impl Answer {
    /// Event names in order.
    pub fn names(&self) -> Vec<&str> {
        self.events.iter().map(|e| e.name.as_str()).collect()
    }

    /// The first event with this name.
    pub fn first(&self, name: &str) -> &Received {
        self.events
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no {name} event in {:?}", self.names()))
    }

    /// The generated text.
    pub fn text(&self) -> String {
        self.events
            .iter()
            .filter(|e| e.name == "token")
            .filter_map(|e| e.data["text"].as_str())
            .collect()
    }

    /// Checks the framing every stream must have: `meta` first, then tokens numbered from 0,
    /// then exactly one `done` or `error`, last.
    pub fn assert_well_formed(&self) {
        let events: Vec<(&str, &Value)> = self
            .events
            .iter()
            .map(|e| (e.name.as_str(), &e.data))
            .collect();
        sluice_testkit::assert_well_formed(&events);
    }
}

impl TestServer {
    /// Uploads and activates the component `bytes` for `tenant` through the server's own
    /// registry (as `PUT` then `POST …/activate` would); its version.
    pub async fn activate_component(&self, tenant: &Tenant, bytes: Vec<u8>) -> String {
        let registry = self.server.components.clone().expect("components");
        let tenant = sluice_contract::Tenant::new(tenant).expect("a tenant");
        tokio::task::spawn_blocking(move || {
            let version = registry
                .upload(&tenant, &bytes, None, &Cancel::new())
                .expect("upload")
                .version;
            registry.activate(&tenant, &version).expect("activate");
            version
        })
        .await
        .expect("registry task")
    }
}

/// A registry over `storage` with the default limits and the parts' model lent to components
/// (built by `sluice_app::registry`, over another storage).
pub fn registry_over(
    parts: &Parts,
    storage: Arc<dyn sluice_contract::components::ComponentStorage>,
) -> Arc<sluice_rerank::Registry> {
    let embedder = parts.embedder.clone().expect("the model");
    let limits = sluice_rerank::RerankConfig::from_lookup(&|_: &str| None).expect("limits");
    Arc::new(sluice_app::registry(&limits, embedder, storage).expect("registry"))
}

/// [`registry_over`] `storage`, as the parts' rerank stage and component routes (in place of
/// the ones built).
pub fn use_registry(
    parts: &mut Parts,
    storage: Arc<dyn sluice_contract::components::ComponentStorage>,
) {
    let registry = registry_over(parts, storage);
    parts.reranker = Some(registry.clone());
    parts.components = Some(registry);
}

/// The folder the harness keeps a server's components in (`<data>/components`), as storage.
pub fn component_folder(parts: &Parts) -> Arc<dyn sluice_contract::components::ComponentStorage> {
    Arc::new(
        sluice_rerank::Disk::open(&parts.config.data_dir.join("components"))
            .expect("component folder"),
    )
}
