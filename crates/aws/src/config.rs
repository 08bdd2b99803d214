//! The AWS names of a deployment — DynamoDB tables, the component bucket and its replicas,
//! the per-tenant cache role — read and checked at start, so that a typo stops the process
//! with the variable's name instead of failing its first call.

use sluice_contract::settings::{ConfigError, parse};

/// Every AWS name a process may use; each is used only where its backend is chosen
/// (`SLUICE_CACHE=dynamodb`, `SLUICE_USAGE=dynamodb`, …).
#[derive(Debug, Clone)]
pub struct AwsConfig {
    /// `SLUICE_CACHE_TABLE`: the answer cache's DynamoDB table.
    pub cache_table: String,
    /// `SLUICE_CACHE_CREATE_TABLE`: create the cache table at start when it is missing.
    pub cache_create_table: bool,
    /// `SLUICE_CACHE_TENANT_ROLE_ARN`: a role assumed per tenant (session tag `sluice-tenant`)
    /// for the cache's item calls, whose policy confines them to the tenant's keys.
    pub cache_tenant_role_arn: Option<String>,
    /// `SLUICE_USAGE_TABLE`: the usage counters' table (`SLUICE_USAGE=dynamodb`).
    pub usage_table: String,
    /// `SLUICE_API_KEYS_TABLE`: the DynamoDB table of keys on Lambda (auth on when set).
    pub api_keys_table: Option<String>,
    /// `SLUICE_SETTINGS_TABLE`: the DynamoDB table of tenants' settings on Lambda (unset: the
    /// functions keep none, and every tenant answers with the deployment's defaults).
    pub settings_table: Option<String>,
    /// `SLUICE_RECORDS_TABLE`: the DynamoDB table of tenants' evaluation sets, runs, ratings
    /// and gaps on Lambda (unset: the functions keep none).
    pub records_table: Option<String>,
    /// `SLUICE_SYNC_QUEUE_URL`: the SQS FIFO queue through which the schedule starts each due
    /// source's sync and a sync of a sitemap or an S3 prefix hands its pages or objects, in
    /// batches, to the ingest function (unset: the schedule runs the syncs, and a sync reads
    /// what it lists itself, within its invocation).
    pub sync_queue_url: Option<String>,
    /// Where tenants' rerank components are kept.
    pub components: ComponentsConfig,
}

/// Where tenants' rerank components are kept.
#[derive(Debug, Clone)]
pub struct ComponentsConfig {
    /// `SLUICE_COMPONENT_BUCKET`: keep them in this S3 bucket (and their pointers in
    /// `table`) instead of `SLUICE_DATA_DIR/components`.
    pub bucket: Option<String>,
    /// `SLUICE_COMPONENT_TABLE`: the DynamoDB table of component pointers.
    pub table: String,
    /// `SLUICE_COMPONENT_REPLICAS`: in a deployment over several regions, every region's
    /// component bucket (`region=bucket`, comma-separated; `bucket`'s own entry is
    /// skipped). Each upload and its
    /// artefact are written to all of them before the version is recorded, so a version
    /// the (global) table names has its bytes in every region. Empty: one region.
    pub replicas: Vec<(String, String)>,
}

impl AwsConfig {
    /// Reads the section through `get` (blank values already unset).
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let api_keys_table = get("SLUICE_API_KEYS_TABLE");
        if let Some(table) = &api_keys_table
            && get("SLUICE_API_KEYS_FILE").is_some()
        {
            return Err(ConfigError {
                name: "SLUICE_API_KEYS_TABLE",
                value: table.clone(),
                expected: "unset while SLUICE_API_KEYS_FILE is set (keys come from one place)"
                    .into(),
            });
        }
        Ok(AwsConfig {
            cache_table: get("SLUICE_CACHE_TABLE").unwrap_or_else(|| "sluice-cache".into()),
            cache_create_table: parse(get, "SLUICE_CACHE_CREATE_TABLE", "false", "true or false")?,
            cache_tenant_role_arn: match get("SLUICE_CACHE_TENANT_ROLE_ARN") {
                Some(arn) if !is_role_arn(&arn) => {
                    return Err(ConfigError {
                        name: "SLUICE_CACHE_TENANT_ROLE_ARN",
                        value: arn,
                        expected: "an IAM role ARN (arn:aws:iam::<account>:role/<name>)".into(),
                    });
                }
                arn => arn,
            },
            usage_table: get("SLUICE_USAGE_TABLE").unwrap_or_else(|| "sluice-usage".into()),
            api_keys_table,
            settings_table: get("SLUICE_SETTINGS_TABLE"),
            records_table: get("SLUICE_RECORDS_TABLE"),
            sync_queue_url: match get("SLUICE_SYNC_QUEUE_URL") {
                Some(url) if !is_fifo_queue_url(&url) => {
                    return Err(ConfigError {
                        name: "SLUICE_SYNC_QUEUE_URL",
                        value: url,
                        expected: "an SQS FIFO queue's URL (https://sqs.<region>.amazonaws.com/\
                                   <account>/<name>.fifo)"
                            .into(),
                    });
                }
                url => url,
            },
            components: components_section(get)?,
        })
    }
}

