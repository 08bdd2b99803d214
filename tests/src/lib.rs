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
use sluice_core::auth::KeyStore;
use sluice_core::cache::{CacheEntry, CacheStore};
use sluice_core::error::{CacheError, StoreError};
use sluice_core::stages::Components;
use sluice_core::stages::{DocumentInfo, Embedder, Hit, Llm, Store, StoredChunk};
use sluice_core::{Config, Pipeline};
use sluice_embed::MiniLm;
use sluice_http::Server;
use sluice_llm::OpenAiClient;

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
pub async fn dynamodb(config: &Config) -> sluice_cache::DynamoCache {
    assert!(
        std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_some(),
        "AWS_ENDPOINT_URL_DYNAMODB is not set: run the tests with `make test`, which starts the DynamoDB emulator"
    );
    let table = sluice_cache::DynamoCache::connect(config)
        .await
        .expect("DynamoDB client");
    table.create_table().await.expect("cache table");
    table
}

/// The embedding model, loaded once per test binary.
pub fn model() -> Arc<MiniLm> {
    static MODEL: OnceLock<Arc<MiniLm>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = Config::from_env().expect("configuration").model_dir;
            Arc::new(MiniLm::load(&dir).expect("embedding model (run `scripts/setup.sh model`)"))
        })
        .clone()
}

/// The repository's `samples/` folder.
pub fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../samples")
}

/// The sandbox's well-behaved test component (`functions/sandbox/tests/reverse.wat`): it
/// reverses the fused order.
pub const REVERSE: &str = include_str!("../../functions/sandbox/tests/reverse.wat");

/// Every `/v1` route, each with a body it would accept: method, path, body.
pub fn v1_routes() -> Vec<(reqwest::Method, &'static str, Vec<u8>)> {
    use reqwest::Method;
    vec![
        (Method::POST, "/v1/answer", br#"{"query":"x"}"#.to_vec()),
        (
            Method::POST,
            "/v1/documents",
            br#"{"documents":[{"id":"a","text":"x"}]}"#.to_vec(),
        ),
        (
            Method::PUT,
            "/v1/components/rerank",
            REVERSE.as_bytes().to_vec(),
        ),
        (
            Method::POST,
            "/v1/components/rerank/activate",
            br#"{"version":"v"}"#.to_vec(),
        ),
        (Method::GET, "/v1/components/rerank", Vec::new()),
        (Method::DELETE, "/v1/components/rerank", Vec::new()),
        (Method::DELETE, "/v1/cache", Vec::new()),
        (
            Method::POST,
            "/v1/chat/completions",
            br#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#.to_vec(),
        ),
        (Method::GET, "/v1/models", Vec::new()),
    ]
}

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
pub fn sample_documents() -> Vec<sluice_core::ingest::Document> {
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
        documents.extend(sluice_core::ingest::parse_file(&name, &bytes).expect("sample parses"));
    }
    documents
}

