//! A streaming client for OpenAI-compatible chat APIs: vLLM in production, llama.cpp's
//! `llama-server` locally.
//!
//! One `reqwest` pool is built at start and reused for every request (keep-alive, TCP
//! keepalive, no Nagle). Each phase has its own timeout: connect, first token (from sending
//! the request), and idle (between two events). Upstream SSE is parsed by
//! `eventsource-stream`. `token_count` comes from the upstream's `usage`
//! (`stream_options.include_usage`, which vLLM honours) when it reports one. Each request
//! carries the answer's W3C `traceparent` (vLLM joins it when started with OpenTelemetry).
//!
//! With several endpoints (`SLUICE_LLM_URL=http://a/v1,http://b/v1`) the first is asked
//! first, and a failure before the first token — connection refused or reset, 429 or 5xx,
//! no first token within the first-token timeout, a stream that breaks before a token — moves
//! the request to the next, in order. A refusal (another 4xx) is not retried anywhere: the
//! request itself is wrong. After the first token nothing is retried: the client has already
//! seen text, and a failure ends the answer with an `error` event.
#![warn(missing_docs)]

pub mod config;

pub use config::LlmConfig;

use std::time::{Duration, Instant};

use async_trait::async_trait;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use sluice_contract::error::LlmError;
use sluice_contract::stages::{ChatMessage, Llm, LlmEvent, LlmStream};

/// How long an idle pooled connection is kept; above the 60 s that NLBs and most servers allow
/// idle before they close, so that the pool, not the peer, decides.
const POOL_IDLE: Duration = Duration::from_secs(90);
/// TCP keepalive probes on pooled connections.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
/// Timeout of the readiness probe (`GET /models`).
const READY_TIMEOUT: Duration = Duration::from_secs(2);
/// How much of an error body is kept in the error message.
const ERROR_BODY_CHARS: usize = 500;

/// Timeouts of one client.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// TCP connect.
    pub connect: Duration,
    /// From sending the request to the first token.
    pub first_token: Duration,
    /// Longest silence between two upstream events after the first token.
    pub idle: Duration,
}

/// The OpenAI-compatible client.
pub struct OpenAiClient {
    http: reqwest::Client,
    /// Endpoints in the order they are tried; never empty.
    base_urls: Vec<String>,
    model: String,
    api_key: Option<String>,
    timeouts: Timeouts,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Delta,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens: Option<u64>,
}

/// The OpenAI streaming format, one SSE event's `data` at a time: tokens out of
/// `choices[].delta.content`, the finish reason and the usage's token counts kept for the end.
/// Free of I/O so that it is fuzzed with the SSE framing in front of it (`fuzz/`).
#[derive(Debug, Default)]
pub struct ChunkParser {
    saw_token: bool,
    finish_reason: Option<String>,
    completion_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
}

impl ChunkParser {
    /// The tokens in one event's data (none for a keep-alive), or `None` at `[DONE]`. A body
    /// that is not a chunk, or an upstream `error` object, is an [`LlmError::Stream`].
    pub fn data(&mut self, data: &str) -> Result<Option<Vec<String>>, LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(None);
        }
        if data.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            LlmError::Stream(format!(
                "not an OpenAI stream chunk ({e}): {}",
                data.chars().take(200).collect::<String>()
            ))
        })?;
        if let Some(error) = chunk.error {
            return Err(LlmError::Stream(format!("upstream error: {error}")));
        }
        if let Some(usage) = chunk.usage {
            self.completion_tokens = Some(usage.completion_tokens);
            self.prompt_tokens = usage.prompt_tokens;
        }
        let mut tokens = Vec::new();
        for choice in chunk.choices {
            if let Some(text) = choice.delta.content.filter(|t| !t.is_empty()) {
                self.saw_token = true;
                tokens.push(text);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        Ok(Some(tokens))
    }

    /// Whether a token has arrived (after it, the idle timeout applies instead of the
    /// first-token one).
    pub fn saw_token(&self) -> bool {
        self.saw_token
    }

    /// The stream's last event: [`LlmEvent::Finish`], or an error when the upstream ended
    /// without saying why (a truncation must not pass for a complete answer).
    pub fn finish(self) -> Result<LlmEvent, LlmError> {
        match self.finish_reason {
            Some(finish_reason) => Ok(LlmEvent::Finish {
                finish_reason,
                completion_tokens: self.completion_tokens,
                prompt_tokens: self.prompt_tokens,
            }),
            None => Err(LlmError::Stream(
                "the upstream closed the stream without a finish_reason".into(),
            )),
        }
    }
}

