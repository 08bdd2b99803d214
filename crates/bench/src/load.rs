//! The load generator: send requests on a schedule, measure each one from the client.
//!
//! A level is one load setting (synchronous, N concurrent, or R requests/s). It first sends
//! for the warm-up period without recording (closed-loop workers start spread over it, so
//! that N streams do not all begin and end together), then records exactly `requests`
//! requests — those *started* after the warm-up — and waits for every one in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sluice_contract::sse::{Event, PromptEcho, Timings};
use tokio::task::JoinSet;

use crate::BenchError;

/// How requests are sent at one level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Load {
    /// One request at a time, back to back.
    Synchronous,
    /// This many requests in flight at all times (closed loop).
    Concurrent(usize),
    /// Requests start at this fixed rate per second, whatever is in flight (open loop).
    Constant(f64),
    /// Requests start at this mean rate per second with exponential gaps (open loop).
    Poisson(f64),
}

/// How a run's levels are read (`--load`).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LoadKind {
    /// One request at a time.
    Synchronous,
    /// Each level is a number of requests in flight at all times.
    Concurrent,
    /// Each level is requests started per second, evenly spaced.
    Constant,
    /// Each level is a mean rate per second, with random (exponential) gaps.
    Poisson,
    /// Synchronous, then each level as a concurrency.
    Sweep,
}

impl LoadKind {
    /// The loads of `levels` read as this kind: concurrencies are whole numbers from 1 to
    /// 100,000, rates positive numbers per second.
    pub fn loads(self, levels: &[f64]) -> Result<Vec<Load>, BenchError> {
        if levels.is_empty() && !matches!(self, LoadKind::Synchronous) {
            return Err(BenchError::Setup("--levels is empty".into()));
        }
        let count = |v: f64| match v >= 1.0 && v.fract() == 0.0 && v <= 100_000.0 {
            true => Ok(Load::Concurrent(v as usize)),
            false => Err(BenchError::Setup(format!(
                "a concurrency must be a whole number from 1 to 100000, not {v}"
            ))),
        };
        let rate = |v: f64| match v > 0.0 && v.is_finite() {
            true => Ok(v),
            false => Err(BenchError::Setup(format!(
                "a rate must be a positive number of requests per second, not {v}"
            ))),
        };
        let each = levels.iter().copied();
        match self {
            LoadKind::Synchronous => Ok(vec![Load::Synchronous]),
            LoadKind::Concurrent => each.map(count).collect(),
            LoadKind::Constant => each.map(|v| rate(v).map(Load::Constant)).collect(),
            LoadKind::Poisson => each.map(|v| rate(v).map(Load::Poisson)).collect(),
            LoadKind::Sweep => std::iter::once(Ok(Load::Synchronous))
                .chain(each.map(count))
                .collect(),
        }
    }
}

/// Questions about the sample documents (`samples/`), sent when no questions file is given.
const SAMPLE_QUERIES: &[&str] = &[
    "How do I reset my password?",
    "What should I do if I lose my card?",
    "What is the daily limit on card payments?",
    "How long does an international transfer take?",
    "Can I overpay my mortgage without a fee?",
    "What interest does the easy access savings account pay?",
    "How do I contact support outside office hours?",
    "Can I raise my contactless limit?",
    "What fees apply to sending money abroad?",
    "How do I freeze a card that I think is stolen?",
    "Is there a penalty for paying off my mortgage early?",
    "How are savings rates changed?",
];

/// The questions to send: the file's non-empty lines, or questions about the samples.
pub fn queries(path: Option<&std::path::Path>) -> Result<Vec<String>, BenchError> {
    let Some(path) = path else {
        return Ok(SAMPLE_QUERIES.iter().map(|q| q.to_string()).collect());
    };
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::Io(path.to_path_buf(), e))?;
    let queries: Vec<String> = (text.lines().map(str::trim))
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if queries.is_empty() {
        let why = format!("{} has no questions (one per line)", path.display());
        return Err(BenchError::Setup(why));
    }
    Ok(queries)
}

