//! Every code a client can see, in one place: the `code` of an error response or of an `error`
//! event, and the reasons of `meta.degraded`. An error code carries its HTTP status (for an
//! error response; a stream's code has one too, for the whole OpenAI completion that failed)
//! and whether the same request may succeed if sent again. The wire name is the snake_case
//! one, and it never changes: clients match on it.

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

wire_names! {
    /// The `code` of an error response (`{"error": {"code", "message"}}`) or `error` event.
    pub enum Code {
        /// Not JSON, a field of the wrong type, or an unknown field.
        InvalidJson = "invalid_json",
        /// `query` absent (or a chat request without a user message).
        MissingQuery = "missing_query",
        /// `query` blank.
        EmptyQuery = "empty_query",
        /// `query` over the length limit.
        QueryTooLong = "query_too_long",
        /// `k` not a whole number in range.
        InvalidK = "invalid_k",
        /// `retrieval_deadline_ms` out of range.
        InvalidDeadline = "invalid_deadline",
        /// `session_id` empty or too long.
        InvalidSessionId = "invalid_session_id",
        /// `cache` other than `auto` or `bypass`.
        InvalidCache = "invalid_cache",
        /// A document or file that cannot be ingested.
        InvalidDocument = "invalid_document",
        /// A file of a type Sluice does not read (by its name's extension, or the
        /// `Content-Type` when no name is given).
        UnsupportedFormat = "unsupported_format",
        /// A PDF with no text layer (a scan): it needs OCR before it can be ingested.
        NoTextLayer = "no_text_layer",
        /// A PDF that opens only with a password.
        EncryptedDocument = "encrypted_document",
        /// A file its parser failed on or took too long over (`SLUICE_CONVERT_TIMEOUT_MS`).
        UnreadableDocument = "unreadable_document",
        /// The path or query string cannot be read (a segment that is not UTF-8 once
        /// percent-decoded, a parameter given twice or of the wrong form).
        InvalidRequest = "invalid_request",
        /// A document listing's `limit` or `cursor` that is not valid.
        InvalidPage = "invalid_page",
        /// A deletion by filter without `"confirm": true`, or without a filter.
        ConfirmationRequired = "confirmation_required",
        /// A metadata `filter` that is not valid: not an object, an unknown operator, a value
        /// of the wrong type.
        InvalidFilter = "invalid_filter",
        /// A `rerank_context` that is not a small object of strings (too many entries, a bad
        /// key, a value too long or not a string).
        InvalidRerankContext = "invalid_rerank_context",
        /// A usage query's `from` or `to` that is not a day, or a range that is backwards or
        /// too long.
        InvalidRange = "invalid_range",
        /// A bad `x-sluice-tenant` header.
        InvalidTenant = "invalid_tenant",
        /// An upload that is not an acceptable rerank component.
        InvalidComponent = "invalid_component",
        /// A component whose code is too big to compile within the limits (locals, blocks,
        /// nesting per function; see docs/security.md).
        ComponentTooComplex = "component_too_complex",
        /// A component upload's `label` that is empty, too long or holds control characters.
        InvalidLabel = "invalid_label",
        /// A chat completion asking for `n` other than 1.
        InvalidN = "invalid_n",
        /// A chat completion's `max_tokens` (or `max_completion_tokens`) not a whole number
        /// from 1.
        InvalidMaxTokens = "invalid_max_tokens",
        /// The request body could not be read.
        UnreadableBody = "unreadable_body",
        /// The request body did not arrive within `SLUICE_BODY_READ_TIMEOUT_MS`.
        BodyTimeout = "body_timeout",
        /// The request's headers are too many or too large (hyper's cap, about 400 KiB or 100
        /// headers).
        HeadersTooLarge = "headers_too_large",
        /// The request's URI is longer than the server reads.
        UriTooLong = "uri_too_long",
        /// Auth on and no API key.
        MissingApiKey = "missing_api_key",
        /// An API key that is not valid.
        InvalidApiKey = "invalid_api_key",
        /// The tenant requires a user token (`x-sluice-user`), or the key must always carry
        /// one, and the request has none.
        MissingUserToken = "missing_user_token",
        /// A user token that does not verify: expired, not yet valid, another issuer or
        /// audience, a bad signature, an unknown key or algorithm, malformed; the message says
        /// which.
        InvalidUserToken = "invalid_user_token",
        /// `x-sluice-tenant` names another tenant than the key's.
        ForbiddenTenant = "forbidden_tenant",
        /// The key lacks the permission the request needs (or holds it, but is bound to a
        /// filter and the action reaches the whole tenant).
        PermissionDenied = "permission_denied",
        /// A key bound to a filter sent a document whose metadata does not pass it.
        OutsideKeyFilter = "outside_key_filter",
        /// A browser's request from a page of another origin.
        CrossOrigin = "cross_origin",
        /// A `Host` the server does not answer to.
        ForbiddenHost = "forbidden_host",
        /// An unknown route.
        NotFound = "not_found",
        /// A settings document with an unknown field or a value out of range; the message
        /// names the field.
        InvalidSettings = "invalid_settings",
        /// A component version the tenant does not have.
        UnknownVersion = "unknown_version",
        /// A document id the tenant (or the key's filter) does not have.
        UnknownDocument = "unknown_document",
        /// An MCP tool this server does not have (`tools/list` names those the key may call).
        UnknownTool = "unknown_tool",
        /// An MCP request with a session id: the server keeps no sessions, so it issued none
        /// (start again without one).
        UnknownSession = "unknown_session",
        /// The answer cache is off.
        CacheDisabled = "cache_disabled",
        /// This deployment does not count usage (`SLUICE_USAGE=off`).
        UsageDisabled = "usage_disabled",
        /// This deployment runs without tenant components.
        ComponentsDisabled = "components_disabled",
        /// This process keeps no tenant settings (a function that serves no answers, or one
        /// without `SLUICE_SETTINGS_TABLE`).
        SettingsDisabled = "settings_disabled",
        /// A wrong method on a known route.
        MethodNotAllowed = "method_not_allowed",
        /// A response of a type the request's `Accept` does not take (`/mcp` answers JSON and
        /// event streams: its clients must accept both).
        NotAcceptable = "not_acceptable",
        /// A deletion of the component version that is active (activate another, or
        /// deactivate, first).
        VersionActive = "version_active",
        /// A body over its cap.
        BodyTooLarge = "body_too_large",
        /// An ingest over its documents or chunks limit.
        IngestTooLarge = "ingest_too_large",
        /// A chat request whose conversation (earlier turns and system messages) is over its
        /// byte or message limit.
        ConversationTooLong = "conversation_too_long",
        /// The tenant is over its request rate.
        RateLimited = "rate_limited",
        /// The tenant has too many answers streaming.
        TooManyStreams = "too_many_streams",
        /// The key's or the tenant's monthly token budget is spent (until the next month).
        BudgetExceeded = "budget_exceeded",
        /// The model or the store failed during an ingest.
        IngestFailed = "ingest_failed",
        /// The component storage failed.
        StorageFailed = "storage_failed",
        /// The vector store failed while listing or deleting documents.
        StoreUnavailable = "store_unavailable",
        /// A bug: work that should not fail died.
        Internal = "internal",
        /// The answer cache cannot be reached.
        CacheUnavailable = "cache_unavailable",
        /// The tenant settings store could not be read or written.
        SettingsUnavailable = "settings_unavailable",
        /// The usage store cannot be read.
        UsageUnavailable = "usage_unavailable",
        /// The API keys cannot be checked.
        AuthUnavailable = "auth_unavailable",
        /// The tenant's identity provider's keys cannot be fetched (and none are known yet),
        /// or its identity settings cannot be read: a user token cannot be checked now.
        IdentityUnavailable = "identity_unavailable",
        /// Under `strict` grounding, an answer with a sentence no source supports, refused by a
        /// non-streaming route (the verdict is in the body).
        Ungrounded = "ungrounded",
        /// The LLM refused the connection, or answered 429 or 5xx before the first token.
        LlmUnavailable = "llm_unavailable",
        /// The LLM refused the request (another 4xx).
        LlmRejected = "llm_rejected",
        /// No first token from the LLM in time.
        LlmTimeout = "llm_timeout",
        /// The LLM's stream broke, stalled, carried garbage or ended without a finish reason.
        LlmStreamFailed = "llm_stream_failed",
        /// The entry point's time limit came before the answer ended (Lambda).
        DeadlineExceeded = "deadline_exceeded",
        /// The server is shutting down and its drain time is up.
        ShuttingDown = "shutting_down",
    }
}

