//! Rerank: the tenant's WASM component orders (and may drop) the candidates once its read
//! has resolved, on the blocking pool, by the deadline; a failed or late one keeps the
//! fused order (`rerank_failed`).

use std::time::Instant;

use tokio::time::Instant as Deadline;
use tracing::warn;

use super::flow::{bounded, ms};
use super::scope::{COMPONENT_READ, Component, ScopeRead, take};
use super::{AnswerRequest, Pipeline, Progress};
use sluice_contract::codes::Degraded;
use sluice_contract::components::CallFailure;
use sluice_contract::{
    stages::FailureKind, stages::Hit, stages::RerankFailure, stages::RerankInput,
};

impl Pipeline {
    /// `hits` in the order the tenant's component gives them, or as they are when it has
    /// none, its read failed or was late, or it failed.
    pub(super) async fn rerank(
        &self,
        request: &AnswerRequest,
        vector: &[f32],
        mut component: ScopeRead<Component>,
        hits: Vec<Hit>,
        progress: &mut Progress,
    ) -> Vec<Hit> {
        let deadline = progress.deadline;
        (&mut component).await;
        let Some(components) = take(&mut component, COMPONENT_READ, &mut progress.degraded) else {
            return hits;
        };
        progress.assembler = components.prompt;
        let Some(active) = components.rerank else {
            return hits;
        };
        if Deadline::now() >= deadline {
            warn!(
                "the retrieval deadline passed before the rerank could start; keeping the fused order"
            );
            progress.degraded.push(Degraded::RerankFailed);
            let failure = RerankFailure::new(
                FailureKind::Deadline,
                "the retrieval deadline passed before the component could run",
            );
            progress.rerank_failure = told(request, failure, &hits);
            return hits;
        }
        let started = Instant::now();
        let (query, vector, candidates) = (
            request.retrieval_text().into_owned(),
            vector.to_vec(),
            hits.clone(),
        );
        let context = request.rerank_context.clone();
        let request_id = progress.request_id.clone();
        let span = tracing::Span::current();
        let task = tokio::task::spawn_blocking(move || {
            let _span = span.enter();
            active.rerank(&RerankInput {
                query: &query,
                query_vector: &vector,
                hits: &candidates,
                context: &context,
                request_id: &request_id,
            })
        });
        let outcome = match bounded(deadline, task).await {
            Some(Ok(call)) => {
                progress.timings.rerank_fuel = Some(call.fuel);
                call.order
            }
            Some(Err(e)) => Err(RerankFailure::new(
                FailureKind::Trap,
                format!("the rerank task failed: {e}"),
            )),
            None => Err(RerankFailure::new(
                FailureKind::Deadline,
                "the retrieval deadline passed while it ran",
            )),
        };
        progress.timings.rerank_ms = Some(ms(started.elapsed()));
        match outcome {
            Ok(order) => {
                progress.rerank_dropped = Some(hits.len().saturating_sub(order.len()));
                let mut slots: Vec<Option<Hit>> = hits.into_iter().map(Some).collect();
                let mut kept = Vec::with_capacity(order.len());
                for (i, score) in order {
                    if let Some(hit) = slots.get_mut(i).and_then(Option::take) {
                        let key = (hit.document.id.clone(), hit.chunk);
                        progress.rerank_scores.insert(key, score);
                        kept.push(hit);
                    }
                }
                kept
            }
            Err(e) => {
                warn!(error = %e, "rerank component failed; keeping the fused order");
                progress.degraded.push(Degraded::RerankFailed);
                progress.rerank_failure = told(request, e, &hits);
                hits
            }
        }
    }
}

/// What `meta.rerank_error` tells a caller that manages the tenant's components (`None` for
/// others): the failure, the request's context and the call's candidates.
fn told(request: &AnswerRequest, failure: RerankFailure, hits: &[Hit]) -> Option<CallFailure> {
    request.show_rerank_failure.then(|| CallFailure {
        failure,
        context: request.rerank_context.to_map(),
        candidates: (hits.iter())
            .map(|h| format!("{}#{}", h.document.id, h.chunk))
            .collect(),
    })
}
