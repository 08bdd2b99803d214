//! `/mcp`: the Model Context Protocol server, on the official SDK's Streamable HTTP transport
//! (`rmcp`), for agents. Each tool is one of the HTTP routes, called in process through the
//! same router with the MCP request's own headers — the API key (`x-api-key`, or
//! `Authorization: Bearer` for clients that know only that), the tenant, the end user's token,
//! the trace — so that every promise of the routes holds as it is: permissions, key-bound
//! filters, the end user's access, the retrieval deadline, rate limits and budgets, body caps,
//! usage. A route's JSON error comes back as a JSON-RPC error whose `data` carries Sluice's
//! code and HTTP status.
//!
//! Stateless (no MCP session is kept): any environment of a Lambda function answers any
//! request, as the HTTP routes do.

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode, ErrorData,
    Implementation, InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_contract::sse::Event;
use tower::ServiceExt;

use crate::Server;

/// The headers of the MCP request that its tools' route calls carry.
const FORWARDED: [&str; 8] = [
    "host",
    "sec-fetch-site",
    "authorization",
    "x-api-key",
    "x-sluice-tenant",
    "x-sluice-user",
    "traceparent",
    "origin",
];

/// Most bytes of a route's answer a tool reads (an answer's stream is bounded by its token cap
/// long before this).
const MAX_TOOL_BYTES: usize = 16 << 20;

/// `/mcp`: the transport behind the routes' own cross-origin refusal (a web page of another
/// origin is refused before any JSON-RPC is read, `initialize` included).
pub(crate) fn router(server: Arc<Server>) -> axum::Router {
    axum::Router::new()
        .fallback_service(service(server))
        .layer(axum::middleware::from_fn(refuse_cross_site))
}

async fn refuse_cross_site(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match crate::admit::cross_site(request.headers()) {
        Some(why) => crate::error::ApiError::new(sluice_contract::codes::Code::CrossOrigin, why)
            .into_response(),
        None => next.run(request).await,
    }
}

/// The MCP service.
fn service(server: Arc<Server>) -> StreamableHttpService<Tools, NeverSessionManager> {
    let mut config = StreamableHttpServerConfig::default();
    // Stateless: no session to keep, so any environment answers any request.
    config.legacy_session_mode = false;
    config.json_response = true;
    // The router has checked `Host` and `Origin` already (the same rules as every route).
    config = config.disable_allowed_hosts();
    config.max_request_body_bytes = server.limits.max_body_bytes;
    let tools = Tools { server };
    StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// The tools, over the server whose routes they call.
#[derive(Clone)]
pub(crate) struct Tools {
    server: Arc<Server>,
}

/// One tool: its name, the permission it needs, its route, and what an LLM is told.
struct Spec {
    name: &'static str,
    permission: Permission,
    description: &'static str,
    schema: fn() -> Value,
}

fn retrieval_properties() -> Value {
    json!({
        "query": {"type": "string", "description": "The question, in natural language."},
        "k": {"type": "integer", "minimum": 1, "maximum": 50,
              "description": "How many sources (default: the tenant's, else 5)."},
        "filter": {"type": "object",
                   "description": "A metadata filter: {\"field\": value}, {\"field\": {\"$in\": [...]}}, $and, $or, $gte, ..."},
        "rerank_context": {"type": "object", "additionalProperties": {"type": "string"},
                           "description": "What the tenant's ranking component is told about the caller."},
    })
}

const SPECS: [Spec; 4] = [
    Spec {
        name: "search",
        permission: Permission::Search,
        description: "Find the passages of the knowledge base that answer a question, best first, \
                      with their document, section, page, score and highlighted evidence \
                      sentences. No answer is written: use it to ground your own.",
        schema: || json!({"type": "object", "properties": retrieval_properties(), "required": ["query"]}),
    },
    Spec {
        name: "answer",
        permission: Permission::Answer,
        description: "Answer a question from the knowledge base: the answer, its numbered sources \
                      ([1], [2] in the text) and whether every sentence is supported by them.",
        schema: || json!({"type": "object", "properties": retrieval_properties(), "required": ["query"]}),
    },
    Spec {
        name: "list_documents",
        permission: Permission::Documents,
        description: "List the knowledge base's documents (id, title, source, metadata), a page \
                      at a time; pass the returned next_cursor to get the next page.",
        schema: || {
            json!({"type": "object", "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                "cursor": {"type": "string"},
                "filter": {"type": "object", "description": "A metadata filter, as search's."},
            }})
        },
    },
    Spec {
        name: "get_document",
        permission: Permission::Documents,
        description: "Read one document of the knowledge base by its id: its text, sections and \
                      metadata.",
        schema: || json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
    },
];

