//! Fresh AWS resources on the emulator `make test` starts (moto, named by the standard
//! `AWS_ENDPOINT_URL_<SERVICE>` variables): what the SAM template creates in AWS.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};

/// The SDK configuration the code under test uses, checked to point at the emulator.
pub async fn sdk() -> aws_config::SdkConfig {
    for service in ["S3", "DYNAMODB", "SECRETS_MANAGER", "SQS"] {
        assert!(
            std::env::var_os(format!("AWS_ENDPOINT_URL_{service}")).is_some(),
            "AWS_ENDPOINT_URL_{service} is not set: run the tests with `make test`, which starts the AWS emulator"
        );
    }
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}

/// A new, empty bucket with a unique name.
pub async fn bucket(prefix: &str) -> String {
    let name = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    sluice_aws::s3_client(&sdk().await)
        .create_bucket()
        .bucket(&name)
        .send()
        .await
        .expect("create bucket");
    name
}

/// Puts `bytes` at `key` in `bucket`.
pub async fn put_object(bucket: &str, key: &str, bytes: Vec<u8>) {
    put_typed(bucket, key, bytes, None).await
}

/// [`put_object`] with the object's `Content-Type`.
pub async fn put_typed(bucket: &str, key: &str, bytes: Vec<u8>, content_type: Option<&str>) {
    sluice_aws::s3_client(&sdk().await)
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(bytes.into())
        .set_content_type(content_type.map(str::to_string))
        .send()
        .await
        .expect("put object");
}

/// Sets the `sluice-access` tag of the object at `key` in `bucket` to `value` (`None`:
/// removes every tag).
pub async fn tag_access(bucket: &str, key: &str, value: Option<&str>) {
    use aws_sdk_s3::types::{Tag, Tagging};
    let client = sluice_aws::s3_client(&sdk().await);
    match value {
        Some(value) => {
            let tag = Tag::builder()
                .key(sluice_aws::documents::ACCESS_TAG)
                .value(value)
                .build()
                .expect("a tag");
            let tagging = Tagging::builder().tag_set(tag).build().expect("a tag set");
            (client.put_object_tagging().bucket(bucket).key(key))
                .tagging(tagging)
                .send()
                .await
                .expect("put object tagging");
        }
        None => {
            (client.delete_object_tagging().bucket(bucket).key(key))
                .send()
                .await
                .expect("delete object tagging");
        }
    }
}

/// The object at `key` in `bucket`, if any.
pub async fn object_exists(bucket: &str, key: &str) -> bool {
    sluice_aws::s3_client(&sdk().await)
        .head_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .is_ok()
}

/// A new component table (`pk`, `sk`: the SAM template's `ComponentTable`) with a unique name.
pub async fn component_table() -> String {
    let name = format!("components-{}", uuid::Uuid::new_v4().simple());
    let key = |name: &str, kind: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .expect("key")
    };
    let attr = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .expect("attribute")
    };
    aws_sdk_dynamodb::Client::new(&sdk().await)
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr("pk"))
        .attribute_definitions(attr("sk"))
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .send()
        .await
        .expect("create table");
    name
}

/// A new, empty records table with a unique name, as the code creates it: its name.
pub async fn records_table() -> String {
    let name = format!("records-{}", uuid::Uuid::new_v4().simple());
    let records = sluice_aws::records::DynamoRecords::connect(&name).await;
    records
        .expect("records client")
        .create_table()
        .await
        .expect("create table");
    name
}

/// A new secret holding `value` (JSON); its ARN.
pub async fn secret(value: &serde_json::Value) -> String {
    secret_text(&value.to_string()).await
}

/// A new secret whose string value is `text`; its ARN.
pub async fn secret_text(text: &str) -> String {
    let out = aws_sdk_secretsmanager::Client::new(&sdk().await)
        .create_secret()
        .name(format!("sluice-{}", uuid::Uuid::new_v4().simple()))
        .secret_string(text)
        .send()
        .await
        .expect("create secret");
    out.arn().expect("secret ARN").to_string()
}

/// A new FIFO queue with a unique name (as the SAM template's sync queue): its URL.
pub async fn fifo_queue(prefix: &str) -> String {
    let name = format!("{prefix}-{}.fifo", uuid::Uuid::new_v4().simple());
    let created = aws_sdk_sqs::Client::new(&sdk().await)
        .create_queue()
        .queue_name(&name)
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .expect("create queue");
    created.queue_url().expect("a queue URL").to_string()
}

/// Up to ten messages of the queue at `url` (as Lambda's SQS poller receives them), each
/// deleted once received: (message id, group, body) in the order SQS hands them out.
pub async fn receive(url: &str) -> Vec<(String, String, String)> {
    use aws_sdk_sqs::types::MessageSystemAttributeName;
    let client = aws_sdk_sqs::Client::new(&sdk().await);
    let received = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
        .send()
        .await
        .expect("receive messages");
    let mut messages = Vec::new();
    for m in received.messages() {
        let group = (m.attributes())
            .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
            .cloned()
            .unwrap_or_default();
        let (id, body) = (
            m.message_id().unwrap_or_default(),
            m.body().unwrap_or_default(),
        );
        messages.push((id.to_string(), group, body.to_string()));
        client
            .delete_message()
            .queue_url(url)
            .receipt_handle(m.receipt_handle().unwrap_or_default())
            .send()
            .await
            .expect("delete message");
    }
    messages
}
