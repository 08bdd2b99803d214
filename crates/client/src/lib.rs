//! A typed client of a Sluice server: what the CLI, the load generator and the tests send and
//! read, in the contract's types.
//!
//! - [`Client`]: one server (and optionally one tenant) — answers as a stream of the
//!   contract's events ([`sluice_contract::sse::Event`]), documents in and out, any other
//!   route as JSON; a refusal is [`ClientError::Server`] with the server's code and message.
//! - [`key_headers`]: the key of `$SLUICE_API_KEY`, sent in `x-api-key` — not `Authorization`,
//!   which CloudFront's origin access control takes for its own signature in front of a
//!   function URL.
//! - [`json_body`]: a JSON body with its SHA-256 in `x-amz-content-sha256`, which that origin
//!   access control needs to sign a POST (a function URL accepts no unsigned payload).
//! - [`decode`]: one SSE event of an answer into its typed event.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Serialize;
use serde_json::Value;
use sluice_contract::auth::KEY_HEADER;
use sluice_contract::codes::Degraded;
use sluice_contract::components::{CallFailure, ComponentCall, ComponentVersion};
use sluice_contract::document::{Document, IngestReport};
use sluice_contract::escape;
use sluice_contract::search::Found;
use sluice_contract::sse::{Done, Event, Meta};
use sluice_contract::stages::{RerankFailure, SourceDoc};
use sluice_contract::tenant::TENANT_HEADER;

/// One line of an answer's timings for people: the client's own time to the first token, the
/// cache state, the server's stage timings, the tokens and their rate.
pub fn timings_line(client_ttft: Duration, meta: Option<&Meta>, done: &Done) -> String {
    let t = &done.timings;
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    format!(
        "client ttft {:.1} ms | cache {} | server: cache {} embed {} retrieve {} rerank {} prompt {} evidence {} llm_ttft {} ttft {} grounding {} total {} ms | {} tokens, {:.1} tok/s",
        client_ttft.as_secs_f64() * 1e3,
        meta.map_or("?", |m| m.cache.as_str()),
        f(t.cache_ms),
        f(t.embed_ms),
        f(t.retrieve_ms),
        f(t.rerank_ms),
        f(t.prompt_ms),
        f(t.evidence_ms),
        f(t.llm_ttft_ms),
        f(t.ttft_ms),
        f(t.grounding_ms),
        f(t.total_ms),
        done.token_count,
        done.tokens_per_sec,
    )
}

/// Sources for people, numbered as an answer cites them (the fused score, and the tenant's
/// component's own where it ranked them), after what was skipped and how many candidates the
/// component dropped (if anything).
fn source_lines(
    documents: &[SourceDoc],
    degraded: &[Degraded],
    dropped: Option<usize>,
    failures: Failures,
) -> Vec<String> {
    let reasons: Vec<String> = degraded.iter().map(|d| d.to_string()).collect();
    let skipped = (!reasons.is_empty()).then(|| format!("degraded: {}", reasons.join(", ")));
    let kind = |f: &RerankFailure| serde_json::to_value(f.kind).unwrap_or_default();
    let rerank = failures.0.map(|f| {
        let context: Vec<String> = (f.context.iter())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!(
            "the rerank component failed ({}): {}\n  candidates: {}{}",
            kind(&f.failure).as_str().unwrap_or("?"),
            f.failure.message,
            f.candidates.join(", "),
            match context.is_empty() {
                true => String::new(),
                false => format!("\n  context: {}", context.join(", ")),
            }
        )
    });
    let prompt = (failures.1).map(|f| {
        let kind = kind(f);
        let kind = kind.as_str().unwrap_or("?");
        format!("the prompt component failed ({kind}): {}", f.message)
    });
    let dropped = (dropped.filter(|n| *n > 0))
        .map(|n| format!("the tenant's component dropped {n} of the candidates"));
    let numbered = (documents.iter().enumerate()).map(|(i, d)| {
        let rerank = (d.rerank_score).map_or(String::new(), |r| format!(", rerank {r:.3}"));
        format!(
            "[{}] {} ({}) score {:.3}{rerank}",
            i + 1,
            d.title,
            d.source,
            d.score
        )
    });
    (skipped.into_iter())
        .chain(rerank)
        .chain(prompt)
        .chain(dropped)
        .chain(numbered)
        .collect()
}

/// Why the tenant's components failed, as a caller that manages them is told: the rerank
/// component's call and the prompt component's.
type Failures<'a> = (Option<&'a CallFailure>, Option<&'a RerankFailure>);

