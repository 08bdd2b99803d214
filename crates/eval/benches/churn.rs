//! The answer cache while the tenant's documents change: how many questions it answers, by
//! the rule in use beside the one it replaced, whether any hit was stale, and what each kind
//! of hit costs.
//!
//! - **The tenant**: τ²-bench's banking documents (`scripts/setup.sh eval`) less a seeded
//!   reserve that additions draw on, ingested as `sluice ingest` would into Qdrant Edge.
//! - **The questions**: every question of the held-out halves of the repository's two
//!   labelled sets (`tests/fixtures/cache_pairs.jsonl`, `cache_guard_pairs.jsonl`), one a
//!   second of simulated time for an hour, drawn by Zipf's law (s = 1) over them in a seeded
//!   order; a question with paraphrases in its set is asked in one of them half the time.
//! - **The changes**, at a set rate (one a minute, then six): an edit (a sentence added to a
//!   random section of a random document) half the time, else an addition (a document not in
//!   the corpus) or a deletion (a random document).
//! - Every question goes through the real [`Pipeline`] (the model, the store, the in-memory
//!   cache at the deployment's threshold with the WordNet lexicon; grounding off) with an LLM
//!   fixture that answers each call with a numbered token, so that a hit names the answer it
//!   replays. Three runs of one stream: no change at all; under churn by the rule in use (an
//!   entry made before a change answers when retrieval returns its recorded sources); under
//!   churn by the rule it replaced (every change stops every entry of the tenant answering:
//!   emulated by clearing the tenant's cache at each change) — the last two side by side,
//!   change by change.
//! - **Stale**: a hit whose answer was made from sources (as this bench read them from the
//!   store, text and all, when the LLM was called) that the store no longer returns, neither
//!   for the question asked nor for one the answer was made or verified for (a similar hit
//!   under an unchanged corpus may be made from other sources than its paraphrase would
//!   retrieve: that is the threshold's judgement, not a change; a `sources` hit keeps a copy
//!   of the answer under the asking question, an entry of that question). An exact hit is
//!   judged by the questions written as the one asked: its entry was made or verified for
//!   that question, never vouched for by a similar one's retrieval. There must be none: the
//!   bench fails if any.
//! - **Latency**: from the request to its first token, per kind of hit, and for a miss (whose
//!   LLM answers at once: the pipeline's own time).
//!
//! Time is simulated: each question is asked when the one before is answered, and an hour's
//! stream stays within the cache's TTL.
//!
//! **End users** (`cache users` lines), on the first corpus with access lists: each document
//! open to all at [`OPEN`], else to one of [`GROUPS`] groups; [`USERS`] users, each in one
//! group; the same stream, each question asked by a random user. Four runs: no end users (the
//! tenant before it had any); answers keyed by each user's principals and answering only them
//! (the access filter in the cache's variant, as a request's own filter is); the rule in use
//! (an answer made for other principals answers when this user's retrieval returns its
//! sources); and, for reference, users whose tokens carry their group alone (so a group's
//! users are one set of principals). A hit that shows a user a source they may not see fails
//! the bench.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use sluice_contract::access::{ACCESS_KEY, access_filter, may_see};
use sluice_contract::document::Document;
use sluice_contract::error::LlmError;
use sluice_contract::filter::Filter;
use sluice_contract::fusion::Fusion;
use sluice_contract::grounding::GroundingMode;
use sluice_contract::random::SplitMix;
use sluice_contract::sse::{CacheMatch, CacheState, Event};
use sluice_contract::stages::{ChatMessage, Hit, Llm, LlmEvent, LlmStream, Search, Store};
use sluice_core::Pipeline;
use sluice_core::cache::{CacheSettings, SemanticCache};
use sluice_core::language::lexicon::{Lexicon, SharedLexicon};
use sluice_core::pipeline::AnswerRequest;
use sluice_eval::Corpus;
use sluice_local::MemoryCache;

/// Sources per answer (the request path's default).
const K: usize = 5;
/// Simulated minutes of one stream, at one question a second.
const MINUTES: usize = 60;
/// Changes a minute, one churn run each.
const RATES: [usize; 2] = [1, 6];
/// Documents held out of the first ingest, for additions.
const RESERVE: usize = 40;
/// How often a question with paraphrases is asked in one of them.
const PARAPHRASED: f64 = 0.5;
const SEED: u64 = 57;
/// End users: the share of documents open to all, the groups the others are for, and users.
const OPEN: f64 = 0.7;
const GROUPS: usize = 4;
const USERS: usize = 200;

