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
            .search(tenant, "refund policy", &unit(1), 10)
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
            .search(&tenant("initech"), "refund policy", &unit(1), 10)
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
        .search(&tenant("t"), "old new", &unit(30), 10)
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
        .search(&tenant("t"), "quokka", &unit(100), 2)
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
        .search(&tenant("t"), "persisted", &unit(5), 3)
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