/// An http(s) URL whose last segment names a FIFO queue (`….fifo`): a sync's batches must be
/// read in order, one at a time per source.
fn is_fifo_queue_url(url: &str) -> bool {
    let rest = (url.strip_prefix("https://")).or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|rest| {
        let mut segments = rest.split('/');
        let host = segments.next().unwrap_or_default();
        !host.is_empty()
            && segments
                .next_back()
                .is_some_and(|n| n.len() > 5 && n.ends_with(".fifo"))
    })
}

/// `arn:<partition>:iam::<12 digits>:role/<path and name>`.
fn is_role_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    matches!(parts.as_slice(), ["arn", partition, "iam", "", account, resource]
        if partition.starts_with("aws")
            && account.len() == 12
            && account.bytes().all(|b| b.is_ascii_digit())
            && resource.strip_prefix("role/").is_some_and(|n| !n.is_empty()))
}

/// `SLUICE_COMPONENT_BUCKET`, `SLUICE_COMPONENT_TABLE`, `SLUICE_COMPONENT_REPLICAS`.
fn components_section(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<ComponentsConfig, ConfigError> {
    let bucket = match get("SLUICE_COMPONENT_BUCKET") {
        Some(b) if !valid_bucket(&b) => {
            return Err(ConfigError {
                name: "SLUICE_COMPONENT_BUCKET",
                value: b,
                expected: "an S3 bucket name (3-63 characters of a-z, 0-9, '.' or '-')".into(),
            });
        }
        b => b,
    };
    let mut replicas = Vec::new();
    if let Some(list) = get("SLUICE_COMPONENT_REPLICAS").filter(|l| !l.trim().is_empty()) {
        let bad = |expected: &str| ConfigError {
            name: "SLUICE_COMPONENT_REPLICAS",
            value: list.clone(),
            expected: expected.into(),
        };
        if bucket.is_none() {
            return Err(bad(
                "nothing unless SLUICE_COMPONENT_BUCKET is set (the replicas \
                 copy that bucket)",
            ));
        }
        for entry in list.split(',').map(str::trim) {
            let (region, name) = entry.split_once('=').unwrap_or(("", entry));
            let region_ok = !region.is_empty()
                && region
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !region_ok || !valid_bucket(name) {
                return Err(bad(&format!(
                    "region=bucket pairs, comma-separated (e.g. eu-west-1=my-components-eu); \
                     {entry:?} is not one"
                )));
            }
            if replicas.iter().any(|(r, _): &(String, String)| r == region) {
                return Err(bad(&format!("each region once; {region} is there twice")));
            }
            replicas.push((region.to_string(), name.to_string()));
        }
    }
    Ok(ComponentsConfig {
        bucket,
        table: get("SLUICE_COMPONENT_TABLE").unwrap_or_else(|| "sluice-components".into()),
        replicas,
    })
}

/// S3's bucket naming rules, as far as a typo would break them.
fn valid_bucket(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_contract::settings::pairs;

    fn with(vars: &[(&str, &str)]) -> Result<AwsConfig, ConfigError> {
        AwsConfig::from_lookup(&pairs(vars))
    }

    #[test]
    fn tables_have_defaults_and_keys_come_from_one_place() {
        let c = with(&[]).unwrap();
        assert_eq!(
            (c.cache_table.as_str(), c.usage_table.as_str()),
            ("sluice-cache", "sluice-usage")
        );
        assert!(!c.cache_create_table && c.api_keys_table.is_none());
        let c = with(&[
            ("SLUICE_CACHE_CREATE_TABLE", "true"),
            ("SLUICE_API_KEYS_TABLE", "k"),
        ])
        .unwrap();
        assert!(c.cache_create_table);
        assert_eq!(c.api_keys_table.as_deref(), Some("k"));
        let e = with(&[("SLUICE_CACHE_CREATE_TABLE", "yes please")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_CACHE_CREATE_TABLE");
        let e = with(&[
            ("SLUICE_API_KEYS_FILE", "k.json"),
            ("SLUICE_API_KEYS_TABLE", "keys"),
        ])
        .unwrap_err();
        assert_eq!(e.name, "SLUICE_API_KEYS_TABLE");
    }

    #[test]
    fn the_sync_queue_must_be_a_fifo_queues_url() {
        assert_eq!(with(&[]).unwrap().sync_queue_url, None);
        let url = "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-sync.fifo";
        let c = with(&[("SLUICE_SYNC_QUEUE_URL", url)]).unwrap();
        assert_eq!(c.sync_queue_url.as_deref(), Some(url));
        for bad in [
            "https://sqs.eu-west-1.amazonaws.com/123456789012/sluice-sync",
            "sqs.eu-west-1.amazonaws.com/123456789012/sluice-sync.fifo",
            "arn:aws:sqs:eu-west-1:123456789012:sluice-sync.fifo",
            "https:///.fifo",
        ] {
            let e = with(&[("SLUICE_SYNC_QUEUE_URL", bad)]).unwrap_err();
            assert_eq!(e.name, "SLUICE_SYNC_QUEUE_URL", "{bad}");
        }
    }

    #[test]
    fn component_storage_is_local_unless_a_bucket_is_named() {
        let c = with(&[]).unwrap();
        assert_eq!(c.components.bucket, None);
        let c = with(&[("SLUICE_COMPONENT_BUCKET", "acme-components.v2")]).unwrap();
        assert_eq!(c.components.bucket.as_deref(), Some("acme-components.v2"));
        assert_eq!(c.components.table, "sluice-components");
        assert!(c.components.replicas.is_empty());
        let c = with(&[
            ("SLUICE_COMPONENT_BUCKET", "acme-components"),
            (
                "SLUICE_COMPONENT_REPLICAS",
                "eu-west-1=acme-components-eu, ap-southeast-2=acme-components-ap",
            ),
        ])
        .unwrap();
        assert_eq!(
            c.components.replicas,
            vec![
                ("eu-west-1".to_string(), "acme-components-eu".to_string()),
                (
                    "ap-southeast-2".to_string(),
                    "acme-components-ap".to_string()
                )
            ]
        );
        for bad in [
            "acme-components-eu",
            "eu-west-1=",
            "EU=acme-components-eu",
            "eu-west-1=Bad_Bucket",
            "eu-west-1=a-bucket,eu-west-1=b-bucket",
        ] {
            let e = with(&[
                ("SLUICE_COMPONENT_BUCKET", "acme-components"),
                ("SLUICE_COMPONENT_REPLICAS", bad),
            ])
            .unwrap_err();
            assert_eq!(e.name, "SLUICE_COMPONENT_REPLICAS", "{bad}");
        }
        // Replicas of no bucket.
        let e = with(&[("SLUICE_COMPONENT_REPLICAS", "eu-west-1=acme-components-eu")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_COMPONENT_REPLICAS");
        for bad in ["Acme", "s3://acme", "ab", "-acme"] {
            let e = with(&[("SLUICE_COMPONENT_BUCKET", bad)]).unwrap_err();
            assert_eq!(e.name, "SLUICE_COMPONENT_BUCKET", "{bad}");
        }
    }

    #[test]
    fn the_tenant_role_must_be_a_role_arn() {
        assert_eq!(with(&[]).unwrap().cache_tenant_role_arn, None);
        let arn = "arn:aws:iam::123456789012:role/sluice/cache-tenant";
        let c = with(&[("SLUICE_CACHE_TENANT_ROLE_ARN", arn)]).unwrap();
        assert_eq!(c.cache_tenant_role_arn.as_deref(), Some(arn));
        for bad in [
            "cache-tenant",
            "arn:aws:iam::123456789012:user/bob",
            "arn:aws:iam::1234:role/x",
            "arn:aws:iam::123456789012:role/",
        ] {
            let e = with(&[("SLUICE_CACHE_TENANT_ROLE_ARN", bad)]).unwrap_err();
            assert_eq!(e.name, "SLUICE_CACHE_TENANT_ROLE_ARN", "{bad}");
        }
    }
}
