//! Stage 1: the semantic answer cache.
//!
//! A cached answer is found in two ways, both inside the request's tenant:
//!
//! 1. **exact**: the SHA-256 of the [normalised](crate::language::normalise) question, one key read;
//! 2. **similar**: the [LSH buckets](lsh) of the query embedding, read in one parallel round;
//!    the most similar candidate counts when its cosine reaches the tenant's threshold.
//!
//! In-process backends are read by exact key before the query is embedded (an exact hit
//! costs microseconds); remote ones once, after the embedding, both ways in one round.
//!
//! Either way an entry answers only when it **fits** the request — same LLM, embedding model,
//! prompt version, `k`, rerank component, filter, key binding and conversation, and its `ttl`
//! not passed (checked here: emulators and DynamoDB itself delete expired items late) — and
//! when the [guard](guard::Guard) finds the two questions made of the same content words.
//! Under the corpus version it was made under, for the same end user's access, it answers at
//! once ([`Lookup::Hit`]); once the tenant's corpus has changed (an ingest that wrote or
//! removed something), or for an end user whose principals differ, only if retrieval for this
//! request returns exactly the sources the answer was built from ([`Lookup::Verify`], decided
//! by the pipeline, which runs that retrieval anyway).
//!
//! Every lookup runs under its own small budget; late, failed or doubtful is a miss. Entries
//! are written after `done`, only for complete answers that were not degraded.
//!
//! Backends implement [`CacheStore`]: `sluice-local`'s `MemoryCache` (the local default) and
//! DynamoDB in the `sluice-cache-dynamodb` crate. They store and find; every decision is made here.

mod fit;
pub mod guard;
pub mod learn;
pub mod lsh;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::CacheConfig;
use sluice_contract::Tenant;
use sluice_contract::cache::{CacheEntry, CacheStore, CachedAnswer, Scope};
use sluice_contract::error::CacheError;

use crate::language::lexicon::{Lexicon, SharedLexicon};
pub use fit::{Candidate, MAX_VERIFIED, joined};
use fit::{Fit, fit};
use guard::Guard;
use learn::{Estimate, Observations};
use lsh::Lsh;

/// The question as the cache sees it, computed once per request.
#[derive(Debug, Clone)]
pub struct Probe {
    /// [`normalise`](crate::language::normalise)d text.
    pub normalised: String,
    /// The exact key: hex SHA-256 of `normalised` (and of the variant, when there is one).
    pub key: String,
    guard: Guard,
    /// The cosine a similar question must reach, when the tenant set its own
    /// (`cache_threshold` of its settings); `None`: the configured or learned one.
    pub threshold: Option<f32>,
}

impl Probe {
    /// Normalises `query` and derives its key and guard features.
    pub fn new(query: &str) -> Self {
        Self::keyed(query, [])
    }

    /// The probe of `query` asked in `scope`: its exact key covers the scope's variant and
    /// end user's access too, so that the answers of one question under two filters (or
    /// conversations, or for two sets of principals) are two entries; the scope is what
    /// keeps one from answering the other.
    pub fn scoped(query: &str, scope: &Scope) -> Self {
        let access = scope.access.as_ref().map(|a| format!("access:{a}"));
        Self::keyed(query, [scope.variant.clone(), access])
    }

    fn keyed<const N: usize>(query: &str, parts: [Option<String>; N]) -> Self {
        let normalised = crate::language::normalise(query);
        let mut keyed = normalised.clone();
        for part in parts.iter().flatten() {
            keyed.push('\u{1f}');
            keyed.push_str(part);
        }
        let guard = Guard::of(&normalised);
        Self {
            key: sluice_contract::sha256_hex(keyed.as_bytes()),
            normalised,
            guard,
            threshold: None,
        }
    }
}

/// A lookup's outcome.
#[derive(Debug)]
pub enum Lookup {
    /// A fresh entry that answers this question; `similarity` is 1 for an exact key match.
    Hit {
        /// The entry.
        entry: Box<CacheEntry>,
        /// Cosine between the two questions' embeddings (1.0 for exact).
        similarity: f32,
    },
    /// An entry that fits but for the corpus version, which has changed since it was made,
    /// or the end user's access, which may let this request see other documents: it
    /// answers only if retrieval for this request returns exactly its recorded sources
    /// ([`CachedAnswer::built_from`]).
    Verify {
        /// The entries, at most [`MAX_VERIFIED`], the most similar first, each with the cosine
        /// between the two questions' embeddings (1.0 for exact): the first whose sources
        /// this request's retrieval returns answers.
        candidates: Vec<Candidate>,
    },
    /// Nothing usable.
    Miss,
    /// The backend failed or did not answer within the budget (a miss, with the reason).
    Failed(String),
    /// A miss sampled for learning the tenant's threshold: the LLM answers, and its answer is
    /// compared with this candidate's ([`SemanticCache::observe`]). The candidate may be past
    /// the threshold (an explored hit: an LLM call the cache would have saved) or under it.
    Compare {
        /// The candidate.
        entry: Box<CacheEntry>,
        /// Cosine between the two questions' embeddings.
        similarity: f32,
    },
}

