//! The semantic answer cache on DynamoDB: a [`CacheStore`] over one table.
//!
//! # Table layout
//!
//! | attribute | what |
//! |---|---|
//! | `pk` (partition key) | the tenant |
//! | `sk` (sort key) | the exact key: hex SHA-256 of the normalised question |
//! | `b0` … `b9` | `<tenant>#<bucket>`: the entry's LSH bucket in each band; GSI `lsh0` … `lsh9` |
//! | `q` | the normalised question (the guard reads it) |
//! | `v` | the question's embedding as little-endian f16 (768 bytes for 384 dimensions) |
//! | `cv`, `lm`, `em`, `pv`, `k`, `rr` | corpus version, LLM, embedding model, prompt version, k, rerank component (absent: none) |
//! | `vr` | digest of what else shaped the answer (filter, conversation, …; absent: nothing) |
//! | `bd` | digest of the filter of the key the answer was made for (absent: an unbound key); a bound key's clear deletes only its own |
//! | `ad` | the answer's digest (`CachedAnswer::digest`): a down-vote deletes every item holding the answer |
//! | `ttl` | Unix seconds; DynamoDB's TTL deletes the item some time after (checked in code too) |
//! | `a` | the answer as JSON: tokens, sources (and what each was: id, chunk, digest), finish reason, token count, verdict |
//!
//! The tenant leads every key the code reads — `pk` in the table, `b<i>` in each index — so
//! an IAM policy with `dynamodb:LeadingKeys` (`ForAllValues:StringLike` on `<tenant>` and
//! `<tenant>#*`) confines a tenant's credentials to its own items. With
//! `SLUICE_CACHE_TENANT_ROLE_ARN` every item call runs with such credentials: `AssumeRole` on
//! that role with the session tag `sluice-tenant=<tenant>`, the policy comparing the keys with
//! `${aws:PrincipalTag/sluice-tenant}` (`sam/template.yaml`'s `CacheTenantRole`). Isolation
//! never depends on an embedding.
//!
//! A lookup is one parallel round after the query is embedded: a `GetItem` (exact key) and
//! ten `Query` calls, one per index. The indexes project every attribute so
//! that the round returns whole entries; each `Query` reads at most [`BUCKET_LIMIT`] items.

#![warn(missing_docs)]

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, DeleteRequest, GlobalSecondaryIndex,
    KeySchemaElement, KeyType, Projection, ProjectionType, ScalarAttributeType, TableStatus,
    TimeToLiveSpecification, WriteRequest,
};
use sluice_contract::Tenant;
use sluice_contract::cache::BANDS;
use std::sync::Arc;

use sluice_contract::cache::{CacheEntry, CacheStore, CachedAnswer, Scope};
use sluice_contract::error::CacheError;
use tracing::{info, warn};

/// DynamoDB's item size limit; bigger entries are not cached.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;
/// Most items one bucket `Query` reads (a crowded bucket is cut, never slow).
pub const BUCKET_LIMIT: i32 = 25;
/// How long `create-table` waits for the table and its indexes to become active.
const CREATE_WAIT: Duration = Duration::from_secs(120);
/// Every cache call (on the request path): one attempt, and the whole operation with its retry.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
const OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// The cache table.
#[derive(Clone)]
pub struct DynamoCache {
    /// The process's own credentials: table set-up and checks, and every item call when
    /// there is no tenant role.
    client: Client,
    table: String,
    /// With `SLUICE_CACHE_TENANT_ROLE_ARN`: item calls use the tenant's credentials.
    tenants: Option<Arc<TenantClients>>,
}

/// One client per tenant, each with credentials from `AssumeRole` on the tenant role with the
/// session tag `sluice-tenant=<tenant>`. The role's policy allows the cache's item calls only
/// where `dynamodb:LeadingKeys` is the tag (or starts with it and `#`), so a tenant's requests
/// cannot read or write another tenant's entries even through a bug in this code. Credentials
/// are fetched on a tenant's first call and refreshed before they expire (the SDK's provider);
/// the clients share one connection pool.
struct TenantClients {
    role: String,
    sdk: aws_config::SdkConfig,
    clients: std::sync::Mutex<HashMap<String, Client>>,
}

