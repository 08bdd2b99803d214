//! Cache: an in-process cache read by exact key before the embedding, then by similar
//! question (and a remote cache's exact key) after it; a hit replayed as events — at once, or,
//! for an answer made before the tenant's corpus changed, once this request's retrieval has
//! returned the sources it was built from; a complete answer recorded behind `done`, and
//! compared with a candidate it was checked against.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::FutureExt;
use tokio::time::Instant as Deadline;
use tracing::{info, warn};

use super::flow::{add_ms, bounded, ms};
use super::scope::{
    COMPONENT_READ, Component, Read, ScopeReads, VERSION_READ, output, resolved, take,
};
use super::{AnswerRequest, Pipeline, Progress};
use crate::cache::{Candidate, Lookup, Probe, SemanticCache, joined};
use crate::prompt;
use sluice_contract::Tenant;
use sluice_contract::cache::{CacheEntry, CachedAnswer, Cited, Scope};
use sluice_contract::codes::Degraded;
use sluice_contract::grounding::GroundingMode;
use sluice_contract::sse::{CacheMatch, CacheState, Done, Event, Meta, Token};
use sluice_contract::stages::Hit;

/// Where the cache stands for an answer after its lookup: what a complete answer is written
/// under, if anything.
pub(super) struct CacheWrite {
    cache: Arc<SemanticCache>,
    probe: Probe,
    scope: Scope,
    /// A candidate whose answer the LLM's is compared with, for the tenant's threshold.
    compare: Option<Candidate>,
    /// Candidates made under an earlier corpus version or for other principals: the first
    /// whose sources this request's are answers ([`Pipeline::verified`]).
    verify: Vec<Candidate>,
}

/// What the exact read before the embedding gave: whether it ran, a hit's events, and an
/// entry to verify against the sources once they are known.
#[derive(Default)]
pub(super) struct ExactRead {
    pub(super) exact_read: bool,
    pub(super) replay: Option<Vec<Event>>,
    pub(super) verify: Vec<Candidate>,
}

/// How the cache round after the embedding ended.
pub(super) enum Round {
    /// The cached answer's events.
    Hit(Vec<Event>),
    /// Nothing fit: a complete answer is written under this.
    Miss(Box<CacheWrite>),
    /// The scope was not known in time: the cache is neither read nor written.
    Skipped,
}

impl Pipeline {
    /// Stage 1 before the embedding: an in-process cache read by exact key, when the scope
    /// reads answered at once (an exact hit then costs microseconds and no embedding).
    pub(super) async fn exact_in_memory(
        &self,
        request: &AnswerRequest,
        cache: Option<&Arc<SemanticCache>>,
        reads: &mut ScopeReads,
        progress: &mut Progress,
    ) -> ExactRead {
        let Some(cache) = cache.filter(|c| c.in_process()) else {
            return ExactRead::default();
        };
        let _ = futures::poll!(&mut reads.version);
        let _ = futures::poll!(&mut reads.component);
        let (Some(Read::Got(Some(v))), Some(Read::Got(c))) =
            (output(&mut reads.version), output(&mut reads.component))
        else {
            return ExactRead::default();
        };
        let scope = self.scope(request, *v, c, progress);
        let probe = probe(request, &scope);
        let started = Instant::now();
        let found = bounded(
            progress.deadline,
            cache.exact(&request.tenant, &probe, &scope),
        )
        .await
        .unwrap_or(Lookup::Miss);
        add_ms(&mut progress.timings.cache_ms, started.elapsed());
        match found {
            Lookup::Verify { candidates } => ExactRead {
                exact_read: true,
                replay: None,
                verify: candidates,
            },
            found => ExactRead {
                exact_read: true,
                replay: self.replay(request, progress, found, CacheMatch::Exact),
                verify: Vec::new(),
            },
        }
    }