/// A key file (auth on with `SLUICE_API_KEYS_FILE`) with one new key per `(tenant,
/// permissions)`: the folder holding it (deleted when dropped), its path and the keys in order.
pub fn key_file(
    entries: &[(&str, &[sluice_core::auth::Permission])],
) -> (tempfile::TempDir, String, Vec<String>) {
    use sluice_core::auth::{KeyRecord, Principal, append_to_file, digest, new_key};
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("keys.json");
    let keys = entries
        .iter()
        .map(|(tenant, permissions)| {
            let key = new_key();
            let record = KeyRecord {
                hash: digest(&key),
                principal: Principal {
                    tenant: tenant.to_string(),
                    permissions: permissions.to_vec(),
                },
                name: None,
            };
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
    /// The pipeline behind the router (`server.pipeline`).
    pub pipeline: Arc<Pipeline>,
    /// Dropped (or sent) to begin a graceful shutdown.
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// Configuration for a test server: the environment, then the test LLM and a fresh data
/// folder, then `overrides`. Answers are capped at 24 tokens to keep the suite fast.
pub fn config(data: &std::path::Path, overrides: &[(&str, &str)]) -> Config {
    let mut vars: HashMap<String, String> = std::env::vars().collect();
    vars.insert("SLUICE_LLM_URL".into(), llm_url());
    vars.insert("SLUICE_DATA_DIR".into(), data.display().to_string());
    vars.insert("SLUICE_MAX_TOKENS".into(), "24".into());
    // Tests send requests back to back; the ones about limits set their own.
    vars.insert("SLUICE_TENANT_RATE".into(), "0".into());
    vars.insert("SLUICE_TENANT_MAX_STREAMS".into(), "0".into());
    for (k, v) in overrides {
        vars.insert(k.to_string(), v.to_string());
    }
    Config::from_lookup(|k| vars.get(k).cloned()).expect("test configuration")
}

/// Starts a server with the real stages; `wrap_store` may put a test double around the store.
pub async fn start_with(
    overrides: &[(&str, &str)],
    wrap_store: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
) -> TestServer {
    start_adjusted(overrides, |p| p.store = wrap_store(Arc::clone(&p.store))).await
}

/// Starts a server with the real stages and the answer cache over `cache` (a test double).
pub async fn start_with_cache(
    overrides: &[(&str, &str)],
    cache: Arc<dyn CacheStore>,
) -> TestServer {
    start_adjusted(overrides, |p| {
        p.cache = Some(Arc::new(sluice_core::cache::SemanticCache::new(
            cache,
            sluice_core::cache::CacheSettings::from_config(&p.config),
            sluice_embed::DIM,
        )))
    })
    .await
}

/// What a test server is built from, before it starts: the pipeline (reached through this, as
/// `p.store`, `p.cache`, …), and what the wire adds around it.
pub struct Parts {
    /// The answer path.
    pub pipeline: Pipeline,
    /// The registry behind `/v1/components/rerank`.
    pub components: Option<Arc<dyn Components>>,
    /// API keys (auth on), or none.
    pub keys: Option<Arc<dyn KeyStore>>,
}

impl std::ops::Deref for Parts {
    type Target = Pipeline;
    fn deref(&self) -> &Pipeline {
        &self.pipeline
    }
}

impl std::ops::DerefMut for Parts {
    fn deref_mut(&mut self) -> &mut Pipeline {
        &mut self.pipeline
    }
}

/// Starts a server with the real stages — the model, a Qdrant Edge store in a fresh folder,
/// the LLM client, the component registry (in `<data>/components`), the answer cache and the
/// API keys as the configuration says — after `adjust` has had its way with them (test
/// doubles in place of stages, a stage taken away).
pub async fn start_adjusted(
    overrides: &[(&str, &str)],
    adjust: impl FnOnce(&mut Parts),
) -> TestServer {
    let data = tempfile::tempdir().expect("temp dir");
    let config = config(data.path(), overrides);
    let embedder: Arc<dyn Embedder> = model();
    let store = sluice_retrieve::open(&config, sluice_embed::DIM).expect("store");
    let llm: Arc<dyn Llm> = Arc::new(OpenAiClient::from_config(&config).expect("llm client"));
    let registry = Arc::new(
        sluice_sandbox::Registry::from_config(
            &config,
            Arc::clone(&embedder),
            Arc::new(
                sluice_sandbox::Disk::open(&config.data_dir.join("components"))
                    .expect("component folder"),
            ),
        )
        .expect("registry"),
    );
    let cache = sluice_cache::build(&config, sluice_embed::DIM)
        .await
        .expect("answer cache");
    let keys = sluice_core::auth::file_keys(&config)
        .expect("API key file")
        .map(|k| Arc::new(k) as Arc<dyn KeyStore>);
    let mut pipeline = Pipeline::new(config, embedder, store, llm).with_reranker(registry.clone());
    if let Some(cache) = cache {
        pipeline = pipeline.with_cache(cache);
    }
    let mut parts = Parts {
        pipeline,
        components: Some(registry),
        keys,
    };
    adjust(&mut parts);
    let Parts {
        pipeline,
        components,
        keys,
    } = parts;
    let mut server = Server::new(Arc::new(pipeline));
    server.components = components;
    server.keys = keys;
    serve(server, data).await
}

/// Serves `server` on a free port of 127.0.0.1; `data` is deleted once the server stops.
async fn serve(server: Server, data: tempfile::TempDir) -> TestServer {
    let server = Arc::new(server);
    let pipeline = Arc::clone(&server.pipeline);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let serving = Arc::clone(&server);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        // The data folder lives in the server task, declared first so that it is deleted
        // last: when the runtime drops this task, the store is dropped (and flushes its
        // files) while its folder still exists.
        let _data = data;
        let _ = sluice_http::serve(listener, sluice_http::router(serving), async move {
            let _ = stopped.await;
        })
        .await;
    });
    TestServer {
        url,
        server,
        pipeline,
        stop,
        task,
    }
}

/// Starts a server with the real stages.
pub async fn start(overrides: &[(&str, &str)]) -> TestServer {
    start_with(overrides, |s| s).await
}

/// The `/v1` URL of a port on 127.0.0.1 that nothing listens on: an LLM that is down.
pub fn closed_llm_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    format!("http://127.0.0.1:{port}/v1")
}

