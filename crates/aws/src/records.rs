//! Tenants' records — evaluation sets, runs' reports, ratings, gaps — in DynamoDB
//! (`SLUICE_RECORDS_TABLE`): one item per record, partition key `shelf` (S, `<tenant>#<shelf>`:
//! a tenant's shelf is one partition, read by one query) and sort key `name` (S), with
//! `version` (N), `updated_at` (S) and `body` (S, the document as JSON). A write adds one to the
//! version in the same `UpdateItem`, so two writers never both get version n. An item is at most
//! 400 KB: a record over [`MAX_BODY_BYTES`] is refused before it is sent.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use sluice_contract::Tenant;
use sluice_contract::evals::{Record, Records, RecordsError, Shelf};

use crate::{AwsError, s};

/// One attempt.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(2000);
/// A call with its retry.
const OPERATION_TIMEOUT: Duration = Duration::from_millis(5000);
/// The most bytes of a record's body: DynamoDB's item limit (400 KB) less its keys and the
/// other attributes.
pub const MAX_BODY_BYTES: usize = 390 * 1024;

/// The table's keys, partition then sort: what [`DynamoRecords::create_table`] makes and the SAM
/// template's `RecordsTable` declares (a test compares them).
pub const KEYS: [&str; 2] = ["shelf", "name"];
/// The attribute (N, seconds since the epoch) past which DynamoDB's TTL removes an item of a
/// shelf that expires ([`Shelf::expires_after`]); the SAM template enables TTL on it. TTL
/// removes items up to days late: readers check the expiry themselves.
pub const EXPIRES: &str = "expires";

/// The records table.
pub struct DynamoRecords {
    client: Client,
    table: String,
}

fn fail(e: impl std::fmt::Display) -> RecordsError {
    RecordsError::Unavailable(e.to_string())
}

fn partition(tenant: &Tenant, shelf: Shelf) -> AttributeValue {
    AttributeValue::S(format!("{tenant}#{}", shelf.as_str()))
}

/// A record read back from its item.
fn record(item: &HashMap<String, AttributeValue>) -> Result<Record, RecordsError> {
    let text = |name: &str| match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v.clone()),
        _ => Err(fail(format!("a record item has no {name}"))),
    };
    let version = match item.get("version") {
        Some(AttributeValue::N(n)) => n.parse().map_err(fail)?,
        _ => return Err(fail("a record item has no version")),
    };
    Ok(Record {
        name: text("name")?,
        version,
        updated_at: text("updated_at")?,
        body: serde_json::from_str(&text("body")?).map_err(fail)?,
    })
}

impl DynamoRecords {
    /// A client for the table `table` (the standard AWS environment).
    pub async fn connect(table: &str) -> Result<Self, AwsError> {
        let sdk =
            crate::sdk_config_with("SLUICE_RECORDS_TABLE", ATTEMPT_TIMEOUT, OPERATION_TIMEOUT)
                .await?;
        Ok(Self {
            client: Client::new(&sdk),
            table: table.to_string(),
        })
    }

    /// Creates the table (on-demand billing), for the tests and a deployment without the SAM
    /// template's.
    pub async fn create_table(&self) -> Result<(), AwsError> {
        crate::create_table(&self.client, &self.table, &KEYS).await
    }
}

#[async_trait]
impl Records for DynamoRecords {
    async fn get(
        &self,
        tenant: &Tenant,
        shelf: Shelf,
        name: &str,
    ) -> Result<Option<Record>, RecordsError> {
        let read = (self.client.get_item().table_name(&self.table))
            .key("shelf", partition(tenant, shelf))
            .key("name", s(name))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| fail(AwsError::call("DynamoDB GetItem", e)))?;
        read.item.as_ref().map(record).transpose()
    }

    async fn tenants(&self, shelf: Shelf) -> Result<Vec<Tenant>, RecordsError> {
        // A scan of the partition keys alone: the shelves are `<tenant>#<shelf>`.
        let suffix = format!("#{}", shelf.as_str());
        let (mut tenants, mut start) = (std::collections::BTreeSet::new(), None);
        loop {
            let page = (self.client.scan().table_name(&self.table))
                .projection_expression("#s")
                .filter_expression("contains(#s, :suffix)")
                .expression_attribute_names("#s", "shelf")
                .expression_attribute_values(":suffix", AttributeValue::S(suffix.clone()))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| fail(AwsError::call("DynamoDB Scan", e)))?;
            for item in page.items() {
                if let Some(AttributeValue::S(key)) = item.get("shelf")
                    && let Some(tenant) = key.strip_suffix(&suffix)
                    && let Ok(tenant) = Tenant::new(tenant)
                {
                    tenants.insert(tenant);
                }
            }
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(tenants.into_iter().collect()),
            }
        }
    }

    async fn list(&self, tenant: &Tenant, shelf: Shelf) -> Result<Vec<Record>, RecordsError> {
        let (mut records, mut start) = (Vec::new(), None);
        loop {
            let page = (self.client.query().table_name(&self.table))
                .key_condition_expression("#s = :s")
                .expression_attribute_names("#s", "shelf")
                .expression_attribute_values(":s", partition(tenant, shelf))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| fail(AwsError::call("DynamoDB Query", e)))?;
            for item in page.items() {
                records.push(record(item)?);
            }
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(records),
            }
        }
    }

    async fn put(
        &self,
        tenant: &Tenant,
        shelf: Shelf,
        name: &str,
        body: serde_json::Value,
    ) -> Result<Record, RecordsError> {
        let json = serde_json::to_string(&body).map_err(fail)?;
        if json.len() > MAX_BODY_BYTES {
            return Err(fail(format!(
                "{}/{name}: {} bytes, over the {MAX_BODY_BYTES} a DynamoDB item holds",
                shelf.as_str(),
                json.len()
            )));
        }
        let updated_at = sluice_contract::tenant_settings::now();
        let mut update = (self.client.update_item().table_name(&self.table))
            .key("shelf", partition(tenant, shelf))
            .key("name", s(name))
            .expression_attribute_names("#v", "version")
            .expression_attribute_names("#b", "body")
            .expression_attribute_names("#u", "updated_at")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":b", s(&json))
            .expression_attribute_values(":u", s(&updated_at));
        update = match shelf.expires_after() {
            None => update.update_expression("ADD #v :one SET #b = :b, #u = :u"),
            Some(after) => {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                let expires = now.unwrap_or_default() + after;
                update
                    .update_expression("ADD #v :one SET #b = :b, #u = :u, #e = :e")
                    .expression_attribute_names("#e", EXPIRES)
                    .expression_attribute_values(
                        ":e",
                        AttributeValue::N(expires.as_secs().to_string()),
                    )
            }
        };
        let written = update
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .map_err(|e| fail(AwsError::call("DynamoDB UpdateItem", e)))?;
        let item = written
            .attributes
            .ok_or_else(|| fail("UpdateItem returned no item"))?;
        record(&item)
    }

    async fn delete(
        &self,
        tenant: &Tenant,
        shelf: Shelf,
        name: &str,
    ) -> Result<bool, RecordsError> {
        let deleted = (self.client.delete_item().table_name(&self.table))
            .key("shelf", partition(tenant, shelf))
            .key("name", s(name))
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| fail(AwsError::call("DynamoDB DeleteItem", e)))?;
        Ok(deleted.attributes.is_some_and(|a| !a.is_empty()))
    }

    fn shared(&self) -> bool {
        true
    }
}