impl Load {
    /// The level's number for plots and tables (concurrency, or rate).
    pub fn level(&self) -> f64 {
        match *self {
            Load::Synchronous => 1.0,
            Load::Concurrent(n) => n as f64,
            Load::Constant(r) | Load::Poisson(r) => r,
        }
    }

    /// `synchronous`, `concurrent 64`, `poisson 5/s`.
    pub fn label(&self) -> String {
        match *self {
            Load::Synchronous => "synchronous".into(),
            Load::Concurrent(n) => format!("concurrent {n}"),
            Load::Constant(r) => format!("constant {r}/s"),
            Load::Poisson(r) => format!("poisson {r}/s"),
        }
    }
}

/// Where requests go.
#[derive(Debug, Clone)]
pub enum Target {
    /// Sluice's `POST /v1/answer` at this base URL.
    Sluice {
        /// `http://host:port`.
        url: String,
        /// Sent as `x-sluice-tenant` when set.
        tenant: Option<String>,
        /// Sources per answer (the server's default when unset).
        k: Option<usize>,
        /// Read and write the answer cache (by default the bench bypasses it, so every
        /// request runs the whole pipeline).
        use_cache: bool,
        /// Ask for the LLM request in `meta.prompt`, to replay it with [`Target::Llm`].
        include_prompt: bool,
    },
    /// An OpenAI-compatible `POST /chat/completions` at this base URL (ending in `/v1`).
    Llm {
        /// `http://host:port/v1`.
        url: String,
        /// The model name to send.
        model: String,
    },
}

/// What one request sends: a question for Sluice, or an assembled prompt for the LLM.
#[derive(Debug, Clone)]
pub enum Work {
    /// A question.
    Query(String),
    /// A prompt recorded from Sluice's `meta.prompt`.
    Prompt(PromptEcho),
}

/// What the client saw of one request. Times are milliseconds from sending it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Sample {
    /// When it was sent, in ms from the level's start.
    pub start_ms: f64,
    /// The stream ended with `done` (Sluice) or a finish reason (LLM).
    pub ok: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// First token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// End of the stream.
    pub e2e_ms: f64,
    /// Token events received.
    pub tokens: u64,
    /// Gaps between consecutive token events.
    #[serde(skip)]
    pub itl_ms: Vec<f64>,
    /// Sluice's `done.timings`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<Timings>,
    /// Sluice's `meta.cache`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    /// Sluice's `meta.degraded` was not empty.
    pub degraded: bool,
    /// Sluice's `meta.prompt`, when asked for.
    #[serde(skip)]
    pub prompt: Option<PromptEcho>,
}

/// What one level produced.
#[derive(Debug, Clone)]
pub struct Level {
    /// The load.
    pub load: Load,
    /// Recorded requests, in the order they were started.
    pub samples: Vec<Sample>,
    /// From the first recorded request's start to the last one's end.
    pub duration: Duration,
}

/// The load's client: one keep-alive pool (a connection per stream in flight, reused after).
/// Every phase has a timeout.
pub fn client() -> Result<reqwest::Client, BenchError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        // Between two reads of a stream.
        .read_timeout(Duration::from_secs(120))
        .tcp_nodelay(true)
        .build()
        .map_err(|e| BenchError::Setup(format!("HTTP client: {e}")))
}

