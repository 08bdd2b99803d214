//! Request bodies as the doors read them: whole, under a byte cap checked while reading and a
//! time limit for the whole body, then parsed as JSON with the problem named.

use axum::body::{Body, Bytes};
use serde::Deserialize;
use sluice_contract::codes::Code;

use crate::Server;
use crate::error::ApiError;

/// Reads the whole body, refusing (413) more than `limit` bytes.
pub(crate) async fn read_body(
    server: &Server,
    body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let within = server.limits.body_timeout;
    let too_large = || {
        ApiError::new(
            Code::BodyTooLarge,
            format!("request body is larger than {limit} bytes"),
        )
    };
    // A client that sends its body a byte at a time holds a task and a connection: the
    // whole body has `within` to arrive.
    let read = tokio::time::timeout(within, axum::body::to_bytes(body, limit))
        .await
        .map_err(|_| {
            ApiError::new(
                Code::BodyTimeout,
                format!(
                    "the request body did not arrive within {within:?} (SLUICE_BODY_READ_TIMEOUT_MS)"
                ),
            )
        })?;
    read.map_err(|e| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(s) = source {
            if s.is::<http_body_util::LengthLimitError>() {
                return too_large();
            }
            source = s.source();
        }
        ApiError::new(
            Code::UnreadableBody,
            format!("could not read the request body: {e}"),
        )
    })
}

/// Parses JSON, naming the problem (syntax, or a field of the wrong type) in the message.
pub(crate) fn parse_json<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            Code::InvalidJson,
            format!("request body is not valid JSON for this route: {e}"),
        )
    })
}
