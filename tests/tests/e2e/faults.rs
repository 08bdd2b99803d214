//! Fault injection: each fault on 127.0.0.1 — the vector store slow, failing or unreachable,
//! its corpus-version reads slow, the tenant's component storage slow to answer or to hand
//! over a component, a component flooding the host with work, the LLM refusing connections,
//! answering 5xx, stalling before or during the stream, cutting the stream, sending garbage or
//! a line without end, or taking long to its first token, the answer cache failing — must end
//! the answer in a degraded answer (`meta.degraded` says why, then `done`) or a clean `error`
//! event (code and `retryable` right), within its limit. Never a hang, never a stream that
//! just stops.
//!
//! Elsewhere: the client going away cancels the upstream request (`disconnect.rs`), DynamoDB
//! dying under a running `sluice serve` (`crates/cli/tests/cli.rs`), a failing rerank
//! component (`components.rs`), the stream deadline and shutdown (`endings.rs`).

use sluice_testkit::tenant;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_tests::Parts;
use sluice_tests::REVERSE;
use sluice_tests::stand_in::{Llm, llm};
use sluice_tests::{
    BrokenCache, SlowComponents, Troubled, closed_llm_url, component_folder, start_adjusted,
    use_registry,
};

/// How an answer under a fault must end.
enum Ending {
    /// `meta.degraded` holds these reasons, tokens stream, then `done`.
    Degraded(&'static [&'static str]),
    /// `done` with nothing degraded (a fault the answer must not even show).
    Done,
    /// `done` with nothing degraded, with at least this many keep-alive comments before it.
    DoneKeptAlive(usize),
    /// An `error` event with this code and `retryable`, after `tokens` tokens.
    Error(&'static str, bool, usize),
}

/// Changes a server's stages before it serves: the test doubles of a fault.
type Adjust = Box<dyn FnOnce(&mut Parts) + Send>;

struct Fault {
    name: &'static str,
    overrides: Vec<(&'static str, String)>,
    adjust: Option<Adjust>,
    /// Ingest the samples first (for faults that show only with documents to retrieve).
    ingest: bool,
    /// Activate this component for the tenant first.
    component: Option<&'static str>,
    ending: Ending,
    /// The closing `error` must arrive before this; in a degraded or normal answer, `meta`
    /// must (the first token, with [`Fault::timed_to_first_token`]).
    within: Duration,
    /// `within` holds for the first token (the LLM is a fast stand-in), not only `meta`.
    first_token: bool,
}

impl Fault {
    fn new(name: &'static str, ending: Ending, within: Duration) -> Self {
        Self {
            name,
            overrides: Vec::new(),
            adjust: None,
            ingest: false,
            component: None,
            ending,
            within,
            first_token: false,
        }
    }

    /// The first token, not only `meta`, must come within the limit: the LLM is a stand-in
    /// that answers at once, so what is measured is Sluice.
    async fn timed_to_first_token(mut self) -> Self {
        self.overrides
            .extend(stand_in_timeouts(llm(Llm::Tokens(5)).await));
        self.first_token = true;
        self
    }

