//! A tenant's rerank and prompt components without a sandbox.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sluice_contract::Tenant;
use sluice_contract::metadata::MetaValue;
use sluice_contract::stages::{
    ActiveComponent, ActivePrompt, Assembled, ChatMessage, Embedder, FailureKind,
    MESSAGE_OVERHEAD_TOKENS, PromptCall, PromptInput, RerankCall, RerankFailure, RerankInput,
    Reranker,
};

/// The fuel a scripted component reports burning per candidate, so that usage tests can
/// predict it.
pub const SCRIPTED_FUEL_PER_HIT: u64 = 1000;

/// What the active component of a [`ScriptedReranker`] does with the hits.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Reverses the fused order.
    Reverse,
    /// Fails with this message (a trap, a limit, bad output).
    Fail(String),
    /// Puts the hits of this document first, the rest after them in the fused order.
    Prefer(String),
    /// Keeps the fused order of the hits whose document's metadata `field` (a string or a
    /// list of them) holds the value of the request context's `key`, and drops the others
    /// (all of them when the context has no `key`): a 0.2 component's audience rule.
    KeepWhereContext {
        /// The `rerank_context` entry read.
        key: String,
        /// The metadata field that must hold its value.
        field: String,
    },
}

/// What the active prompt component of a [`ScriptedReranker`] does with the built-in
/// messages.
#[derive(Debug, Clone)]
pub enum PromptVerdict {
    /// Puts this line before the built-in system message's text.
    Prefix(String),
    /// Fails with this message.
    Fail(String),
}

/// Tenants' rerank components as a script says: which tenants have one (all, unless
/// [`ScriptedReranker::only_for`]), what it does, and how long finding it takes (or that
/// finding it fails: the component storage unreachable).
pub struct ScriptedReranker {
    verdict: Option<Verdict>,
    /// Stored versions besides the active one, by version (what [`Reranker::version`] finds).
    stored: Vec<(String, Verdict)>,
    prompt: Option<PromptVerdict>,
    version: String,
    tenants: Option<Vec<Tenant>>,
    lookup_delay: Duration,
    lookup_fails: bool,
}

impl ScriptedReranker {
    /// Every tenant's component does `verdict`; it is found at once.
    pub fn new(verdict: Verdict) -> Self {
        Self {
            verdict: Some(verdict),
            stored: Vec::new(),
            prompt: None,
            version: "v1".into(),
            tenants: None,
            lookup_delay: Duration::ZERO,
            lookup_fails: false,
        }
    }

    /// Every tenant has a prompt component that does `verdict`, and no rerank component.
    pub fn prompt_only(verdict: PromptVerdict) -> Self {
        Self {
            verdict: None,
            prompt: Some(verdict),
            ..Self::new(Verdict::Reverse)
        }
    }

    /// Only these tenants have the component; the others have the built-in order.
    pub fn only_for(mut self, tenants: &[Tenant]) -> Self {
        self.tenants = Some(tenants.to_vec());
        self
    }

    /// Finding a tenant's component takes this long.
    pub fn lookup_delay(mut self, delay: Duration) -> Self {
        self.lookup_delay = delay;
        self
    }

    /// Finding a tenant's component fails.
    pub fn lookup_fails(mut self) -> Self {
        self.lookup_fails = true;
        self
    }

    /// The version cached answers remember.
    pub fn version(mut self, version: &str) -> Self {
        self.version = version.into();
        self
    }

    /// No tenant has an active rerank component.
    pub fn none_active(mut self) -> Self {
        self.verdict = None;
        self
    }

    /// A stored, inactive version `version` that does `verdict`.
    pub fn stored(mut self, version: &str, verdict: Verdict) -> Self {
        self.stored.push((version.into(), verdict));
        self
    }
}

struct Scripted {
    verdict: Verdict,
    version: String,
}

