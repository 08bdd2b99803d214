//! When a cached entry may answer a request: at once, only if retrieval returns its sources,
//! or not at all — and which of several such entries are worth checking.

use sluice_contract::Tenant;
use sluice_contract::cache::{CacheEntry, Scope};

use super::Lookup;

/// A cached answer that may answer a request, and the cosine of its question to the
/// request's.
pub type Candidate = (Box<CacheEntry>, f32);

/// Most entries one request's sources are checked against (each check compares digests in
/// memory, after the retrieval a miss runs anyway).
pub const MAX_VERIFIED: usize = 8;

/// `a`'s candidates, then `b`'s, at most [`MAX_VERIFIED`], leaving out one whose sources an
/// earlier one already has (the same entry found twice, or an answer of several users made
/// from the same sources): the check would say the same.
pub fn joined(a: Vec<Candidate>, b: Vec<Candidate>) -> Vec<Candidate> {
    let mut kept: Vec<Candidate> = Vec::with_capacity(MAX_VERIFIED);
    for candidate in a.into_iter().chain(b) {
        if kept.len() == MAX_VERIFIED {
            break;
        }
        let cited = &candidate.0.answer.cited;
        if !kept.iter().any(|(e, _)| e.answer.cited == *cited) {
            kept.push(candidate);
        }
    }
    kept
}

/// How an entry that fits a request may answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fit {
    /// Made under the corpus version in use: at once.
    Now,
    /// Made under an earlier one, or for other principals: if retrieval returns its sources.
    IfSourcesAgree,
}

impl Fit {
    pub(super) fn lookup(self, entry: CacheEntry, similarity: f32) -> Lookup {
        let entry = Box::new(entry);
        match self {
            Fit::Now => Lookup::Hit { entry, similarity },
            Fit::IfSourcesAgree => Lookup::Verify {
                candidates: vec![(entry, similarity)],
            },
        }
    }
}

/// Whether `entry` may answer a request of `tenant` made under `scope` at `now`, and how.
/// An entry made under a later corpus version than the request's (read before a change that
/// another process has since answered under) does not.
pub(super) fn fit(entry: &CacheEntry, tenant: &Tenant, scope: &Scope, now: u64) -> Option<Fit> {
    let made = &entry.scope;
    if entry.tenant != *tenant
        || !made.same_but_version_and_access(scope)
        || entry.expires_at <= now
    {
        return None;
    }
    match made.corpus_version.cmp(&scope.corpus_version) {
        std::cmp::Ordering::Equal if made.access == scope.access => Some(Fit::Now),
        std::cmp::Ordering::Equal | std::cmp::Ordering::Less => Some(Fit::IfSourcesAgree),
        std::cmp::Ordering::Greater => None,
    }
}