    /// Stage 1 after the embedding: what the cache needs is awaited (one cache budget more,
    /// never past the deadline), then the similar-question lookup; a remote cache reads the
    /// exact key in the same round. The component is resolved here for the rerank stage: a
    /// late or failed look-up keeps the fused order. `earlier` is what the exact read before
    /// the embedding gave.
    pub(super) async fn cache_round(
        &self,
        request: &AnswerRequest,
        cache: &Arc<SemanticCache>,
        vector: &Result<(Vec<f32>, Duration), Degraded>,
        earlier: ExactRead,
        reads: &mut ScopeReads,
        progress: &mut Progress,
    ) -> Round {
        let exact_read = earlier.exact_read;
        let cache_by = progress
            .deadline
            .min(Deadline::now() + self.config.scope_budget);
        let _ = bounded(cache_by, reads.both()).await;
        let version = take(&mut reads.version, VERSION_READ, &mut progress.degraded).flatten();
        let active = take(&mut reads.component, COMPONENT_READ, &mut progress.degraded);
        reads.component = resolved(active.clone().unwrap_or_default());
        let (Some(version), Some(active)) = (version, active) else {
            return Round::Skipped;
        };
        let scope = self.scope(request, version, &active, progress);
        let probe = probe(request, &scope);
        let started = Instant::now();
        let found = match (vector, cache.in_process()) {
            (Ok((v, _)), true) if exact_read => {
                cache.similar(&request.tenant, &probe, v, &scope).boxed()
            }
            (Ok((v, _)), _) => cache.lookup(&request.tenant, &probe, v, &scope).boxed(),
            (Err(_), false) => cache.exact(&request.tenant, &probe, &scope).boxed(),
            (Err(_), true) => async { Lookup::Miss }.boxed(),
        };
        let found = bounded(progress.deadline, found)
            .await
            .unwrap_or(Lookup::Miss);
        add_ms(&mut progress.timings.cache_ms, started.elapsed());
        // A hit now beats an entry to verify; of those, the same question's beats a similar one's.
        let (found, compare, verify) = match found {
            Lookup::Compare { entry, similarity } => {
                (Lookup::Miss, Some((entry, similarity)), earlier.verify)
            }
            Lookup::Verify { candidates } => {
                (Lookup::Miss, None, joined(earlier.verify, candidates))
            }
            found => (found, None, earlier.verify),
        };
        let how = match &found {
            Lookup::Hit { entry, .. } if entry.key == probe.key => CacheMatch::Exact,
            _ => CacheMatch::Similar,
        };
        match self.replay(request, progress, found, how) {
            Some(events) => Round::Hit(events),
            None => Round::Miss(Box::new(CacheWrite {
                cache: Arc::clone(cache),
                probe,
                scope,
                compare,
                verify,
            })),
        }
    }

    /// The events of the first answer `write` holds to verify whose sources this request's
    /// `sources` are — the same chunks with the same content in the same order — and
    /// the work that records it for this request's scope (awaited after the events, as a cache
    /// write is): the entry brought up to the corpus version in use when it is this
    /// question's own, or, when it was made for another (similar) question or an end user with
    /// other principals, a copy under this request's own key (its `vector`), so that the next
    /// ask of it is an exact hit. Sources of a degraded request prove nothing
    /// (a late search, a component that failed), nor do those of a store whose reads may still
    /// return what a recent change removed ([`Self::settled`]).
    pub(super) fn verified(
        &self,
        request: &AnswerRequest,
        write: &mut CacheWrite,
        sources: &[Hit],
        vector: &[f32],
        progress: &mut Progress,
    ) -> Option<(Vec<Event>, tokio::task::JoinHandle<()>)> {
        let candidates = std::mem::take(&mut write.verify);
        if candidates.is_empty()
            || !progress.degraded.is_empty()
            || !self.settled(&request.tenant, write.scope.corpus_version)
        {
            return None;
        }
        let now: Vec<Cited> = sources.iter().map(Cited::of).collect();
        let (entry, similarity) =
            (candidates.into_iter()).find(|(e, _)| e.answer.built_from(&now))?;
        // Retrieval for this request proves the entry's sources for this question, not for
        // the one it was made for (a similar question whose own retrieval may have changed):
        // only an entry of this very question (and end user) is brought up to date in place;
        // any other is copied under this request's own key, and the original keeps needing
        // its own check.
        let own = entry.key == write.probe.key && entry.scope.access == write.scope.access;
        let current = match own {
            true => CacheEntry {
                scope: write.scope.clone(),
                ..(*entry).clone()
            },
            false => write.cache.entry(
                &request.tenant,
                &write.probe,
                vector.to_vec(),
                write.scope.clone(),
                entry.answer.clone(),
            ),
        };
        let cache = Arc::clone(&write.cache);
        let refresh = tokio::spawn(async move {
            if let Err(e) = cache.put(&current).await {
                warn!(tenant = %current.tenant, error = %e, "cached answer not brought up to date");
            }
        });
        let hit = Lookup::Hit { entry, similarity };
        let events = self.replay(request, progress, hit, CacheMatch::Sources)?;
        Some((events, refresh))
    }

