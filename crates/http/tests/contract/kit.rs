//! The server as `sluice-app` assembles it, over test doubles (no model, store, LLM server or
//! socket), and a client that calls its router in-process (`tower::ServiceExt::oneshot`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use sluice_app::{Parts, Role, Settings};
use sluice_contract::auth::Permission;
use sluice_contract::document::Document;
use sluice_contract::stages::Store;
use sluice_contract::usage::UsageStore;
use sluice_core::Ingest;
use sluice_core::cache::{CacheSettings, SemanticCache};
use sluice_core::config::{CacheBackend, UsageBackend};
use sluice_http::Server;
use sluice_local::{LocalUsage, MemoryCache};
use sluice_testkit::{HashEmbedder, MemoryKeys, MemoryStore, ScriptedLlm};
use tower::ServiceExt;

/// What the scripted LLM answers unless a test says otherwise.
pub const ANSWER: &str = "A replacement card arrives within 5 working days [1].";

/// The grounding check off: for tests that watch the cache over documents the scripted
/// [`ANSWER`] is not about (an answer its sources do not support is never cached).
pub const UNCHECKED: &[(&str, &str)] = &[("SLUICE_GROUNDING", "off")];

/// Three small documents for tenant `default` (and any tenant a test ingests them for).
pub fn documents() -> Value {
    json!({"documents": [
        {"id": "lost-card", "title": "Lost card",
         "text": "Report a lost card in the app. A replacement card arrives within 5 working days."},
        {"id": "atm-limits", "title": "ATM limits",
         "text": "The daily ATM withdrawal limit is 500 pounds, or 1000 for premium accounts."},
        {"id": "mortgage", "title": "Mortgage overpayment",
         "text": "You can overpay a fixed-rate mortgage by up to 10 percent a year without a charge."},
    ]})
}

/// The configuration from `overrides` alone (not the environment: these tests must not depend
/// on it), with the tenant limits off unless a test sets them.
pub fn settings(overrides: &[(&str, &str)]) -> Settings {
    let mut vars: HashMap<String, String> = HashMap::from([
        ("SLUICE_TENANT_RATE".into(), "0".into()),
        ("SLUICE_TENANT_MAX_STREAMS".into(), "0".into()),
        (
            "SLUICE_DATA_DIR".into(),
            "/nonexistent/sluice-contract".into(),
        ),
    ]);
    for (k, v) in overrides {
        vars.insert(k.to_string(), v.to_string());
    }
    Settings::from_lookup(|k| vars.get(k).cloned()).expect("test configuration")
}

/// The parts of a server that serves every route over doubles: the hashing embedder, a
/// store in memory, an LLM that answers [`ANSWER`], the answer cache in memory (unless the
/// configuration turns it off), no components and auth off. Tests swap any of them before
/// [`Kit::app`].
pub struct Kit {
    /// What [`Parts::into_server`] assembles.
    pub parts: Parts,
    /// The LLM behind the parts (also in `parts.llm`).
    pub llm: Arc<ScriptedLlm>,
}

impl Kit {
    pub fn new(overrides: &[(&str, &str)]) -> Self {
        Self::with_llm(overrides, ScriptedLlm::answering(ANSWER))
    }

    pub fn with_llm(overrides: &[(&str, &str)], llm: ScriptedLlm) -> Self {
        let Settings {
            config,
            wire,
            convert,
            ..
        } = settings(overrides);
        let llm = Arc::new(llm);
        let cache = match config.cache.backend {
            CacheBackend::Off => None,
            _ => Some(Arc::new(SemanticCache::new(
                Arc::new(MemoryCache::new(config.cache.max_entries)),
                CacheSettings::from_config(&config.cache),
                HashEmbedder::DIM,
            ))),
        };
        // Usage in memory, as sluice-app counts it unless SLUICE_USAGE=off.
        let usage: Option<Arc<dyn UsageStore>> = match config.usage.backend {
            UsageBackend::Off => None,
            _ => Some(Arc::new(LocalUsage::in_memory())),
        };
        let parts = Parts {
            config,
            wire,
            replica_id: None,
            converter: Some(Arc::new(sluice_convert::Files(convert))),
            role: Role::All,
            embedder: Some(Arc::new(HashEmbedder::new())),
            store: Some(Arc::new(MemoryStore::new())),
            llm: Some(llm.clone()),
            cache,
            lexicon: Default::default(),
            reranker: None,
            components: None,
            keys: None,
            usage,
            settings: Some(Arc::new(sluice_testkit::MemorySettings::default())),
            secrets: None,
            records: Some(Arc::new(sluice_testkit::MemoryRecords::default())),
            objects: None,
            batches: None,
        };
        Self { parts, llm }
    }

    /// Auth on, with the keys in `keys`.
    pub fn keys(mut self, keys: Arc<MemoryKeys>) -> Self {
        self.parts.keys = Some(keys);
        self
    }

