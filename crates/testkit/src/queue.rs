//! A sync queue in memory, for the contract tests and the sync benchmark: what SQS FIFO does
//! that a sync relies on — messages kept in the order sent, a deduplication id taken once —
//! with the test playing Lambda's poller ([`MemoryBatches::take`], then
//! `Server::sync_message` for each).

use std::sync::Mutex;

use async_trait::async_trait;
use sluice_contract::sources::{Batches, QueueError, SyncMessage};

/// The messages sent, in order, each with its group.
#[derive(Default)]
pub struct MemoryBatches {
    sent: Mutex<Vec<(String, String, SyncMessage)>>,
}

#[async_trait]
impl Batches for MemoryBatches {
    async fn send(
        &self,
        group: &str,
        dedup: &str,
        message: &SyncMessage,
    ) -> Result<(), QueueError> {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        if !sent.iter().any(|(_, d, _)| d == dedup) {
            sent.push((group.into(), dedup.into(), message.clone()));
        }
        Ok(())
    }
}

impl MemoryBatches {
    /// The messages sent since the last call, in order, with their groups.
    pub fn take(&self) -> Vec<(String, SyncMessage)> {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.drain(..).map(|(g, _, b)| (g, b)).collect()
    }
}
