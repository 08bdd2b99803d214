use super::*;
use async_trait::async_trait;
use sluice_contract::Tenant;
use sluice_local::LocalUsage;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;
use time::Month;

fn tenant(name: &str) -> Tenant {
    Tenant::new(name).unwrap()
}

fn day(y: i32, m: Month, d: u8) -> Date {
    Date::from_calendar_date(y, m, d).unwrap()
}

fn tokens(n: u64) -> Counts {
    Counts {
        answers: 1,
        prompt_tokens: n / 2,
        completion_tokens: n - n / 2,
        ..Counts::default()
    }
}

fn settings(budgets: &[(&str, u64)]) -> MeterSettings {
    MeterSettings {
        timeout: Duration::from_millis(200),
        refresh: Duration::ZERO,
        tenant_budgets: budgets.iter().map(|(t, b)| (tenant(t), *b)).collect(),
    }
}

/// A store that fails (or hangs) while `broken` is set.
struct Flaky {
    inner: LocalUsage,
    broken: AtomicBool,
    hang: bool,
}

#[async_trait]
impl UsageStore for Flaky {
    async fn add(&self, rows: &[Row]) -> Result<(), Unwritten> {
        if self.broken.load(Ordering::SeqCst) {
            if self.hang {
                std::future::pending::<()>().await;
            }
            return Err(Unwritten {
                rows: rows.to_vec(),
                error: UsageError::Unavailable("injected".into()),
            });
        }
        self.inner.add(rows).await
    }
    async fn read(&self, t: &Tenant, from: Date, to: Date) -> Result<Vec<Row>, UsageError> {
        self.inner.read(t, from, to).await
    }
}

#[test]
fn days_parse_and_print_and_months_roll_over() {
    let d = parse_day("2026-12-31").unwrap();
    assert_eq!(day_string(d), "2026-12-31");
    assert_eq!(month_start(d), day(2026, Month::December, 1));
    assert_eq!(next_month(d), day(2027, Month::January, 1));
    assert_eq!(
        next_month(day(2026, Month::February, 10)),
        day(2026, Month::March, 1)
    );
    for bad in [
        "2026-13-01",
        "2026-02-30",
        "26-01-01",
        "2026-1-01",
        "yesterday",
        "2026-01-01x",
    ] {
        assert_eq!(parse_day(bad), None, "{bad}");
    }
}

#[test]
fn counts_add_by_name_and_an_answer_counts_what_done_reported() {
    let mut c = Counts::default();
    assert!(c.set("chunks", 3) && !c.set("nothing", 1));
    c.add(&Counts {
        chunks: 2,
        answers: 1,
        ..Counts::default()
    });
    assert_eq!((c.chunks, c.answers), (5, 1));
    assert_eq!(Counts::FIELDS.len(), c.fields().len());
    let timings = Timings {
        rerank_ms: Some(1.0),
        rerank_fuel: Some(1234),
        ..Timings::default()
    };
    let done = Done {
        request_id: "r".into(),
        session_id: "s".into(),
        replica_id: "p".into(),
        model_id: "m".into(),
        k: 5,
        token_count: 40,
        token_count_source: "usage".into(),
        tokens_per_sec: 1.0,
        prompt_tokens: 300,
        finish_reason: "stop".into(),
        cached: false,
        timings: timings.clone(),
        grounding: None,
        degraded: Vec::new(),
    };
    let fresh = counts_of_answer(Some(&done), false, 39, 280, &timings);
    assert_eq!(
        (
            fresh.answers,
            fresh.prompt_tokens,
            fresh.completion_tokens,
            fresh.tokens()
        ),
        (1, 300, 40, 340)
    );
    assert_eq!((fresh.component_calls, fresh.component_fuel), (1, 1234));
    let cached = counts_of_answer(
        Some(&Done {
            cached: true,
            ..done
        }),
        true,
        40,
        0,
        &Timings::default(),
    );
    assert_eq!(
        (cached.cache_hits, cached.cached_tokens, cached.tokens()),
        (1, 40, 0)
    );
    // Cut short after its first token: the prompt the LLM read is paid for.
    let cut = counts_of_answer(None, false, 7, 280, &Timings::default());
    assert_eq!(
        (cut.answers, cut.prompt_tokens, cut.completion_tokens),
        (0, 280, 7)
    );
    // Before it: nothing was generated, nothing is charged.
    let early = counts_of_answer(None, false, 0, 280, &Timings::default());
    assert_eq!(early.tokens(), 0);
}

