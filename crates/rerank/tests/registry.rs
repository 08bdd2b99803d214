//! The registry as the answer path uses it: a tenant's component is answered from memory,
//! checked again in the background once the refresh interval has passed (a changed version is
//! fetched and compiled off the request path while the one known so far serves), and only a
//! tenant never seen waits for the storage — for as long as the caller allows, with the load
//! going on in the background. Component storage here is a folder behind a double that can
//! make its reads slow or failing.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sluice_contract::cancel::Cancel;
use sluice_contract::stages::{ComponentStorage, Components, RerankInput, Reranker};
use sluice_rerank::{Disk, HostServices, Registry, Sandbox};
use sluice_testkit::{SlowComponents, hit, tenant};

mod common;
use common::roomy;

struct NoHost;

impl HostServices for NoHost {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts.iter().map(|_| vec![0.0]).collect())
    }
    fn count_tokens(&self, _: &str) -> u32 {
        0
    }
}

const REVERSE: &str = include_str!("reverse.wat");

/// The same component keeping the fused order (scores −i instead of i): another version.
fn keep_order() -> String {
    let score = "(f32.convert_i32_u (local.get $i))";
    assert!(REVERSE.contains(score));
    REVERSE.replace(score, &format!("(f32.neg {score})"))
}

fn registry(storage: Arc<dyn ComponentStorage>, refresh: Duration) -> Arc<Registry> {
    let sandbox = Sandbox::new(roomy(), Arc::new(NoHost)).expect("engine");
    Arc::new(Registry::new(sandbox, storage, refresh))
}

/// A folder behind a double that can make its reads slow or failing.
fn slow(dir: &std::path::Path) -> Arc<SlowComponents> {
    Arc::new(SlowComponents::around(Arc::new(Disk::open(dir).unwrap())))
}

/// What `registry` answers for the tenant `name` when the caller waits at most `wait`, and how long it
/// took; `None` when the wait ran out (nothing known for the tenant).
async fn ask(
    registry: &Registry,
    name: &str,
    wait: Duration,
) -> (Option<Option<String>>, Duration) {
    let started = Instant::now();
    let by = tokio::time::Instant::now() + wait;
    let answer = tokio::time::timeout_at(by, registry.active(&tenant(name), by))
        .await
        .ok()
        .map(|r| r.unwrap().map(|c| c.version().to_string()));
    (answer, started.elapsed())
}

