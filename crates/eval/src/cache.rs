//! `sluice eval cache`: whether retrieval agreement lets more paraphrases be answered from the
//! cache without a false hit. A candidate under the tenant's cosine threshold but above a
//! lower bound, which the guard lets through, answers only if retrieval for the new question
//! returns the candidate's recorded sources — the whole top k, the first three, or the first
//! one, in order. Which rule and which bound work is measured here:
//!
//! - the pairs are the repository's two labelled sets (`tests/fixtures/cache_pairs.jsonl`,
//!   hand-written, split in two by a seeded shuffle; `cache_guard_pairs.jsonl`, templated,
//!   split by its `split` field), every `cached` question stored in a cache of the real model
//!   and lexicon and every `asked` one looked up as the pipeline does;
//! - the sources are the top `k` of the hybrid search over τ²-bench's 698 banking documents
//!   (`scripts/setup.sh eval`), ingested as `sluice ingest` would;
//! - for each rule, the bound is the lowest of a grid with no false hit on either tuning half,
//!   and every figure reported is on the held-out halves.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_contract::cache::{CacheStore, CachedAnswer, Cited, Scope};
use sluice_contract::stages::{Search, Store};
use sluice_core::cache::guard::Guard;
use sluice_core::cache::{CacheSettings, Lookup, Probe, SemanticCache};
use sluice_core::language::lexicon::{Lexicon, SharedLexicon};
use sluice_local::MemoryCache;

use crate::{Corpus, EvalError, Result, load, split};

/// Sources compared: the request path's default `k`.
const K: usize = 5;
/// The lower bounds tried, from the lowest.
const BOUNDS: [f32; 11] = [
    0.7, 0.72, 0.74, 0.76, 0.78, 0.8, 0.82, 0.84, 0.86, 0.88, 0.9,
];
/// The rules tried: how many leading sources must agree (`K`: all of them).
const RULES: [(&str, usize); 3] = [("top 5", K), ("first 3", 3), ("first 1", 1)];

/// One labelled pair: the question in the cache, the one asked, and whether they mean the same.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The question in the cache.
    pub cached: String,
    /// The question asked.
    pub asked: String,
    /// Whether they mean the same.
    pub paraphrase: bool,
    /// In the tuning half (else the held-out one).
    pub tuning: bool,
}

/// The pairs of a fixture file (one JSON object a line: `cached`, `asked`, `label`, and
/// `split`: `tune` or `held-out`; a file without splits is split by a seeded shuffle).
pub fn pairs(path: &Path, seed: u64) -> Result<Vec<Pair>> {
    let text = std::fs::read_to_string(path)
        .map_err(EvalError::io(format!("reading {}", path.display())))?;
    let mut pairs = Vec::new();
    let mut unsplit = false;
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| EvalError::Data(format!("{} line {}: {e}", path.display(), n + 1)))?;
        let field = |k: &str| {
            (v[k].as_str().map(str::to_string)).ok_or_else(|| {
                EvalError::Data(format!("{} line {}: no {k:?}", path.display(), n + 1))
            })
        };
        unsplit |= v["split"].is_null();
        pairs.push(Pair {
            cached: field("cached")?,
            asked: field("asked")?,
            paraphrase: field("label")? == "paraphrase",
            tuning: v["split"] == "tune",
        });
    }
    if unsplit {
        let (tuning, _) = split(pairs.len(), seed);
        for (i, pair) in pairs.iter_mut().enumerate() {
            pair.tuning = tuning.contains(&i);
        }
    }
    Ok(pairs)
}

/// Each set's name and outcome.
pub type PerSet = Vec<(String, Outcome)>;

