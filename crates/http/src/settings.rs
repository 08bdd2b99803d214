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

use crate::service::gate::CandidateAsked;

use crate::Server;
use crate::admit::admit;
use crate::body::{parse_json, read_body};
use crate::error::ApiError;

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
/// with the new version; answers cached under the old version are not replayed. Settings
/// equal to the stored ones are not written (`"unchanged": true`, the same version). A tenant
/// whose settings hold a quality gate has the new settings tried on its set first (not a
/// change of the gate alone): 409 `quality_regression` when they do worse, and otherwise the
/// comparison in `quality`.
pub(crate) async fn put(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let call = crate::admit::call(&headers, std::time::Instant::now(), None);
    let mut caller = admit(&server, &headers, Permission::Settings).await?;
    let tenants = tenants(&server)?;
    server.pipeline()?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    let value: Value = parse_json(&bytes)?;
    let settings = server.checked_settings(&value)?;
    if let Some(gate) = &settings.quality_gate {
        server.check_gate(&caller, gate).await?;
    }
    let stored = tenants.read(&caller.tenant).await.map_err(unavailable)?;
    // The same settings again (an editor saved without a change): nothing is written, the
    // version stays, and the answers cached under it stay good.
    if let Some(same) = stored.as_ref().filter(|s| s.settings == settings) {
        let mut shown = shown(&caller.tenant, Some(same));
        shown["unchanged"] = true.into();
        return Ok(Json(shown).into_response());
    }
    let gate_alone = stored.as_ref().is_some_and(|s| {
        let mut before = s.settings.clone();
        before.quality_gate = settings.quality_gate.clone();
        before == settings
    });
    caller.settings = stored.map(Arc::new);
    let quality = match gate_alone {
        true => None,
        false => {
            let candidate = CandidateAsked {
                settings: Some(value),
                ..CandidateAsked::default()
            };
            server.gate(&caller, &call, candidate).await?
        }
    };
    let stored = (tenants.put(&caller.tenant, settings).await).map_err(unavailable)?;
    tracing::info!(tenant = %caller.tenant, version = stored.version, "tenant settings changed");
    let mut shown = shown(&caller.tenant, Some(&stored));
    if let Some(quality) = quality {
        shown["quality"] = quality;
    }
    Ok(Json(shown).into_response())
}

fn unavailable(e: sluice_contract::tenant_settings::SettingsError) -> ApiError {
    tracing::error!(error = %e, "tenant settings store failed");
    ApiError::new(
        Code::SettingsUnavailable,
        "the tenant settings cannot be read or written right now; try again",
    )
}
