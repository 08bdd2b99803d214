//! What the answer path counts, in two forms:
//!
//! - Prometheus (OpenMetrics text) at `GET /metrics` of `sluice serve`: request and error
//!   counters, stage latency histograms, cache lookups by result (the hit ratio is
//!   `hit / (hit + miss)`), degraded answers by reason, open answer streams, streamed tokens,
//!   and the process's resident memory;
//! - on Lambda, where nothing can scrape a process, one CloudWatch Embedded Metric Format
//!   line per answer on stdout ([`Metrics::with_emf`]); CloudWatch turns it into metrics in
//!   the `Sluice` namespace with no API call on the request path.
//!
//! Recording is a few atomic adds per answer; nothing here blocks. What an answer costs is
//! billed apart, from the same events ([`crate::service::billing`]).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use serde_json::{Map, Value, json};

use crate::service::billing::Tally;
use futures::{Stream, StreamExt};
use sluice_contract::Tenant;
use sluice_contract::sse::{CacheState, Event, Timings};
use sluice_contract::usage::Counts;
use sluice_contract::{codes::Code, codes::Degraded};
use sluice_core::cache::SemanticCache;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The CloudWatch namespace of the EMF metrics.
pub const EMF_NAMESPACE: &str = "Sluice";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
    status: u16,
}

// One label per family, named for what it holds; values come from fixed sets (see `label`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Ending {
    ending: &'static str,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Label {
    code: &'static str,
}
/// A tenant, as a label only where the set of tenants is configured (bounded).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Stage {
    stage: &'static str,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Lookup {
    result: &'static str,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Source {
    source: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Verdict {
    verdict: &'static str,
}
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Rating {
    rating: &'static str,
}

/// How an answer ended, for [`Metrics::answered`].
#[derive(Debug, Clone, Copy)]
pub struct Outcome<'a> {
    /// The request's tenant (an EMF property; never a Prometheus label: tenants are many).
    pub tenant: &'a str,
    /// The request id, to find the answer's log lines from its metric line.
    pub request_id: &'a str,
    /// Stage timings as sent in `done` (or as far as they got).
    pub timings: &'a Timings,
    /// Whether the cache answered.
    pub cache: CacheState,
    /// `meta.degraded`.
    pub degraded: &'a [Degraded],
    /// Token events sent.
    pub tokens: u64,
    /// The `error` event's code, when the stream ended with one.
    pub error: Option<Code>,
    /// The id of the API key that asked (`None` with auth off).
    pub key: Option<&'a str>,
    /// What the answer used, as counted in the usage.
    pub usage: &'a Counts,
    /// Whether the grounding check found a sentence no source supports (`None`: no check).
    pub ungrounded: Option<bool>,
}

/// The process's metrics; cheap to clone (one shared set).
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    requests: Family<RouteLabels, Counter>,
    answers: Family<Ending, Counter>,
    errors: Family<Label, Counter>,
    stages: Family<Stage, Histogram>,
    cache: Family<Lookup, Counter>,
    degraded: Family<Reason, Counter>,
    tokens: Family<Source, Counter>,
    grounding: Family<Verdict, Counter>,
    feedback: Family<Rating, Counter>,
    component_fuel: Counter,
    active: Gauge,
    resident: Gauge,
    resident_peak: Gauge,
    open_fds: Gauge,
    /// Per tenant that learns its cache threshold (`SLUICE_CACHE_EXPLORE`: a configured,
    /// bounded set), the threshold in use and the 95 % upper bound of its false-hit rate.
    cache_threshold: Family<TenantLabel, Gauge<f64, AtomicU64>>,
    cache_false_hit_upper: Family<TenantLabel, Gauge<f64, AtomicU64>>,
    /// The answer cache whose learning tenants are read at scrape time.
    learning: OnceLock<Arc<SemanticCache>>,
    /// The function name of the EMF dimension, when EMF lines are written.
    emf: Option<String>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(None)
    }
}

impl Metrics {
    /// Metrics that also write one EMF line per answer, with the dimension
    /// `Function=<function>` (on Lambda: `AWS_LAMBDA_FUNCTION_NAME`).
    pub fn with_emf(function: &str) -> Self {
        Self::new(Some(function.to_string()))
    }

