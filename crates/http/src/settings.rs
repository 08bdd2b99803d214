//! `GET` and `PUT /v1/settings`: a tenant's own settings — its defaults of `k`, the
//! retrieval deadline, the fusion, the cache threshold and `max_tokens`, and its assistant's
//! instructions — which every key's answers then follow. Both need the `settings` permission,
//! which a key bound to a filter holds only when it was made tenant-wide (the settings shape
//! every key's answers).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Json, Response};
use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::auth::Permission;
use sluice_contract::codes::Code;
use sluice_contract::tenant_settings::{StoredSettings, TenantSettings};
use sluice_core::tenants::Tenants;

use crate::Server;
use crate::admit::admit;
use crate::body::{parse_json, read_body};
use crate::error::ApiError;

/// The share of the prompt's token budget the tenant's instructions may take: the rest is for
/// the sources, the conversation and the question.
const INSTRUCTIONS_SHARE: usize = 4;

/// The settings store, or 404 `settings_disabled` in a process that keeps none.
fn tenants(server: &Server) -> Result<&Arc<Tenants>, ApiError> {
    server.tenants.as_ref().ok_or_else(|| {
        ApiError::new(
            Code::SettingsDisabled,
            "this process keeps no tenant settings (it serves no answers, or \
             SLUICE_SETTINGS_TABLE is not set)",
        )
    })
}

fn shown(tenant: &Tenant, stored: Option<&StoredSettings>) -> Value {
    match stored {
        Some(s) => json!({
            "tenant": tenant,
            "version": s.version,
            "updated_at": s.updated_at,
            "settings": s.settings,
        }),
        None => json!({
            "tenant": tenant,
            "version": 0,
            "updated_at": null,
            "settings": TenantSettings::default(),
        }),
    }
}

/// `GET /v1/settings`: the tenant's settings as stored (version 0 and `{}` before its first
/// `PUT`).
pub(crate) async fn get(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = admit(&server, &headers, Permission::Settings).await?;
    let stored = tenants(&server)?
        .read(&caller.tenant)
        .await
        .map_err(unavailable)?;
    Ok(Json(shown(&caller.tenant, stored.as_ref())).into_response())
}

/// `PUT /v1/settings`: replaces the tenant's settings with the body, checked whole (an
/// unknown field, a value out of range or instructions over their share of the prompt: 400
/// `invalid_settings` naming the field; nothing stored). The answer is what `GET` returns,
/// with the new version; answers cached under the old version are not replayed.
pub(crate) async fn put(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = admit(&server, &headers, Permission::Settings).await?;
    let tenants = tenants(&server)?;
    let pipeline = server.pipeline()?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    let value: Value = parse_json(&bytes)?;
    let config = &pipeline.config;
    let invalid = |field: &str, message: String| {
        ApiError::new(Code::InvalidSettings, format!("{field}: {message}"))
    };
    let settings = TenantSettings::parse(&value, config.max_tokens)
        .map_err(|e| invalid(&e.field, e.message))?;
    // A static key is read now, not first by an end user's request (which would then fail).
    if let Some(identity) = &settings.identity {
        sluice_identity::check_key(identity).map_err(|why| invalid("identity.public_key", why))?;
    }
    if let Some(text) = &settings.prompt.instructions {
        let budget =
            sluice_core::prompt::input_budget(config.context_tokens, config.max_tokens as usize);
        let (tokens, most) = (
            pipeline.embedder.count_tokens(text),
            budget / INSTRUCTIONS_SHARE,
        );
        if tokens > most {
            let why = format!(
                "{tokens} tokens; the limit is {most}, a quarter of the prompt's budget \
                 (SLUICE_LLM_CONTEXT_TOKENS less SLUICE_MAX_TOKENS and a margin)"
            );
            return Err(invalid("prompt.instructions", why));
        }
    }
    let stored = (tenants.put(&caller.tenant, settings).await).map_err(unavailable)?;
    tracing::info!(tenant = %caller.tenant, version = stored.version, "tenant settings changed");
    Ok(Json(shown(&caller.tenant, Some(&stored))).into_response())
}

fn unavailable(e: sluice_contract::tenant_settings::SettingsError) -> ApiError {
    tracing::error!(error = %e, "tenant settings store failed");
    ApiError::new(
        Code::SettingsUnavailable,
        "the tenant settings cannot be read or written right now; try again",
    )
}
