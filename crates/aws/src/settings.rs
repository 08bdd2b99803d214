//! Tenants' settings in DynamoDB (`SLUICE_SETTINGS_TABLE`): one item per tenant, partition key
//! `tenant` (S), with `version` (N), `updated_at` (S) and `settings` (S, the document as JSON).
//! A write is conditional on the version it read, so two writers never both become version n:
//! the second reads again and takes n + 1. Reads are strongly consistent; the answer path
//! reads through the engine's in-process copy (`sluice_core::tenants`), not on every request.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use sluice_contract::Tenant;
use sluice_contract::tenant_settings::{
    SettingsError, SettingsStore, StoredSettings, TenantSettings,
};

use crate::{AwsError, s};

/// One attempt: the answer path waits for a stale copy's read (within its deadline).
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(800);
/// A call with its retry.
const OPERATION_TIMEOUT: Duration = Duration::from_millis(2000);
/// Writers racing for one tenant's next version: past this many lost races, give up.
const MAX_RACES: usize = 5;

/// The settings table.
pub struct DynamoSettings {
    client: Client,
    table: String,
}

fn fail(e: impl std::fmt::Display) -> SettingsError {
    SettingsError::Unavailable(e.to_string())
}

impl DynamoSettings {
    /// A client for the table `table` (the standard AWS environment).
    pub async fn connect(table: &str) -> Result<Self, AwsError> {
        let sdk =
            crate::sdk_config_with("SLUICE_SETTINGS_TABLE", ATTEMPT_TIMEOUT, OPERATION_TIMEOUT)
                .await?;
        Ok(Self {
            client: Client::new(&sdk),
            table: table.to_string(),
        })
    }

    /// Creates the table (on-demand billing), for the tests and a deployment without the
    /// SAM template's.
    pub async fn create_table(&self) -> Result<(), AwsError> {
        crate::create_table(&self.client, &self.table, &["tenant"]).await
    }
}

#[async_trait]
impl SettingsStore for DynamoSettings {
    async fn get(&self, tenant: &Tenant) -> Result<Option<StoredSettings>, SettingsError> {
        let read = (self.client.get_item().table_name(&self.table))
            .key("tenant", s(tenant))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| fail(AwsError::call("DynamoDB GetItem", e)))?;
        let Some(item) = read.item else {
            return Ok(None);
        };
        let text = |name: &str| match item.get(name) {
            Some(AttributeValue::S(v)) => Ok(v.clone()),
            _ => Err(fail(format!("settings item of {tenant}: no {name}"))),
        };
        let version = match item.get("version") {
            Some(AttributeValue::N(n)) => n.parse().map_err(fail)?,
            _ => return Err(fail(format!("settings item of {tenant}: no version"))),
        };
        let settings = serde_json::from_str(&text("settings")?).map_err(fail)?;
        Ok(Some(StoredSettings {
            settings,
            version,
            updated_at: text("updated_at")?,
        }))
    }

    async fn put(
        &self,
        tenant: &Tenant,
        settings: TenantSettings,
    ) -> Result<StoredSettings, SettingsError> {
        let json = serde_json::to_string(&settings).map_err(fail)?;
        for _ in 0..MAX_RACES {
            let last = self.get(tenant).await?.map_or(0, |s| s.version);
            let stored = StoredSettings {
                settings: settings.clone(),
                version: last + 1,
                updated_at: sluice_contract::tenant_settings::now(),
            };
            let put = (self.client.put_item().table_name(&self.table))
                .item("tenant", s(tenant))
                .item("version", AttributeValue::N(stored.version.to_string()))
                .item("updated_at", s(&stored.updated_at))
                .item("settings", s(&json))
                .condition_expression("attribute_not_exists(#t) OR #v = :last")
                .expression_attribute_names("#t", "tenant")
                .expression_attribute_names("#v", "version")
                .expression_attribute_values(":last", AttributeValue::N(last.to_string()));
            match put.send().await {
                Ok(_) => return Ok(stored),
                Err(e) if crate::lost_condition(&e) => continue,
                Err(e) => return Err(fail(AwsError::call("DynamoDB PutItem", e))),
            }
        }
        Err(fail(format!(
            "settings of {tenant}: {MAX_RACES} writers raced; try again"
        )))
    }
}