    fn new(emf: Option<String>) -> Self {
        // 0.5 ms to ~33 s by doubling: the embedding (a few ms) and a long answer (tens of
        // seconds) both land in buckets that separate them.
        let stages = Family::<Stage, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 17))
        });
        let mut registry = Registry::with_prefix("sluice");
        let inner = Inner {
            requests: Family::default(),
            answers: Family::default(),
            errors: Family::default(),
            stages,
            cache: Family::default(),
            degraded: Family::default(),
            tokens: Family::default(),
            grounding: Family::default(),
            feedback: Family::default(),
            component_fuel: Counter::default(),
            active: Gauge::default(),
            resident: Gauge::default(),
            resident_peak: Gauge::default(),
            open_fds: Gauge::default(),
            cache_threshold: Family::default(),
            cache_false_hit_upper: Family::default(),
            learning: OnceLock::new(),
            emf,
            registry: Registry::default(),
        };
        registry.register(
            "http_requests",
            "HTTP requests by route and status",
            inner.requests.clone(),
        );
        registry.register(
            "answers",
            "Answer streams by ending (ending=done|cached|error|dropped)",
            inner.answers.clone(),
        );
        registry.register(
            "answer_errors",
            "Answer streams that ended with an error event, by code",
            inner.errors.clone(),
        );
        registry.register_with_unit(
            "stage_duration",
            "Time per pipeline stage (stage=cache|embed|retrieve|rerank|prompt|evidence|llm_ttft|grounding|ttft|total)",
            Unit::Seconds,
            inner.stages.clone(),
        );
        registry.register(
            "cache_lookups",
            "Answer cache lookups by result (result=hit|miss|bypass)",
            inner.cache.clone(),
        );
        registry.register(
            "degraded_answers",
            "Answers degraded, by reason (one answer may have several)",
            inner.degraded.clone(),
        );
        registry.register(
            "grounding_checks",
            "Answers checked against their sources, by verdict (verdict=grounded|ungrounded)",
            inner.grounding.clone(),
        );
        registry.register(
            "feedback",
            "Ratings of answers (POST /v1/feedback), by rating (rating=up|down)",
            inner.feedback.clone(),
        );
        registry.register(
            "tokens",
            "Token events streamed to clients (source=llm|cache)",
            inner.tokens.clone(),
        );
        registry.register(
            "component_fuel",
            "Fuel burnt by tenants' rerank components (about one per WebAssembly instruction; failed calls too)",
            inner.component_fuel.clone(),
        );
        registry.register(
            "active_streams",
            "Answer streams open now",
            inner.active.clone(),
        );
        registry.register_with_unit(
            "process_resident_memory",
            "Resident memory of this process (read at scrape time)",
            Unit::Bytes,
            inner.resident.clone(),
        );
        registry.register_with_unit(
            "process_peak_resident_memory",
            "Largest resident memory of this process so far (VmHWM)",
            Unit::Bytes,
            inner.resident_peak.clone(),
        );
        registry.register(
            "process_open_fds",
            "File descriptors open in this process (read at scrape time)",
            inner.open_fds.clone(),
        );
        registry.register(
            "cache_threshold",
            "Similarity threshold in use, per tenant that learns it (read at scrape time)",
            inner.cache_threshold.clone(),
        );
        registry.register(
            "cache_false_hit_rate_upper",
            "95 % upper bound of the estimated false-hit rate at that threshold, per tenant that learns it",
            inner.cache_false_hit_upper.clone(),
        );
        Self {
            inner: Arc::new(Inner { registry, ..inner }),
        }
    }

    /// Reads the learning tenants of `cache` at each scrape.
    pub fn watch_cache(&self, cache: Arc<SemanticCache>) {
        let _ = self.inner.learning.set(cache);
    }

    /// Counts one rating of an answer (`up` or `down`).
    pub fn feedback(&self, down: bool) {
        let rating = if down { "down" } else { "up" };
        self.inner.feedback.get_or_create(&Rating { rating }).inc();
    }

    /// Counts one HTTP response (`route` is the matched route pattern, not the raw path).
    pub fn request(&self, route: &str, status: u16) {
        self.inner
            .requests
            .get_or_create(&RouteLabels {
                route: route.to_string(),
                status,
            })
            .inc();
    }

    /// Answer streams open now (the `active_streams` gauge): what a function shutting down
    /// waits on after draining.
    pub fn active_streams(&self) -> i64 {
        self.inner.active.get()
    }

    /// An open answer stream, counted in `active_streams` until the guard is dropped. Its
    /// [`AnswerGuard::finish`] records how it ended (an answer ended by the server's drain or
    /// the function's time limit ends with an `error` event of its own code); one dropped
    /// before that (the client went away) counts as `ending="dropped"`.
    pub fn stream_opened(&self) -> AnswerGuard {
        self.inner.active.inc();
        AnswerGuard {
            metrics: self.clone(),
            finished: false,
        }
    }

    fn record(&self, outcome: &Outcome<'_>) {
        let i = &self.inner;
        let ending = match (outcome.error, outcome.cache) {
            (Some(_), _) => "error",
            (None, CacheState::Hit) => "cached",
            (None, _) => "done",
        };
        i.answers.get_or_create(&Ending { ending }).inc();
        if let Some(code) = outcome.error {
            i.errors
                .get_or_create(&Label {
                    code: code.as_str(),
                })
                .inc();
        }
        for (name, value) in stages(outcome.timings) {
            i.stages
                .get_or_create(&Stage { stage: name })
                .observe(value / 1e3);
        }
        i.cache
            .get_or_create(&Lookup {
                result: outcome.cache.as_str(),
            })
            .inc();
        for reason in outcome.degraded {
            i.degraded
                .get_or_create(&Reason {
                    reason: reason.as_str(),
                })
                .inc();
        }
        if let Some(ungrounded) = outcome.ungrounded {
            let verdict = if ungrounded { "ungrounded" } else { "grounded" };
            i.grounding.get_or_create(&Verdict { verdict }).inc();
        }
        i.component_fuel.inc_by(outcome.usage.component_fuel);
        let source = if outcome.cache == CacheState::Hit {
            "cache"
        } else {
            "llm"
        };
        i.tokens
            .get_or_create(&Source { source })
            .inc_by(outcome.tokens);
        if let Some(function) = &i.emf {
            println!("{}", emf_line(function, outcome));
        }
    }

    /// The OpenMetrics text of every series, with the process gauges read now.
    pub fn encode(&self) -> String {
        if let Some((now, peak)) = resident_memory() {
            self.inner.resident.set(now);
            self.inner.resident_peak.set(peak);
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            self.inner.open_fds.set(fds.count() as i64);
        }
        if let Some(cache) = self.inner.learning.get() {
            for tenant in cache.learning_tenants() {
                if let Some(estimate) = cache.estimate(tenant) {
                    let label = TenantLabel {
                        tenant: tenant.to_string(),
                    };
                    self.inner
                        .cache_threshold
                        .get_or_create(&label)
                        .set(estimate.threshold);
                    self.inner
                        .cache_false_hit_upper
                        .get_or_create(&label)
                        .set(estimate.false_hit_rate_upper);
                }
            }
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }
}

