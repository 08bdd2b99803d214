//! The pipeline itself: its stages, assembled once at start and shared by every request,
//! and what each process keeps beside them (its drain signal, its replica id, the corpus
//! versions it has met).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::cache::SemanticCache;
use crate::config::AnswerConfig;
use crate::language::lexicon::SharedLexicon;
use sluice_contract::Tenant;
use sluice_contract::{stages::Embedder, stages::Llm, stages::Reranker, stages::Store};

/// The answer path's stages, built once at start and shared by every request.
pub struct Pipeline {
    /// Settings read at start.
    pub config: AnswerConfig,
    /// Query embeddings.
    pub embedder: Arc<dyn Embedder>,
    /// Chunks of every tenant.
    pub store: Arc<dyn Store>,
    /// The generating model.
    pub llm: Arc<dyn Llm>,
    /// Runs tenant rerank components, when the deployment has them.
    pub reranker: Option<Arc<dyn Reranker>>,
    /// The answer cache, unless it is off.
    pub cache: Option<Arc<SemanticCache>>,
    /// WordNet, for the grounding check's synonyms (empty: words match only as written).
    pub lexicon: SharedLexicon,
    /// Set when open streams must end (see [`Pipeline::drain`]).
    pub(super) drained: tokio::sync::watch::Sender<bool>,
    /// Which process answered (`done.replica_id`): named by the composition root (the host
    /// and the process id); `process-<pid>` until it does.
    pub replica_id: String,
    /// Each tenant's corpus version, and when this process first met it ([`Self::settled`]).
    pub(super) versions_seen: std::sync::Mutex<HashMap<Tenant, (u64, Instant)>>,
}

impl Pipeline {
    /// Assembles a pipeline from its stages.
    pub fn new(
        config: AnswerConfig,
        embedder: Arc<dyn Embedder>,
        store: Arc<dyn Store>,
        llm: Arc<dyn Llm>,
    ) -> Self {
        Self {
            config,
            embedder,
            store,
            llm,
            reranker: None,
            cache: None,
            lexicon: SharedLexicon::default(),
            drained: tokio::sync::watch::Sender::new(false),
            replica_id: format!("process-{}", std::process::id()),
            versions_seen: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Ends every answer still streaming with a retryable `shutting_down` error (and every
    /// one started later at once): what a server that is shutting down does when its drain
    /// time is up, so that no client is cut off without an ending.
    pub fn drain(&self) {
        self.drained.send_replace(true);
    }
}