/// Cache settings, from [`Config`].
#[derive(Debug, Clone)]
pub struct CacheSettings {
    /// Default cosine threshold for a similar match.
    pub threshold: f32,
    /// Thresholds of tenants that set their own.
    pub tenant_thresholds: HashMap<Tenant, f32>,
    /// Lifetime of an entry.
    pub ttl: Duration,
    /// Budget of one lookup round; past it the lookup is a miss.
    pub budget: Duration,
    /// Tenants that learn their threshold, with the share of candidates they compare.
    pub explore: HashMap<Tenant, f64>,
    /// The false-hit rate a learned threshold keeps under (95 % confidence).
    pub error_bound: f64,
}

impl CacheSettings {
    /// The rules of the cache section.
    pub fn from_config(config: &CacheConfig) -> Self {
        Self {
            threshold: config.threshold,
            tenant_thresholds: config.tenant_thresholds.clone(),
            ttl: config.ttl,
            budget: config.budget,
            explore: config.explore.clone(),
            error_bound: config.error_bound,
        }
    }
}

/// The cache stage: matching rules over a [`CacheStore`].
pub struct SemanticCache {
    store: Arc<dyn CacheStore>,
    settings: CacheSettings,
    lsh: Lsh,
    /// What the guard knows of words; until it is read, any differing word is another question.
    lexicon: SharedLexicon,
    /// The comparisons of tenants that learn their threshold, in this process.
    learned: std::sync::Mutex<HashMap<Tenant, Observations>>,
    /// Seconds since the epoch, which entries expire by ([`now`]; a test's own clock).
    clock: Clock,
}

/// Seconds since the epoch.
type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

impl SemanticCache {
    /// A cache over `store` for query vectors of `dim` components.
    pub fn new(store: Arc<dyn CacheStore>, settings: CacheSettings, dim: usize) -> Self {
        Self {
            store,
            settings,
            lsh: Lsh::new(dim),
            lexicon: SharedLexicon::default(),
            learned: Default::default(),
            clock: Arc::new(now),
        }
    }

    /// The cache telling time by `clock` (seconds since the epoch) instead of the system's:
    /// entries written and expired by it.
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The cache with the guard reading `lexicon` (WordNet) for words that may stand for
    /// one another; without one, any differing word is another question.
    pub fn with_lexicon(mut self, lexicon: SharedLexicon) -> Self {
        self.lexicon = lexicon;
        self
    }

