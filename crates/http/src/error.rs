//! Errors as clients see them: `{"error": {"code", "message"}}` with the code's status
//! (and `details` where the code has more to say).

use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sluice_contract::codes::{Code, ErrorCode};
use sluice_contract::components::ComponentError;

use crate::quota::Limited;

/// An error answered as `{"error": {"code", "message"}}`, with the status of its code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// Stable machine-readable code; it decides the status.
    pub code: Code,
    /// What is wrong, for people.
    pub message: String,
    /// When to try again (`Retry-After`, whole seconds), for 429 and 503.
    pub retry_after: Option<Duration>,
    /// What the error is about, as JSON, where a message alone would not do (a quality gate's
    /// figures and questions): the body's `error.details`.
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    /// An error with `code`'s status.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after: None,
            details: None,
        }
    }

    /// A domain error as clients see it: its code ([`ErrorCode`]) and its message.
    pub fn of(e: &impl ErrorCode) -> Self {
        Self::new(e.code(), e.to_string())
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

/// The router's own extractors refuse a request as JSON too: a path segment that is not UTF-8
/// once decoded, a query string that does not read as the route's parameters.
impl From<axum::extract::rejection::PathRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::PathRejection) -> Self {
        ApiError::new(
            Code::InvalidRequest,
            format!("the path cannot be read: {}", rejection.body_text()),
        )
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> Self {
        ApiError::new(
            Code::InvalidRequest,
            format!("the query string cannot be read: {}", rejection.body_text()),
        )
    }
}

/// Refuses a query string that names a parameter twice: which of the two was meant is not
/// for the server to guess.
pub(crate) fn once_each(params: &[(String, String)]) -> Result<(), ApiError> {
    let mut seen = std::collections::HashSet::new();
    match params.iter().find(|(name, _)| !seen.insert(name.as_str())) {
        Some((name, _)) => Err(ApiError::new(
            Code::InvalidRequest,
            format!("the query parameter {name:?} is given more than once"),
        )),
        None => Ok(()),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut body = json!({"error": {"code": self.code, "message": self.message}});
        if let Some(details) = self.details {
            body["error"]["details"] = details;
        }
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        if let Some(after) = self.retry_after {
            let secs = after.as_secs_f64().ceil().max(1.0) as u64;
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"sluice\""),
            );
        }
        response
    }
}

impl From<Limited> for ApiError {
    fn from(l: Limited) -> Self {
        Self {
            retry_after: Some(l.retry_after),
            ..Self::new(l.code, l.message)
        }
    }
}

impl From<ComponentError> for ApiError {
    fn from(e: ComponentError) -> Self {
        if let ComponentError::Storage(m) = &e {
            tracing::error!(error = %m, "component storage failed");
        }
        ApiError::of(&e)
    }
}
