//! Grounding: the sources' evidence sentences before `meta` (each source's `highlights`, and
//! `meta.extract`), and the verdict on the answer before `done` ([`crate::grounding`]).
//!
//! Both are CPU work of a millisecond or two, run on the blocking pool: on the async threads
//! they would hold up every other answer's tokens queued behind them.

use std::time::Instant;

use sluice_contract::grounding::{Grounding, GroundingMode};
use sluice_contract::sse::Timings;
use sluice_contract::stages::{Hit, SourceDoc};

use super::flow::ms;
use super::{AnswerRequest, Pipeline, Progress};
use crate::grounding;

impl Pipeline {
    /// Adds to `documents` (the sources of `hits`, in order) the sentences that best answer
    /// the question, and keeps the best of all in `progress` for `meta.extract` — unless the
    /// tenant's grounding is `off`, which does no grounding work at all.
    pub(super) async fn evidence(
        &self,
        request: &AnswerRequest,
        hits: &[Hit],
        documents: &mut [SourceDoc],
        progress: &mut Progress,
    ) {
        if hits.is_empty() || request.grounding(self.config.grounding) == GroundingMode::Off {
            return;
        }
        let started = Instant::now();
        let (question, texts, lexicon) = (request.query.clone(), texts(hits), self.lexicon.clone());
        let found = tokio::task::spawn_blocking(move || {
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            grounding::evidence(&question, &texts, lexicon.get())
        });
        // A panic in it costs the answer its highlights, nothing more.
        let Ok(found) = found.await else {
            return;
        };
        for (document, highlights) in documents.iter_mut().zip(found.highlights) {
            document.highlights = highlights;
        }
        progress.extract = found.extract;
        progress.timings.evidence_ms = Some(ms(started.elapsed()));
    }

    /// The verdict on `answer` over `hits`, unless the tenant's check is `off`.
    pub(super) async fn verdict(
        &self,
        mode: GroundingMode,
        answer: String,
        hits: &[Hit],
        timings: &mut Timings,
    ) -> Option<Grounding> {
        if mode == GroundingMode::Off {
            return None;
        }
        let started = Instant::now();
        let (texts, lexicon) = (texts(hits), self.lexicon.clone());
        let verdict = tokio::task::spawn_blocking(move || {
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            grounding::verdict(&answer, &texts, lexicon.get())
        });
        let verdict = verdict.await.ok()?;
        timings.grounding_ms = Some(ms(started.elapsed()));
        Some(verdict)
    }
}

/// The hits' texts, for work that outlives the borrow.
fn texts(hits: &[Hit]) -> Vec<String> {
    hits.iter().map(|h| h.text.clone()).collect()
}
