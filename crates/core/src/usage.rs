//! Usage: what each tenant, and each of its API keys, consumed per UTC day — answers, cache
//! hits, tokens, component calls and fuel, ingested documents and chunks — and the monthly
//! token budgets checked against it.
//!
//! The wire records what each answer and ingest used into a process-wide [`Meter`], in
//! memory; [`Meter::flush`] writes what it holds to a [`UsageStore`] as one batch of
//! additions (a JSON file in the data folder for `sluice serve`, [`LocalUsage`]; a DynamoDB
//! table on Lambda, `sluice-aws`), after the answer's last event, never before its first
//! token. A failed write keeps the counts for the next flush: losing the store never fails an
//! answer.
//!
//! **Budgets.** A tenant (`SLUICE_TENANT_TOKEN_BUDGETS`) or a key (`token_budget`) may have a
//! monthly budget of tokens (prompt + completion; a cached answer spends none).
//! [`Meter::reserve`] decides from memory alone: the month's totals as last read from the
//! store (read again in the background once older than `SLUICE_USAGE_REFRESH_MS`), plus what
//! this process has counted since, plus what its answers in flight hold. An admitted answer
//! holds the most it can spend (the model's context window: prompt and completion share it)
//! until its usage is counted, so answers started together cannot pass a budget together:
//! an answer starts only while used + held is under the budget, and a process overshoots by
//! at most one answer, however many arrive at once. Other processes' use since the last read
//! is unseen, so `n` environments can together pass a budget by at most what `n - 1` of them
//! spend in one refresh interval, plus one answer each.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
pub use sluice_contract::usage::*;

use crate::Tenant;
use crate::config::UsageConfig;
use crate::sse::{Done, Timings};

/// What one answer used: its `done` when it ended with one; else (an `error`, or a client
/// that went away) the `streamed` token events it sent and — once the LLM has sent one,
/// so it has read the prompt — `prompt`, the prompt's tokens as `meta` counted them (the
/// upstream's own count never came). `cache_hit` is `meta.cache`; `timings` the last
/// known.
pub fn counts_of_answer(
    done: Option<&Done>,
    cache_hit: bool,
    streamed: u64,
    prompt: u64,
    timings: &Timings,
) -> Counts {
    let mut c = Counts {
        component_calls: u64::from(timings.rerank_ms.is_some()),
        component_fuel: timings.rerank_fuel.unwrap_or(0),
        ..Counts::default()
    };
    match done {
        Some(d) if d.cached || cache_hit => {
            c.answers = 1;
            c.cache_hits = 1;
            c.cached_tokens = d.token_count;
        }
        Some(d) => {
            c.answers = 1;
            c.prompt_tokens = d.prompt_tokens;
            c.completion_tokens = d.token_count;
        }
        None if cache_hit => c.cached_tokens = streamed,
        None => {
            c.completion_tokens = streamed;
            if streamed > 0 {
                c.prompt_tokens = prompt;
            }
        }
    }
    c
}

/// What one ingest stored.
pub fn counts_of_ingest(report: &crate::ingest::IngestReport) -> Counts {
    Counts {
        ingests: 1,
        documents: report.documents as u64,
        chunks: report.chunks as u64,
        ..Counts::default()
    }
}

/// Today in UTC.
pub fn today() -> Date {
    time::OffsetDateTime::now_utc().date()
}

/// The first day of `day`'s month.
pub fn month_start(day: Date) -> Date {
    day.replace_day(1).unwrap_or(day)
}

