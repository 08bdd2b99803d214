//! The store contract, one suite for every backend: [`store_suite!`](crate::store_suite) writes
//! a test per case below for a store its caller makes, so that Qdrant Edge (for real) and the
//! test kit's memory store — which every in-process test answers from — are held to the same
//! meaning of writes, searches, listings, deletions, filters, end users' access and corpus
//! versions. A backend's own tests (persistence, fusion inside the engine, its wire format)
//! stay with it. Stores are made for [`DIM`]-component vectors; every read waits the store's
//! [`Store::lag`] after a write first.

use serde_json::json;
use sluice_contract::error::StoreError;
use sluice_contract::filter::Filter;
use sluice_contract::fusion::Fusion;
use sluice_contract::stages::{
    DocumentInfo, Hit, Page, Search, Selection, Store, StoredChunk, StoredDocument,
};

use crate::tenant;

/// The dimension of the suite's vectors.
pub const DIM: usize = 384;

/// A deterministic unit vector for `seed`.
pub fn unit(seed: u64) -> Vec<f32> {
    let v: Vec<f32> = (0..DIM)
        .map(|i| ((seed as f32 + 1.0) * (i as f32 + 1.0) * 0.618).sin())
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

/// A document `id` with a title and source derived from it, no metadata.
pub fn doc(id: &str) -> DocumentInfo {
    DocumentInfo {
        format: None,
        digest: None,
        id: id.into(),
        title: format!("Title of {id}"),
        source: format!("src/{id}"),
        metadata: Default::default(),
        origin: None,
    }
}

/// One chunk per text, the `i`th with the vector of `seed + i`.
pub fn chunks(texts: &[&str], seed: u64) -> Vec<StoredChunk> {
    (texts.iter().enumerate())
        .map(|(i, t)| StoredChunk {
            place: Default::default(),
            header: String::new(),
            index: i,
            text: t.to_string(),
            tokens: t.split_whitespace().count(),
            vector: unit(seed + i as u64),
        })
        .collect()
}

/// Writes `chunks` of `info` for `tenant`.
async fn put(store: &dyn Store, name: &str, info: &DocumentInfo, chunks: Vec<StoredChunk>) {
    (store.replace_document(&tenant(name), info, chunks).await).expect("written");
}

/// Waits until a write shows in the store's reads.
async fn settled(store: &dyn Store) {
    tokio::time::sleep(store.lag()).await;
}

/// Every document of `name` that `selection` picks, read a page of `limit` at a time.
pub async fn listed(
    store: &dyn Store,
    name: &str,
    selection: &Selection<'_>,
    limit: usize,
) -> Vec<StoredDocument> {
    let (mut all, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let page = Page {
            limit,
            cursor: cursor.as_deref(),
        };
        let got = (store.documents(&tenant(name), selection, page).await).expect("a page");
        assert!(got.documents.len() <= limit);
        all.extend(got.documents);
        match got.next {
            Some(next) => cursor = Some(next),
            None => return all,
        }
    }
}

/// Two tenants write the same id with the same vector and words: each searches, counts and
/// lists only its own; a third has nothing.
pub async fn a_tenant_never_sees_another_tenants_chunks(store: &dyn Store) {
    put(
        store,
        "acme",
        &doc("policy"),
        chunks(&["acme refund policy is thirty days"], 1),
    )
    .await;
    put(
        store,
        "globex",
        &doc("policy"),
        chunks(&["globex refund policy is ninety days"], 1),
    )
    .await;
    settled(store).await;
    for (name, own, other) in [("acme", "thirty", "ninety"), ("globex", "ninety", "thirty")] {
        let vector = unit(1);
        let search = Search::new("refund policy", &vector, 10);
        let hits = store.search(&tenant(name), &search).await.expect("hits");
        assert_eq!(hits.len(), 1, "{name}: {hits:?}");
        assert!(
            hits[0].text.contains(own) && !hits[0].text.contains(other),
            "{name}: {hits:?}"
        );
        assert_eq!(store.count(&tenant(name)).await.expect("a count"), 1);
        assert_eq!(
            listed(store, name, &Selection::default(), 10).await.len(),
            1
        );
    }
    let vector = unit(1);
    let search = Search::new("refund policy", &vector, 10);
    assert!(
        store
            .search(&tenant("initech"), &search)
            .await
            .expect("hits")
            .is_empty()
    );
}

/// A document written again replaces every chunk it had, and only its own.
pub async fn a_document_written_again_replaces_all_its_chunks(store: &dyn Store) {
    put(
        store,
        "t",
        &doc("d"),
        chunks(&["old one", "old two", "old three"], 10),
    )
    .await;
    put(store, "t", &doc("keep"), chunks(&["another document"], 20)).await;
    settled(store).await;
    assert_eq!(store.count(&tenant("t")).await.expect("a count"), 4);
    put(store, "t", &doc("d"), chunks(&["new only"], 30)).await;
    settled(store).await;
    assert_eq!(store.count(&tenant("t")).await.expect("a count"), 2);
    let vector = unit(30);
    let search = Search::new("old new", &vector, 10);
    let hits = store.search(&tenant("t"), &search).await.expect("hits");
    assert!(hits.iter().all(|h| !h.text.starts_with("old")), "{hits:?}");
    let top = &hits[0];
    assert_eq!(
        (top.document.id.as_str(), top.chunk, top.text.as_str()),
        ("d", 0, "new only")
    );
    assert_eq!(
        (top.document.title.as_str(), top.document.source.as_str()),
        ("Title of d", "src/d")
    );
}

/// Listings page through every document once, with its chunks, digest, origin, metadata and
/// time; a selection by ids, origin or filter picks exactly those, and deletes exactly those
/// (never past a filter the document does not pass, never another tenant's); a cursor the
/// store never handed out is refused.
pub async fn documents_are_listed_once_each_and_deleted_whole(store: &dyn Store) {
    // 25 documents of 1 to 3 chunks for acme (the odd ones from one upload), one for globex.
    for i in 0..25u64 {
        let n = 1 + (i % 3) as usize;
        let texts: Vec<String> = (0..n).map(|c| format!("document {i} chunk {c}")).collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let info = DocumentInfo {
            metadata: crate::filters::metadata(json!({"n": i})),
            origin: (i % 2 == 1).then(|| "s3://docs/acme/batch.jsonl".to_string()),
            digest: (i % 2 == 1).then(|| format!("digest of d{i:02}")),
            ..doc(&format!("d{i:02}"))
        };
        put(store, "acme", &info, chunks(&texts, i * 10)).await;
    }
    put(store, "globex", &doc("g"), chunks(&["other"], 1)).await;
    settled(store).await;

    let everything = Selection::default();
    for limit in [1, 7, 25, 100] {
        let all = listed(store, "acme", &everything, limit).await;
        let mut ids: Vec<&str> = all.iter().map(|d| d.document.id.as_str()).collect();
        ids.sort();
        let expected: Vec<String> = (0..25).map(|i| format!("d{i:02}")).collect();
        assert_eq!(ids, expected, "limit {limit}: every document once");
    }
    let all = listed(store, "acme", &everything, 100).await;
    let find = |id: &str| all.iter().find(|d| d.document.id == id).expect("listed");
    let (d04, d05) = (find("d04"), find("d05"));
    assert_eq!(d04.chunks, Some(2));
    // What an ingest compares a document sent again with: kept where it was given.
    assert_eq!(d05.document.digest.as_deref(), Some("digest of d05"));
    assert_eq!(d04.document.digest, None);
    assert_eq!(d04.document.title, "Title of d04");
    assert_eq!(
        serde_json::to_value(&d04.document.metadata).ok(),
        Some(json!({"n": 4}))
    );
    let at = d04.ingested_at.as_deref().unwrap_or_default();
    assert!(
        at.len() >= 20 && at.as_bytes()[10] == b'T',
        "an RFC 3339 time: {at:?}"
    );
    assert_eq!(
        d05.document.origin.as_deref(),
        Some("s3://docs/acme/batch.jsonl")
    );

    // By id, by origin, by metadata filter.
    let ids = ["d03".to_string(), "d20".to_string(), "nope".to_string()];
    let by_id = Selection {
        ids: Some(&ids),
        ..Selection::default()
    };
    let mut got: Vec<String> = (listed(store, "acme", &by_id, 10).await.into_iter())
        .map(|d| d.document.id)
        .collect();
    got.sort();
    assert_eq!(got, ["d03", "d20"]);
    let by_origin = Selection {
        origin: Some("s3://docs/acme/batch.jsonl"),
        ..Selection::default()
    };
    assert_eq!(listed(store, "acme", &by_origin, 5).await.len(), 12);
    let filter = Filter::parse(&json!({"n": {"$gte": 20}})).expect("a filter");
    let by_filter = Selection {
        filter: Some(&filter),
        ..Selection::default()
    };
    assert_eq!(listed(store, "acme", &by_filter, 2).await.len(), 5);
    // A cursor this store never handed out is refused as such.
    let page = Page {
        limit: 5,
        cursor: Some("page-two"),
    };
    let bad = store.documents(&tenant("acme"), &everything, page).await;
    assert!(matches!(bad, Err(StoreError::Invalid(_))), "{bad:?}");

    // Deleting by origin removes every chunk of those documents and nothing else.
    let before = store.count(&tenant("acme")).await.expect("a count");
    let odd_chunks: usize = (0..25u64)
        .filter(|i| i % 2 == 1)
        .map(|i| 1 + (i % 3) as usize)
        .sum();
    (store.delete_documents(&tenant("acme"), &by_origin).await).expect("deleted");
    settled(store).await;
    assert_eq!(
        store.count(&tenant("acme")).await.expect("a count"),
        before - odd_chunks
    );
    assert_eq!(listed(store, "acme", &everything, 100).await.len(), 13);
    assert!(listed(store, "acme", &by_origin, 100).await.is_empty());
    // By id, under a filter the document does not pass: kept.
    let d02 = ["d02".to_string()];
    let miss = Filter::parse(&json!({"n": 99})).expect("a filter");
    let only_d02 = Selection {
        ids: Some(&d02),
        ..Selection::default()
    };
    let under_miss = Selection {
        filter: Some(&miss),
        ..only_d02
    };
    (store.delete_documents(&tenant("acme"), &under_miss).await).expect("nothing deleted");
    settled(store).await;
    assert_eq!(listed(store, "acme", &only_d02, 5).await.len(), 1);
    (store.delete_documents(&tenant("acme"), &only_d02).await).expect("deleted");
    settled(store).await;
    assert!(listed(store, "acme", &only_d02, 5).await.is_empty());
    // The other tenant's document is untouched; searches find nothing deleted.
    assert_eq!(listed(store, "globex", &everything, 10).await.len(), 1);
    let vector = unit(1);
    let search = Search::new("document chunk", &vector, 50);
    let hits = store.search(&tenant("acme"), &search).await.expect("hits");
    let odd = ['1', '3', '5', '7', '9'];
    assert!(
        hits.iter()
            .all(|h| h.document.id != "d02" && !h.document.id.ends_with(odd)),
        "{hits:?}"
    );
    // A replacement with fewer chunks lists the new count.
    put(store, "acme", &doc("d04"), chunks(&["only one now"], 3)).await;
    settled(store).await;
    let d04 = ["d04".to_string()];
    let only_d04 = Selection {
        ids: Some(&d04),
        ..Selection::default()
    };
    assert_eq!(listed(store, "acme", &only_d04, 5).await[0].chunks, Some(1));
}

/// Every filter of the shared cases ([`crate::filters::expected`]) returns exactly the
/// documents its meaning lets through, inside the search (all of them fit in `k`), with their
/// metadata as it was sent.
pub async fn every_filter_returns_exactly_the_documents_its_meaning_lets_through(
    store: &dyn Store,
) {
    for (i, (id, metadata)) in crate::filters::corpus().into_iter().enumerate() {
        let info = DocumentInfo {
            metadata,
            ..doc(id)
        };
        for name in ["acme", "globex"] {
            put(
                store,
                name,
                &info,
                chunks(&[&format!("policy text of {id}")], i as u64),
            )
            .await;
        }
    }
    settled(store).await;
    for (filter, expected) in crate::filters::expected() {
        let vector = unit(0);
        let search = Search::new("policy text", &vector, 50).filter(Some(&filter));
        let hits = store.search(&tenant("acme"), &search).await.expect("hits");
        let mut got: Vec<&str> = hits.iter().map(|h| h.document.id.as_str()).collect();
        got.sort();
        let mut want = expected.clone();
        want.sort();
        assert_eq!(got, want, "{}", filter.to_json());
        for hit in &hits {
            assert!(filter.matches(&hit.document.metadata), "{hit:?}");
        }
    }
    // The metadata round trip, dates as sent (offset kept).
    let vector = unit(0);
    let search = Search::new("policy text", &vector, 50);
    let all = store.search(&tenant("acme"), &search).await.expect("hits");
    let p25 = all
        .iter()
        .find(|h| h.document.id == "policy-2025")
        .expect("found");
    assert_eq!(
        serde_json::to_value(&p25.document.metadata)
            .ok()
            .map(|m| m["updated_at"].clone()),
        Some(json!("2025-03-01T11:00:00+02:00"))
    );
}

/// 40 documents with random access lists, and random end users (or none), key bindings and
/// request filters as the routes AND them ([`crate::users::access_case`]): the search
/// returns exactly what the reference lets through.
pub async fn an_end_users_access_lets_through_exactly_what_they_may_see(store: &dyn Store) {
    let mut cases = crate::users::Cases::new(58);
    let corpus = crate::users::access_corpus(&mut cases, 40);
    for (i, (id, metadata)) in corpus.iter().enumerate() {
        let info = DocumentInfo {
            metadata: metadata.clone(),
            ..doc(id)
        };
        put(store, "t", &info, chunks(&["the card policy"], i as u64)).await;
    }
    settled(store).await;
    let query = unit(7);
    for case in 0..crate::users::case_count() {
        let (filter, expected) = crate::users::access_case(&mut cases, &corpus);
        let search = Search::new("card policy", &query, 50).filter(filter.as_ref());
        let hits = store.search(&tenant("t"), &search).await.expect("hits");
        let mut got: Vec<String> = hits.iter().map(|h| h.document.id.clone()).collect();
        got.sort();
        assert_eq!(
            got,
            expected,
            "case {case}: {:?}",
            filter.map(|f| f.to_json())
        );
    }
}

/// Ten chunks that tie in both retrievers (the same words, the same vector, under ten
/// document ids written in reverse): under every fusion rule the hits come in rank order
/// ([`Hit::rank_order`]) and the same search gives the same hits; under a rule fused here
/// (convex) the ties are ranked by document id, the lower first, whatever order they were
/// written in. (Under RRF an engine that fuses — Qdrant — ranks ties inside each retriever in
/// its own order before fusing, so which of exact duplicates comes first is its choice.)
pub async fn tied_chunks_come_in_rank_order_and_by_document_id_when_fused_here(store: &dyn Store) {
    for i in (0..10).rev() {
        let id = format!("twin{i}");
        put(store, "t", &doc(&id), chunks(&["the same card policy"], 5)).await;
    }
    settled(store).await;
    let vector = unit(5);
    for fusion in [Fusion::default(), Fusion::Convex { dense: 0.5 }] {
        for k in [1, 3, 10] {
            let search = Search::new("card policy", &vector, k).fusion(fusion);
            let hits = store.search(&tenant("t"), &search).await.expect("hits");
            let again = store.search(&tenant("t"), &search).await.expect("hits");
            let ids = |hits: &[Hit]| -> Vec<String> {
                hits.iter().map(|h| h.document.id.clone()).collect()
            };
            assert_eq!(ids(&hits), ids(&again), "{fusion}, k = {k}");
            assert_eq!(hits.len(), k, "{fusion}");
            assert!(
                hits.windows(2)
                    .all(|w| Hit::rank_order(&w[0], &w[1]).is_lt()),
                "{fusion}, k = {k}: {hits:?}"
            );
            if let Fusion::Convex { .. } = fusion {
                let expected: Vec<String> = (0..k).map(|i| format!("twin{i}")).collect();
                assert_eq!(ids(&hits), expected, "{fusion}, k = {k}");
            }
        }
    }
}

/// Each tenant's corpus version starts at 0, rises with each of its own bumps, and reads back
/// as its last bump; another tenant's bumps leave it as it is.
pub async fn corpus_versions_rise_with_each_tenants_own_changes(store: &dyn Store) {
    let version = |name| async move {
        store
            .corpus_version(&tenant(name))
            .await
            .expect("a version")
    };
    let bump = |name| async move {
        store
            .bump_corpus_version(&tenant(name))
            .await
            .expect("bumped")
    };
    assert_eq!(version("t").await, 0);
    let first = bump("t").await;
    let second = bump("t").await;
    assert!(0 < first && first < second, "{first} then {second}");
    let other = bump("u").await;
    assert!(other > 0);
    settled(store).await;
    assert_eq!(version("t").await, second);
    assert_eq!(version("u").await, other);
}

/// Writes a `#[tokio::test]` per case of the store contract ([`crate::store_suite`]) for the
/// store `$make` makes: an async block giving `(Arc<dyn Store>, keep)`, `keep` being what
/// must live as long as the store (its folder).
#[macro_export]
macro_rules! store_suite {
    ($make:expr) => {
        $crate::store_suite!(@cases $make;
            a_tenant_never_sees_another_tenants_chunks,
            a_document_written_again_replaces_all_its_chunks,
            documents_are_listed_once_each_and_deleted_whole,
            every_filter_returns_exactly_the_documents_its_meaning_lets_through,
            an_end_users_access_lets_through_exactly_what_they_may_see,
            tied_chunks_come_in_rank_order_and_by_document_id_when_fused_here,
            corpus_versions_rise_with_each_tenants_own_changes,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        mod store_suite {
            use super::*;
            $(
                #[tokio::test]
                async fn $case() {
                    // A tuple drops its fields in order, also when a case fails: the store
                    // first, as it may write to what is kept (its folder) as it closes.
                    let made = $make.await;
                    $crate::store_suite::$case(&*made.0).await;
                }
            )*
        }
    };
}