/// What follows a streamed answer, for people: the answer again with its unsupported facts
/// between `[[` and `]]` (when it has any), the verdict's line, the sources, and the timings
/// (`ttft` measured by the client).
pub fn done_lines(text: &str, meta: Option<&Meta>, done: &Done, ttft: Duration) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(g) = done.grounding.as_ref() {
        if !g.grounded() {
            lines.push(format!(
                "unsupported, marked: {}\n",
                g.marked(text, "[[", "]]")
            ));
        }
        lines.push(g.summary());
    }
    lines.extend(meta.iter().flat_map(|m| meta_lines(m)));
    lines.push(timings_line(ttft, meta, done));
    lines
}

/// An answer's sources for people, from its `meta` ([`source_lines`]).
pub fn meta_lines(meta: &Meta) -> Vec<String> {
    let failures = (meta.rerank_error.as_ref(), meta.prompt_error.as_ref());
    source_lines(
        &meta.documents,
        &meta.degraded,
        meta.rerank_dropped,
        failures,
    )
}

/// A search for people: its extract, its sources, and the server's time.
pub fn found_lines(found: &Found) -> Vec<String> {
    let extract = (found.extract.as_ref()).map(|x| format!("extract [{}]: {}\n", x.source, x.text));
    let total = format!(
        "server {:.1} ms",
        found.timings.total_ms.unwrap_or_default()
    );
    (extract.into_iter())
        .chain(source_lines(
            &found.documents,
            &found.degraded,
            found.rerank_dropped,
            (found.rerank_error.as_ref(), None),
        ))
        .chain([total])
        .collect()
}

/// A question of an evaluation run as it is scored (its `question` event), for people:
/// `[done/total] id:` and the scores it has.
pub fn eval_question_line(event: &Value) -> String {
    let q = &event["question"];
    let scores = [
        "recall",
        "reciprocal_rank",
        "first_source",
        "grounded",
        "error",
    ]
    .map(|key| match &q[key] {
        Value::Null => String::new(),
        Value::Number(n) => format!(" {key} {:.3}", n.as_f64().unwrap_or_default()),
        v => format!(" {key} {v}"),
    })
    .concat();
    format!(
        "[{}/{}] {}:{scores}",
        event["done"], event["total"], q["id"]
    )
}

/// An evaluation run's report for people: where it ended, each figure with its interval and
/// its change since the baseline, the counts, each stage's p50 and p99.
pub fn eval_report_lines(report: &Value) -> Vec<String> {
    let cell = |figure: &Value| match figure["value"].as_f64() {
        Some(v) => format!(
            "{v:.3} [{:.3}, {:.3}] n={}",
            figure["ci"][0].as_f64().unwrap_or(0.0),
            figure["ci"][1].as_f64().unwrap_or(0.0),
            figure["n"]
        ),
        None => "-".into(),
    };
    let (f, r) = (&report["figures"], report);
    let mut lines = vec![format!(
        "run {} of {}: {}, {} of {} questions{}",
        r["id"],
        r["set"],
        r["status"],
        r["done"],
        r["total"],
        (r["baseline"].as_str()).map_or(String::new(), |b| format!(", compared with {b}"))
    )];
    lines.push(format!("{:<14} {:<36} change", "figure", "value [95 %]"));
    for figure in ["recall", "mrr", "first_source", "grounded", "facts"] {
        let (now, change) = (cell(&f[figure]), cell(&r["versus"][figure]));
        lines.push(format!("{figure:<14} {now:<36} {change}"));
    }
    lines.push(format!(
        "unsupported facts {}, refusals {}, cache hits {}, errors {}, tokens {}",
        f["unsupported"], f["refusals"], f["cache_hits"], f["errors"], r["tokens"]
    ));
    for (stage, p) in f["stages"].as_object().into_iter().flatten() {
        lines.push(format!("{stage:<14} p50 {} ms, p99 {} ms", p[0], p[1]));
    }
    lines
}

/// A source as `GET /v1/sources` shows it, on one line: name, what it reads, its schedule,
/// and its last sync (or the one going).
pub fn source_line(shown: &Value) -> String {
    let source = &shown["source"];
    let what = match (&source["website"], &source["s3"]) {
        (Value::Object(site), _) => {
            let first = site
                .get("sitemap")
                .or_else(|| site.get("start").and_then(|s| s.get(0)));
            format!("website {}", first.and_then(Value::as_str).unwrap_or(""))
        }
        (_, Value::Object(s3)) => format!(
            "s3://{}/{}",
            s3.get("bucket").and_then(Value::as_str).unwrap_or(""),
            s3.get("prefix").and_then(Value::as_str).unwrap_or("")
        ),
        _ => String::new(),
    };
    let every =
        (source["every_minutes"].as_u64()).map_or("manual".into(), |m| format!("every {m} min"));
    let last = match (&shown["syncing"], &shown["last_sync"]) {
        (Value::Object(going), _) => format!("syncing since {}", going["started_at"]),
        (_, Value::Object(_)) => sync_summary(&shown["last_sync"]),
        _ => "never synced".into(),
    };
    format!(
        "{}\t{what}\t{every}\t{last}",
        shown["name"].as_str().unwrap_or("")
    )
}

