//! Every reason an answer is degraded (`meta.degraded`), each provoked by a double: the
//! answer still streams to `done`, says why in `meta`, and its cache state follows the rule
//! (a scope that could not be proven fresh is neither read nor written: `bypass`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sluice_contract::codes::Degraded;
use sluice_testkit::{PromptVerdict, ScriptedLlm, ScriptedReranker, Troubled, Verdict};

use crate::kit::{App, Kit, Stream};

const QUESTION: &str = "How long does a replacement card take?";

/// An app whose store is `troubled` as `set` says, over the documents of `default`.
async fn troubled(overrides: &[(&str, &str)], set: impl FnOnce(&mut Troubled)) -> App {
    let mut kit = Kit::new(overrides).ingested("default").await;
    let mut store = Troubled::around(kit.store());
    set(&mut store);
    kit.parts.store = Some(Arc::new(store));
    kit.app()
}

/// Marks the text whose token count is slow.
const SLOW_TURN: &str = "slow-to-count";

/// An app whose tenants' components are scripted by `reranker`.
async fn reranked(reranker: ScriptedReranker) -> App {
    let mut kit = Kit::new(&[("SLUICE_CACHE_BUDGET_MS", "100")])
        .ingested("default")
        .await;
    kit.parts.reranker = Some(Arc::new(reranker));
    kit.app()
}

