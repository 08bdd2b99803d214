use super::*;
use sluice_local::MemoryCache;
use sluice_testkit::scope;

fn answer(text: &str) -> CachedAnswer {
    CachedAnswer::one_token(text)
}

fn cache(threshold: f32) -> SemanticCache {
    let settings = CacheSettings {
        threshold,
        tenant_thresholds: HashMap::from([(Tenant::new("strict").unwrap(), 0.999)]),
        ttl: Duration::from_secs(60),
        budget: Duration::from_millis(100),
        explore: HashMap::from([(Tenant::new("learner").unwrap(), 1.0)]),
        error_bound: 0.01,
    };
    SemanticCache::new(Arc::new(MemoryCache::new(100)), settings, 4)
}

/// A unit vector at cosine `c` from (1, 0, 0, 0).
fn near(c: f32) -> Vec<f32> {
    vec![c, (1.0 - c * c).sqrt(), 0.0, 0.0]
}

fn t(name: &str) -> Tenant {
    Tenant::new(name).unwrap()
}

async fn store(cache: &SemanticCache, tenant: &str, query: &str, v: Vec<f32>, s: Scope) {
    let entry = cache.entry(&t(tenant), &Probe::new(query), v, s, answer(query));
    cache.put(&entry).await.unwrap();
}

fn hit(l: &Lookup) -> Option<&str> {
    match l {
        Lookup::Hit { entry, .. } => Some(entry.answer.tokens[0].as_str()),
        _ => None,
    }
}

#[tokio::test]
async fn exact_key_ignores_case_and_punctuation() {
    let c = cache(0.95);
    store(&c, "acme", "What is the fee?", near(1.0), scope(1)).await;
    let l = c
        .exact(&t("acme"), &Probe::new("what is the FEE"), &scope(1))
        .await;
    assert_eq!(hit(&l), Some("What is the fee?"));
    let l = c
        .exact(&t("acme"), &Probe::new("what is a fee"), &scope(1))
        .await;
    assert!(matches!(l, Lookup::Miss), "{l:?}");
}

#[tokio::test]
async fn similar_needs_the_threshold_and_the_guard() {
    let c = cache(0.95);
    store(&c, "acme", "how do I turn on alerts", near(1.0), scope(1)).await;
    let on = Probe::new("how can I turn alerts on");
    let off = Probe::new("how can I turn alerts off");
    assert!(hit(&c.similar(&t("acme"), &on, &near(0.97), &scope(1)).await).is_some());
    assert!(hit(&c.similar(&t("acme"), &on, &near(0.90), &scope(1)).await).is_none());
    assert!(hit(&c.similar(&t("acme"), &off, &near(0.99), &scope(1)).await).is_none());
    // A tenant's own threshold.
    store(&c, "strict", "how do I turn on alerts", near(1.0), scope(1)).await;
    let on = Probe::new("how do I turn on alerts?");
    assert!(hit(&c.similar(&t("strict"), &on, &near(0.97), &scope(1)).await).is_none());
}

#[tokio::test]
async fn a_learning_tenant_compares_candidates_and_its_threshold_follows_them() {
    let c = cache(0.95);
    // Not learning: no comparison, no estimate.
    store(&c, "acme", "how do I turn on alerts", near(1.0), scope(1)).await;
    let on = Probe::new("how can I turn alerts on");
    let found = c.similar(&t("acme"), &on, &near(0.9), &scope(1)).await;
    assert!(matches!(found, Lookup::Miss), "{found:?}");
    assert_eq!(c.estimate(&t("acme")), None);
    // Learning at rate 1: a candidate the guard passes, under the threshold but over the
    // floor, is handed over for comparison; one the guard refuses is not.
    store(
        &c,
        "learner",
        "how do I turn on alerts",
        near(1.0),
        scope(1),
    )
    .await;
    let found = c.similar(&t("learner"), &on, &near(0.9), &scope(1)).await;
    assert!(matches!(found, Lookup::Compare { .. }), "{found:?}");
    let off = Probe::new("how can I turn alerts off");
    let found = c.similar(&t("learner"), &off, &near(0.99), &scope(1)).await;
    assert!(matches!(found, Lookup::Miss), "{found:?}");
    // Enough same answers at 0.9 and the threshold comes down to them.
    for _ in 0..400 {
        c.observe(&t("learner"), 0.9, true);
    }
    let estimate = c.estimate(&t("learner")).expect("learning");
    assert!(estimate.learned && (c.threshold(&t("learner")) - 0.9).abs() < 0.006);
    // Comparisons of a tenant that does not learn are not kept.
    c.observe(&t("acme"), 0.9, true);
    assert_eq!(c.threshold(&t("acme")), 0.95);
}

