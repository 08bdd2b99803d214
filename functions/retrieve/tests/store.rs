//! The Qdrant Edge store: hybrid search, tenant isolation, replacement, corpus versions and
//! persistence, on a real shard in a temporary folder. Vectors are synthetic (deterministic
//! unit vectors): these tests are about the store, not the model.

use sluice_core::error::StoreError;
use sluice_core::stages::{DocumentInfo, Store, StoredChunk};
use sluice_retrieve::EdgeStore;
use sluice_testkit::tenant;

const DIM: usize = 384;

fn unit(seed: u64) -> Vec<f32> {
    let v: Vec<f32> = (0..DIM)
        .map(|i| ((seed as f32 + 1.0) * (i as f32 + 1.0) * 0.618).sin())
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

fn doc(id: &str) -> DocumentInfo {
    DocumentInfo {
        id: id.into(),
        title: format!("Title of {id}"),
        source: format!("src/{id}"),
        metadata: Default::default(),
    }
}

fn chunks(texts: &[&str], seed: u64) -> Vec<StoredChunk> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| StoredChunk {
            index: i,
            text: t.to_string(),
            tokens: t.split_whitespace().count(),
            vector: unit(seed + i as u64),
        })
        .collect()
}

#[tokio::test]
async fn a_tenant_never_sees_another_tenants_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let store = EdgeStore::open(dir.path(), DIM).unwrap();
    store
        .replace_document(
            &tenant("acme"),
            &doc("policy"),
            chunks(&["acme refund policy is thirty days"], 1),
        )
        .await
        .unwrap();
    store
        .replace_document(
            &tenant("globex"),
            &doc("policy"),
            chunks(&["globex refund policy is ninety days"], 1),
        )
        .await
        .unwrap();

    for (name, own, other) in [("acme", "thirty", "ninety"), ("globex", "ninety", "thirty")] {
        // Same id, same vector, same words: only the tenant filter separates them.
        let tenant = &tenant(name);
        let hits = store
            .search(tenant, "refund policy", &unit(1), 10, None)
            .await
            .unwrap();
        assert_eq!(hits.len(), 1, "{tenant}: {hits:?}");
        assert!(
            hits[0].text.contains(own) && !hits[0].text.contains(other),
            "{tenant}: {hits:?}"
        );
        assert_eq!(store.count(tenant).await.unwrap(), 1);
    }
    assert!(
        store
            .search(&tenant("initech"), "refund policy", &unit(1), 10, None)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn reingesting_a_document_replaces_all_its_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let store = EdgeStore::open(dir.path(), DIM).unwrap();
    store
        .replace_document(
            &tenant("t"),
            &doc("d"),
            chunks(&["old one", "old two", "old three"], 10),
        )
        .await
        .unwrap();
    store
        .replace_document(
            &tenant("t"),
            &doc("keep"),
            chunks(&["another document"], 20),
        )
        .await
        .unwrap();
    assert_eq!(store.count(&tenant("t")).await.unwrap(), 4);

    store
        .replace_document(&tenant("t"), &doc("d"), chunks(&["new only"], 30))
        .await
        .unwrap();
    assert_eq!(store.count(&tenant("t")).await.unwrap(), 2);
    let hits = store
        .search(&tenant("t"), "old new", &unit(30), 10, None)
        .await
        .unwrap();
    assert!(hits.iter().all(|h| !h.text.starts_with("old")), "{hits:?}");
    let top = &hits[0];
    assert_eq!(
        (top.document.id.as_str(), top.chunk, top.text.as_str()),
        ("d", 0, "new only")
    );
    assert_eq!(top.document.title, "Title of d");
    assert_eq!(top.document.source, "src/d");
}

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
        .search(&tenant("t"), "quokka", &unit(100), 2, None)
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
        .search(&tenant("t"), "persisted", &unit(5), 3, None)
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
async fn every_filter_returns_exactly_the_documents_its_meaning_lets_through() {
    let dir = tempfile::tempdir().unwrap();
    let store = filter_corpus(dir.path()).await;
    for (filter, expected) in sluice_testkit::filters::expected() {
        let hits = store
            .search(&tenant("acme"), "policy text", &unit(0), 50, Some(&filter))
            .await
            .unwrap();
        let mut got: Vec<&str> = hits.iter().map(|h| h.document.id.as_str()).collect();
        got.sort();
        let mut want = expected.clone();
        want.sort();
        assert_eq!(got, want, "{}", filter.to_json());
        // What comes back carries the document's metadata as it was sent.
        for hit in &hits {
            assert!(filter.matches(&hit.document.metadata), "{hit:?}");
        }
    }
    // The metadata round trip, dates as sent (offset kept).
    let all = store
        .search(&tenant("acme"), "policy text", &unit(0), 50, None)
        .await
        .unwrap();
    let p25 = all.iter().find(|h| h.document.id == "policy-2025").unwrap();
    assert_eq!(
        serde_json::to_value(&p25.document.metadata).unwrap()["updated_at"],
        "2025-03-01T11:00:00+02:00"
    );
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
        sluice_core::filter::Filter::parse(&serde_json::json!({"region": "emea"})).unwrap();
    let hits = store
        .search(&tenant("t"), "refund policy", &query, 3, Some(&filter))
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
    let filter = sluice_core::filter::Filter::parse(&serde_json::json!({"groups": "hr"})).unwrap();
    let hits = store
        .search(&tenant("globex"), "policy", &unit(0), 50, Some(&filter))
        .await
        .unwrap();
    let mut ids: Vec<&str> = hits.iter().map(|h| h.document.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["hr-guide", "policy-2024"]);
}
