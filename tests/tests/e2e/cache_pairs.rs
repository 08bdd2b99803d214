//! Labelled question pairs through the semantic cache with the real embedding model, as the
//! pipeline looks them up (exact key, then similar question):
//!
//! - `tests/fixtures/cache_pairs.jsonl`: 127 hand-written bank question pairs (60 paraphrases
//!   as people write them, 67 other questions: opposites, negations, numbers, products,
//!   directions, words whose shared sense is not the one meant), on both backends (in-memory,
//!   and DynamoDB on the emulator that `make test` starts);
//! - `tests/fixtures/cache_guard_pairs.jsonl`: 317 pairs from systematic templates
//!   (`scripts/guard_pairs.py`: question frames × antonyms, entities and roles, products,
//!   places, dates, amounts, negation, quantifiers, and true paraphrases), half kept for tuning
//!   the guard and half (split `held-out` in the file) set aside for reporting: the figure the
//!   README reports. Its figures were read while the guard was designed, so it is not an
//!   independent estimate (docs/cache.md).
//!
//! Every `cached` question of a set is stored for one tenant, then every `asked` question is
//! looked up. A paraphrase should find its own `cached` question; any other pair must find
//! nothing. The tests print the hit and false-hit rates per class, and each missed paraphrase
//! with its cosine and the guard's reason, and fail on any false hit. The guard reads the real
//! lexicon (WordNet, built by `scripts/setup.sh model`).
//!
//! Rule for the fixtures: an `asked` question is never a `cached` question of another pair
//! (or a paraphrase of one), so that every hit can be judged from its own pair.

use sluice_testkit::tenant;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice_contract::stages::Embedder;
use sluice_contract::{cache::CacheStore, cache::CachedAnswer, cache::Scope};
use sluice_core::cache::guard::same_facts;
use sluice_core::cache::learn::{FLOOR, Observations, SAME_ANSWER};
use sluice_core::language::lexicon::{Lexicon, SharedLexicon};
use sluice_core::{
    cache::CacheSettings, cache::Lookup, cache::Probe, cache::SemanticCache, cache::cosine,
};
use sluice_local::MemoryCache;
use sluice_tests::model;

/// How a run guards: the cosine threshold, and whether the guard reads the lexicon.
#[derive(Clone, Copy)]
struct Guard {
    threshold: f32,
    lexicon: bool,
}

impl Guard {
    /// The lexicon the guard reads: the real one, or none.
    fn lexicon(&self) -> Arc<Lexicon> {
        match self.lexicon {
            true => sluice_tests::lexicon(),
            false => Default::default(),
        }
    }
}

/// The defaults: what `sluice serve` does.
const DEFAULT: Guard = Guard {
    threshold: 0.9,
    lexicon: true,
};

/// Least share of the hand-written paraphrases answered from the cache with the defaults: a
/// regression floor, not the goal (90 %, not met: docs/cache.md). Measured 27 of 60 (0.45);
/// the floor sits three pairs under it, so that a change losing paraphrase hits fails while
/// the last digits of the model's vectors on another CPU (which move a pair or two across the
/// threshold) do not. What it protects: the guard and the lexicon letting paraphrases through.
const MIN_PARAPHRASE_HIT_RATE: f64 = 0.4;
/// The same for the templated pairs set aside for reporting (measured 41 of 50, 0.82; the
/// floor two pairs under it, for the same reason). No false hit is allowed on either set.
const MIN_HELD_OUT_PARAPHRASE_HIT_RATE: f64 = 0.78;

struct Pair {
    cached: String,
    asked: String,
    label: String,
    split: String,
}

fn pairs(fixture: &str) -> Vec<Pair> {
    let path = sluice_tests::repo().join("tests/fixtures").join(fixture);
    std::fs::read_to_string(path)
        .expect("fixture")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("fixture line is JSON");
            let field = |k: &str| v[k].as_str().expect("fixture field").to_string();
            Pair {
                cached: field("cached"),
                asked: field("asked"),
                label: field("label"),
                split: v["split"].as_str().unwrap_or("all").to_string(),
            }
        })
        .collect()
}

fn scope() -> Scope {
    Scope {
        embed_model: model().model_id().to_string(),
        ..sluice_testkit::scope(1)
    }
}

