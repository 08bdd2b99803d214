//! Retrieve: the hybrid search (dense + BM25, fused by the tenant's rule), by the deadline,
//! with the component read driven beside it.

use std::time::Instant;

use tracing::warn;

use super::flow::{beside, bounded, ms};
use super::scope::{Component, ScopeRead};
use super::{AnswerRequest, Pipeline, Progress};
use sluice_contract::codes::Degraded;
use sluice_contract::error::StoreError;
use sluice_contract::{stages::Hit, stages::Search};

impl Pipeline {
    /// Steps 3–4: retrieve, then rerank, by the deadline — the sources of an answer or a
    /// search. Without a query vector, or with a search that failed or was late, none, and
    /// `progress.degraded` says why.
    pub(super) async fn candidates(
        &self,
        request: &AnswerRequest,
        vector: &Result<(Vec<f32>, std::time::Duration), Degraded>,
        mut component: ScopeRead<Component>,
        progress: &mut Progress,
    ) -> Vec<Hit> {
        let hits = match vector {
            Ok((vector, _)) => match self
                .retrieve(request, vector, &mut component, progress)
                .await
            {
                Ok(hits) => Ok(self
                    .rerank(request, vector, component, hits, progress)
                    .await),
                Err(reason) => Err(reason),
            },
            Err(reason) => Err(*reason),
        };
        hits.unwrap_or_else(|reason| {
            progress.degraded.push(reason);
            Vec::new()
        })
    }

    /// Searches the store by the deadline, driving `component` (read beside the search when
    /// the cache did not need it first); the hits in one order for every backend. When the
    /// search fails or is late, the reason.
    pub(super) async fn retrieve(
        &self,
        request: &AnswerRequest,
        vector: &[f32],
        component: &mut ScopeRead<Component>,
        progress: &mut Progress,
    ) -> Result<Vec<Hit>, Degraded> {
        let started = Instant::now();
        let text = request.retrieval_text();
        let searched = request.searched();
        let search = Search::new(&text, vector, request.k)
            .filter(searched.as_ref())
            .fusion(progress.fusion);
        let search = self.store.search(&request.tenant, &search);
        let mut hits = match bounded(progress.deadline, beside(search, component)).await {
            Some(Ok(hits)) => hits,
            Some(Err(StoreError::CircuitOpen)) => return Err(Degraded::RetrievalCircuitOpen),
            Some(Err(e)) => {
                warn!(error = %e, "retrieval failed; answering without context");
                return Err(Degraded::RetrievalFailed);
            }
            None => {
                warn!(deadline = ?request.retrieval_deadline, "retrieval deadline passed; answering without context");
                return Err(Degraded::RetrievalTimeout);
            }
        };
        progress.timings.retrieve_ms = Some(ms(started.elapsed()));
        // Every backend's list in one order, equal scores included (a rerank's ties then keep
        // it: its sort is stable).
        hits.sort_by(Hit::rank_order);
        Ok(hits)
    }
}
