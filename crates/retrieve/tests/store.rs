//! The Qdrant Edge store, on a real shard in a temporary folder: the store contract every
//! backend keeps, then its own hybrid search, fusion, indexes and persistence. Vectors are synthetic (deterministic
//! unit vectors): these tests are about the store, not the model.

use std::sync::Arc;

use sluice_contract::error::StoreError;
use sluice_contract::stages::{DocumentInfo, Hit, Search, Store};
use sluice_retrieve::EdgeStore;
use sluice_testkit::store_suite::{DIM, chunks, doc, unit};
use sluice_testkit::tenant;

/// A Qdrant Edge store in a folder of its own, and the folder.
async fn edge() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = EdgeStore::open(dir.path(), DIM).unwrap();
    (Arc::new(store), dir)
}

// The store contract every backend keeps (`sluice_testkit::store_suite`); what follows is
// Qdrant Edge's own: persistence, the engine's fusion, its indexes.
sluice_testkit::store_suite!(edge());

#[tokio::test]
async fn both_dense_and_bm25_candidates_reach_the_fused_result() {
    let dir = tempfile::tempdir().unwrap();
    let store = EdgeStore::open(dir.path(), DIM).unwrap();
    // "semantic" is nearest to the query vector but shares no words with the query;
    // "lexical" shares the rare word but its vector is far away.
    store
        .replace_document(
            &tenant("t"),
            &doc("semantic"),
            chunks(&["weather report for tomorrow"], 100),
        )
        .await
        .unwrap();
    store
        .replace_document(
            &tenant("t"),
            &doc("lexical"),
            chunks(&["the quokka lives on rottnest island"], 200),
        )
        .await
        .unwrap();
    for i in 0..30 {
        store
            .replace_document(
                &tenant("t"),
                &doc(&format!("filler{i}")),
                chunks(&["ordinary filler text about nothing"], 300 + i),
            )
            .await
            .unwrap();
    }
    let hits = store
        .search(&tenant("t"), &Search::new("quokka", &unit(100), 2))
        .await
        .unwrap();
    let ids: Vec<&str> = hits.iter().map(|h| h.document.id.as_str()).collect();
    assert!(
        ids.contains(&"semantic") && ids.contains(&"lexical"),
        "{ids:?}"
    );
    // RRF scores: 1/(60+1) for a first place in one list.
    assert!(hits[0].score > 0.015 && hits[0].score < 0.034, "{hits:?}");
}

#[tokio::test]
async fn chunks_and_corpus_versions_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = EdgeStore::open(dir.path(), DIM).unwrap();
        assert_eq!(store.corpus_version(&tenant("t")).await.unwrap(), 0);
        store
            .replace_document(&tenant("t"), &doc("d"), chunks(&["persisted text"], 5))
            .await
            .unwrap();
        assert_eq!(store.bump_corpus_version(&tenant("t")).await.unwrap(), 1);
        assert_eq!(store.bump_corpus_version(&tenant("t")).await.unwrap(), 2);
        assert_eq!(store.bump_corpus_version(&tenant("u")).await.unwrap(), 1);
    }
    let store = EdgeStore::open(dir.path(), DIM).unwrap();
    assert_eq!(store.corpus_version(&tenant("t")).await.unwrap(), 2);
    assert_eq!(store.corpus_version(&tenant("u")).await.unwrap(), 1);
    let hits = store
        .search(&tenant("t"), &Search::new("persisted", &unit(5), 3))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].text, "persisted text");
}

#[tokio::test]
async fn a_store_of_another_dimension_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(EdgeStore::open(dir.path(), DIM).unwrap());
    match EdgeStore::open(dir.path(), 768) {
        Err(StoreError::Open(m)) => assert!(m.contains("768"), "{m}"),
        other => panic!("expected an open error, got {:?}", other.err()),
    }
}

#[tokio::test]
async fn a_data_directory_serves_one_store_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let first = EdgeStore::open(dir.path(), DIM).unwrap();
    match EdgeStore::open(dir.path(), DIM) {
        Err(StoreError::Open(m)) => assert!(m.contains("in use"), "{m}"),
        other => panic!("expected an open error, got {:?}", other.err()),
    }
    drop(first);
    EdgeStore::open(dir.path(), DIM).expect("free again once the first store is dropped");
}

