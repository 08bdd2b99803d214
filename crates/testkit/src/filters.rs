//! The metadata filter cases every store is checked with: a small corpus whose metadata has
//! every kind of value (strings, integers and decimals, booleans, dates with offsets, lists,
//! absent keys), and filters using every operator, alone and combined, each with the documents
//! it lets through written out by hand. A store passes when each filter returns exactly those;
//! [`Filter::matches`], the reference meaning, is held to the same answers (the test below).

use serde_json::{Value, json};
use sluice_contract::filter::Filter;
use sluice_contract::metadata::Metadata;

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

/// The filters, as a client would send them, each with the corpus documents it lets through
/// (in corpus order), written out by hand from the meaning in `sluice_contract::filter`'s docs —
/// not computed by the code under test.
pub fn cases() -> Vec<(Value, Vec<&'static str>)> {
    vec![
        (json!({"year": 2025}), vec!["policy-2025"]),
        (json!({"year": {"$eq": 2025.5}}), vec!["memo-legal"]),
        (
            json!({"year": {"$ne": 2025}}),
            vec!["policy-2024", "memo-legal", "untagged", "hr-guide"],
        ),
        (json!({"team": "cards"}), vec!["policy-2025"]),
        (
            json!({"team": {"$ne": "cards"}}),
            vec!["policy-2024", "memo-legal", "untagged", "hr-guide"],
        ),
        (json!({"groups": "hr"}), vec!["policy-2024", "hr-guide"]),
        (
            json!({"groups": {"$ne": "hr"}}),
            vec!["policy-2025", "memo-legal", "untagged"],
        ),
        (
            json!({"groups": {"$in": ["hr", "nobody"]}}),
            vec!["policy-2024", "hr-guide"],
        ),
        (
            json!({"groups": {"$nin": ["finance"]}}),
            vec!["memo-legal", "untagged", "hr-guide"],
        ),
        (
            json!({"team": {"$in": ["legal", "cards"]}}),
            vec!["policy-2025", "memo-legal"],
        ),
        (
            json!({"team": {"$nin": ["legal", "cards"]}}),
            vec!["policy-2024", "untagged", "hr-guide"],
        ),
        (
            json!({"year": {"$in": [2024, 2025.5]}}),
            vec!["policy-2024", "memo-legal"],
        ),
        (
            json!({"year": {"$nin": [2024]}}),
            vec!["policy-2025", "memo-legal", "untagged", "hr-guide"],
        ),
        (
            json!({"year": {"$gt": 2024}}),
            vec!["policy-2025", "memo-legal"],
        ),
        (
            json!({"year": {"$gte": 2024, "$lt": 2025.5}}),
            vec!["policy-2024", "policy-2025"],
        ),
        (
            json!({"year": {"$lte": 2025}}),
            vec!["policy-2024", "policy-2025"],
        ),
        (json!({"score": {"$gt": 0.5}}), vec!["policy-2025"]),
        (json!({"public": true}), vec!["policy-2024", "hr-guide"]),
        (
            json!({"public": {"$ne": true}}),
            vec!["policy-2025", "memo-legal", "untagged"],
        ),
        (
            json!({"public": {"$exists": false}}),
            vec!["memo-legal", "untagged"],
        ),
        (
            json!({"updated_at": {"$exists": true}}),
            vec!["policy-2024", "policy-2025", "memo-legal"],
        ),
        (
            json!({"updated_at": {"$gt": "2025-01-01"}}),
            vec!["policy-2025", "memo-legal"],
        ),
        (
            json!({"updated_at": "2025-03-01T09:00:00.000Z"}),
            vec!["policy-2025"],
        ),
        (
            json!({"updated_at": {"$ne": "2025-03-01T09:00:00Z"}}),
            vec!["policy-2024", "memo-legal", "untagged", "hr-guide"],
        ),
        (
            json!({"updated_at": {"$lt": "2025-03-01T09:00:00Z"}}),
            vec!["policy-2024"],
        ),
        (
            json!({"updated_at": {"$gte": "2025-03-01T09:00:00Z", "$lte": "2025-03-02T00:00:00Z"}}),
            vec!["policy-2025", "memo-legal"],
        ),
        (
            json!({"updated_at": {"$in": ["2025-03-02"]}}),
            vec!["memo-legal"],
        ),
        (json!({"year": "2025"}), vec![]),
        (json!({"team": {"$gt": 0}}), vec![]),
        (json!({"year": 2025, "team": "cards"}), vec!["policy-2025"]),
        (
            json!({"$or": [{"team": "legal"}, {"groups": "hr"}]}),
            vec!["policy-2024", "memo-legal", "hr-guide"],
        ),
        (
            json!({"$and": [{"year": {"$gte": 2025}}, {"$or": [{"public": false}, {"team": "legal"}]}]}),
            vec!["policy-2025", "memo-legal"],
        ),
        (
            json!({"$or": [{"groups": {"$nin": ["finance"]}}, {"score": {"$lt": 0.5}}]}),
            vec!["policy-2024", "memo-legal", "untagged", "hr-guide"],
        ),
    ]
}

/// Each case parsed, with the ids of the corpus documents it lets through, in corpus order.
pub fn expected() -> Vec<(Filter, Vec<&'static str>)> {
    cases()
        .into_iter()
        .map(|(value, ids)| (Filter::parse(&value).expect("a valid case"), ids))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_meaning_gives_the_written_answers() {
        let corpus = corpus();
        for (filter, written) in expected() {
            let matched: Vec<&str> = (corpus.iter())
                .filter(|(_, m)| filter.matches(m))
                .map(|(id, _)| *id)
                .collect();
            assert_eq!(matched, written, "{}", filter.to_json());
        }
    }
}