/// Runs one level: warm-up, then `requests` recorded requests over `work` (round-robin).
pub async fn run_level(
    client: &reqwest::Client,
    target: &Target,
    load: Load,
    work: &[Work],
    requests: usize,
    warmup: Duration,
    seed: u64,
) -> Result<Level, BenchError> {
    if work.is_empty() || requests == 0 {
        return Err(BenchError::Setup("nothing to send".into()));
    }
    let shared = Arc::new(Shared {
        client: client.clone(),
        target: target.clone(),
        work: work.to_vec(),
        started: Instant::now(),
        warm_until: Instant::now() + warmup,
        next: AtomicUsize::new(0),
        tickets: AtomicUsize::new(0),
        requests,
    });
    let mut tasks: JoinSet<Vec<(usize, Sample)>> = JoinSet::new();
    match load {
        Load::Synchronous | Load::Concurrent(_) => {
            let workers = match load {
                Load::Concurrent(n) => n.max(1),
                _ => 1,
            };
            for i in 0..workers {
                let shared = Arc::clone(&shared);
                // Spread the workers' first requests over the warm-up.
                let delay = warmup.mul_f64(i as f64 / workers as f64);
                tasks.spawn(async move {
                    tokio::time::sleep(delay).await;
                    let mut out = Vec::new();
                    while let Some((ticket, item)) = shared.take() {
                        let sample = shared.send(&item).await;
                        if let Some(t) = ticket {
                            out.push((t, sample));
                        }
                    }
                    out
                });
            }
        }
        Load::Constant(rate) | Load::Poisson(rate) => {
            if !(rate > 0.0 && rate.is_finite()) {
                return Err(BenchError::Setup(format!("rate {rate} is not positive")));
            }
            let mut random = SplitMix(seed);
            let mut at = tokio::time::Instant::now();
            while let Some((ticket, item)) = shared.take() {
                let gap = match load {
                    Load::Poisson(_) => random.exponential(rate),
                    _ => 1.0 / rate,
                };
                let shared = Arc::clone(&shared);
                tasks.spawn(async move {
                    let sample = shared.send(&item).await;
                    ticket.map(|t| (t, sample)).into_iter().collect()
                });
                at += Duration::from_secs_f64(gap);
                tokio::time::sleep_until(at).await;
            }
        }
    }
    let mut recorded: Vec<(usize, Sample)> = Vec::with_capacity(requests);
    while let Some(done) = tasks.join_next().await {
        recorded.extend(done.map_err(|e| BenchError::Setup(format!("a sender failed: {e}")))?);
    }
    recorded.sort_by_key(|(t, _)| *t);
    let samples: Vec<Sample> = recorded.into_iter().map(|(_, s)| s).collect();
    let first = samples
        .iter()
        .map(|s| s.start_ms)
        .fold(f64::INFINITY, f64::min);
    let last = samples
        .iter()
        .map(|s| s.start_ms + s.e2e_ms)
        .fold(0.0, f64::max);
    Ok(Level {
        load,
        samples,
        duration: Duration::from_secs_f64(((last - first) / 1e3).max(1e-6)),
    })
}

struct Shared {
    client: reqwest::Client,
    target: Target,
    work: Vec<Work>,
    started: Instant,
    warm_until: Instant,
    next: AtomicUsize,
    tickets: AtomicUsize,
    requests: usize,
}

impl Shared {
    /// The next request to send and its ticket (its place among the recorded ones; `None`
    /// during the warm-up), or `None` once every recorded request has been started.
    fn take(&self) -> Option<(Option<usize>, Work)> {
        let ticket = if Instant::now() < self.warm_until {
            None
        } else {
            let t = self.tickets.fetch_add(1, Ordering::Relaxed);
            if t >= self.requests {
                return None;
            }
            Some(t)
        };
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        Some((ticket, self.work[i % self.work.len()].clone()))
    }

    async fn send(&self, work: &Work) -> Sample {
        let sent = Instant::now();
        let start_ms = ms(sent - self.started);
        let mut sample = match measure(&self.client, &self.target, work, sent).await {
            Ok(s) => s,
            Err(error) => Sample {
                error: Some(error),
                ..Sample::default()
            },
        };
        sample.start_ms = start_ms;
        sample.e2e_ms = ms(sent.elapsed());
        sample
    }
}

