//! A sync queue in memory, for the contract tests and the sync benchmark: what SQS FIFO does
//! that a sync relies on — batches kept in the order sent, a deduplication id taken once —
//! with the test playing Lambda's poller ([`MemoryBatches::take`], then
//! `Server::sync_batch` for each).

use std::sync::Mutex;

use async_trait::async_trait;
use sluice_contract::sources::{Batches, QueueError, SyncBatch};

/// The batches sent, in order, each with its group.
#[derive(Default)]
pub struct MemoryBatches {
    sent: Mutex<Vec<(String, String, SyncBatch)>>,
}

#[async_trait]
impl Batches for MemoryBatches {
    async fn send(&self, group: &str, dedup: &str, batch: &SyncBatch) -> Result<(), QueueError> {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        if !sent.iter().any(|(_, d, _)| d == dedup) {
            sent.push((group.into(), dedup.into(), batch.clone()));
        }
        Ok(())
    }
}

impl MemoryBatches {
    /// The batches sent since the last call, in order, with their groups.
    pub fn take(&self) -> Vec<(String, SyncBatch)> {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.drain(..).map(|(g, _, b)| (g, b)).collect()
    }
}
