//! The documents side of administration: list, look up and delete.

use sluice_contract::Tenant;
use sluice_contract::document::{DeleteReport, MAX_DELETE, MAX_PAGE};
use sluice_contract::error::IngestError;
use sluice_contract::filter::Filter;
use sluice_contract::stages::{DocumentPage, Page, Selection, StoredDocument};

use super::Ingest;

/// The documents side of administration: list, look up and delete. `scope` is the caller's
/// key-bound filter (every call is confined to the documents it passes, so that a key never
/// sees or removes what it could not retrieve); a request's own filter is ANDed with it by
/// the caller ([`Filter::and`]).
impl Ingest {
    /// A page of the tenant's documents that pass `filter`, from `cursor` on, at most `limit`
    /// (1 to [`MAX_PAGE`]).
    pub async fn list(
        &self,
        tenant: &Tenant,
        filter: Option<&Filter>,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<DocumentPage, IngestError> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(IngestError::Invalid(format!(
                "limit must be from 1 to {MAX_PAGE}, not {limit}"
            )));
        }
        let selection = Selection {
            filter,
            ..Selection::default()
        };
        let page = Page { limit, cursor };
        Ok(self.store.documents(tenant, &selection, page).await?)
    }

    /// The tenant's document `id`, when it exists and passes `scope`.
    pub async fn get(
        &self,
        tenant: &Tenant,
        scope: Option<&Filter>,
        id: &str,
    ) -> Result<Option<StoredDocument>, IngestError> {
        let ids = [id.to_string()];
        let selection = Selection {
            ids: Some(&ids),
            filter: scope,
            ..Selection::default()
        };
        let page = Page {
            limit: 1,
            cursor: None,
        };
        let found = self.store.documents(tenant, &selection, page).await?;
        Ok(found.documents.into_iter().next())
    }

    /// Deletes the tenant's document `id` (every chunk of it), when it exists and passes
    /// `scope`; `None` when there is no such document.
    pub async fn delete(
        &self,
        tenant: &Tenant,
        scope: Option<&Filter>,
        id: &str,
    ) -> Result<Option<DeleteReport>, IngestError> {
        let ids = [id.to_string()];
        let selection = Selection {
            ids: Some(&ids),
            filter: scope,
            ..Selection::default()
        };
        let report = self.delete_selected(tenant, selection).await?;
        Ok((report.deleted > 0).then_some(report))
    }

    /// Deletes up to [`MAX_DELETE`] of the tenant's documents that pass `filter` (the
    /// request's and the key's, combined; `None`: every document).
    pub async fn delete_matching(
        &self,
        tenant: &Tenant,
        filter: Option<&Filter>,
    ) -> Result<DeleteReport, IngestError> {
        self.delete_selected(
            tenant,
            Selection {
                filter,
                ..Selection::default()
            },
        )
        .await
    }

    /// Deletes the documents read from the upload `origin` ([`ingest_from`](Self::ingest_from)),
    /// up to [`MAX_DELETE`].
    pub async fn delete_origin(
        &self,
        tenant: &Tenant,
        origin: &str,
    ) -> Result<DeleteReport, IngestError> {
        self.delete_selected(
            tenant,
            Selection {
                origin: Some(origin),
                ..Selection::default()
            },
        )
        .await
    }

    /// Finds what `selection` picks (one page of [`MAX_DELETE`]), then deletes those
    /// documents — by id and under the same selection, so that a document changed in between
    /// so as not to match any more is kept — and bumps the corpus version; with nothing
    /// found, neither.
    async fn delete_selected(
        &self,
        tenant: &Tenant,
        selection: Selection<'_>,
    ) -> Result<DeleteReport, IngestError> {
        let page = Page {
            limit: MAX_DELETE,
            cursor: None,
        };
        let found = self.store.documents(tenant, &selection, page).await?;
        let ids: Vec<String> = (found.documents.into_iter())
            .map(|d| d.document.id)
            .collect();
        if ids.is_empty() {
            return Ok(DeleteReport {
                deleted: 0,
                more: false,
                corpus_version: self.store.corpus_version(tenant).await?,
            });
        }
        let picked = Selection {
            ids: Some(&ids),
            ..selection
        };
        self.store.delete_documents(tenant, &picked).await?;
        Ok(DeleteReport {
            deleted: ids.len(),
            more: found.next.is_some(),
            corpus_version: self.publish(tenant, true).await?,
        })
    }

    /// Bumps the tenant's corpus version, so that no cached answer made before the write is
    /// served again. When the write removed documents, returns only once other processes
    /// have let go of the version before it ([`Store::version_memo`]): a client told that a
    /// document is gone never gets an answer built from it out of the cache afterwards.
    pub(super) async fn publish(&self, tenant: &Tenant, removed: bool) -> Result<u64, IngestError> {
        let version = self.store.bump_corpus_version(tenant).await?;
        if removed {
            tokio::time::sleep(self.store.version_memo()).await;
        }
        Ok(version)
    }
}