/// A source from `sluice sources put`'s flags: a website from `site` (start pages; a URL
/// ending in `.xml` or `.xml.gz` is its sitemap) or an S3 prefix from `s3`
/// (`s3://bucket/prefix`), synced every `every` minutes if set.
pub fn source_from(site: &[String], s3: Option<&str>, every: Option<u32>) -> Result<Value, String> {
    let mut source = match s3 {
        Some(uri) => {
            let place = uri
                .strip_prefix("s3://")
                .ok_or("--s3 is s3://bucket/prefix")?;
            let (bucket, prefix) = place.split_once('/').unwrap_or((place, ""));
            serde_json::json!({"s3": {"bucket": bucket, "prefix": prefix}})
        }
        None if site.is_empty() => return Err("name what to read: --site, --s3 or --file".into()),
        None => {
            let is_map = |u: &&String| u.ends_with(".xml") || u.ends_with(".xml.gz");
            let (maps, start): (Vec<&String>, Vec<&String>) = site.iter().partition(is_map);
            if maps.len() > 1 {
                return Err("one sitemap a source (an index may list more)".into());
            }
            let mut site = serde_json::json!({ "start": start });
            if let Some(map) = maps.first() {
                site["sitemap"] = serde_json::json!(map);
            }
            serde_json::json!({ "website": site })
        }
    };
    if let Some(every) = every {
        source["every_minutes"] = every.into();
    }
    Ok(source)
}

/// A sync's `item` event for people: the outcome, the page or object, and why.
pub fn sync_item_line(item: &Value) -> String {
    let why = (item["reason"].as_str()).map_or(String::new(), |r| format!(" ({r})"));
    let outcome = item["outcome"].as_str().unwrap_or("");
    format!("{outcome:<9} {}{why}", item["item"].as_str().unwrap_or(""))
}

/// A sync's report in a line: how it ended and what it did.
pub fn sync_summary(report: &Value) -> String {
    format!(
        "{} {}: {} added, {} changed, {} unchanged, {} deleted, {} failed ({} ms)",
        report["id"].as_str().unwrap_or(""),
        report["status"].as_str().unwrap_or(""),
        report["added"],
        report["changed"],
        report["unchanged"],
        report["deleted"],
        report["failures"],
        report["ms"]
    )
}

/// A sync's report for people: its summary, what it skipped, why it stopped or failed, and
/// the failures it lists.
pub fn sync_report_lines(report: &Value) -> Vec<String> {
    let skipped = &report["skipped"];
    let mut lines = vec![
        sync_summary(report),
        format!(
            "listed {}, read {} bytes; skipped: {} by robots.txt, {} noindex, {} redirects, {} past a cap, {} too deep",
            report["listed"],
            report["bytes"],
            skipped["robots"],
            skipped["noindex"],
            skipped["redirects"],
            skipped["caps"],
            skipped["depth"]
        ),
    ];
    for key in ["cut", "error"] {
        if let Some(why) = report[key].as_str() {
            lines.push(format!("{key}: {why}"));
        }
    }
    let batches = &report["batches"];
    if batches.is_object() {
        lines.push(format!(
            "batches: {} of {} read (follow it with `sluice sources syncs`)",
            batches["read"], batches["sent"]
        ));
    }
    for failure in report["failed"].as_array().into_iter().flatten() {
        lines.push(format!("failed {}: {}", failure["item"], failure["reason"]));
    }
    lines
}

/// What a quality gate's run says (an activation's or a settings change's `quality`, or the
/// `details` of its refusal), for people: each figure it held with its change and interval,
/// what it refused, and the questions that lost most.
pub fn gate_lines(quality: &Value) -> Vec<String> {
    let mut lines = vec![format!(
        "quality gate: set {} (run {})",
        quality["set"], quality["run"]
    )];
    for (figure, change) in quality["versus"].as_object().into_iter().flatten() {
        lines.push(format!(
            "  {figure}: {:+.3} [{:+.3}, {:+.3}] over {} questions (live {:.3})",
            change["value"].as_f64().unwrap_or(0.0),
            change["ci"][0].as_f64().unwrap_or(0.0),
            change["ci"][1].as_f64().unwrap_or(0.0),
            change["n"],
            quality["live"][figure]["value"].as_f64().unwrap_or(0.0),
        ));
    }
    for refused in quality["refused"].as_array().into_iter().flatten() {
        lines.push(format!(
            "  refused: {} may drop by {} at most",
            refused["figure"], refused["max_drop"]
        ));
    }
    for q in quality["worst"].as_array().into_iter().flatten() {
        lines.push(format!("  lost most: {} {}", q["id"], q["question"]));
    }
    lines
}