    /// Tenants' HMAC secrets read from `reader`.
    pub fn secrets(mut self, reader: Arc<dyn sluice_contract::access::SecretReader>) -> Self {
        self.parts.secrets = Some(reader);
        self
    }

    /// The store now in the parts (to wrap it in a double).
    pub fn store(&self) -> Arc<dyn Store> {
        self.parts.store.clone().expect("a store")
    }

    /// [`documents`] ingested for `tenant` into the store now in the parts, before the server
    /// is assembled (so that a double put around it later troubles only the answers).
    pub async fn ingested(self, tenant: &str) -> Self {
        let ingest = Ingest::new(
            self.parts.config.ingest.clone(),
            self.parts.embedder.clone().expect("an embedder"),
            self.store(),
        );
        let documents: Vec<Document> =
            serde_json::from_value(documents()["documents"].clone()).expect("documents");
        ingest
            .ingest(&sluice_testkit::tenant(tenant), documents)
            .await
            .expect("ingest");
        self
    }

    pub fn app(self) -> App {
        self.app_with(|_| {})
    }

    /// The app, with `change` made to the assembled server first (a meter with its own
    /// calendar, say).
    pub fn app_with(self, change: impl FnOnce(&mut Server)) -> App {
        let mut server = self.parts.into_server();
        change(&mut server);
        App {
            server: Arc::new(server),
            llm: self.llm,
        }
    }
}

/// A new key store with a key for `tenant` holding `permissions`; the store and the key.
pub fn key_for(tenant: &str, permissions: &[Permission]) -> (Arc<MemoryKeys>, String) {
    let keys = Arc::new(MemoryKeys::default());
    let key = keys.add(tenant, permissions);
    (keys, key)
}

/// The assembled server, called through its router.
#[derive(Clone)]
pub struct App {
    pub server: Arc<Server>,
    pub llm: Arc<ScriptedLlm>,
}

/// `method path` with `headers` and `body`.
pub fn request(
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Body>,
) -> Request<Body> {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(body.into()).expect("a request")
}

/// Sends `request` through `router` and reads the whole response.
pub async fn call(router: axum::Router, request: Request<Body>) -> Reply {
    let response = router
        .oneshot(request)
        .await
        .expect("the router is infallible");
    Reply::read(response).await
}

/// A response: status, headers, and the body as JSON (`Null` when it is not JSON).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
    pub raw: String,
}

impl Reply {
    /// `response`, read whole.
    pub async fn read(response: axum::response::Response) -> Reply {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("the body")
            .to_bytes();
        let raw = String::from_utf8_lossy(&bytes).into_owned();
        Reply {
            status,
            headers,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            raw,
        }
    }

    /// The error code of an error body.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

impl App {
    /// Sends `method path` with `headers` and `body` through the router.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Body>,
    ) -> Reply {
        self.call(request(method, path, headers, body)).await
    }

    /// Sends `request` through the router and returns the response as soon as it begins
    /// (a stream's body unread: the stream stays open while it is held).
    pub async fn open(&self, request: Request<Body>) -> axum::response::Response {
        sluice_http::router(Arc::clone(&self.server))
            .oneshot(request)
            .await
            .expect("the router is infallible")
    }

    /// Sends `request` through the router.
    pub async fn call(&self, request: Request<Body>) -> Reply {
        call(sluice_http::router(Arc::clone(&self.server)), request).await
    }

    /// POSTs `body` (JSON) as the default tenant.
    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send(Method::POST, path, &[], body.to_string()).await
    }

    /// POSTs `body` as `tenant`.
    pub async fn post_as(&self, tenant: &str, path: &str, body: &Value) -> Reply {
        self.send(
            Method::POST,
            path,
            &[("x-sluice-tenant", tenant)],
            body.to_string(),
        )
        .await
    }

    /// Ingests [`documents`] for `tenant`.
    pub async fn ingest(&self, tenant: &str) {
        let reply = self.post_as(tenant, "/v1/documents", &documents()).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
    }

    /// Asks through `POST /v1/answer` as the default tenant.
    pub async fn answer(&self, body: &Value) -> Stream {
        self.answer_with(&[], body).await
    }

    /// Asks as `tenant`.
    pub async fn answer_as(&self, tenant: &str, body: &Value) -> Stream {
        self.answer_with(&[("x-sluice-tenant", tenant)], body).await
    }

    /// Asks with any headers; the stream must be a 200 `text/event-stream` without a length.
    pub async fn answer_with(&self, headers: &[(&str, &str)], body: &Value) -> Stream {
        let reply = self
            .send(Method::POST, "/v1/answer", headers, body.to_string())
            .await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        assert_eq!(reply.headers["content-type"], "text/event-stream");
        assert!(reply.headers.get("content-length").is_none());
        Stream::parse(&reply.raw)
    }
}

