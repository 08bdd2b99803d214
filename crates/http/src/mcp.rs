//! `/mcp`: the Model Context Protocol server, on the official SDK's Streamable HTTP transport
//! (`rmcp`), for agents. Each tool is one of the service's operations, called directly with
//! the MCP request's own credentials — the API key (`x-api-key`, or `Authorization: Bearer`
//! for clients that know only that), the tenant, the end user's token — its trace and the
//! entry point's deadline, so that every promise of the routes holds as it is: permissions,
//! key-bound filters, the end user's access, the retrieval deadline and the invocation's,
//! rate limits and budgets, usage. A refusal comes back as a JSON-RPC error whose `data`
//! carries Sluice's code and HTTP status.
//!
//! Stateless (no MCP session is kept): any environment of a Lambda function answers any
//! request, as the HTTP routes do.

use std::borrow::Cow;
use std::sync::Arc;

use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode, ErrorData,
    Implementation, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ServerCapabilities, Tool,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_contract::codes::Code;
use sluice_contract::sse::Event;
use sluice_contract::stages::MAX_K;

use crate::error::ApiError;
use crate::service::Call;
use crate::service::documents::{Listing, parse_filter};
use crate::{Server, StreamDeadline};

/// `/mcp`: the transport behind a gate that holds the routes' own rules before any JSON-RPC
/// is read.
pub(crate) fn router(server: Arc<Server>) -> axum::Router {
    axum::Router::new()
        .fallback_service(service(Arc::clone(&server)))
        .layer(axum::middleware::from_fn_with_state(server, gate))
}

/// Refuses, as a JSON-RPC error with Sluice's code and the HTTP status of the routes, a web
/// page of another origin, a missing or unknown API key (401, as every route: not a 200 with an
/// error inside), a session id (none is ever issued), and a body over the cap or slower than
/// the body timeout (the transport's own read has a cap but no timeout); passes the body read
/// on, and gives what the transport itself refuses (a method, an `Accept`, a content type,
/// JSON it cannot read) the same JSON shape.
async fn gate(
    axum::extract::State(server): axum::extract::State<Arc<Server>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let headers = request.headers();
    if let Err(e) = crate::admit::same_site(headers) {
        return rpc_error(&e);
    }
    if let Err(e) = server
        .authenticated(&crate::admit::credentials(headers))
        .await
    {
        return rpc_error(&e);
    }
    if headers.contains_key("mcp-session-id") {
        return rpc_error(&ApiError::new(
            Code::UnknownSession,
            "this server keeps no MCP sessions and issued none: send requests without \
             Mcp-Session-Id",
        ));
    }
    let (parts, body) = request.into_parts();
    let bytes = match crate::body::read_body(&server, body, server.limits.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(e) => return rpc_error(&e),
    };
    // A body that is not one JSON-RPC message is refused here in the routes' words (the
    // transport answers unreadable JSON with a 415): JSON that does not parse, and a batch.
    if parts.method == Method::POST
        && (parts.headers.get(axum::http::header::CONTENT_TYPE))
            .and_then(|t| t.to_str().ok())
            .is_some_and(|t| t.starts_with("application/json"))
    {
        match serde_json::from_slice::<Value>(&bytes) {
            Err(e) => {
                let why = format!("the body is not JSON: {e}");
                return rpc_error(&ApiError::new(Code::InvalidJson, why));
            }
            Ok(Value::Array(_)) => {
                let why = "a batch of JSON-RPC requests: send one request a POST";
                return rpc_error(&ApiError::new(Code::InvalidRequest, why));
            }
            Ok(_) => {}
        }
    }
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    let json = (response.headers().get(axum::http::header::CONTENT_TYPE))
        .and_then(|t| t.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json") || t.starts_with("text/event-stream"));
    if !response.status().is_client_error() || json {
        return response;
    }
    // The transport's refusals are plain text: the same words, in the routes' shape.
    let code = match response.status() {
        StatusCode::METHOD_NOT_ALLOWED => Code::MethodNotAllowed,
        StatusCode::NOT_ACCEPTABLE => Code::NotAcceptable,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => Code::UnsupportedFormat,
        StatusCode::NOT_FOUND => Code::NotFound,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        _ => Code::InvalidRequest,
    };
    let text = axum::body::to_bytes(response.into_body(), 4 << 10).await;
    let text = text.map(|b| String::from_utf8_lossy(&b).trim().to_string());
    let message = match text {
        Ok(t) if !t.is_empty() => t,
        _ => "the MCP transport refused the request".into(),
    };
    rpc_error(&ApiError::new(code, message))
}

/// A refusal before the request was read: its HTTP status, and a JSON-RPC error (its id
/// unknown, so null) with Sluice's code and status in `data`.
fn rpc_error(e: &ApiError) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = json!({"jsonrpc": "2.0", "id": null, "error": api_refusal(e)});
    (e.status(), axum::Json(body)).into_response()
}

