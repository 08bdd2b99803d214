//! The queue syncs go through on AWS ([`SyncQueue`]): an SQS FIFO queue whose messages — a due
//! source's start, a sync's batches — the ingest function receives (its SQS event source, one
//! message at a time). The message group is the source, so that a source's messages are read
//! one after another, in order: its site is asked one page at a time, and the last batch, read
//! last, writes the sync's report.

use sluice_contract::sources::{Batches, QueueError, SyncMessage};

use crate::AwsError;

/// The FIFO queue named by `SLUICE_SYNC_QUEUE_URL`.
pub struct SyncQueue {
    client: aws_sdk_sqs::Client,
    url: String,
}

impl SyncQueue {
    /// A client of the queue at `url`, from the standard AWS environment (`AWS_ENDPOINT_URL_SQS`
    /// for an emulator).
    pub async fn connect(url: &str) -> Result<Self, AwsError> {
        let sdk = crate::sdk_config("the sync queue (SLUICE_SYNC_QUEUE_URL)").await?;
        Ok(Self {
            client: aws_sdk_sqs::Client::new(&sdk),
            url: url.to_string(),
        })
    }
}

#[async_trait::async_trait]
impl Batches for SyncQueue {
    async fn send(
        &self,
        group: &str,
        dedup: &str,
        message: &SyncMessage,
    ) -> Result<(), QueueError> {
        let body = serde_json::to_string(message).map_err(|e| QueueError(e.to_string()))?;
        // A FIFO queue's group and deduplication ids: at most 128 characters of ASCII
        // punctuation and alphanumerics; a digest keeps any tenant/source/sync names within.
        let id = |value: &str| sluice_contract::sha256_hex(value.as_bytes())[..64].to_string();
        (self.client.send_message())
            .queue_url(&self.url)
            .message_group_id(id(group))
            .message_deduplication_id(id(dedup))
            .message_body(body)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| QueueError(AwsError::call("SQS SendMessage", e).to_string()))
    }
}