/// Starts a server whose LLM URL points at a closed port on 127.0.0.1.
pub async fn start_without_llm() -> TestServer {
    let url = closed_llm_url();
    start(&[("SLUICE_LLM_URL", url.as_str())]).await
}

/// Where `scripts/setup.sh` installs things: `SLUICE_HOME`, default `~/.cache/sluice`.
pub fn sluice_home() -> PathBuf {
    std::env::var_os("SLUICE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/sluice")
        })
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
            stop,
            task,
            ..
        } = self;
        drop((server, pipeline));
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
        let names = self.names();
        assert_eq!(names.first(), Some(&"meta"), "{names:?}");
        let ends = names
            .iter()
            .filter(|n| **n == "done" || **n == "error")
            .count();
        assert_eq!(ends, 1, "{names:?}");
        assert!(
            matches!(names.last(), Some(&"done") | Some(&"error")),
            "{names:?}"
        );
        assert!(
            names[1..names.len() - 1].iter().all(|n| *n == "token"),
            "{names:?}"
        );
        for (i, e) in self.events.iter().filter(|e| e.name == "token").enumerate() {
            assert_eq!(e.data["index"], i as u64, "token indices must count from 0");
        }
    }
}

/// A store that is slow or broken as set: searches take `delay` (then fail with `fail`),
/// corpus-version reads take `version_delay`, writes fail with `fail_writes`. What is not
/// troubled goes to `inner` untouched.
pub struct Troubled {
    /// The real store.
    pub inner: Arc<dyn Store>,
    /// Added before every search.
    pub delay: Duration,
    /// Every search fails (after the delay).
    pub fail: bool,
    /// Added before every corpus-version read.
    pub version_delay: Duration,
    /// Every write (document replacement) fails.
    pub fail_writes: bool,
}

impl Troubled {
    /// `inner`, untroubled until fields are set.
    pub fn around(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            delay: Duration::ZERO,
            fail: false,
            version_delay: Duration::ZERO,
            fail_writes: false,
        }
    }
}

#[async_trait::async_trait]
impl Store for Troubled {
    async fn search(
        &self,
        tenant: &str,
        query: &str,
        vector: &[f32],
        k: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        tokio::time::sleep(self.delay).await;
        if self.fail {
            return Err(StoreError::Backend("injected failure".into()));
        }
        self.inner.search(tenant, query, vector, k).await
    }
    async fn replace_document(
        &self,
        tenant: &str,
        d: &DocumentInfo,
        c: Vec<StoredChunk>,
    ) -> Result<(), StoreError> {
        if self.fail_writes {
            return Err(StoreError::Backend("injected write failure".into()));
        }
        self.inner.replace_document(tenant, d, c).await
    }
    async fn bump_corpus_version(&self, tenant: &str) -> Result<u64, StoreError> {
        self.inner.bump_corpus_version(tenant).await
    }
    async fn corpus_version(&self, tenant: &str) -> Result<u64, StoreError> {
        tokio::time::sleep(self.version_delay).await;
        self.inner.corpus_version(tenant).await
    }
    async fn count(&self, tenant: &str) -> Result<usize, StoreError> {
        self.inner.count(tenant).await
    }
}

