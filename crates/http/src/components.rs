//! `/v1/components/rerank` and `/v1/components/prompt`: a tenant's rerank components and its
//! prompt-assembly components — upload, activate, list, deactivate, a version's log, delete
//! a version — through the one registry, on the blocking pool. The prompt components are kept under the tenant's
//! `prompt_components` name, so the two kinds never mix (each route takes only its world).

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use sluice_contract::Tenant;
use sluice_contract::access::TextAccess;
use sluice_contract::auth::Permission;
use sluice_contract::cancel::Cancel;
use sluice_contract::codes::Code;
use sluice_contract::components::{ComponentError, ComponentVersion, Components, resolve};

use crate::Server;
use crate::admit::admit;
use crate::body::{parse_json, read_body};
use crate::error::ApiError;
use crate::service::gate::CandidateAsked;

/// Largest component upload.
const MAX_COMPONENT_BYTES: usize = 2 << 20;

/// The registry, or 404 when this deployment runs without tenant components.
fn components(server: &Server) -> Result<Arc<dyn Components>, ApiError> {
    server.components.clone().ok_or_else(|| {
        ApiError::new(
            Code::ComponentsDisabled,
            "this server runs without tenant components",
        )
    })
}

/// Admits a caller that manages the tenant's components, to the routes of `kind`: the name
/// the registry keeps them under ([`space`]), and how much of the tenant's documents' text the
/// caller may read — the calls a version's records keep were other requests' calls, over
/// documents the caller may not read, so a record is shown whole only under
/// [`TextAccess::reads_record`].
async fn admit_to(
    server: &Server,
    headers: &HeaderMap,
    kind: &str,
) -> Result<(Tenant, TextAccess), ApiError> {
    let caller = admit(server, headers, Permission::Components).await?;
    let text = caller.text();
    Ok((space(kind, caller.tenant)?, text))
}

/// The name the registry keeps `tenant`'s components of `kind` under (the route's last
/// segment: `rerank` or `prompt`).
fn space(kind: &str, tenant: Tenant) -> Result<Tenant, ApiError> {
    match kind {
        "rerank" => Ok(tenant),
        "prompt" => Ok(tenant.prompt_components()),
        other => Err(ApiError::new(
            Code::NotFound,
            format!("no component kind {other:?}: /v1/components/rerank or /v1/components/prompt"),
        )),
    }
}

/// Runs registry work (compilation, file I/O) on the blocking pool.
async fn registry<T: Send + 'static>(
    server: &Server,
    work: impl FnOnce(&dyn Components) -> Result<T, ComponentError> + Send + 'static,
) -> Result<T, ApiError> {
    let registry = components(server)?;
    tokio::task::spawn_blocking(move || work(registry.as_ref()))
        .await
        .map_err(|e| ApiError::new(Code::Internal, e.to_string()))?
        .map_err(ApiError::from)
}

