//! Search: the answer path's steps 0 and 2–4 — the component read beside the embedding, the
//! hybrid search, the tenant's rerank — and the sources' evidence, by the same deadline; no
//! cache, prompt or LLM. What `POST /v1/search` and the MCP `search` tool return.

use tracing::Instrument;

use super::flow::{beside, ms};
use super::{AnswerRequest, Pipeline, Progress, prompt};
use sluice_contract::search::Found;
use sluice_contract::stages::SourceDoc;

impl Pipeline {
    /// The sources `request` would be answered from, best first, with what was skipped (past
    /// the deadline: what was found by then). Every log line carries the request id, tenant
    /// and trace id (the `search` span). Dropping the future stops the work.
    pub async fn search(&self, request: &AnswerRequest) -> Found {
        let request_id = uuid::Uuid::new_v4().to_string();
        let span = tracing::info_span!(
            "search",
            request_id = %request_id,
            tenant = %request.tenant,
            trace_id = %request.trace.trace_id,
        );
        async move {
            let mut progress = Progress::new(&self.config, request, request_id);
            // 0 and 2. The component read beside the embedding (no cache: no corpus version).
            let mut reads = self.read_scope(request, false, progress.deadline);
            let embedding = self.embed_query(request, progress.deadline, &mut progress.timings);
            let vector = beside(embedding, reads.both()).await;
            // 3-4. Retrieve, then rerank.
            let hits = self
                .candidates(request, &vector, reads.component, &mut progress)
                .await;
            // The evidence, as the answer's `meta` has it.
            let mut documents: Vec<SourceDoc> = (hits.iter())
                .map(|hit| prompt::source_doc(hit, &progress.rerank_scores))
                .collect();
            self.evidence(request, &hits, &mut documents, &mut progress)
                .await;
            progress.timings.total_ms = Some(ms(request.received.elapsed()));
            Found {
                request_id: progress.request_id,
                tenant: request.tenant.clone(),
                k: request.k,
                documents,
                extract: (progress.extract).filter(|_| request.wants_extract(self.config.extract)),
                degraded: progress.degraded,
                timings: progress.timings,
                trace_id: request.trace.trace_id.clone(),
                rerank_dropped: progress.rerank_dropped,
                rerank_error: progress.rerank_failure,
            }
        }
        .instrument(span)
        .await
    }
}
