//! A tenant's business rules, as a 0.2 component:
//!
//! - **Audience.** A document whose `audience` metadata (a string or a list of strings) does
//!   not include the request context's `plan` is dropped; one without `audience` is for
//!   everyone. A request without a `plan` sees only the documents for everyone.
//! - **Recency.** Each kept candidate with an `updated_at` date gains up to
//!   [`RECENCY_WEIGHT`], halved for every [`HALF_LIFE_DAYS`] it is older than the newest
//!   candidate's date (the sandbox has no clock: "now" is the freshest document retrieved).
//!   The context's `half_life_days` (a positive number) replaces the default.

use sluice_rerank_sdk::{Candidate, Context, Guest, Ranking, context, export_reranker, ranking};

/// Largest recency bonus. RRF scores are about 1/60 and one rank apart differs by about
/// 1/3600 near the top, so the freshest document climbs a few ranks, never from the bottom.
const RECENCY_WEIGHT: f32 = 0.002;
/// Age at which the bonus halves, by default.
const HALF_LIFE_DAYS: f64 = 180.0;
const DAY: f64 = 86_400.0;

struct Policy;

impl Guest for Policy {
    fn rerank(_query: String, ctx: Context, candidates: Vec<Candidate>) -> Result<Ranking, String> {
        let plan = context(&ctx, "plan");
        let half_life = match context(&ctx, "half_life_days") {
            None => HALF_LIFE_DAYS,
            Some(v) => match v.parse::<f64>() {
                Ok(days) if days.is_finite() && days > 0.0 => days,
                _ => return Err(format!("half_life_days is {v:?}; it must be a positive number of days")),
            },
        };
        let newest = candidates
            .iter()
            .filter_map(|c| c.date("updated_at"))
            .fold(f64::NEG_INFINITY, f64::max);
        Ok(ranking(candidates.iter().map(|c| {
            let allowed = match c.strings("audience") {
                None => true,
                Some(audience) => plan.is_some_and(|p| audience.iter().any(|a| a == p)),
            };
            allowed.then(|| {
                let bonus = c.date("updated_at").map_or(0.0, |at| {
                    let age_days = (newest - at).max(0.0) / DAY;
                    RECENCY_WEIGHT * 0.5f64.powf(age_days / half_life) as f32
                });
                c.score + bonus
            })
        })))
    }
}

export_reranker!(Policy);