/// A whole answer stream, parsed from its SSE body.
#[derive(Debug)]
pub struct Stream {
    /// `(event name, data)` in order.
    pub events: Vec<(String, Value)>,
    /// Comment lines (keep-alives).
    pub comments: usize,
}

impl Stream {
    pub fn parse(body: &str) -> Self {
        let mut events = Vec::new();
        let mut comments = 0;
        for frame in body.split("\n\n").filter(|f| !f.trim().is_empty()) {
            let (mut name, mut data) = (None, None);
            for line in frame.lines() {
                if line.starts_with(':') {
                    comments += 1;
                } else if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    assert!(data.is_none(), "one data line per event: {frame}");
                    data = Some(serde_json::from_str(d).expect("every data line is JSON"));
                } else {
                    panic!("an unexpected line {line:?} in {frame:?}");
                }
            }
            if let (Some(name), Some(data)) = (name, data) {
                events.push((name, data));
            }
        }
        Self { events, comments }
    }

    /// A streamed chat completion read back as the answer events it carries: `meta` from the
    /// final chunk's `sluice` extension (sources, cache, degraded), a token per content delta,
    /// `done` with the extension's timings — so that the answer stream's checks apply.
    pub fn from_chat(body: &str) -> Self {
        let chunks: Vec<Value> = body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).expect("every chunk is JSON"))
            .collect();
        let extension = chunks
            .iter()
            .find_map(|c| c.get("sluice"))
            .expect("a final chunk with the sluice extension")
            .clone();
        let mut events = vec![(
            "meta".to_string(),
            json!({"documents": extension["sources"], "cache": extension["cache"],
                   "degraded": extension["degraded"], "extract": extension["extract"]}),
        )];
        let deltas = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .filter(|t| !t.is_empty());
        for (index, text) in deltas.enumerate() {
            events.push(("token".into(), json!({"text": text, "index": index})));
        }
        events.push((
            "done".into(),
            json!({"timings": extension["timings"], "grounding": extension["grounding"]}),
        ));
        Self {
            events,
            comments: 0,
        }
    }

    pub fn names(&self) -> Vec<&str> {
        self.events.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The data of the first event named `name`.
    pub fn first(&self, name: &str) -> &Value {
        self.events
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d)
            .unwrap_or_else(|| panic!("no {name} event in {:?}", self.names()))
    }

    pub fn meta(&self) -> &Value {
        self.first("meta")
    }

    /// Why the answer is degraded, as strings: `meta.degraded`, then what `done.degraded`
    /// added after it (`ungrounded`).
    pub fn degraded(&self) -> Vec<String> {
        let late = (self.events.iter())
            .find(|(n, _)| n == "done")
            .and_then(|(_, d)| d["degraded"].as_array().cloned())
            .unwrap_or_default();
        self.meta()["degraded"]
            .as_array()
            .expect("degraded is a list")
            .iter()
            .chain(&late)
            .map(|r| r.as_str().expect("a reason").to_string())
            .collect()
    }

    /// The ids of `meta.documents`, in order.
    pub fn sources(&self) -> Vec<String> {
        self.meta()["documents"]
            .as_array()
            .expect("documents is a list")
            .iter()
            .map(|d| d["id"].as_str().expect("an id").to_string())
            .collect()
    }

    pub fn text(&self) -> String {
        self.events
            .iter()
            .filter(|(n, _)| n == "token")
            .filter_map(|(_, d)| d["text"].as_str())
            .collect()
    }

    /// The framing every stream has: `meta` first, tokens numbered from 0, then exactly one
    /// `done` or `error`, last.
    pub fn assert_well_formed(&self) {
        let events: Vec<(&str, &Value)> =
            self.events.iter().map(|(n, d)| (n.as_str(), d)).collect();
        sluice_testkit::assert_well_formed(&events);
    }
}

/// Three documents about replacements, sent with `headers`: `cards` and `hr-cards` (HR's
/// alone, by its access list) under `{"topic": "cards"}`, `loans` under `{"topic": "loans"}`.
pub async fn post_replacements(app: &App, headers: &[(&str, &str)]) {
    let docs = json!({"documents": [
        {"id": "cards", "text": "A replacement card takes 5 days.", "metadata": {"topic": "cards"}},
        {"id": "hr-cards", "text": "Staff replacement cards take 2 days.",
         "metadata": {"topic": "cards", "_access": ["group:hr"]}},
        {"id": "loans", "text": "A replacement loan offer takes 5 days.", "metadata": {"topic": "loans"}},
    ]});
    let sent = (app.send(Method::POST, "/v1/documents", headers, docs.to_string())).await;
    assert_eq!(sent.status, 200, "{}", sent.raw);
}