/// Answers every call with the next numbered token (`answer-N`), at once. The number is one
/// count for every pipeline of the bench (the runs side by side share the judge's record of
/// answers: a number per run would give two answers one token, and judge one by the other's
/// question and sources).
struct Numbered;

/// The next answer's number, whichever pipeline asks.
static ANSWERS: AtomicUsize = AtomicUsize::new(0);

#[async_trait]
impl Llm for Numbered {
    fn model_id(&self) -> &str {
        "churn-fixture"
    }
    async fn stream(&self, _: Vec<ChatMessage>, _: u32, _: &str) -> Result<LlmStream, LlmError> {
        let n = ANSWERS.fetch_add(1, Ordering::Relaxed);
        let events = vec![
            Ok(LlmEvent::Token(format!("answer-{n}"))),
            Ok(LlmEvent::Finish {
                finish_reason: "stop".into(),
                completion_tokens: Some(1),
                prompt_tokens: None,
            }),
        ];
        Ok(Box::pin(futures::stream::iter(events)))
    }
    async fn ready(&self) -> Result<(), LlmError> {
        Ok(())
    }
}

/// A source as this bench judges it: document, chunk and the chunk's whole text.
type Source = (String, usize, String);

/// How a question was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Miss,
    Exact,
    Similar,
    Sources,
}

/// One run's counts.
#[derive(Default)]
struct Tally {
    asked: usize,
    hits: HashMap<Kind, usize>,
    stale: usize,
    /// From the request to its first token, per kind.
    first_token: HashMap<Kind, Vec<Duration>>,
}

impl Tally {
    fn hit_rate(&self) -> f64 {
        let hits: usize = (self.hits.iter())
            .filter(|(k, _)| **k != Kind::Miss)
            .map(|(_, n)| n)
            .sum();
        hits as f64 / self.asked.max(1) as f64
    }
    fn count(&self, kind: Kind) -> usize {
        self.hits.get(&kind).copied().unwrap_or(0)
    }
}

/// What the bench shares between runs: the corpus, its judge's fusion, each question's
/// vector, and every answer the LLM made (its question, filter and the sources it was made
/// from).
struct World {
    corpus: Corpus,
    fusion: Fusion,
    vectors: HashMap<String, Vec<f32>>,
    /// Each answer's question, the filter it was searched under, and its sources.
    answers: HashMap<String, (String, Option<Filter>, Vec<Source>)>,
    /// Each answer's copies: the questions (and filters) a later request verified it for.
    copies: HashMap<String, Vec<(String, Option<Filter>)>>,
}

impl World {
    /// The top `K` the store returns now for `question` under `filter`, in the pipeline's
    /// order.
    async fn sources(&self, question: &str, filter: Option<&Filter>) -> Vec<Source> {
        let search = Search::new(question, &self.vectors[question], K)
            .fusion(self.fusion)
            .filter(filter);
        let mut hits = (self.corpus.edge.search(&self.corpus.tenant, &search).await)
            .expect("the store answers");
        hits.sort_by(Hit::rank_order);
        (hits.into_iter())
            .map(|h| (h.document.id, h.chunk, h.text))
            .collect()
    }

    /// Asks `question` through `pipeline` and counts the outcome in `tally`.
    async fn ask(&mut self, pipeline: &Arc<Pipeline>, question: &str, tally: &mut Tally) {
        let request = request(&self.corpus, question, Instant::now());
        self.ask_as(pipeline, request, tally).await;
    }