/// Sends one request and reads its stream to the end.
async fn measure(
    client: &reqwest::Client,
    target: &Target,
    work: &Work,
    sent: Instant,
) -> Result<Sample, String> {
    let request = match (target, work) {
        (
            Target::Sluice {
                url,
                tenant,
                k,
                use_cache,
                include_prompt,
            },
            Work::Query(query),
        ) => {
            let mut body = json!({"query": query, "include_prompt": include_prompt});
            if !use_cache {
                body["cache"] = json!("bypass");
            }
            if let Some(k) = k {
                body["k"] = json!(k);
            }
            // SLUICE_API_KEY for a server with auth on; read once, sent to Sluice only.
            static AUTH: std::sync::OnceLock<reqwest::header::HeaderMap> =
                std::sync::OnceLock::new();
            let auth = AUTH.get_or_init(sluice_client::key_headers).clone();
            let (headers, bytes) = sluice_client::json_body(&body);
            let request = client
                .post(format!("{url}/v1/answer"))
                .headers(auth)
                .headers(headers)
                .body(bytes);
            match tenant {
                Some(t) => request.header("x-sluice-tenant", t),
                None => request,
            }
        }
        (Target::Llm { url, model }, Work::Prompt(prompt)) => {
            client.post(format!("{url}/chat/completions")).json(&json!({
                "model": model,
                "messages": prompt.messages,
                "max_tokens": prompt.max_tokens,
                "stream": true,
                "stream_options": {"include_usage": true},
            }))
        }
        _ => return Err("this target cannot send this kind of request".into()),
    };
    let response = request.send().await.map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(format!(
            "HTTP {status}: {}",
            body.chars().take(200).collect::<String>()
        ));
    }
    let sluice = matches!(target, Target::Sluice { .. });
    let mut sample = Sample::default();
    let mut last_token: Option<Instant> = None;
    let mut events = response.bytes_stream().eventsource();
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| format!("stream: {e}"))?;
        let tokens = if sluice {
            read_sluice_event(&event.event, &event.data, &mut sample)?
        } else {
            read_llm_event(&event.data, &mut sample)?
        };
        for _ in 0..tokens {
            let now = Instant::now();
            match last_token {
                None => sample.ttft_ms = Some(ms(now - sent)),
                Some(t) => sample.itl_ms.push(ms(now - t)),
            }
            last_token = Some(now);
            sample.tokens += 1;
        }
        if sample.ok || sample.error.is_some() {
            break;
        }
    }
    if !sample.ok && sample.error.is_none() {
        sample.error = Some("the stream ended without an ending event".into());
    }
    Ok(sample)
}

/// Reads one Sluice event into `sample` (decoded as the contract's, so that a server that
/// breaks it fails the run); returns the number of tokens it carried.
fn read_sluice_event(name: &str, data: &str, sample: &mut Sample) -> Result<u64, String> {
    match sluice_client::decode(name, data).map_err(|e| e.to_string())? {
        Some(Event::Meta(meta)) => {
            sample.cache = Some(meta.cache.as_str().to_string());
            sample.degraded = !meta.degraded.is_empty();
            sample.prompt = meta.prompt;
        }
        Some(Event::Token(_)) => return Ok(1),
        Some(Event::Done(done)) => {
            sample.ok = true;
            sample.server = Some(done.timings);
        }
        Some(Event::Error(e)) => sample.error = Some(format!("{}: {}", e.code, e.message)),
        None => {}
    }
    Ok(0)
}

