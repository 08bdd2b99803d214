//! What `POST /v1/search` answers (and the MCP `search` tool): an answer's sources without
//! the answer.

use serde::{Deserialize, Serialize};

use crate::Tenant;
use crate::codes::Degraded;
use crate::grounding::Extract;
use crate::sse::Timings;
use crate::stages::SourceDoc;

/// The sources a search found, as an answer's `meta` carries them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Found {
    /// This search's id (in the server's logs).
    pub request_id: String,
    /// The tenant searched.
    pub tenant: Tenant,
    /// Sources asked for.
    pub k: usize,
    /// The sources, best first: as `meta.documents` (scores, the component's scores,
    /// sections, pages, metadata, highlights).
    pub documents: Vec<SourceDoc>,
    /// The best evidence sentence among them, as `meta.extract`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extract: Option<Extract>,
    /// What was skipped or failed (a late search: what was found by the deadline, maybe
    /// nothing).
    pub degraded: Vec<Degraded>,
    /// Where the time went (`total_ms` from arrival to the response).
    pub timings: Timings,
    /// The W3C trace id.
    pub trace_id: String,
    /// Candidates the tenant's component dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank_dropped: Option<usize>,
    /// Why the tenant's component failed (to keys that manage components).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank_error: Option<crate::components::CallFailure>,
}