/// `events` (an answer's, asked for `tenant` by the key whose id is `key`), recorded in
/// `metrics` as they pass: how the answer ended (its closing event, with `meta`'s cache state,
/// degraded reasons and timings, or `done`'s timings and token counts), or as `dropped` when
/// the stream is dropped before its end (the client went away). Label values come from fixed
/// sets (the typed codes and reasons): a series per tenant or per free-form string would grow
/// forever. What the answer costs is billed apart ([`crate::service::billing`]).
pub fn observed(
    metrics: &Metrics,
    tenant: Tenant,
    key: Option<String>,
    events: impl Stream<Item = Event> + Send + 'static,
) -> impl Stream<Item = Event> + Send + 'static {
    let mut guard = metrics.stream_opened();
    // What `meta` said: the cache state, degraded reasons and timings so far.
    let mut meta: Option<(CacheState, Vec<Degraded>, Timings)> = None;
    let mut tally = Tally::default();
    let mut request_id = String::new();
    events.inspect(move |event| {
        let used = tally.see(event);
        let none = Timings::default();
        let (cache, degraded, timings) = match &meta {
            Some((cache, degraded, timings)) => (*cache, degraded.as_slice(), timings),
            None => (CacheState::Bypass, &[][..], &none),
        };
        let outcome = |timings, error, usage, ungrounded| Outcome {
            ungrounded,
            tenant: &tenant,
            request_id: &request_id,
            timings,
            cache,
            degraded,
            tokens: tally.tokens(),
            error,
            key: key.as_deref(),
            usage,
        };
        match (event, used) {
            (Event::Meta(m), _) => {
                request_id = m.request_id.clone();
                meta = Some((m.cache, m.degraded.clone(), m.timings.clone()));
            }
            (Event::Done(d), Some(usage)) => {
                let ungrounded = d.grounding.as_ref().map(|g| !g.grounded());
                guard.finish(&outcome(&d.timings, None, &usage, ungrounded));
            }
            (Event::Error(e), Some(usage)) => {
                guard.finish(&outcome(timings, Some(e.code), &usage, None));
            }
            _ => {}
        }
    })
}

/// One open answer stream: keeps `active_streams` raised while it lives.
pub struct AnswerGuard {
    metrics: Metrics,
    finished: bool,
}

impl AnswerGuard {
    /// Records how the answer ended (once; a second call is ignored).
    pub fn finish(&mut self, outcome: &Outcome<'_>) {
        if !std::mem::replace(&mut self.finished, true) {
            self.metrics.record(outcome);
        }
    }
}