    /// The backend's name.
    pub fn backend(&self) -> &'static str {
        self.store.backend()
    }

    /// Whether the backend is read without a network round trip.
    pub fn in_process(&self) -> bool {
        self.store.in_process()
    }

    /// The cosine a similar question of `tenant` needs to reach.
    pub fn threshold(&self, tenant: &Tenant) -> f32 {
        match self.estimate(tenant) {
            Some(estimate) => estimate.threshold as f32,
            None => self.configured_threshold(tenant),
        }
    }

    /// The threshold the configuration gives the tenant.
    fn configured_threshold(&self, tenant: &Tenant) -> f32 {
        self.settings
            .tenant_thresholds
            .get(tenant)
            .copied()
            .unwrap_or(self.settings.threshold)
    }

    /// For a tenant that learns its threshold: the threshold its comparisons give and what
    /// they say of its false-hit rate.
    pub fn estimate(&self, tenant: &Tenant) -> Option<Estimate> {
        self.settings.explore.get(tenant)?;
        let (configured, bound) = (self.configured_threshold(tenant), self.settings.error_bound);
        let learned = self.learned.lock().unwrap_or_else(|e| e.into_inner());
        Some(match learned.get(tenant) {
            Some(observations) => observations.estimate(configured, bound),
            None => Observations::default().estimate(configured, bound),
        })
    }

    /// What the guard knows of words: nothing until the lexicon is read.
    fn lexicon(&self) -> &Lexicon {
        self.lexicon.get()
    }

    /// Whether two answers state the same facts as far as words (and the lexicon's antonyms)
    /// tell: [`guard::same_facts`].
    pub fn same_facts(&self, a: &str, b: &str) -> bool {
        guard::same_facts(a, b, self.lexicon())
    }

    /// The tenants that learn their threshold (`SLUICE_CACHE_EXPLORE`).
    pub fn learning_tenants(&self) -> impl Iterator<Item = &Tenant> {
        self.settings.explore.keys()
    }

    /// Records a comparison of a [`Lookup::Compare`] candidate's answer with the LLM's.
    pub fn observe(&self, tenant: &Tenant, similarity: f32, same: bool) {
        if self.settings.explore.contains_key(tenant) {
            let mut learned = self.learned.lock().unwrap_or_else(|e| e.into_inner());
            learned
                .entry(tenant.clone())
                .or_default()
                .record(similarity, same);
        }
    }

    /// The entry under the probe's exact key, if it is fresh.
    pub async fn exact(&self, tenant: &Tenant, probe: &Probe, scope: &Scope) -> Lookup {
        let found = tokio::time::timeout(self.settings.budget, self.store.get(tenant, &probe.key));
        match found.await {
            Err(_) => Lookup::Failed(self.late()),
            Ok(Err(e)) => Lookup::Failed(e.to_string()),
            Ok(Ok(Some(entry))) if entry.query == probe.normalised => {
                match fit(&entry, tenant, scope, (self.clock)()) {
                    Some(fit) => fit.lookup(entry, 1.0),
                    None => Lookup::Miss,
                }
            }
            Ok(Ok(_)) => Lookup::Miss,
        }
    }

    /// The most similar fresh entry that the guard allows, if it reaches the threshold.
    pub async fn similar(
        &self,
        tenant: &Tenant,
        probe: &Probe,
        vector: &[f32],
        scope: &Scope,
    ) -> Lookup {
        let buckets = self.lsh.buckets(vector);
        let found = tokio::time::timeout(
            self.settings.budget,
            self.store.candidates(tenant, &buckets),
        );
        let candidates = match found.await {
            Err(_) => return Lookup::Failed(self.late()),
            Ok(Err(e)) => return Lookup::Failed(e.to_string()),
            Ok(Ok(candidates)) => candidates,
        };
        let threshold = (probe.threshold).unwrap_or_else(|| self.threshold(tenant));
        let explore = self.settings.explore.get(tenant).copied().unwrap_or(0.0);
        // A tenant that learns compares candidates down to the learner's floor.
        let least = if explore > 0.0 {
            threshold.min(learn::FLOOR)
        } else {
            threshold
        };
        let lexicon = self.lexicon();
        let now = (self.clock)();
        let mut fitting: Vec<(f32, Fit, CacheEntry)> = (candidates.into_iter())
            .filter_map(|e| Some((fit(&e, tenant, scope, now)?, e)))
            .map(|(fit, e)| (cosine(vector, &e.vector), fit, e))
            .filter(|(similarity, _, _)| *similarity >= least)
            .filter(|(_, _, e)| {
                probe
                    .guard
                    .conflict(&Guard::of(&e.query), lexicon)
                    .is_none()
            })
            .collect();
        // The most similar first, but one that answers at once before one to verify.
        let at_once = |(similarity, fit, _): &(f32, Fit, CacheEntry)| {
            *fit == Fit::Now && *similarity >= threshold
        };
        fitting.sort_by(|a, b| (at_once(b).cmp(&at_once(a))).then(b.0.total_cmp(&a.0)));
        let Some(&(similarity, fit, _)) = fitting.first() else {
            return Lookup::Miss;
        };
        // Learning compares answers made under the version in use.
        if fit == Fit::Now && explore > 0.0 && learn::sampled(explore) {
            let (similarity, _, entry) = fitting.swap_remove(0);
            return Lookup::Compare {
                entry: Box::new(entry),
                similarity,
            };
        }
        match (similarity >= threshold, fit) {
            (false, _) => Lookup::Miss,
            (true, Fit::Now) => {
                let (similarity, _, entry) = fitting.swap_remove(0);
                Fit::Now.lookup(entry, similarity)
            }
            // Every entry to verify past the threshold, most similar first: the sources
            // decide which one, if any, answers (an entry made for users who see other
            // documents than this user may come before one made for the same ones).
            (true, Fit::IfSourcesAgree) => Lookup::Verify {
                candidates: joined(
                    Vec::new(),
                    (fitting.into_iter())
                        .filter(|(similarity, _, _)| *similarity >= threshold)
                        .map(|(similarity, _, entry)| (Box::new(entry), similarity))
                        .collect(),
                ),
            },
        }
    }

    /// [`exact`](Self::exact) and [`similar`](Self::similar) at once (one parallel round for
    /// a remote backend); an exact hit wins.
    pub async fn lookup(
        &self,
        tenant: &Tenant,
        probe: &Probe,
        vector: &[f32],
        scope: &Scope,
    ) -> Lookup {
        let (exact, similar) = tokio::join!(
            self.exact(tenant, probe, scope),
            self.similar(tenant, probe, vector, scope)
        );
        match (exact, similar) {
            (hit @ Lookup::Hit { .. }, _) | (_, hit @ Lookup::Hit { .. }) => hit,
            (Lookup::Verify { candidates: a }, Lookup::Verify { candidates: b }) => {
                Lookup::Verify {
                    candidates: joined(a, b),
                }
            }
            (verify @ Lookup::Verify { .. }, _) | (_, verify @ Lookup::Verify { .. }) => verify,
            (_, compare @ Lookup::Compare { .. }) => compare,
            (failed @ Lookup::Failed(_), _) | (_, failed @ Lookup::Failed(_)) => failed,
            _ => Lookup::Miss,
        }
    }

    /// An entry for `answer` to the probed question, expiring after the configured TTL.
    pub fn entry(
        &self,
        tenant: &Tenant,
        probe: &Probe,
        vector: Vec<f32>,
        scope: Scope,
        answer: CachedAnswer,
    ) -> CacheEntry {
        CacheEntry {
            tenant: tenant.clone(),
            key: probe.key.clone(),
            query: probe.normalised.clone(),
            buckets: self.lsh.buckets(&vector),
            vector,
            scope,
            expires_at: (self.clock)() + self.settings.ttl.as_secs(),
            answer,
        }
    }

    /// Stores an entry.
    pub async fn put(&self, entry: &CacheEntry) -> Result<(), CacheError> {
        self.store.put(entry).await
    }

    /// Deletes the entries of `tenant` (only those made for keys bound to `binding`, when it
    /// is given); returns how many.
    pub async fn clear(&self, tenant: &Tenant, binding: Option<&str>) -> Result<usize, CacheError> {
        self.store.clear(tenant, binding).await
    }

    /// Forgets the answer whose [`CachedAnswer::digest`] is `answer` (a user voted it down):
    /// every entry of the tenant that holds it, under any key; returns how many.
    pub async fn forget(&self, tenant: &Tenant, answer: &str) -> Result<usize, CacheError> {
        self.store.forget(tenant, answer).await
    }

    /// Keeps answers to `question` from being cached for `tenant` while its corpus is at
    /// `corpus_version` (a user voted its answer down: the same question over the same
    /// documents would make it again). The mark is an entry of its own, under a key no
    /// question has and in no band, which expires with the cache's TTL.
    pub async fn block(
        &self,
        tenant: &Tenant,
        question: &str,
        corpus_version: u64,
    ) -> Result<(), CacheError> {
        let normalised = crate::language::normalise(question);
        let mark = CacheEntry {
            tenant: tenant.clone(),
            key: blocked_key(&normalised),
            query: normalised,
            vector: vec![0.0],
            buckets: Vec::new(),
            scope: Scope {
                corpus_version,
                llm_model: String::new(),
                embed_model: String::new(),
                prompt_version: 0,
                k: 0,
                rerank: None,
                variant: None,
                binding: None,
                access: None,
            },
            expires_at: (self.clock)() + self.settings.ttl.as_secs(),
            answer: CachedAnswer::one_token(""),
        };
        self.store.put(&mark).await
    }

    /// Whether answers to the `normalised` question are kept out of the cache under
    /// `corpus_version` ([`Self::block`]); a mark that cannot be read blocks nothing.
    pub async fn blocked(&self, tenant: &Tenant, normalised: &str, corpus_version: u64) -> bool {
        match self.store.get(tenant, &blocked_key(normalised)).await {
            Ok(Some(mark)) => {
                mark.scope.corpus_version == corpus_version && mark.expires_at > (self.clock)()
            }
            _ => false,
        }
    }

    fn late(&self) -> String {
        format!(
            "no answer within the {} ms cache budget",
            self.settings.budget.as_millis()
        )
    }
}

/// The key of the mark that keeps answers to a question out of the cache: not a hex digest,
/// so no question's key.
fn blocked_key(normalised: &str) -> String {
    format!(
        "blocked:{}",
        sluice_contract::sha256_hex(normalised.as_bytes())
    )
}

/// Cosine similarity (the stored vector may have lost precision, so both are normalised).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0f32, 0.0f32, 0.0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

/// Unix time in seconds.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