    fn with(mut self, overrides: Vec<(&'static str, String)>) -> Self {
        self.overrides.extend(overrides);
        self
    }

    fn adjusted(mut self, adjust: impl FnOnce(&mut Parts) + Send + 'static) -> Self {
        self.adjust = Some(Box::new(adjust));
        self.ingest = true;
        self
    }

    fn reranked_by(mut self, component: &'static str) -> Self {
        self.component = Some(component);
        self.ingest = true;
        self
    }
}

/// The retrieval deadline of the faults that are about it (timed against
/// [`within_deadline`]).
const DEADLINE: (&str, &str) = ("SLUICE_RETRIEVAL_DEADLINE_MS", "150");
/// The deadline of every other fault: one that no load on the test machine reaches, so that
/// what such a fault asserts — its own reasons, or none — is not joined by a
/// `retrieval_timeout` of a busy machine's.
const NO_DEADLINE: (&str, &str) = ("SLUICE_RETRIEVAL_DEADLINE_MS", "30000");

/// The limit of a fault that must not wait past the retrieval deadline: the deadline and
/// what a fast stand-in adds.
fn within_deadline() -> Duration {
    Duration::from_millis(150) + MARGIN
}
/// How far past the deadline a fast stand-in's first token may come: the prompt, the LLM
/// call on loopback, and the test machine's own noise.
const MARGIN: Duration = Duration::from_millis(350);

/// Short LLM timeouts, so that the stalls are found in a second. Only for the stand-ins: the
/// real local model's prefill of a prompt with sources can take longer than this on a loaded
/// machine.
fn stand_in_timeouts(url: String) -> Vec<(&'static str, String)> {
    vec![
        ("SLUICE_LLM_URL", url),
        ("SLUICE_LLM_FIRST_TOKEN_TIMEOUT_MS", "800".into()),
        ("SLUICE_LLM_IDLE_TIMEOUT_MS", "500".into()),
    ]
}

/// The store wrapped in a [`Troubled`] double set by `trouble`.
fn troubled(
    trouble: impl FnOnce(&mut Troubled) + Send + 'static,
) -> impl FnOnce(&mut Parts) + Send {
    move |p: &mut Parts| {
        let mut store = Troubled::around(p.store.take().expect("a store"));
        trouble(&mut store);
        p.store = Some(Arc::new(store));
    }
}

/// The component storage (the server's folder) behind a [`SlowComponents`] double.
fn slow_components(pointer: Duration, fetch: Duration) -> impl FnOnce(&mut Parts) + Send {
    move |p: &mut Parts| {
        let storage = SlowComponents::around(component_folder(p));
        storage
            .pointer_ms
            .store(pointer.as_millis() as u64, Ordering::SeqCst);
        storage
            .fetch_ms
            .store(fetch.as_millis() as u64, Ordering::SeqCst);
        use_registry(p, Arc::new(storage));
    }
}

/// `host_calls.wat` (the sandbox's host-call component) with `flood` run on real requests.
fn host_calls(flood: &str) -> String {
    let template = include_str!("../../../crates/rerank/tests/host_calls.wat");
    template.replace("(nop) ;; flood", flood)
}

async fn faults() -> Vec<Fault> {
    let llm_at = stand_in_timeouts;
    let secs = Duration::from_secs;
    let within_deadline = within_deadline();
    vec![
        Fault::new(
            "vector store slow (5 s, deadline 150 ms)",
            Ending::Degraded(&["retrieval_timeout"]),
            within_deadline,
        )
        .adjusted(troubled(move |s| s.delay = secs(5))),
        Fault::new(
            "vector store failing",
            Ending::Degraded(&["retrieval_failed"]),
            secs(3),
        )
        .adjusted(troubled(move |s| s.fail = true)),
        Fault::new(
            "remote vector store unreachable (Qdrant, closed port)",
            // Its corpus-version read fails too: the cache is skipped.
            Ending::Degraded(&["corpus_version_failed", "retrieval_failed"]),
            secs(3),
        )
        .with(vec![
            ("SLUICE_STORE", "qdrant".into()),
            (
                "SLUICE_QDRANT_URL",
                closed_llm_url().trim_end_matches("/v1").into(),
            ),
        ]),
        Fault::new(
            "corpus version slow (5 s; cache budget 50 ms)",
            Ending::Degraded(&["corpus_version_timeout"]),
            within_deadline,
        )
        .timed_to_first_token()
        .await
        .adjusted(troubled(move |s| s.version_delay = secs(5))),
        Fault::new(
            "component storage slow (5 s pointer read, tenant not seen yet)",
            Ending::Degraded(&["component_timeout"]),
            within_deadline,
        )
        .timed_to_first_token()
        .await
        .adjusted(slow_components(secs(5), Duration::ZERO)),
        Fault::new(
            "component fetch slow (5 s artefact read, tenant not seen yet)",
            Ending::Degraded(&["component_timeout"]),
            within_deadline,
        )
        .timed_to_first_token()
        .await
        .reranked_by(REVERSE)
        .adjusted(slow_components(Duration::ZERO, secs(5))),
        Fault::new(
            "component storage slow, cache off (5 s, deadline 150 ms)",
            Ending::Degraded(&["component_timeout"]),
            within_deadline,
        )
        .timed_to_first_token()
        .await
        .with(vec![("SLUICE_CACHE", "off".into())])
        .adjusted(slow_components(secs(5), Duration::ZERO)),
        Fault::new(
            "component floods count-tokens (8 MiB × 10)",
            Ending::Degraded(&["rerank_failed"]),
            within_deadline,
        )
        .timed_to_first_token()
        .await
        .reranked_by(COUNT_FLOOD),
        Fault::new(
            "component floods embed (64 × 8 KiB, then 8 × 8,000 B eight times)",
            Ending::Degraded(&["rerank_failed"]),
            within_deadline,
        )
        .timed_to_first_token()
        .await
        .reranked_by(EMBED_FLOOD),
        Fault::new(
            "component floods log (100,000 lines of 1 KiB)",
            Ending::Degraded(&["rerank_failed"]),
            within_deadline,
        )
        .timed_to_first_token()
        .await
        .reranked_by(LOG_FLOOD),
        Fault::new("answer cache failing", Ending::Done, secs(3)).adjusted(|p| {
            p.cache = Some(Arc::new(sluice_core::cache::SemanticCache::new(
                Arc::new(BrokenCache),
                sluice_core::cache::CacheSettings::from_config(&p.config.cache),
                sluice_embed::DIM,
            )))
        }),
        Fault::new(
            "LLM refusing connections",
            Ending::Error("llm_unavailable", true, 0),
            secs(3),
        )
        .with(llm_at(closed_llm_url())),
        Fault::new(
            "LLM answering 503",
            Ending::Error("llm_unavailable", true, 0),
            secs(3),
        )
        .with(llm_at(llm(Llm::Status(503)).await)),
        Fault::new(
            "LLM answering 400",
            Ending::Error("llm_rejected", false, 0),
            secs(3),
        )
        .with(llm_at(llm(Llm::Status(400)).await)),
        Fault::new(
            "LLM stalling before the first token",
            Ending::Error("llm_timeout", true, 0),
            secs(4),
        )
        .with(llm_at(llm(Llm::StallBefore).await)),
        Fault::new(
            "LLM stalling mid-stream",
            Ending::Error("llm_stream_failed", true, 3),
            secs(4),
        )
        .with(llm_at(llm(Llm::StallAfter(3)).await)),
        Fault::new(
            "LLM cutting the stream mid-answer",
            Ending::Error("llm_stream_failed", true, 3),
            secs(3),
        )
        .with(llm_at(llm(Llm::CutAfter(3)).await)),
        Fault::new(
            "LLM sending garbage",
            Ending::Error("llm_stream_failed", true, 0),
            secs(3),
        )
        .with(llm_at(llm(Llm::Garbage).await)),
        // Ended by the 64 KiB event cap, well before the 800 ms first-token timeout.
        Fault::new(
            "LLM sending a 100 KB line without end",
            Ending::Error("llm_stream_failed", true, 0),
            Duration::from_millis(700),
        )
        .with(llm_at(llm(Llm::EndlessLine).await)),
        Fault::new(
            "LLM's first token after 3 s (keep-alive every 500 ms)",
            Ending::DoneKeptAlive(4),
            secs(5),
        )
        .with(vec![
            ("SLUICE_LLM_URL", llm(Llm::SlowFirst(secs(3))).await),
            ("SLUICE_SSE_KEEPALIVE_MS", "500".into()),
        ]),
    ]
}

/// The host-call floods of the rerank faults (`crates/rerank/tests/hostile.rs` runs the
/// same on the sandbox alone).
const COUNT_FLOOD: &str = include_str!("../../../crates/rerank/tests/floods/count_tokens.wat");
const EMBED_FLOOD: &str = include_str!("../../../crates/rerank/tests/floods/embed.wat");
const LOG_FLOOD: &str = include_str!("../../../crates/rerank/tests/floods/log.wat");

/// Runs one fault; what was timed against the limit, and when it came (from sending the
/// request), or `Err` with how the answer failed the contract.
async fn inject(fault: Fault) -> Result<(&'static str, Duration), String> {
    let deadline = match fault.within == within_deadline() {
        true => DEADLINE,
        false => NO_DEADLINE,
    };
    let mut overrides: Vec<(&str, &str)> = vec![deadline];
    overrides.extend(fault.overrides.iter().map(|(k, v)| (*k, v.as_str())));
    let component = fault.component.map(|c| match c {
        REVERSE => c.to_string(),
        flood => host_calls(flood),
    });
    let adjust = fault.adjust;
    let has_adjust = adjust.is_some();
    let server = start_adjusted(&overrides, move |p| {
        if let Some(component) = component {
            // Stored (and activated) in the server's folder before the server starts, through
            // a registry of its own: the server's registry has not seen the tenant yet.
            let writer = sluice_tests::registry_over(p, component_folder(p));
            let version = sluice_contract::components::Components::upload(
                writer.as_ref(),
                &tenant("default"),
                component.as_bytes(),
                None,
                &sluice_contract::cancel::Cancel::new(),
            )
            .expect("upload")
            .version;
            sluice_contract::components::Components::activate(
                writer.as_ref(),
                &tenant("default"),
                &version,
            )
            .expect("activate");
        }
        if let Some(adjust) = adjust {
            adjust(p);
        }
    })
    .await;
    if fault.ingest {
        server.ingest_samples().await;
    }
    if fault.component.is_some() && !has_adjust {
        // A tenant this server has seen: its component is in memory, as after a first answer.
        let reranker = server.pipeline.reranker.clone().expect("reranker");
        let by = tokio::time::Instant::now() + Duration::from_secs(30);
        let active = reranker
            .active(&tenant("default"), by)
            .await
            .expect("component");
        assert!(active.is_some(), "the component is active");
    }
    let answer = server
        .answer(&json!({"query": "How do I reset my password?"}))
        .await;
    server.stop().await;
    answer.assert_well_formed();
    let names = answer.names();
    let last = answer.events.last().ok_or("no events")?;
    let meta = answer.first("meta");
    // A degraded answer must not wait for the fault: `meta` (sources or none, and why) leaves
    // within the limit, then the model answers at its own pace. An error ends the stream
    // within it.
    let first_token = answer.events.iter().find(|e| e.name == "token");
    let (what, at) = match (&fault.ending, first_token) {
        (Ending::Error(..), _) => ("ended", last.at),
        (_, Some(token)) if fault.first_token => ("the first token", token.at),
        _ => ("meta", meta.at),
    };
    if at > fault.within {
        return Err(format!("{what} after {at:?} (limit {:?})", fault.within));
    }
    let timed = (what, at);
    let meta = &meta.data;
    let tokens = names.iter().filter(|n| **n == "token").count();
    match fault.ending {
        Ending::Degraded(_) | Ending::Done | Ending::DoneKeptAlive(_) => {
            let degraded: Vec<&str> = meta["degraded"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let expected: Vec<&str> = match fault.ending {
                Ending::Degraded(reasons) => reasons.to_vec(),
                _ => vec![],
            };
            // Under the short deadline a busy machine may reach the deadline as well: its
            // `retrieval_timeout` may join the fault's own reasons, which must all be there.
            let busy = deadline == DEADLINE
                && expected.iter().all(|r| degraded.contains(r))
                && (degraded.iter()).all(|r| expected.contains(r) || *r == "retrieval_timeout");
            if degraded != expected && !busy {
                return Err(format!("degraded {degraded:?}, expected {expected:?}"));
            }
            if last.name != "done" || tokens == 0 {
                return Err(format!(
                    "expected tokens then done: {names:?} {}",
                    last.data
                ));
            }
            if let Ending::DoneKeptAlive(least) = fault.ending
                && answer.comments < least
            {
                return Err(format!(
                    "{} keep-alive comments while waiting, expected at least {least}",
                    answer.comments
                ));
            }
        }
        Ending::Error(code, retryable, after) => {
            let error = &last.data;
            if last.name != "error" || error["code"] != code || error["retryable"] != retryable {
                return Err(format!(
                    "expected error {code} (retryable {retryable}): {names:?} {error}"
                ));
            }
            if tokens != after {
                return Err(format!(
                    "{tokens} tokens before the error, expected {after}"
                ));
            }
        }
    }
    Ok(timed)
}

#[tokio::test]
async fn every_injected_fault_ends_in_a_degraded_answer_or_a_clean_error_in_time() {
    sluice_testkit::needs!(Llm, Model);
    let faults = faults().await;
    let count = faults.len();
    let mut failed = Vec::new();
    for fault in faults {
        let name = fault.name;
        let started = Instant::now();
        let result = inject(fault).await;
        let outcome = match &result {
            Ok((what, at)) => format!("survived: {what} at {} ms", at.as_millis()),
            Err(why) => format!("FAILED: {why}"),
        };
        println!(
            "fault: {name:<72} {outcome} (whole case {} ms)",
            started.elapsed().as_millis()
        );
        if let Err(why) = result {
            failed.push(format!("{name}: {why}"));
        }
    }
    println!(
        "faults injected: {count}, survived: {}",
        count - failed.len()
    );
    assert!(failed.is_empty(), "{failed:#?}");
}
