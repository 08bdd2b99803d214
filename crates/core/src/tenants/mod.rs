//! Each tenant's own settings as the routes read them: from a [`SettingsStore`] (the file
//! beside `sluice serve`'s keys, `sluice-local`'s `FileSettings`; DynamoDB on Lambda), kept in memory for
//! `SLUICE_SETTINGS_FRESH_MS`. A change made through any process is in force in every process
//! within that time: an entry older than it is read again before it is used (bounded by the
//! caller's deadline; a read that fails or is late keeps the last known settings, and is tried
//! again only after another `SLUICE_SETTINGS_FRESH_MS`, so a broken store costs one bounded
//! read per tenant per period, never one per request). A `PUT` is in force at once in the
//! process that took it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_contract::tenant_settings::{
    SettingsError, SettingsStore, StoredSettings, TenantSettings,
};
use sluice_contract::{Tenant, make_room};
use tokio::time::Instant;
use tracing::warn;

/// Tenants' settings, read through a short in-process cache.
pub struct Tenants {
    store: Arc<dyn SettingsStore>,
    fresh_for: Duration,
    known: Mutex<HashMap<Tenant, Known>>,
}

#[derive(Clone)]
struct Known {
    read_at: Instant,
    stored: Option<Arc<StoredSettings>>,
    /// The read failed and nothing was known before it: `stored` is a stand-in, not what
    /// the tenant set.
    unread: bool,
}

impl Tenants {
    /// Settings from `store`, each read kept for `fresh_for`.
    pub fn new(store: Arc<dyn SettingsStore>, fresh_for: Duration) -> Self {
        Self {
            store,
            fresh_for,
            known: Mutex::new(HashMap::new()),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<Tenant, Known>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The tenant's settings (`None`: it has set none, or they could not be read and none
    /// were known), at most `fresh_for` old when the store answers by `by`.
    pub async fn get(&self, tenant: &Tenant, by: Instant) -> Option<Arc<StoredSettings>> {
        self.known_by(tenant, by).await.unwrap_or_default()
    }

    /// The tenant's settings as [`get`](Self::get) reads them, but an error where they could
    /// not be read and none were known before: what a rule that must not fail open needs
    /// (an end user's access).
    pub async fn known_by(
        &self,
        tenant: &Tenant,
        by: Instant,
    ) -> Result<Option<Arc<StoredSettings>>, SettingsError> {
        let last = self.known().get(tenant).cloned();
        let unread = || SettingsError::Unavailable("the tenant's settings cannot be read".into());
        if let Some(known) = &last
            && known.read_at.elapsed() < self.fresh_for
        {
            return match known.unread {
                true => Err(unread()),
                false => Ok(known.stored.clone()),
            };
        }
        let read = tokio::time::timeout_at(by, self.store.get(tenant)).await;
        let (stored, failed) = match read {
            Ok(Ok(stored)) => (stored.map(Arc::new), false),
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "no answer by the deadline".to_string(),
                };
                warn!(%tenant, error = %why, "tenant settings unread: the last known are used");
                match last.filter(|known| !known.unread) {
                    Some(known) => (known.stored, false),
                    None => (None, true),
                }
            }
        };
        self.keep(tenant, stored.clone(), failed);
        match failed {
            true => Err(unread()),
            false => Ok(stored),
        }
    }

    /// The tenant's settings as stored now (not from memory), kept for later reads: what
    /// `GET /v1/settings` shows.
    pub async fn read(&self, tenant: &Tenant) -> Result<Option<StoredSettings>, SettingsError> {
        let stored = self.store.get(tenant).await?;
        self.remember(tenant, stored.clone().map(Arc::new));
        Ok(stored)
    }

    /// Stores the tenant's new settings (the version one more than the last) and uses them
    /// in this process at once.
    pub async fn put(
        &self,
        tenant: &Tenant,
        settings: TenantSettings,
    ) -> Result<StoredSettings, SettingsError> {
        let stored = self.store.put(tenant, settings).await?;
        self.remember(tenant, Some(Arc::new(stored.clone())));
        Ok(stored)
    }

    /// Keeps what `tenant`'s settings are as of now. Tenant names come from outside: at most
    /// [`sluice_contract::REMEMBERED_TENANTS`] are kept ([`make_room`]), those past their
    /// freshness forgotten first (they would be read again anyway), then the half read longest
    /// ago. A forgotten tenant is read again when it comes back; only its last-known fallback
    /// for a failing store is lost.
    fn remember(&self, tenant: &Tenant, stored: Option<Arc<StoredSettings>>) {
        self.keep(tenant, stored, false);
    }

    fn keep(&self, tenant: &Tenant, stored: Option<Arc<StoredSettings>>, unread: bool) {
        let mut known = self.known();
        let stale = |k: &Known| k.read_at.elapsed() >= self.fresh_for;
        make_room(&mut known, tenant, stale, |k| k.read_at);
        let read_at = Instant::now();
        let entry = Known {
            read_at,
            stored,
            unread,
        };
        known.insert(tenant.clone(), entry);
    }
}

#[cfg(test)]
mod tests;
