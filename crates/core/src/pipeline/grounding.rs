//! Grounding: the sources' evidence sentences before `meta` (each source's `highlights`, and
//! `meta.extract`), and the verdict on the answer before `done` ([`crate::grounding`]).

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
    pub(super) fn evidence(
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
        let texts: Vec<&str> = hits.iter().map(|h| h.text.as_str()).collect();
        let found = grounding::evidence(&request.query, &texts, self.lexicon.get());
        for (document, highlights) in documents.iter_mut().zip(found.highlights) {
            document.highlights = highlights;
        }
        progress.extract = found.extract;
        progress.timings.evidence_ms = Some(ms(started.elapsed()));
    }

    /// The verdict on `answer` over `hits`, unless the tenant's check is `off`.
    pub(super) fn verdict(
        &self,
        mode: GroundingMode,
        answer: &str,
        hits: &[Hit],
        timings: &mut Timings,
    ) -> Option<Grounding> {
        if mode == GroundingMode::Off {
            return None;
        }
        let started = Instant::now();
        let texts: Vec<&str> = hits.iter().map(|h| h.text.as_str()).collect();
        let verdict = grounding::verdict(answer, &texts, self.lexicon.get());
        timings.grounding_ms = Some(ms(started.elapsed()));
        Some(verdict)
    }
}