#[tokio::test]
async fn entries_of_another_tenant_scope_or_age_do_not_answer() {
    let c = cache(0.95);
    store(&c, "acme", "q", near(1.0), scope(1)).await;
    let p = Probe::new("q");
    assert!(hit(&c.exact(&t("globex"), &p, &scope(1)).await).is_none());
    assert!(hit(&c.similar(&t("globex"), &p, &near(1.0), &scope(1)).await).is_none());
    assert!(
        hit(&c.exact(&t("acme"), &p, &scope(2)).await).is_none(),
        "corpus version"
    );
    let other_k = Scope { k: 3, ..scope(1) };
    assert!(hit(&c.exact(&t("acme"), &p, &other_k).await).is_none(), "k");
    let reranked = Scope {
        rerank: Some("v2".into()),
        ..scope(1)
    };
    assert!(
        hit(&c.exact(&t("acme"), &p, &reranked).await).is_none(),
        "rerank component"
    );
    // Under a filter: another key and another scope, so neither answers the other.
    let filtered = Scope {
        variant: Some("f1".into()),
        ..scope(1)
    };
    let under = Probe::scoped("q", &filtered);
    assert_ne!(under.key, p.key);
    assert!(hit(&c.exact(&t("acme"), &under, &filtered).await).is_none());
    assert!(
        hit(&c.similar(&t("acme"), &under, &near(1.0), &filtered).await).is_none(),
        "a similar entry made without the filter"
    );
    let entry = c.entry(&t("acme"), &under, near(1.0), filtered.clone(), answer("q"));
    c.put(&entry).await.unwrap();
    assert!(hit(&c.exact(&t("acme"), &under, &filtered).await).is_some());
    let other = Scope {
        variant: Some("f2".into()),
        ..scope(1)
    };
    assert!(
        hit(&c
            .similar(&t("acme"), &Probe::scoped("q", &other), &near(1.0), &other)
            .await)
        .is_none(),
        "another filter"
    );
    assert!(hit(&c.exact(&t("acme"), &p, &scope(1)).await).is_some());
    let mut old = c.entry(&t("acme"), &p, near(1.0), scope(1), answer("old"));
    old.expires_at = now() - 1;
    c.put(&old).await.unwrap();
    assert!(
        hit(&c.exact(&t("acme"), &p, &scope(1)).await).is_none(),
        "expired"
    );
}

