//! What the evaluation sets and runs, the ratings and the gaps share: the records store a
//! process may keep (404 `evals_disabled` without one), how its failures reach clients (503
//! `evals_unavailable`, the store's own error logged, never shown), and the bound on each of a
//! tenant's shelves.

use std::sync::Arc;

use sluice_contract::Tenant;
use sluice_contract::codes::Code;
use sluice_contract::evals::{Record, Records, RecordsError, Shelf};

use crate::Server;
use crate::error::ApiError;

impl Server {
    /// The records store, or 404 `evals_disabled` in a process that keeps none.
    pub(crate) fn records(&self) -> Result<&Arc<dyn Records>, ApiError> {
        self.records.as_ref().ok_or_else(|| {
            ApiError::new(
                Code::EvalsDisabled,
                "this process keeps no evaluation sets, ratings or gaps (it serves no answers, \
                 or has no records store)",
            )
        })
    }
}

/// 503 `evals_unavailable` for a store that failed (its error is logged, not shown: it may
/// name files or tables).
pub(crate) fn unavailable(e: RecordsError) -> ApiError {
    tracing::error!(error = %e, "the records store failed");
    ApiError::new(
        Code::EvalsUnavailable,
        "the evaluation sets, runs, ratings and gaps cannot be read or written right now; try \
         again",
    )
}

/// Forgets the oldest records of the tenant's `shelf` — by `age`, smallest first — past
/// `most`. A shelf grows only by a record's first write, so a caller asks after one.
pub(crate) async fn keep_at_most<K: Ord>(
    records: &dyn Records,
    tenant: &Tenant,
    shelf: Shelf,
    most: usize,
    age: impl Fn(&Record) -> K,
) -> Result<(), RecordsError> {
    let mut kept = records.list(tenant, shelf).await?;
    if kept.len() > most {
        kept.sort_by_key(|r| age(r));
        for old in &kept[..kept.len() - most] {
            records.delete(tenant, shelf, &old.name).await?;
        }
    }
    Ok(())
}
