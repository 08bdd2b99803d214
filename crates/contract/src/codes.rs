//! Every code a client can see, in one place: the `code` of an error response or of an `error`
//! event, and the reasons of `meta.degraded`. An error code is one row: its meaning, its wire
//! name, its HTTP status (for an error response; a stream's code has one too, for the whole
//! OpenAI completion that failed) and whether the same request may succeed if sent again. The
//! wire name is the snake_case one, and it never changes: clients match on it. A domain
//! error says which code it is where it is declared ([`ErrorCode`]).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Declares a code enum: each variant with its wire name (and, for [`Code`], status and
/// retryability), the list of all of them, and the conversions to and from the wire.
macro_rules! wire_names {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[doc = $doc:expr])* $variant:ident = $wire:literal ),* $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $( $(#[doc = $doc])* $variant ),* }

        impl $name {
            /// Every value, in the order of the declaration.
            pub const ALL: &'static [$name] = &[ $($name::$variant),* ];

            /// The wire name.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire),* }
            }

            /// The value with this wire name.
            pub fn from_wire(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|c| c.as_str() == name)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = String::deserialize(d)?;
                Self::from_wire(&name).ok_or_else(|| {
                    serde::de::Error::custom(format!("unknown {}: {name:?}", stringify!($name)))
                })
            }
        }
    };
}