/// The session tag the tenant role's policy compares `dynamodb:LeadingKeys` with.
pub const TENANT_TAG: &str = "sluice-tenant";

impl DynamoCache {
    /// A client built once from the standard AWS environment (`AWS_REGION`, credentials,
    /// `AWS_ENDPOINT_URL_DYNAMODB` for an emulator) for the table `table`
    /// (`SLUICE_CACHE_TABLE`); with `tenant_role` (`SLUICE_CACHE_TENANT_ROLE_ARN`), each
    /// tenant's item calls use that role's credentials for the tenant.
    pub async fn connect(table: &str, tenant_role: Option<&str>) -> Result<Self, CacheError> {
        let sdk = sluice_aws::sdk_config_with(
            "SLUICE_CACHE=dynamodb",
            ATTEMPT_TIMEOUT,
            OPERATION_TIMEOUT,
        )
        .await
        .map_err(|e| CacheError::Setup(e.to_string()))?;
        let mut cache = Self::new(Client::new(&sdk), table);
        if let Some(role) = tenant_role {
            cache.tenants = Some(Arc::new(TenantClients {
                role: role.to_string(),
                sdk,
                clients: Default::default(),
            }));
        }
        Ok(cache)
    }

    /// The client for `tenant`'s items: its own credentials with a tenant role, else the
    /// process's.
    async fn client(&self, tenant: &str) -> Result<Client, CacheError> {
        let Some(tenants) = &self.tenants else {
            return Ok(self.client.clone());
        };
        let known = tenants.clients.lock().map_err(setup)?.get(tenant).cloned();
        if let Some(client) = known {
            return Ok(client);
        }
        let provider = aws_config::sts::AssumeRoleProvider::builder(&tenants.role)
            .session_name(format!("sluice-{tenant}"))
            .tags([(TENANT_TAG, tenant)])
            .configure(&tenants.sdk)
            .build()
            .await;
        let config = aws_sdk_dynamodb::config::Builder::from(&tenants.sdk)
            .credentials_provider(provider)
            .build();
        let client = Client::from_conf(config);
        let mut clients = tenants.clients.lock().map_err(setup)?;
        if clients.len() >= sluice_contract::REMEMBERED_TENANTS && !clients.contains_key(tenant) {
            // Bounded: a forgotten tenant's next call assumes its role again.
            clients.clear();
        }
        Ok(clients.entry(tenant.to_string()).or_insert(client).clone())
    }

    /// How many tenants have clients of their own (with a tenant role).
    pub fn tenant_clients(&self) -> usize {
        self.tenants
            .as_ref()
            .and_then(|t| t.clients.lock().ok().map(|c| c.len()))
            .unwrap_or(0)
    }