/// The MCP service.
fn service(server: Arc<Server>) -> StreamableHttpService<Tools, NeverSessionManager> {
    let mut config = StreamableHttpServerConfig::default();
    // Stateless: no session to keep, so any environment answers any request.
    config.legacy_session_mode = false;
    config.json_response = true;
    // The router has checked `Host` and `Origin` already (the same rules as every route).
    config = config.disable_allowed_hosts();
    // The gate has read the body under the server's cap and timeout.
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

/// One tool: its name, the permission it needs, and what an LLM is told.
struct Spec {
    name: &'static str,
    permission: Permission,
    description: &'static str,
    schema: fn() -> Value,
}

fn retrieval_properties() -> Value {
    json!({
        "query": {"type": "string", "description": "The question, in natural language."},
        "k": {"type": "integer", "minimum": 1, "maximum": MAX_K,
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

/// The MCP request as the service sees it: its headers read as a REST request's, and the
/// entry point's deadline (the transport puts the HTTP request's parts, extensions included,
/// in the call's extensions).
fn call_of(context: &RequestContext<RoleServer>) -> Call {
    let parts = context.extensions.get::<axum::http::request::Parts>();
    let empty = HeaderMap::new();
    let headers = parts.map_or(&empty, |p| &p.headers);
    let deadline = parts.and_then(|p| p.extensions.get::<StreamDeadline>());
    crate::admit::call(headers, Instant::now(), deadline)
}

/// Sluice's refusal as a JSON-RPC error: its message, and in `data` its code, HTTP status and
/// whether to try again (as an answer stream's `error` event says it).
fn api_refusal(e: &ApiError) -> ErrorData {
    // The protocol's own codes where they fit (an unknown tool is "invalid params" in the MCP
    // specification); the implementation-defined -32000 for the others.
    let status = e.status();
    let rpc = match status {
        _ if e.code == Code::UnknownTool => ErrorCode::INVALID_PARAMS,
        StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::INVALID_PARAMS,
        s if s.is_server_error() => ErrorCode::INTERNAL_ERROR,
        _ => ErrorCode(-32000),
    };
    let data = json!({"code": e.code, "status": status.as_u16(), "retryable": e.code.retryable()});
    ErrorData::new(rpc, e.message.clone(), Some(data))
}

/// Where an answer's progress goes when the client asked for it (a `progressToken`).
struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
}

impl Progress {
    /// The request's progress token, if its client sent one.
    fn of(context: &RequestContext<RoleServer>) -> Option<Self> {
        let token = context.meta.get_progress_token()?;
        Some(Self {
            peer: context.peer.clone(),
            token,
        })
    }

    /// `notifications/progress`: `done` so far, with what happened. A client gone is noticed by
    /// the call's cancellation, not here.
    async fn tell(&self, done: usize, message: String) {
        let param =
            ProgressNotificationParam::new(self.token.clone(), done as f64).with_message(message);
        if let Err(e) = self.peer.notify_progress(param).await {
            tracing::debug!(error = %e, "an MCP progress notification was not sent");
        }
    }
}

impl Tools {
    /// The answer tool: the service's answer read as it comes (each token a progress
    /// notification when the client asked for them), the answer whole at its end.
    async fn answer(
        &self,
        call: &Call,
        arguments: &Value,
        progress: Option<&Progress>,
    ) -> Result<Value, ApiError> {
        let server = &self.server;
        let caller = server
            .admit_reader(&call.credentials, Permission::Answer)
            .await?;
        server.pipeline()?;
        let mut events = server.answer(&caller, call, arguments_as(arguments)?)?;
        let (mut answer, mut tokens, mut meta, mut done) = (String::new(), 0, None, None);
        while let Some(event) = events.next().await {
            match event {
                Event::Meta(m) => {
                    if let Some(p) = progress {
                        let found = m.documents.len();
                        p.tell(0, format!("{found} sources found; writing the answer"))
                            .await;
                    }
                    meta = Some(m);
                }
                Event::Token(t) => {
                    answer.push_str(&t.text);
                    tokens += 1;
                    if let Some(p) = progress {
                        p.tell(tokens, t.text).await;
                    }
                }
                Event::Done(d) => done = Some(d),
                Event::Error(e) => return Err(ApiError::new(e.code, e.message)),
            }
        }
        let (Some(meta), Some(done)) = (meta, done) else {
            return Err(ApiError::new(Code::Internal, "the answer ended early"));
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

    /// The search tool: `POST /v1/search`'s body, searched by the service.
    async fn search(&self, call: &Call, arguments: &Value) -> Result<Value, ApiError> {
        let server = &self.server;
        let caller = server
            .admit_reader(&call.credentials, Permission::Search)
            .await?;
        server.pipeline()?;
        let (asked, conversation) = crate::search::asked(arguments_as(arguments)?)?;
        let found = server.search(&caller, call, asked, conversation).await?;
        Ok(serde_json::to_value(found).unwrap_or_default())
    }

    /// The list_documents tool: a page of the documents the caller may read.
    async fn list_documents(&self, call: &Call, arguments: &Value) -> Result<Value, ApiError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Arguments {
            limit: Option<Value>,
            cursor: Option<String>,
            filter: Option<Value>,
        }
        let server = &self.server;
        let caller = server
            .admit_reader(&call.credentials, Permission::Documents)
            .await?;
        server.ingest()?;
        let asked: Arguments = arguments_as(arguments)?;
        let limit = (asked.limit.as_ref())
            .map(|v| {
                v.as_u64().map(|n| n as usize).ok_or_else(|| {
                    let most = sluice_contract::document::MAX_PAGE;
                    let why = format!("limit must be a whole number from 1 to {most}, not {v}");
                    ApiError::new(Code::InvalidPage, why)
                })
            })
            .transpose()?;
        let filter = asked.filter.as_ref().map(parse_filter).transpose()?;
        let listing = Listing {
            limit,
            cursor: asked.cursor,
            filter,
        };
        let page = server.list_documents(&caller, listing).await?;
        Ok(json!({"documents": page.documents, "next_cursor": page.next}))
    }

    /// The get_document tool: one document the caller may read.
    async fn get_document(&self, call: &Call, arguments: &Value) -> Result<Value, ApiError> {
        let server = &self.server;
        let caller = server
            .admit_reader(&call.credentials, Permission::Documents)
            .await?;
        let Some(id) = arguments["id"].as_str() else {
            let why = "\"id\" (a string) is required";
            return Err(ApiError::new(Code::InvalidRequest, why));
        };
        let document = server.get_document(&caller, id).await?;
        Ok(serde_json::to_value(document).unwrap_or_default())
    }

    /// The tools the caller's key may call (all of them with auth off), admitted as one
    /// request: the key looked up once and one token of its tenant's rate, as `initialize`
    /// or a tool call costs.
    async fn allowed(&self, call: &Call) -> Result<Vec<&'static Spec>, ErrorData> {
        let permissions: Vec<Permission> = SPECS.iter().map(|s| s.permission).collect();
        let held = (self.server.admit_any(&call.credentials, &permissions).await)
            .map_err(|e| api_refusal(&e))?;
        Ok((SPECS.iter().zip(held))
            .filter(|(_, h)| *h)
            .map(|(s, _)| s)
            .collect())
    }
}

/// A tool's arguments read as the route's body would be (the same fields, the same refusals).
fn arguments_as<T: for<'de> Deserialize<'de>>(arguments: &Value) -> Result<T, ApiError> {
    crate::body::parse_json(arguments.to_string().as_bytes())
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
        let allowed = self.allowed(&call_of(&context)).await?;
        Ok(ListToolsResult::with_all_items(
            allowed.iter().map(|s| s.tool()).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = call_of(&context);
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let name: Cow<'static, str> = request.name;
        // The transport runs the call on a task of its own and cancels this token when the
        // client goes away: the route's work (an answer's generation) is dropped with it, and
        // charged for what it made, as the route's own client leaving would have it.
        let ct = context.ct.clone();
        let progress = Progress::of(&context);
        tokio::select! {
            called = self.call_named(&name, &call, &arguments, progress.as_ref()) => called,
            () = ct.cancelled() => Err(ErrorData::internal_error("the client went away", None)),
        }
    }
}

impl Tools {
    /// The tool `name` called with `arguments`, as `call`'s caller.
    async fn call_named(
        &self,
        name: &str,
        call: &Call,
        arguments: &Value,
        progress: Option<&Progress>,
    ) -> Result<CallToolResponse, ErrorData> {
        let value = match name {
            "search" => self.search(call, arguments).await,
            "answer" => self.answer(call, arguments, progress).await,
            "list_documents" => self.list_documents(call, arguments).await,
            "get_document" => self.get_document(call, arguments).await,
            other => {
                let why = format!("no tool is called {other:?}: see tools/list");
                Err(ApiError::new(Code::UnknownTool, why))
            }
        };
        let value = value.map_err(|e| api_refusal(&e))?;
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