/// An answer degraded for `reason`. Every reason has a case here: a new one does not compile
/// until it has.
async fn provoke(reason: Degraded) -> Stream {
    let ask = json!({"query": QUESTION});
    match reason {
        Degraded::RetrievalTimeout => {
            let app = troubled(&[], |s| s.delay = Duration::from_secs(5)).await;
            app.answer(&json!({"query": QUESTION, "retrieval_deadline_ms": 100}))
                .await
        }
        Degraded::Ungrounded => {
            // Strict grounding, and an answer whose number no source states: said in `done`.
            let wrong = "A replacement card arrives within 10 working days [1].";
            Kit::with_llm(
                &[("SLUICE_GROUNDING", "strict")],
                ScriptedLlm::answering(wrong),
            )
            .ingested("default")
            .await
            .app()
            .answer(&ask)
            .await
        }
        Degraded::RetrievalFailed => troubled(&[], |s| s.fail = true).await.answer(&ask).await,
        // The breaker itself (opening, skipping, probing) is the remote stores' and is
        // tested in sluice-retrieve; here, what a skipped read becomes.
        Degraded::RetrievalCircuitOpen => {
            troubled(&[], |s| s.open_circuit = true)
                .await
                .answer(&ask)
                .await
        }
        Degraded::ContextTruncated => {
            // A 512-token window with 400 of them for the answer leaves room for one short
            // source at most.
            let app = Kit::new(&[
                ("SLUICE_LLM_CONTEXT_TOKENS", "512"),
                ("SLUICE_MAX_TOKENS", "400"),
            ])
            .ingested("default")
            .await
            .app();
            app.answer(&json!({"query": QUESTION, "k": 3})).await
        }
        Degraded::HistoryTruncated => {
            // Six long turns before the question: in a 2,048-token window the question and
            // its sources fit, the oldest turns do not.
            let app = Kit::new(&[("SLUICE_LLM_CONTEXT_TOKENS", "2048")])
                .ingested("default")
                .await
                .app();
            let mut messages: Vec<_> = (0..6)
                .map(|i| {
                    let role = if i % 2 == 0 { "user" } else { "assistant" };
                    json!({"role": role, "content": format!("turn {i} {}", "word ".repeat(400))})
                })
                .collect();
            messages.push(json!({"role": "user", "content": QUESTION}));
            let body = json!({"model": "m", "stream": true, "messages": messages});
            let reply = app.post("/v1/chat/completions", &body).await;
            assert_eq!(reply.status, 200, "{}", reply.raw);
            Stream::from_chat(&reply.raw)
        }
        Degraded::PromptTimeout => {
            // Counting the tokens of one earlier turn takes longer than the 100 ms deadline:
            // the answer goes on with the question alone when the deadline passes (the count
            // runs off the async workers: on this one-thread runtime it would otherwise hold
            // the timer too).
            let mut kit = Kit::new(&[("SLUICE_RETRIEVAL_DEADLINE_MS", "100")])
                .ingested("default")
                .await;
            // Counting a text holding the marker blocks until the test has its answer
            // (`release` dropped; a minute at most): an answer that waited for the count would
            // come after `counted` is set, however busy the machine.
            let (release, gate) = std::sync::mpsc::channel::<()>();
            let gate = std::sync::Mutex::new(gate);
            let counted = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let done = Arc::clone(&counted);
            let slow = sluice_testkit::Hooked::new().on_count(move |text| {
                if text.contains(SLOW_TURN) {
                    let gate = gate.lock().unwrap_or_else(|e| e.into_inner());
                    let _ = gate.recv_timeout(Duration::from_secs(60));
                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            });
            kit.parts.embedder = Some(Arc::new(slow));
            let app = kit.app();
            let messages = json!([
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": format!("{SLOW_TURN} at your service")},
                {"role": "user", "content": QUESTION},
            ]);
            let body = json!({"model": "m", "stream": true, "messages": messages});
            let reply = app.post("/v1/chat/completions", &body).await;
            assert_eq!(reply.status, 200, "{}", reply.raw);
            assert!(
                !counted.load(std::sync::atomic::Ordering::SeqCst),
                "the answer waited for the count"
            );
            drop(release);
            Stream::from_chat(&reply.raw)
        }
        Degraded::RerankFailed => {
            reranked(ScriptedReranker::new(Verdict::Fail(
                "trap: unreachable".into(),
            )))
            .await
            .answer(&ask)
            .await
        }
        Degraded::PromptComponentFailed => {
            let failing = PromptVerdict::Fail("trap: unreachable".into());
            (reranked(ScriptedReranker::prompt_only(failing)).await)
                .answer(&ask)
                .await
        }
        Degraded::CorpusVersionTimeout => {
            let overrides = [("SLUICE_CACHE_BUDGET_MS", "50")];
            let app = troubled(&overrides, |s| s.version_delay = Duration::from_secs(5)).await;
            app.answer(&ask).await
        }
        Degraded::CorpusVersionFailed => {
            troubled(&[], |s| s.fail_versions = true)
                .await
                .answer(&ask)
                .await
        }
        Degraded::ComponentTimeout => {
            let slow = ScriptedReranker::new(Verdict::Reverse).lookup_delay(Duration::from_secs(5));
            reranked(slow).await.answer(&ask).await
        }
        Degraded::ComponentFailed => {
            reranked(ScriptedReranker::new(Verdict::Reverse).lookup_fails())
                .await
                .answer(&ask)
                .await
        }
    }
}

#[tokio::test]
async fn every_degraded_reason_is_reported_and_the_answer_still_streams() {
    for &reason in Degraded::ALL {
        let answer = provoke(reason).await;
        answer.assert_well_formed();
        assert_eq!(answer.names().last(), Some(&"done"), "{reason}");
        assert!(answer.text().len() > 1, "{reason}: tokens still stream");
        // The reason, and only it — but an open breaker stands in front of the whole store,
        // so the corpus version is not read either; and once retrieval has run out of time
        // the prompt has its 25 ms floor, which a loaded machine can miss too (either way the
        // question goes to the LLM without sources).
        let expected = match reason {
            Degraded::RetrievalCircuitOpen => vec!["corpus_version_failed", reason.as_str()],
            _ => vec![reason.as_str()],
        };
        let degraded = answer.degraded();
        let late_prompt = reason == Degraded::RetrievalTimeout
            && degraded == [reason.as_str(), Degraded::PromptTimeout.as_str()];
        assert!(
            degraded == expected || late_prompt,
            "{reason}: {degraded:?}"
        );
        let meta = answer.meta();
        let sources = answer.sources();
        match reason {
            Degraded::RetrievalTimeout
            | Degraded::RetrievalFailed
            | Degraded::RetrievalCircuitOpen
            | Degraded::PromptTimeout => {
                assert!(sources.is_empty(), "{reason}: no context");
            }
            Degraded::ContextTruncated => {
                assert!(sources.len() < 3, "{reason}: {sources:?}");
            }
            Degraded::HistoryTruncated => {
                assert_eq!(
                    sources[0], "lost-card",
                    "{reason}: the sources keep their place"
                );
            }
            Degraded::RerankFailed | Degraded::ComponentTimeout | Degraded::ComponentFailed => {
                assert_eq!(sources[0], "lost-card", "{reason}: the fused order is kept");
                if reason != Degraded::RerankFailed {
                    let done = answer.first("done");
                    assert!(done["timings"]["rerank_ms"].is_null(), "{reason}: not run");
                }
            }
            Degraded::CorpusVersionTimeout | Degraded::CorpusVersionFailed => {
                assert_eq!(sources[0], "lost-card", "{reason}: retrieval is unharmed");
            }
            Degraded::PromptComponentFailed => {
                assert_eq!(
                    sources[0], "lost-card",
                    "{reason}: the built-in prompt is sent"
                );
            }
            Degraded::Ungrounded => {
                assert_eq!(sources[0], "lost-card", "{reason}: found after `meta`");
                let done = answer.first("done");
                assert_eq!(done["grounding"]["unsupported"], 1, "{reason}: {done}");
            }
        }
        let expected_cache = match reason {
            Degraded::CorpusVersionTimeout
            | Degraded::CorpusVersionFailed
            | Degraded::RetrievalCircuitOpen
            | Degraded::ComponentTimeout
            | Degraded::ComponentFailed => "bypass",
            _ => "miss",
        };
        assert_eq!(meta["cache"], expected_cache, "{reason}");
    }
}

#[tokio::test]
async fn a_late_store_costs_the_deadline_not_the_stores_time() {
    let app = troubled(&[], |s| s.delay = Duration::from_secs(30)).await;
    let started = tokio::time::Instant::now();
    let answer = app
        .answer(&json!({"query": QUESTION, "retrieval_deadline_ms": 200}))
        .await;
    assert_eq!(answer.degraded(), ["retrieval_timeout"]);
    // A bound, not a measurement: 30 s of store time must not be waited for.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_component_reorders_only_the_tenants_it_belongs_to() {
    let acme = sluice_testkit::tenant("acme");
    let mut kit = Kit::new(&[])
        .ingested("acme")
        .await
        .ingested("globex")
        .await;
    kit.parts.reranker = Some(Arc::new(
        ScriptedReranker::new(Verdict::Reverse).only_for(&[acme]),
    ));
    let app = kit.app();
    let ask = json!({"query": QUESTION, "k": 3});
    let reversed = app.answer_as("acme", &ask).await;
    let fused = app.answer_as("globex", &ask).await;
    assert_eq!(fused.sources()[0], "lost-card");
    let mut back = reversed.sources();
    back.reverse();
    assert_eq!(
        back,
        fused.sources(),
        "acme's component reversed the fused order"
    );
    assert!(reversed.first("done")["timings"]["rerank_ms"].is_number());
    assert!(fused.first("done")["timings"]["rerank_ms"].is_null());
    assert!(reversed.degraded().is_empty() && fused.degraded().is_empty());
}
