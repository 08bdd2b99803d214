//! The memory store every in-process test answers from keeps the store contract Qdrant Edge
//! keeps (`crates/retrieve/tests/store.rs` runs the same suite on a real shard).

use std::sync::Arc;

use sluice_contract::stages::Store;
use sluice_testkit::MemoryStore;

async fn memory() -> (Arc<dyn Store>, ()) {
    (Arc::new(MemoryStore::new()), ())
}

sluice_testkit::store_suite!(memory());