/// One set's outcome for one rule at one bound, on one half.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    /// Paraphrases answered by their own cached question.
    pub paraphrase_hits: usize,
    /// Paraphrases.
    pub paraphrases: usize,
    /// Hits that answered a question with another's answer.
    pub false_hits: usize,
    /// Pairs that are not paraphrases.
    pub others: usize,
    /// Of the hits, those that agreement added (under the threshold).
    pub by_agreement: usize,
    /// Each false hit: the question asked, the cached one that answered it, their cosine.
    pub false_hit_pairs: Vec<String>,
    /// Each paraphrase missed: the question asked, and the candidate the guard let through
    /// (its cosine, and how many leading sources agree) or none.
    pub missed: Vec<String>,
}

/// What the evaluation found.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The cosine threshold a candidate answers at without agreement.
    pub threshold: f32,
    /// Sources compared.
    pub k: usize,
    /// The corpus's documents and chunks.
    pub documents: usize,
    pub chunks: usize,
    /// Per set, today's rule (the threshold alone) on the held-out half.
    pub today: PerSet,
    /// Per rule: the bound chosen on the tuning halves, and per set the held-out outcome.
    pub rules: Vec<RuleReport>,
    /// Per rule and bound, per set, on the tuning half (what the choice read).
    pub tuning: Vec<(String, f32, PerSet)>,
    /// One search of the top k (what a borderline lookup adds to a hit): p50 and p99, ms.
    pub search_ms: [f64; 2],
    /// The corpus's documents sent again, unchanged.
    pub resend: Resend,
}

/// The corpus's documents sent again as they were.
#[derive(Debug, Serialize)]
pub struct Resend {
    /// How long it took, and how long the first ingest took.
    pub seconds: f64,
    pub ingest_seconds: f64,
    /// Documents found unchanged, and chunks written anyway (0).
    pub unchanged: usize,
    pub chunks_written: usize,
}

/// One rule's result.
#[derive(Debug, Serialize)]
pub struct RuleReport {
    pub rule: String,
    /// The lowest bound with no false hit on any tuning half (`None`: none is; the held-out
    /// figures are then at the threshold).
    pub bound: Option<f32>,
    pub held_out: PerSet,
}

/// A looked-up pair: what the cache found for it (the cosine and the candidate's question),
/// whether that is its own question, and both questions' sources.
struct Looked {
    pair: Pair,
    found: Option<(f32, String)>,
    /// The most similar cached question whose guard passes it or refuses it for ordinary
    /// words alone (whether it passes), by brute force over the half.
    relaxed: Option<(f32, String, bool)>,
    asked_sources: Vec<Cited>,
    /// The cosine to its own cached question, and what the guard says of the two.
    own: f32,
    guard: String,
}

/// The pairs' files in the repository's `tests/fixtures`.
const SETS: [&str; 2] = ["cache_pairs", "cache_guard_pairs"];
/// The seed of the hand-written set's split.
const SEED: u64 = 1;

/// The repository's two labelled sets (in `fixtures`, its `tests/fixtures`), each by name,
/// split as every evaluation of them splits them.
pub fn fixture_sets(fixtures: &Path) -> Result<Vec<(String, Vec<Pair>)>> {
    let sets = SETS.map(|set| {
        let path = fixtures.join(format!("{set}.jsonl"));
        Ok((set.to_string(), pairs(&path, SEED)?))
    });
    sets.into_iter().collect()
}

/// [`run`] over the repository's two sets of pairs (the working directory is the
/// repository), with progress on standard error.
pub async fn run_installed(settings: &sluice_app::Settings, data: &Path) -> Result<Report> {
    let sets = fixture_sets(Path::new("tests/fixtures"))?;
    run(settings, data, sets, |line| eprintln!("{line}")).await
}