/// The model's embedding of `text`, each text embedded once for the whole binary: the guard
/// table alone asks for every sentence of its sets eighteen times (three thresholds, two
/// guards, three sets), and the model is deterministic.
fn embed(text: &str) -> Vec<f32> {
    static SEEN: std::sync::OnceLock<std::sync::Mutex<HashMap<String, Vec<f32>>>> =
        std::sync::OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(v) = seen.lock().expect("embeddings").get(text) {
        return v.clone();
    }
    let v = model().embed(&[text]).expect("embedding").remove(0);
    (seen.lock().expect("embeddings")).insert(text.to_string(), v.clone());
    v
}

/// What a set of pairs gave.
#[derive(Default)]
struct Report {
    paraphrases: usize,
    paraphrase_hits: usize,
    others: usize,
    false_hits: Vec<String>,
    /// Non-paraphrases at or above the threshold to their own cached question: the false hits
    /// there would be without the guard.
    unguarded: usize,
    /// Per label: pairs, hits.
    by_label: BTreeMap<String, (usize, usize)>,
    /// The paraphrases missed, with the cosine and the guard's reason.
    missed: Vec<String>,
}

impl Report {
    fn rate(&self) -> f64 {
        self.paraphrase_hits as f64 / self.paraphrases.max(1) as f64
    }

    fn print(&self, name: &str) {
        for line in &self.missed {
            eprintln!("{line}");
        }
        eprintln!(
            "{name} (threshold {}, lexicon): paraphrase hits {}/{} ({:.0} %), false hits {}/{}; without the guard {} of the {} would pass the threshold",
            DEFAULT.threshold,
            self.paraphrase_hits,
            self.paraphrases,
            self.rate() * 100.0,
            self.false_hits.len(),
            self.others,
            self.unguarded,
            self.others,
        );
        for (label, (n, hits)) in &self.by_label {
            eprintln!("  {label:<11} {hits:>3} hits of {n:>3}");
        }
    }
}

/// A cache over `store` guarding as `guard` says, holding every distinct `cached` question of
/// `pairs` for the test tenant, each answered by its own text (so that a hit names the
/// question it came from).
async fn cache_of(store: Arc<dyn CacheStore>, pairs: &[&Pair], guard: Guard) -> SemanticCache {
    let settings = CacheSettings {
        threshold: guard.threshold,
        tenant_thresholds: Default::default(),
        ttl: Duration::from_secs(600),
        budget: Duration::from_secs(5),
        explore: Default::default(),
        error_bound: 0.01,
    };
    let cache = SemanticCache::new(store, settings, sluice_embed::DIM)
        .with_lexicon(SharedLexicon::ready(guard.lexicon()));
    let mut stored: Vec<&str> = pairs.iter().map(|p| p.cached.as_str()).collect();
    stored.sort();
    stored.dedup();
    for q in &stored {
        let answer = CachedAnswer::one_token(*q);
        let entry = cache.entry(&tenant("bank"), &Probe::new(q), embed(q), scope(), answer);
        cache.put(&entry).await.expect("put");
    }
    cache
}

/// Stores every `cached` question of `pairs` in a cache over `store`, looks up every `asked`
/// one as the pipeline does, and reports.
async fn run(store: Arc<dyn CacheStore>, pairs: &[&Pair], guard: Guard) -> Report {
    let backend = store.backend();
    let cache = cache_of(store, pairs, guard).await;
    let cache_lexicon = guard.lexicon();

    let mut report = Report::default();
    for p in pairs {
        let probe = Probe::new(&p.asked);
        let vector = embed(&p.asked);
        let mut found = cache.exact(&tenant("bank"), &probe, &scope()).await;
        if matches!(found, Lookup::Miss) {
            found = cache
                .similar(&tenant("bank"), &probe, &vector, &scope())
                .await;
        }
        let hit = match found {
            Lookup::Hit { entry, similarity } => Some((entry.answer.tokens[0].clone(), similarity)),
            Lookup::Miss | Lookup::Compare { .. } => None,
            Lookup::Verify { .. } => {
                panic!("{backend}: one corpus version here, nothing to verify")
            }
            Lookup::Failed(e) => panic!("{backend}: lookup failed: {e}"),
        };
        let similarity = cosine(&vector, &embed(&p.cached));
        let counts = report.by_label.entry(p.label.clone()).or_default();
        counts.0 += 1;
        if p.label == "paraphrase" {
            report.paraphrases += 1;
            match &hit {
                Some((answer, _)) if *answer == p.cached => {
                    report.paraphrase_hits += 1;
                    counts.1 += 1;
                }
                Some((answer, s)) => report.false_hits.push(format!(
                    "{:?} got the answer to {answer:?} (cosine {s:.3})",
                    p.asked
                )),
                None => report.missed.push(format!(
                    "{backend}: paraphrase missed (cosine {similarity:.3}): {:?} / {:?}: {}",
                    p.cached,
                    p.asked,
                    why_missed(p, &cache_lexicon)
                )),
            }
        } else {
            report.others += 1;
            if similarity >= guard.threshold {
                report.unguarded += 1;
            }
            if let Some((answer, s)) = hit {
                counts.1 += 1;
                report.false_hits.push(format!(
                    "{} pair {:?} got the answer to {answer:?} (cosine {s:.3})",
                    p.label, p.asked
                ));
            }
        }
    }
    report
}

