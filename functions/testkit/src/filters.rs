//! The metadata filter cases every store is checked with: a small corpus whose metadata has
//! every kind of value (strings, integers and decimals, booleans, dates with offsets, lists,
//! absent keys), and filters using every operator, alone and combined. A store passes when
//! each filter returns exactly the documents [`Filter::matches`] (the reference meaning, pinned
//! with explicit answers in `sluice-core`'s own tests) lets through.

use serde_json::{Value, json};
use sluice_core::filter::Filter;
use sluice_core::metadata::Metadata;

/// The corpus: (document id, metadata).
pub fn corpus() -> Vec<(&'static str, Metadata)> {
    [
        (
            "policy-2024",
            json!({"year": 2024, "team": "payments", "groups": ["finance", "hr"],
                   "updated_at": "2024-06-01T12:00:00Z", "public": true, "score": 0.25}),
        ),
        (
            "policy-2025",
            json!({"year": 2025, "team": "cards", "groups": ["finance"],
                   "updated_at": "2025-03-01T11:00:00+02:00", "public": false, "score": 0.75}),
        ),
        (
            "memo-legal",
            json!({"year": 2025.5, "team": "legal", "updated_at": "2025-03-02"}),
        ),
        ("untagged", json!({})),
        (
            "hr-guide",
            json!({"team": "people", "groups": ["hr"], "public": true}),
        ),
    ]
    .into_iter()
    .map(|(id, m)| (id, metadata(m)))
    .collect()
}

/// Metadata from a JSON object (panics on an invalid one: test data).
pub fn metadata(value: Value) -> Metadata {
    Metadata::from_json(value.as_object().expect("an object")).expect("valid metadata")
}

/// The filters, as a client would send them.
pub fn cases() -> Vec<Value> {
    vec![
        json!({"year": 2025}),
        json!({"year": {"$eq": 2025.5}}),
        json!({"year": {"$ne": 2025}}),
        json!({"team": "cards"}),
        json!({"team": {"$ne": "cards"}}),
        json!({"groups": "hr"}),
        json!({"groups": {"$ne": "hr"}}),
        json!({"groups": {"$in": ["hr", "nobody"]}}),
        json!({"groups": {"$nin": ["finance"]}}),
        json!({"team": {"$in": ["legal", "cards"]}}),
        json!({"team": {"$nin": ["legal", "cards"]}}),
        json!({"year": {"$in": [2024, 2025.5]}}),
        json!({"year": {"$nin": [2024]}}),
        json!({"year": {"$gt": 2024}}),
        json!({"year": {"$gte": 2024, "$lt": 2025.5}}),
        json!({"year": {"$lte": 2025}}),
        json!({"score": {"$gt": 0.5}}),
        json!({"public": true}),
        json!({"public": {"$ne": true}}),
        json!({"public": {"$exists": false}}),
        json!({"updated_at": {"$exists": true}}),
        json!({"updated_at": {"$gt": "2025-01-01"}}),
        json!({"updated_at": "2025-03-01T09:00:00.000Z"}),
        json!({"updated_at": {"$ne": "2025-03-01T09:00:00Z"}}),
        json!({"updated_at": {"$lt": "2025-03-01T09:00:00Z"}}),
        json!({"updated_at": {"$gte": "2025-03-01T09:00:00Z", "$lte": "2025-03-02T00:00:00Z"}}),
        json!({"updated_at": {"$in": ["2025-03-02"]}}),
        json!({"year": "2025"}),
        json!({"team": {"$gt": 0}}),
        json!({"year": 2025, "team": "cards"}),
        json!({"$or": [{"team": "legal"}, {"groups": "hr"}]}),
        json!({"$and": [{"year": {"$gte": 2025}}, {"$or": [{"public": false}, {"team": "legal"}]}]}),
        json!({"$or": [{"groups": {"$nin": ["finance"]}}, {"score": {"$lt": 0.5}}]}),
    ]
}

/// Each case parsed, with the ids of the corpus documents it lets through (by the reference
/// meaning), in corpus order.
pub fn expected() -> Vec<(Filter, Vec<&'static str>)> {
    let corpus = corpus();
    cases()
        .into_iter()
        .map(|value| {
            let filter = Filter::parse(&value).expect("a valid case");
            let ids = corpus
                .iter()
                .filter(|(_, m)| filter.matches(m))
                .map(|(id, _)| *id)
                .collect();
            (filter, ids)
        })
        .collect()
}
