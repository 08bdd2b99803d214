//! Fusion per tenant: each tenant's hybrid search is fused by its own rule
//! (`SLUICE_FUSION_TENANTS`, else `SLUICE_FUSION`), which the sources' scores in `meta` show;
//! an answer made under one rule is never served from the cache under another. Each store's
//! own fusion (in the engine, or here from its two halves) is tested against that store in its
//! crate.

use serde_json::json;

use crate::kit::Kit;

fn question() -> serde_json::Value {
    json!({"query": "how long until a replacement card arrives", "k": 3})
}

/// The sources' scores, best first.
fn scores(stream: &crate::kit::Stream) -> Vec<f64> {
    stream.meta()["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["score"].as_f64().unwrap())
        .collect()
}

#[tokio::test]
async fn each_tenant_is_fused_by_its_own_rule() {
    let kit = Kit::new(&[
        ("SLUICE_FUSION", "rrf:k=10"),
        ("SLUICE_FUSION_TENANTS", "acme=convex:dense=0"),
    ]);
    let app = kit.ingested("acme").await.ingested("globex").await.app();
    // acme: BM25 alone, normalised: its best source scores exactly 1, and "replacement card"
    // makes lost-card that source.
    let acme = app.answer_as("acme", &question()).await;
    assert_eq!(acme.sources()[0], "lost-card");
    assert_eq!(scores(&acme)[0], 1.0, "{:?}", scores(&acme));
    // globex: the default, RRF with k = 10: no source scores more than two first places,
    // 2 / (k + 1 − 1) = 0.2, and the best at least one first place's 1/10.
    let globex = app.answer_as("globex", &question()).await;
    let s = scores(&globex);
    assert!(s[0] <= 0.2 + 1e-6 && s[0] >= 0.1 - 1e-6, "{s:?}");
    assert!(s.windows(2).all(|w| w[0] >= w[1]), "best first: {s:?}");
}

#[tokio::test]
async fn an_answer_made_under_one_fusion_is_never_served_under_another() {
    // One store and one cache, seen by three servers that fuse differently (as after a
    // retuned tenant's redeploy).
    let first = Kit::new(&[]).ingested("default").await;
    let (store, cache) = (first.parts.store.clone(), first.parts.cache.clone());
    let with = |vars: &[(&str, &str)]| {
        let mut kit = Kit::new(vars);
        kit.parts.store = store.clone();
        kit.parts.cache = cache.clone();
        kit.app()
    };
    let app = first.app();
    assert_eq!(app.answer(&question()).await.meta()["cache"], "miss");
    assert_eq!(app.answer(&question()).await.meta()["cache"], "hit");
    let convex = with(&[("SLUICE_FUSION", "convex:dense=0.5")]);
    assert_eq!(convex.answer(&question()).await.meta()["cache"], "miss");
    assert_eq!(convex.answer(&question()).await.meta()["cache"], "hit");
    // A tenant's own rule counts the same as a default.
    let tuned = with(&[("SLUICE_FUSION_TENANTS", "default=rrf:k=5:bm25=0.5")]);
    assert_eq!(tuned.answer(&question()).await.meta()["cache"], "miss");
    // And the plain rule's entry is still there for it: the same rule written out in full is
    // the same rule.
    let plain = with(&[("SLUICE_FUSION", "rrf:k=60:dense=1:bm25=1")]);
    assert_eq!(plain.answer(&question()).await.meta()["cache"], "hit");
}

#[tokio::test]
async fn equal_scores_come_back_in_one_order_whatever_order_the_store_returns_them_in() {
    use std::sync::Arc;
    // A store that scores every hit alike and returns them in a different order each time
    // (as identical vectors come back from a real one): the sources are the same list on
    // every request, ordered by document id and then chunk.
    let mut kit = Kit::new(&[("SLUICE_CACHE", "off")]).ingested("acme").await;
    let mut store = sluice_testkit::Troubled::around(kit.store());
    store.scramble = true;
    kit.parts.store = Some(Arc::new(store));
    let app = kit.app();
    let ask = json!({"query": "how long until a replacement card arrives", "k": 4});
    let mut orders = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let answer = app.answer_as("acme", &ask).await;
        let sources: Vec<(String, u64)> = answer.meta()["documents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["id"].as_str().unwrap().to_string(),
                    d["chunk"].as_u64().unwrap(),
                )
            })
            .collect();
        assert!(sources.len() > 1, "{sources:?}");
        assert!(
            sources.is_sorted(),
            "by document id, then chunk: {sources:?}"
        );
        orders.insert(sources);
    }
    assert_eq!(orders.len(), 1, "{orders:?}");
}