/// The whole hash of the version `asked` names in `space` (a tenant's rerank or prompt
/// components): a hash, a unique prefix of one, or a label ([`resolve`]).
pub(crate) async fn resolved(
    server: &Server,
    space: Tenant,
    asked: &str,
) -> Result<String, ApiError> {
    let asked = asked.to_string();
    registry(server, move |r| {
        let versions = r.list(&space)?;
        resolve(&versions, &asked).map(|v| v.version.clone())
    })
    .await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UploadQuery {
    /// A name for the version, shown in the listing.
    label: Option<String>,
}

pub(crate) async fn upload_component(
    State(server): State<Arc<Server>>,
    Path(kind): Path<String>,
    query: Result<Query<UploadQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (tenant, _) = admit_to(&server, &headers, &kind).await?;
    let Query(UploadQuery { label }) = query?;
    if let Some(label) = &label {
        ComponentVersion::check_label(label).map_err(|m| ApiError::new(Code::InvalidLabel, m))?;
    }
    let bytes = read_body(&server, body, MAX_COMPONENT_BYTES).await?;
    // A client that leaves while its component compiles gets nothing stored.
    let cancel = Cancel::new();
    let _stop_when_dropped = cancel.on_drop();
    let upload = move |r: &dyn Components| r.upload(&tenant, &bytes, label.as_deref(), &cancel);
    let version = registry(&server, upload).await?;
    Ok((StatusCode::CREATED, Json(version)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ActivateBody {
    version: String,
    /// Where the tenant's quality gate cannot run here: the id of a run of the gate's set that
    /// tried this version, made where answers are served.
    #[serde(default)]
    gate_run: Option<String>,
}

pub(crate) async fn activate_component(
    State(server): State<Arc<Server>>,
    Path(kind): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let call = crate::admit::call(&headers, std::time::Instant::now(), None);
    let mut caller = admit(&server, &headers, Permission::Components).await?;
    let tenant = space(&kind, caller.tenant.clone())?;
    components(&server)?;
    let bytes = read_body(&server, body, server.limits.max_body_bytes).await?;
    let mut body: ActivateBody = parse_json(&bytes)?;
    body.version = resolved(&server, tenant.clone(), &body.version).await?;
    // The tenant's quality gate, if its settings hold one: the version tried on the gate's set
    // beside the live one, and refused if it does worse.
    caller.settings = server.settings_of(&caller.tenant).await?;
    let gated = caller
        .settings
        .as_ref()
        .is_some_and(|s| s.settings.quality_gate.is_some());
    let quality = match gated {
        false => None,
        // The gate's run asks the set's questions through the tenant's own pipeline: a process
        // without one refuses rather than activate a version untried.
        true if server.answers.is_none() => match &body.gate_run {
            // A run made where answers are served stands for it, if it tried this version.
            Some(run) => Some(
                server
                    .passed_gate(&caller, &kind, &body.version, run)
                    .await?,
            ),
            None => {
                let gate = (caller.settings.as_ref()).and_then(|s| s.settings.quality_gate.clone());
                let set = gate.map(|g| g.set).unwrap_or_default();
                let why = format!(
                    "the tenant's settings hold a quality gate (set {set:?}), whose run needs the \
                     answers' pipeline, and this process serves no answers (on AWS, the registry \
                     function): nothing was activated. Run the set with the version as candidate \
                     where answers are served — POST /v1/evals/runs {{\"set\": {set:?}, \
                     \"candidate\": {{\"{kind}\": \"{0}\"}}}} — and activate with {{\"version\": \
                     \"{0}\", \"gate_run\": \"<the run's id>\"}}",
                    body.version
                );
                return Err(ApiError::new(Code::QualityGateUnavailable, why));
            }
        },
        true => {
            let candidate = CandidateAsked {
                rerank: (kind == "rerank").then(|| body.version.clone()),
                prompt: (kind == "prompt").then(|| body.version.clone()),
                settings: None,
            };
            server.gate(&caller, &call, candidate).await?
        }
    };
    let version = registry(&server, move |r| r.activate(&tenant, &body.version)).await?;
    let mut shown = json!(version);
    if let Some(quality) = quality {
        shown["quality"] = quality;
    }
    Ok(Json(shown).into_response())
}

pub(crate) async fn list_components(
    State(server): State<Arc<Server>>,
    Path(kind): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (tenant, text) = admit_to(&server, &headers, &kind).await?;
    let mut versions = registry(&server, move |r| r.list(&tenant)).await?;
    // Other requests' calls failed over their documents: what their messages may quote is
    // shown only to a caller that may read those documents.
    for failure in versions.iter_mut().flat_map(|v| v.failures.iter_mut()) {
        if !text.reads_record(failure.restricted) {
            failure.failure = failure.failure.redacted();
        }
    }
    let active = versions
        .iter()
        .find(|v| v.active)
        .map(|v| v.version.clone());
    Ok(Json(json!({ "versions": versions, "active": active })).into_response())
}

pub(crate) async fn deactivate_component(
    State(server): State<Arc<Server>>,
    Path(kind): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (tenant, _) = admit_to(&server, &headers, &kind).await?;
    registry(&server, move |r| r.deactivate(&tenant)).await?;
    Ok(Json(json!({ "active": null })).into_response())
}

/// `GET /v1/components/{kind}/{version}/logs`: the version's last calls that logged a line or
/// failed, newest first, with what they logged, how they failed and (to a key not bound to a
/// filter) a failed call's input.
pub(crate) async fn component_logs(
    State(server): State<Arc<Server>>,
    Path((kind, version)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (tenant, text) = admit_to(&server, &headers, &kind).await?;
    let version = resolved(&server, tenant.clone(), &version).await?;
    let asked = version.clone();
    let mut calls = registry(&server, move |r| r.logs(&tenant, &asked)).await?;
    for call in &mut calls {
        if !text.reads_record(call.restricted) {
            *call = call.redacted();
        }
    }
    Ok(Json(json!({ "version": version, "calls": calls })).into_response())
}

/// `DELETE /v1/components/{kind}/{version}`: an inactive version, its bytes and its records.
pub(crate) async fn delete_component(
    State(server): State<Arc<Server>>,
    Path((kind, version)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (tenant, _) = admit_to(&server, &headers, &kind).await?;
    let version = resolved(&server, tenant.clone(), &version).await?;
    let asked = version.clone();
    registry(&server, move |r| r.delete(&tenant, &asked)).await?;
    Ok(Json(json!({ "deleted": version })).into_response())
}
