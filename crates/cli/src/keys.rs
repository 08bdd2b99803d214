//! `sluice keys`: API keys for the tenants of a server with auth on.

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use sluice_app::Settings;
use sluice_contract::Tenant;
use sluice_contract::auth::{check_grant, digest, key_id, new_key};
use sluice_contract::filter::Filter;
use sluice_contract::{auth::KeyRecord, auth::Permission, auth::Principal};

/// Makes a key, stores its digest where `settings` say, and prints the key. A key bound to a
/// `filter` gets only `answer` unless told otherwise, and a permission that acts on the whole
/// tenant only with `tenant_wide` ([`check_grant`]).
pub async fn create(settings: &Settings, new: NewKey) -> Result<()> {
    let NewKey {
        tenant,
        permissions,
        name,
        filter,
        token_budget,
        tenant_wide,
    } = new;
    if token_budget == Some(0) {
        bail!("--token-budget: a budget is a whole number of tokens from 1");
    }
    let tenant = Tenant::new(&tenant).map_err(|e| anyhow::anyhow!("--tenant: {e}"))?;
    let filter = (filter.as_deref())
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
    check_grant(&permissions, filter.as_ref(), tenant_wide)
        .map_err(|e| anyhow::anyhow!("--permissions: {e}"))?;
    let key = new_key();
    let record = KeyRecord {
        hash: digest(&key),
        principal: Principal {
            tenant: tenant.clone(),
            permissions,
            filter,
            token_budget,
            tenant_wide,
        },
        name,
    };
    let id = key_id(&record.hash);
    let place = sluice_app::store_key(settings, record).await?;
    eprintln!(
        "key {id} for tenant {tenant} stored in {place}; usage shows it as {id}; the key is shown only now:"
    );
    println!("{key}");
    Ok(())
}

/// Creates the DynamoDB key table.
pub async fn create_table(settings: &Settings) -> Result<()> {
    let Some(table) = &settings.aws.api_keys_table else {
        bail!("SLUICE_API_KEYS_TABLE is not set: name the table to create");
    };
    let keys = sluice_aws::keys::DynamoKeys::connect(table).await?;
    keys.create_table().await?;
    println!("table {} created", keys.table());
    Ok(())
}

/// What `sluice keys create` is told.
#[derive(clap::Args)]
pub struct NewKey {
    /// The tenant the key acts for.
    #[arg(long)]
    pub tenant: String,
    /// What the key may do, comma-separated: answer, documents, documents:delete,
    /// components, cache, usage, usage:keys (every key's usage), prompt (see the
    /// assembled prompt), settings (the tenant's settings and prompt) [default: all but
    /// prompt and usage:keys; with --filter: answer]
    #[arg(long, value_delimiter = ',')]
    pub permissions: Option<Vec<String>>,
    /// A label for people (never used for access).
    #[arg(long)]
    pub name: Option<String>,
    /// A metadata filter (JSON, the language of answers' `filter`) the key is bound to:
    /// ANDed with every request's own, so the key only ever sees documents that pass it,
    /// e.g. '{"groups": {"$in": ["finance"]}}'.
    #[arg(long)]
    pub filter: Option<String>,
    /// Tokens (prompt + completion) the key may spend per calendar month (UTC); past them
    /// its answers are refused with 429 budget_exceeded.
    #[arg(long)]
    pub token_budget: Option<u64>,
    /// With --filter: let the bound key hold permissions that act on the whole tenant
    /// beyond its filter (components: the rerank component that orders every key's
    /// answers; settings: what every key's answers follow; usage:keys: every key's usage).
    /// Refused without this flag.
    #[arg(long, requires = "filter")]
    pub tenant_wide: bool,
}

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Make a key for a tenant and print it (once: only its SHA-256 is stored, in
    /// SLUICE_API_KEYS_FILE, or in the DynamoDB table SLUICE_API_KEYS_TABLE). `sluice serve`
    /// reads the file at start: restart it to use the new key.
    Create(NewKey),
    /// Create the DynamoDB table SLUICE_API_KEYS_TABLE (the SAM template makes it in a deployment).
    CreateTable,
}

/// `sluice keys …`.
pub async fn command(settings: &Settings, command: KeysCommand) -> Result<()> {
    match command {
        KeysCommand::Create(new) => create(settings, new).await,
        KeysCommand::CreateTable => create_table(settings).await,
    }
}