// ---- metadata filters ----------------------------------------------------------------------

/// The filter corpus ([`sluice_testkit::filters`]) in a real shard, each document one chunk
/// with a shared word, plus another tenant's copy of every document (which no filter may
/// reach).
async fn filter_corpus(dir: &std::path::Path) -> EdgeStore {
    let store = EdgeStore::open(dir, DIM).unwrap();
    for (i, (id, metadata)) in sluice_testkit::filters::corpus().into_iter().enumerate() {
        let info = DocumentInfo {
            metadata,
            ..doc(id)
        };
        for t in ["acme", "globex"] {
            store
                .replace_document(
                    &tenant(t),
                    &info,
                    chunks(&[&format!("policy text of {id}")], i as u64),
                )
                .await
                .unwrap();
        }
    }
    store
}

#[tokio::test]
async fn a_selective_filter_still_returns_k_chunks() {
    // 300 documents; the 3 that pass the filter are the furthest from the query vector and
    // share none of its words: a post-filter of the top k would return none of them.
    let dir = tempfile::tempdir().unwrap();
    let store = EdgeStore::open(dir.path(), DIM).unwrap();
    let query = unit(7);
    for i in 0..300u64 {
        let wanted = i >= 297;
        let info = DocumentInfo {
            metadata: sluice_testkit::filters::metadata(
                serde_json::json!({"region": if wanted { "emea" } else { "amer" }}),
            ),
            ..doc(&format!("d{i}"))
        };
        let text = if wanted {
            "unrelated words"
        } else {
            "refund policy terms"
        };
        let mut c = chunks(&[text], 1000 + i);
        if !wanted {
            c[0].vector = query.clone();
        }
        store
            .replace_document(&tenant("t"), &info, c)
            .await
            .unwrap();
    }
    let filter =
        sluice_contract::filter::Filter::parse(&serde_json::json!({"region": "emea"})).unwrap();
    let hits = store
        .search(
            &tenant("t"),
            &Search::new("refund policy", &query, 3).filter(Some(&filter)),
        )
        .await
        .unwrap();
    let mut ids: Vec<&str> = hits.iter().map(|h| h.document.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["d297", "d298", "d299"]);
}

#[tokio::test]
async fn metadata_indexes_are_created_once_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = filter_corpus(dir.path()).await;
        store.bump_corpus_version(&tenant("acme")).await.unwrap();
    }
    // Reopened: the indexes are read from the shard, and filters still answer.
    let store = EdgeStore::open(dir.path(), DIM).unwrap();
    let indexed = store.indexed_fields();
    for field in [
        "meta.year",
        "meta.team",
        "meta.groups",
        "meta.public",
        "meta_ts.updated_at",
    ] {
        assert!(indexed.iter().any(|f| f == field), "{field} in {indexed:?}");
    }
    let filter =
        sluice_contract::filter::Filter::parse(&serde_json::json!({"groups": "hr"})).unwrap();
    let hits = store
        .search(
            &tenant("globex"),
            &Search::new("policy", &unit(0), 50).filter(Some(&filter)),
        )
        .await
        .unwrap();
    let mut ids: Vec<&str> = hits.iter().map(|h| h.document.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["hr-guide", "policy-2024"]);
}

// ---- fusion ---------------------------------------------------------------------------------

/// 60 one-chunk documents whose texts share a few words with the query in varied measure and
/// whose vectors vary: the dense and BM25 rankings disagree.
async fn fusion_corpus(dir: &std::path::Path) -> EdgeStore {
    let store = EdgeStore::open(dir, DIM).unwrap();
    let words = [
        "refund", "card", "policy", "days", "fee", "limit", "abroad", "branch",
    ];
    for i in 0..60u64 {
        let text: Vec<&str> = (0..(1 + i % 5))
            .map(|j| words[((i * 7 + j * 3) % 8) as usize])
            .collect();
        // Three documents of 60 (d0, d20, d40) are in group a.
        let info = DocumentInfo {
            metadata: sluice_testkit::filters::metadata(
                serde_json::json!({"group": if i % 20 == 0 { "a" } else { "b" }}),
            ),
            ..doc(&format!("d{i}"))
        };
        store
            .replace_document(&tenant("t"), &info, chunks(&[&text.join(" ")], i))
            .await
            .unwrap();
    }
    store
}