impl Code {
    /// The HTTP status of an error response with this code.
    pub const fn status(self) -> u16 {
        use Code::*;
        match self {
            InvalidJson | MissingQuery | EmptyQuery | QueryTooLong | InvalidK | InvalidDeadline
            | InvalidSessionId | InvalidCache | InvalidDocument | InvalidRequest
            | InvalidFilter | InvalidTenant | InvalidComponent | InvalidN | InvalidMaxTokens
            | UnreadableBody | InvalidPage | ConfirmationRequired | InvalidRange
            | InvalidRerankContext | InvalidSettings | InvalidLabel => 400,
            MissingApiKey | InvalidApiKey | MissingUserToken | InvalidUserToken => 401,
            ForbiddenTenant | PermissionDenied | OutsideKeyFilter | CrossOrigin | ForbiddenHost => {
                403
            }
            NotFound | UnknownVersion | UnknownDocument | UnknownTool | UnknownSession
            | CacheDisabled | ComponentsDisabled | UsageDisabled | SettingsDisabled => 404,
            MethodNotAllowed => 405,
            NotAcceptable => 406,
            VersionActive => 409,
            BodyTimeout => 408,
            UriTooLong => 414,
            HeadersTooLarge => 431,
            UnsupportedFormat => 415,
            NoTextLayer | EncryptedDocument | UnreadableDocument | ComponentTooComplex
            | Ungrounded => 422,
            BodyTooLarge | IngestTooLarge | ConversationTooLong => 413,
            RateLimited | TooManyStreams | BudgetExceeded => 429,
            IngestFailed | StorageFailed | Internal => 500,
            LlmRejected | LlmStreamFailed => 502,
            CacheUnavailable | AuthUnavailable | IdentityUnavailable | LlmUnavailable
            | StoreUnavailable | UsageUnavailable | SettingsUnavailable | ShuttingDown => 503,
            LlmTimeout | DeadlineExceeded => 504,
        }
    }

