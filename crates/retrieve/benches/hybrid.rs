//! Hybrid retrieval (dense + BM25 prefetches fused by RRF, tenant-filtered) over 10,000
//! chunks in a Qdrant Edge shard. Texts are drawn from a fixed vocabulary and vectors are
//! deterministic pseudo-random unit vectors: query cost does not depend on what they mean.
//!
//! The same search is also measured with a metadata filter: a selective one that 1 % of the
//! chunks pass (`{"region": "apac"}`, 100 chunks) and a broad one that 50 % pass
//! (`{"year": {"$gte": 2025}}`), against none, in one run; and unfiltered under a weighted
//! RRF (computed by the engine) and a convex fusion (two engine queries, fused in Sluice).

use criterion::{Criterion, criterion_group, criterion_main};
use sluice_contract::filter::Filter;
use sluice_contract::fusion::Fusion;
use sluice_contract::stages::{DocumentInfo, Search, Store, StoredChunk};
use sluice_retrieve::EdgeStore;
use sluice_testkit::tenant;

const DIM: usize = 384;
const CHUNKS: usize = 10_000;
const PER_DOC: usize = 10;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> Vec<f32> {
        let v: Vec<f32> = (0..DIM)
            .map(|_| (self.next() % 2000) as f32 / 1000.0 - 1.0)
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / n).collect()
    }
}

const WORDS: &[&str] = &[
    "account",
    "balance",
    "card",
    "limit",
    "transfer",
    "fee",
    "interest",
    "mortgage",
    "loan",
    "branch",
    "payment",
    "deposit",
    "withdrawal",
    "statement",
    "password",
    "app",
    "fraud",
    "travel",
    "currency",
    "rate",
    "savings",
    "checking",
    "overdraft",
    "credit",
    "debit",
    "pin",
    "contactless",
    "wire",
    "swift",
    "sepa",
];

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = EdgeStore::open(dir.path(), DIM).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    runtime.block_on(async {
        for d in 0..CHUNKS / PER_DOC {
            let chunks = (0..PER_DOC)
                .map(|i| {
                    let text: Vec<&str> = (0..120)
                        .map(|_| WORDS[(rng.next() % WORDS.len() as u64) as usize])
                        .collect();
                    StoredChunk {
                        place: Default::default(),
                        header: String::new(),
                        index: i,
                        text: text.join(" "),
                        tokens: text.len(),
                        vector: rng.unit(),
                    }
                })
                .collect();
            // 1 document in 100 is apac; half the documents are from 2025 on; a third are
            // for one of 40 teams' end users alone.
            let mut metadata = serde_json::json!({
                "region": if d % 100 == 0 { "apac" } else { "emea" },
                "year": 2024 + (d % 2),
            });
            if d % 3 == 0 {
                metadata["_access"] = serde_json::json!([format!("group:team{}", d % 40)]);
            }
            let doc = DocumentInfo {
                format: None,
                digest: None,
                id: format!("doc{d}"),
                title: format!("Doc {d}"),
                source: "bench".into(),
                metadata: sluice_testkit::filters::metadata(metadata),
                origin: None,
            };
            store
                .replace_document(&tenant("bench"), &doc, chunks)
                .await
                .unwrap();
        }
        store.bump_corpus_version(&tenant("bench")).await.unwrap();
        assert_eq!(store.count(&tenant("bench")).await.unwrap(), CHUNKS);
    });
    let queries: Vec<Vec<f32>> = (0..64).map(|_| rng.unit()).collect();
    let filter = |v: serde_json::Value| Filter::parse(&v).unwrap();
    // The filters' cost beside no filter, and the fusion rules' beside plain RRF (the weighted
    // one in the engine; the convex one as two engine queries fused here).
    let (plain, weighted) = (
        Fusion::default(),
        Fusion::Rrf {
            k: 100,
            dense: 0.5,
            bm25: 1.0,
        },
    );
    let convex = Fusion::Convex { dense: 0.7 };
    // An end user of 1,000 principals (one of them a team's that holds documents).
    let principals: Vec<String> = (0..999)
        .map(|g| format!("group:other{g}"))
        .chain(["group:team9".to_string()])
        .collect();
    let access = sluice_contract::access::access_filter(Some(&principals));
    let cases = [
        ("hybrid_search_10k_chunks_k5", None, plain),
        (
            "hybrid_search_10k_chunks_k5_filter_1pct",
            Some(filter(serde_json::json!({"region": "apac"}))),
            plain,
        ),
        (
            "hybrid_search_10k_chunks_k5_filter_50pct",
            Some(filter(serde_json::json!({"year": {"$gte": 2025}}))),
            plain,
        ),
        (
            "hybrid_search_10k_chunks_k5_access_1000_principals",
            Some(access),
            plain,
        ),
        ("hybrid_search_10k_chunks_k5_weighted_rrf", None, weighted),
        ("hybrid_search_10k_chunks_k5_convex", None, convex),
    ];
    for (name, filter, fusion) in &cases {
        let mut i = 0;
        c.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                let hits = runtime
                    .block_on(
                        store.search(
                            &tenant("bench"),
                            &Search::new("daily card withdrawal limit abroad", &queries[i], 5)
                                .filter(filter.as_ref())
                                .fusion(*fusion),
                        ),
                    )
                    .unwrap();
                assert_eq!(hits.len(), 5, "a filter never returns fewer than k");
                hits
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