#[tokio::test]
async fn an_entry_of_an_earlier_corpus_version_answers_only_once_verified() {
    let c = cache(0.95);
    store(&c, "acme", "how do I turn on alerts", near(1.0), scope(3)).await;
    let p = Probe::new("how do I turn on alerts");
    let similar = Probe::new("how can I turn alerts on");
    // Made under version 3, asked under 4: an entry to verify, exact or similar.
    let exact = c.exact(&t("acme"), &p, &scope(4)).await;
    assert!(
        matches!(&exact, Lookup::Verify { candidates } if candidates.len() == 1 && candidates[0].1 == 1.0),
        "{exact:?}"
    );
    let found = c
        .similar(&t("acme"), &similar, &near(0.97), &scope(4))
        .await;
    assert!(matches!(found, Lookup::Verify { .. }), "{found:?}");
    // Asked under version 2 (a process that has not read the change yet): not at all.
    let early = c.exact(&t("acme"), &p, &scope(2)).await;
    assert!(matches!(early, Lookup::Miss), "{early:?}");
    // Only the version may differ: another k, component or filter is another answer.
    for other in [
        Scope { k: 3, ..scope(4) },
        Scope {
            rerank: Some("v2".into()),
            ..scope(4)
        },
        Scope {
            variant: Some("f".into()),
            ..scope(4)
        },
        Scope {
            binding: Some("b".into()),
            ..scope(4)
        },
        Scope {
            llm_model: "other".into(),
            ..scope(4)
        },
    ] {
        let found = c.exact(&t("acme"), &p, &other).await;
        assert!(matches!(found, Lookup::Miss), "{other:?}: {found:?}");
    }
    // Under the threshold or past the guard, verification is not offered either.
    let found = c.similar(&t("acme"), &similar, &near(0.9), &scope(4)).await;
    assert!(matches!(found, Lookup::Miss), "{found:?}");
    let off = Probe::new("how can I turn alerts off");
    let found = c.similar(&t("acme"), &off, &near(0.99), &scope(4)).await;
    assert!(matches!(found, Lookup::Miss), "{found:?}");
    // A hit under the version in use beats one to verify.
    store(&c, "acme", "how do I turn alerts on", near(0.96), scope(4)).await;
    let found = c.lookup(&t("acme"), &p, &near(1.0), &scope(4)).await;
    assert_eq!(hit(&found), Some("how do I turn alerts on"));
}

#[test]
fn an_answer_is_built_from_its_cited_sources_only_in_their_order() {
    let cited = |id: &str, digest: &str| sluice_contract::cache::Cited {
        id: id.into(),
        chunk: 0,
        digest: digest.into(),
    };
    let source = |id: &str| sluice_contract::stages::SourceDoc {
        id: id.into(),
        ..serde_json::from_value(serde_json::json!({
            "id": "", "chunk": 0, "score": 0.0, "source": "", "title": "", "snippet": ""
        }))
        .unwrap()
    };
    let mut made = answer("a");
    made.sources = vec![source("x"), source("y")];
    made.cited = vec![cited("x", "1"), cited("y", "2")];
    assert!(made.built_from(&[cited("x", "1"), cited("y", "2")]));
    assert!(
        !made.built_from(&[cited("y", "2"), cited("x", "1")]),
        "order"
    );
    assert!(
        !made.built_from(&[cited("x", "1"), cited("y", "3")]),
        "an edit"
    );
    assert!(!made.built_from(&[cited("x", "1")]), "one gone");
    assert!(!made.built_from(&[cited("x", "1"), cited("y", "2"), cited("z", "4")]));
    // An entry made before sources were recorded never verifies, not even against none.
    let mut unrecorded = answer("b");
    unrecorded.sources = vec![source("x")];
    assert!(!unrecorded.built_from(&[]));
}

#[tokio::test]
async fn the_best_candidate_wins() {
    let c = cache(0.9);
    store(&c, "acme", "reset my password", near(0.93), scope(1)).await;
    store(&c, "acme", "reset the password", near(0.99), scope(1)).await;
    let l = c
        .similar(
            &t("acme"),
            &Probe::new("reset password"),
            &near(1.0),
            &scope(1),
        )
        .await;
    assert_eq!(hit(&l), Some("reset the password"));
}

#[test]
fn cosine_of_scaled_and_mismatched_vectors() {
    assert!((cosine(&[2.0, 0.0], &[0.5, 0.0]) - 1.0).abs() < 1e-6);
    assert_eq!(cosine(&[1.0], &[1.0, 0.0]), 0.0);
    assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
}

