//! Usage in DynamoDB (`SLUICE_USAGE_TABLE`): one item per tenant, key, UTC day and region —
//! partition key `tenant` (S), sort key `day_key` (S, `YYYY-MM-DD#<key id>#<region>`, key id
//! `-` for requests without a key) — with one number attribute per counter
//! ([`Counts::FIELDS`]).
//!
//! Every environment of a region adds to its region's items with `UpdateItem … ADD`, which
//! DynamoDB applies atomically: concurrent environments never lose each other's counts, and
//! no read comes before a write. The region is in the key because the table may be a global
//! table: replication settles two regions' concurrent writes to one item by last writer
//! wins, whole item, so an `ADD` in one region could erase an `ADD` made in another within
//! the replication delay. With one writing region per item there is nothing to settle; a
//! read sums the regions. A tenant's month is one `Query` on its partition (a range of sort
//! keys). Items written before the region was part of the key (`YYYY-MM-DD#<key id>`) are
//! read the same way.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use sluice_contract::Tenant;
use sluice_contract::usage::{
    Counts, Date, Row, Unwritten, UsageError, UsageKey, UsageStore, day_string, parse_day,
};

use crate::AwsError;

/// One call's attempt: usage is written after an answer's last event, so a slow table only
/// delays the end of a stream (the meter bounds the whole write as well).
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(800);
/// A call with its retry.
const OPERATION_TIMEOUT: Duration = Duration::from_millis(1800);
/// The most rows one read returns (a year of days for a few hundred keys); past it the
/// answer would be cut, so the read fails instead and says so.
const MAX_ROWS: usize = 100_000;
/// The sort key of a row without an API key.
const NO_KEY: &str = "-";

/// The usage table.
pub struct DynamoUsage {
    client: Client,
    table: String,
    /// The region this client's items carry: the SDK's.
    region: String,
}

impl DynamoUsage {
    /// A client for the usage table `table` (`SLUICE_USAGE_TABLE`; the standard AWS
    /// environment).
    pub async fn connect(table: &str) -> Result<Self, AwsError> {
        let sdk =
            crate::sdk_config_with("SLUICE_USAGE=dynamodb", ATTEMPT_TIMEOUT, OPERATION_TIMEOUT)
                .await?;
        // `sdk_config_with` fails without a region, so there is one.
        let region = sdk.region().map(|r| r.to_string()).unwrap_or_default();
        Ok(Self {
            client: Client::new(&sdk),
            table: table.to_string(),
            region,
        })
    }

    /// The same table, its items written as `region`'s: how a test plays a second region
    /// on one emulator (a region's own clients take the SDK's region).
    pub fn writing_as(mut self, region: &str) -> Self {
        self.region = region.to_string();
        self
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates the table (on-demand billing), for the tests; the SAM template creates it in
    /// a deployment.
    pub async fn create_table(&self) -> Result<(), AwsError> {
        crate::create_table(&self.client, &self.table, &["tenant", "day_key"]).await
    }

    /// Adds one row's counts to its item.
    async fn add_one(
        client: Client,
        table: String,
        row: Row,
        region: String,
    ) -> Result<(), String> {
        let (key, counts) = &row;
        let fields: Vec<(&str, u64)> = counts
            .fields()
            .into_iter()
            .filter(|(_, v)| *v > 0)
            .collect();
        if fields.is_empty() {
            return Ok(());
        }
        let mut update = client
            .update_item()
            .table_name(table)
            .key("tenant", AttributeValue::S(key.tenant.to_string()))
            .key("day_key", AttributeValue::S(sort_key(key, &region)));
        let mut adds = Vec::with_capacity(fields.len());
        for (i, (name, value)) in fields.iter().enumerate() {
            adds.push(format!("#f{i} :v{i}"));
            update = update
                .expression_attribute_names(format!("#f{i}"), *name)
                .expression_attribute_values(
                    format!(":v{i}"),
                    AttributeValue::N(value.to_string()),
                );
        }
        update
            .update_expression(format!("ADD {}", adds.join(", ")))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| AwsError::call("DynamoDB UpdateItem", e).to_string())
    }
}

/// `YYYY-MM-DD#<key id>#<region>`: a tenant's rows sort by day, so a range of days is a range
/// of keys.
fn sort_key(key: &UsageKey, region: &str) -> String {
    format!(
        "{}#{}#{region}",
        day_string(key.day),
        key.key.as_deref().unwrap_or(NO_KEY)
    )
}

/// The day and key of a sort key, with or without its region.
fn parse_sort_key(text: &str) -> Option<(Date, Option<String>)> {
    let mut parts = text.splitn(3, '#');
    let (day, key) = (parts.next()?, parts.next()?);
    let key = (key != NO_KEY).then(|| key.to_string());
    Some((parse_day(day)?, key))
}

