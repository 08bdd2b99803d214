//! Admit: the reads an answer's scope depends on — the tenant's corpus version (for the
//! cache) and its active rerank component — started at once, each bounded by the deadline,
//! and driven beside the stages that run before they are needed.

use std::pin::Pin;
use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt, MaybeDone, maybe_done};
use tokio::time::Instant as Deadline;
use tracing::warn;

use super::flow::bounded;
use super::{AnswerRequest, Pipeline};
use sluice_contract::codes::Degraded;
use sluice_contract::stages::{ActiveComponent, ActivePrompt};

/// The two scope reads of one answer.
pub(super) struct ScopeReads {
    /// The tenant's corpus version; `Got(None)` when the cache is not in use.
    pub(super) version: ScopeRead<Option<u64>>,
    /// The tenant's active components; none of either without a component registry.
    pub(super) component: ScopeRead<Component>,
}

impl ScopeReads {
    /// Both reads, driven together (beside a stage, or awaited).
    pub(super) fn both(&mut self) -> impl Future<Output = ((), ())> + '_ {
        futures::future::join(&mut self.version, &mut self.component)
    }
}

impl Pipeline {
    /// Starts the reads the cache and the rerank stage depend on, each bounded by the
    /// deadline: the tenant's corpus version (only when the cache is in use) and its active
    /// component. A component known to the registry but due for a check is waited for one
    /// cache budget at most; then the version known so far serves.
    pub(super) fn read_scope(
        &self,
        request: &AnswerRequest,
        cached: bool,
        deadline: Deadline,
    ) -> ScopeReads {
        let check_by = deadline.min(Deadline::from_std(
            request.received + self.config.scope_budget,
        ));
        let version = match cached {
            false => async { Read::Got(None) }.boxed(),
            true => {
                let store = Arc::clone(&self.store);
                let tenant = request.tenant.clone();
                async move {
                    match bounded(deadline, store.corpus_version(&tenant)).await {
                        Some(Ok(v)) => Read::Got(Some(v)),
                        Some(Err(e)) => Read::Failed(e.to_string()),
                        None => Read::Late,
                    }
                }
                .boxed()
            }
        };
        let pinned = request.pinned.clone();
        let component = match self.reranker.clone() {
            None => async move {
                Read::Got(Component {
                    rerank: pinned.rerank,
                    prompt: pinned.prompt,
                })
            }
            .boxed(),
            Some(reranker) => {
                let tenant = request.tenant.clone();
                async move {
                    // A pinned component (a candidate) replaces its kind's active one.
                    let rerank = async {
                        match pinned.rerank {
                            Some(c) => Ok(Some(c)),
                            None => reranker.active(&tenant, check_by).await,
                        }
                    };
                    let prompt = async {
                        match pinned.prompt {
                            Some(c) => Ok(Some(c)),
                            None => reranker.active_prompt(&tenant, check_by).await,
                        }
                    };
                    match bounded(deadline, futures::future::join(rerank, prompt)).await {
                        Some((Ok(rerank), Ok(prompt))) => Read::Got(Component { rerank, prompt }),
                        Some((Err(e), _) | (_, Err(e))) => Read::Failed(e),
                        None => Read::Late,
                    }
                }
                .boxed()
            }
        };
        ScopeReads {
            version: maybe_done(version),
            component: maybe_done(component),
        }
    }
}

/// How a bounded read ended.
pub(super) enum Read<T> {
    /// It answered in time.
    Got(T),
    /// Its time was up first; it is abandoned.
    Late,
    /// It failed; the message says why.
    Failed(String),
}

/// A scope read in flight (or done): polled beside other stages, awaited where it is needed.
pub(super) type ScopeRead<T> = MaybeDone<BoxFuture<'static, Read<T>>>;

/// The tenant's active components, `None` each for the built-in default: the rerank stage's
/// and the prompt stage's. Both are in the cache's scope.
#[derive(Clone, Default)]
pub(super) struct Component {
    pub(super) rerank: Option<Arc<dyn ActiveComponent>>,
    pub(super) prompt: Option<Arc<dyn ActivePrompt>>,
}

/// The `meta.degraded` reasons of a scope read that was late or failed, and what it is (for
/// the log line).
pub(super) type Reasons = (Degraded, Degraded, &'static str);
pub(super) const VERSION_READ: Reasons = (
    Degraded::CorpusVersionTimeout,
    Degraded::CorpusVersionFailed,
    "corpus version",
);
pub(super) const COMPONENT_READ: Reasons = (
    Degraded::ComponentTimeout,
    Degraded::ComponentFailed,
    "active components",
);

/// What a finished read gave, when it answered in time (`None` until it finished).
pub(super) fn output<T>(read: &mut ScopeRead<T>) -> Option<&Read<T>> {
    Pin::new(read).output_mut().map(|r| &*r)
}

/// Takes what a read gave; one that was late, is still running (its stage's time is up) or
/// failed adds its reason to `degraded`.
pub(super) fn take<T>(
    read: &mut ScopeRead<T>,
    (late, failed, what): Reasons,
    degraded: &mut Vec<Degraded>,
) -> Option<T> {
    match Pin::new(read).take_output() {
        Some(Read::Got(value)) => Some(value),
        Some(Read::Late) | None => {
            warn!("the {what} was not read in time; going on without it");
            degraded.push(late);
            None
        }
        Some(Read::Failed(e)) => {
            warn!(error = %e, "reading the {what} failed; going on without it");
            degraded.push(failed);
            None
        }
    }
}

/// A scope read that has already answered `value`.
pub(super) fn resolved<T: Send + 'static>(value: T) -> ScopeRead<T> {
    let mut read = maybe_done(futures::future::ready(Read::Got(value)).boxed());
    // Ready on its first poll: done now, so that taking it needs no await.
    let _ = Pin::new(&mut read).poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
    read
}