    /// Asks `request` through `pipeline`, counts the outcome in `tally`, and returns the
    /// documents of the sources it was answered from.
    async fn ask_as(
        &mut self,
        pipeline: &Arc<Pipeline>,
        request: AnswerRequest,
        tally: &mut Tally,
    ) -> Vec<String> {
        let (question, searched) = (request.query.clone(), request.searched());
        let started = request.received;
        let mut events = Box::pin(pipeline.answer(request));
        let (mut meta, mut first, mut token) = (None, None, String::new());
        while let Some(event) = events.next().await {
            match event {
                Event::Meta(m) => meta = Some(m),
                Event::Token(t) => {
                    first.get_or_insert_with(|| started.elapsed());
                    token.push_str(&t.text);
                }
                Event::Done(_) => {}
                Event::Error(e) => panic!("{question:?}: {e:?}"),
            }
        }
        let meta = meta.expect("a meta event");
        assert!(
            meta.degraded.is_empty(),
            "{question:?}: {:?}",
            meta.degraded
        );
        let kind = match (meta.cache, meta.cache_match) {
            (CacheState::Hit, Some(CacheMatch::Exact)) => Kind::Exact,
            (CacheState::Hit, Some(CacheMatch::Similar)) => Kind::Similar,
            (CacheState::Hit, Some(CacheMatch::Sources)) => Kind::Sources,
            (CacheState::Miss, None) => Kind::Miss,
            other => panic!("{question:?}: cache {other:?}"),
        };
        tally.asked += 1;
        *tally.hits.entry(kind).or_default() += 1;
        (tally.first_token.entry(kind).or_default()).push(first.expect("a token"));
        if kind == Kind::Miss {
            let sources = self.sources(&question, searched.as_ref()).await;
            let judged: Vec<(&str, usize)> = sources.iter().map(|s| (&*s.0, s.1)).collect();
            let prompted: Vec<(&str, usize)> =
                meta.documents.iter().map(|d| (&*d.id, d.chunk)).collect();
            assert_eq!(judged, prompted, "the judge reads what the pipeline read");
            self.answers
                .insert(token, (question.clone(), searched, sources));
        } else {
            let (made_for, under, recorded) =
                self.answers.get(&token).expect("a known answer").clone();
            // The questions the answer's entries were made or verified for: the one the LLM
            // answered, and each one whose own retrieval matched its sources later (its copy
            // is an entry of that question, made under the version then in use). An exact hit
            // is an entry of the question asked: judged by the questions written as it is.
            let own = sluice_core::language::normalise(&question);
            let mut made: Vec<(String, Option<Filter>)> = vec![
                (question.clone(), searched.clone()),
                (made_for.clone(), under),
            ];
            made.extend(self.copies.get(&token).into_iter().flatten().cloned());
            made.retain(|(q, _)| kind != Kind::Exact || sluice_core::language::normalise(q) == own);
            let mut fresh = false;
            for (q, f) in &made {
                fresh = fresh || self.sources(q, f.as_ref()).await == recorded;
            }
            if !fresh {
                tally.stale += 1;
                eprintln!("stale: {question:?} answered by {made_for:?} ({kind:?})");
            }
            if kind == Kind::Sources {
                (self.copies.entry(token))
                    .or_default()
                    .push((question.clone(), searched));
            }
        }
        meta.documents.into_iter().map(|d| d.id).collect()
    }
}

fn request(corpus: &Corpus, question: &str, received: Instant) -> AnswerRequest {
    AnswerRequest {
        tenant: corpus.tenant.clone(),
        query: question.into(),
        k: K,
        filter: None,
        binding: None,
        access: None,
        conversation: Default::default(),
        max_tokens: None,
        rerank_context: Default::default(),
        session_id: None,
        // Never degraded on a busy machine: the cache is measured, not the deadline.
        retrieval_deadline: Duration::from_secs(30),
        received,
        bypass_cache: false,
        trace: sluice_core::trace::TraceContext::from_header(None),
        include_prompt: false,
        ends_by: None,
        show_rerank_failure: false,
        settings: None,
        extract: None,
        pinned: Default::default(),
    }
}

/// The questions, each with its wordings (its own first, then its paraphrases), from the
/// held-out halves of both labelled sets.
fn questions() -> Vec<Vec<String>> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let sets = sluice_eval::cache::fixture_sets(&fixtures).expect("the labelled sets");
    let mut wordings: Vec<Vec<String>> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut add = |q: &str, wordings: &mut Vec<Vec<String>>| {
        *index.entry(q.to_string()).or_insert_with(|| {
            wordings.push(vec![q.to_string()]);
            wordings.len() - 1
        })
    };
    for pair in sets.into_iter().flat_map(|(_, p)| p).filter(|p| !p.tuning) {
        let own = add(&pair.cached, &mut wordings);
        match pair.paraphrase {
            true if !wordings[own].contains(&pair.asked) => wordings[own].push(pair.asked),
            true => {}
            false => {
                add(&pair.asked, &mut wordings);
            }
        }
    }
    wordings
}