#[tokio::test]
async fn answers_in_flight_hold_their_most_until_they_are_counted() {
    let meter = Arc::new(Meter::new(
        Arc::new(LocalUsage::in_memory()),
        settings(&[("acme", 100)]),
    ));
    let acme = tenant("acme");
    // Each may spend 40: three fit under 100 held (0, 40, 80), the fourth does not.
    let a = meter.reserve(&acme, Some("k1"), None, 40).unwrap();
    let b = meter.reserve(&acme, Some("k2"), None, 40).unwrap();
    let c = meter.reserve(&acme, Some("k1"), None, 40).unwrap();
    let over = meter.reserve(&acme, Some("k2"), None, 40).unwrap_err();
    assert_eq!((over.whose, over.used, over.budget), ("tenant", 120, 100));
    // A key's own budget counts its own answers' holds: k2 holds nothing once b is gone.
    drop(b);
    let k2 = meter.reserve(&acme, Some("k2"), Some(30), 40).unwrap();
    let over = meter.reserve(&acme, Some("k2"), Some(30), 1).unwrap_err();
    assert_eq!((over.whose, over.used), ("key", 40));
    // One that ends is counted as used, no longer held: 5 used + 80 held.
    meter.record(&acme, Some("k1"), tokens(5));
    drop(a);
    drop(k2);
    assert!(meter.reserve(&acme, Some("k2"), None, 40).is_ok());
    drop(c);
    assert_eq!(meter.used(&acme, None), 5);
    assert!(lock(&meter.held).is_empty(), "every hold released");
    // Without a budget nothing is held.
    assert!(
        meter
            .reserve(&tenant("globex"), None, None, 40)
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_flush_writes_one_batch_and_the_file_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("usage.json");
    let store = Arc::new(LocalUsage::open(&path).unwrap());
    let meter = Meter::new(store, settings(&[]));
    let (acme, globex) = (tenant("acme"), tenant("globex"));
    meter.record(&acme, Some("k1"), tokens(10));
    meter.record(&acme, Some("k1"), tokens(5));
    meter.record(&acme, None, tokens(1));
    meter.record(&globex, Some("k2"), tokens(100));
    meter.flush().await.unwrap();
    meter.flush().await.unwrap();
    let reopened = LocalUsage::open(&path).unwrap();
    let today = today();
    let rows = reopened.read(&acme, today, today).await.unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let k1 = rows
        .iter()
        .find(|(k, _)| k.key.as_deref() == Some("k1"))
        .unwrap();
    assert_eq!((k1.1.answers, k1.1.tokens()), (2, 15));
    let days = per_day(&rows);
    assert_eq!(days[&today].tokens(), 16);
    // Another tenant's rows are not acme's.
    let rows = reopened.read(&globex, today, today).await.unwrap();
    assert_eq!(rows.iter().map(|(_, c)| c.tokens()).sum::<u64>(), 100);
}

#[tokio::test]
async fn counts_a_store_did_not_take_are_kept_for_the_next_flush() {
    for hang in [false, true] {
        let store = Arc::new(Flaky {
            inner: LocalUsage::in_memory(),
            broken: AtomicBool::new(true),
            hang,
        });
        let meter = Meter::new(store.clone(), settings(&[]));
        let acme = tenant("acme");
        meter.record(&acme, Some("k"), tokens(10));
        assert!(meter.flush().await.is_err(), "hang={hang}");
        meter.record(&acme, Some("k"), tokens(4));
        store.broken.store(false, Ordering::SeqCst);
        meter.flush().await.unwrap();
        let rows = store.inner.read(&acme, today(), today()).await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].1.answers, rows[0].1.tokens()),
            (2, 14),
            "hang={hang}"
        );
    }
}