/// A tenant's usage (`GET /v1/usage`), for people: the period, then a tab-separated table of
/// the counters a day and in total, and one per key when the usage has them.
pub fn usage_lines(usage: &Value) -> Vec<String> {
    let columns = sluice_contract::usage::Counts::FIELDS;
    let line = |label: &str, row: &Value| {
        let cells: Vec<String> = (columns.iter())
            .map(|c| row[*c].as_u64().unwrap_or(0).to_string())
            .collect();
        format!("{label}\t{}", cells.join("\t"))
    };
    let table = |label: &str, block: &Value, lines: &mut Vec<String>| {
        lines.push(format!("{label}\t{}", columns.join("\t")));
        for day in block["days"].as_array().into_iter().flatten() {
            lines.push(line(day["day"].as_str().unwrap_or("?"), day));
        }
        lines.push(line("total", &block["total"]));
    };
    let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let mut lines = vec![format!(
        "tenant {} from {} to {}",
        text(&usage["tenant"]),
        text(&usage["from"]),
        text(&usage["to"])
    )];
    table("day", usage, &mut lines);
    for key in usage["keys"].as_array().into_iter().flatten() {
        lines.push(String::new());
        let label = format!("key {}", key["key"].as_str().unwrap_or("(none)"));
        table(&label, key, &mut lines);
    }
    lines
}

/// What the corpus does not answer (`GET /v1/insights/gaps`), for people: a line per group
/// of similar questions — how many times, why — with its questions under it, then the count
/// of those whose text the tenant keeps no longer.
pub fn gap_lines(gaps: &Value) -> Vec<String> {
    let reasons = |r: &Value| {
        let each = (r.as_object().into_iter().flatten()).map(|(why, n)| format!("{why} {n}"));
        each.collect::<Vec<_>>().join(", ")
    };
    let mut lines = Vec::new();
    for gap in gaps["gaps"].as_array().into_iter().flatten() {
        lines.push(format!(
            "{} times ({})",
            gap["count"],
            reasons(&gap["reasons"])
        ));
        for q in gap["questions"].as_array().into_iter().flatten() {
            lines.push(format!("  {}", q.as_str().unwrap_or("?")));
        }
    }
    let unkept = &gaps["unkept"];
    if unkept["count"].as_u64().unwrap_or(0) > 0 {
        lines.push(format!(
            "{} more whose text is not kept ({}; question_retention_days {})",
            unkept["count"],
            reasons(&unkept["reasons"]),
            gaps["retention_days"]
        ));
    }
    lines
}

/// The tenant's ratings (`GET /v1/feedback`), for people: a line each — when, up or down,
/// the question, the source it should have come from, the comment (tab-separated; `-` for
/// what is absent).
pub fn feedback_lines(listed: &Value) -> Vec<String> {
    let or_dash = |v: &Value| v.as_str().unwrap_or("-").to_string();
    let line = |rating: &Value| {
        [
            or_dash(&rating["at"]),
            or_dash(&rating["rating"]),
            or_dash(&rating["answer"]["question"]),
            or_dash(&rating["expected_source"]),
            or_dash(&rating["comment"]),
        ]
        .join("\t")
    };
    listed["feedback"]
        .as_array()
        .into_iter()
        .flatten()
        .map(line)
        .collect()
}

/// One line of a document listing for people: id, chunks, when ingested, title (tab-separated;
/// `-` for what is absent).
pub fn document_line(d: &Value) -> String {
    let or_dash = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    format!(
        "{}\t{}\t{}\t{}",
        or_dash(&d["id"]),
        or_dash(&d["chunks"]),
        or_dash(&d["ingested_at"]),
        or_dash(&d["title"])
    )
}

/// The variable a client reads its key from.
pub const API_KEY_VAR: &str = "SLUICE_API_KEY";
/// The header that carries a request body's SHA-256 (lowercase hex); Sluice itself does not
/// read it.
pub const CONTENT_SHA256_HEADER: &str = "x-amz-content-sha256";

/// Connecting to a server: a local one or one in the same region.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Between two reads of a response: a slow model may pause between tokens.
const READ_TIMEOUT: Duration = Duration::from_secs(120);
/// A whole request that is not an answer stream.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// A batch of documents: embedding thousands of chunks takes minutes on a small machine.
const INGEST_TIMEOUT: Duration = Duration::from_secs(600);