/// Component storage that is slow as set: reads of the active pointer take `pointer_delay`,
/// reads of bytes (an upload or its compiled artefact) `fetch_delay`. Writes go to `inner`.
pub struct SlowComponents {
    /// The real storage.
    pub inner: Arc<dyn sluice_core::stages::ComponentStorage>,
    /// Added before every read of a tenant's active pointer.
    pub pointer_delay: Duration,
    /// Added before every read of stored bytes.
    pub fetch_delay: Duration,
}

impl sluice_core::stages::ComponentStorage for SlowComponents {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, sluice_core::stages::ComponentError> {
        std::thread::sleep(self.fetch_delay);
        self.inner.get(key)
    }
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), sluice_core::stages::ComponentError> {
        self.inner.put(key, bytes)
    }
    fn versions(
        &self,
        tenant: &str,
    ) -> Result<Vec<(String, usize)>, sluice_core::stages::ComponentError> {
        self.inner.versions(tenant)
    }
    fn add_version(
        &self,
        tenant: &str,
        version: &str,
        size: usize,
    ) -> Result<(), sluice_core::stages::ComponentError> {
        self.inner.add_version(tenant, version, size)
    }
    fn active(&self, tenant: &str) -> Result<Option<String>, sluice_core::stages::ComponentError> {
        std::thread::sleep(self.pointer_delay);
        self.inner.active(tenant)
    }
    fn set_active(
        &self,
        tenant: &str,
        version: Option<&str>,
    ) -> Result<(), sluice_core::stages::ComponentError> {
        self.inner.set_active(tenant, version)
    }
}

impl TestServer {
    /// Uploads and activates the component `bytes` for `tenant` through the server's own
    /// registry (as `PUT` then `POST …/activate` would); its version.
    pub async fn activate_component(&self, tenant: &str, bytes: Vec<u8>) -> String {
        let registry = self.server.components.clone().expect("components");
        let tenant = tenant.to_string();
        tokio::task::spawn_blocking(move || {
            let version = registry.upload(&tenant, &bytes).expect("upload").version;
            registry.activate(&tenant, &version).expect("activate");
            version
        })
        .await
        .expect("registry task")
    }
}

/// A registry over `storage` for the pipeline's configuration and model, as its rerank stage
/// and component routes (in place of the one the harness built).
pub fn use_registry(parts: &mut Parts, storage: Arc<dyn sluice_core::stages::ComponentStorage>) {
    let registry = Arc::new(
        sluice_sandbox::Registry::from_config(&parts.config, Arc::clone(&parts.embedder), storage)
            .expect("registry"),
    );
    parts.reranker = Some(registry.clone());
    parts.components = Some(registry);
}

/// The folder the harness keeps a server's components in (`<data>/components`), as storage.
pub fn component_folder(pipeline: &Pipeline) -> Arc<dyn sluice_core::stages::ComponentStorage> {
    Arc::new(
        sluice_sandbox::Disk::open(&pipeline.config.data_dir.join("components"))
            .expect("component folder"),
    )
}

/// A cache backend that fails every call (DynamoDB throttling or unreachable).
pub struct BrokenCache;

#[async_trait::async_trait]
impl CacheStore for BrokenCache {
    fn backend(&self) -> &'static str {
        "broken"
    }
    fn in_process(&self) -> bool {
        false
    }
    async fn get(&self, _: &str, _: &str) -> Result<Option<CacheEntry>, CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
    async fn candidates(&self, _: &str, _: &[u32]) -> Result<Vec<CacheEntry>, CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
    async fn put(&self, _: &CacheEntry) -> Result<(), CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
    async fn clear(&self, _: &str) -> Result<usize, CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
}

/// API keys that cannot be checked (the key table unreachable).
pub struct BrokenKeys;

#[async_trait::async_trait]
impl sluice_core::auth::KeyStore for BrokenKeys {
    async fn find(
        &self,
        _: &str,
    ) -> Result<Option<sluice_core::auth::Principal>, sluice_core::auth::AuthError> {
        Err(sluice_core::auth::AuthError::Unavailable(
            "injected: key table unreachable".into(),
        ))
    }
}
