//! The service: what happens around the pipeline, once, whichever door a request came in by.
//! The doors — the REST routes, the OpenAI routes, MCP's tools, the Lambda entries — read
//! their transport into a [`Call`] and a typed request, and call the operations here; nothing
//! here knows HTTP.
//!
//! An operation runs in this order:
//!
//! 1. **Who is asking** ([`caller`]): the caller identified from its [`Credentials`], the
//!    permission checked, one request taken from its tenant's rate; for an operation that
//!    reads documents, the tenant's settings read once and the end user's token verified.
//! 2. **The request checked** ([`answer`]): the body's fields against their limits, with the
//!    tenant's settings and then the deployment's configuration as defaults; the key's filter
//!    ANDed with the request's.
//! 3. **Budgets and streams** ([`answer`]): the tenant's and the key's token budgets, a slot of
//!    the tenant's open streams, the call's deadline.
//! 4. **The pipeline or the store** (`sluice-core`): the answer as a stream of events, a
//!    search, a page of documents.
//! 5. **What it cost** ([`billing`]): the answer's usage counted from its own events, in the
//!    usage meter, and written before the stream ends.

pub(crate) mod answer;
pub(crate) mod billing;
pub(crate) mod caller;
pub mod documents;
pub(crate) mod evals;
pub(crate) mod feedback;
pub(crate) mod gate;
pub(crate) mod insights;
pub(crate) mod records;
pub mod sources;

use std::time::Instant;

pub(crate) use caller::{Caller, limited};

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
        .map_or(0, |d| d.as_millis() as u64)
}

/// The API key a call carries, as its door read it.
#[derive(Debug, Clone, Default)]
pub enum Key {
    /// None was sent.
    #[default]
    None,
    /// A key.
    Given(String),
    /// Something was sent that is not a key (the door says why): refused where auth is on.
    Unreadable(&'static str),
}

/// Who a call says it is: what [`Server::admit`](crate::Server) checks.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// The API key.
    pub key: Key,
    /// The tenant the call names (with auth on it must be the key's).
    pub tenant: Option<String>,
    /// The end user's token, as sent (an empty one is refused).
    pub user_token: Option<String>,
}

/// What a door knows of a call besides its request: who is asking, when it arrived, and what
/// its transport says about it.
#[derive(Debug, Clone)]
pub struct Call {
    /// Who is asking.
    pub credentials: Credentials,
    /// When the door received it: the retrieval deadline counts from here.
    pub received: Instant,
    /// The W3C `traceparent` it continues.
    pub traceparent: Option<String>,
    /// Whether it asked to neither read nor write the answer cache (`Cache-Control:
    /// no-cache`).
    pub no_cache: bool,
    /// The point an answer must have ended by (on Lambda: the invocation's deadline less a
    /// margin), whichever door the answer was asked through.
    pub ends_by: Option<tokio::time::Instant>,
}

impl Call {
    /// A call received now with `credentials`, and nothing else said.
    pub fn new(credentials: Credentials) -> Self {
        Self {
            credentials,
            received: Instant::now(),
            traceparent: None,
            no_cache: false,
            ends_by: None,
        }
    }
}