/// A ranking as (chunk, score) pairs sorted by score then chunk: two fusions of the same
/// lists agree on it whatever order they leave equal scores in.
fn ranked(hits: &[sluice_contract::stages::Hit]) -> Vec<(String, i64)> {
    let mut v: Vec<(String, i64)> = hits
        .iter()
        .map(|h| (h.document.id.clone(), (h.score as f64 * 1e7).round() as i64))
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

#[tokio::test]
async fn the_engines_weighted_rrf_is_sluices_fusion_of_the_two_halves() {
    use sluice_contract::fusion::Fusion;
    use sluice_retrieve::{Retrieval, prefetch_limit};
    let dir = tempfile::tempdir().unwrap();
    let store = fusion_corpus(dir.path()).await;
    let query = unit(11);
    let text = "refund policy abroad fee";
    for fusion in [
        Fusion::default(),
        Fusion::Rrf {
            k: 2,
            dense: 1.0,
            bm25: 0.25,
        },
        Fusion::Rrf {
            k: 20,
            dense: 2.0,
            bm25: 0.5,
        },
        Fusion::Rrf {
            k: 5,
            dense: 0.0,
            bm25: 1.0,
        },
    ] {
        let k = 8;
        let search = Search::new(text, &query, k).fusion(fusion);
        let engine = store.search(&tenant("t"), &search).await.unwrap();
        let half = Search::new(text, &query, prefetch_limit(k));
        let dense = store
            .search_by(&tenant("t"), &half, Retrieval::Dense)
            .await
            .unwrap();
        let bm25 = store
            .search_by(&tenant("t"), &half, Retrieval::Bm25)
            .await
            .unwrap();
        assert!(!dense.is_empty() && !bm25.is_empty());
        // The formula on the halves as the engine ranked them: within a half the engine
        // ranks equal scores by its own rule, where Sluice's fusion ranks them by id.
        let Fusion::Rrf {
            k: rrf_k,
            dense: wd,
            bm25: wb,
        } = fusion
        else {
            unreachable!("RRF settings only")
        };
        let ids = |hits: Vec<Hit>| -> Vec<(String, Hit)> {
            (hits.into_iter())
                .map(|h| (format!("{}#{}", h.document.id, h.chunk), h))
                .collect()
        };
        let here: Vec<Hit> =
            sluice_contract::fusion::rrf(vec![(wd, ids(dense)), (wb, ids(bm25))], rrf_k, k)
                .into_iter()
                .map(|(score, hit)| Hit { score, ..hit })
                .collect();
        assert_eq!(engine.len(), k, "{fusion}");
        assert_eq!(ranked(&engine), ranked(&here), "{fusion}");
    }
    // And the settings do rank differently: k and the weights reach the engine.
    let top = |f: Fusion| {
        let store = store.clone();
        let query = query.clone();
        async move {
            let hits = store
                .search(&tenant("t"), &Search::new(text, &query, 8).fusion(f))
                .await
                .unwrap();
            hits.iter()
                .map(|h| h.document.id.clone())
                .collect::<Vec<_>>()
        }
    };
    let dense_led = top(Fusion::Rrf {
        k: 2,
        dense: 1.0,
        bm25: 0.0,
    })
    .await;
    let bm25_led = top(Fusion::Rrf {
        k: 2,
        dense: 0.0,
        bm25: 1.0,
    })
    .await;
    assert_ne!(dense_led, bm25_led);
}

#[tokio::test]
async fn a_convex_fusion_weighs_normalised_scores_and_keeps_the_filter() {
    use sluice_contract::fusion::Fusion;
    use sluice_retrieve::Retrieval;
    let dir = tempfile::tempdir().unwrap();
    let store = fusion_corpus(dir.path()).await;
    let query = unit(11);
    let text = "refund policy abroad fee";
    let first = |r: Retrieval, f: Fusion| {
        let store = store.clone();
        let query = query.clone();
        async move {
            let search = Search::new(text, &query, 5).fusion(f);
            store.search_by(&tenant("t"), &search, r).await.unwrap()
        }
    };
    let dense = first(Retrieval::Dense, Fusion::default()).await;
    let bm25 = first(Retrieval::Bm25, Fusion::default()).await;
    // All dense: the dense order; all BM25: BM25's best first. Scores are in [0, 1], the
    // best exactly 1 (its list's best, normalised).
    let all_dense = first(Retrieval::Hybrid, Fusion::Convex { dense: 1.0 }).await;
    assert_eq!(all_dense[0].document.id, dense[0].document.id);
    assert!(
        (all_dense[0].score - 1.0).abs() < 1e-6,
        "{}",
        all_dense[0].score
    );
    let all_bm25 = first(Retrieval::Hybrid, Fusion::Convex { dense: 0.0 }).await;
    let bm25_best: Vec<&str> = bm25
        .iter()
        .filter(|h| (h.score - bm25[0].score).abs() < 1e-6)
        .map(|h| h.document.id.as_str())
        .collect();
    assert!(
        bm25_best.contains(&all_bm25[0].document.id.as_str()),
        "{all_bm25:?}"
    );
    assert!(
        all_bm25
            .iter()
            .all(|h| (0.0..=1.0 + 1e-6).contains(&h.score))
    );
    // A filter holds in both halves: the three documents it lets through, and no other.
    let filter =
        sluice_contract::filter::Filter::parse(&serde_json::json!({"group": "a"})).unwrap();
    let search = Search::new(text, &query, 5)
        .filter(Some(&filter))
        .fusion(Fusion::Convex { dense: 0.5 });
    let hits = store.search(&tenant("t"), &search).await.unwrap();
    let mut ids: Vec<&str> = hits.iter().map(|h| h.document.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["d0", "d20", "d40"]);
}

/// Every document a listing of `selection` returns, page by page at `limit`.
#[tokio::test]
async fn bm25_reads_a_chunks_header_and_a_hit_quotes_its_text_alone() {
    use sluice_retrieve::Retrieval;
    let dir = tempfile::tempdir().unwrap();
    let store = EdgeStore::open(dir.path(), DIM).unwrap();
    let mut headed = chunks(&["Call us at once."], 1);
    headed[0].header = "Card policy › Lost cards".into();
    store
        .replace_document(&tenant("t"), &doc("headed"), headed)
        .await
        .unwrap();
    store
        .replace_document(&tenant("t"), &doc("bare"), chunks(&["Call us at once."], 2))
        .await
        .unwrap();
    let query = unit(9);
    let search = Search::new("policy", &query, 5);
    let found = store
        .search_by(&tenant("t"), &search, Retrieval::Bm25)
        .await
        .unwrap();
    // "policy" is only in the header: the headed chunk matches, the bare one does not.
    let ids: Vec<&str> = found.iter().map(|h| h.document.id.as_str()).collect();
    assert_eq!(ids, ["headed"]);
    assert_eq!(
        found[0].text, "Call us at once.",
        "the header is not quoted"
    );
}

#[tokio::test]
async fn equal_fused_scores_at_the_cut_are_settled_by_id_call_after_call() {
    // Under RRF a chunk ranked r by dense alone and one ranked r by BM25 alone score the
    // same; the engine orders such chunks its own way, differently from call to call. The
    // cut at k keeps the lower document id, so the same question gets the same sources.
    let dir = tempfile::tempdir().unwrap();
    let store = fusion_corpus(dir.path()).await;
    let ids = |hits: &[Hit]| -> Vec<(String, usize)> {
        (hits.iter())
            .map(|h| (h.document.id.clone(), h.chunk))
            .collect()
    };
    let mut straddling = 0;
    for seed in 0..40 {
        let query = unit(1000 + seed);
        let text = ["refund policy", "card limit abroad", "branch fee days"][seed as usize % 3];
        // k = 3 and k = 5 rank the same prefetched candidates (`prefetch_limit`).
        let wider = store
            .search(&tenant("t"), &Search::new(text, &query, 5))
            .await
            .unwrap();
        assert!(
            wider
                .windows(2)
                .all(|w| Hit::rank_order(&w[0], &w[1]).is_le()),
            "returned in rank order"
        );
        straddling += usize::from(wider[2].score == wider[3].score);
        for _ in 0..5 {
            let hits = store
                .search(&tenant("t"), &Search::new(text, &query, 3))
                .await
                .unwrap();
            assert_eq!(ids(&hits), ids(&wider[..3]), "{text:?}, seed {seed}");
        }
    }
    assert!(straddling > 0, "no case had equal scores across the cut");
}