#[tokio::test]
async fn budgets_trip_for_a_key_and_a_tenant_and_reset_with_the_month() {
    // The calendar is a number of days after 2026-11-29.
    let offset = Arc::new(AtomicI64::new(0));
    let clock = {
        let offset = offset.clone();
        move || day(2026, Month::November, 29) + time::Duration::days(offset.load(Ordering::SeqCst))
    };
    let store = Arc::new(LocalUsage::in_memory());
    let meter = Arc::new(Meter::new(store.clone(), settings(&[("acme", 100)])).with_clock(clock));
    let acme = tenant("acme");
    assert_eq!(
        meter.reserve(&acme, Some("k1"), Some(30), 0).map(drop),
        Ok(())
    );
    meter.record(&acme, Some("k1"), tokens(30));
    let over = meter
        .reserve(&acme, Some("k1"), Some(30), 0)
        .map(drop)
        .unwrap_err();
    assert_eq!((over.whose, over.used, over.budget), ("key", 30, 30));
    assert_eq!(over.resets_on, day(2026, Month::December, 1));
    // Another key of the tenant still has room, until the tenant's budget is spent.
    assert_eq!(meter.reserve(&acme, Some("k2"), None, 0).map(drop), Ok(()));
    meter.record(&acme, Some("k2"), tokens(70));
    meter.flush().await.unwrap();
    let over = meter
        .reserve(&acme, Some("k2"), None, 0)
        .map(drop)
        .unwrap_err();
    assert_eq!((over.whose, over.used), ("tenant", 100));
    // Another tenant is not touched.
    assert_eq!(
        meter.reserve(&tenant("globex"), None, None, 0).map(drop),
        Ok(())
    );
    // A month later, both budgets start again; the old month's use is still stored.
    offset.store(2, Ordering::SeqCst);
    assert_eq!(
        meter.reserve(&acme, Some("k1"), Some(30), 0).map(drop),
        Ok(())
    );
    assert_eq!(meter.reserve(&acme, Some("k2"), None, 0).map(drop), Ok(()));
    let nov = store
        .read(
            &acme,
            day(2026, Month::November, 1),
            day(2026, Month::November, 30),
        )
        .await
        .unwrap();
    assert_eq!(nov.iter().map(|(_, c)| c.tokens()).sum::<u64>(), 100);
}

#[tokio::test]
async fn what_other_processes_wrote_counts_once_the_view_is_read() {
    let store: Arc<dyn UsageStore> = Arc::new(LocalUsage::in_memory());
    let (here, there) = (
        Arc::new(Meter::new(store.clone(), settings(&[("acme", 50)]))),
        Meter::new(store.clone(), settings(&[])),
    );
    let acme = tenant("acme");
    there.record(&acme, None, tokens(60));
    there.flush().await.unwrap();
    // The first check has no view yet: it is admitted, and the read starts.
    assert_eq!(here.reserve(&acme, None, None, 0).map(drop), Ok(()));
    for _ in 0..100 {
        if here.used(&acme, None) == 60 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        here.reserve(&acme, None, None, 0)
            .map(drop)
            .unwrap_err()
            .used,
        60
    );
    // Writing its own use keeps the view exact: read again, nothing counts twice.
    here.record(&acme, None, tokens(5));
    here.flush().await.unwrap();
    assert_eq!(here.used(&acme, None), 65);
    here.refresh(&acme, month_start(today())).await;
    assert_eq!(here.used(&acme, None), 65);
}