/// A draw in [0, 1).
fn uniform(rng: &mut SplitMix) -> f64 {
    (rng.bits() >> 11) as f64 / (1u64 << 53) as f64
}

/// The stream: a wording for each second, questions drawn by Zipf's law over a seeded order.
fn stream(questions: &[Vec<String>], rng: &mut SplitMix) -> Vec<String> {
    let mut order: Vec<usize> = (0..questions.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let weights: Vec<f64> = (1..=order.len()).map(|rank| 1.0 / rank as f64).collect();
    let total: f64 = weights.iter().sum();
    (0..MINUTES * 60)
        .map(|_| {
            let mut u = uniform(rng) * total;
            let rank = weights
                .iter()
                .position(|w| {
                    u -= w;
                    u < 0.0
                })
                .unwrap_or(order.len() - 1);
            let wordings = &questions[order[rank]];
            match wordings.len() > 1 && uniform(rng) < PARAPHRASED {
                true => wordings[1 + rng.below(wordings.len() - 1)].clone(),
                false => wordings[0].clone(),
            }
        })
        .collect()
}

/// The tenant's documents as changes leave them.
struct Churn {
    live: Vec<Document>,
    /// Documents not in the corpus: the reserve, and those deleted.
    out: Vec<Document>,
    edits: usize,
    additions: usize,
    deletions: usize,
}

impl Churn {
    /// One change, drawn by `rng`, made to the store.
    async fn change(&mut self, corpus: &Corpus, rng: &mut SplitMix) {
        let ingest = |doc: Document| async {
            (corpus.ingest.ingest(&corpus.tenant, vec![doc]).await).expect("ingested");
        };
        match rng.below(4) {
            2 if !self.out.is_empty() => {
                let doc = self.out.swap_remove(rng.below(self.out.len()));
                ingest(doc.clone()).await;
                self.live.push(doc);
                self.additions += 1;
            }
            3 => {
                let doc = self.live.swap_remove(rng.below(self.live.len()));
                let deleted = corpus.ingest.delete(&corpus.tenant, None, &doc.id).await;
                assert!(deleted.expect("deleted").is_some(), "{} was there", doc.id);
                self.out.push(doc);
                self.deletions += 1;
            }
            _ => {
                self.edits += 1;
                let sentence = format!(" This page was reviewed again (review {}).", self.edits);
                let at = rng.below(self.live.len());
                let doc = &mut self.live[at];
                match doc.sections.len() {
                    0 => doc.text.push_str(&sentence),
                    n => doc.sections[rng.below(n)].text.push_str(&sentence),
                }
                ingest(doc.clone()).await;
            }
        }
    }
}

/// A pipeline over the corpus with an empty cache of its own.
fn pipeline(
    world: &World,
    settings: &sluice_app::Settings,
    lexicon: &Arc<Lexicon>,
) -> Arc<Pipeline> {
    let mut config = settings.config.answer.clone();
    config.grounding = GroundingMode::Off;
    config.extract = false;
    let corpus = &world.corpus;
    let store: Arc<dyn Store> = Arc::new(corpus.edge.clone());
    let llm = Arc::new(Numbered);
    let mut pipeline = Pipeline::new(config, corpus.embedder.clone(), store, llm);
    let cache = SemanticCache::new(
        Arc::new(MemoryCache::new(100_000)),
        CacheSettings::from_config(&settings.config.cache),
        sluice_embed::DIM,
    )
    .with_lexicon(SharedLexicon::ready(lexicon.clone()));
    pipeline.cache = Some(Arc::new(cache));
    Arc::new(pipeline)
}

fn percentiles(samples: Option<&Vec<Duration>>) -> String {
    let Some(samples) = samples.filter(|s| !s.is_empty()) else {
        return "none".into();
    };
    let mut sorted = samples.clone();
    sorted.sort();
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e3;
    format!(
        "p50 {:.2} / p99 {:.2} ms (n {})",
        at(0.5),
        at(0.99),
        sorted.len()
    )
}

fn rates(name: &str, t: &Tally) -> String {
    format!(
        "{name}: hit rate {:.1} % (exact {}, similar {}, sources {}; {} misses), stale hits {}",
        100.0 * t.hit_rate(),
        t.count(Kind::Exact),
        t.count(Kind::Similar),
        t.count(Kind::Sources),
        t.count(Kind::Miss),
        t.stale
    )
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(run());
}

async fn run() {
    let settings = sluice_app::Settings::from_env().expect("configuration");
    let home = settings.config.home.clone();
    let data: PathBuf = home.join("eval/tau2-banking");
    let (mut documents, _) = sluice_eval::load(&data).expect("τ²-bench (scripts/setup.sh eval)");
    let mut rng = SplitMix(SEED);
    for i in (1..documents.len()).rev() {
        documents.swap(i, rng.below(i + 1));
    }
    let reserve = documents.split_off(documents.len() - RESERVE);
    let corpus = Corpus::ingested(&settings, documents.clone(), &|line: &str| {
        eprintln!("{line}")
    })
    .await
    .expect("the corpus");
    let lexicon = Arc::new(match &settings.config.cache.lexicon {
        Some(path) => Lexicon::load(path).expect("the lexicon"),
        None => Lexicon::default(),
    });
    let questions = questions();
    let stream = stream(&questions, &mut rng);
    // One at a time, as the pipeline embeds a question (a batch's padding moves the last
    // digits, and with them a near tie at the k-th source).
    let all: Vec<&String> = questions.iter().flatten().collect();
    let vectors = (all.iter())
        .map(|q| {
            let mut one = corpus.embedder.embed(&[q.as_str()]).expect("embedded");
            (q.to_string(), one.pop().expect("a vector"))
        })
        .collect();
    let fusion = settings.config.answer.fusion.for_tenant(&corpus.tenant);
    let mut world = World {
        corpus,
        fusion,
        vectors,
        answers: HashMap::new(),
        copies: HashMap::new(),
    };
    println!(
        "cache churn: {} questions ({} distinct, {} wordings), one a second for {MINUTES} min, \
         over {} chunks; cosine threshold {}",
        stream.len(),
        questions.len(),
        all.len(),
        world.corpus.chunks,
        settings.config.cache.threshold
    );

    // `cargo bench --bench churn -- users` (or `churn`) runs that part alone.
    let asked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let runs = |part: &str| asked.is_empty() || asked.iter().any(|a| a == part);
    if runs("churn") {
        churn(
            &mut world, &documents, &reserve, &stream, &settings, &lexicon, &mut rng,
        )
        .await;
    }
    if runs("users") {
        users(&mut world, &documents, &stream, &settings, &lexicon).await;
    }
}

/// The `cache churn` lines (see the module docs).
async fn churn(
    world: &mut World,
    documents: &[Document],
    reserve: &[Document],
    stream: &[String],
    settings: &sluice_app::Settings,
    lexicon: &Arc<Lexicon>,
    rng: &mut SplitMix,
) {
    // No change at all.
    let still = pipeline(world, settings, lexicon);
    let mut unchanged = Tally::default();
    for question in stream {
        world.ask(&still, question, &mut unchanged).await;
    }
    drop(still);
    println!("cache churn, {}", rates("no change", &unchanged));
    let mut stale = unchanged.stale;
    let mut latencies = std::mem::take(&mut unchanged.first_token);

    for rate in RATES {
        let (now, before) = (
            pipeline(world, settings, lexicon),
            pipeline(world, settings, lexicon),
        );
        let (mut kept, mut cleared) = (Tally::default(), Tally::default());
        let mut churn = Churn {
            live: documents.to_vec(),
            out: reserve.to_vec(),
            edits: 0,
            additions: 0,
            deletions: 0,
        };
        let every = 60 / rate;
        for (second, question) in stream.iter().enumerate() {
            if second > 0 && second % every == 0 {
                churn.change(&world.corpus, rng).await;
                let cache = before.cache.as_ref().expect("a cache");
                (cache.clear(&world.corpus.tenant, None).await).expect("cleared");
            }
            world.ask(&now, question, &mut kept).await;
            world.ask(&before, question, &mut cleared).await;
        }
        println!(
            "cache churn, {rate} change(s) a minute ({} edits, {} additions, {} deletions): {}; \
             {} ({:.3} of no change)",
            churn.edits,
            churn.additions,
            churn.deletions,
            rates("every change forgets all", &cleared),
            rates("sources verified", &kept),
            kept.hit_rate() / unchanged.hit_rate(),
        );
        stale += kept.stale + cleared.stale;
        for (kind, samples) in kept.first_token {
            latencies.entry(kind).or_default().extend(samples);
        }
        // Back to the first corpus for the next rate: what changed is sent again as it was
        // (or deleted, if it was not there).
        let first: HashMap<&str, &Document> = documents.iter().map(|d| (&*d.id, d)).collect();
        for doc in churn.live.iter().filter(|d| !first.contains_key(&*d.id)) {
            let deleted = world
                .corpus
                .ingest
                .delete(&world.corpus.tenant, None, &doc.id);
            deleted.await.expect("deleted");
        }
        let restored = documents.to_vec();
        (world
            .corpus
            .ingest
            .ingest(&world.corpus.tenant, restored)
            .await)
            .expect("restored");
    }
    for (name, kind) in [
        ("exact", Kind::Exact),
        ("similar", Kind::Similar),
        ("sources", Kind::Sources),
        ("miss (an LLM that answers at once)", Kind::Miss),
    ] {
        println!(
            "cache churn, first token, {name}: {}",
            percentiles(latencies.get(&kind))
        );
    }
    assert_eq!(stale, 0, "stale hits");
}

/// Who a run takes its users to be, and where their access goes in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Users {
    /// No end users: every question sees every document.
    None,
    /// Each user's principals in the request's filter: their answers are theirs alone.
    Keyed,
    /// Their principals as the routes send them (the rule in use).
    Shared,
    /// Tokens that carry the group alone, keyed as `Keyed`: one set of principals per group.
    GroupOnly,
}

