//! API keys in DynamoDB (`SLUICE_API_KEYS_TABLE`): one item per key, partition key `hash`
//! (the key's `sha256:` digest), with `tenant` (S), `permissions` (SS), and optionally `name`
//! (S), `filter` (S, JSON) and `token_budget` (N).
//! The key itself is never stored.
//!
//! Every request is checked, so lookups are remembered in the process: a known key for
//! [`FOUND_TTL`], an unknown one for [`MISSING_TTL`]. A revoked key therefore keeps working for
//! up to a minute in an instance that saw it — the price of not adding a DynamoDB round trip
//! to every time to first token.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use sluice_contract::Tenant;
use sluice_contract::auth::{AuthError, KeyRecord, KeyStore, Permission, Principal, check_record};
use sluice_contract::filter::Filter;

use crate::{AwsError, s};

/// How long a found key is trusted without asking DynamoDB again.
pub const FOUND_TTL: Duration = Duration::from_secs(60);
/// How long an unknown key is refused without asking again (a key created a moment ago
/// works after this).
pub const MISSING_TTL: Duration = Duration::from_secs(5);
/// One lookup attempt: on the request path, so short; a slow table is a 503, not a hang.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(800);
/// A lookup with its retry.
const OPERATION_TIMEOUT: Duration = Duration::from_millis(2000);
/// Remembered lookups; past this the memory is cleared (a flood of random keys).
const MAX_REMEMBERED: usize = sluice_contract::REMEMBERED_TENANTS;

type Remembered = HashMap<String, (Option<Principal>, Instant)>;

/// The key table.
pub struct DynamoKeys {
    client: Client,
    table: String,
    remembered: Mutex<Remembered>,
}

