//! The AWS side of the Lambda deployment, apart from the answer cache (`sluice-cache-dynamodb`):
//!
//! - [`components::S3Components`]: the component registry's [`ComponentStorage`](sluice_contract::components::ComponentStorage)
//!   — uploads and compiled artefacts in S3, versions and the active pointer in DynamoDB —
//!   shared by the registry function (which compiles, for its own architecture) and the
//!   answer function (which loads what was compiled).
//! - [`keys::DynamoKeys`]: API keys (digests → tenants) for the functions' auth.
//! - [`documents::Documents`]: reads an uploaded document from S3 for the ingest function.
//! - [`usage::DynamoUsage`]: usage counters per tenant, key and day, added to atomically.
//! - [`records::DynamoRecords`]: tenants' evaluation sets, runs, ratings and gaps.
//! - [`queue::SyncQueue`]: the SQS FIFO queue a sync's batches go through.
//! - [`secrets::settings`]: `SLUICE_*` settings (the vector store's API key) from a Secrets
//!   Manager secret, read once at start.
//!
//! - [`AwsConfig`]: the deployment's AWS names (tables, buckets, the cache's tenant role),
//!   read and checked at start.
//!
//! Every client comes from [`sdk_config_with`]: the standard AWS environment (region, credentials,
//! `AWS_ENDPOINT_URL_<SERVICE>` for an emulator) with bounded timeouts and one retry.
#![warn(missing_docs)]

use std::time::Duration;

pub use config::{AwsConfig, ComponentsConfig};

pub mod components;
mod config;
pub mod documents;
pub mod keys;
pub mod queue;
pub mod records;
pub mod secrets;
pub mod settings;
pub mod usage;

/// Connecting to an AWS endpoint (in-region, or through a VPC endpoint): well under a second.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// One attempt of one call of this crate. Component artefacts are a few MB; documents up to
/// `SLUICE_MAX_INGEST_BYTES`.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// A call of this crate with its retry.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(25);

/// An AWS call that failed, or a setting that is missing.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// No region in the environment (`AWS_REGION`; Lambda always sets it).
    #[error("{0} needs an AWS region: set AWS_REGION")]
    NoRegion(&'static str),
    /// The service answered with an error, or could not be reached in time.
    #[error("{service}: {message}")]
    Call {
        /// Which service and call.
        service: &'static str,
        /// What went wrong, with the SDK's context.
        message: String,
    },
    /// What came back is not what was stored there.
    #[error("{0}")]
    Malformed(String),
}

impl AwsError {
    fn call(service: &'static str, e: impl std::error::Error) -> Self {
        Self::Call {
            service,
            message: aws_sdk_s3::error::DisplayErrorContext(e).to_string(),
        }
    }
}

/// The SDK configuration of this crate's clients: see [`sdk_config_with`].
async fn sdk_config(what: &'static str) -> Result<aws_config::SdkConfig, AwsError> {
    sdk_config_with(what, ATTEMPT_TIMEOUT, OPERATION_TIMEOUT).await
}

/// An SDK configuration from the standard environment, with a 1 s connect timeout, `attempt`
/// per attempt, `operation` per call, and two attempts. `what` names the feature that needs
/// AWS in the error when no region is set.
pub async fn sdk_config_with(
    what: &'static str,
    attempt: Duration,
    operation: Duration,
) -> Result<aws_config::SdkConfig, AwsError> {
    let timeouts = aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(attempt)
        .operation_timeout(operation)
        .build();
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .timeout_config(timeouts)
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(2))
        .load()
        .await;
    if sdk.region().is_none() {
        return Err(AwsError::NoRegion(what));
    }
    Ok(sdk)
}

/// A DynamoDB string attribute.
fn s(value: &str) -> aws_sdk_dynamodb::types::AttributeValue {
    aws_sdk_dynamodb::types::AttributeValue::S(value.to_string())
}

/// Whether a `PutItem` failed only because its condition did not hold (another writer came
/// first), which its caller answers on its own terms.
fn lost_condition(
    e: &aws_sdk_dynamodb::error::SdkError<aws_sdk_dynamodb::operation::put_item::PutItemError>,
) -> bool {
    e.as_service_error()
        .is_some_and(|e| e.is_conditional_check_failed_exception())
}

/// Creates the DynamoDB table `table` with on-demand billing, keyed by the string attributes
/// `keys` (the partition key, then the sort key if any): for the tests and `sluice keys
/// create-table`; the SAM template creates the tables of a deployment.
async fn create_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &[&str],
) -> Result<(), AwsError> {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let malformed = |e: aws_sdk_dynamodb::error::BuildError| AwsError::Malformed(e.to_string());
    let mut create =
        (client.create_table().table_name(table)).billing_mode(BillingMode::PayPerRequest);
    for (i, name) in keys.iter().enumerate() {
        let kind = if i == 0 {
            KeyType::Hash
        } else {
            KeyType::Range
        };
        let attribute = (AttributeDefinition::builder().attribute_name(*name))
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(malformed)?;
        let key = (KeySchemaElement::builder().attribute_name(*name))
            .key_type(kind)
            .build()
            .map_err(malformed)?;
        create = create.attribute_definitions(attribute).key_schema(key);
    }
    create
        .send()
        .await
        .map(|_| ())
        .map_err(|e| AwsError::call("DynamoDB CreateTable", e))
}

/// An S3 client for `sdk`. With an endpoint override (`AWS_ENDPOINT_URL_S3` or
/// `AWS_ENDPOINT_URL`: an emulator or an S3-compatible store) it addresses buckets by path,
/// which such endpoints expect; against AWS, by virtual host as usual.
pub fn s3_client(sdk: &aws_config::SdkConfig) -> aws_sdk_s3::Client {
    s3_client_in(sdk, None)
}

/// [`s3_client`] for another region than the SDK's (`None`: the SDK's).
fn s3_client_in(sdk: &aws_config::SdkConfig, region: Option<&str>) -> aws_sdk_s3::Client {
    let custom = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    let mut config = aws_sdk_s3::config::Builder::from(sdk).force_path_style(custom);
    if let Some(region) = region {
        config = config.region(aws_config::Region::new(region.to_string()));
    }
    aws_sdk_s3::Client::from_conf(config.build())
}