/// The `cache users` lines (see the module docs).
async fn users(
    world: &mut World,
    documents: &[Document],
    stream: &[String],
    settings: &sluice_app::Settings,
    lexicon: &Arc<Lexicon>,
) {
    // A generator of its own: the same lists and askers whether or not the churn ran first.
    let rng = &mut SplitMix(SEED + 1);
    let mut listed = documents.to_vec();
    for doc in &mut listed {
        if uniform(rng) >= OPEN {
            doc.set_access(&format!("group:g{}", rng.below(GROUPS)));
        }
    }
    let tenant = world.corpus.tenant.clone();
    (world.corpus.ingest.ingest(&tenant, listed.clone()).await).expect("access lists");
    let access: HashMap<String, Option<Vec<String>>> = (listed.iter())
        .map(|d| {
            let list = (d.metadata.get(ACCESS_KEY).and_then(|a| a.as_array())).map(|a| {
                (a.iter())
                    .filter_map(|p| p.as_str().map(String::from))
                    .collect()
            });
            (d.id.clone(), list)
        })
        .collect();
    let askers: Vec<usize> = stream.iter().map(|_| rng.below(USERS)).collect();
    println!(
        "cache users: {USERS} users in {GROUPS} groups, {} of {} documents open to all, the \
         others to one group; each question asked by a random user",
        access.values().filter(|a| a.is_none()).count(),
        access.len()
    );
    let mut baseline = None;
    let mut leaks = 0;
    for (name, rule) in [
        ("no end users", Users::None),
        ("keyed by each user's principals", Users::Keyed),
        ("shared through sources", Users::Shared),
        ("group-only tokens (reference)", Users::GroupOnly),
    ] {
        let pipeline = pipeline(world, settings, lexicon);
        let mut tally = Tally::default();
        for (question, user) in stream.iter().zip(&askers) {
            let group = format!("group:g{}", user % GROUPS);
            let principals = match rule {
                Users::GroupOnly => vec![group],
                _ => vec![format!("user:u{user}"), group],
            };
            let mut request = request(&world.corpus, question, Instant::now());
            let filter = Some(access_filter(Some(&principals)));
            match rule {
                Users::None => {}
                Users::Keyed | Users::GroupOnly => request.filter = filter,
                Users::Shared => request.access = filter,
            }
            let seen = world.ask_as(&pipeline, request, &mut tally).await;
            if rule != Users::None {
                leaks += (seen.iter())
                    .filter(|id| !may_see(access[*id].as_deref(), Some(&principals)))
                    .count();
            }
        }
        let of = *baseline.get_or_insert(tally.hit_rate());
        println!(
            "cache users, {} ({:.3} of no end users); first token through sources {}",
            rates(name, &tally),
            tally.hit_rate() / of,
            percentiles(tally.first_token.get(&Kind::Sources)),
        );
    }
    assert_eq!(leaks, 0, "sources a user may not see");
}