impl OpenAiClient {
    /// A client for the API at `base_url` (ending in `/v1`).
    pub fn new(
        base_url: &str,
        model: &str,
        api_key: Option<String>,
        timeouts: Timeouts,
    ) -> Result<Self, LlmError> {
        Self::with_endpoints(&[base_url.to_string()], model, api_key, timeouts)
    }

    /// A client for several endpoints of the same model, tried in this order before the
    /// first token (see the crate's documentation).
    pub fn with_endpoints(
        base_urls: &[String],
        model: &str,
        api_key: Option<String>,
        timeouts: Timeouts,
    ) -> Result<Self, LlmError> {
        if base_urls.is_empty() {
            return Err(LlmError::Unavailable("no LLM endpoint configured".into()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(timeouts.connect)
            .pool_idle_timeout(POOL_IDLE)
            .tcp_keepalive(TCP_KEEPALIVE)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| LlmError::Unavailable(format!("HTTP client: {e}")))?;
        Ok(Self {
            http,
            base_urls: base_urls
                .iter()
                .map(|u| u.trim_end_matches('/').to_string())
                .collect(),
            model: model.to_string(),
            api_key,
            timeouts,
        })
    }

    /// A client configured from `SLUICE_LLM_*`.
    pub fn from_config(config: &LlmConfig) -> Result<Self, LlmError> {
        Self::with_endpoints(
            &config.urls,
            &config.model,
            config.api_key.as_ref().map(|k| k.expose().to_string()),
            Timeouts {
                connect: config.connect_timeout,
                first_token: config.first_token_timeout,
                idle: config.idle_timeout,
            },
        )
    }

    fn request(
        &self,
        method: reqwest::Method,
        base_url: &str,
        path: &str,
    ) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{base_url}{path}"));
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }
}

fn send_error(e: reqwest::Error) -> LlmError {
    // Connection refused, DNS, reset before the response: the upstream is not there.
    LlmError::Unavailable(e.to_string())
}

#[async_trait]
impl Llm for OpenAiClient {
    fn model_id(&self) -> &str {
        &self.model
    }