impl Drop for AnswerGuard {
    fn drop(&mut self) {
        let i = &self.metrics.inner;
        i.active.dec();
        if !self.finished {
            i.answers.get_or_create(&Ending { ending: "dropped" }).inc();
        }
    }
}

/// The stages that ran, in milliseconds.
fn stages(t: &Timings) -> impl Iterator<Item = (&'static str, f64)> {
    [
        ("cache", t.cache_ms),
        ("embed", t.embed_ms),
        ("retrieve", t.retrieve_ms),
        ("rerank", t.rerank_ms),
        ("prompt", t.prompt_ms),
        ("evidence", t.evidence_ms),
        ("llm_ttft", t.llm_ttft_ms),
        ("grounding", t.grounding_ms),
        ("ttft", t.ttft_ms),
        ("total", t.total_ms),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.map(|v| (name, v)))
}

/// One EMF line: the `_aws` directive names the metrics and their one dimension
/// (`Function`); tenant and request id are properties (searchable in Logs Insights, not
/// dimensions: a dimension per tenant would be a metric per tenant).
fn emf_line(function: &str, o: &Outcome<'_>) -> String {
    let mut values = Map::new();
    let mut names = Vec::new();
    let mut metric = |name: String, value: f64, unit: &str| {
        names.push(json!({"Name": name, "Unit": unit}));
        values.insert(name, json!(value));
    };
    for (stage, ms) in stages(o.timings) {
        metric(format!("{stage}_ms"), ms, "Milliseconds");
    }
    metric("tokens".into(), o.tokens as f64, "Count");
    metric(
        "prompt_tokens".into(),
        o.usage.prompt_tokens as f64,
        "Count",
    );
    metric(
        "completion_tokens".into(),
        o.usage.completion_tokens as f64,
        "Count",
    );
    if o.usage.component_calls > 0 {
        metric(
            "component_fuel".into(),
            o.usage.component_fuel as f64,
            "Count",
        );
    }
    metric(
        "cache_hit".into(),
        f64::from(u8::from(o.cache == CacheState::Hit)),
        "Count",
    );
    metric(
        "degraded".into(),
        f64::from(u8::from(!o.degraded.is_empty())),
        "Count",
    );
    metric(
        "error".into(),
        f64::from(u8::from(o.error.is_some())),
        "Count",
    );
    if let Some(ungrounded) = o.ungrounded {
        metric(
            "ungrounded".into(),
            f64::from(u8::from(ungrounded)),
            "Count",
        );
    }
    let timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut line = json!({
        "_aws": {
            "Timestamp": timestamp,
            "CloudWatchMetrics": [{
                "Namespace": EMF_NAMESPACE,
                "Dimensions": [["Function"]],
                "Metrics": names,
            }],
        },
        "Function": function,
        "tenant": o.tenant,
        "request_id": o.request_id,
    });
    if let (Value::Object(fields), Some(key)) = (&mut line, o.key) {
        fields.insert("key".into(), json!(key));
    }
    if let Value::Object(fields) = &mut line {
        fields.extend(values);
        if let Some(code) = o.error {
            fields.insert("error_code".into(), json!(code.as_str()));
        }
    }
    line.to_string()
}