    /// Judges, on a blocking thread, whether `fresh` is the answer `candidate` gave — the
    /// same documents among the sources, the same facts as far as words tell, and the two
    /// texts' embeddings at cosine [`SAME_ANSWER`](crate::cache::learn::SAME_ANSWER) or more —
    /// and records the judgement for the tenant's learned threshold. An embedding that fails
    /// records nothing.
    fn compare(
        &self,
        tenant: &Tenant,
        cache: &Arc<SemanticCache>,
        candidate: &sluice_contract::cache::CacheEntry,
        similarity: f32,
        fresh: &CachedAnswer,
    ) -> tokio::task::JoinHandle<()> {
        let documents = |a: &CachedAnswer| {
            let mut ids: Vec<String> = a.sources.iter().map(|s| s.id.clone()).collect();
            ids.sort();
            ids.dedup();
            ids
        };
        let texts = [candidate.answer.tokens.concat(), fresh.tokens.concat()];
        let same_so_far = documents(&candidate.answer) == documents(fresh)
            && cache.same_facts(&texts[0], &texts[1]);
        let (embedder, cache, tenant) = (
            Arc::clone(&self.embedder),
            Arc::clone(cache),
            tenant.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let Ok(vectors) = embedder.embed(&[&texts[0], &texts[1]]) else {
                return;
            };
            let close = match vectors.as_slice() {
                [a, b] => crate::cache::cosine(a, b) >= crate::cache::learn::SAME_ANSWER,
                _ => return,
            };
            cache.observe(&tenant, similarity, same_so_far && close);
        })
    }

    /// The scope an entry must have been made under to answer this request.
    fn scope(
        &self,
        request: &AnswerRequest,
        corpus_version: u64,
        component: &Component,
        progress: &Progress,
    ) -> Scope {
        // The prompt component's version shapes the answer as the settings do: it goes into
        // the variant's digest.
        let variant = match &component.prompt {
            None => progress.variant.clone(),
            Some(p) => Some(sluice_contract::sha256_hex(
                format!("{:?} prompt {}", progress.variant, p.version()).as_bytes(),
            )),
        };
        Scope {
            rerank: component.rerank.as_ref().map(|c| c.version().to_string()),
            corpus_version,
            llm_model: self.llm.model_id().to_string(),
            embed_model: self.embedder.model_id().to_string(),
            prompt_version: prompt::PROMPT_VERSION,
            k: request.k,
            variant,
            binding: request.binding.clone(),
            access: progress.access.clone(),
        }
    }

    /// The events of a cache hit (`meta`, the cached tokens, `done`), or `None` on a miss.
    fn replay(
        &self,
        request: &AnswerRequest,
        progress: &mut Progress,
        found: Lookup,
        how: CacheMatch,
    ) -> Option<Vec<Event>> {
        let (entry, similarity) = match found {
            Lookup::Hit { entry, similarity } => (entry, similarity),
            // A candidate to compare or verify was taken aside by the cache round.
            Lookup::Miss | Lookup::Compare { .. } | Lookup::Verify { .. } => return None,
            Lookup::Failed(e) => {
                warn!(error = %e, "cache lookup failed; treated as a miss");
                return None;
            }
        };
        info!(similarity, how = how.as_str(), "answered from the cache");
        let answer = entry.answer;
        let timings = &mut progress.timings;
        timings.ttft_ms = Some(ms(request.received.elapsed()));
        let mut events = Vec::with_capacity(answer.tokens.len() + 2);
        events.push(Event::Meta(Box::new(Meta {
            request_id: progress.request_id.clone(),
            session_id: progress.session_id.clone(),
            tenant: request.tenant.clone(),
            model_id: self.llm.model_id().to_string(),
            k: request.k,
            documents: answer.sources,
            extract: answer
                .extract
                .filter(|_| request.wants_extract(self.config.extract)),
            cache: CacheState::Hit,
            cache_match: Some(how),
            degraded: Vec::new(),
            timings: timings.clone(),
            trace_id: request.trace.trace_id.clone(),
            prompt: None,
            rerank_dropped: None,
            rerank_error: None,
            prompt_error: None,
            prompt_tokens: None,
        })));
        events.extend(answer.tokens.into_iter().enumerate().map(|(i, text)| {
            Event::Token(Token {
                text,
                index: i as u64,
            })
        }));
        timings.total_ms = Some(ms(request.received.elapsed()));
        events.push(Event::Done(Box::new(Done {
            request_id: progress.request_id.clone(),
            session_id: progress.session_id.clone(),
            replica_id: self.replica_id.clone(),
            model_id: self.llm.model_id().to_string(),
            k: request.k,
            token_count: answer.token_count,
            token_count_source: answer.token_count_source,
            tokens_per_sec: 0.0,
            // No prompt was sent: a cached answer costs the LLM nothing.
            prompt_tokens: 0,
            finish_reason: answer.finish_reason,
            cached: true,
            timings: timings.clone(),
            // The verdict made with the answer (only a grounded one is stored).
            grounding: answer
                .grounding
                .filter(|_| request.grounding(self.config.grounding) != GroundingMode::Off),
            degraded: Vec::new(),
        })));
        Some(events)
    }

    /// Record: a complete answer (the model stopped, or reached the configured max_tokens,
    /// as it would again) that was not degraded, and that its grounding verdict (when one was
    /// made) does not find unsupported — a hallucination is never replayed to the next asker
    /// — is written to the cache, and compared with
    /// the candidate it was checked against. Both start now and never delay `done`; the
    /// stream awaits them after it, since on Lambda the invocation ends with the response
    /// stream and work still in flight would be frozen with the environment (and lost).
    pub(super) fn record(
        &self,
        request: &AnswerRequest,
        progress: &Progress,
        write: CacheWrite,
        vector: Vec<f32>,
        answer: CachedAnswer,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        if !progress.degraded.is_empty()
            || answer.grounding.as_ref().is_some_and(|g| !g.grounded())
            || !matches!(answer.finish_reason.as_str(), "stop" | "length")
            || !self.settled(&request.tenant, write.scope.corpus_version)
        {
            return Vec::new();
        }
        let mut work = Vec::with_capacity(2);
        if let Some((candidate, similarity)) = &write.compare {
            work.push(self.compare(
                &request.tenant,
                &write.cache,
                candidate,
                *similarity,
                &answer,
            ));
        }
        let entry = write
            .cache
            .entry(&request.tenant, &write.probe, vector, write.scope, answer);
        work.push(tokio::spawn(async move {
            // A question whose answer a user voted down over these documents is not cached
            // again until they change.
            let version = entry.scope.corpus_version;
            if write
                .cache
                .blocked(&entry.tenant, &entry.query, version)
                .await
            {
                return;
            }
            if let Err(e) = write.cache.put(&entry).await {
                warn!(tenant = %entry.tenant, error = %e, "answer not cached");
            }
        }));
        work
    }

    /// Whether an answer made under the tenant's corpus `version` may be cached: always with
    /// a store that reads its own writes; with one whose reads lag its writes
    /// ([`Store::lag`]), only once this process has known the version for that long — until
    /// then retrieval may still have returned a document the change deleted, and such an
    /// answer must not outlive the request. A version is met no earlier than it was made, so
    /// holding from the first meeting covers every process. (A tenant forgotten to keep the
    /// table bounded is met again: its writes are held again, never let through early.)
    fn settled(&self, tenant: &Tenant, version: u64) -> bool {
        let lag = self.store.lag();
        if lag.is_zero() {
            return true;
        }
        let mut seen = self.versions_seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= sluice_contract::REMEMBERED_TENANTS && !seen.contains_key(tenant) {
            seen.clear();
        }
        match seen.get(tenant) {
            Some((v, since)) if *v == version => since.elapsed() >= lag,
            _ => {
                seen.insert(tenant.clone(), (version, Instant::now()));
                false
            }
        }
    }
}

/// The request's cache probe: its question in its scope, at the tenant's own threshold when it
/// set one.
fn probe(request: &AnswerRequest, scope: &Scope) -> Probe {
    let mut probe = Probe::scoped(&request.query, scope);
    probe.threshold = (request.settings.as_ref())
        .and_then(|s| s.settings.cache_threshold)
        .map(|t| t as f32);
    probe
}
