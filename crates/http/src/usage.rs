//! `GET /v1/usage?from=YYYY-MM-DD&to=YYYY-MM-DD&keys=true`: the tenant's usage per UTC day
//! (this month so far by default), its total, and with `keys=true` (permission `usage:keys`)
//! the same per API key. What this process has counted and not yet written is written
//! first, so a caller sees its own last answer.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_contract::codes::Code;
use sluice_contract::{
    usage::Counts, usage::Date, usage::Row, usage::day_string, usage::parse_day,
};
use sluice_core::{usage::month_start, usage::next_month, usage::per_day};

use crate::Server;
use crate::admit::admit;
use crate::error::ApiError;

/// The longest range one request may read, in days (a year, leap or not).
pub const MAX_DAYS: i64 = 366;

pub(crate) async fn usage(
    State(server): State<Arc<Server>>,
    params: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = admit(&server, &headers, Permission::Usage).await?;
    let meter = server.usage.as_ref().ok_or_else(|| {
        ApiError::new(
            Code::UsageDisabled,
            "this server does not count usage (SLUICE_USAGE=off)",
        )
    })?;
    let Query(params) = params?;
    crate::error::once_each(&params)?;
    let today = meter.today();
    let (mut from, mut to, mut by_key) = (None, None, false);
    for (name, value) in &params {
        let day = || {
            parse_day(value).ok_or_else(|| {
                ApiError::new(
                    Code::InvalidRange,
                    format!("{name} must be a day as YYYY-MM-DD, not {value:?}"),
                )
            })
        };
        match name.as_str() {
            "from" => from = Some(day()?),
            "to" => to = Some(day()?),
            "keys" => {
                by_key = match value.as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(ApiError::new(
                            Code::InvalidRange,
                            format!("keys must be true or false, not {value:?}"),
                        ));
                    }
                }
            }
            other => {
                return Err(ApiError::new(
                    Code::InvalidRange,
                    format!("unknown query parameter {other:?} (use from, to, keys)"),
                ));
            }
        }
    }
    let to = to.unwrap_or(today);
    let from = from.unwrap_or_else(|| month_start(to));
    if from > to {
        return Err(ApiError::new(
            Code::InvalidRange,
            format!(
                "from ({}) is after to ({})",
                day_string(from),
                day_string(to)
            ),
        ));
    }
    if (to - from).whole_days() >= MAX_DAYS {
        return Err(ApiError::new(
            Code::InvalidRange,
            format!("the range is longer than {MAX_DAYS} days; ask for less at a time"),
        ));
    }
    if by_key && !caller.may_see_keys {
        let message = if caller.confined {
            sluice_contract::auth::confined_message(Permission::UsageKeys)
        } else {
            "usage per key (keys=true) needs an API key with the \"usage:keys\" permission".into()
        };
        return Err(ApiError::new(Code::PermissionDenied, message));
    }
    // Written first so the answer includes this process's latest; if the store is down the
    // read below says so.
    let _ = meter.flush().await;
    let mut rows = tokio::time::timeout(
        meter.timeout(),
        meter.store().read(&caller.tenant, from, to),
    )
    .await
    .map_err(|_| "no answer in time".to_string())
    .and_then(|r| r.map_err(|e| e.to_string()))
    .map_err(|e| {
        tracing::error!(tenant = %caller.tenant, error = %e, "reading usage failed");
        ApiError {
            retry_after: Some(std::time::Duration::from_secs(1)),
            ..ApiError::new(
                Code::UsageUnavailable,
                format!("usage cannot be read right now: {e}"),
            )
        }
    })?;
    // A key confined to a filter sees its own usage, not its neighbours'.
    if caller.confined {
        rows.retain(|row| row.0.key == caller.key);
    }
    let mut body = json!({
        "tenant": caller.tenant,
        "from": day_string(from),
        "to": day_string(to),
        "total": total(&rows),
        "days": days(&rows),
        "budgets": {
            "tenant": meter.tenant_budget(&caller.tenant),
            "key": caller.token_budget,
            "resets_on": day_string(next_month(today)),
        },
    });
    if caller.confined {
        body["key"] = json!(caller.key);
    }
    if by_key {
        let mut keys: BTreeMap<Option<String>, Vec<Row>> = BTreeMap::new();
        for row in rows {
            keys.entry(row.0.key.clone()).or_default().push(row);
        }
        body["keys"] = keys
            .into_iter()
            .map(|(key, rows)| json!({"key": key, "total": total(&rows), "days": days(&rows)}))
            .collect();
    }
    Ok(Json(body).into_response())
}

fn total(rows: &[Row]) -> Counts {
    let mut total = Counts::default();
    for (_, counts) in rows {
        total.add(counts);
    }
    total
}

fn days(rows: &[Row]) -> Value {
    per_day(rows)
        .into_iter()
        .map(|(day, counts): (Date, Counts)| {
            let mut value = json!(counts);
            value["day"] = json!(day_string(day));
            value
        })
        .collect()
}