#[async_trait::async_trait]
impl UsageStore for DynamoUsage {
    async fn add(&self, rows: &[Row]) -> Result<(), Unwritten> {
        // One UpdateItem per row, all at once: a batch is a handful of rows (the tenants and
        // keys an environment served since its last flush).
        let mut calls = tokio::task::JoinSet::new();
        for (i, row) in rows.iter().enumerate() {
            let (client, table, row) = (self.client.clone(), self.table.clone(), row.clone());
            let region = self.region.clone();
            calls.spawn(async move { (i, Self::add_one(client, table, row, region).await) });
        }
        let mut failed = Vec::new();
        let mut why = String::new();
        while let Some(joined) = calls.join_next().await {
            match joined {
                Ok((_, Ok(()))) => {}
                Ok((i, Err(e))) => {
                    failed.push(rows[i].clone());
                    why = e;
                }
                Err(e) => why = format!("a write task failed: {e}"),
            }
        }
        if why.is_empty() {
            return Ok(());
        }
        Err(Unwritten {
            rows: failed,
            error: UsageError::Unavailable(why),
        })
    }

    async fn read(&self, tenant: &Tenant, from: Date, to: Date) -> Result<Vec<Row>, UsageError> {
        let unavailable = |e: String| UsageError::Unavailable(e);
        // One row per day and key: the regions' items summed.
        let mut rows: std::collections::BTreeMap<(Date, Option<String>), Counts> =
            Default::default();
        let mut items = 0usize;
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .key_condition_expression("tenant = :t AND day_key BETWEEN :from AND :to")
                .expression_attribute_values(":t", AttributeValue::S(tenant.to_string()))
                .expression_attribute_values(
                    ":from",
                    AttributeValue::S(format!("{}#", day_string(from))),
                )
                // `~` sorts after every character of a key id and of `-`.
                .expression_attribute_values(
                    ":to",
                    AttributeValue::S(format!("{}#~", day_string(to))),
                )
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| unavailable(AwsError::call("DynamoDB Query", e).to_string()))?;
            for item in page.items() {
                let malformed = || {
                    UsageError::Unavailable(format!(
                        "an item of {} for {tenant} is not a usage row",
                        self.table
                    ))
                };
                let (day, key) = item
                    .get("day_key")
                    .and_then(|v| v.as_s().ok())
                    .and_then(|s| parse_sort_key(s))
                    .ok_or_else(malformed)?;
                let mut counts = Counts::default();
                for name in Counts::FIELDS {
                    if let Some(v) = item.get(*name) {
                        let n = v.as_n().ok().and_then(|n| n.parse::<u64>().ok());
                        counts.set(name, n.ok_or_else(malformed)?);
                    }
                }
                rows.entry((day, key)).or_default().add(&counts);
            }
            items += page.items().len();
            if items > MAX_ROWS {
                return Err(unavailable(format!(
                    "more than {MAX_ROWS} usage rows in the range; ask for fewer days"
                )));
            }
            match page.last_evaluated_key() {
                Some(next) if !next.is_empty() => start = Some(next.clone()),
                _ => break,
            }
        }
        Ok(rows
            .into_iter()
            .map(|((day, key), counts)| {
                let key = UsageKey {
                    tenant: tenant.clone(),
                    key,
                    day,
                };
                (key, counts)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_keys_order_by_day_and_read_back() {
        let key = |day: &str, id: Option<&str>| UsageKey {
            tenant: Tenant::new("acme").unwrap(),
            key: id.map(str::to_string),
            day: parse_day(day).unwrap(),
        };
        let a = sort_key(&key("2026-11-30", Some("ffffffffffff")), "us-east-1");
        let b = sort_key(&key("2026-12-01", None), "eu-west-1");
        assert_eq!(b, "2026-12-01#-#eu-west-1");
        assert!(a < b && b.as_str() < "2026-12-01#~" && "2026-12-01#" < b.as_str());
        // Written before the region was in the key: read the same.
        assert_eq!(
            parse_sort_key("2026-12-01#-"),
            Some((parse_day("2026-12-01").unwrap(), None))
        );
        assert_eq!(
            parse_sort_key(&a),
            Some((
                parse_day("2026-11-30").unwrap(),
                Some("ffffffffffff".into())
            ))
        );
        assert_eq!(
            parse_sort_key(&b),
            Some((parse_day("2026-12-01").unwrap(), None))
        );
        assert_eq!(parse_sort_key("2026-12-01"), None);
    }
}
