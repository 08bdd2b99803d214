//! Every error code a client can see, each provoked through the router: a refused request is
//! the code's status with `{"error": {"code", "message"}}`; a failure once the stream has
//! begun is an `error` event with the code and its retryability. Every code has a case here:
//! a new one does not compile until it has.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::auth::Permission;
use sluice_contract::codes::Code;
use sluice_contract::components::{ComponentCall, ComponentError, ComponentVersion, Components};
use sluice_contract::error::LlmError;
use sluice_contract::filter::Filter;
use sluice_http::StreamDeadline;
use sluice_testkit::{BrokenCache, BrokenKeys, BrokenUsage, Reply, ScriptedLlm, Troubled};

use crate::kit::{self, App, Kit, Stream, documents, key_for};

/// Component routes that fail as `fail` says (a panic for `None`: work that dies).
/// A registry whose every call fails as the first field says (`None`: panics), but for the
/// listing when it holds the versions of the second (a version then resolves, and the call
/// after it fails).
struct FailingComponents(Option<fn() -> ComponentError>, &'static [&'static str]);

impl FailingComponents {
    fn fail(&self) -> ComponentError {
        match self.0 {
            Some(make) => make(),
            None => panic!("injected: the registry's work died"),
        }
    }
}

impl Components for FailingComponents {
    fn upload(
        &self,
        _: &Tenant,
        _: &[u8],
        _: Option<&str>,
        _: &sluice_contract::cancel::Cancel,
    ) -> Result<ComponentVersion, ComponentError> {
        Err(self.fail())
    }
    fn activate(&self, _: &Tenant, _: &str) -> Result<ComponentVersion, ComponentError> {
        Err(self.fail())
    }
    fn list(&self, _: &Tenant) -> Result<Vec<ComponentVersion>, ComponentError> {
        if self.1.is_empty() {
            return Err(self.fail());
        }
        let listed = |v: &&str| ComponentVersion {
            version: v.to_string(),
            size: 1,
            label: None,
            uploaded_ms: None,
            active: false,
            cost: None,
            failures: Vec::new(),
        };
        Ok(self.1.iter().map(listed).collect())
    }
    fn deactivate(&self, _: &Tenant) -> Result<(), ComponentError> {
        Err(self.fail())
    }
    fn logs(&self, _: &Tenant, _: &str) -> Result<Vec<ComponentCall>, ComponentError> {
        Err(self.fail())
    }
    fn delete(&self, _: &Tenant, _: &str) -> Result<(), ComponentError> {
        Err(self.fail())
    }
}

fn components_app(fail: Option<fn() -> ComponentError>) -> App {
    let mut kit = Kit::new(&[]);
    kit.parts.components = Some(Arc::new(FailingComponents(fail, &[])));
    kit.app()
}

fn llm_app(reply: Reply) -> App {
    Kit::with_llm(&[], ScriptedLlm::new(reply)).app()
}

/// How a code reaches the client.
enum Seen {
    /// An error response.
    Refused(kit::Reply),
    /// An `error` event ending a stream.
    Ended(Stream),
    /// A JSON-RPC error of `/mcp`, Sluice's code and status in its `data`.
    Rpc(kit::Reply),
}

/// A JSON-RPC request to `/mcp`, with `headers`.
async fn mcp(headers: &[(&str, &str)], method: &str, params: Value) -> Seen {
    let mut all = vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("host", "127.0.0.1"),
    ];
    all.retain(|(name, _)| !headers.iter().any(|(h, _)| h == name));
    all.extend_from_slice(headers);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let app = Kit::new(&[]).app();
    Seen::Rpc(app.send(Method::POST, "/mcp", &all, body.to_string()).await)
}

async fn answer_body(app: &App, body: &str) -> Seen {
    Seen::Refused(
        app.send(Method::POST, "/v1/answer", &[], body.to_string())
            .await,
    )
}

/// What a server keeps its tenants' records in, for the codes of a process that has none or
/// one that fails.
enum Records {
    None,
    Failing,
}

/// `GET path` of a server whose records store is `records`.
async fn listed_without(records: Records, path: &str) -> Seen {
    let mut kit = Kit::new(&[]);
    kit.parts.records = match records {
        Records::None => None,
        Records::Failing => {
            let broken = sluice_testkit::MemoryRecords::default();
            (broken.failing).store(true, std::sync::atomic::Ordering::SeqCst);
            Some(Arc::new(broken))
        }
    };
    Seen::Refused(kit.app().send(Method::GET, path, &[], "").await)
}

