//! `sluice keys`: API keys for the tenants of a server with auth on.

use anyhow::{Result, bail};
use clap::Subcommand;
use sluice_app::Settings;
use sluice_contract::auth::{KeyAsk, KeyRecord, Principal, key_id, new_key};

/// Makes a key, stores its digest where `settings` say, and prints the key. A key bound to a
/// `filter` gets only `answer` unless told otherwise, and a permission that acts on the whole
/// tenant only with `tenant_wide` ([`Principal::asked`]).
pub async fn create(settings: &Settings, new: NewKey) -> Result<()> {
    let ask = KeyAsk {
        tenant: new.tenant,
        permissions: new.permissions,
        filter: new.filter,
        token_budget: new.token_budget,
        tenant_wide: new.tenant_wide,
        user_token: new.user_token,
    };
    let principal = Principal::asked(ask).map_err(|e| {
        let (field, why) = e.split_once(": ").unwrap_or(("", &e));
        anyhow::anyhow!("--{}: {why}", field.replace('_', "-"))
    })?;
    let key = new_key();
    let tenant = principal.tenant.clone();
    let record = KeyRecord::new(&key, principal, new.name);
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
    /// Every request with the key must carry an end user's token (x-sluice-user): a key
    /// for the tenant's front end, which then only reads.
    #[arg(long)]
    pub user_token: bool,
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