/// What went wrong talking to a server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The HTTP client could not be built (a key that is not a header value).
    #[error("building the HTTP client: {0}")]
    Build(String),
    /// No answer from the server, or the connection broke.
    #[error("connecting to {url}: {message} (is the server running?)")]
    Connect {
        /// The server.
        url: String,
        /// What failed.
        message: String,
    },
    /// The server refused: its status, and its error's code and message (and, for a quality
    /// gate's refusal, the comparison's lines).
    #[error("server answered {status}: {message} ({code}){}", details.iter().map(|l| format!("\n  {l}")).collect::<String>())]
    Server {
        /// The HTTP status.
        status: u16,
        /// The error's code (`?` when the body was not Sluice's error).
        code: String,
        /// The error's message.
        message: String,
        /// What `error.details` says, for people ([`gate_lines`] of a quality gate's).
        details: Vec<String>,
    },
    /// The answer's stream broke or carried what is not an event of the contract.
    #[error("reading the answer stream: {0}")]
    Stream(String),
    /// A successful answer whose body is not the JSON this client expects (another server at
    /// that address, or a version this client does not know).
    #[error("reading the answer of {url}: {message}")]
    Body {
        /// The server.
        url: String,
        /// What could not be read.
        message: String,
    },
}

/// Documents per POST of [`Client::ingest_batched`].
pub const BATCH_DOCS: usize = 32;
/// Bytes of text per POST of [`Client::ingest_batched`] (under the server's default 16 MiB
/// cap).
pub const BATCH_BYTES: usize = 4 << 20;

/// What a batched ingest wrote ([`Client::ingest_batched`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ingested {
    /// Chunks written.
    pub chunks: u64,
    /// Documents the tenant already held as sent.
    pub unchanged: u64,
    /// The tenant's corpus version after the last batch.
    pub corpus_version: u64,
}

/// Headers with the key of `$SLUICE_API_KEY` in `x-api-key` when the variable is set (and a
/// valid header value), none otherwise.
pub fn key_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Ok(key) = std::env::var(API_KEY_VAR)
        && let Ok(mut value) = HeaderValue::from_str(key.trim())
        && !value.is_empty()
    {
        value.set_sensitive(true);
        headers.insert(KEY_HEADER, value);
    }
    headers
}

/// A JSON body as Sluice's clients send it: the bytes and their headers (`content-type`, and
/// the body's SHA-256 in [`CONTENT_SHA256_HEADER`]), so that a deployment behind CloudFront
/// takes it as it is.
pub fn json_body(body: &impl Serialize) -> (HeaderMap, Vec<u8>) {
    // A `Serialize` of the contract's types and JSON values cannot fail.
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(hash) = HeaderValue::from_str(&sluice_contract::sha256_hex(&bytes)) {
        headers.insert(CONTENT_SHA256_HEADER, hash);
    }
    (headers, bytes)
}

/// One SSE event of an answer (`event:` name, `data:` text) as the contract's event; `None`
/// for a name this client does not know (a newer server's), which a reader skips.
pub fn decode(name: &str, data: &str) -> Result<Option<Event>, ClientError> {
    Event::decode(name, data)
        .map_err(|e| ClientError::Stream(format!("a {name} event that is not one ({e}): {data}")))
}

/// A server's answer stream, decoded: ends after `done` or `error`, or with the connection.
pub type Events = BoxStream<'static, Result<Event, ClientError>>;

/// What an answer request carries beside the question: `POST /v1/answer`'s optional fields.
#[derive(Debug, Default, Clone)]
pub struct AnswerOptions {
    /// `k`: how many sources.
    pub k: Option<usize>,
    /// `retrieval_deadline_ms`.
    pub deadline_ms: Option<u64>,
    /// `cache: bypass`: neither read nor write the answer cache.
    pub no_cache: bool,
    /// `filter`: a metadata filter (a JSON object).
    pub filter: Option<Value>,
    /// `rerank_context`: what the tenant's component is told (a JSON object of strings).
    pub rerank_context: Option<Value>,
}