/// The request (and server) that gets `code`.
async fn provoke(code: Code) -> Seen {
    let ask = json!({"query": "How long does a replacement card take?"});
    let plain = || Kit::new(&[]).app();
    match code {
        Code::InvalidJson => answer_body(&plain(), "{not json").await,
        Code::MissingQuery => answer_body(&plain(), "{}").await,
        Code::EmptyQuery => answer_body(&plain(), r#"{"query": "  "}"#).await,
        Code::QueryTooLong => {
            let body = json!({"query": "x".repeat(4097)}).to_string();
            answer_body(&plain(), &body).await
        }
        Code::InvalidK => answer_body(&plain(), r#"{"query": "hi", "k": 0}"#).await,
        Code::InvalidDeadline => {
            answer_body(
                &plain(),
                r#"{"query": "hi", "retrieval_deadline_ms": 600000}"#,
            )
            .await
        }
        Code::InvalidSessionId => {
            answer_body(&plain(), r#"{"query": "hi", "session_id": ""}"#).await
        }
        Code::InvalidCache => answer_body(&plain(), r#"{"query": "hi", "cache": "often"}"#).await,
        Code::InvalidDocument => Seen::Refused(
            plain()
                .post("/v1/documents", &json!({"documents": []}))
                .await,
        ),
        Code::UnsupportedFormat => Seen::Refused(
            plain()
                .send(Method::POST, "/v1/documents?filename=a.xlsx", &[], "PK")
                .await,
        ),
        Code::NoTextLayer | Code::EncryptedDocument | Code::UnreadableDocument => {
            use sluice_testkit::files::{PdfOptions, pdf};
            let line: &[(f32, &str)] = &[(10.0, "text")];
            let file = match code {
                Code::NoTextLayer => pdf(&[&[]], PdfOptions::default()),
                Code::EncryptedDocument => pdf(
                    &[line],
                    PdfOptions {
                        password: Some("pw"),
                        ..Default::default()
                    },
                ),
                _ => pdf(
                    &[line],
                    PdfOptions {
                        no_media_box: true,
                        ..Default::default()
                    },
                ),
            };
            Seen::Refused(
                plain()
                    .send(Method::POST, "/v1/documents?filename=a.pdf", &[], file)
                    .await,
            )
        }
        Code::InvalidPage => Seen::Refused(
            plain()
                .send(Method::GET, "/v1/documents?limit=0", &[], "")
                .await,
        ),
        Code::ConfirmationRequired => {
            let body = json!({"filter": {"year": 2024}}).to_string();
            Seen::Refused(
                plain()
                    .send(Method::DELETE, "/v1/documents", &[], body)
                    .await,
            )
        }
        Code::UnknownDocument => Seen::Refused(
            plain()
                .send(Method::GET, "/v1/documents/never-ingested", &[], "")
                .await,
        ),
        Code::UnknownTool => mcp(&[], "tools/call", json!({"name": "no_such_tool"})).await,
        Code::NotAcceptable => mcp(&[("accept", "text/plain")], "tools/list", json!({})).await,
        Code::UnknownSession => {
            let search = json!({"name": "search", "arguments": {"query": "q"}});
            mcp(&[("mcp-session-id", "s-1")], "tools/call", search).await
        }
        Code::StoreUnavailable => {
            let mut kit = Kit::new(&[]);
            let mut store = Troubled::around(kit.store());
            store.fail = true;
            kit.parts.store = Some(Arc::new(store));
            Seen::Refused(kit.app().send(Method::GET, "/v1/documents", &[], "").await)
        }
        Code::InvalidFilter => {
            let body = r#"{"query": "hi", "filter": {"year": {"$near": 2025}}}"#;
            answer_body(&plain(), body).await
        }
        Code::InvalidRerankContext => {
            let body = r#"{"query": "hi", "rerank_context": {"plan": ["pro"]}}"#;
            answer_body(&plain(), body).await
        }
        Code::MissingUserToken | Code::InvalidUserToken | Code::IdentityUnavailable => {
            let app = plain();
            let identity = match code {
                // Keys that cannot be fetched: nothing listens on the discard port.
                Code::IdentityUnavailable => json!({"issuer": "i", "audience": "a",
                    "jwks_url": "http://127.0.0.1:9/jwks.json"}),
                _ => sluice_testkit::users::identity(true),
            };
            let settings = json!({"identity": identity}).to_string();
            let put = app.send(Method::PUT, "/v1/settings", &[], settings).await;
            assert_eq!(put.status, 200, "{}", put.raw);
            let token = match code {
                Code::MissingUserToken => None,
                Code::InvalidUserToken => Some("not-a-token".to_string()),
                _ => Some(sluice_testkit::users::token("alice", &[])),
            };
            let headers: Vec<(&str, &str)> = (token.iter())
                .map(|t| ("x-sluice-user", t.as_str()))
                .collect();
            Seen::Refused(
                app.send(Method::POST, "/v1/answer", &headers, ask.to_string())
                    .await,
            )
        }
        Code::InvalidTenant => Seen::Refused(
            plain()
                .post_as("no spaces allowed", "/v1/answer", &ask)
                .await,
        ),
        Code::ComponentTooComplex => {
            let app = components_app(Some(|| {
                ComponentError::TooComplex(
                    "function 0 declares 20000 locals; the limit is 10000".into(),
                )
            }));
            Seen::Refused(
                app.send(Method::PUT, "/v1/components/rerank", &[], "(component)")
                    .await,
            )
        }
        Code::BodyTimeout => {
            // A body that stops coming after its first bytes.
            let app = Kit::new(&[("SLUICE_BODY_READ_TIMEOUT_MS", "100")]).app();
            let first: Result<&'static [u8], std::io::Error> = Ok(br#"{"query": "#);
            let stalls = futures::StreamExt::chain(
                futures::stream::iter([first]),
                futures::stream::pending(),
            );
            let body = Body::from_stream(stalls);
            Seen::Refused(
                app.call(kit::request(Method::POST, "/v1/answer", &[], body))
                    .await,
            )
        }
        Code::HeadersTooLarge => {
            let mut head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n".to_vec();
            for i in 0..200 {
                head.extend(format!("x-filler-{i}: yes\r\n").as_bytes());
            }
            head.extend(b"\r\n");
            Seen::Refused(crate::serve::over_the_wire(&head).await)
        }
        Code::UriTooLong => {
            let line = format!(
                "GET /{} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                "a".repeat(70_000)
            );
            Seen::Refused(crate::serve::over_the_wire(line.as_bytes()).await)
        }
        Code::InvalidComponent => {
            let app = components_app(Some(|| ComponentError::Invalid("not a component".into())));
            Seen::Refused(
                app.send(Method::PUT, "/v1/components/rerank", &[], "not wasm")
                    .await,
            )
        }
        Code::InvalidLabel => Seen::Refused(
            plain()
                .send(Method::PUT, "/v1/components/rerank?label=", &[], "wasm")
                .await,
        ),
        Code::VersionActive => {
            let app = components_app(Some(|| ComponentError::Active("v1 is active".into())));
            Seen::Refused(
                app.send(
                    Method::DELETE,
                    &format!("/v1/components/rerank/{}", "a".repeat(64)),
                    &[],
                    "",
                )
                .await,
            )
        }
        Code::InvalidN => {
            let body = json!({"messages": [{"role": "user", "content": "hi"}], "n": 2});
            Seen::Refused(plain().post("/v1/chat/completions", &body).await)
        }
        Code::InvalidMaxTokens => {
            let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0});
            Seen::Refused(plain().post("/v1/chat/completions", &body).await)
        }
        Code::UnreadableBody => {
            // A body that breaks off: the client went away mid-request.
            let chunks: Vec<Result<&'static [u8], std::io::Error>> = vec![
                Ok(br#"{"query": "#),
                Err(std::io::Error::other("connection reset")),
            ];
            let body = Body::from_stream(futures::stream::iter(chunks));
            let request = kit::request(Method::POST, "/v1/answer", &[], body);
            Seen::Refused(plain().call(request).await)
        }
        Code::MissingApiKey => {
            let (keys, _) = key_for("acme", &Permission::ALL);
            Seen::Refused(
                Kit::new(&[])
                    .keys(keys)
                    .app()
                    .post("/v1/answer", &ask)
                    .await,
            )
        }
        Code::InvalidApiKey => {
            let (keys, key) = key_for("acme", &Permission::ALL);
            let app = Kit::new(&[]).keys(keys).app();
            let wrong = format!("Bearer {key}x");
            let headers = [("authorization", wrong.as_str())];
            Seen::Refused(
                app.send(Method::POST, "/v1/answer", &headers, ask.to_string())
                    .await,
            )
        }
        Code::ForbiddenTenant => {
            let (keys, key) = key_for("acme", &Permission::ALL);
            let app = Kit::new(&[]).keys(keys).app();
            let bearer = format!("Bearer {key}");
            let headers = [
                ("authorization", bearer.as_str()),
                ("x-sluice-tenant", "globex"),
            ];
            Seen::Refused(
                app.send(Method::POST, "/v1/answer", &headers, ask.to_string())
                    .await,
            )
        }
        Code::PermissionDenied => {
            let (keys, key) = key_for("acme", &[Permission::Answer]);
            let app = Kit::new(&[]).keys(keys).app();
            let bearer = format!("Bearer {key}");
            let headers = [("authorization", bearer.as_str())];
            let body = documents().to_string();
            Seen::Refused(
                app.send(Method::POST, "/v1/documents", &headers, body)
                    .await,
            )
        }
        Code::InvalidRequest => {
            // A path segment that is not UTF-8 once decoded.
            Seen::Refused(
                plain()
                    .send(Method::GET, "/v1/documents/%FF", &[], "")
                    .await,
            )
        }
        Code::OutsideKeyFilter => {
            let keys = Arc::new(sluice_testkit::MemoryKeys::default());
            let team_a = Filter::parse(&json!({"team": "a"})).unwrap();
            let key = keys.add_filtered("acme", &[Permission::Documents], Some(team_a));
            let app = Kit::new(&[]).keys(keys).app();
            let bearer = format!("Bearer {key}");
            let headers = [("authorization", bearer.as_str())];
            let body = json!({"documents": [{"id": "b1", "text": "t", "metadata": {"team": "b"}}]});
            Seen::Refused(
                app.send(Method::POST, "/v1/documents", &headers, body.to_string())
                    .await,
            )
        }
        Code::CrossOrigin => {
            let headers = [
                ("origin", "https://evil.example"),
                ("host", "127.0.0.1:8080"),
            ];
            Seen::Refused(
                plain()
                    .send(Method::POST, "/v1/answer", &headers, ask.to_string())
                    .await,
            )
        }
        Code::ForbiddenHost => {
            let app = plain();
            let router = sluice_http::only_hosts(
                sluice_http::router(Arc::clone(&app.server)),
                vec!["localhost".into(), "127.0.0.1".into()],
            );
            let headers = [("host", "rebound.example:8080")];
            let request = kit::request(Method::POST, "/v1/answer", &headers, ask.to_string());
            Seen::Refused(kit::call(router, request).await)
        }
        Code::NotFound => Seen::Refused(plain().send(Method::GET, "/v1/nothing", &[], "").await),
        Code::AmbiguousVersion => {
            let app = components_app(Some(|| ComponentError::Ambiguous("ab12 begins 2".into())));
            let body = json!({"version": "ab12"});
            Seen::Refused(app.post("/v1/components/rerank/activate", &body).await)
        }
        Code::UnknownVersion => {
            let app = components_app(Some(|| ComponentError::NotFound("no version v9".into())));
            let body = json!({"version": "v9"});
            Seen::Refused(app.post("/v1/components/rerank/activate", &body).await)
        }
        Code::InvalidRange => Seen::Refused(
            plain()
                .send(Method::GET, "/v1/usage?from=someday", &[], "")
                .await,
        ),
        Code::UsageDisabled => Seen::Refused(
            Kit::new(&[("SLUICE_USAGE", "off")])
                .app()
                .send(Method::GET, "/v1/usage", &[], "")
                .await,
        ),
        Code::BudgetExceeded => {
            let kit = Kit::new(&[("SLUICE_TENANT_TOKEN_BUDGETS", "default=1")]);
            let app = kit.ingested("default").await.app();
            assert_eq!(app.answer(&ask).await.names().last(), Some(&"done"));
            Seen::Refused(app.post("/v1/answer", &ask).await)
        }
        Code::UsageUnavailable => {
            let mut kit = Kit::new(&[]);
            kit.parts.usage = Some(Arc::new(BrokenUsage { hang: false }));
            Seen::Refused(kit.app().send(Method::GET, "/v1/usage", &[], "").await)
        }
        Code::InvalidSettings => Seen::Refused(
            plain()
                .send(Method::PUT, "/v1/settings", &[], r#"{"k": 0}"#.to_string())
                .await,
        ),
        Code::InvalidEvalSet => Seen::Refused(
            plain()
                .send(Method::PUT, "/v1/evals/sets/s", &[], r#"{"questions": []}"#)
                .await,
        ),
        Code::UnknownEvalSet => Seen::Refused(
            plain()
                .send(Method::POST, "/v1/evals/runs", &[], r#"{"set": "none"}"#)
                .await,
        ),
        Code::EvalsDisabled => listed_without(Records::None, "/v1/evals/sets").await,
        Code::EvalsUnavailable => listed_without(Records::Failing, "/v1/evals/sets").await,
        Code::InvalidSource => Seen::Refused(
            plain()
                .send(Method::PUT, "/v1/sources/s", &[], r#"{"website": {}}"#)
                .await,
        ),
        Code::UnknownSource => {
            Seen::Refused(plain().send(Method::GET, "/v1/sources/none", &[], "").await)
        }
        Code::SourcesDisabled => listed_without(Records::None, "/v1/sources").await,
        Code::SourcesUnavailable => listed_without(Records::Failing, "/v1/sources").await,
        Code::SyncRunning => {
            // A sync held at its first request (the site asks for a minute between them).
            let site = sluice_testkit::site::Site::serve().await;
            let slow = sluice_testkit::site::Page::text("User-agent: *\nCrawl-delay: 60\n");
            site.put("/robots.txt", slow);
            let app = Kit::new(&[("SLUICE_FETCH_ALLOW", "127.0.0.1/32")]).app();
            let source = json!({"website": {"start": [site.url("/")]}}).to_string();
            let put = app.send(Method::PUT, "/v1/sources/s", &[], source).await;
            assert_eq!(put.status, 200, "{}", put.raw);
            let open = || kit::request(Method::POST, "/v1/sources/s/sync", &[], "");
            let _held = app.open(open()).await;
            Seen::Refused(kit::Reply::read(app.open(open()).await).await)
        }
        Code::EvalRunActive => {
            let app = llm_app(Reply::StallAfter(vec![]));
            let set = r#"{"questions": [{"question": "How long does a card take?"}]}"#;
            let put = app.send(Method::PUT, "/v1/evals/sets/s", &[], set).await;
            assert_eq!(put.status, 200, "{}", put.raw);
            let run = r#"{"set": "s", "mode": "answer"}"#;
            let open = || kit::request(Method::POST, "/v1/evals/runs", &[], run);
            let _held = app.open(open()).await;
            Seen::Refused(kit::Reply::read(app.open(open()).await).await)
        }
        Code::QualityGateUnavailable => {
            use sluice_contract::tenant_settings::{SettingsStore, TenantSettings};
            // A gate in the tenant's settings; the activation taken by a process that serves
            // no answers (the registry function).
            let store = Arc::new(sluice_testkit::MemorySettings::default());
            let gate = json!({"quality_gate": {"set": "s"}});
            let gate = TenantSettings::parse(&gate, 512).unwrap();
            store
                .put(&sluice_testkit::tenant("default"), gate)
                .await
                .unwrap();
            let mut kit = Kit::new(&[]);
            kit.parts.settings = Some(store);
            let never = || ComponentError::Invalid("not reached".into());
            kit.parts.components = Some(Arc::new(FailingComponents(Some(never), &["v1"])));
            let app = kit.app_with(|s| s.answers = None);
            let body = json!({"version": "v1"});
            Seen::Refused(app.post("/v1/components/rerank/activate", &body).await)
        }
        Code::QualityRegression => {
            let mut kit = Kit::new(&[]);
            let reranker = sluice_testkit::ScriptedReranker::new(sluice_testkit::Verdict::Reverse)
                .none_active()
                .stored("reverse", sluice_testkit::Verdict::Reverse);
            kit.parts.reranker = Some(Arc::new(reranker));
            // A registry that would fail: the gate refuses before it is asked.
            let never = || ComponentError::Invalid("not reached".into());
            kit.parts.components = Some(Arc::new(FailingComponents(Some(never), &["reverse"])));
            let app = kit.app();
            app.ingest("default").await;
            let set = r#"{"questions": [{"question": "How long does a replacement card take?", "first": "lost-card", "documents": ["lost-card"]}, {"question": "What is the daily ATM withdrawal limit?", "documents": ["atm-limits"]}]}"#;
            assert_eq!(
                app.send(Method::PUT, "/v1/evals/sets/s", &[], set)
                    .await
                    .status,
                200
            );
            let gate = r#"{"quality_gate": {"set": "s"}}"#;
            assert_eq!(
                app.send(Method::PUT, "/v1/settings", &[], gate)
                    .await
                    .status,
                200
            );
            Seen::Refused(
                app.send(
                    Method::POST,
                    "/v1/components/rerank/activate",
                    &[],
                    r#"{"version": "reverse"}"#,
                )
                .await,
            )
        }
        Code::InvalidFeedback => Seen::Refused(
            plain()
                .send(
                    Method::POST,
                    "/v1/feedback",
                    &[],
                    r#"{"request_id": "r", "rating": "meh"}"#,
                )
                .await,
        ),
        Code::UnknownRequest => Seen::Refused(
            plain()
                .send(
                    Method::POST,
                    "/v1/feedback",
                    &[],
                    r#"{"request_id": "r", "rating": "up"}"#,
                )
                .await,
        ),
        Code::SettingsDisabled => {
            let mut kit = Kit::new(&[]);
            kit.parts.settings = None;
            Seen::Refused(kit.app().send(Method::GET, "/v1/settings", &[], "").await)
        }
        Code::SettingsUnavailable => {
            let mut kit = Kit::new(&[]);
            let broken = sluice_testkit::MemorySettings::default();
            broken
                .failing
                .store(true, std::sync::atomic::Ordering::SeqCst);
            kit.parts.settings = Some(Arc::new(broken));
            Seen::Refused(kit.app().send(Method::GET, "/v1/settings", &[], "").await)
        }
        Code::CacheDisabled => {
            let app = Kit::new(&[("SLUICE_CACHE", "off")]).app();
            Seen::Refused(app.send(Method::DELETE, "/v1/cache", &[], "").await)
        }
        Code::ComponentsDisabled => Seen::Refused(
            plain()
                .send(Method::GET, "/v1/components/rerank", &[], "")
                .await,
        ),
        Code::MethodNotAllowed => {
            Seen::Refused(plain().send(Method::GET, "/v1/answer", &[], "").await)
        }
        Code::BodyTooLarge => {
            let app = Kit::new(&[("SLUICE_MAX_BODY_BYTES", "1024")]).app();
            answer_body(&app, &json!({"query": "x".repeat(2000)}).to_string()).await
        }
        Code::IngestTooLarge => {
            let app = Kit::new(&[("SLUICE_MAX_DOCUMENTS", "2")]).app();
            Seen::Refused(app.post("/v1/documents", &documents()).await)
        }
        Code::ConversationTooLong => {
            // An earlier turn of 600 KiB (the body cap is 1 MiB): refused before any
            // tokenising.
            let app = Kit::new(&[]).app();
            let body = json!({"model": "m", "messages": [
                {"role": "user", "content": "x ".repeat(300 << 10)},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "and now?"},
            ]});
            Seen::Refused(app.post("/v1/chat/completions", &body).await)
        }
        Code::RateLimited => {
            let app = Kit::new(&[("SLUICE_TENANT_RATE", "1"), ("SLUICE_TENANT_BURST", "1")]).app();
            let first = app.send(Method::GET, "/v1/models", &[], "").await;
            assert_eq!(first.status, 200);
            Seen::Refused(app.send(Method::GET, "/v1/models", &[], "").await)
        }
        Code::TooManyStreams => {
            let llm = ScriptedLlm::new(Reply::StallAfter(vec!["one ".into()]));
            let app = Kit::with_llm(&[("SLUICE_TENANT_MAX_STREAMS", "1")], llm).app();
            // The first answer's stream stays open (its body unread) while the second asks.
            let open = app
                .open(kit::request(
                    Method::POST,
                    "/v1/answer",
                    &[],
                    ask.to_string(),
                ))
                .await;
            assert_eq!(open.status(), 200);
            let refused = app.post("/v1/answer", &ask).await;
            drop(open);
            Seen::Refused(refused)
        }
        Code::IngestFailed => {
            let mut kit = Kit::new(&[]);
            let mut store = Troubled::around(kit.store());
            store.fail_writes = true;
            kit.parts.store = Some(Arc::new(store));
            Seen::Refused(kit.app().post("/v1/documents", &documents()).await)
        }
        Code::StorageFailed => {
            let app = components_app(Some(|| ComponentError::Storage("injected: S3 down".into())));
            Seen::Refused(
                app.send(Method::GET, "/v1/components/rerank", &[], "")
                    .await,
            )
        }
        Code::Internal => {
            let app = components_app(None);
            Seen::Refused(
                app.send(Method::GET, "/v1/components/rerank", &[], "")
                    .await,
            )
        }
        Code::CacheUnavailable => {
            let mut kit = Kit::new(&[]);
            kit.parts.cache = Some(Arc::new(sluice_core::cache::SemanticCache::new(
                Arc::new(BrokenCache),
                sluice_core::cache::CacheSettings::from_config(&kit.parts.config.cache),
                sluice_testkit::HashEmbedder::DIM,
            )));
            Seen::Refused(kit.app().send(Method::DELETE, "/v1/cache", &[], "").await)
        }
        Code::AuthUnavailable => {
            let mut kit = Kit::new(&[]);
            kit.parts.keys = Some(Arc::new(BrokenKeys));
            let headers = [("authorization", "Bearer sk-anything")];
            Seen::Refused(
                kit.app()
                    .send(Method::POST, "/v1/answer", &headers, ask.to_string())
                    .await,
            )
        }
        Code::Ungrounded => {
            // Strict grounding, an answer whose number no source states, asked whole.
            let wrong = "A replacement card arrives within 10 working days [1].";
            let app = Kit::with_llm(
                &[("SLUICE_GROUNDING", "strict")],
                ScriptedLlm::answering(wrong),
            )
            .ingested("default")
            .await
            .app();
            let body = json!({"messages": [{"role": "user", "content": "How long does a replacement card take?"}]});
            Seen::Refused(app.post("/v1/chat/completions", &body).await)
        }
        Code::LlmUnavailable => {
            let refused = Reply::Refuse(LlmError::Unavailable("connection refused".into()));
            Seen::Ended(llm_app(refused).answer(&ask).await)
        }
        Code::LlmRejected => {
            let refused = Reply::Refuse(LlmError::Status {
                status: 400,
                body: "context length exceeded".into(),
            });
            Seen::Ended(llm_app(refused).answer(&ask).await)
        }
        Code::LlmTimeout => {
            let late = Reply::Refuse(LlmError::Timeout("first token"));
            Seen::Ended(llm_app(late).answer(&ask).await)
        }
        Code::LlmStreamFailed => {
            let broken = Reply::BreakAfter(
                vec!["A ".into(), "card ".into()],
                LlmError::Stream("connection reset".into()),
            );
            Seen::Ended(llm_app(broken).answer(&ask).await)
        }
        Code::DeadlineExceeded => {
            let app = llm_app(Reply::StallAfter(vec!["A ".into(), "card ".into()]));
            // What the Lambda entry point sets: the invocation's end, less a margin.
            let at = tokio::time::Instant::now() + Duration::from_millis(500);
            let mut request = kit::request(Method::POST, "/v1/answer", &[], ask.to_string());
            request.extensions_mut().insert(StreamDeadline(at));
            let reply = app.call(request).await;
            Seen::Ended(Stream::parse(&reply.raw))
        }
        Code::ShuttingDown => {
            let app = llm_app(Reply::StallAfter(vec!["A ".into()]));
            let pipeline = app.server.answers.clone().expect("answers");
            // Drained once the answer is in flight (the LLM was called), not after a guess.
            let llm = Arc::clone(&app.llm);
            let drain = tokio::spawn(async move {
                while llm.calls().is_empty() {
                    tokio::task::yield_now().await;
                }
                pipeline.drain();
            });
            let answer = app.answer(&ask).await;
            drain.await.expect("drain");
            Seen::Ended(answer)
        }
    }
}

#[tokio::test]
async fn every_code_reaches_the_client_with_its_status_and_retryability() {
    for &code in Code::ALL {
        match provoke(code).await {
            Seen::Refused(reply) => {
                assert_eq!(
                    (reply.status, reply.code()),
                    (code.status(), code.as_str()),
                    "{code}: {}",
                    reply.raw
                );
                let message = reply.body["error"]["message"].as_str().unwrap_or("");
                assert!(!message.is_empty(), "{code}: a message says what is wrong");
                let retry_after = reply.headers.get("retry-after").is_some();
                if code.status() == 429 {
                    assert!(retry_after, "{code}: a 429 says when to come back");
                } else if code.status() < 500 {
                    assert!(!retry_after, "{code}: no Retry-After on a client error");
                }
            }
            Seen::Rpc(reply) => {
                let error = &reply.body["error"];
                assert_eq!(
                    error["data"],
                    json!({"code": code.as_str(), "status": code.status(), "retryable": code.retryable()}),
                    "{code}: {}",
                    reply.raw
                );
                assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
            }
            Seen::Ended(stream) => {
                stream.assert_well_formed();
                let error = stream.first("error");
                assert_eq!(error["code"], code.as_str(), "{code}: {:?}", stream.events);
                assert_eq!(error["retryable"], code.retryable(), "{code}");
                assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
            }
        }
    }
}

#[tokio::test]
async fn answer_requests_are_validated_field_by_field() {
    let app = Kit::new(&[]).app();
    let cases: Vec<(Value, &str)> = vec![
        (json!([1, 2]), "invalid_json"),
        (json!({"query": 5}), "invalid_json"),
        (json!({"query": "hi", "colour": "red"}), "invalid_json"),
        (json!({"query": "hi", "k": 51}), "invalid_k"),
        (json!({"query": "hi", "k": -3}), "invalid_k"),
        (json!({"query": "hi", "k": 2.5}), "invalid_k"),
        (json!({"query": "hi", "k": "5"}), "invalid_k"),
        (
            json!({"query": "hi", "session_id": "s".repeat(200)}),
            "invalid_session_id",
        ),
    ];
    for (body, expected) in cases {
        let reply = app.post("/v1/answer", &body).await;
        assert_eq!((reply.status, reply.code()), (400, expected), "for {body}");
    }
    // Characters, not bytes: 4,096 of them in 8,192 bytes is the longest query accepted.
    let answer = app.answer(&json!({"query": "é".repeat(4096)})).await;
    assert_eq!(answer.names().last(), Some(&"done"));
    assert!(
        app.llm.calls().len() == 1,
        "the accepted query reached the LLM"
    );
}

#[tokio::test]
async fn bad_documents_are_refused_whole_and_nothing_is_written() {
    let app = Kit::new(&[]).app();
    let cases = vec![
        (
            json!({"documents": [{"id": "a", "text": ""}]}),
            "invalid_document",
        ),
        (
            json!({"documents": [{"id": "", "text": "x"}]}),
            "invalid_document",
        ),
        (
            json!({"documents": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}),
            "invalid_document",
        ),
        // No text (and no sections).
        (json!({"documents": [{"id": "a"}]}), "invalid_document"),
        (json!({"docs": []}), "invalid_json"),
    ];
    for (body, expected) in cases {
        let reply = app.post("/v1/documents", &body).await;
        assert_eq!((reply.status, reply.code()), (400, expected), "for {body}");
    }
    // Over a limit: nothing of the request is written either.
    let small = Kit::new(&[("SLUICE_MAX_INGEST_BYTES", "2048")]).app();
    let big = json!({"documents": [{"id": "a", "text": "y".repeat(4096)}]});
    let reply = small.post("/v1/documents", &big).await;
    assert_eq!((reply.status, reply.code()), (413, "body_too_large"));
    for app in [&app, &small] {
        let store = app.server.ingest.as_ref().expect("ingest").store.clone();
        let default = sluice_testkit::tenant("default");
        assert_eq!(store.count(&default).await.expect("count"), 0);
        assert_eq!(store.corpus_version(&default).await.expect("version"), 0);
    }
}

#[tokio::test]
async fn an_unknown_route_names_itself() {
    let reply = Kit::new(&[])
        .app()
        .send(Method::GET, "/v1/nothing", &[], "")
        .await;
    assert!(
        reply.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/v1/nothing")
    );
}

#[tokio::test]
async fn with_the_key_table_unreachable_every_v1_route_is_a_503_to_retry() {
    let mut kit = Kit::new(&[]);
    kit.parts.keys = Some(Arc::new(BrokenKeys));
    let app = kit.app();
    for &(name, path, body) in sluice_testkit::V1_ROUTES {
        let method = Method::from_bytes(name.as_bytes()).expect("a method");
        let headers = [("authorization", "Bearer sk-sluice-0000")];
        let reply = app.send(method, path, &headers, body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (503, "auth_unavailable"),
            "{name} {path}"
        );
        assert_eq!(reply.headers["retry-after"], "1", "{name} {path}");
    }
}

#[tokio::test]
async fn work_that_dies_is_a_500_and_the_server_goes_on() {
    let app = components_app(None);
    let reply = app
        .send(Method::GET, "/v1/components/rerank", &[], "")
        .await;
    assert_eq!((reply.status, reply.code()), (500, "internal"));
    let again = app
        .send(Method::GET, "/v1/components/rerank", &[], "")
        .await;
    assert_eq!(again.code(), "internal", "the registry still answers");
    assert_eq!(app.send(Method::GET, "/healthz", &[], "").await.status, 200);
}

#[tokio::test]
async fn the_routers_own_refusals_are_json_errors_with_a_code() {
    let app = Kit::new(&[]).app();
    for (method, path) in [
        (Method::GET, "/v1/documents/%FF"),
        (Method::DELETE, "/v1/documents/a%C3"),
        (Method::GET, "/v1/documents?limit=1&limit=2"),
        (Method::GET, "/v1/usage?from=2026-11-01&from=2026-11-02"),
        (Method::POST, "/v1/documents?filename=a.md&filename=b.md"),
    ] {
        let reply = app.send(method.clone(), path, &[], "# x\ntext").await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "invalid_request"),
            "{method} {path}: {}",
            reply.raw
        );
        assert_eq!(
            reply.headers["content-type"], "application/json",
            "{method} {path}"
        );
        assert!(!reply.body["error"]["message"].as_str().unwrap().is_empty());
    }
}

/// What the LLM's endpoint said — its internal address, the body it answered — is for the
/// operator's log: the answer's `error` event, the chat route and the unauthenticated
/// readiness check say the kind of failure only.
#[tokio::test]
async fn an_llm_failure_never_shows_where_the_llm_is() {
    let inside = "http://10.1.2.3:8000/v1/chat/completions";
    for refused in [
        LlmError::Unavailable(format!("error sending request for url ({inside})")),
        LlmError::Status {
            status: 503,
            body: format!("upstream {inside} is overloaded"),
        },
        LlmError::Stream(format!("connection to {inside} reset")),
    ] {
        let app = llm_app(Reply::Refuse(refused.clone()));
        let answer = app
            .answer(&json!({"query": "How long does a replacement card take?"}))
            .await;
        let error = answer.first("error").to_string();
        assert!(!error.contains("10.1.2.3"), "{error}");
        let chat = json!({"messages": [{"role": "user", "content": "Hi?"}], "stream": false});
        let chat = app.post("/v1/chat/completions", &chat).await;
        assert!(!chat.raw.contains("10.1.2.3"), "{}", chat.raw);
        let ready = app.send(Method::GET, "/readyz", &[], "").await;
        assert_eq!(ready.status, 503, "{refused}");
        assert!(!ready.raw.contains("10.1.2.3"), "{}", ready.raw);
    }
}
