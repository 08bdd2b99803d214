//! `sluice keys`: API keys for the tenants of a server with auth on.

use anyhow::{Context, Result, bail};
use sluice_core::Config;
use sluice_core::Tenant;
use sluice_core::auth::{self, KeyRecord, Permission, Principal};
use sluice_core::filter::Filter;

/// Makes a key, stores its digest where `config` says, and prints the key. A key bound to a
/// `filter` gets only `answer` unless told otherwise, and a permission that acts on the whole
/// tenant only with `tenant_wide` ([`auth::check_grant`]).
pub async fn create(
    config: &Config,
    tenant: String,
    permissions: Option<&[String]>,
    name: Option<String>,
    filter: Option<&str>,
    token_budget: Option<u64>,
    tenant_wide: bool,
) -> Result<()> {
    if token_budget == Some(0) {
        bail!("--token-budget: a budget is a whole number of tokens from 1");
    }
    let tenant = Tenant::new(&tenant).map_err(|e| anyhow::anyhow!("--tenant: {e}"))?;
    let filter = filter
        .map(|text| -> Result<Filter> {
            let value: serde_json::Value =
                serde_json::from_str(text).context("--filter: not JSON")?;
            Filter::parse(&value).map_err(|e| anyhow::anyhow!("--filter: {e}"))
        })
        .transpose()?;
    let permissions = match permissions {
        None if filter.is_some() => Permission::BOUND_DEFAULT.to_vec(),
        None => Permission::DEFAULT.to_vec(),
        Some(names) => names
            .iter()
            .map(|p| {
                Permission::parse(p).with_context(|| {
                    let known: Vec<&str> = Permission::ALL.iter().map(|p| p.name()).collect();
                    format!("--permissions: {p:?} is not one of {}", known.join(", "))
                })
            })
            .collect::<Result<Vec<_>>>()?,
    };
    auth::check_grant(&permissions, filter.as_ref(), tenant_wide)
        .map_err(|e| anyhow::anyhow!("--permissions: {e}"))?;
    let key = auth::new_key();
    let record = KeyRecord {
        hash: auth::digest(&key),
        principal: Principal {
            tenant: tenant.clone(),
            permissions,
            filter,
            token_budget,
            tenant_wide,
        },
        name,
    };
    let id = auth::key_id(&record.hash);
    let place = match (&config.auth.api_keys_file, &config.auth.api_keys_table) {
        (Some(file), _) => {
            auth::append_to_file(file, record)?;
            format!("{} (restart sluice serve to use it)", file.display())
        }
        (None, Some(table)) => {
            let keys = sluice_aws::keys::DynamoKeys::connect(&config.auth).await?;
            keys.put(&record).await?;
            format!("DynamoDB table {table}")
        }
        (None, None) => bail!(
            "set SLUICE_API_KEYS_FILE (sluice serve) or SLUICE_API_KEYS_TABLE (Lambda) to say where keys live"
        ),
    };
    eprintln!(
        "key {id} for tenant {tenant} stored in {place}; usage shows it as {id}; the key is shown only now:"
    );
    println!("{key}");
    Ok(())
}

/// Creates the DynamoDB key table.
pub async fn create_table(config: &Config) -> Result<()> {
    let keys = sluice_aws::keys::DynamoKeys::connect(&config.auth).await?;
    keys.create_table().await?;
    println!("table {} created", keys.table());
    Ok(())
}