/// The hand-written pairs on `store`: no false hit, paraphrases above the floor.
async fn hand_written(store: Arc<dyn CacheStore>) {
    let backend = store.backend();
    let pairs = pairs("cache_pairs.jsonl");
    let report = run(store, &pairs.iter().collect::<Vec<_>>(), DEFAULT).await;
    report.print(&format!("hand-written pairs ({backend})"));
    assert!(
        report.false_hits.is_empty(),
        "{backend}: false hits: {:#?}",
        report.false_hits
    );
    assert!(
        report.rate() >= MIN_PARAPHRASE_HIT_RATE,
        "{backend}: paraphrase hit rate {:.2} is under {MIN_PARAPHRASE_HIT_RATE}",
        report.rate()
    );
}

/// One half of the templated pairs, in memory.
async fn templated(split: &str) -> Report {
    let pairs = pairs("cache_guard_pairs.jsonl");
    let half: Vec<&Pair> = pairs.iter().filter(|p| p.split == split).collect();
    assert!(half.len() >= 150, "{} {split} pairs", half.len());
    let report = run(Arc::new(MemoryCache::new(1000)), &half, DEFAULT).await;
    report.print(&format!("templated pairs, {split} half"));
    assert!(
        report.false_hits.is_empty(),
        "{split}: false hits: {:#?}",
        report.false_hits
    );
    report
}

#[tokio::test]
async fn templated_pairs_tune_half_has_no_false_hit() {
    sluice_testkit::needs!(Model);
    templated("tune").await;
}

#[tokio::test]
async fn templated_pairs_held_out_half_has_no_false_hit() {
    sluice_testkit::needs!(Model);
    let report = templated("held-out").await;
    assert!(
        report.rate() >= MIN_HELD_OUT_PARAPHRASE_HIT_RATE,
        "held-out paraphrase hit rate {:.2} is under {MIN_HELD_OUT_PARAPHRASE_HIT_RATE}",
        report.rate()
    );
}

#[tokio::test]
async fn labelled_pairs_in_memory() {
    sluice_testkit::needs!(Model);
    hand_written(Arc::new(MemoryCache::new(1000))).await;
}

#[tokio::test]
async fn labelled_pairs_on_dynamodb() {
    sluice_testkit::needs!(Llm, Aws, Model);
    let table = format!("sluice-pairs-{}", std::process::id());
    let data = tempfile::tempdir().expect("temp dir");
    let settings = sluice_tests::settings(
        data.path(),
        &[("SLUICE_CACHE", "dynamodb"), ("SLUICE_CACHE_TABLE", &table)],
    );
    let store = sluice_tests::dynamodb(&settings.aws).await;
    hand_written(Arc::new(store)).await;
}

/// Every set under each guard, side by side (the table of the cache doc): the lexicon only
/// ever adds paraphrase hits, and at the default threshold it adds no false hit.
#[tokio::test]
async fn guard_table() {
    sluice_testkit::needs!(Model);
    let hand = pairs("cache_pairs.jsonl");
    let templated = pairs("cache_guard_pairs.jsonl");
    let sets: Vec<(&str, Vec<&Pair>)> = vec![
        (
            "templated held-out",
            templated.iter().filter(|p| p.split == "held-out").collect(),
        ),
        (
            "templated tune",
            templated.iter().filter(|p| p.split == "tune").collect(),
        ),
        ("hand-written", hand.iter().collect()),
    ];
    eprintln!("| set | threshold | guard | paraphrase hits | false hits |");
    eprintln!("|---|---|---|---|---|");
    for threshold in [0.95, 0.9, 0.85] {
        for (name, set) in &sets {
            let mut hits = Vec::new();
            for lexicon in [false, true] {
                let store = Arc::new(MemoryCache::new(1000));
                let r = run(store, set, Guard { threshold, lexicon }).await;
                eprintln!(
                    "| {name} | {threshold} | {} | {}/{} | {}/{} {:?} |",
                    if lexicon { "words + lexicon" } else { "words" },
                    r.paraphrase_hits,
                    r.paraphrases,
                    r.false_hits.len(),
                    r.others,
                    r.false_hits
                );
                if threshold == DEFAULT.threshold {
                    assert!(r.false_hits.is_empty(), "{name}: {:#?}", r.false_hits);
                }
                hits.push(r.paraphrase_hits);
            }
            assert!(
                hits[1] >= hits[0],
                "{name} at {threshold}: the lexicon lost hits"
            );
        }
    }
}