impl DynamoKeys {
    /// A client for the key table `table` (`SLUICE_API_KEYS_TABLE`; the standard AWS
    /// environment).
    pub async fn connect(table: &str) -> Result<Self, AwsError> {
        let sdk =
            crate::sdk_config_with("SLUICE_API_KEYS_TABLE", ATTEMPT_TIMEOUT, OPERATION_TIMEOUT)
                .await?;
        Ok(Self {
            client: Client::new(&sdk),
            table: table.to_string(),
            remembered: Mutex::new(HashMap::new()),
        })
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates the table (on-demand billing), for `sluice keys create-table` and the tests;
    /// the SAM template creates it in a deployment.
    pub async fn create_table(&self) -> Result<(), AwsError> {
        crate::create_table(&self.client, &self.table, &["hash"]).await
    }

    /// Stores `record` (refusing to overwrite an existing digest).
    pub async fn put(&self, record: &KeyRecord) -> Result<(), AwsError> {
        check_record(record).map_err(AwsError::Malformed)?;
        let permissions: Vec<String> = record
            .principal
            .permissions
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("hash", s(&record.hash))
            .item("tenant", s(&record.principal.tenant))
            .item("permissions", AttributeValue::Ss(permissions))
            .condition_expression("attribute_not_exists(#h)")
            .expression_attribute_names("#h", "hash");
        if let Some(name) = &record.name {
            put = put.item("name", s(name));
        }
        if let Some(filter) = &record.principal.filter {
            put = put.item("filter", s(&filter.to_json().to_string()));
        }
        if let Some(budget) = record.principal.token_budget {
            put = put.item("token_budget", AttributeValue::N(budget.to_string()));
        }
        if record.principal.tenant_wide {
            put = put.item("tenant_wide", AttributeValue::Bool(true));
        }
        if record.principal.user_token {
            put = put.item("user_token", AttributeValue::Bool(true));
        }
        put.send()
            .await
            .map(|_| ())
            .map_err(|e| AwsError::call("DynamoDB PutItem", e))
    }

    async fn get(&self, hash: &str) -> Result<Option<Principal>, AuthError> {
        let item = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("hash", s(hash))
            .send()
            .await
            .map_err(|e| {
                AuthError::Unavailable(AwsError::call("DynamoDB GetItem", e).to_string())
            })?;
        let Some(item) = item.item() else {
            return Ok(None);
        };
        let malformed = |what: &str| {
            AuthError::Unavailable(format!(
                "the key item in {} {what}; fix or delete it",
                self.table
            ))
        };
        let tenant = item
            .get("tenant")
            .and_then(|v| v.as_s().ok())
            .ok_or_else(|| malformed("has no tenant"))?;
        let tenant =
            Tenant::new(tenant).map_err(|e| malformed(&format!("has a bad tenant: {e}")))?;
        let permissions = item
            .get("permissions")
            .and_then(|v| v.as_ss().ok())
            .ok_or_else(|| malformed("has no permissions"))?
            .iter()
            .map(|p| Permission::parse(p).ok_or_else(|| malformed("names an unknown permission")))
            .collect::<Result<Vec<_>, _>>()?;
        // The key's mandatory filter, checked again: an unreadable one refuses the key rather
        // than dropping the restriction.
        let filter = match item.get("filter") {
            None => None,
            Some(v) => {
                let text = v
                    .as_s()
                    .map_err(|_| malformed("has a filter that is not a string"))?;
                let value: serde_json::Value = serde_json::from_str(text)
                    .map_err(|e| malformed(&format!("has a filter that is not JSON: {e}")))?;
                Some(
                    Filter::parse(&value)
                        .map_err(|e| malformed(&format!("has an invalid filter: {e}")))?,
                )
            }
        };
        let token_budget = match item.get("token_budget") {
            None => None,
            Some(v) => Some(
                v.as_n()
                    .ok()
                    .and_then(|n| n.parse::<u64>().ok())
                    .ok_or_else(|| malformed("has a token_budget that is not a whole number"))?,
            ),
        };
        let flag = |name: &str| match item.get(name) {
            None => Ok(false),
            Some(v) => (v.as_bool().copied())
                .map_err(|_| malformed(&format!("has a {name} that is not a boolean"))),
        };
        let (tenant_wide, user_token) = (flag("tenant_wide")?, flag("user_token")?);
        let record = KeyRecord {
            hash: hash.to_string(),
            principal: Principal {
                tenant,
                permissions,
                filter,
                token_budget,
                tenant_wide,
                user_token,
            },
            name: None,
        };
        check_record(&record).map_err(|m| malformed(&m))?;
        Ok(Some(record.principal))
    }

    fn recall(&self, hash: &str) -> Option<Option<Principal>> {
        let remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        still_known(remembered.get(hash)?, Instant::now())
    }
}

/// What a remembered lookup (`principal`, looked up `at`) still says at `now`: a found key for
/// [`FOUND_TTL`], an unknown one for [`MISSING_TTL`]; `None` once it must be asked again.
fn still_known(
    (principal, at): &(Option<Principal>, Instant),
    now: Instant,
) -> Option<Option<Principal>> {
    let ttl = match principal {
        Some(_) => FOUND_TTL,
        None => MISSING_TTL,
    };
    (now.saturating_duration_since(*at) < ttl).then(|| principal.clone())
}

#[async_trait::async_trait]
impl KeyStore for DynamoKeys {
    async fn find(&self, hash: &str) -> Result<Option<Principal>, AuthError> {
        if let Some(known) = self.recall(hash) {
            return Ok(known);
        }
        let found = self.get(hash).await?;
        let mut remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        if remembered.len() >= MAX_REMEMBERED {
            remembered.clear();
        }
        remembered.insert(hash.to_string(), (found.clone(), Instant::now()));
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal() -> Principal {
        Principal::new(Tenant::new("acme").unwrap(), vec![Permission::Answer])
    }

    /// A found key is trusted for 60 s and an unknown one refused for 5 s without asking the
    /// table; then each is looked up again (a revoked key stops working, a new one starts).
    #[test]
    fn found_keys_are_remembered_a_minute_and_unknown_ones_five_seconds() {
        assert_eq!(FOUND_TTL, Duration::from_secs(60));
        assert_eq!(MISSING_TTL, Duration::from_secs(5));
        let at = Instant::now();
        let after = |secs: f64| at + Duration::from_secs_f64(secs);
        let found = (Some(principal()), at);
        assert_eq!(still_known(&found, after(59.9)), Some(Some(principal())));
        assert_eq!(still_known(&found, after(60.0)), None);
        let unknown = (None, at);
        assert_eq!(still_known(&unknown, after(4.9)), Some(None));
        assert_eq!(still_known(&unknown, after(5.0)), None);
    }
}