    /// A cache over `table` with a client built by the caller (its own endpoint, retry or
    /// timeout settings).
    pub fn new(client: Client, table: &str) -> Self {
        Self {
            client,
            table: table.to_string(),
            tenants: None,
        }
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Checks the table at start: missing → created when `create` (else an error that says
    /// how), wrong schema → an error. An unreachable endpoint is only a warning: cache errors
    /// are misses, and the service starts without its cache.
    pub async fn prepare(&self, create: bool) -> Result<(), CacheError> {
        match self.check().await {
            Ok(true) => Ok(()),
            Ok(false) if create => self.create_table().await.map(|_| ()),
            Ok(false) => Err(CacheError::Setup(format!(
                "DynamoDB table {:?} does not exist: run `sluice cache create-table`, or set SLUICE_CACHE_CREATE_TABLE=true",
                self.table
            ))),
            Err(CacheError::Backend(e)) => {
                warn!(table = %self.table, error = %e, "DynamoDB unreachable at start; answers will not be cached until it is back");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the table exists (`false`) with the layout above (`true`); a table without
    /// the indexes is a [`CacheError::Setup`].
    pub async fn check(&self) -> Result<bool, CacheError> {
        let described = self
            .client
            .describe_table()
            .table_name(&self.table)
            .send()
            .await;
        let table = match described {
            Ok(out) => out.table,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                return Ok(false);
            }
            Err(e) => return Err(backend(e)),
        };
        let indexes: Vec<String> = table
            .as_ref()
            .map(|t| t.global_secondary_indexes())
            .unwrap_or_default()
            .iter()
            .filter_map(|i| i.index_name().map(str::to_string))
            .collect();
        let missing: Vec<String> = (0..BANDS)
            .map(index_name)
            .filter(|name| !indexes.contains(name))
            .collect();
        if !missing.is_empty() {
            return Err(CacheError::Setup(format!(
                "DynamoDB table {:?} lacks the indexes {} that Sluice needs: it was not created by `sluice cache create-table`",
                self.table,
                missing.join(", ")
            )));
        }
        Ok(true)
    }

    /// Creates the table (on-demand billing, the ten bucket indexes, TTL on `ttl`) and waits
    /// until it is active. Returns `false` when it already existed (TTL is still ensured).
    pub async fn create_table(&self) -> Result<bool, CacheError> {
        let string_attr = |name: String| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(setup)
        };
        let key = |name: String, kind: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kind)
                .build()
                .map_err(setup)
        };
        let mut request = self
            .client
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(string_attr("pk".into())?)
            .attribute_definitions(string_attr("sk".into())?)
            .key_schema(key("pk".into(), KeyType::Hash)?)
            .key_schema(key("sk".into(), KeyType::Range)?);
        for band in 0..BANDS {
            request = request
                .attribute_definitions(string_attr(bucket_attr(band))?)
                .global_secondary_indexes(
                    GlobalSecondaryIndex::builder()
                        .index_name(index_name(band))
                        .key_schema(key(bucket_attr(band), KeyType::Hash)?)
                        .projection(
                            Projection::builder()
                                .projection_type(ProjectionType::All)
                                .build(),
                        )
                        .build()
                        .map_err(setup)?,
                );
        }
        let created = match request.send().await {
            Ok(_) => true,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_in_use_exception()) =>
            {
                false
            }
            Err(e) => return Err(backend(e)),
        };
        self.wait_active().await?;
        let ttl = self
            .client
            .describe_time_to_live()
            .table_name(&self.table)
            .send()
            .await
            .map_err(backend)?;
        let enabled = ttl
            .time_to_live_description()
            .and_then(|d| d.attribute_name())
            == Some("ttl");
        if !enabled {
            self.client
                .update_time_to_live()
                .table_name(&self.table)
                .time_to_live_specification(
                    TimeToLiveSpecification::builder()
                        .attribute_name("ttl")
                        .enabled(true)
                        .build()
                        .map_err(setup)?,
                )
                .send()
                .await
                .map_err(backend)?;
        }
        if created {
            info!(table = %self.table, "created the DynamoDB cache table");
        }
        Ok(created)
    }