    /// Whether sending the same request again may succeed.
    pub const fn retryable(self) -> bool {
        use Code::*;
        matches!(
            self,
            RateLimited
                | TooManyStreams
                | CacheUnavailable
                | AuthUnavailable
                | IdentityUnavailable
                | StoreUnavailable
                | UsageUnavailable
                | SettingsUnavailable
                | LlmUnavailable
                | LlmTimeout
                | LlmStreamFailed
                | DeadlineExceeded
                | ShuttingDown
        )
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

    /// The rows of the API reference's error table (`| status | code | when |`): each code
    /// with its status, several codes in a row separated by ` / `.
    fn documented_error_table() -> Vec<(String, u16)> {
        let table = API_DOC
            .split("\n## Errors")
            .nth(1)
            .expect("docs/api.md has an Errors section");
        table
            .lines()
            .skip_while(|l| !l.starts_with("| status | code |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .flat_map(|row| {
                let cells: Vec<&str> = row.split('|').map(str::trim).collect();
                let status: u16 = cells[1].parse().expect("a status in the first column");
                cells[2]
                    .split(" / ")
                    .map(|c| (c.trim_matches('`').to_string(), status))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn the_documented_error_table_lists_exactly_these_codes_with_their_statuses() {
        let rows = documented_error_table();
        let mut listed: Vec<&str> = rows.iter().map(|(c, _)| c.as_str()).collect();
        listed.sort();
        let mut declared: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        declared.sort();
        assert_eq!(listed, declared, "docs/api.md error table vs codes.rs");
        for (name, status) in &rows {
            let code = Code::from_wire(name).expect("declared");
            assert_eq!(code.status(), *status, "{name}'s status in docs/api.md");
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