/// Resident and peak resident memory in bytes, from `/proc/self/status` (Linux).
fn resident_memory() -> Option<(i64, i64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<i64>()
                    .ok()
            })
            .map(|kb| kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const USAGE: Counts = Counts {
        answers: 1,
        cache_hits: 0,
        searches: 0,
        prompt_tokens: 120,
        completion_tokens: 7,
        cached_tokens: 0,
        component_calls: 0,
        component_fuel: 0,
        ingests: 0,
        documents: 0,
        chunks: 0,
        feedback: 0,
    };

    fn outcome<'a>(timings: &'a Timings, degraded: &'a [Degraded]) -> Outcome<'a> {
        Outcome {
            tenant: "acme",
            request_id: "r1",
            timings,
            cache: CacheState::Miss,
            degraded,
            tokens: 7,
            error: None,
            key: Some("0123456789ab"),
            usage: &USAGE,
            ungrounded: Some(true),
        }
    }

    #[test]
    fn series_move_with_answers() {
        let m = Metrics::default();
        let timings = Timings {
            embed_ms: Some(3.0),
            ttft_ms: Some(12.0),
            ..Timings::default()
        };
        let degraded = vec![Degraded::RetrievalTimeout, Degraded::ComponentTimeout];
        let mut open = m.stream_opened();
        open.finish(&outcome(&timings, &degraded));
        open.finish(&outcome(&timings, &degraded));
        drop(open);
        // An answer whose component burnt fuel adds it to the counter.
        let burnt = Counts {
            component_calls: 1,
            component_fuel: 4321,
            ..USAGE
        };
        m.stream_opened().finish(&Outcome {
            usage: &burnt,
            ..outcome(&timings, &[])
        });
        m.request("/v1/answer", 200);
        let text = m.encode();
        for line in [
            "sluice_answers_total{ending=\"done\"} 2",
            "sluice_component_fuel_total 4321",
            "sluice_cache_lookups_total{result=\"miss\"} 2",
            "sluice_degraded_answers_total{reason=\"retrieval_timeout\"} 1",
            "sluice_degraded_answers_total{reason=\"component_timeout\"} 1",
            "sluice_tokens_total{source=\"llm\"} 14",
            "sluice_grounding_checks_total{verdict=\"ungrounded\"} 2",
            "sluice_stage_duration_seconds_count{stage=\"embed\"} 2",
            "sluice_http_requests_total{route=\"/v1/answer\",status=\"200\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        // A stage that did not run has no series.
        assert!(!text.contains("stage=\"rerank\""), "{text}");
        assert!(text.contains("sluice_process_resident_memory_bytes "));
        assert!(text.contains("sluice_process_open_fds "));
    }

    #[test]
    fn learning_tenants_threshold_and_bound_are_read_at_scrape_time() {
        use sluice_core::cache::{CacheSettings, SemanticCache};
        use sluice_local::MemoryCache;
        let acme = Tenant::new("acme").unwrap();
        let settings = CacheSettings {
            threshold: 0.9,
            tenant_thresholds: Default::default(),
            ttl: std::time::Duration::from_secs(60),
            budget: std::time::Duration::from_millis(50),
            explore: std::collections::HashMap::from([(acme.clone(), 0.05)]),
            error_bound: 0.01,
        };
        let cache = Arc::new(SemanticCache::new(
            Arc::new(MemoryCache::new(10)),
            settings,
            4,
        ));
        let m = Metrics::default();
        m.watch_cache(Arc::clone(&cache));
        let text = m.encode();
        assert!(
            text.contains(r#"sluice_cache_threshold{tenant="acme"} 0.9"#),
            "{text}"
        );
        assert!(
            text.contains(r#"sluice_cache_false_hit_rate_upper{tenant="acme"} 1.0"#),
            "{text}"
        );
        for _ in 0..400 {
            cache.observe(&acme, 0.85, true);
        }
        let text = m.encode();
        assert!(
            text.contains(r#"sluice_cache_threshold{tenant="acme"} 0.85"#),
            "{text}"
        );
        // Only learning tenants get a series.
        assert_eq!(text.matches("sluice_cache_threshold{").count(), 1);
    }

    #[test]
    fn active_streams_follow_guards_and_unfinished_ones_count_as_dropped() {
        let m = Metrics::default();
        let a = m.stream_opened();
        let b = m.stream_opened();
        assert!(m.encode().contains("sluice_active_streams 2"));
        assert_eq!(m.active_streams(), 2);
        drop(a);
        drop(b);
        let text = m.encode();
        assert!(text.contains("sluice_active_streams 0"), "{text}");
        assert_eq!(m.active_streams(), 0);
        assert!(
            text.contains("sluice_answers_total{ending=\"dropped\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn emf_line_names_only_metrics_it_carries() {
        let timings = Timings {
            ttft_ms: Some(12.5),
            ..Timings::default()
        };
        let line: Value = serde_json::from_str(&emf_line("answer", &outcome(&timings, &[])))
            .expect("EMF line is JSON");
        let directive = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "Sluice");
        assert_eq!(directive["Dimensions"], json!([["Function"]]));
        let names: Vec<&str> = directive["Metrics"]
            .as_array()
            .expect("metrics")
            .iter()
            .filter_map(|m| m["Name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "ttft_ms",
                "tokens",
                "prompt_tokens",
                "completion_tokens",
                "cache_hit",
                "degraded",
                "error",
                "ungrounded"
            ]
        );
        assert_eq!(line["prompt_tokens"], 120.0);
        // Every named metric has a value at the top level, as EMF requires.
        for name in names {
            assert!(line[name].is_number(), "{name} has no value in {line}");
        }
        assert_eq!(line["Function"], "answer");
        assert_eq!(line["tenant"], "acme");
        assert_eq!(line["key"], "0123456789ab");
        assert!(line["_aws"]["Timestamp"].as_u64().unwrap_or(0) > 1_600_000_000_000);
    }
}