    async fn wait_active(&self) -> Result<(), CacheError> {
        let started = std::time::Instant::now();
        loop {
            let out = self
                .client
                .describe_table()
                .table_name(&self.table)
                .send()
                .await
                .map_err(backend)?;
            let table = out.table();
            let active = table.and_then(|t| t.table_status()) == Some(&TableStatus::Active)
                && table
                    .map(|t| t.global_secondary_indexes())
                    .unwrap_or_default()
                    .iter()
                    .all(|i| i.index_status().is_none_or(|s| s.as_str() == "ACTIVE"));
            if active {
                return Ok(());
            }
            if started.elapsed() > CREATE_WAIT {
                return Err(CacheError::Setup(format!(
                    "DynamoDB table {:?} is not active after {CREATE_WAIT:?}",
                    self.table
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

#[async_trait]
impl CacheStore for DynamoCache {
    fn backend(&self) -> &'static str {
        "dynamodb"
    }

    fn in_process(&self) -> bool {
        false
    }

    async fn get(&self, tenant: &Tenant, key: &str) -> Result<Option<CacheEntry>, CacheError> {
        let out = self
            .client(tenant)
            .await?
            .get_item()
            .table_name(&self.table)
            .key("pk", s(tenant))
            .key("sk", s(key))
            .send()
            .await
            .map_err(backend)?;
        out.item()
            .map(|item| decode(item).map_err(CacheError::Backend))
            .transpose()
    }

    async fn candidates(
        &self,
        tenant: &Tenant,
        buckets: &[u32],
    ) -> Result<Vec<CacheEntry>, CacheError> {
        let client = self.client(tenant).await?;
        let queries = buckets
            .iter()
            .take(BANDS)
            .enumerate()
            .map(|(band, bucket)| {
                client
                    .query()
                    .table_name(&self.table)
                    .index_name(index_name(band))
                    .key_condition_expression(format!("{} = :b", bucket_attr(band)))
                    .expression_attribute_values(":b", s(&bucket_value(tenant, *bucket)))
                    .limit(BUCKET_LIMIT)
                    .send()
            });
        let mut seen = std::collections::HashSet::new();
        let mut entries = Vec::new();
        for result in futures::future::join_all(queries).await {
            for item in result.map_err(backend)?.items() {
                match decode(item) {
                    // Several bands can return the same entry; the key tells.
                    Ok(e) if seen.insert(e.key.clone()) => entries.push(e),
                    Ok(_) => {}
                    Err(e) => {
                        warn!(table = %self.table, error = %e, "skipping a malformed cache item")
                    }
                }
            }
        }
        Ok(entries)
    }

    async fn put(&self, entry: &CacheEntry) -> Result<(), CacheError> {
        let item = encode(entry)?;
        self.client(&entry.tenant)
            .await?
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn clear(&self, tenant: &Tenant, binding: Option<&str>) -> Result<usize, CacheError> {
        self.delete_where(tenant, binding.map(|b| ("bd", b))).await
    }

    async fn forget(&self, tenant: &Tenant, answer: &str) -> Result<usize, CacheError> {
        self.delete_where(tenant, Some(("ad", answer))).await
    }
}

impl DynamoCache {
    /// Deletes the tenant's items — those whose attribute `equal.0` is `equal.1`, when given —
    /// a page of its partition at a time; returns how many.
    async fn delete_where(
        &self,
        tenant: &Tenant,
        equal: Option<(&str, &str)>,
    ) -> Result<usize, CacheError> {
        let client = self.client(tenant).await?;
        let mut deleted = 0;
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let mut query = client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :t")
                .expression_attribute_values(":t", s(tenant))
                .projection_expression("pk, sk")
                .set_exclusive_start_key(start.take());
            if let Some((attribute, value)) = equal {
                query = query
                    .filter_expression(format!("{attribute} = :v"))
                    .expression_attribute_values(":v", s(value));
            }
            let page = query.send().await.map_err(backend)?;
            let keys: Vec<_> = page.items().to_vec();
            for batch in keys.chunks(25) {
                let mut requests: Vec<WriteRequest> = Vec::with_capacity(batch.len());
                for key in batch {
                    let delete = DeleteRequest::builder()
                        .set_key(Some(key.clone()))
                        .build()
                        .map_err(setup)?;
                    requests.push(WriteRequest::builder().delete_request(delete).build());
                }
                self.write_all(&client, requests).await?;
                deleted += batch.len();
            }
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        Ok(deleted)
    }

    /// One `BatchWriteItem`, resending what DynamoDB left unprocessed (throttling) a few times.
    async fn write_all(
        &self,
        client: &Client,
        mut requests: Vec<WriteRequest>,
    ) -> Result<(), CacheError> {
        for attempt in 0..5u32 {
            let out = client
                .batch_write_item()
                .request_items(&self.table, requests)
                .send()
                .await
                .map_err(backend)?;
            requests = out
                .unprocessed_items()
                .and_then(|m| m.get(&self.table))
                .cloned()
                .unwrap_or_default();
            if requests.is_empty() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
        }
        Err(CacheError::Backend(format!(
            "{} deletes still unprocessed after 5 attempts",
            requests.len()
        )))
    }
}

fn index_name(band: usize) -> String {
    format!("lsh{band}")
}

fn bucket_attr(band: usize) -> String {
    format!("b{band}")
}

/// The bucket attribute's value: the tenant leads it, as IAM's LeadingKeys expects.
fn bucket_value(tenant: &str, bucket: u32) -> String {
    format!("{tenant}#{bucket:03x}")
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_string())
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn backend<E: std::error::Error + 'static>(e: E) -> CacheError {
    CacheError::Backend(DisplayErrorContext(&e).to_string())
}

fn setup(e: impl std::fmt::Display) -> CacheError {
    CacheError::Setup(e.to_string())
}

/// The item for `entry`, or [`CacheError::TooLarge`] past DynamoDB's 400 KB.
pub fn encode(entry: &CacheEntry) -> Result<HashMap<String, AttributeValue>, CacheError> {
    let answer = serde_json::to_string(&entry.answer)
        .map_err(|e| CacheError::Backend(format!("answer not serialisable: {e}")))?;
    let vector: Vec<u8> = entry
        .vector
        .iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect();
    let mut item = HashMap::from([
        ("pk".to_string(), s(&entry.tenant)),
        ("sk".to_string(), s(&entry.key)),
        ("q".to_string(), s(&entry.query)),
        ("v".to_string(), AttributeValue::B(vector.into())),
        ("cv".to_string(), n(entry.scope.corpus_version)),
        ("lm".to_string(), s(&entry.scope.llm_model)),
        ("em".to_string(), s(&entry.scope.embed_model)),
        ("pv".to_string(), n(entry.scope.prompt_version)),
        ("k".to_string(), n(entry.scope.k)),
        ("ttl".to_string(), n(entry.expires_at)),
        ("a".to_string(), s(&answer)),
        ("ad".to_string(), s(&entry.answer.digest())),
    ]);
    if let Some(version) = &entry.scope.rerank {
        item.insert("rr".to_string(), s(version));
    }
    if let Some(variant) = &entry.scope.variant {
        item.insert("vr".to_string(), s(variant));
    }
    if let Some(binding) = &entry.scope.binding {
        item.insert("bd".to_string(), s(binding));
    }
    if let Some(access) = &entry.scope.access {
        item.insert("ac".to_string(), s(access));
    }
    for (band, bucket) in entry.buckets.iter().enumerate().take(BANDS) {
        item.insert(bucket_attr(band), s(&bucket_value(&entry.tenant, *bucket)));
    }
    let bytes = item_size(&item);
    if bytes > MAX_ITEM_BYTES {
        return Err(CacheError::TooLarge {
            bytes,
            limit: MAX_ITEM_BYTES,
        });
    }
    Ok(item)
}

/// DynamoDB's item size: attribute names plus values (numbers counted as their text, an
/// upper bound of their stored size).
fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter()
        .map(|(name, value)| {
            name.len()
                + match value {
                    AttributeValue::S(v) | AttributeValue::N(v) => v.len(),
                    AttributeValue::B(v) => v.as_ref().len(),
                    _ => 0,
                }
        })
        .sum()
}

/// The entry stored in `item`; the error names what is missing or malformed.
pub fn decode(item: &HashMap<String, AttributeValue>) -> Result<CacheEntry, String> {
    let text = |name: &str| -> Result<String, String> {
        match item.get(name) {
            Some(AttributeValue::S(v)) => Ok(v.clone()),
            _ => Err(format!("attribute {name} is missing or not a string")),
        }
    };
    let number = |name: &str| -> Result<u64, String> {
        match item.get(name) {
            Some(AttributeValue::N(v)) => v
                .parse()
                .map_err(|_| format!("attribute {name} is not a whole number: {v}")),
            _ => Err(format!("attribute {name} is missing or not a number")),
        }
    };
    let tenant = Tenant::new(&text("pk")?).map_err(|e| format!("attribute pk: {e}"))?;
    let vector = match item.get("v") {
        Some(AttributeValue::B(b)) if b.as_ref().len() % 2 == 0 => b
            .as_ref()
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => return Err("attribute v is missing or not f16 bytes".into()),
    };
    // An item in no band (a question kept out of the cache: `SemanticCache::block`) has no
    // bucket attribute at all; an answer has every one.
    let in_no_band = (0..BANDS).all(|band| !item.contains_key(&bucket_attr(band)));
    let bands = if in_no_band { 0 } else { BANDS };
    let buckets = (0..bands)
        .map(|band| {
            let value = text(&bucket_attr(band))?;
            value
                .strip_prefix(&format!("{tenant}#"))
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .ok_or_else(|| format!("attribute {} is malformed: {value}", bucket_attr(band)))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    let answer: CachedAnswer = serde_json::from_str(&text("a")?)
        .map_err(|e| format!("attribute a is not a cached answer: {e}"))?;
    Ok(CacheEntry {
        key: text("sk")?,
        query: text("q")?,
        vector,
        buckets,
        scope: Scope {
            corpus_version: number("cv")?,
            llm_model: text("lm")?,
            embed_model: text("em")?,
            prompt_version: u32::try_from(number("pv")?).map_err(|e| e.to_string())?,
            k: usize::try_from(number("k")?).map_err(|e| e.to_string())?,
            rerank: item.get("rr").map(|_| text("rr")).transpose()?,
            variant: item.get("vr").map(|_| text("vr")).transpose()?,
            binding: item.get("bd").map(|_| text("bd")).transpose()?,
            access: item.get("ac").map(|_| text("ac")).transpose()?,
        },
        expires_at: number("ttl")?,
        answer,
        tenant,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(answer_bytes: usize) -> CacheEntry {
        CacheEntry {
            tenant: sluice_testkit::tenant("acme"),
            key: "ab".repeat(32),
            query: "how do i reset my pin".into(),
            vector: (0..384).map(|i| (i as f32 / 384.0) - 0.5).collect(),
            buckets: (0..BANDS as u32).map(|b| b * 97 % 1024).collect(),
            scope: Scope {
                corpus_version: 7,
                llm_model: "m".into(),
                embed_model: "e".into(),
                prompt_version: 1,
                k: 5,
                rerank: Some("abc".into()),
                variant: Some("f".repeat(64)),
                binding: Some("b".repeat(64)),
                access: Some("c".repeat(64)),
            },
            expires_at: 1_900_000_000,
            answer: CachedAnswer {
                tokens: vec!["x".repeat(answer_bytes)],
                sources: vec![],
                finish_reason: "stop".into(),
                token_count: 1,
                token_count_source: "usage".into(),
                extract: None,
                grounding: None,
                // What a changed corpus is checked against: it must come back as it went in.
                cited: vec![sluice_contract::cache::Cited {
                    id: "samples/lost-card.md".into(),
                    chunk: 2,
                    digest: "d".repeat(64),
                }],
            },
        }
    }

    #[test]
    fn items_round_trip_with_the_vector_at_half_precision() {
        let original = entry(10);
        let item = encode(&original).unwrap();
        assert_eq!(item["b3"], s(&format!("acme#{:03x}", 3 * 97)));
        assert_eq!(item["v"].as_b().map(|b| b.as_ref().len()), Ok(768));
        let back = decode(&item).unwrap();
        assert_eq!(back.answer, original.answer);
        assert_eq!(back.scope, original.scope);
        assert_eq!(back.buckets, original.buckets);
        let worst = back
            .vector
            .iter()
            .zip(&original.vector)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 5e-4, "f16 error {worst}");
    }

    #[test]
    fn entries_over_400_kb_are_refused() {
        assert!(encode(&entry(300 * 1024)).is_ok());
        match encode(&entry(401 * 1024)) {
            Err(CacheError::TooLarge { bytes, limit }) => {
                assert!(bytes > limit && limit == MAX_ITEM_BYTES, "{bytes}")
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    #[test]
    fn malformed_items_say_what_is_wrong() {
        let mut item = encode(&entry(10)).unwrap();
        item.insert("b4".into(), s("globex#001"));
        assert!(decode(&item).unwrap_err().contains("b4"));
        let mut item = encode(&entry(10)).unwrap();
        item.remove("a");
        assert!(decode(&item).unwrap_err().contains("attribute a"));
    }
}