impl AnswerOptions {
    /// Options from a command line's flags, `filter` and `rerank_context` read as JSON
    /// objects (the message names the flag and shows an example).
    pub fn from_flags(
        k: Option<usize>,
        deadline_ms: Option<u64>,
        filter: Option<&str>,
        rerank_context: Option<&str>,
    ) -> Result<Self, String> {
        let object = |flag: &str, text: Option<&str>, example: &str| {
            let Some(text) = text else { return Ok(None) };
            match serde_json::from_str::<Value>(text) {
                Ok(v) if v.is_object() => Ok(Some(v)),
                Ok(_) => Err(format!("{flag} must be a JSON object, such as {example}")),
                Err(e) => Err(format!(
                    "{flag} is not JSON ({e}); write a JSON object, such as {example}"
                )),
            }
        };
        Ok(Self {
            k,
            deadline_ms,
            no_cache: false,
            filter: object("--filter", filter, r#"'{"year": {"$gte": 2025}}'"#)?,
            rerank_context: object(
                "--rerank-context",
                rerank_context,
                r#"'{"plan": "premium"}'"#,
            )?,
        })
    }

    /// The request body asking `query` with these options.
    pub fn body(&self, query: &str) -> Value {
        let mut body = serde_json::json!({ "query": query });
        if self.no_cache {
            body["cache"] = "bypass".into();
        }
        if let Some(k) = self.k {
            body["k"] = k.into();
        }
        if let Some(d) = self.deadline_ms {
            body["retrieval_deadline_ms"] = d.into();
        }
        if let Some(f) = &self.filter {
            body["filter"] = f.clone();
        }
        if let Some(c) = &self.rerank_context {
            body["rerank_context"] = c.clone();
        }
        body
    }
}

/// One Sluice server, as one tenant (or the key's own).
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    tenant: Option<String>,
    /// The end user's token, sent in `x-sluice-user`.
    user: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// A client of the server at `base` (`http://127.0.0.1:8080`), with the key of
    /// `$SLUICE_API_KEY` when set.
    pub fn new(base: &str) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .default_headers(key_headers())
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .build()
            .map_err(|e| ClientError::Build(e.to_string()))?;
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            tenant: None,
            user: None,
            http,
        })
    }

    /// The same client, naming `tenant` in `x-sluice-tenant` (`None`: the key's own, or the
    /// server's default with auth off).
    pub fn for_tenant(mut self, tenant: Option<&str>) -> Self {
        self.tenant = tenant.map(str::to_string);
        self
    }

    /// The same client acting for the end user whose token (a JWT from the tenant's
    /// identity provider) is `token`: answers and listings are then only what they may see.
    pub fn for_user(mut self, token: Option<&str>) -> Self {
        self.user = token.map(|t| t.trim().to_string());
        self
    }

    /// `POST /v1/answer` with `body`: the stream of its events, once the server has accepted
    /// it (a refusal before the stream is [`ClientError::Server`]).
    pub async fn answer(&self, body: &impl Serialize) -> Result<Events, ClientError> {
        let events = self.post_events("/v1/answer", body).await?;
        let decoded = events.filter_map(|event| async move {
            match event {
                Ok((name, data)) => decode(&name, &data).transpose(),
                Err(e) => Some(Err(e)),
            }
        });
        Ok(decoded.boxed())
    }

    /// `POST path` with `body`, answered as `text/event-stream`: each event's name and data,
    /// once the server has accepted it (a refusal is [`ClientError::Server`]). An evaluation
    /// run (`/v1/evals/runs`) is read this way.
    pub async fn post_events(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<BoxStream<'static, Result<(String, String), ClientError>>, ClientError> {
        use eventsource_stream::Eventsource;
        let (headers, bytes) = json_body(body);
        let request = self.request(reqwest::Method::POST, path);
        let response = self.send(request.headers(headers).body(bytes)).await?;
        let events = response
            .bytes_stream()
            .eventsource()
            .map(|event| match event {
                Ok(event) => Ok((event.event, event.data)),
                Err(e) => Err(ClientError::Stream(e.to_string())),
            });
        Ok(events.boxed())
    }

    /// `POST /v1/search` with `body` (an answer's retrieval fields): the sources found.
    pub async fn search(&self, body: &Value) -> Result<Found, ClientError> {
        let (headers, bytes) = json_body(body);
        let request = self.request(reqwest::Method::POST, "/v1/search");
        let request = request
            .timeout(REQUEST_TIMEOUT)
            .headers(headers)
            .body(bytes);
        let response = self.send(request).await?;
        self.read(response).await
    }

    /// `POST /v1/documents` with `documents`: what the server wrote.
    pub async fn ingest(&self, documents: &[Document]) -> Result<IngestReport, ClientError> {
        let (headers, bytes) = json_body(&serde_json::json!({ "documents": documents }));
        let request = self.request(reqwest::Method::POST, "/v1/documents");
        let request = request.timeout(INGEST_TIMEOUT).headers(headers).body(bytes);
        let response = self.send(request).await?;
        self.read(response).await
    }

    /// `documents` sent in order, in batches of at most [`BATCH_DOCS`] documents and
    /// [`BATCH_BYTES`] of text (under the server's default body cap); `sent` hears of each
    /// batch: how many documents it held, and what has been written so far.
    pub async fn ingest_batched(
        &self,
        documents: Vec<Document>,
        mut sent: impl FnMut(usize, &Ingested),
    ) -> Result<Ingested, ClientError> {
        let mut total = Ingested::default();
        let (mut batch, mut bytes) = (Vec::new(), 0);
        let mut pending = documents.into_iter().peekable();
        while let Some(doc) = pending.next() {
            bytes += doc.text.len() + doc.sections.iter().map(|s| s.text.len()).sum::<usize>();
            batch.push(doc);
            if batch.len() < BATCH_DOCS && bytes < BATCH_BYTES && pending.peek().is_some() {
                continue;
            }
            let report = self.ingest(&batch).await?;
            total.chunks += report.chunks as u64;
            total.unchanged += report.unchanged as u64;
            total.corpus_version = report.corpus_version;
            sent(batch.len(), &total);
            batch.clear();
            bytes = 0;
        }
        Ok(total)
    }

    /// `GET` of `path` (with its query, values [`escape`]d): the JSON answer.
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// `POST` of `body` to `path`: the JSON answer.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// Runs an evaluation set (`POST /v1/evals/runs` with `body`), telling `progress` each
    /// event before the report (`run`, then each `question`): the report. A run that ends
    /// with `error` is [`ClientError::Stream`] with its message.
    pub async fn run_eval(
        &self,
        body: &Value,
        progress: &mut (dyn FnMut(&str, &Value) + Send),
    ) -> Result<Value, ClientError> {
        self.run_to_report("/v1/evals/runs", body, progress).await
    }

    /// Syncs the tenant's source `name` (`POST /v1/sources/{name}/sync`), telling `progress`
    /// each event before the report (`sync`, then an `item` per page or object): the report.
    pub async fn sync_source(
        &self,
        name: &str,
        progress: &mut (dyn FnMut(&str, &Value) + Send),
    ) -> Result<Value, ClientError> {
        let path = format!("/v1/sources/{}/sync", escape(name));
        self.run_to_report(&path, &Value::Null, progress).await
    }

    /// `POST path` answered as a stream that ends with `report` (or `error`): the report,
    /// `progress` told each event before it.
    async fn run_to_report(
        &self,
        path: &str,
        body: &Value,
        progress: &mut (dyn FnMut(&str, &Value) + Send),
    ) -> Result<Value, ClientError> {
        let mut events = self.post_events(path, body).await?;
        while let Some(event) = events.next().await {
            let (name, data) = event?;
            let data: Value =
                serde_json::from_str(&data).map_err(|e| ClientError::Stream(e.to_string()))?;
            match name.as_str() {
                "report" => return Ok(data),
                "error" => {
                    return Err(ClientError::Stream(format!(
                        "it failed: {}",
                        data["message"]
                    )));
                }
                _ => progress(&name, &data),
            }
        }
        Err(ClientError::Stream(
            "the stream ended without its report".into(),
        ))
    }

    /// `PUT` of `body` to `path`: the JSON answer.
    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.call(reqwest::Method::PUT, path, Some(body)).await
    }

    /// `DELETE` of `path`, with `body` when given: the JSON answer.
    pub async fn delete(&self, path: &str, body: Option<&Value>) -> Result<Value, ClientError> {
        self.call(reqwest::Method::DELETE, path, body).await
    }

    /// `method` on `path` with the JSON `body` when given, under the request timeout: the
    /// JSON answer.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let mut request = self.request(method, path).timeout(REQUEST_TIMEOUT);
        if let Some(body) = body {
            let (headers, bytes) = json_body(body);
            request = request.headers(headers).body(bytes);
        }
        let response = self.send(request).await?;
        self.read(response).await
    }

    /// `GET /v1/documents`: one page of the tenant's documents (up to 1,000) passing
    /// `filter` (JSON text, sent as the server reads it), from `cursor` on.
    pub async fn documents(
        &self,
        filter: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<Value, ClientError> {
        let mut query = "limit=1000".to_string();
        if let Some(f) = filter {
            query += &format!("&filter={}", escape(f));
        }
        if let Some(c) = cursor {
            query += &format!("&cursor={}", escape(c));
        }
        self.get(&format!("/v1/documents?{query}")).await
    }

    /// Every page of the tenant's documents passing `filter`, each document handed to `each`
    /// in order: how many there were.
    pub async fn each_document(
        &self,
        filter: Option<&str>,
        each: &mut (dyn FnMut(&Value) + Send),
    ) -> Result<usize, ClientError> {
        let (mut cursor, mut count) = (None::<String>, 0);
        loop {
            let page = self.documents(filter, cursor.as_deref()).await?;
            for d in page["documents"].as_array().into_iter().flatten() {
                count += 1;
                each(d);
            }
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => return Ok(count),
            }
        }
    }

    /// `DELETE /v1/documents` with `selection` (`{"filter": …}` or `{"all": true}`),
    /// confirmed and called again while the server says there are `more` (a thousand per
    /// call); `progress` hears the count so far after each call but the last. The last answer,
    /// its `deleted` the total.
    pub async fn delete_documents(
        &self,
        selection: &Value,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Value, ClientError> {
        let mut body = selection.clone();
        body["confirm"] = Value::Bool(true);
        let mut total = 0;
        loop {
            let mut report = self.delete("/v1/documents", Some(&body)).await?;
            total += report["deleted"].as_u64().unwrap_or(0);
            if report["more"] != true {
                report["deleted"] = total.into();
                return Ok(report);
            }
            progress(total);
        }
    }

    /// `GET /v1/usage` from `from` to `to` (`YYYY-MM-DD`; the server's default: this month
    /// so far), per key as well with `keys`.
    pub async fn usage(
        &self,
        from: Option<&str>,
        to: Option<&str>,
        keys: bool,
    ) -> Result<Value, ClientError> {
        let mut query = vec![];
        if let Some(from) = from {
            query.push(format!("from={}", escape(from)));
        }
        if let Some(to) = to {
            query.push(format!("to={}", escape(to)));
        }
        if keys {
            query.push("keys=true".to_string());
        }
        self.get(&format!("/v1/usage?{}", query.join("&"))).await
    }

    /// `PUT /v1/settings` with `settings`: the tenant's settings as stored, with their new
    /// version.
    pub async fn put_settings(&self, settings: &Value) -> Result<Value, ClientError> {
        self.put("/v1/settings", settings).await
    }

    /// The tenant's settings read (`GET /v1/settings`), changed by `change`, and stored
    /// (`PUT`): the others kept as they were. The stored settings, with their new version.
    pub async fn update_settings(
        &self,
        change: impl FnOnce(&mut Value),
    ) -> Result<Value, ClientError> {
        let mut settings = self.get("/v1/settings").await?["settings"].take();
        change(&mut settings);
        self.put_settings(&settings).await
    }

    /// `PUT /v1/components/{kind}` of a component's bytes, named `label` when given: the
    /// version as stored.
    pub async fn upload_component(
        &self,
        kind: &str,
        bytes: Vec<u8>,
        label: Option<&str>,
    ) -> Result<ComponentVersion, ClientError> {
        let mut path = format!("/v1/components/{kind}");
        if let Some(label) = label {
            path += &format!("?label={}", escape(label));
        }
        let request = self.request(reqwest::Method::PUT, &path);
        let response = self
            .send(request.timeout(INGEST_TIMEOUT).body(bytes))
            .await?;
        self.read(response).await
    }

    /// `POST /v1/components/{kind}/activate` of `version` (with `gate_run`: the id of a run of
    /// the tenant's quality gate that tried it, made where answers are served).
    pub async fn activate_component(
        &self,
        kind: &str,
        version: &str,
        gate_run: Option<&str>,
    ) -> Result<(ComponentVersion, Option<Value>), ClientError> {
        let path = format!("/v1/components/{kind}/activate");
        let mut body = serde_json::json!({ "version": version });
        if let Some(run) = gate_run {
            body["gate_run"] = run.into();
        }
        let mut value = self.call(reqwest::Method::POST, &path, Some(&body)).await?;
        let quality = value.get_mut("quality").map(Value::take);
        Ok((self.value(value)?, quality))
    }

    /// `GET /v1/components/{kind}/{version}/logs`: the version's last calls that logged or
    /// failed, newest first.
    pub async fn component_logs(
        &self,
        kind: &str,
        version: &str,
    ) -> Result<Vec<ComponentCall>, ClientError> {
        let mut logs = self
            .get(&format!("/v1/components/{kind}/{version}/logs"))
            .await?;
        self.value(logs["calls"].take())
    }

    /// A JSON answer as the type this client expects.
    fn value<T: serde::de::DeserializeOwned>(&self, value: Value) -> Result<T, ClientError> {
        serde_json::from_value(value).map_err(|e| ClientError::Body {
            url: self.base.clone(),
            message: e.to_string(),
        })
    }

    /// `GET /readyz`: its HTTP status and the server's report of its parts (`None` when it
    /// answered without JSON: not a Sluice server).
    pub async fn ready(&self) -> Result<(u16, Option<Value>), ClientError> {
        let request = self.request(reqwest::Method::GET, "/readyz");
        let response =
            (request.timeout(REQUEST_TIMEOUT).send().await).map_err(|e| self.connect(e))?;
        let status = response.status().as_u16();
        Ok((status, response.json().await.ok()))
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(tenant) = &self.tenant {
            request = request.header(TENANT_HEADER, tenant);
        }
        match &self.user {
            Some(token) => request.header(sluice_contract::access::USER_HEADER, token),
            None => request,
        }
    }

    /// Sends `request`; a status other than success is the server's error.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        let response = request.send().await.map_err(|e| self.connect(e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let text = |v: &Value, or: &str| v.as_str().unwrap_or(or).to_string();
        Err(ClientError::Server {
            status,
            code: text(&body["error"]["code"], "?"),
            message: text(&body["error"]["message"], "(no Sluice error in the body)"),
            details: match &body["error"]["details"] {
                Value::Null => Vec::new(),
                details => gate_lines(details),
            },
        })
    }

    async fn read<T: serde::de::DeserializeOwned>(
        &self,
        response: reqwest::Response,
    ) -> Result<T, ClientError> {
        response.json().await.map_err(|e| match e.is_decode() {
            true => ClientError::Body {
                url: self.base.clone(),
                message: e.to_string(),
            },
            false => self.connect(e),
        })
    }

    fn connect(&self, e: reqwest::Error) -> ClientError {
        ClientError::Connect {
            url: self.base.clone(),
            message: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests;