/// What the guard says of a pair (the reason a paraphrase missed, when the cosine did not).
fn why_missed(p: &Pair, lexicon: &Lexicon) -> String {
    let guard =
        |q: &str| sluice_core::cache::guard::Guard::of(&sluice_core::language::normalise(q));
    guard(&p.asked)
        .conflict(&guard(&p.cached), lexicon)
        .unwrap_or_else(|| "the guard passes".into())
}

/// Each asked question of `set` with its best candidate at or above the learner's floor:
/// the cosine, and whether its answer is the right one (a paraphrase's own cached question).
/// With the guard, as the cache finds it (LSH candidates, freshness, guard); without, the
/// most similar cached question of the set.
async fn candidates(set: &[&Pair], guarded: bool) -> Vec<Option<(f32, bool)>> {
    // With the guard, the cache holds (and has embedded) the cached questions; without, they
    // are embedded here.
    let (cache, cached) = match guarded {
        true => {
            let store = Arc::new(MemoryCache::new(1000));
            let guard = Guard {
                threshold: FLOOR,
                lexicon: true,
            };
            (Some(cache_of(store, set, guard).await), Vec::new())
        }
        false => {
            let cached: Vec<(&str, Vec<f32>)> = set
                .iter()
                .map(|p| (p.cached.as_str(), embed(&p.cached)))
                .collect();
            (None, cached)
        }
    };
    let mut out = Vec::with_capacity(set.len());
    for p in set {
        let vector = embed(&p.asked);
        let best = match &cache {
            Some(cache) => match cache
                .similar(&tenant("bank"), &Probe::new(&p.asked), &vector, &scope())
                .await
            {
                Lookup::Hit { entry, similarity } => {
                    Some((entry.answer.tokens[0].clone(), similarity))
                }
                _ => None,
            },
            None => cached
                .iter()
                .map(|(q, v)| (q.to_string(), cosine(&vector, v)))
                .filter(|(_, s)| *s >= FLOOR)
                .max_by(|a, b| a.1.total_cmp(&b.1)),
        };
        out.push(best.map(|(answer, s)| (s, p.label == "paraphrase" && answer == p.cached)));
    }
    out
}

/// What a stream of lookups gave under one policy.
#[derive(Debug, Default)]
struct Served {
    hits: usize,
    false_hits: usize,
    /// Lookups answered by the LLM to be compared although the threshold was met: hits of
    /// the threshold, and the extra LLM calls learning costs.
    explored_hits: usize,
}

impl Served {
    fn rate(&self) -> f64 {
        self.false_hits as f64 / self.hits.max(1) as f64
    }
}

