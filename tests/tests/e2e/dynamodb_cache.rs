//! The answer cache's DynamoDB backend (`sluice-cache-dynamodb`) under the engine's cache,
//! against a real DynamoDB emulator (moto_server, started by
//! `make test` on 127.0.0.1 and named by the standard `AWS_ENDPOINT_URL_DYNAMODB`).
//! Each test works in its own table.

use sluice_testkit::{scope, tenant};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_cache_dynamodb::DynamoCache;
use sluice_contract::error::CacheError;
use sluice_contract::{cache::CacheEntry, cache::CacheStore, cache::CachedAnswer};
use sluice_core::{cache::CacheSettings, cache::Lookup, cache::Probe, cache::SemanticCache};

async fn table(name: &str) -> DynamoCache {
    let table = format!("{name}-{}", std::process::id());
    let cache = DynamoCache::connect(&table, None).await.expect("client");
    assert!(
        cache.create_table().await.expect("create table"),
        "fresh table"
    );
    cache
}

fn semantic(store: DynamoCache) -> SemanticCache {
    let settings = CacheSettings {
        threshold: 0.95,
        tenant_thresholds: HashMap::new(),
        ttl: Duration::from_secs(600),
        budget: Duration::from_secs(2),
        explore: Default::default(),
        error_bound: 0.01,
    };
    SemanticCache::new(Arc::new(store), settings, 4)
}

fn answer(text: &str) -> CachedAnswer {
    CachedAnswer {
        tokens: vec![text.to_string(), " [1]".into()],
        sources: vec![],
        finish_reason: "stop".into(),
        token_count: 2,
        token_count_source: "usage".into(),
        extract: None,
        grounding: None,
        cited: Vec::new(),
    }
}

fn entry(cache: &SemanticCache, name: &str, query: &str, vector: Vec<f32>) -> CacheEntry {
    cache.entry(
        &tenant(name),
        &Probe::new(query),
        vector,
        scope(3),
        answer(query),
    )
}

fn hit_text(lookup: &Lookup) -> Option<String> {
    match lookup {
        Lookup::Hit { entry, .. } => Some(entry.answer.tokens[0].clone()),
        Lookup::Miss | Lookup::Compare { .. } | Lookup::Verify { .. } => None,
        Lookup::Failed(e) => panic!("lookup failed: {e}"),
    }
}

#[tokio::test]
async fn create_table_is_idempotent_and_check_sees_the_layout() {
    sluice_testkit::needs!(Aws);
    let cache = table("sluice-create").await;
    assert!(cache.check().await.unwrap());
    assert!(!cache.create_table().await.unwrap(), "second call finds it");
    cache.prepare(false).await.unwrap();
}

#[tokio::test]
async fn a_missing_table_says_how_to_create_it() {
    sluice_testkit::needs!(Aws);
    let cache = DynamoCache::connect("sluice-never-created", None)
        .await
        .unwrap();
    assert!(!cache.check().await.unwrap());
    let e = cache.prepare(false).await.unwrap_err();
    assert!(matches!(e, CacheError::Setup(_)), "{e:?}");
    assert!(e.to_string().contains("sluice cache create-table"), "{e}");
}

#[tokio::test]
async fn exact_and_similar_hits_round_trip_through_the_table() {
    sluice_testkit::needs!(Aws);
    let store = table("sluice-roundtrip").await;
    let cache = semantic(store.clone());
    let stored = entry(
        &cache,
        "acme",
        "How do I reset my PIN?",
        vec![1.0, 0.0, 0.0, 0.0],
    );
    cache.put(&stored).await.unwrap();

    let exact = cache
        .exact(
            &tenant("acme"),
            &Probe::new("how do I reset my pin"),
            &scope(3),
        )
        .await;
    assert_eq!(hit_text(&exact).as_deref(), Some("How do I reset my PIN?"));

    // A paraphrase with a vector at cosine 0.98: found through the bucket indexes.
    let near = vec![0.98, (1.0f32 - 0.98 * 0.98).sqrt(), 0.0, 0.0];
    let similar = cache
        .similar(
            &tenant("acme"),
            &Probe::new("how can I reset my pin"),
            &near,
            &scope(3),
        )
        .await;
    match &similar {
        Lookup::Hit { entry, similarity } => {
            assert!((similarity - 0.98).abs() < 2e-3, "{similarity}");
            assert_eq!(entry.answer, stored.answer);
        }
        other => panic!("expected a hit, got {other:?}"),
    }
}