#[tokio::test]
async fn an_answer_made_for_other_principals_answers_only_through_its_sources() {
    let c = cache(0.95);
    let for_user = |access: &str| Scope {
        access: Some(access.into()),
        ..scope(3)
    };
    let (alice, bob) = (for_user("alice's"), for_user("bob's"));
    let asked_by_alice = Probe::scoped("q", &alice);
    let entry = c.entry(
        &t("acme"),
        &asked_by_alice,
        near(1.0),
        alice.clone(),
        answer("q"),
    );
    c.put(&entry).await.unwrap();
    // Alice's own: at once, by her key.
    assert!(hit(&c.exact(&t("acme"), &asked_by_alice, &alice).await).is_some());
    // Bob's key is his own, so the exact read misses; the same question found by its
    // embedding is offered for verification against his sources, never as a hit.
    let asked_by_bob = Probe::scoped("q", &bob);
    assert_ne!(asked_by_bob.key, asked_by_alice.key);
    let exact = c.exact(&t("acme"), &asked_by_bob, &bob).await;
    assert!(matches!(exact, Lookup::Miss), "{exact:?}");
    let found = c.similar(&t("acme"), &asked_by_bob, &near(1.0), &bob).await;
    assert!(matches!(found, Lookup::Verify { .. }), "{found:?}");
    // With answers made for several others from other sources, each is offered (the sources
    // pick one), the most similar first; one made from sources an earlier one has is not.
    let cited = |id: &str| {
        let mut a = answer("q");
        a.cited = vec![sluice_contract::cache::Cited {
            id: id.into(),
            chunk: 0,
            digest: "d".repeat(64),
        }];
        a
    };
    for (who, similarity, from) in [
        ("carol's", 0.99, "hr"),
        ("dave's", 0.98, "hr"),
        ("erin's", 0.97, "sales"),
    ] {
        let scope = for_user(who);
        let probe = Probe::scoped("q", &scope);
        let entry = c.entry(&t("acme"), &probe, near(similarity), scope, cited(from));
        c.put(&entry).await.unwrap();
    }
    let found = c.similar(&t("acme"), &asked_by_bob, &near(1.0), &bob).await;
    let Lookup::Verify { candidates } = found else {
        panic!("{found:?}")
    };
    let made_for: Vec<_> = (candidates.iter())
        .map(|(e, _)| e.scope.access.as_deref())
        .collect();
    assert_eq!(made_for, [Some("alice's"), Some("carol's"), Some("erin's")]);
    // So for a request without an end user; but one with a filter of its own is another
    // answer: the access is the only thing besides the corpus version that may differ.
    let found = c
        .similar(&t("acme"), &Probe::new("q"), &near(1.0), &scope(3))
        .await;
    assert!(matches!(found, Lookup::Verify { .. }), "{found:?}");
    let filtered = Scope {
        variant: Some("f".into()),
        ..bob.clone()
    };
    let found = c
        .similar(&t("acme"), &asked_by_bob, &near(1.0), &filtered)
        .await;
    assert!(matches!(found, Lookup::Miss), "{found:?}");
}

#[tokio::test]
async fn a_blocked_question_stays_out_only_under_the_corpus_version_it_was_blocked_at() {
    let cache = cache(0.95);
    let acme = sluice_testkit::tenant("acme");
    let normalised = Probe::new("How long does a card take?").normalised;
    assert!(!cache.blocked(&acme, &normalised, 3).await);
    cache
        .block(&acme, "how long does a CARD take", 3)
        .await
        .unwrap();
    assert!(
        cache.blocked(&acme, &normalised, 3).await,
        "the same question, normalised"
    );
    assert!(
        !cache.blocked(&acme, &normalised, 4).await,
        "until the documents change"
    );
    assert!(
        !cache
            .blocked(&sluice_testkit::tenant("globex"), &normalised, 3)
            .await
    );
    let other = Probe::new("What is the ATM limit?").normalised;
    assert!(!cache.blocked(&acme, &other, 3).await);
}