/// Runs the evaluation over `sets` (a name and its pairs), with the model and lexicon of
/// `settings`, on the τ²-bench documents in `data`.
pub async fn run(
    settings: &sluice_app::Settings,
    data: &Path,
    sets: Vec<(String, Vec<Pair>)>,
    progress: impl Fn(&str),
) -> Result<Report> {
    let (documents, _) = load(data)?;
    let count = documents.len();
    let corpus = Corpus::ingested(settings, documents.clone(), &progress).await?;
    // The same documents again: each one compared with what was written, none written.
    let started = Instant::now();
    let again = corpus.ingest.ingest(&corpus.tenant, documents).await?;
    let resend = Resend {
        seconds: started.elapsed().as_secs_f64(),
        ingest_seconds: corpus.ingest_seconds,
        unchanged: again.unchanged,
        chunks_written: again.chunks,
    };
    progress(&format!(
        "sent again: {} of {count} unchanged, {} chunks written, in {:.3} s ({:.4} of the ingest)",
        resend.unchanged,
        resend.chunks_written,
        resend.seconds,
        resend.seconds / resend.ingest_seconds
    ));
    let lexicon = match &settings.config.cache.lexicon {
        Some(path) => {
            Arc::new(Lexicon::load(path).map_err(|e| EvalError::Pipeline(e.to_string()))?)
        }
        None => Arc::new(Lexicon::default()),
    };
    let threshold = settings.config.cache.threshold;
    let vectors = vectors(&corpus, &sets)?;
    let mut searches = Vec::new();
    let mut looked: Vec<(String, Vec<Looked>)> = Vec::new();
    let mut sources: HashMap<String, Vec<Cited>> = HashMap::new();
    for (name, pairs) in sets {
        progress(&format!("{name}: {} pairs", pairs.len()));
        // Each half's cached questions in a cache of their own: a half is judged on its own
        // pairs (a set may hold one question cached in two wordings, one in each half).
        let (tuning, held_out): (Vec<Pair>, Vec<Pair>) = pairs.into_iter().partition(|p| p.tuning);
        let caches = [
            cache(&corpus, &tuning, &vectors, lexicon.clone(), BOUNDS[0]).await?,
            cache(&corpus, &held_out, &vectors, lexicon.clone(), BOUNDS[0]).await?,
        ];
        let cached = |half: &[Pair]| -> Vec<(String, &Vec<f32>, Guard)> {
            (cached_questions(half).into_iter())
                .map(|q| (q.to_string(), &vectors[q], guard_of(q)))
                .collect()
        };
        let halves = [cached(&tuning), cached(&held_out)];
        let mut rows = Vec::with_capacity(tuning.len() + held_out.len());
        for pair in tuning.into_iter().chain(held_out) {
            let half = usize::from(!pair.tuning);
            let cache = &caches[half];
            for q in [&pair.cached, &pair.asked] {
                if !sources.contains_key(q.as_str()) {
                    let started = Instant::now();
                    let found = top_k(&corpus, q, &vectors[q.as_str()]).await?;
                    searches.push(started.elapsed());
                    sources.insert(q.clone(), found);
                }
            }
            let vector = &vectors[pair.asked.as_str()];
            let found = match cache
                .lookup(
                    &corpus.tenant,
                    &Probe::new(&pair.asked),
                    vector,
                    &scope(&corpus),
                )
                .await
            {
                Lookup::Hit { entry, similarity } => {
                    Some((similarity, entry.answer.tokens.concat()))
                }
                Lookup::Failed(e) => return Err(EvalError::Pipeline(e)),
                _ => None,
            };
            let asked_sources = sources[pair.asked.as_str()].clone();
            let own = sluice_core::cache::cosine(vector, &vectors[pair.cached.as_str()]);
            let [asked, cached] = [&pair.asked, &pair.cached].map(|q| guard_of(q));
            let relaxed = (halves[half].iter())
                .map(|(q, v, g)| (sluice_core::cache::cosine(vector, v), q, g))
                .filter(|(similarity, _, _)| *similarity >= BOUNDS[0])
                .filter_map(|(similarity, q, g)| match asked.conflict(g, &lexicon) {
                    None => Some((similarity, q.clone(), true)),
                    Some(_) if asked.differs_in_ordinary_words(g, &lexicon) => {
                        Some((similarity, q.clone(), false))
                    }
                    Some(_) => None,
                })
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let guard = (asked.conflict(&cached, &lexicon))
                .map_or("the guard lets it through".to_string(), |why| {
                    format!("the guard: {why}")
                });
            rows.push(Looked {
                pair,
                found,
                relaxed,
                asked_sources,
                own,
                guard,
            });
        }
        looked.push((name, rows));
    }
    let outcome = |rows: &[Looked], tuning: bool, first: Option<usize>, bound: f32, past: bool| {
        let mut o = Outcome::default();
        for row in rows.iter().filter(|r| r.pair.tuning == tuning) {
            // Past the guard's ordinary words: the relaxed candidate, which needs agreement
            // wherever the guard alone would not let it through.
            let candidate = match past {
                false => (row.found.clone()).map(|(similarity, q)| (similarity, q, true)),
                true => row.relaxed.clone(),
            };
            let hit = candidate
                .as_ref()
                .and_then(|(similarity, question, guarded)| {
                    let by_agreement = *similarity < threshold || !guarded;
                    let agreed = first.is_some_and(|n| {
                        *similarity >= bound
                            && agree(&sources[question.as_str()], &row.asked_sources, n)
                    });
                    (!by_agreement || agreed).then_some((question, by_agreement, *similarity))
                });
            match row.pair.paraphrase {
                true => o.paraphrases += 1,
                false => o.others += 1,
            }
            if row.pair.paraphrase && hit.is_none() {
                o.missed.push(match &candidate {
                    None => format!(
                        "{:?}: nothing found; {:?} at {:.3}, {}",
                        row.pair.asked, row.pair.cached, row.own, row.guard
                    ),
                    Some((similarity, question, _)) => {
                        let recorded = &sources[question.as_str()];
                        let leading = (recorded.iter().zip(&row.asked_sources))
                            .take_while(|(a, b)| a == b)
                            .count();
                        format!(
                            "{:?}: {question:?} at {similarity:.3}, {leading} leading sources agree",
                            row.pair.asked
                        )
                    }
                });
            }
            if let Some((question, by_agreement, similarity)) = hit {
                o.by_agreement += usize::from(by_agreement);
                match row.pair.paraphrase && *question == row.pair.cached {
                    true => o.paraphrase_hits += 1,
                    false => {
                        o.false_hits += 1;
                        (o.false_hit_pairs).push(format!(
                            "{:?} answered by {question:?} ({similarity:.3})",
                            row.pair.asked
                        ));
                    }
                }
            }
        }
        o
    };
    let per_set = |tuning, first, bound, past| -> PerSet {
        (looked.iter())
            .map(|(name, rows)| (name.clone(), outcome(rows, tuning, first, bound, past)))
            .collect()
    };
    let mut rules = Vec::new();
    let mut tuning = Vec::new();
    for past in [false, true] {
        for (rule, n) in RULES {
            let rule = match past {
                false => rule.to_string(),
                true => format!("{rule}, past ordinary words"),
            };
            let mut chosen = None;
            for bound in BOUNDS.into_iter().filter(|b| *b <= threshold) {
                let sets = per_set(true, Some(n), bound, past);
                let clean = sets.iter().all(|(_, o)| o.false_hits == 0);
                tuning.push((rule.clone(), bound, sets));
                if clean && chosen.is_none() {
                    chosen = Some(bound);
                }
            }
            rules.push(RuleReport {
                held_out: per_set(false, Some(n), chosen.unwrap_or(threshold), past),
                rule,
                bound: chosen,
            });
        }
    }
    searches.sort();
    let at = |q: f64| {
        let i = ((searches.len() as f64 - 1.0) * q).round() as usize;
        searches.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    Ok(Report {
        threshold,
        k: K,
        documents: count,
        chunks: corpus.chunks,
        today: per_set(false, None, threshold, false),
        rules,
        tuning,
        search_ms: [at(0.5), at(0.99)],
        resend,
    })
}

/// Whether the first `n` of `recorded` and `now` are the same sources in the same order (all
/// of them when `n` is `K`: the same list).
pub fn agree(recorded: &[Cited], now: &[Cited], n: usize) -> bool {
    if n >= K {
        return recorded == now;
    }
    recorded.len() >= n && now.len() >= n && recorded[..n] == now[..n]
}

fn scope(corpus: &Corpus) -> Scope {
    Scope {
        corpus_version: 1,
        llm_model: "eval".into(),
        embed_model: corpus.embedder.model_id().to_string(),
        prompt_version: 1,
        k: K,
        rerank: None,
        variant: None,
        binding: None,
        access: None,
    }
}

/// Every question of `sets` (cached and asked) and its vector, embedded once, in batches:
/// what the caches, the searches and the cosines all read.
fn vectors(corpus: &Corpus, sets: &[(String, Vec<Pair>)]) -> Result<HashMap<String, Vec<f32>>> {
    let mut questions: Vec<&str> = (sets.iter())
        .flat_map(|(_, pairs)| pairs.iter())
        .flat_map(|p| [p.cached.as_str(), p.asked.as_str()])
        .collect();
    questions.sort();
    questions.dedup();
    let mut vectors = HashMap::with_capacity(questions.len());
    for batch in questions.chunks(32) {
        let embedded = corpus.embedder.embed(batch)?;
        if embedded.len() != batch.len() {
            return Err(EvalError::Pipeline(
                "the model returned fewer vectors than questions".into(),
            ));
        }
        vectors.extend(batch.iter().map(|q| q.to_string()).zip(embedded));
    }
    Ok(vectors)
}

/// The distinct `cached` questions of `pairs`, in order.
fn cached_questions(pairs: &[Pair]) -> Vec<&str> {
    let mut questions: Vec<&str> = pairs.iter().map(|p| p.cached.as_str()).collect();
    questions.sort();
    questions.dedup();
    questions
}

/// The top `K` of the hybrid search for `question` (embedded as `vector`), as an answer would
/// record them.
async fn top_k(corpus: &Corpus, question: &str, vector: &[f32]) -> Result<Vec<Cited>> {
    let hits = corpus
        .edge
        .search(&corpus.tenant, &Search::new(question, vector, K))
        .await?;
    Ok(hits.iter().map(Cited::of).collect())
}

/// A cache over memory holding every `cached` question of `pairs`, each answered by its own
/// text (so that a hit names the question it came from), finding candidates down to `least`.
async fn cache(
    corpus: &Corpus,
    pairs: &[Pair],
    vectors: &HashMap<String, Vec<f32>>,
    lexicon: Arc<Lexicon>,
    least: f32,
) -> Result<SemanticCache> {
    let settings = CacheSettings {
        threshold: least,
        tenant_thresholds: Default::default(),
        ttl: Duration::from_secs(3600),
        budget: Duration::from_secs(5),
        explore: Default::default(),
        error_bound: 0.01,
    };
    let store: Arc<dyn CacheStore> = Arc::new(MemoryCache::new(100_000));
    let cache = SemanticCache::new(store, settings, sluice_embed::DIM)
        .with_lexicon(SharedLexicon::ready(lexicon));
    for q in cached_questions(pairs) {
        let answer = CachedAnswer::one_token(q);
        let vector = vectors[q].clone();
        let entry = cache.entry(
            &corpus.tenant,
            &Probe::new(q),
            vector,
            scope(corpus),
            answer,
        );
        cache
            .put(&entry)
            .await
            .map_err(|e| EvalError::Pipeline(e.to_string()))?;
    }
    Ok(cache)
}

/// The guard's view of question `q`.
fn guard_of(q: &str) -> Guard {
    Guard::of(&sluice_core::language::normalise(q))
}

/// The report as Markdown.
pub fn table(report: &Report) -> String {
    let row = |o: &Outcome| {
        format!(
            "{}/{} ({:.0} %) | {}/{} | {}",
            o.paraphrase_hits,
            o.paraphrases,
            100.0 * o.paraphrase_hits as f64 / o.paraphrases.max(1) as f64,
            o.false_hits,
            o.others,
            o.by_agreement
        )
    };
    let mut out = format!(
        "Held-out halves; cosine threshold {}, sources compared: the top {} of {} documents ({} chunks).\n\n\
         | rule | lower bound | set | paraphrases hit | false hits | hits by agreement |\n|---|---|---|---|---|---|\n",
        report.threshold, report.k, report.documents, report.chunks
    );
    for (set, o) in &report.today {
        out.push_str(&format!("| threshold alone | – | {set} | {} |\n", row(o)));
    }
    for rule in &report.rules {
        for (set, o) in &rule.held_out {
            let bound = (rule.bound).map_or("none clean".to_string(), |b| format!("{b:.2}"));
            out.push_str(&format!(
                "| {} | {bound} | {set} | {} |\n",
                rule.rule,
                row(o)
            ));
        }
    }
    out.push_str(&format!(
        "\nOne search of the top {}: p50 {:.1} ms, p99 {:.1} ms.\n",
        report.k, report.search_ms[0], report.search_ms[1]
    ));
    let r = &report.resend;
    out.push_str(&format!(
        "The {} documents sent again: {} unchanged, {} chunks written, {:.3} s against {:.1} s \
         for the first ingest ({:.4} of it).\n",
        report.documents,
        r.unchanged,
        r.chunks_written,
        r.seconds,
        r.ingest_seconds,
        r.seconds / r.ingest_seconds.max(1e-9)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cited(id: &str) -> Cited {
        Cited {
            id: id.into(),
            chunk: 0,
            digest: format!("digest of {id}"),
        }
    }

    #[test]
    fn sources_agree_on_their_leading_ones_in_order() {
        let recorded: Vec<Cited> = ["a", "b", "c", "d", "e"].map(cited).to_vec();
        let swapped: Vec<Cited> = ["a", "b", "c", "e", "d"].map(cited).to_vec();
        assert!(agree(&recorded, &recorded, K));
        assert!(!agree(&recorded, &swapped, K), "the whole list, in order");
        assert!(agree(&recorded, &swapped, 3) && agree(&recorded, &swapped, 1));
        let other_first: Vec<Cited> = ["b", "a", "c", "d", "e"].map(cited).to_vec();
        assert!(!agree(&recorded, &other_first, 1));
        assert!(
            !agree(&recorded[..2], &recorded[..2], 3),
            "fewer than compared"
        );
    }

    #[test]
    fn pairs_keep_their_split_or_are_split_in_two_by_the_seed() {
        let dir = tempfile::tempdir().unwrap();
        let line = |split: Option<&str>, label: &str| {
            let mut v = serde_json::json!({"cached": "q", "asked": "p", "label": label});
            if let Some(s) = split {
                v["split"] = s.into();
            }
            v.to_string()
        };
        let split = dir.path().join("split.jsonl");
        let lines = [
            line(Some("tune"), "paraphrase"),
            line(Some("held-out"), "antonym"),
        ];
        std::fs::write(&split, lines.join("\n")).unwrap();
        let read = pairs(&split, 1).unwrap();
        assert_eq!(
            read.iter()
                .map(|p| (p.tuning, p.paraphrase))
                .collect::<Vec<_>>(),
            [(true, true), (false, false)]
        );
        let unsplit = dir.path().join("unsplit.jsonl");
        let lines: Vec<String> = (0..10).map(|_| line(None, "paraphrase")).collect();
        std::fs::write(&unsplit, lines.join("\n")).unwrap();
        let read = pairs(&unsplit, 1).unwrap();
        assert_eq!(read.iter().filter(|p| p.tuning).count(), 5);
        let again = pairs(&unsplit, 1).unwrap();
        assert!(read.iter().zip(&again).all(|(a, b)| a.tuning == b.tuning));
        std::fs::write(&unsplit, "{\"cached\": \"q\"}").unwrap();
        assert!(pairs(&unsplit, 1).is_err(), "a line without its fields");
    }
}