#[tokio::test]
async fn one_tenant_never_reads_another_tenants_entry() {
    sluice_testkit::needs!(Aws);
    let store = table("sluice-tenants").await;
    let cache = semantic(store.clone());
    let v = vec![0.0, 1.0, 0.0, 0.0];
    cache
        .put(&entry(&cache, "acme", "what is the fee", v.clone()))
        .await
        .unwrap();
    let probe = Probe::new("what is the fee");
    assert!(hit_text(&cache.exact(&tenant("globex"), &probe, &scope(3)).await).is_none());
    assert!(
        hit_text(
            &cache
                .similar(&tenant("globex"), &probe, &v, &scope(3))
                .await
        )
        .is_none()
    );
    // Not even the raw backend returns it: the tenant is part of every key it reads.
    assert!(
        store
            .get(&tenant("globex"), &probe.key)
            .await
            .unwrap()
            .is_none()
    );
    let buckets = entry(&cache, "acme", "what is the fee", v.clone()).buckets;
    assert!(
        store
            .candidates(&tenant("globex"), &buckets)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .candidates(&tenant("acme"), &buckets)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn expired_entries_are_ignored_although_the_emulator_keeps_them() {
    sluice_testkit::needs!(Aws);
    let store = table("sluice-ttl").await;
    let cache = semantic(store.clone());
    let v = vec![0.0, 0.0, 1.0, 0.0];
    let mut old = entry(&cache, "acme", "opening hours", v.clone());
    old.expires_at = sluice_core::cache::now() - 5;
    cache.put(&old).await.unwrap();
    let probe = Probe::new("opening hours");
    assert!(
        store
            .get(&tenant("acme"), &probe.key)
            .await
            .unwrap()
            .is_some(),
        "still stored"
    );
    assert!(hit_text(&cache.exact(&tenant("acme"), &probe, &scope(3)).await).is_none());
    assert!(hit_text(&cache.similar(&tenant("acme"), &probe, &v, &scope(3)).await).is_none());
}

#[tokio::test]
async fn clear_deletes_every_entry_of_one_tenant_only() {
    sluice_testkit::needs!(Aws);
    let store = table("sluice-clear").await;
    let cache = semantic(store.clone());
    for i in 0..60 {
        let v = vec![1.0, i as f32 / 60.0, 0.0, 0.0];
        let mut made = entry(&cache, "acme", &format!("question {i}"), v);
        // A third made for a key bound to a filter: that key's clear forgets those alone.
        if i % 3 == 0 {
            made.scope.binding = Some("team-a".into());
        }
        cache.put(&made).await.unwrap();
    }
    cache
        .put(&entry(
            &cache,
            "globex",
            "question 1",
            vec![1.0, 0.0, 0.0, 0.0],
        ))
        .await
        .unwrap();
    let bound = Some("team-a");
    assert_eq!(store.clear(&tenant("acme"), bound).await.unwrap(), 20);
    assert_eq!(store.clear(&tenant("acme"), bound).await.unwrap(), 0);
    assert!(
        (store
            .get(&tenant("acme"), &Probe::new("question 1").key)
            .await)
            .unwrap()
            .is_some(),
        "an unbound key's answer outlives a bound key's clear"
    );
    assert_eq!(store.clear(&tenant("acme"), None).await.unwrap(), 40);
    assert_eq!(store.clear(&tenant("acme"), None).await.unwrap(), 0);
    assert!(
        store
            .get(&tenant("globex"), &Probe::new("question 1").key)
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn an_answer_over_the_item_limit_is_not_written() {
    sluice_testkit::needs!(Aws);
    let store = table("sluice-large").await;
    let cache = semantic(store.clone());
    let mut big = entry(
        &cache,
        "acme",
        "tell me everything",
        vec![1.0, 0.0, 0.0, 0.0],
    );
    big.answer.tokens = vec!["word ".repeat(100_000)];
    let e = cache.put(&big).await.unwrap_err();
    assert!(matches!(e, CacheError::TooLarge { .. }), "{e:?}");
    assert!(
        store
            .get(&tenant("acme"), &big.key)
            .await
            .unwrap()
            .is_none()
    );
}

/// A TCP proxy in front of the emulator (a stand-in for the network only): it holds every
/// new connection for `delay` before forwarding, and counts the DynamoDB operations that
/// pass (the `x-amz-target` header of each request).
async fn counting_proxy(delay: Duration) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("emulator endpoint");
    let upstream = upstream.trim_start_matches("http://").to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (upstream, log) = (upstream.clone(), Arc::clone(&log));
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = client_read.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let text = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
                    for part in text.split("dynamodb_20120810.").skip(1) {
                        let op: String = part
                            .chars()
                            .take_while(|c| c.is_ascii_alphabetic())
                            .collect();
                        log.lock().unwrap().push(op);
                    }
                    if server_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (url, seen)
}

#[tokio::test]
async fn a_lookup_is_one_parallel_round_of_one_get_item_and_ten_index_queries() {
    sluice_testkit::needs!(Aws);
    let direct = table("sluice-rounds").await;
    let cache = semantic(direct.clone());
    cache
        .put(&entry(
            &cache,
            "acme",
            "what is the fee",
            vec![1.0, 0.0, 0.0, 0.0],
        ))
        .await
        .unwrap();

    let delay = Duration::from_millis(150);
    let (url, seen) = counting_proxy(delay).await;
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(&url)
        .load()
        .await;
    let proxied = DynamoCache::new(aws_sdk_dynamodb::Client::new(&sdk), direct.table());
    let cache = semantic(proxied);

    let started = std::time::Instant::now();
    let found = cache
        .lookup(
            &tenant("acme"),
            &Probe::new("what's the fee, please"),
            &[0.99, 0.141, 0.0, 0.0],
            &scope(3),
        )
        .await;
    let took = started.elapsed();
    assert!(hit_text(&found).is_some());
    let mut ops = seen.lock().unwrap().clone();
    ops.sort();
    let mut expected = vec!["getitem".to_string()];
    expected.extend(vec!["query".to_string(); 10]);
    assert_eq!(ops, expected, "one GetItem and one Query per band");
    // Eleven calls each held 150 ms: in parallel they take one delay, in sequence eleven.
    assert!(took < delay * 4, "the calls were not concurrent: {took:?}");
}

#[tokio::test]
async fn with_a_tenant_role_each_tenant_calls_with_credentials_assumed_for_it() {
    sluice_testkit::needs!(Aws);
    // moto evaluates no IAM policy: this shows the role is assumed per tenant (through the STS
    // endpoint `make test` points at moto) and that every item call works with those
    // credentials. What the role allows is checked on the template (tests/tests/e2e/iac.rs).
    let table = format!("tenant-role-{}", std::process::id());
    let aws = sluice_aws::AwsConfig::from_lookup(&sluice_contract::settings::pairs(&[
        ("SLUICE_CACHE_TABLE", &table),
        (
            "SLUICE_CACHE_TENANT_ROLE_ARN",
            "arn:aws:iam::123456789012:role/sluice-cache-tenant",
        ),
    ]))
    .expect("configuration");
    let store = DynamoCache::connect(&aws.cache_table, aws.cache_tenant_role_arn.as_deref())
        .await
        .expect("client");
    store.create_table().await.expect("create table");
    assert_eq!(
        store.tenant_clients(),
        0,
        "table set-up uses the process's own client"
    );
    let cache = semantic(store.clone());
    for name in ["acme", "globex"] {
        let e = entry(
            &cache,
            name,
            &format!("fee for {name}"),
            vec![1.0, 0.0, 0.0, 0.0],
        );
        cache.put(&e).await.expect("put as the tenant");
    }
    assert_eq!(store.tenant_clients(), 2);
    let found = cache
        .lookup(
            &tenant("acme"),
            &Probe::new("fee for acme"),
            &[1.0, 0.0, 0.0, 0.0],
            &scope(3),
        )
        .await;
    assert_eq!(hit_text(&found).as_deref(), Some("fee for acme"));
    assert_eq!(
        cache
            .clear(&tenant("globex"), None)
            .await
            .expect("clear as the tenant"),
        1
    );
    assert_eq!(store.tenant_clients(), 2, "one client per tenant, reused");
}

#[tokio::test]
async fn a_down_voted_answer_is_forgotten_from_the_table_and_its_question_kept_out() {
    sluice_testkit::needs!(Aws);
    let store = table("sluice-forget").await;
    sluice_testkit::forgets_an_answer_wherever_it_is_held(&store).await;
    // The mark that keeps the question out round-trips through the table, under its own
    // key and in no band: no similar-question lookup finds it.
    let cache = semantic(store.clone());
    let acme = tenant("acme");
    cache
        .block(&acme, "How long does a card take?", 7)
        .await
        .unwrap();
    let normalised = Probe::new("how long does a card take").normalised;
    assert!(cache.blocked(&acme, &normalised, 7).await);
    assert!(
        !cache.blocked(&acme, &normalised, 8).await,
        "the documents changed"
    );
    assert!(!cache.blocked(&tenant("globex"), &normalised, 7).await);
    let near = store
        .candidates(&acme, &[1; sluice_contract::cache::BANDS])
        .await
        .unwrap();
    assert!(
        near.iter().all(|e| !e.key.starts_with("blocked:")),
        "{near:?}"
    );
}
