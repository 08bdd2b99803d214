//! Usage: what each tenant, and each of its API keys, consumed per UTC day, and where it is
//! written (the boundary the usage stores implement: a JSON file for `sluice serve`, a
//! DynamoDB table on Lambda). The meter that counts and the budgets are `sluice-core`'s.

use std::path::PathBuf;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use thiserror::Error;
pub use time::{Date, Month};

use crate::Tenant;

/// Declares [`Counts`] once: its fields, their names, and adding two together.
macro_rules! counters {
    ($( $(#[doc = $doc:expr])* $field:ident ),* $(,)?) => {
        /// What was used, in one row (a tenant, a key, a day) or in total. Every field adds up.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct Counts { $( $(#[doc = $doc])* pub $field: u64, )* }

        impl Counts {
            /// The counters' names, as the API, the file and the table spell them.
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// Each counter with its name.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field)),*]
            }

            /// Sets the counter `name`; `false` when there is none of that name.
            pub fn set(&mut self, name: &str, value: u64) -> bool {
                match name {
                    $(stringify!($field) => self.$field = value,)*
                    _ => return false,
                }
                true
            }

            /// Adds `other` to these counts (saturating: a counter never wraps).
            pub fn add(&mut self, other: &Counts) {
                $(self.$field = self.$field.saturating_add(other.$field);)*
            }
        }
    };
}

counters! {
    /// Answers that ended with `done` (cache hits included).
    answers,
    /// Answers served from the cache.
    cache_hits,
    /// Searches (`POST /v1/search`): sources without an answer; no token is spent.
    searches,
    /// Prompt tokens sent to the LLM (the upstream's count, else Sluice's estimate).
    prompt_tokens,
    /// Tokens the LLM generated (for a stream cut short: the token events it sent).
    completion_tokens,
    /// Tokens replayed from the cache (no LLM spent them; not budgeted).
    cached_tokens,
    /// Calls of the tenant's rerank component.
    component_calls,
    /// Fuel (about one per WebAssembly instruction) those calls burnt.
    component_fuel,
    /// Ingest requests (and S3 uploads) that stored documents.
    ingests,
    /// Documents stored.
    documents,
    /// Chunks embedded and stored.
    chunks,
    /// Ratings of answers (`POST /v1/feedback`), up and down.
    feedback,
}

impl Counts {
    /// The tokens a budget counts: prompt and completion (cached answers spend none).
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// Whether nothing was counted.
    pub fn is_zero(&self) -> bool {
        *self == Counts::default()
    }
}

/// One row of usage: a tenant, one of its keys (`None`: requests without a key — auth off,
/// or the ingest function's S3 uploads), a UTC day.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UsageKey {
    /// The tenant.
    pub tenant: Tenant,
    /// The key's id ([`crate::auth::key_id`]), if a key was used.
    pub key: Option<String>,
    /// The UTC day.
    pub day: Date,
}

/// A row and its counts.
pub type Row = (UsageKey, Counts);

/// Why usage could not be read or written.
#[derive(Debug, Error)]
pub enum UsageError {
    /// The store could not be reached, or failed.
    #[error("usage store unavailable: {0}")]
    Unavailable(String),
    /// The usage file is unreadable or malformed.
    #[error("usage file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Rows a store did not write, and why; the [`Meter`] keeps them for the next flush.
#[derive(Debug)]
pub struct Unwritten {
    /// The rows not written (none of their counts were added).
    pub rows: Vec<Row>,
    /// Why.
    pub error: UsageError,
}

/// Where usage is kept: rows added to atomically, read back by tenant and days.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Adds each row's counts to what is stored for its key (a missing row counts from 0).
    async fn add(&self, rows: &[Row]) -> Result<(), Unwritten>;
    /// Every row of `tenant` from day `from` to day `to`, both included.
    async fn read(&self, tenant: &Tenant, from: Date, to: Date) -> Result<Vec<Row>, UsageError>;
}

/// `YYYY-MM-DD`.
pub fn day_string(day: Date) -> String {
    format!(
        "{:04}-{:02}-{:02}",
        day.year(),
        u8::from(day.month()),
        day.day()
    )
}

/// The day `YYYY-MM-DD` names, if it is one.
pub fn parse_day(text: &str) -> Option<Date> {
    let mut parts = text.trim().splitn(3, '-');
    let mut next = |len: usize| {
        parts
            .next()
            .filter(|p| p.len() == len && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<u16>().ok())
    };
    let (year, month, day) = (next(4)?, next(2)?, next(2)?);
    let month = time::Month::try_from(u8::try_from(month).ok()?).ok()?;
    Date::from_calendar_date(i32::from(year), month, u8::try_from(day).ok()?).ok()
}