/// The first day of the month after `day`'s: when a monthly budget starts again.
pub fn next_month(day: Date) -> Date {
    let first = month_start(day);
    let (year, month) = match first.month() {
        time::Month::December => (first.year() + 1, time::Month::January),
        m => (first.year(), m.next()),
    };
    Date::from_calendar_date(year, month, 1).unwrap_or(first)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Usage kept by `sluice serve`: in memory, and in a JSON file (`SLUICE_DATA_DIR/usage.json`)
/// replaced whole on every write (written beside it, then renamed), so a crash leaves the old
/// or the new one, never half.
pub struct LocalUsage {
    path: Option<PathBuf>,
    rows: Mutex<BTreeMap<UsageKey, Counts>>,
    /// One write at a time, so that the file's versions land in the order they were made.
    writing: tokio::sync::Mutex<()>,
}

#[derive(Serialize, Deserialize)]
struct FileRow {
    tenant: Tenant,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    day: String,
    #[serde(flatten)]
    counts: Counts,
}

#[derive(Default, Serialize, Deserialize)]
struct UsageFile {
    rows: Vec<FileRow>,
}

impl LocalUsage {
    /// Usage in memory only (tests).
    pub fn in_memory() -> Self {
        Self {
            path: None,
            rows: Mutex::new(BTreeMap::new()),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    /// Usage in the file at `path`, read now when it exists.
    pub fn open(path: &Path) -> Result<Self, UsageError> {
        let fail = |message: String| UsageError::File {
            path: path.to_path_buf(),
            message,
        };
        let mut rows = BTreeMap::new();
        if path.exists() {
            let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
            let file: UsageFile = serde_json::from_str(&text)
                .map_err(|e| fail(format!("expected {{\"rows\": [...]}} ({e})")))?;
            for row in file.rows {
                let day = parse_day(&row.day)
                    .ok_or_else(|| fail(format!("{:?} is not a day (YYYY-MM-DD)", row.day)))?;
                let key = UsageKey {
                    tenant: row.tenant,
                    key: row.key,
                    day,
                };
                rows.entry(key)
                    .or_insert_with(Counts::default)
                    .add(&row.counts);
            }
        }
        Ok(Self {
            path: Some(path.to_path_buf()),
            rows: Mutex::new(rows),
            writing: tokio::sync::Mutex::new(()),
        })
    }
}

/// Writes `rows` as the usage file at `path`.
fn save(path: &Path, rows: &BTreeMap<UsageKey, Counts>) -> Result<(), UsageError> {
    let fail = |message: String| UsageError::File {
        path: path.to_path_buf(),
        message,
    };
    let file = UsageFile {
        rows: rows
            .iter()
            .map(|(k, counts)| FileRow {
                tenant: k.tenant.clone(),
                key: k.key.clone(),
                day: day_string(k.day),
                counts: *counts,
            })
            .collect(),
    };
    let text = serde_json::to_string(&file).map_err(|e| fail(e.to_string()))?;
    crate::replace_file(path, &(text + "\n")).map_err(|e| fail(e.to_string()))
}

#[async_trait]
impl UsageStore for LocalUsage {
    async fn add(&self, batch: &[Row]) -> Result<(), Unwritten> {
        let _writing = self.writing.lock().await;
        let (before, after) = {
            let mut rows = lock(&self.rows);
            let before = rows.clone();
            for (key, counts) in batch {
                rows.entry(key.clone()).or_default().add(counts);
            }
            (before, rows.clone())
        };
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        // Serialising and writing the whole file takes milliseconds (31 ms at 15,000 rows,
        // `make bench`): on the blocking pool, not on a worker that relays tokens.
        let saved = tokio::task::spawn_blocking(move || save(&path, &after))
            .await
            .unwrap_or_else(|e| {
                Err(UsageError::Unavailable(format!(
                    "the usage write task failed: {e}"
                )))
            });
        // All or nothing: a file that cannot be written leaves memory as it was (no other
        // write ran meanwhile), and the meter keeps the batch.
        saved.map_err(|error| {
            *lock(&self.rows) = before;
            Unwritten {
                rows: batch.to_vec(),
                error,
            }
        })
    }

    async fn read(&self, tenant: &Tenant, from: Date, to: Date) -> Result<Vec<Row>, UsageError> {
        Ok(lock(&self.rows)
            .iter()
            .filter(|(k, _)| &k.tenant == tenant && (from..=to).contains(&k.day))
            .map(|(k, c)| (k.clone(), *c))
            .collect())
    }
}

/// How a [`Meter`] works: from [`UsageConfig`].
#[derive(Debug, Clone)]
pub struct MeterSettings {
    /// Longest a write (or a budget view's read) may take before it is given up.
    pub timeout: Duration,
    /// How old a tenant's budget view may get before it is read again.
    pub refresh: Duration,
    /// Monthly token budgets of tenants.
    pub tenant_budgets: HashMap<Tenant, u64>,
}

/// A write of usage, or a read of a budget view: bounded so a slow store delays the end of
/// a stream by this at most.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(2);
/// Most rows held unwritten (a store down for long, with many tenants and keys): past it new
/// counts are dropped, and logged.
pub const MAX_PENDING: usize = 100_000;

impl MeterSettings {
    /// The settings `config` gives.
    pub fn from_config(config: &UsageConfig) -> Self {
        Self {
            timeout: STORE_TIMEOUT,
            refresh: config.refresh,
            tenant_budgets: config.tenant_budgets.clone(),
        }
    }
}

/// A budget that is spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    /// `"key"` or `"tenant"`: whose budget.
    pub whose: &'static str,
    /// Tokens used this month, as far as this process knows.
    pub used: u64,
    /// The monthly budget.
    pub budget: u64,
    /// The day the budget starts again (the next month's first, UTC).
    pub resets_on: Date,
}

impl OverBudget {
    /// How long until the budget starts again, from now.
    pub fn retry_after(&self) -> Duration {
        let reset = self.resets_on.midnight().assume_utc();
        let left = reset - time::OffsetDateTime::now_utc();
        Duration::try_from(left).unwrap_or(Duration::from_secs(1))
    }
}

/// What a process knows of one tenant's month: tokens per key as last read, plus what this
/// process wrote since.
struct View {
    month: Date,
    by_key: HashMap<Option<String>, u64>,
    read_at: Option<Instant>,
    reading: bool,
}

type Clock = Arc<dyn Fn() -> Date + Send + Sync>;

/// The process's usage counter: see the module docs.
pub struct Meter {
    store: Arc<dyn UsageStore>,
    settings: MeterSettings,
    pending: Mutex<HashMap<UsageKey, Counts>>,
    views: Mutex<HashMap<Tenant, View>>,
    /// Tokens held by this process's answers in flight, per tenant and key ([`Hold`]).
    held: Mutex<HashMap<(Tenant, Option<String>), u64>>,
    /// One write or read at a time: a view read never overlaps a write of this process, so
    /// what a write adds to the views is neither missed nor counted twice.
    io: tokio::sync::Mutex<()>,
    today: Clock,
}

impl Meter {
    /// A meter writing to `store`.
    pub fn new(store: Arc<dyn UsageStore>, settings: MeterSettings) -> Self {
        Self {
            store,
            settings,
            pending: Mutex::new(HashMap::new()),
            views: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            io: tokio::sync::Mutex::new(()),
            today: Arc::new(today),
        }
    }

    /// The same meter with another calendar (tests: a month that ends).
    pub fn with_clock(mut self, today: impl Fn() -> Date + Send + Sync + 'static) -> Self {
        self.today = Arc::new(today);
        self
    }

    /// The tenant's monthly token budget (`SLUICE_TENANT_TOKEN_BUDGETS`), if it has one.
    pub fn tenant_budget(&self, tenant: &Tenant) -> Option<u64> {
        self.settings.tenant_budgets.get(tenant).copied()
    }

    /// Longest a write or a read of the store may take before it is given up.
    pub fn timeout(&self) -> Duration {
        self.settings.timeout
    }

    /// The store written to.
    pub fn store(&self) -> &Arc<dyn UsageStore> {
        &self.store
    }

    /// Today, by this meter's calendar.
    pub fn today(&self) -> Date {
        (self.today)()
    }

    /// Counts `counts` for `tenant` and `key` today, in memory (written by the next flush).
    pub fn record(&self, tenant: &Tenant, key: Option<&str>, counts: Counts) {
        if counts.is_zero() {
            return;
        }
        let row = UsageKey {
            tenant: tenant.clone(),
            key: key.map(str::to_string),
            day: self.today(),
        };
        let mut pending = lock(&self.pending);
        if pending.len() >= MAX_PENDING && !pending.contains_key(&row) {
            tracing::error!(tenant = %row.tenant, ?counts, "usage dropped: too many rows unwritten (is the usage store down?)");
            return;
        }
        pending.entry(row).or_default().add(&counts);
    }

    /// The last [`Meter::flush`] of a process that is exiting: what it cannot write is lost,
    /// and the log says so.
    pub async fn flush_before_exit(&self) {
        if let Err(e) = self.flush().await {
            tracing::error!(error = %e, "usage recorded since the last write is lost");
        }
    }

    /// Writes what was recorded since the last flush, as one batch (flushes that arrive
    /// while one runs wait and write together). Rows not written stay for the next flush;
    /// the error says why. A write cut by the timeout may still land, and then its rows are
    /// written again by the next flush: a store that is slow can count twice, never lose.
    pub async fn flush(&self) -> Result<(), UsageError> {
        let _io = self.io.lock().await;
        let batch: Vec<Row> = lock(&self.pending).drain().collect();
        if batch.is_empty() {
            return Ok(());
        }
        let unwritten =
            match tokio::time::timeout(self.settings.timeout, self.store.add(&batch)).await {
                Ok(Ok(())) => None,
                Ok(Err(u)) => Some(u),
                Err(_) => Some(Unwritten {
                    rows: batch.clone(),
                    error: UsageError::Unavailable(format!(
                        "no answer within {:?}",
                        self.settings.timeout
                    )),
                }),
            };
        let failed: Vec<&UsageKey> = unwritten
            .as_ref()
            .map(|u| u.rows.iter().map(|(k, _)| k).collect())
            .unwrap_or_default();
        {
            let mut views = lock(&self.views);
            for (key, counts) in batch.iter().filter(|(k, _)| !failed.contains(&k)) {
                if let Some(view) = views.get_mut(&key.tenant)
                    && view.month == month_start(key.day)
                {
                    *view.by_key.entry(key.key.clone()).or_default() += counts.tokens();
                }
            }
        }
        match unwritten {
            None => Ok(()),
            Some(Unwritten { rows, error }) => {
                tracing::warn!(error = %error, rows = rows.len(), "usage not written; kept for the next flush");
                let mut pending = lock(&self.pending);
                for (key, counts) in rows {
                    pending.entry(key).or_default().add(&counts);
                }
                Err(error)
            }
        }
    }

    /// Tokens `tenant` (or, with `key`, that key of it) used this month as far as this process
    /// knows: the view last read, plus what is recorded and not yet written.
    pub fn used(&self, tenant: &Tenant, key: Option<&str>) -> u64 {
        let month = month_start(self.today());
        let matches = |k: &Option<String>| key.is_none() || k.as_deref() == key;
        let seen: u64 = lock(&self.views)
            .get(tenant)
            .filter(|v| v.month == month)
            .map(|v| {
                v.by_key
                    .iter()
                    .filter(|(k, _)| matches(k))
                    .map(|(_, n)| n)
                    .sum()
            })
            .unwrap_or(0);
        let unwritten: u64 = lock(&self.pending)
            .iter()
            .filter(|(k, _)| &k.tenant == tenant && month_start(k.day) == month && matches(&k.key))
            .map(|(_, c)| c.tokens())
            .sum();
        seen + unwritten
    }

    /// Admits an answer for `tenant` and its `key` (whose own budget is `key_budget`) that may
    /// spend up to `most` tokens, or says whose budget is spent: decided from memory, with no
    /// call to the store (a view that is due is read again in the background). Admitted while
    /// the tokens used and held by answers in flight are under each budget; the answer then
    /// holds `most` until the returned [`Hold`] is dropped — after its usage is recorded.
    /// `None` when neither has a budget (nothing to hold). A tenant this process has not read
    /// yet counts only what the process itself recorded until the first read lands.
    pub fn reserve(
        self: &Arc<Self>,
        tenant: &Tenant,
        key: Option<&str>,
        key_budget: Option<u64>,
        most: u64,
    ) -> Result<Option<Hold>, OverBudget> {
        let tenant_budget = self.settings.tenant_budgets.get(tenant).copied();
        if tenant_budget.is_none() && key_budget.is_none() {
            return Ok(None);
        }
        self.refresh_if_due(tenant);
        let resets_on = next_month(self.today());
        // Checked and held under one lock: two answers admitted at once both see the other.
        let mut held = lock(&self.held);
        let budgets = [("key", key_budget, key), ("tenant", tenant_budget, None)];
        for (whose, budget, key) in budgets {
            let Some(budget) = budget else { continue };
            let in_flight: u64 = (held.iter())
                .filter(|((t, k), _)| t == tenant && (key.is_none() || k.as_deref() == key))
                .map(|(_, n)| n)
                .sum();
            let used = self.used(tenant, key).saturating_add(in_flight);
            if used >= budget {
                return Err(OverBudget {
                    whose,
                    used,
                    budget,
                    resets_on,
                });
            }
        }
        *held
            .entry((tenant.clone(), key.map(str::to_string)))
            .or_default() += most;
        Ok(Some(Hold {
            meter: Arc::clone(self),
            tenant: tenant.clone(),
            key: key.map(str::to_string),
            tokens: most,
        }))
    }

    /// Starts reading `tenant`'s month again in the background, when its view is missing,
    /// of another month or older than the refresh interval (and no read is under way).
    fn refresh_if_due(self: &Arc<Self>, tenant: &Tenant) {
        let month = month_start(self.today());
        {
            let mut views = lock(&self.views);
            if views.len() >= crate::REMEMBERED_TENANTS && !views.contains_key(tenant) {
                views.retain(|_, v| v.reading);
            }
            let view = views.entry(tenant.clone()).or_insert_with(|| View {
                month,
                by_key: HashMap::new(),
                read_at: None,
                reading: false,
            });
            let fresh = view.month == month
                && view
                    .read_at
                    .is_some_and(|at| at.elapsed() < self.settings.refresh);
            if fresh || view.reading {
                return;
            }
            view.reading = true;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (meter, tenant) = (Arc::clone(self), tenant.clone());
        runtime.spawn(async move { meter.refresh(&tenant, month).await });
    }

    async fn refresh(&self, tenant: &Tenant, month: Date) {
        let _io = self.io.lock().await;
        let read = tokio::time::timeout(
            self.settings.timeout,
            self.store.read(tenant, month, self.today().max(month)),
        )
        .await;
        let mut views = lock(&self.views);
        let Some(view) = views.get_mut(tenant) else {
            return;
        };
        view.reading = false;
        // A failed read is tried again after the interval, not at once: a store that is down
        // is not asked on every request.
        view.read_at = Some(Instant::now());
        match read {
            Ok(Ok(rows)) => {
                view.month = month;
                view.by_key.clear();
                for (key, counts) in rows {
                    *view.by_key.entry(key.key).or_default() += counts.tokens();
                }
            }
            Ok(Err(e)) => tracing::warn!(%tenant, error = %e, "reading usage for budgets failed"),
            Err(_) => tracing::warn!(%tenant, "reading usage for budgets timed out"),
        }
    }
}

/// Tokens an admitted answer holds against its budgets ([`Meter::reserve`]) until it is
/// dropped: drop it once the answer's usage is recorded, so that the tokens are counted as
/// held or as used, never as neither.
pub struct Hold {
    meter: Arc<Meter>,
    tenant: Tenant,
    key: Option<String>,
    tokens: u64,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("tenant", &self.tenant)
            .field("key", &self.key)
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut held = lock(&self.meter.held);
        let slot = (self.tenant.clone(), self.key.take());
        if let Some(n) = held.get_mut(&slot) {
            *n = n.saturating_sub(self.tokens);
            if *n == 0 {
                held.remove(&slot);
            }
        }
    }
}

/// Sums rows into one row per day (keys merged), in day order.
pub fn per_day(rows: &[Row]) -> BTreeMap<Date, Counts> {
    let mut days = BTreeMap::new();
    for (key, counts) in rows {
        days.entry(key.day)
            .or_insert_with(Counts::default)
            .add(counts);
    }
    days
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
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
            move || {
                day(2026, Month::November, 29) + time::Duration::days(offset.load(Ordering::SeqCst))
            }
        };
        let store = Arc::new(LocalUsage::in_memory());
        let meter =
            Arc::new(Meter::new(store.clone(), settings(&[("acme", 100)])).with_clock(clock));
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
}