/// Reads one OpenAI stream chunk into `sample`; returns the number of tokens it carried.
fn read_llm_event(data: &str, sample: &mut Sample) -> Result<u64, String> {
    let data = data.trim();
    if data == "[DONE]" {
        if !sample.ok {
            sample.error = Some("[DONE] before a finish reason".into());
        }
        return Ok(0);
    }
    let value: Value = serde_json::from_str(data).map_err(|e| format!("chunk: {e}"))?;
    let mut tokens = 0;
    for choice in value["choices"].as_array().into_iter().flatten() {
        if choice["delta"]["content"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
        {
            tokens += 1;
        }
        if choice["finish_reason"].is_string() {
            // The usage chunk and [DONE] follow; nothing after the finish is timed.
            sample.ok = true;
        }
    }
    Ok(tokens)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub use sluice_contract::random::SplitMix;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_read_as_their_kind_and_bad_ones_refused() {
        let sweep = LoadKind::Sweep.loads(&[4.0, 8.0]).unwrap();
        assert!(matches!(
            sweep[..],
            [Load::Synchronous, Load::Concurrent(4), Load::Concurrent(8)]
        ));
        assert!(
            matches!(LoadKind::Poisson.loads(&[2.5]).unwrap()[..], [Load::Poisson(r)] if r == 2.5)
        );
        assert!(matches!(
            LoadKind::Synchronous.loads(&[]).unwrap()[..],
            [Load::Synchronous]
        ));
        for (kind, levels) in [
            (LoadKind::Concurrent, vec![1.5]),
            (LoadKind::Concurrent, vec![0.0]),
            (LoadKind::Sweep, vec![200_000.0]),
            (LoadKind::Constant, vec![-1.0]),
            (LoadKind::Poisson, vec![f64::INFINITY]),
            (LoadKind::Constant, vec![]),
        ] {
            assert!(kind.loads(&levels).is_err(), "{kind:?} {levels:?}");
        }
    }

    #[test]
    fn poisson_gaps_have_the_asked_mean() {
        let mut r = SplitMix(7);
        let n = 20_000;
        let mean = (0..n).map(|_| r.exponential(4.0)).sum::<f64>() / n as f64;
        assert!((mean - 0.25).abs() < 0.01, "mean gap {mean}");
    }

    #[test]
    fn llm_chunks_count_tokens_and_the_finish() {
        let mut s = Sample::default();
        let chunk = |delta: &str, finish: Value| {
            json!({"choices": [{"delta": {"content": delta}, "finish_reason": finish}]}).to_string()
        };
        assert_eq!(read_llm_event(&chunk("", Value::Null), &mut s), Ok(0));
        assert_eq!(read_llm_event(&chunk(" a", Value::Null), &mut s), Ok(1));
        assert!(!s.ok);
        assert_eq!(read_llm_event(&chunk("", json!("stop")), &mut s), Ok(0));
        assert!(s.ok);
        assert_eq!(read_llm_event("[DONE]", &mut s), Ok(0));
        assert!(s.error.is_none());
        let mut early = Sample::default();
        read_llm_event("[DONE]", &mut early).ok();
        assert!(early.error.is_some());
    }

    #[test]
    fn sluice_events_fill_the_sample() {
        let mut s = Sample::default();
        let meta = json!({"request_id": "r", "session_id": "s", "tenant": "acme",
            "model_id": "m", "k": 5, "documents": [], "cache": "miss",
            "degraded": ["retrieval_timeout"], "timings": {},
            "prompt": {"messages": [{"role": "user", "content": "q"}], "max_tokens": 8}});
        assert_eq!(read_sluice_event("meta", &meta.to_string(), &mut s), Ok(0));
        assert_eq!(s.cache.as_deref(), Some("miss"));
        assert!(s.degraded);
        assert_eq!(s.prompt.as_ref().map(|p| p.max_tokens), Some(8));
        assert_eq!(
            read_sluice_event("token", r#"{"text":"x","index":0}"#, &mut s),
            Ok(1)
        );
        let done = json!({"request_id": "r", "session_id": "s", "replica_id": "p",
            "model_id": "m", "k": 5, "token_count": 1, "token_count_source": "events",
            "tokens_per_sec": 1.0, "finish_reason": "stop", "cached": false,
            "timings": {"embed_ms": 2.5, "ttft_ms": 9.0}});
        assert_eq!(read_sluice_event("done", &done.to_string(), &mut s), Ok(0));
        assert!(s.ok);
        assert_eq!(s.server.as_ref().and_then(|t| t.embed_ms), Some(2.5));
        let mut failed = Sample::default();
        read_sluice_event(
            "error",
            r#"{"code":"llm_unavailable","message":"down","retryable":true}"#,
            &mut failed,
        )
        .ok();
        assert_eq!(failed.error.as_deref(), Some("llm_unavailable: down"));
        // An event that is not the contract's fails the sample instead of counting wrong.
        assert!(read_sluice_event("done", r#"{"timings": {}}"#, &mut s).is_err());
    }
}