impl Spec {
    fn tool(&self) -> Tool {
        let schema = match (self.schema)() {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        Tool::new(self.name, self.description, Arc::new(schema))
    }
}

/// The MCP request's HTTP headers (the transport puts its parts in the request's extensions).
fn headers(context: &RequestContext<RoleServer>) -> HeaderMap {
    let parts = context.extensions.get::<axum::http::request::Parts>();
    let mut forwarded = HeaderMap::new();
    for (name, value) in parts.iter().flat_map(|p| p.headers.iter()) {
        if FORWARDED.contains(&name.as_str()) {
            forwarded.append(name.clone(), value.clone());
        }
    }
    forwarded
}

/// A route's refusal as a JSON-RPC error: its message, and its code and status in `data`.
fn refused(status: StatusCode, body: &Value) -> ErrorData {
    let code = body["error"]["code"]
        .as_str()
        .unwrap_or("internal")
        .to_string();
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or("the route failed")
        .to_string();
    let rpc = match status {
        StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::INVALID_PARAMS,
        s if s.is_server_error() => ErrorCode::INTERNAL_ERROR,
        _ => ErrorCode(-32000),
    };
    ErrorData::new(
        rpc,
        message,
        Some(json!({"code": code, "status": status.as_u16()})),
    )
}

impl Tools {
    /// `method path` with `body` through the router, as the MCP request's caller.
    async fn call(
        &self,
        headers: &HeaderMap,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, bytes::Bytes), ErrorData> {
        let mut request = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let body = match body {
            Some(b) => {
                request = request.header("content-type", "application/json");
                Body::from(b.to_string())
            }
            None => Body::empty(),
        };
        let request =
            (request.body(body)).map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let response = (crate::router(Arc::clone(&self.server))
            .oneshot(request)
            .await)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), MAX_TOOL_BYTES)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok((status, bytes))
    }

    /// A JSON route's answer, or its refusal.
    async fn json(
        &self,
        headers: &HeaderMap,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ErrorData> {
        let (status, bytes) = self.call(headers, method, path, body).await?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        match status.is_success() {
            true => Ok(value),
            false => Err(refused(status, &value)),
        }
    }

    /// The answer tool: `POST /v1/answer`'s stream read to its end.
    async fn answer(&self, headers: &HeaderMap, arguments: &Value) -> Result<Value, ErrorData> {
        let (status, bytes) =
            (self.call(headers, Method::POST, "/v1/answer", Some(arguments))).await?;
        if !status.is_success() {
            let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            return Err(refused(status, &value));
        }
        let text = String::from_utf8_lossy(&bytes);
        let (mut answer, mut meta, mut done) = (String::new(), None, None);
        for frame in text.split("\n\n") {
            let (mut name, mut data) = ("", "");
            for line in frame.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n;
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = d;
                }
            }
            match Event::decode(name, data) {
                Ok(Some(Event::Meta(m))) => meta = Some(m),
                Ok(Some(Event::Token(t))) => answer.push_str(&t.text),
                Ok(Some(Event::Done(d))) => done = Some(d),
                Ok(Some(Event::Error(e))) => {
                    let body = json!({"error": {"code": e.code, "message": e.message}});
                    return Err(refused(StatusCode::SERVICE_UNAVAILABLE, &body));
                }
                Ok(None) | Err(_) => {}
            }
        }
        let (Some(meta), Some(done)) = (meta, done) else {
            return Err(ErrorData::internal_error("the answer ended early", None));
        };
        Ok(json!({
            "answer": answer,
            "sources": meta.documents,
            "grounding": done.grounding,
            "degraded": meta.degraded.iter().chain(&done.degraded).collect::<Vec<_>>(),
            "cached": done.cached,
            "request_id": meta.request_id,
        }))
    }

    /// The tools the caller's key may call (all of them with auth off).
    async fn allowed(&self, headers: &HeaderMap) -> Result<Vec<&'static Spec>, ErrorData> {
        let mut allowed = Vec::new();
        for spec in &SPECS {
            match crate::admit::admit_reader(&self.server, headers, spec.permission).await {
                Ok(_) => allowed.push(spec),
                Err(e) if e.code == sluice_contract::codes::Code::PermissionDenied => {}
                Err(e) => {
                    let body = json!({"error": {"code": e.code.as_str(), "message": e.message}});
                    let status = StatusCode::from_u16(e.code.status());
                    return Err(refused(status.unwrap_or(StatusCode::FORBIDDEN), &body));
                }
            }
        }
        Ok(allowed)
    }
}

impl rmcp::ServerHandler for Tools {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sluice", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Sluice answers questions from a knowledge base with cited sources. Use search \
                 for the passages alone, answer for a written answer with its sources.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let allowed = self.allowed(&headers(&context)).await?;
        Ok(ListToolsResult::with_all_items(
            allowed.iter().map(|s| s.tool()).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let headers = headers(&context);
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let name: Cow<'static, str> = request.name;
        // The transport runs the call on a task of its own and cancels this token when the
        // client goes away: the route's work (an answer's generation) is dropped with it, and
        // charged for what it made, as the route's own client leaving would have it.
        let ct = context.ct.clone();
        tokio::select! {
            called = self.call_named(&name, &headers, &arguments) => called,
            () = ct.cancelled() => Err(ErrorData::internal_error("the client went away", None)),
        }
    }
}

impl Tools {
    /// The tool `name` called with `arguments`, as the caller of `headers`.
    async fn call_named(
        &self,
        name: &str,
        headers: &HeaderMap,
        arguments: &Value,
    ) -> Result<CallToolResponse, ErrorData> {
        let value = match name {
            "search" => (self.json(headers, Method::POST, "/v1/search", Some(arguments))).await?,
            "answer" => self.answer(headers, arguments).await?,
            "list_documents" => {
                let mut query = Vec::new();
                for (key, value) in arguments.as_object().into_iter().flatten() {
                    let text = match value {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    query.push(format!("{}={}", key, sluice_contract::escape(&text)));
                }
                let path = format!("/v1/documents?{}", query.join("&"));
                self.json(headers, Method::GET, &path, None).await?
            }
            "get_document" => {
                let Some(id) = arguments["id"].as_str() else {
                    return Err(ErrorData::invalid_params(
                        "\"id\" (a string) is required",
                        None,
                    ));
                };
                let path = format!("/v1/documents/{}", sluice_contract::escape(id));
                self.json(headers, Method::GET, &path, None).await?
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool is called {other:?}: see tools/list"),
                    Some(json!({"code": "unknown_tool"})),
                ));
            }
        };
        let mut result = CallToolResult::structured(value);
        result.content = vec![ContentBlock::text(
            result
                .structured_content
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default(),
        )];
        Ok(CallToolResponse::Complete(result))
    }
}