/// The learned threshold against the fixed one on a stream of lookups drawn at random from
/// every labelled pair (each set's questions against its own cached ones), the LLM's judgement
/// taken as the label: a 10 % exploration rate, a 1 % bound.
#[tokio::test]
async fn learned_threshold_keeps_false_hits_under_the_bound() {
    sluice_testkit::needs!(Model);
    const BOUND: f64 = 0.01;
    const EXPLORE: f64 = 0.1;
    const DRAWS: usize = 50_000;
    let hand = pairs("cache_pairs.jsonl");
    let templated = pairs("cache_guard_pairs.jsonl");
    for guarded in [true, false] {
        let mut all = Vec::new();
        for split in ["tune", "held-out"] {
            let half: Vec<&Pair> = templated.iter().filter(|p| p.split == split).collect();
            all.extend(candidates(&half, guarded).await);
        }
        all.extend(candidates(&hand.iter().collect::<Vec<_>>(), guarded).await);

        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut fixed, mut learned) = (Served::default(), Served::default());
        let mut observations = Observations::default();
        for _ in 0..DRAWS {
            let Some((similarity, right)) = all[(next() % all.len() as u64) as usize] else {
                continue;
            };
            if similarity >= DEFAULT.threshold {
                fixed.hits += 1;
                fixed.false_hits += usize::from(!right);
            }
            let threshold = observations.estimate(DEFAULT.threshold, BOUND).threshold as f32;
            if ((next() >> 11) as f64 / (1u64 << 53) as f64) < EXPLORE {
                // Answered by the LLM and compared with the candidate's answer.
                observations.record(similarity, right);
                learned.explored_hits += usize::from(similarity >= threshold);
            } else if similarity >= threshold {
                learned.hits += 1;
                learned.false_hits += usize::from(!right);
            }
        }
        let estimate = observations.estimate(DEFAULT.threshold, BOUND);
        eprintln!(
            "learned threshold ({}): {DRAWS} lookups, {} pairs; fixed {}: {} hits, {} false ({:.2} %); learned {:.3}: {} hits, {} false ({:.2} %), {} explored hits (extra LLM calls); estimate {estimate:?}",
            if guarded {
                "with the guard"
            } else {
                "cosine only"
            },
            all.len(),
            DEFAULT.threshold,
            fixed.hits,
            fixed.false_hits,
            fixed.rate() * 100.0,
            estimate.threshold,
            learned.hits,
            learned.false_hits,
            learned.rate() * 100.0,
            learned.explored_hits,
        );
        if guarded {
            // The guard keeps the fixed threshold right: learning lowers the threshold, hits
            // rise, and the measured false-hit rate stays under the bound.
            assert!(
                learned.rate() <= BOUND,
                "false-hit rate {:.4}",
                learned.rate()
            );
            assert!(
                learned.hits + learned.explored_hits > fixed.hits,
                "{learned:?} / {fixed:?}"
            );
        } else {
            // Cosine alone is wrong half the time at the configured threshold: the first
            // comparisons refute it and similarity stops answering. What was served wrong
            // before the evidence is bounded by how fast that happens.
            assert!(fixed.rate() > BOUND, "{fixed:?}");
            assert_eq!(estimate.threshold, 1.0, "{estimate:?}");
            assert!(learned.false_hits <= 10, "{learned:?}");
        }
    }
}

/// "The same answer", as a learning tenant's comparison judges it, on 30 hand-labelled answer
/// pairs (`tests/fixtures/answer_pairs.jsonl`: 15 rewordings, 15 answers that differ in a
/// number, a negation, an opposite or a fact). Only the text half: the pairs have no sources.
/// The embedding alone calls several differing answers the same; with the numbers, negations
/// and antonyms required to agree, none.
#[tokio::test]
async fn the_same_answer_judgement_on_labelled_answer_pairs() {
    sluice_testkit::needs!(Model);
    let path = sluice_tests::repo().join("tests/fixtures/answer_pairs.jsonl");
    let text = std::fs::read_to_string(path).expect("fixture");
    let (mut same, mut same_right, mut other, mut other_wrong_embedding, mut other_wrong) =
        (0, 0, 0, 0, Vec::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("fixture line");
        let (a, b) = (v["a"].as_str().expect("a"), v["b"].as_str().expect("b"));
        let close = cosine(&embed(a), &embed(b)) >= SAME_ANSWER;
        let judged = close && same_facts(a, b, &sluice_tests::lexicon());
        if v["same"].as_bool().expect("same") {
            same += 1;
            same_right += usize::from(judged);
        } else {
            other += 1;
            other_wrong_embedding += usize::from(close);
            if judged {
                other_wrong.push(format!("{a:?} / {b:?}"));
            }
        }
    }
    eprintln!(
        "same-answer judgement: {same_right} of {same} rewordings judged the same; of {other} differing answers, {other_wrong_embedding} judged the same by the embedding alone, {} with numbers, negations and antonyms required to agree",
        other_wrong.len()
    );
    assert!(
        other_wrong.is_empty(),
        "differing answers judged the same: {other_wrong:#?}"
    );
    // What it protects: the judgement still calls rewordings the same (a learning tenant
    // compares its candidates with it). The floor is half, not what was measured: missing a
    // rewording costs a tenant a hit, judging a differing answer the same (asserted above, with
    // no tolerance) would cost it a wrong one.
    assert!(
        same_right * 2 >= same,
        "{same_right} of {same} rewordings judged the same"
    );
}
