//! [`Meter`]: what this process counted, flushed to the store in batches, and the budgets
//! checked against it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_contract::usage::*;

use crate::config::UsageConfig;
use sluice_contract::Tenant;

use super::{lock, month_start, next_month, today};

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
    pub(super) held: Mutex<HashMap<(Tenant, Option<String>), u64>>,
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
            if views.len() >= sluice_contract::REMEMBERED_TENANTS && !views.contains_key(tenant) {
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

    pub(super) async fn refresh(&self, tenant: &Tenant, month: Date) {
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