/// Declares [`Code`]: each row a code's meaning (its doc comment), wire name, HTTP status and
/// retryability, so that a new code is one row and the compiler asks for all four.
macro_rules! error_codes {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[doc = $doc:expr])* $variant:ident = ($wire:literal, $status:literal, $retry:literal) ),* $(,)?
        }
    ) => {
        wire_names! {
            $(#[$meta])*
            pub enum $name { $( $(#[doc = $doc])* $variant = $wire ),* }
        }

        impl $name {
            /// The HTTP status of an error response with this code.
            pub const fn status(self) -> u16 {
                match self { $($name::$variant => $status),* }
            }

            /// Whether sending the same request again may succeed.
            pub const fn retryable(self) -> bool {
                match self { $($name::$variant => $retry),* }
            }

            /// What the code means, in one line (its row's comment).
            pub fn meaning(self) -> &'static str {
                match self { $($name::$variant => concat!($($doc),*)),* }.trim()
            }
        }
    };
}

error_codes! {
    /// The `code` of an error response (`{"error": {"code", "message"}}`) or `error` event:
    /// one row each — its meaning, wire name, HTTP status, and whether the same request may
    /// succeed if sent again. The API reference's error table is these rows
    /// (`the_documented_error_table_is_these_rows`).
    pub enum Code {
        /// Not JSON, a field of the wrong type, or an unknown field.
        InvalidJson = ("invalid_json", 400, false),
        /// `query` absent (or a chat request without a user message).
        MissingQuery = ("missing_query", 400, false),
        /// `query` blank.
        EmptyQuery = ("empty_query", 400, false),
        /// `query` over the length limit.
        QueryTooLong = ("query_too_long", 400, false),
        /// `k` not a whole number from 1 to 50.
        InvalidK = ("invalid_k", 400, false),
        /// `retrieval_deadline_ms` out of range.
        InvalidDeadline = ("invalid_deadline", 400, false),
        /// `session_id` empty or too long.
        InvalidSessionId = ("invalid_session_id", 400, false),
        /// `cache` other than `auto` or `bypass`.
        InvalidCache = ("invalid_cache", 400, false),
        /// Empty batch, empty id or text, duplicate id, id over 256 characters, invalid `metadata`,
        /// a file that is not valid in its format.
        InvalidDocument = ("invalid_document", 400, false),
        /// A file of a type Sluice does not read (by its name's extension, or its `Content-Type`
        /// when it has no name); an `/mcp` request that is not `application/json`.
        UnsupportedFormat = ("unsupported_format", 415, false),
        /// A PDF whose pages carry no text (a scan: it needs OCR first).
        NoTextLayer = ("no_text_layer", 422, false),
        /// A PDF that opens only with a password.
        EncryptedDocument = ("encrypted_document", 422, false),
        /// A file its parser failed on (malformed: the message says so; the parser's own words go
        /// to the log), or took longer than `SLUICE_CONVERT_TIMEOUT_MS` over.
        UnreadableDocument = ("unreadable_document", 422, false),
        /// The path or query string cannot be read: a segment that is not UTF-8 once
        /// percent-decoded, a query parameter given twice or of the wrong form; on `sluice serve`,
        /// also a request head that cannot be parsed (a garbage request line, a `Content-Length`
        /// that is not a number).
        InvalidRequest = ("invalid_request", 400, false),
        /// A document listing's `limit` not a whole number from 1 to 1,000, an unknown query
        /// parameter, or a `cursor` no listing returned.
        InvalidPage = ("invalid_page", 400, false),
        /// `DELETE /v1/documents` without a `filter` (or `"all": true`) and `"confirm": true`.
        ConfirmationRequired = ("confirmation_required", 400, false),
        /// A `filter` that is not an object, names an unknown operator or compares a value of the
        /// wrong type.
        InvalidFilter = ("invalid_filter", 400, false),
        /// A `rerank_context` that is not an object of strings, or has more than 16 entries, a bad
        /// key, a value over 256 characters or more than 2,048 bytes.
        InvalidRerankContext = ("invalid_rerank_context", 400, false),
        /// A usage query's `from` or `to` not a day (`YYYY-MM-DD`), `from` after `to`, more than
        /// 366 days, or an unknown parameter.
        InvalidRange = ("invalid_range", 400, false),
        /// Bad `x-sluice-tenant` header.
        InvalidTenant = ("invalid_tenant", 400, false),
        /// An upload that is not an acceptable rerank component (the message says why).
        InvalidComponent = ("invalid_component", 400, false),
        /// A component whose functions are bigger than the compiler may be asked to compile
        /// (locals, blocks, nesting, their product; [Security](security.md#tenant-components));
        /// refused before compiling, nothing stored.
        ComponentTooComplex = ("component_too_complex", 422, false),
        /// A component upload's `label` that is empty, over 64 characters or holds control
        /// characters.
        InvalidLabel = ("invalid_label", 400, false),
        /// A component version named by a prefix of its hash that several versions begin
        /// with (the message lists them).
        AmbiguousVersion = ("ambiguous_version", 400, false),
        /// Activating a component version for a tenant whose settings hold a quality gate, on a
        /// process that cannot run the gate's set (one that serves no answers, such as the
        /// Lambda registry function), without a `gate_run` that stands for it: nothing is
        /// activated untried.
        QualityGateUnavailable = ("quality_gate_unavailable", 409, false),
        /// A chat completion asking for `n` other than 1.
        InvalidN = ("invalid_n", 400, false),
        /// A chat completion's `max_tokens` or `max_completion_tokens` not a whole number from 1.
        InvalidMaxTokens = ("invalid_max_tokens", 400, false),
        /// The request body could not be read (the client broke off mid-body).
        UnreadableBody = ("unreadable_body", 400, false),
        /// The request body did not arrive, whole, within `SLUICE_BODY_READ_TIMEOUT_MS` (a
        /// request's head that does not arrive within `SLUICE_HEADER_READ_TIMEOUT_MS` closes the
        /// connection without a response).
        BodyTimeout = ("body_timeout", 408, false),
        /// `sluice serve`: too many headers, or too large.
        HeadersTooLarge = ("headers_too_large", 431, false),
        /// `sluice serve`: a request URI longer than the server reads.
        UriTooLong = ("uri_too_long", 414, false),
        /// Auth on and no API key.
        MissingApiKey = ("missing_api_key", 401, false),
        /// An API key that is not valid.
        InvalidApiKey = ("invalid_api_key", 401, false),
        /// No `x-sluice-user` where the tenant's identity is `required`, or the key was made
        /// `--user-token` ([End users](#end-users)).
        MissingUserToken = ("missing_user_token", 401, false),
        /// An `x-sluice-user` token that does not verify — expired, not yet valid, another issuer
        /// or audience, a bad signature, a key the identity provider does not publish, an algorithm
        /// the key does not take, malformed, claims that are not principals — (the message says
        /// which), or one sent to a tenant without an identity.
        InvalidUserToken = ("invalid_user_token", 401, false),
        /// `x-sluice-tenant` names another tenant than the key's.
        ForbiddenTenant = ("forbidden_tenant", 403, false),
        /// The key lacks the route's permission, or `prompt` for `include_prompt`, or is bound to a
        /// filter and the route acts on the whole tenant (components, `usage:keys`) without the key
        /// being made `--tenant-wide`.
        PermissionDenied = ("permission_denied", 403, false),
        /// A key bound to a filter sent a document whose metadata does not pass it (nothing is
        /// written).
        OutsideKeyFilter = ("outside_key_filter", 403, false),
        /// A browser's request from a page of another origin (any `/v1` route).
        CrossOrigin = ("cross_origin", 403, false),
        /// `sluice serve`: a `Host` that is not one of `SLUICE_ALLOWED_HOSTS` (DNS rebinding).
        ForbiddenHost = ("forbidden_host", 403, false),
        /// Unknown route.
        NotFound = ("not_found", 404, false),
        /// A `PUT /v1/settings` document with an unknown field, a value of the wrong type or out of
        /// range, or instructions over their share of the prompt; the message starts with the field
        /// (`prompt.citations: …`); nothing stored.
        InvalidSettings = ("invalid_settings", 400, false),
        /// An evaluation set (`PUT /v1/evals/sets/{name}`) or run (`POST /v1/evals/runs`) that is
        /// not valid: an unknown field, a cap passed, a question an answer would refuse; the
        /// message starts with the field (`questions[3].documents[0]: …`); nothing stored or run.
        InvalidEvalSet = ("invalid_eval_set", 400, false),
        /// A `POST /v1/feedback` body that is not valid: no `request_id`, a `rating` other than
        /// `up` or `down`, a comment or expected source over its limit; the message names the
        /// field; nothing stored.
        InvalidFeedback = ("invalid_feedback", 400, false),
        /// A source (`PUT /v1/sources/{name}`) that is not valid: an unknown field, neither or both
        /// of `website` and `s3`, a URL Sluice does not fetch (not http or https, with a user
        /// name), a cap over the operator's; the message starts with the field; nothing stored.
        InvalidSource = ("invalid_source", 400, false),
        /// Activating, reading the log of or deleting a component version the tenant does not
        /// have (no version by that hash, prefix or label).
        UnknownVersion = ("unknown_version", 404, false),
        /// A document id the caller does not see: the tenant does not have it, or the key's
        /// filter or the end user's access hides it; also
        /// a bound key's ingest with the id of a document outside its filter (nothing is replaced).
        UnknownDocument = ("unknown_document", 404, false),
        /// An evaluation set or run the tenant does not have.
        UnknownEvalSet = ("unknown_eval_set", 404, false),
        /// A source, or a sync of one, the tenant does not have.
        UnknownSource = ("unknown_source", 404, false),
        /// Feedback on a `request_id` this server keeps no answer of: never answered, another
        /// tenant's, another end user's, or answered longer ago than answers are kept for.
        UnknownRequest = ("unknown_request", 404, false),
        /// An MCP tool this server does not have (a JSON-RPC error, `-32602`).
        UnknownTool = ("unknown_tool", 404, false),
        /// An MCP request with an `Mcp-Session-Id`: the server keeps no sessions and issued none.
        UnknownSession = ("unknown_session", 404, false),
        /// `DELETE /v1/cache` with `SLUICE_CACHE=off`.
        CacheDisabled = ("cache_disabled", 404, false),
        /// `GET /v1/usage` with `SLUICE_USAGE=off`.
        UsageDisabled = ("usage_disabled", 404, false),
        /// A component route on a deployment without tenant components.
        ComponentsDisabled = ("components_disabled", 404, false),
        /// `/v1/settings` in a process that keeps no tenant settings (one that serves no answers,
        /// or a Lambda function without `SLUICE_SETTINGS_TABLE`).
        SettingsDisabled = ("settings_disabled", 404, false),
        /// `/v1/evals/…` or `/v1/feedback` in a process that keeps no evaluation sets or
        /// ratings (one that serves no answers, or a Lambda function: they keep none yet).
        EvalsDisabled = ("evals_disabled", 404, false),
        /// `/v1/sources/…` in a process that keeps no sources or writes no documents (a Lambda
        /// function other than the ingest function, or one without a records table).
        SourcesDisabled = ("sources_disabled", 404, false),
        /// Wrong method on a known route.
        MethodNotAllowed = ("method_not_allowed", 405, false),
        /// An `/mcp` request whose `Accept` does not take both `application/json` and
        /// `text/event-stream`.
        NotAcceptable = ("not_acceptable", 406, false),
        /// Deleting the component version that is active (activate another, or deactivate the
        /// tenant's component, first).
        VersionActive = ("version_active", 409, false),
        /// A run started while the tenant has as many going as it may
        /// (`SLUICE_EVAL_RUNS_PER_TENANT`): wait for one to end, or cancel it.
        EvalRunActive = ("eval_run_active", 409, false),
        /// A sync asked for while one of the same source is going: wait for it, or cancel it.
        SyncRunning = ("sync_running", 409, false),
        /// Activating a component version or saving settings that the tenant's quality gate
        /// refuses: on the gate's set a figure drops by more than its `max_drop`, beyond the
        /// noise; `details` has the figures and the questions that lost most. Nothing changed.
        QualityRegression = ("quality_regression", 409, false),
        /// Body over `SLUICE_MAX_BODY_BYTES` (answers), `SLUICE_MAX_INGEST_BYTES` (documents) or 2
        /// MiB (components).
        BodyTooLarge = ("body_too_large", 413, false),
        /// More than `SLUICE_MAX_DOCUMENTS` documents or `SLUICE_MAX_CHUNKS` chunks in one ingest,
        /// chunking and embedding longer than `SLUICE_INGEST_TIMEOUT_MS`, or a file over a
        /// conversion cap (`SLUICE_MAX_PDF_PAGES`, `SLUICE_MAX_PDF_STREAM_BYTES`,
        /// `SLUICE_MAX_PDF_INFLATED_BYTES`, `SLUICE_MAX_DOCX_BYTES`, `SLUICE_MAX_HTML_DEPTH`,
        /// `SLUICE_MAX_TEXT_BYTES`); nothing written.
        IngestTooLarge = ("ingest_too_large", 413, false),
        /// A chat request's earlier turns and system messages over 512 KiB together, or more than
        /// 512 messages (what fits is still trimmed to the model's window, oldest turns first); or
        /// its system messages and question over half of the prompt's token budget (they are sent
        /// whole, so they must fit beside the instructions and the sources).
        ConversationTooLong = ("conversation_too_long", 413, false),
        /// The tenant is over its request rate.
        RateLimited = ("rate_limited", 429, true),
        /// The tenant has too many answers streaming.
        TooManyStreams = ("too_many_streams", 429, true),
        /// The key's or the tenant's monthly token budget is spent; `Retry-After` runs to the next
        /// month.
        BudgetExceeded = ("budget_exceeded", 429, false),
        /// The model or the store failed during an ingest.
        IngestFailed = ("ingest_failed", 500, false),
        /// The component storage (folder, or S3 and DynamoDB) failed.
        StorageFailed = ("storage_failed", 500, false),
        /// The vector store failed while listing, reading or deleting documents.
        StoreUnavailable = ("store_unavailable", 503, true),
        /// The component registry's work died (a bug: the log has it).
        Internal = ("internal", 500, false),
        /// `DELETE /v1/cache` while the cache backend is unreachable.
        CacheUnavailable = ("cache_unavailable", 503, true),
        /// `/v1/settings` while the settings store cannot be read or written.
        SettingsUnavailable = ("settings_unavailable", 503, true),
        /// `/v1/evals/…` or `/v1/feedback` while the store of sets, runs and ratings cannot be
        /// read or written.
        EvalsUnavailable = ("evals_unavailable", 503, true),
        /// `/v1/sources/…` while the store of sources and their reports cannot be read or
        /// written.
        SourcesUnavailable = ("sources_unavailable", 503, true),
        /// `GET /v1/usage` while the usage store cannot be read (with `Retry-After: 1`).
        UsageUnavailable = ("usage_unavailable", 503, true),
        /// The key table cannot be read (with `Retry-After: 1`).
        AuthUnavailable = ("auth_unavailable", 503, true),
        /// On a route that reads documents: the tenant's settings (which say who its end users are)
        /// cannot be read and were never read by this process, or its identity provider's keys
        /// cannot be fetched and none are held yet (with `Retry-After: 1`).
        IdentityUnavailable = ("identity_unavailable", 503, true),
        /// A non-streamed chat completion under `strict` grounding whose answer has a sentence no
        /// source supports (see [Evidence and the grounding
        /// verdict](#evidence-and-the-grounding-verdict)).
        Ungrounded = ("ungrounded", 422, false),
        /// The LLM refused the connection, or answered 429 or 5xx before the first token.
        LlmUnavailable = ("llm_unavailable", 503, true),
        /// The LLM refused the request (another 4xx).
        LlmRejected = ("llm_rejected", 502, false),
        /// No first token from the LLM in time.
        LlmTimeout = ("llm_timeout", 504, true),
        /// The LLM's stream broke, stalled, carried garbage or ended without a finish reason.
        LlmStreamFailed = ("llm_stream_failed", 502, true),
        /// The entry point's time limit came before the answer ended (Lambda).
        DeadlineExceeded = ("deadline_exceeded", 504, true),
        /// The server is shutting down and its drain time is up.
        ShuttingDown = ("shutting_down", 503, true),
    }
}

wire_names! {
    /// Why an answer is not the full one (`meta.degraded`).
    pub enum Degraded {
        /// Embedding + retrieval did not finish within the retrieval deadline.
        RetrievalTimeout = "retrieval_timeout",
        /// Embedding or retrieval failed.
        RetrievalFailed = "retrieval_failed",
        /// The store's circuit breaker is open: retrieval was skipped without waiting.
        RetrievalCircuitOpen = "retrieval_circuit_open",
        /// Some sources were dropped to fit the prompt budget.
        ContextTruncated = "context_truncated",
        /// Some earlier turns of the conversation (the oldest) were left out of the prompt to
        /// fit its budget.
        HistoryTruncated = "history_truncated",
        /// Assembling the prompt (counting a long conversation's tokens) did not finish by the
        /// retrieval deadline: the question went to the LLM alone, without sources, earlier
        /// turns or the client's system message.
        PromptTimeout = "prompt_timeout",
        /// The tenant's rerank component failed (trap, limit, host budget, bad output) or ran
        /// past the deadline: fused order kept.
        RerankFailed = "rerank_failed",
        /// The tenant's prompt-assembly component failed (trap, limit, host budget, messages
        /// of the wrong shape or over the token budget) or ran past the deadline: the built-in
        /// prompt was sent.
        PromptComponentFailed = "prompt_component_failed",
        /// The tenant's corpus version was not read in time: the cache was neither read nor
        /// written (no entry could be proven fresh).
        CorpusVersionTimeout = "corpus_version_timeout",
        /// Reading the tenant's corpus version failed: the cache was neither read nor written.
        CorpusVersionFailed = "corpus_version_failed",
        /// The tenant's active rerank component was not known in time: fused order kept, the
        /// cache neither read nor written.
        ComponentTimeout = "component_timeout",
        /// Looking up the tenant's active rerank component failed: fused order kept, the cache
        /// neither read nor written.
        ComponentFailed = "component_failed",
        /// Under `strict` grounding, a sentence of the answer no source supports (in
        /// `done.degraded`, and the answer is not cached).
        Ungrounded = "ungrounded",
    }
}

/// A domain error that is one of the [`Code`]s clients see: its code said once, next to the
/// error's type, for every door that reports it.
pub trait ErrorCode: fmt::Display {
    /// The code clients see for this error.
    fn code(&self) -> Code;
}

/// The API reference's error table, one row per [`Code`] in the order of their statuses:
/// what `docs/api.md` shows under "Errors".
pub fn error_table() -> String {
    let mut codes = Code::ALL.to_vec();
    codes.sort_by_key(|c| c.status());
    let mut table = String::from("| status | code | retry | meaning |\n|---|---|---|---|\n");
    for code in codes {
        let retry = if code.retryable() { "yes" } else { "no" };
        table.push_str(&format!(
            "| {} | `{}` | {retry} | {} |\n",
            code.status(),
            code.as_str(),
            code.meaning()
        ));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_unique_snake_case_and_round_trip() {
        let names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "a wire name twice");
        for code in Code::ALL {
            let name = code.as_str();
            assert!(
                name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{name}"
            );
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<Code>(&json).unwrap(), *code);
        }
        for reason in Degraded::ALL {
            let json = serde_json::to_string(reason).unwrap();
            assert_eq!(serde_json::from_str::<Degraded>(&json).unwrap(), *reason);
        }
        assert!(serde_json::from_str::<Code>("\"made_up\"").is_err());
    }

    #[test]
    fn statuses_are_client_errors_for_requests_and_server_errors_for_dependencies() {
        assert_eq!(Code::InvalidJson.status(), 400);
        assert_eq!(Code::RateLimited.status(), 429);
        assert_eq!(Code::LlmTimeout.status(), 504);
        for code in Code::ALL {
            let status = code.status();
            assert!((400..600).contains(&status), "{code}");
            if code.retryable() {
                assert!(
                    status == 429 || status >= 500,
                    "{code} is retryable at {status}"
                );
            }
        }
        assert!(!Code::LlmRejected.retryable());
    }

    /// The API reference, where every code and degraded reason is documented.
    const API_DOC: &str = include_str!("../../../docs/api.md");

    #[test]
    fn the_documented_error_table_is_these_rows() {
        let table = error_table();
        assert!(
            API_DOC.contains(&table),
            "docs/api.md's error table is not the codes' rows; put this under \"## Errors\":\n{table}"
        );
        for code in Code::ALL {
            assert!(!code.meaning().is_empty(), "{code} has no meaning");
            assert!(
                !code.meaning().contains('|'),
                "{code}'s meaning breaks the table"
            );
        }
    }

    #[test]
    fn the_api_reference_explains_every_degraded_reason() {
        for reason in Degraded::ALL {
            assert!(
                API_DOC.contains(&format!("`{reason}`")),
                "docs/api.md does not name the degraded reason {reason}"
            );
        }
    }
}
