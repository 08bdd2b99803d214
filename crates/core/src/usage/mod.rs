//! Usage: what each tenant, and each of its API keys, consumed per UTC day — answers, cache
//! hits, tokens, component calls and fuel, ingested documents and chunks — and the monthly
//! token budgets checked against it.
//!
//! The wire records what each answer and ingest used into a process-wide [`Meter`], in
//! memory; [`Meter::flush`] writes what it holds to a [`UsageStore`] as one batch of
//! additions (a JSON file in the data folder for `sluice serve`, `sluice-local`'s `LocalUsage`; a DynamoDB
//! table on Lambda, `sluice-aws`), after the answer's last event, never before its first
//! token. A failed write keeps the counts for the next flush: losing the store never fails an
//! answer.
//!
//! **Budgets.** A tenant (`SLUICE_TENANT_TOKEN_BUDGETS`) or a key (`token_budget`) may have a
//! monthly budget of tokens (prompt + completion; a cached answer spends none).
//! [`Meter::reserve`] decides from memory alone: the month's totals as last read from the
//! store (read again in the background once older than `SLUICE_USAGE_REFRESH_MS`), plus what
//! this process has counted since, plus what its answers in flight hold. An admitted answer
//! holds the most it can spend (the model's context window: prompt and completion share it)
//! until its usage is counted, so answers started together cannot pass a budget together:
//! an answer starts only while used + held is under the budget, and a process overshoots by
//! at most one answer, however many arrive at once. Other processes' use since the last read
//! is unseen, so `n` environments can together pass a budget by at most what `n - 1` of them
//! spend in one refresh interval, plus one answer each.
//!
//! - this file: what an answer or an ingest counts, and the calendar of budgets;
//! - `meter`: [`Meter`], the process-wide counter that flushes to a [`UsageStore`] and keeps
//!   budgets.

mod meter;

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use sluice_contract::usage::*;

use sluice_contract::sse::{Done, Timings};

pub use meter::{Hold, MAX_PENDING, Meter, MeterSettings, OverBudget, STORE_TIMEOUT};

/// What one answer used: its `done` when it ended with one; else (an `error`, or a client
/// that went away) the `streamed` token events it sent and — once the LLM has sent one,
/// so it has read the prompt — `prompt`, the prompt's tokens as `meta` counted them (the
/// upstream's own count never came). `cache_hit` is `meta.cache`; `timings` the last
/// known.
pub fn counts_of_answer(
    done: Option<&Done>,
    cache_hit: bool,
    streamed: u64,
    prompt: u64,
    timings: &Timings,
) -> Counts {
    let mut c = Counts {
        component_calls: u64::from(timings.rerank_ms.is_some()),
        component_fuel: timings.rerank_fuel.unwrap_or(0),
        ..Counts::default()
    };
    match done {
        Some(d) if d.cached || cache_hit => {
            c.answers = 1;
            c.cache_hits = 1;
            c.cached_tokens = d.token_count;
        }
        Some(d) => {
            c.answers = 1;
            c.prompt_tokens = d.prompt_tokens;
            c.completion_tokens = d.token_count;
        }
        None if cache_hit => c.cached_tokens = streamed,
        None => {
            c.completion_tokens = streamed;
            if streamed > 0 {
                c.prompt_tokens = prompt;
            }
        }
    }
    c
}

/// What one ingest stored.
pub fn counts_of_ingest(report: &sluice_contract::document::IngestReport) -> Counts {
    Counts {
        ingests: 1,
        // What was stored: a document sent again unchanged costs nothing.
        documents: (report.documents - report.unchanged) as u64,
        chunks: report.chunks as u64,
        ..Counts::default()
    }
}

/// Today in UTC.
pub fn today() -> Date {
    time::OffsetDateTime::now_utc().date()
}

/// The first day of `day`'s month.
pub fn month_start(day: Date) -> Date {
    day.replace_day(1).unwrap_or(day)
}

/// The first day of the month after `day`'s: when a monthly budget starts again.
pub fn next_month(day: Date) -> Date {
    let first = month_start(day);
    let (year, month) = match first.month() {
        time::Month::December => (first.year() + 1, time::Month::January),
        m => (first.year(), m.next()),
    };
    Date::from_calendar_date(year, month, 1).unwrap_or(first)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sums rows into one row per day (keys merged), in day order.
pub fn per_day(rows: &[Row]) -> BTreeMap<Date, Counts> {
    let mut days = BTreeMap::new();
    for (key, counts) in rows {
        days.entry(key.day)
            .or_insert_with(Counts::default)
            .add(counts);
    }
    days
}

#[cfg(test)]
mod tests;
