//! The registry as the answer path uses it: a tenant's component is answered from memory,
//! checked again in the background once the refresh interval has passed (a changed version is
//! fetched and compiled off the request path while the one known so far serves), and only a
//! tenant never seen waits for the storage — for as long as the caller allows, with the load
//! going on in the background. Component storage here is a folder behind a double that can
//! make its reads slow or failing.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;
use sluice_contract::cancel::Cancel;
use sluice_contract::components::{
    ComponentCall, ComponentError, ComponentStorage, Components, LogLevel,
};
use sluice_contract::stages::FailureKind;
use sluice_contract::stages::{RerankInput, Reranker};
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

/// What `registry` answers for the tenant `name` when the caller waits at most `wait`; `None`
/// when the wait ran out (nothing known for the tenant). The caller's timeout is the bound: an
/// answer (`Some`) under a 50-ms wait while the storage takes seconds is an answer that did
/// not wait for the storage, however busy the machine.
async fn ask(registry: &Registry, name: &str, wait: Duration) -> Option<Option<String>> {
    let by = tokio::time::Instant::now() + wait;
    tokio::time::timeout_at(by, registry.active(&tenant(name), by))
        .await
        .ok()
        .map(|r| r.unwrap().map(|c| c.version().to_string()))
}

/// Asks until `registry` serves `version` for `name` — the background load it started has
/// landed — within 10 s; a readiness signal instead of a guess at how long the load takes.
async fn until_served(registry: &Registry, name: &str, version: &str) {
    let by = Instant::now() + Duration::from_secs(10);
    while Instant::now() < by {
        if ask(registry, name, Duration::from_millis(50)).await == Some(Some(version.into())) {
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
            .upload(&tenant, wat.as_bytes(), None, &Cancel::new())
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
    // The answer function's registry and the registry function's, another process sharing
    // the storage. The answers' refresh interval is zero: every request is due for a check
    // (no sleep to wait one out), and none may wait for it past the caller's wait.
    let answers = registry(storage.clone(), Duration::ZERO);
    let uploads = registry(storage.clone(), Duration::ZERO);
    let first = activate(&uploads, "acme", REVERSE.to_string()).await;
    let known = ask(&answers, "acme", Duration::from_secs(5)).await;
    assert_eq!(known, Some(Some(first.clone())));

    // A new version is activated elsewhere, and fetching it is slow (2 s).
    let second = activate(&uploads, "acme", keep_order()).await;
    storage.fetch_ms.store(2000, Ordering::SeqCst);
    // The check finds it: the request waits 50 ms for its fetch, then the known version serves.
    let served = ask(&answers, "acme", Duration::from_millis(50)).await;
    assert_eq!(
        served,
        Some(Some(first.clone())),
        "the known version serves"
    );
    // Meanwhile the fetch goes on in the background; once it is done, the new one serves,
    // a slow check (2 s) or not.
    storage.fetch_ms.store(0, Ordering::SeqCst);
    until_served(&answers, "acme", &second).await;
    storage.pointer_ms.store(2000, Ordering::SeqCst);
    let served = ask(&answers, "acme", Duration::from_millis(50)).await;
    assert_eq!(served, Some(Some(second)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_never_seen_waits_only_as_long_as_the_caller_allows() {
    let dir = tempfile::tempdir().unwrap();
    let storage = slow(dir.path());
    let uploads = registry(storage.clone(), Duration::ZERO);
    let version = activate(&uploads, "acme", REVERSE.to_string()).await;
    let answers = registry(storage.clone(), Duration::from_secs(60));
    storage.pointer_ms.store(1000, Ordering::SeqCst);
    let nothing = ask(&answers, "acme", Duration::from_millis(50)).await;
    assert_eq!(nothing, None, "no answer within the caller's wait");
    // A second request joins the same load instead of starting another.
    let nothing = ask(&answers, "acme", Duration::from_millis(50)).await;
    assert_eq!(nothing, None);
    // The load finishes in the background: later requests get the component at once.
    until_served(&answers, "acme", &version).await;
    storage.pointer_ms.store(5000, Ordering::SeqCst);
    let served = ask(&answers, "acme", Duration::from_millis(50)).await;
    assert_eq!(served, Some(Some(version)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_check_keeps_the_known_version() {
    let dir = tempfile::tempdir().unwrap();
    let storage = slow(dir.path());
    // Every request due for a check (a refresh interval of zero), and every check fails.
    let answers = registry(storage.clone(), Duration::ZERO);
    let version = activate(&answers, "acme", REVERSE.to_string()).await;
    storage.failing.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        let served = ask(&answers, "acme", Duration::from_secs(2)).await;
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
            request_id: "",
        })
    })
    .await
    .unwrap();
}

/// What `read` answers, once `done` holds (the registry stores failures and calls in the
/// background), within 10 s.
async fn read_once<T: Send + 'static>(
    read: impl Fn() -> T + Clone + Send + 'static,
    done: impl Fn(&T) -> bool,
) -> T {
    let by = Instant::now() + Duration::from_secs(10);
    loop {
        let got = tokio::task::spawn_blocking(read.clone()).await.unwrap();
        if done(&got) || Instant::now() > by {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The tenant's versions as `registry` lists them, once `done` holds.
async fn listed_once(
    registry: &Arc<Registry>,
    name: &str,
    done: impl Fn(&[sluice_contract::components::ComponentVersion]) -> bool,
) -> Vec<sluice_contract::components::ComponentVersion> {
    let (r, tenant) = (Arc::clone(registry), tenant(name));
    read_once(move || r.list(&tenant).unwrap(), |l| done(l)).await
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

    let failures_of = |listed: &[sluice_contract::components::ComponentVersion], v: &str| {
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
        .upload(&tenant("acme"), REVERSE.as_bytes(), None, &gone)
        .unwrap_err();
    assert!(
        matches!(e, sluice_contract::components::ComponentError::Abandoned),
        "{e}"
    );
    assert!(registry.list(&tenant("acme")).unwrap().is_empty());
    assert!(storage.versions(&tenant("acme")).unwrap().is_empty());
    // The same upload by a request that is still there is stored.
    registry
        .upload(&tenant("acme"), REVERSE.as_bytes(), None, &Cancel::new())
        .unwrap();
    assert_eq!(registry.list(&tenant("acme")).unwrap().len(), 1);
}

/// `host_calls.wat` logging one line of `text` at info on every call past the upload's smoke
/// run, then doing `then`.
fn logging(text: &str, then: &str) -> String {
    let data = (text.bytes())
        .enumerate()
        .map(|(i, b)| format!("(i32.store8 (i32.const {}) (i32.const {b}))", 65536 + i))
        .collect::<String>();
    let log = format!(
        "(call $log (i32.const 1) (i32.const 65536) (i32.const {}))",
        text.len()
    );
    include_str!("host_calls.wat").replace("(nop) ;; flood", &format!("{data} {log} {then}"))
}

/// The version's log as `registry` answers it, once `done` holds.
async fn logs_once(
    registry: &Arc<Registry>,
    version: &str,
    done: impl Fn(&[ComponentCall]) -> bool,
) -> Vec<ComponentCall> {
    let (r, v) = (Arc::clone(registry), version.to_string());
    read_once(move || r.logs(&tenant("acme"), &v).unwrap(), |l| done(l)).await
}

/// What a version's calls logged is kept with the call: its request, its lines, and for a
/// failed one the failure and the input that made it fail (to run it again) — newest first,
/// stored for the other processes over the same storage, at most the last fifty.
#[tokio::test(flavor = "multi_thread")]
async fn a_versions_log_keeps_each_calls_lines_and_a_failed_calls_input() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry_over(dir.path());
    let quiet = activate(&registry, "acme", REVERSE.to_string()).await;
    call(&registry, "acme").await;
    let chatty = activate(&registry, "acme", logging("ranking three", "")).await;
    let failing = activate(&registry, "acme", logging("about to fail", "(unreachable)")).await;
    let by = tokio::time::Instant::now() + Duration::from_secs(10);
    let active = registry.active(&tenant("acme"), by).await.unwrap().unwrap();
    let context =
        sluice_contract::stages::RerankContext::parse(&json!({"plan": "premium"})).unwrap();
    let failed = tokio::task::spawn_blocking(move || {
        let hits = [hit("a", 0.3), hit("b", 0.2), hit("c", 0.1)];
        active.rerank(&RerankInput {
            query: "what is the SLA?",
            query_vector: &[],
            hits: &hits,
            context: &context,
            request_id: "req-7",
        })
    })
    .await
    .unwrap();
    assert!(failed.order.is_err(), "{failed:?}");

    let r = Arc::clone(&registry);
    let c = chatty.clone();
    tokio::task::spawn_blocking(move || r.activate(&tenant("acme"), &c).unwrap())
        .await
        .unwrap();
    call(&registry, "acme").await;
    call(&registry, "acme").await;

    let lines = logs_once(&registry, &chatty, |l| l.len() == 2).await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    // A call that neither logged nor failed is not kept: had it been queued, it would be
    // stored by now, the writer keeping the order of the calls it is given.
    assert!(logs_once(&registry, &quiet, |_| true).await.is_empty());
    assert!(
        lines.windows(2).all(|w| w[0].at_ms >= w[1].at_ms),
        "newest first"
    );
    for c in &lines {
        assert_eq!(c.lines.len(), 1, "{c:?}");
        assert_eq!(
            (c.lines[0].level, c.lines[0].message.as_str()),
            (LogLevel::Info, "ranking three")
        );
        assert_eq!((&c.failure, &c.input), (&None, &None));
    }
    // Another process over the same storage reads the failed call as it was.
    let other = registry_over(dir.path());
    let seen = logs_once(&other, &failing, |l| l.len() == 1).await;
    let kept = seen.first().expect("the failed call is kept");
    assert_eq!(kept.request_id.as_deref(), Some("req-7"));
    assert_eq!(kept.lines[0].message, "about to fail");
    assert_eq!(
        kept.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::Trap)
    );
    let input = kept.input.as_ref().expect("a failed call keeps its input");
    assert_eq!(input.query, "what is the SLA?");
    assert_eq!(
        input.context.get("plan").map(String::as_str),
        Some("premium")
    );
    let ids: Vec<&str> = input.candidates.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(input.candidates[0].text, hit("a", 0.3).text);
    // The listing's failures say the request too.
    let listed = listed_once(&other, "acme", |l| l.iter().any(|v| !v.failures.is_empty())).await;
    let f = &listed
        .iter()
        .find(|v| v.version == failing)
        .unwrap()
        .failures;
    assert_eq!(f[0].request_id.as_deref(), Some("req-7"), "{f:?}");

    // The last fifty calls, no more.
    for _ in 0..ComponentCall::MAX_CALLS + 5 {
        call(&registry, "acme").await;
    }
    let lines = logs_once(&registry, &chatty, |l| l.len() == ComponentCall::MAX_CALLS).await;
    assert_eq!(lines.len(), ComponentCall::MAX_CALLS);
    let unknown = registry.logs(&tenant("acme"), &"0".repeat(64)).unwrap_err();
    assert!(matches!(unknown, ComponentError::NotFound(_)), "{unknown}");
}

/// A version is uploaded with a label and its time (the same bytes again keep the first),
/// and an inactive one can be deleted — its record, bytes, artefact and log — while the
/// active one cannot.
#[test]
fn versions_carry_a_label_and_time_and_an_inactive_one_can_be_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry_over(dir.path());
    let acme = tenant("acme");
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let first =
        (registry.upload(&acme, REVERSE.as_bytes(), Some("reverse"), &Cancel::new())).unwrap();
    assert_eq!(first.label.as_deref(), Some("reverse"));
    assert!(first.uploaded_ms.is_some_and(|t| t >= before), "{first:?}");
    let again = registry
        .upload(&acme, REVERSE.as_bytes(), Some("other"), &Cancel::new())
        .unwrap();
    assert_eq!(again, first, "the first upload's record stands");
    let keep = keep_order();
    let second = registry
        .upload(&acme, keep.as_bytes(), None, &Cancel::new())
        .unwrap();
    registry.activate(&acme, &second.version).unwrap();
    let listed = registry.list(&acme).unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|v| (v.label.as_deref(), v.active))
            .collect::<Vec<_>>(),
        [(Some("reverse"), false), (None, true)]
    );

    let refused = registry.delete(&acme, &second.version).unwrap_err();
    assert!(matches!(refused, ComponentError::Active(_)), "{refused}");
    registry.delete(&acme, &first.version).unwrap();
    let listed = registry.list(&acme).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].version, second.version);
    let left: Vec<String> = std::fs::read_dir(dir.path().join("acme"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&first.version))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    for gone in [
        registry.activate(&acme, &first.version),
        Err(registry.delete(&acme, &first.version).unwrap_err()),
    ] {
        assert!(matches!(gone, Err(ComponentError::NotFound(_))), "{gone:?}");
    }
}
