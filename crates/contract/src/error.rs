//! Error types at the boundaries between the core and its adapters.

use thiserror::Error;

/// The embedding stage failed.
#[derive(Debug, Error)]
pub enum EmbedError {
    /// The model or tokenizer could not be loaded.
    #[error("embedding model could not be loaded: {0}")]
    Load(String),
    /// Running the model failed.
    #[error("embedding failed: {0}")]
    Inference(String),
}

/// The vector store failed.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The store could not be opened or created.
    #[error("vector store could not be opened: {0}")]
    Open(String),
    /// A read or write failed inside the store.
    #[error("vector store operation failed: {0}")]
    Backend(String),
    /// The request cannot be run as asked (a listing cursor the store never handed out).
    #[error("{0}")]
    Invalid(String),
    /// The store's circuit breaker is open: the call was not made.
    #[error("vector store circuit open: recent calls failed, retrying after the cool-down")]
    CircuitOpen,
}

/// The LLM upstream failed.
#[derive(Debug, Clone, Error)]
pub enum LlmError {
    /// No connection could be made, or the request could not be sent.
    #[error("LLM endpoint unreachable: {0}")]
    Unavailable(String),
    /// The upstream answered with a non-success status.
    #[error("LLM endpoint answered {status}: {body}")]
    Status {
        /// HTTP status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// No token arrived in time (first token or between tokens).
    #[error("LLM {0} timeout")]
    Timeout(&'static str),
    /// The stream broke or carried something that is not an OpenAI chunk.
    #[error("LLM stream failed: {0}")]
    Stream(String),
}

impl LlmError {
    /// What a client is told (the whole error, with the endpoint's address and what it said,
    /// is for the operator's log): the kind of failure and, for an answer, its status only.
    pub fn public(&self) -> String {
        match self {
            LlmError::Unavailable(_) => "the LLM cannot be reached".into(),
            LlmError::Status { status, .. } => format!("the LLM answered {status}"),
            LlmError::Timeout(_) => self.to_string(),
            LlmError::Stream(_) => "the LLM's stream broke".into(),
        }
    }

    /// Whether a client may retry the same request and expect it to work.
    pub fn retryable(&self) -> bool {
        match self {
            LlmError::Unavailable(_) | LlmError::Timeout(_) => true,
            LlmError::Status { status, .. } => *status == 429 || *status >= 500,
            LlmError::Stream(_) => true,
        }
    }
}

/// Ingestion failed.
#[derive(Debug, Error)]
pub enum IngestError {
    /// A document or file is malformed; the message says which and why.
    #[error("{0}")]
    Invalid(String),
    /// A file of a type Sluice does not read.
    #[error("{0}")]
    Unsupported(String),
    /// A PDF without a text layer.
    #[error("{0}")]
    NoTextLayer(String),
    /// A PDF that needs a password.
    #[error("{0}")]
    Encrypted(String),
    /// A file its parser failed on, or ran out of time on.
    #[error("{0}")]
    Unreadable(String),
    /// The request is over a limit (`SLUICE_MAX_DOCUMENTS`, `SLUICE_MAX_CHUNKS`, or a cap of
    /// file conversion); nothing was written.
    #[error("{0}")]
    TooLarge(String),
    /// A key bound to a filter sent a document whose metadata does not pass it; nothing was
    /// written.
    #[error("{0}")]
    OutsideScope(String),
    /// A key bound to a filter sent a document with the id of one it cannot see (outside its
    /// filter): to that key the id does not exist, so it cannot be replaced; nothing was
    /// written.
    #[error("{0}")]
    HiddenId(String),
    /// Embedding the chunks failed.
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// Writing to the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The answer cache failed. The pipeline treats every cache error as a miss.
#[derive(Debug, Error)]
pub enum CacheError {
    /// The backend could not be reached or refused the request.
    #[error("cache backend failed: {0}")]
    Backend(String),
    /// The entry is over the backend's item size limit, so it is not cached.
    #[error("cache entry of {bytes} bytes is over the {limit}-byte item limit")]
    TooLarge {
        /// Size of the entry.
        bytes: usize,
        /// The backend's limit.
        limit: usize,
    },
    /// The backend is not set up (no table, wrong schema); the message says what to do.
    #[error("{0}")]
    Setup(String),
}

impl crate::codes::ErrorCode for StoreError {
    fn code(&self) -> crate::codes::Code {
        use crate::codes::Code;
        match self {
            // A listing cursor the store never handed out: the client's to fix.
            StoreError::Invalid(_) => Code::InvalidPage,
            StoreError::Open(_) | StoreError::Backend(_) | StoreError::CircuitOpen => {
                Code::StoreUnavailable
            }
        }
    }
}

impl crate::codes::ErrorCode for LlmError {
    /// Before the first token; a failure after it is `llm_stream_failed` whatever its cause.
    fn code(&self) -> crate::codes::Code {
        use crate::codes::Code;
        match self {
            LlmError::Unavailable(_) => Code::LlmUnavailable,
            // Overloaded or failing upstream: another try may pass.
            LlmError::Status { status, .. } if *status == 429 || *status >= 500 => {
                Code::LlmUnavailable
            }
            LlmError::Status { .. } => Code::LlmRejected,
            LlmError::Timeout(_) => Code::LlmTimeout,
            LlmError::Stream(_) => Code::LlmStreamFailed,
        }
    }
}

impl crate::codes::ErrorCode for CacheError {
    fn code(&self) -> crate::codes::Code {
        crate::codes::Code::CacheUnavailable
    }
}

impl crate::codes::ErrorCode for IngestError {
    fn code(&self) -> crate::codes::Code {
        use crate::codes::Code;
        match self {
            IngestError::Invalid(_) => Code::InvalidDocument,
            IngestError::Unsupported(_) => Code::UnsupportedFormat,
            IngestError::NoTextLayer(_) => Code::NoTextLayer,
            IngestError::Encrypted(_) => Code::EncryptedDocument,
            IngestError::Unreadable(_) => Code::UnreadableDocument,
            IngestError::TooLarge(_) => Code::IngestTooLarge,
            IngestError::OutsideScope(_) => Code::OutsideKeyFilter,
            // As for reading or deleting it: to this key the id does not exist.
            IngestError::HiddenId(_) => Code::UnknownDocument,
            IngestError::Embed(_) | IngestError::Store(_) => Code::IngestFailed,
        }
    }
}