impl ActiveComponent for Scripted {
    fn version(&self) -> &str {
        &self.version
    }
    fn rerank(&self, input: &RerankInput<'_>) -> RerankCall {
        let hits = input.hits;
        // The scripted component's score: 1 for its first choice, less for each after it.
        let scored = |order: Vec<usize>| -> Vec<(usize, f32)> {
            let n = order.len().max(1) as f32;
            (order.into_iter().enumerate())
                .map(|(rank, i)| (i, 1.0 - rank as f32 / n))
                .collect()
        };
        let order = match &self.verdict {
            Verdict::Reverse => Ok(scored((0..hits.len()).rev().collect())),
            Verdict::Prefer(id) => {
                let (first, rest): (Vec<usize>, Vec<usize>) =
                    (0..hits.len()).partition(|&i| &hits[i].document.id == id);
                Ok(scored(first.into_iter().chain(rest).collect()))
            }
            Verdict::Fail(why) => Err(sluice_contract::stages::RerankFailure::new(
                sluice_contract::stages::FailureKind::ComponentError,
                why.clone(),
            )),
            Verdict::KeepWhereContext { key, field } => {
                let wanted = input.context.iter().find(|(k, _)| k == key).map(|(_, v)| v);
                let holds = |value: Option<&MetaValue>| match (value, wanted) {
                    (Some(MetaValue::Text(t)), Some(w)) => t == w,
                    (Some(MetaValue::List(items)), Some(w)) => items.iter().any(|i| i == w),
                    _ => false,
                };
                Ok(scored(
                    (0..hits.len())
                        .filter(|&i| holds(hits[i].document.metadata.get(field)))
                        .collect(),
                ))
            }
        };
        RerankCall {
            order,
            fuel: SCRIPTED_FUEL_PER_HIT * hits.len() as u64,
            wall: Duration::from_micros(10),
        }
    }
}

impl ScriptedReranker {
    /// Looks `tenant` up as the script says: after the lookup delay, failing if it fails;
    /// whether the tenant has the scripted components.
    async fn has_components(&self, tenant: &Tenant) -> Result<bool, String> {
        // The caller bounds the wait, as it bounds a real first load.
        tokio::time::sleep(self.lookup_delay).await;
        if self.lookup_fails {
            return Err("injected: component storage unreachable".into());
        }
        Ok(self.tenants.as_ref().is_none_or(|t| t.contains(tenant)))
    }
}

#[async_trait]
impl Reranker for ScriptedReranker {
    async fn active(
        &self,
        tenant: &Tenant,
        _by: tokio::time::Instant,
    ) -> Result<Option<Arc<dyn ActiveComponent>>, String> {
        if !self.has_components(tenant).await? {
            return Ok(None);
        }
        Ok(self.verdict.clone().map(|verdict| {
            Arc::new(Scripted {
                verdict,
                version: self.version.clone(),
            }) as Arc<dyn ActiveComponent>
        }))
    }

    async fn version(
        &self,
        tenant: &Tenant,
        version: &str,
    ) -> Result<Arc<dyn ActiveComponent>, String> {
        let _ = self.has_components(tenant).await?;
        let (version, verdict) = (self.stored.iter())
            .find(|(v, _)| v == version)
            .ok_or_else(|| format!("no stored version {version:?}"))?;
        Ok(Arc::new(Scripted {
            verdict: verdict.clone(),
            version: version.clone(),
        }))
    }

    async fn active_prompt(
        &self,
        tenant: &Tenant,
        _by: tokio::time::Instant,
    ) -> Result<Option<Arc<dyn ActivePrompt>>, String> {
        if !self.has_components(tenant).await? {
            return Ok(None);
        }
        Ok(self.prompt.clone().map(|verdict| {
            Arc::new(ScriptedPrompt {
                verdict,
                version: self.version.clone(),
            }) as Arc<dyn ActivePrompt>
        }))
    }
}

struct ScriptedPrompt {
    verdict: PromptVerdict,
    version: String,
}

impl ActivePrompt for ScriptedPrompt {
    fn version(&self) -> &str {
        &self.version
    }
    fn assemble(&self, input: &PromptInput<'_>) -> PromptCall {
        let mut messages = input.built_in.to_vec();
        let messages = match &self.verdict {
            PromptVerdict::Prefix(line) => {
                if let Some(system) = messages.iter_mut().find(|m| m.role == "system") {
                    system.content = format!("{line}\n{}", system.content);
                } else {
                    messages.insert(0, ChatMessage::new("system", line.clone()));
                }
                Ok(messages)
            }
            PromptVerdict::Fail(why) => {
                Err(RerankFailure::new(FailureKind::ComponentError, why.clone()))
            }
        };
        // Counted as the kit's embedder counts (a token a word), as the sandbox's check counts
        // with the host's tokenizer.
        let count = |m: &ChatMessage| {
            crate::HashEmbedder::new().count_tokens(&m.content) + MESSAGE_OVERHEAD_TOKENS
        };
        PromptCall {
            assembled: messages.map(|messages| Assembled {
                tokens: messages.iter().map(count).sum(),
                messages,
            }),
            fuel: SCRIPTED_FUEL_PER_HIT,
            wall: Duration::from_micros(10),
        }
    }
}
