//! Embed: the query vector, on the blocking pool, by the deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::Instant as Deadline;
use tracing::warn;

use super::flow::{bounded, ms};
use super::{AnswerRequest, Pipeline};
use sluice_contract::codes::Degraded;
use sluice_contract::sse::Timings;

impl Pipeline {
    /// Stage 2: the query vector and the time it took, by the deadline; else the reason.
    pub(super) async fn embed_query(
        &self,
        request: &AnswerRequest,
        deadline: Deadline,
        timings: &mut Timings,
    ) -> Result<(Vec<f32>, Duration), Degraded> {
        if request.retrieval_deadline.is_zero() || Deadline::now() >= deadline {
            return Err(Degraded::RetrievalTimeout);
        }
        let started = Instant::now();
        let embedder = Arc::clone(&self.embedder);
        let query = request.retrieval_text().into_owned();
        let task = tokio::task::spawn_blocking(move || {
            let vectors = embedder
                .embed(&[query.as_str()])
                .map_err(|e| e.to_string())?;
            vectors
                .into_iter()
                .next()
                .ok_or_else(|| "the embedder returned no vector".to_string())
        });
        match bounded(deadline, task).await {
            Some(Ok(Ok(vector))) => {
                let took = started.elapsed();
                timings.embed_ms = Some(ms(took));
                Ok((vector, took))
            }
            Some(Ok(Err(e))) => {
                warn!(error = %e, "embedding failed; answering without context");
                Err(Degraded::RetrievalFailed)
            }
            Some(Err(e)) => {
                warn!(error = %e, "embedding task failed; answering without context");
                Err(Degraded::RetrievalFailed)
            }
            None => {
                warn!(deadline = ?request.retrieval_deadline, "retrieval deadline passed while embedding; answering without context");
                Err(Degraded::RetrievalTimeout)
            }
        }
    }
}
