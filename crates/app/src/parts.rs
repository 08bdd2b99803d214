//! What a process serves, before it is put together: the stages as trait objects, so that
//! [`crate::parts`] (which chooses the real backends) and the tests (which put doubles in
//! their place) assemble a [`Server`] the same way.

use std::sync::Arc;

use sluice_contract::access::SecretReader;
use sluice_contract::auth::KeyStore;
use sluice_contract::document::Converter;
use sluice_contract::evals::Records;
use sluice_contract::tenant_settings::SettingsStore;
use sluice_contract::usage::UsageStore;
use sluice_contract::{
    components::Components, stages::Embedder, stages::Llm, stages::Reranker, stages::Store,
};
use sluice_core::cache::SemanticCache;
use sluice_core::language::lexicon::SharedLexicon;
use sluice_core::tenants::Tenants;
use sluice_core::{Config, Ingest, Pipeline};
use sluice_core::{usage::Meter, usage::MeterSettings};

use sluice_http::{Server, WireConfig};

/// The parts of Sluice a process serves. Each Lambda function builds only what its routes
/// need; `sluice serve` builds everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Every route (`sluice serve`).
    All,
    /// `/v1/answer`, `/v1/search`, the OpenAI routes, `/mcp`, `/v1/settings` and `/v1/cache`
    /// (the answer function): the model, the store, the LLM pool, the cache, and the rerank
    /// sandbox that runs components.
    Answers,
    /// `/v1/documents` and the S3 uploads (the ingest function): the model and the store; no
    /// LLM pool.
    Documents,
    /// `/v1/components/…` (the registry function): the sandbox that validates uploads,
    /// the component storage and the tokenizer; no model, store or LLM pool.
    Components,
}

impl Role {
    /// Whether the answer routes are served.
    pub fn answers(self) -> bool {
        matches!(self, Role::All | Role::Answers)
    }
    /// Whether the document route is served.
    pub fn documents(self) -> bool {
        matches!(self, Role::All | Role::Documents)
    }
    /// Whether the component routes are served.
    pub fn components(self) -> bool {
        matches!(self, Role::All | Role::Components)
    }
}

/// The stages a process runs, built for its [`Role`] (by `sluice-app`, from the configuration), before they are
/// put together: [`Parts::into_server`] assembles them. A part the role does not need is
/// `None`; tests and benchmarks put doubles in place of some before assembling.
pub struct Parts {
    /// What the engine's parts were built from.
    pub config: Config,
    /// The wire's limits, listener and auth.
    pub wire: WireConfig,
    /// Which process this is, as answers name it (`done.replica_id`): `None` for the
    /// pipeline's own default.
    pub replica_id: Option<String>,
    /// Files made documents (documents): the file parsers, which only the processes that
    /// ingest link.
    pub converter: Option<Arc<dyn Converter>>,
    /// What the process serves.
    pub role: Role,
    /// The embedding model (answers, documents).
    pub embedder: Option<Arc<dyn Embedder>>,
    /// The vector store (answers, documents).
    pub store: Option<Arc<dyn Store>>,
    /// The LLM pool (answers).
    pub llm: Option<Arc<dyn Llm>>,
    /// The answer cache, unless it is off (answers).
    pub cache: Option<Arc<SemanticCache>>,
    /// WordNet, as the cache's guard and the grounding check read it (answers); empty with
    /// `SLUICE_CACHE_LEXICON=none`.
    pub lexicon: SharedLexicon,
    /// Runs tenants' rerank components (answers).
    pub reranker: Option<Arc<dyn Reranker>>,
    /// The registry behind the component routes (components).
    pub components: Option<Arc<dyn Components>>,
    /// API keys; `None` while auth is off.
    pub keys: Option<Arc<dyn KeyStore>>,
    /// Where usage is written (answers, documents); `None` with `SLUICE_USAGE=off`.
    pub usage: Option<Arc<dyn UsageStore>>,
    /// Where tenants' settings are kept (answers, documents); `None`: every tenant answers with the
    /// deployment's defaults, and `/v1/settings` is 404 `settings_disabled`.
    pub settings: Option<Arc<dyn SettingsStore>>,
    /// Where tenants' HMAC secrets for their end users' tokens are read (Secrets Manager);
    /// `None`: a tenant whose identity names one has its tokens refused as unverifiable.
    pub secrets: Option<Arc<dyn SecretReader>>,
    /// Where tenants' evaluation sets and runs (answers), and sources and their reports
    /// (documents), are kept; `None`: `/v1/evals` is 404 `evals_disabled`, `/v1/sources`
    /// `sources_disabled`.
    pub records: Option<Arc<dyn Records>>,
    /// The buckets of tenants' S3 sources; `None`: an S3 source's sync fails, saying so.
    pub objects: Option<Arc<dyn sluice_contract::sources::Objects>>,
    /// The sync queue (due sources' starts, syncs' batches); `None`: the schedule runs the
    /// syncs, and a sync reads what it lists itself.
    pub batches: Option<Arc<dyn sluice_contract::sources::Batches>>,
}

impl Parts {
    /// The server over these parts: the answer path where there are an embedder, a store and
    /// an LLM (and the role serves answers), the document path where there are an embedder
    /// and a store (and it serves documents), the component routes where there is a registry.
    pub fn into_server(self) -> Server {
        let config = self.config;
        let mut server = Server::new(&self.wire);
        if let (true, Some(embedder), Some(store)) =
            (self.role.documents(), &self.embedder, &self.store)
        {
            let ingest = Ingest::new(
                config.ingest.clone(),
                Arc::clone(embedder),
                Arc::clone(store),
            );
            server = server.with_ingest(Arc::new(ingest));
        }
        if let (true, Some(embedder), Some(store), Some(llm)) =
            (self.role.answers(), self.embedder, self.store, self.llm)
        {
            let mut pipeline = Pipeline::new(config.answer.clone(), embedder, store, llm);
            pipeline.reranker = self.reranker;
            pipeline.cache = self.cache;
            pipeline.lexicon = self.lexicon;
            if let Some(replica_id) = self.replica_id {
                pipeline.replica_id = replica_id;
            }
            server = server.with_answers(Arc::new(pipeline));
        }
        server.tenants = (self.settings)
            .map(|store| Arc::new(Tenants::new(store, self.wire.auth.settings_fresh)));
        if let Some(secrets) = self.secrets {
            let identities = sluice_identity::Identities::new(sluice_identity::REFETCH_EVERY)
                .allowing(self.wire.auth.fetch_allow.clone());
            server.identities = Arc::new(identities.with_secrets(secrets));
        }
        let (answers, documents) = (server.answers.is_some(), server.ingest.is_some());
        server.records = self.records.filter(|_| answers || documents);
        server.converter = self.converter;
        server.objects = self.objects;
        server.batches = self.batches;
        server.components = self.components;
        server.keys = self.keys;
        server.usage = self
            .usage
            .map(|store| Arc::new(Meter::new(store, MeterSettings::from_config(&config.usage))));
        server
    }
}