    async fn stream(
        &self,
        messages: Vec<ChatMessage>,
        max_tokens: u32,
        traceparent: &str,
    ) -> Result<LlmStream, LlmError> {
        let body = json!({
            "model": self.model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": max_tokens,
        });
        let mut failure = None;
        for (i, url) in self.base_urls.iter().enumerate() {
            match self.start(url, &body, traceparent).await {
                Ok(stream) => return Ok(stream),
                Err(e) if e.retryable() && i + 1 < self.base_urls.len() => {
                    tracing::warn!(endpoint = %url, error = %e, "LLM endpoint failed before the first token; trying the next");
                    failure = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        // Unreachable with at least one endpoint: the last one returns above.
        Err(failure.unwrap_or_else(|| LlmError::Unavailable("no LLM endpoint".into())))
    }

    async fn ready(&self) -> Result<(), LlmError> {
        // Ready when any endpoint answers: requests fail over to it.
        let mut failure = None;
        for url in &self.base_urls {
            match self.probe(url).await {
                Ok(()) => return Ok(()),
                Err(e) => failure = Some(e),
            }
        }
        Err(failure.unwrap_or_else(|| LlmError::Unavailable("no LLM endpoint".into())))
    }
}

/// Longest SSE event the upstream may send: bytes between two blank lines. An OpenAI chunk is
/// well under a kilobyte; without a cap, an upstream that never ends its line (or event) would
/// be buffered whole until a timeout fired.
pub const MAX_EVENT_BYTES: usize = 64 << 10;

/// The upstream's bytes, failing once an event (the bytes since the last blank line) would
/// pass [`MAX_EVENT_BYTES`]: the answer then ends with `llm_stream_failed`.
pub fn capped<S, B, E>(bytes: S) -> impl futures::Stream<Item = Result<B, String>> + Send
where
    S: futures::Stream<Item = Result<B, E>> + Send,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    let (mut event, mut line, mut after_cr) = (0usize, 0usize, false);
    bytes.map(move |chunk| {
        let chunk = chunk.map_err(|e| e.to_string())?;
        for &b in chunk.as_ref() {
            match b {
                // `\r\n` ends one line, not two.
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    if line == 0 {
                        event = 0;
                    }
                    line = 0;
                }
                _ => {
                    line += 1;
                    event += 1;
                }
            }
            after_cr = b == b'\r';
        }
        if event > MAX_EVENT_BYTES {
            return Err(format!(
                "the upstream sent an event of more than {MAX_EVENT_BYTES} bytes"
            ));
        }
        Ok(chunk)
    })
}

impl OpenAiClient {
    /// One endpoint's stream, returned once its first event (a token, or the finish of an
    /// empty answer) has arrived, so that a failure before it can move to the next endpoint.
    async fn start(
        &self,
        url: &str,
        body: &serde_json::Value,
        traceparent: &str,
    ) -> Result<LlmStream, LlmError> {
        let started = Instant::now();
        let first_token = self.timeouts.first_token;
        let send = self
            .request(reqwest::Method::POST, url, "/chat/completions")
            .header("traceparent", traceparent)
            .json(body)
            .send();
        let response = tokio::time::timeout(first_token, send)
            .await
            .map_err(|_| LlmError::Timeout("first-token"))?
            .map_err(send_error)?;
        let status = response.status();
        if !status.is_success() {
            let text = tokio::time::timeout(READY_TIMEOUT, response.text())
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            return Err(LlmError::Status {
                status: status.as_u16(),
                body: text.chars().take(ERROR_BODY_CHARS).collect(),
            });
        }

        let idle = self.timeouts.idle;
        let mut events = capped(response.bytes_stream()).eventsource();
        let stream = async_stream::try_stream! {
            let mut parser = ChunkParser::default();
            loop {
                let (wait, phase) = if parser.saw_token() {
                    (idle, "idle")
                } else {
                    (first_token.saturating_sub(started.elapsed()), "first-token")
                };
                let next = tokio::time::timeout(wait, events.next()).await.map_err(|_| LlmError::Timeout(phase))?;
                let Some(event) = next else { break };
                let event = event.map_err(|e| LlmError::Stream(e.to_string()))?;
                match parser.data(&event.data)? {
                    None => break,
                    Some(tokens) => {
                        for text in tokens {
                            yield LlmEvent::Token(text);
                        }
                    }
                }
            }
            yield parser.finish()?;
        };
        let mut stream: LlmStream = Box::pin(stream);
        match stream.next().await {
            Some(Ok(first)) => Ok(Box::pin(
                futures::stream::once(async { Ok(first) }).chain(stream),
            )),
            Some(Err(e)) => Err(e),
            None => Err(LlmError::Stream("the upstream sent nothing".into())),
        }
    }

    async fn probe(&self, url: &str) -> Result<(), LlmError> {
        let response = tokio::time::timeout(
            READY_TIMEOUT,
            self.request(reqwest::Method::GET, url, "/models").send(),
        )
        .await
        .map_err(|_| LlmError::Timeout("readiness"))?
        .map_err(send_error)?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(LlmError::Status {
                status: response.status().as_u16(),
                body: String::new(),
            })
        }
    }
}
