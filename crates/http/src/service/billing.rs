//! What an answer costs, billed in the tenant's (and its key's) usage: counted from the
//! answer's own events as they pass — its `done`'s token counts, or, for an answer that ended
//! with an `error` or whose client went away, the tokens it sent — and recorded once, when
//! it ends or is dropped. The budget it held from its start is released when it is recorded.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use sluice_contract::Tenant;
use sluice_contract::sse::{CacheState, Event, Timings};
use sluice_contract::usage::Counts;
use sluice_core::usage::{Hold, Meter, counts_of_answer};

/// An answer's counts so far, from its events.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tally {
    /// What `meta` said: a cache hit, the prompt's tokens, the timings so far.
    meta: Option<(bool, u64, Timings)>,
    /// Token events sent.
    tokens: u64,
}

impl Tally {
    /// Reads `event`; once the answer has ended (its `done` or `error`), what it used.
    pub(crate) fn see(&mut self, event: &Event) -> Option<Counts> {
        match event {
            Event::Meta(m) => {
                let prompt = m.prompt_tokens.unwrap_or(0);
                self.meta = Some((m.cache == CacheState::Hit, prompt, m.timings.clone()));
                None
            }
            Event::Token(_) => {
                self.tokens += 1;
                None
            }
            Event::Done(d) => {
                let (hit, prompt) = self.meta.as_ref().map_or((false, 0), |m| (m.0, m.1));
                Some(counts_of_answer(
                    Some(d),
                    hit,
                    self.tokens,
                    prompt,
                    &d.timings,
                ))
            }
            Event::Error(_) => Some(self.so_far()),
        }
    }

    /// What an answer that has not ended used: the tokens it sent (nothing before `meta`).
    pub(crate) fn so_far(&self) -> Counts {
        match &self.meta {
            Some((hit, prompt, timings)) => {
                counts_of_answer(None, *hit, self.tokens, *prompt, timings)
            }
            None => Counts::default(),
        }
    }

    /// Token events seen.
    pub(crate) fn tokens(&self) -> u64 {
        self.tokens
    }
}

/// One answer's bill: recorded once, at its end or when it is dropped.
struct Bill {
    meter: Arc<Meter>,
    tenant: Tenant,
    key: Option<String>,
    /// What the answer holds against its budgets, released once its usage is recorded.
    hold: Option<Hold>,
    tally: Tally,
    recorded: bool,
}

impl Bill {
    fn record(&mut self, used: Counts) {
        if !std::mem::replace(&mut self.recorded, true) {
            self.meter.record(&self.tenant, self.key.as_deref(), used);
            // Counted as used now: no longer held.
            drop(self.hold.take());
        }
    }
}

impl Drop for Bill {
    fn drop(&mut self) {
        if self.recorded {
            return;
        }
        // The client went away: what it was sent is counted, and written by a task of its own
        // (nothing awaits a dropped stream). On Lambda the environment may be frozen first;
        // then the next invocation's flush writes it, and if the environment is never used
        // again it is lost.
        self.record(self.tally.so_far());
        let meter = Arc::clone(&self.meter);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = meter.flush().await;
            });
        }
    }
}

/// `events` (an answer's), billed to `tenant` (and the key whose id is `key`) in `meter` as
/// they pass, then written: after the last event, before the stream ends — so on Lambda
/// before the invocation does — never delaying an event. Without a meter
/// (`SLUICE_USAGE=off`) the events pass as they are.
pub(crate) fn billed(
    meter: Option<Arc<Meter>>,
    tenant: Tenant,
    key: Option<String>,
    hold: Option<Hold>,
    events: impl Stream<Item = Event> + Send + 'static,
) -> futures::stream::BoxStream<'static, Event> {
    let Some(meter) = meter else {
        return events.boxed();
    };
    let mut bill = Bill {
        meter: Arc::clone(&meter),
        tenant,
        key,
        hold,
        tally: Tally::default(),
        recorded: false,
    };
    let counted = events.inspect(move |event| {
        if let Some(used) = bill.tally.see(event) {
            bill.record(used);
        }
    });
    let written = futures::stream::once(async move {
        // A failure is logged by the meter, and its counts kept for the next flush.
        let _ = meter.flush().await;
    })
    .filter_map(|()| std::future::ready(None::<Event>));
    counted.chain(written).boxed()
}

impl crate::Server {
    /// Counts what `caller` used in the usage meter (written by a later flush); nothing with
    /// `SLUICE_USAGE=off`.
    pub(crate) fn count(&self, caller: &super::Caller, used: Counts) {
        if let Some(meter) = &self.usage {
            meter.record(&caller.tenant, caller.key.as_deref(), used);
        }
    }

    /// [`Self::count`], written before returning (a buffered response ends a Lambda
    /// invocation, and work after it would be frozen). A failure keeps the counts for the
    /// next flush and is logged by the meter.
    pub(crate) async fn count_now(&self, caller: &super::Caller, used: Counts) {
        self.count(caller, used);
        if let Some(meter) = &self.usage {
            let _ = meter.flush().await;
        }
    }
}