/// Asks until `registry` serves `version` for `name` — the background load it started has
/// landed — within 10 s; a readiness signal instead of a guess at how long the load takes.
async fn until_served(registry: &Registry, name: &str, version: &str) {
    let by = Instant::now() + Duration::from_secs(10);
    while Instant::now() < by {
        if ask(registry, name, Duration::from_millis(50)).await.0 == Some(Some(version.into())) {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{name}'s version {version} was never served");
}

/// Uploads and activates `wat` for `tenant` through `registry`; its version.
async fn activate(registry: &Arc<Registry>, name: &str, wat: String) -> String {
    let r = Arc::clone(registry);
    let tenant = tenant(name);
    tokio::task::spawn_blocking(move || {
        let v = r
            .upload(&tenant, wat.as_bytes(), &Cancel::new())
            .unwrap()
            .version;
        r.activate(&tenant, &v).unwrap();
        v
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_version_loads_in_the_background_while_the_known_one_serves() {
    let dir = tempfile::tempdir().unwrap();
    let storage = slow(dir.path());
    // The answer function's registry (checks after 100 ms) and the registry function's,
    // another process sharing the storage.
    let answers = registry(storage.clone(), Duration::from_millis(100));
    let uploads = registry(storage.clone(), Duration::ZERO);
    let first = activate(&uploads, "acme", REVERSE.to_string()).await;
    let (known, _) = ask(&answers, "acme", Duration::from_secs(5)).await;
    assert_eq!(known, Some(Some(first.clone())));

    // A new version is activated elsewhere, and fetching it is slow (2 s).
    let second = activate(&uploads, "acme", keep_order()).await;
    storage.fetch_ms.store(2000, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Due for a check: the request waits 50 ms for it, then the known version serves.
    let (served, took) = ask(&answers, "acme", Duration::from_millis(50)).await;
    assert_eq!(
        served,
        Some(Some(first.clone())),
        "the known version serves"
    );
    assert!(took < Duration::from_millis(500), "waited {took:?}");
    // Meanwhile the fetch goes on in the background; once it is done, the new one serves
    // without any wait on the storage.
    storage.fetch_ms.store(0, Ordering::SeqCst);
    until_served(&answers, "acme", &second).await;
    storage.pointer_ms.store(2000, Ordering::SeqCst);
    let (served, took) = ask(&answers, "acme", Duration::from_millis(50)).await;
    assert_eq!(served, Some(Some(second)));
    assert!(took < Duration::from_millis(500), "waited {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_never_seen_waits_only_as_long_as_the_caller_allows() {
    let dir = tempfile::tempdir().unwrap();
    let storage = slow(dir.path());
    let uploads = registry(storage.clone(), Duration::ZERO);
    let version = activate(&uploads, "acme", REVERSE.to_string()).await;
    let answers = registry(storage.clone(), Duration::from_secs(60));
    storage.pointer_ms.store(1000, Ordering::SeqCst);
    let (nothing, took) = ask(&answers, "acme", Duration::from_millis(50)).await;
    assert_eq!(nothing, None, "no answer within the caller's wait");
    assert!(took < Duration::from_millis(500), "waited {took:?}");
    // A second request joins the same load instead of starting another.
    let (nothing, _) = ask(&answers, "acme", Duration::from_millis(50)).await;
    assert_eq!(nothing, None);
    // The load finishes in the background: later requests get the component at once.
    until_served(&answers, "acme", &version).await;
    storage.pointer_ms.store(5000, Ordering::SeqCst);
    let (served, took) = ask(&answers, "acme", Duration::from_millis(50)).await;
    assert_eq!(served, Some(Some(version)));
    assert!(took < Duration::from_millis(500), "waited {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_check_keeps_the_known_version() {
    let dir = tempfile::tempdir().unwrap();
    let storage = slow(dir.path());
    let answers = registry(storage.clone(), Duration::from_millis(50));
    let version = activate(&answers, "acme", REVERSE.to_string()).await;
    storage.failing.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..3 {
        let (served, _) = ask(&answers, "acme", Duration::from_secs(2)).await;
        assert_eq!(served, Some(Some(version.clone())));
    }
    // A tenant never seen has nothing to fall back on: the failure is the answer.
    let by = tokio::time::Instant::now() + Duration::from_secs(2);
    let e = answers.active(&tenant("globex"), by).await.err().unwrap();
    assert!(e.contains("storage unreachable"), "{e}");
}

/// Runs `name`'s active component on three candidates (past the upload's two-candidate smoke
/// run), on a blocking thread as the pipeline does.
async fn call(registry: &Arc<Registry>, name: &str) {
    let by = tokio::time::Instant::now() + Duration::from_secs(10);
    let active = registry.active(&tenant(name), by).await.unwrap().unwrap();
    tokio::task::spawn_blocking(move || {
        let hits = [hit("a", 0.3), hit("b", 0.2), hit("c", 0.1)];
        active.rerank(&RerankInput {
            query: "q",
            query_vector: &[],
            hits: &hits,
            context: &Default::default(),
        })
    })
    .await
    .unwrap();
}

/// The tenant's versions as `registry` lists them, once `done` holds (failures are stored in
/// the background), within 10 s.
async fn listed_once(
    registry: &Arc<Registry>,
    name: &str,
    done: impl Fn(&[sluice_contract::stages::ComponentVersion]) -> bool,
) -> Vec<sluice_contract::stages::ComponentVersion> {
    let by = Instant::now() + Duration::from_secs(10);
    loop {
        let r = Arc::clone(registry);
        let tenant = tenant(name);
        let listed = tokio::task::spawn_blocking(move || r.list(&tenant).unwrap())
            .await
            .unwrap();
        if done(&listed) || Instant::now() > by {
            return listed;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_version_keeps_its_costs_and_last_failures_across_a_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry(Arc::new(Disk::open(dir.path()).unwrap()), Duration::ZERO);
    // Passes the upload's smoke run, traps on three candidates.
    let trapping = REVERSE.replace(
        "(call $reverse (local.get $n)) ;; misbehaviour",
        "(unreachable)",
    );
    let bad = activate(&registry, "acme", trapping).await;
    for _ in 0..3 {
        call(&registry, "acme").await;
    }
    let good = activate(&registry, "acme", REVERSE.to_string()).await;
    call(&registry, "acme").await;
    // Rolled back to the trapping version: its record is still there, and grows.
    let r = Arc::clone(&registry);
    let b = bad.clone();
    tokio::task::spawn_blocking(move || r.activate(&tenant("acme"), &b).unwrap())
        .await
        .unwrap();
    call(&registry, "acme").await;

    let failures_of = |listed: &[sluice_contract::stages::ComponentVersion], v: &str| {
        listed
            .iter()
            .find(|c| c.version == v)
            .map_or(0, |c| c.failures.len())
    };
    let listed = listed_once(&registry, "acme", |l| failures_of(l, &bad) == 4).await;
    let version = |v: &str| listed.iter().find(|c| c.version == v).unwrap().clone();
    let (bad_v, good_v) = (version(&bad), version(&good));
    assert!(bad_v.active && !good_v.active);
    assert_eq!(bad_v.cost.map(|c| c.calls), Some(4), "{bad_v:?}");
    assert_eq!(
        good_v.cost.map(|c| c.calls),
        Some(1),
        "no longer active, still shown"
    );
    assert!(good_v.failures.is_empty(), "{good_v:?}");
    assert_eq!(bad_v.failures.len(), 4, "{bad_v:?}");
    for f in &bad_v.failures {
        assert_eq!(f.failure.kind.as_str(), "trap");
        assert!(f.failure.message.contains("unreachable"), "{f:?}");
    }
    assert!(
        bad_v.failures.windows(2).all(|w| w[0].at_ms >= w[1].at_ms),
        "newest first"
    );
    // Another process over the same storage — the registry function, which runs no
    // answers — lists the same failures (its costs are its own: none).
    let other = registry_over(dir.path());
    let seen = listed_once(&other, "acme", |l| failures_of(l, &bad) == 4).await;
    let bad_there = seen.iter().find(|c| c.version == bad).unwrap();
    assert_eq!(bad_there.failures, bad_v.failures);
    assert_eq!(bad_there.cost, None);
    // At most the last ten are kept.
    for _ in 0..12 {
        call(&registry, "acme").await;
    }
    let listed = listed_once(&registry, "acme", |l| {
        l.iter()
            .any(|c| c.active && c.cost.is_some_and(|c| c.calls == 16))
            && failures_of(l, &bad) == 10
    })
    .await;
    let bad_v = listed.iter().find(|c| c.active).unwrap();
    assert_eq!(bad_v.failures.len(), 10);
    assert_eq!(bad_v.cost.map(|c| c.calls), Some(16));
}

/// A registry of another process over the folder `dir`.
fn registry_over(dir: &std::path::Path) -> Arc<Registry> {
    registry(Arc::new(Disk::open(dir).unwrap()), Duration::ZERO)
}

/// An upload whose request ended while it compiled stores nothing: no version is listed and
/// no bytes are kept.
#[test]
fn an_abandoned_upload_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn ComponentStorage> = Arc::new(Disk::open(dir.path()).unwrap());
    let registry = registry(Arc::clone(&storage), Duration::from_secs(60));
    let gone = Cancel::new();
    gone.cancel();
    let e = registry
        .upload(&tenant("acme"), REVERSE.as_bytes(), &gone)
        .unwrap_err();
    assert!(
        matches!(e, sluice_contract::stages::ComponentError::Abandoned),
        "{e}"
    );
    assert!(registry.list(&tenant("acme")).unwrap().is_empty());
    assert!(storage.versions(&tenant("acme")).unwrap().is_empty());
    // The same upload by a request that is still there is stored.
    registry
        .upload(&tenant("acme"), REVERSE.as_bytes(), &Cancel::new())
        .unwrap();
    assert_eq!(registry.list(&tenant("acme")).unwrap().len(), 1);
}
