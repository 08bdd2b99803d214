//! A Pinecone index host that keeps what it is sent: a server on 127.0.0.1 holding each
//! namespace's records (id, dense or sparse values, flat metadata, numbers as doubles as
//! Pinecone keeps them) and answering queries, fetches, listings by metadata, deletions and
//! stats by Pinecone's documented semantics — cosine for a dense index, dot product for a
//! sparse one, its metadata filter language ([`passes`]) inside the query — so that the
//! adapter is held to the store contract by an index with state, not by canned answers. What
//! it does not model: Pinecone's approximate ranking (exact here), its eventual consistency
//! (reads see writes at once) and its pagination tokens' form (its own, refused when unknown).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::http::{Method, StatusCode, Uri};
use serde_json::{Map, Value, json};

/// An index host: records by namespace, then id.
pub struct PineconeIndex {
    /// What `$ne`/`$nin` do to a record without the key, which Pinecone does not document
    /// ([`passes`]).
    absent_negations: bool,
    namespaces: Mutex<BTreeMap<String, BTreeMap<String, Value>>>,
}

/// Where a listing's next page starts, in this host's tokens.
const AFTER: &str = "after:";

impl PineconeIndex {
    /// Starts an empty index host; returns it and its base URL.
    pub async fn start(absent_negations: bool) -> (Arc<Self>, String) {
        let index = Arc::new(Self {
            absent_negations,
            namespaces: Mutex::default(),
        });
        let serving = Arc::clone(&index);
        let url =
            crate::common::serve_json(move |method, uri, body| serving.answer(method, uri, body))
                .await;
        (index, url)
    }

    /// The records of `body`'s namespace that its `filter` (if any) lets through, by id.
    fn selected(&self, body: &Value) -> Vec<Value> {
        let namespaces = self.namespaces.lock().unwrap();
        let namespace = body["namespace"].as_str().unwrap_or_default();
        (namespaces.get(namespace).into_iter().flatten())
            .filter(|(_, r)| {
                body.get("filter")
                    .is_none_or(|f| passes(f, &r["metadata"], self.absent_negations))
            })
            .map(|(_, r)| r.clone())
            .collect()
    }

    fn answer(&self, method: &Method, uri: &Uri, body: Value) -> (StatusCode, Value) {
        let namespace = body["namespace"].as_str().unwrap_or_default().to_string();
        let usage = json!({"readUnits": 1});
        match (method, uri.path()) {
            (&Method::POST, "/vectors/upsert") => {
                let records = body["vectors"].as_array().cloned().unwrap_or_default();
                let n = records.len();
                let mut namespaces = self.namespaces.lock().unwrap();
                let kept = namespaces.entry(namespace).or_default();
                for mut record in records {
                    record["metadata"] = doubles(record["metadata"].take());
                    let id = record["id"].as_str().unwrap_or_default().to_string();
                    kept.insert(id, record);
                }
                (StatusCode::OK, json!({"upsertedCount": n}))
            }
            (&Method::POST, "/vectors/delete") => {
                let gone: Vec<String> = match body.get("ids") {
                    Some(ids) => serde_json::from_value(ids.clone()).unwrap_or_default(),
                    None if body.get("filter").is_some() => (self.selected(&body).iter())
                        .map(|r| r["id"].as_str().unwrap_or_default().to_string())
                        .collect(),
                    None => return bad("a deletion names ids, a filter or deleteAll"),
                };
                let mut namespaces = self.namespaces.lock().unwrap();
                if let Some(kept) = namespaces.get_mut(&namespace) {
                    gone.iter().for_each(|id| drop(kept.remove(id)));
                }
                (StatusCode::OK, json!({}))
            }
            (&Method::POST, "/query") => {
                let top_k = body["topK"].as_u64().unwrap_or(10) as usize;
                let mut matches: Vec<(f64, Value)> = (self.selected(&body).into_iter())
                    .filter_map(|r| score(&body, &r).map(|s| (s, r)))
                    .collect();
                matches.sort_by(|a, b| b.0.total_cmp(&a.0));
                matches.truncate(top_k);
                let matches: Vec<Value> = (matches.into_iter())
                    .map(|(score, mut r)| {
                        r["score"] = json!(score);
                        if body["includeValues"] != true {
                            r.as_object_mut().map(|r| r.remove("values"));
                        }
                        r
                    })
                    .collect();
                let answer = json!({"matches": matches, "namespace": namespace, "usage": usage});
                (StatusCode::OK, answer)
            }
            (&Method::POST, "/vectors/fetch_by_metadata") => {
                let limit = body["limit"].as_u64().unwrap_or(100) as usize;
                let after = match body["paginationToken"].as_str() {
                    None => None,
                    Some(token) => match token.strip_prefix(AFTER) {
                        Some(id) => Some(id.to_string()),
                        None => return bad("invalid pagination token"),
                    },
                };
                let mut records: Vec<Value> = (self.selected(&body).into_iter())
                    .filter(|r| after.as_deref().is_none_or(|a| r["id"].as_str() > Some(a)))
                    .collect();
                let more = records.len() > limit;
                records.truncate(limit);
                let mut page = json!({"namespace": namespace, "usage": usage});
                if let (true, Some(last)) = (more, records.last()) {
                    let last = last["id"].as_str().unwrap_or_default();
                    page["pagination"] = json!({ "next": format!("{AFTER}{last}") });
                }
                page["vectors"] = by_id(records);
                (StatusCode::OK, page)
            }
            (&Method::GET, "/vectors/fetch") => {
                let query = uri.query().unwrap_or_default();
                let param = |name: &str| {
                    (query.split('&').filter_map(|kv| kv.split_once('=')))
                        .filter(|(k, _)| *k == name)
                        .map(|(_, v)| v.to_string())
                        .collect::<Vec<_>>()
                };
                let namespace = param("namespace").pop().unwrap_or_default();
                let namespaces = self.namespaces.lock().unwrap();
                let kept = namespaces.get(&namespace);
                let found = (param("ids").iter())
                    .filter_map(|id| kept.and_then(|k| k.get(id)).cloned())
                    .collect();
                let answer = json!({"vectors": by_id(found), "namespace": namespace,
                                    "usage": usage});
                (StatusCode::OK, answer)
            }
            (&Method::POST, "/describe_index_stats") => {
                let namespaces = self.namespaces.lock().unwrap();
                let counts: Map<String, Value> = (namespaces.iter())
                    .map(|(ns, kept)| (ns.clone(), json!({"vectorCount": kept.len()})))
                    .collect();
                let total: usize = namespaces.values().map(BTreeMap::len).sum();
                let answer = json!({"namespaces": counts, "totalVectorCount": total,
                                    "indexFullness": 0.0});
                (StatusCode::OK, answer)
            }
            _ => (StatusCode::NOT_IMPLEMENTED, Value::Null),
        }
    }
}

fn bad(message: &str) -> (StatusCode, Value) {
    (
        StatusCode::BAD_REQUEST,
        json!({"code": 3, "message": message, "details": []}),
    )
}

/// Records as a fetch returns them: an object by id.
fn by_id(records: Vec<Value>) -> Value {
    (records.into_iter())
        .map(|r| (r["id"].as_str().unwrap_or_default().to_string(), r))
        .collect::<Map<String, Value>>()
        .into()
}

/// Metadata numbers as Pinecone keeps them: doubles.
fn doubles(value: Value) -> Value {
    match value {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(items) => Value::Array(items.into_iter().map(doubles).collect()),
        Value::Object(fields) => {
            Value::Object(fields.into_iter().map(|(k, v)| (k, doubles(v))).collect())
        }
        v => v,
    }
}

/// A record's score for a query: cosine of dense values, dot product of sparse ones; `None`
/// when the record has no values of the query's kind.
fn score(query: &Value, record: &Value) -> Option<f64> {
    let floats = |v: &Value| -> Vec<f64> {
        (v.as_array().into_iter().flatten())
            .filter_map(Value::as_f64)
            .collect()
    };
    if let Some(vector) = query.get("vector") {
        let (a, b) = (floats(vector), floats(record.get("values")?));
        let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        return Some(dot / (norm(&a) * norm(&b)).max(f64::MIN_POSITIVE));
    }
    let (query, values) = (&query["sparseVector"], record.get("sparseValues")?);
    let weights: BTreeMap<u64, f64> = (query["indices"].as_array().into_iter().flatten())
        .filter_map(Value::as_u64)
        .zip(floats(&query["values"]))
        .collect();
    let dot = (values["indices"].as_array().into_iter().flatten())
        .filter_map(Value::as_u64)
        .zip(floats(&values["values"]))
        .filter_map(|(i, v)| weights.get(&i).map(|w| w * v))
        .sum();
    Some(dot)
}

/// Whether a record's metadata passes a Pinecone filter, by Pinecone's documented semantics:
/// the keys of an object ANDed, `$and`/`$or`, `$eq $ne $gt $gte $lt $lte $in $nin $exists`,
/// a list value holding when one element does (`$ne`/`$nin`: when none does), numbers
/// compared as doubles. What `$ne`/`$nin` do to a record without the key is not documented:
/// `absent_negations` says which reading to apply, and Sluice's filter must mean the same
/// under both. An independent reading of the filter Sluice sends.
pub fn passes(filter: &Value, metadata: &Value, absent_negations: bool) -> bool {
    filter
        .as_object()
        .unwrap()
        .iter()
        .all(|(key, arg)| match key.as_str() {
            "$and" => arg
                .as_array()
                .unwrap()
                .iter()
                .all(|f| passes(f, metadata, absent_negations)),
            "$or" => arg
                .as_array()
                .unwrap()
                .iter()
                .any(|f| passes(f, metadata, absent_negations)),
            field => arg.as_object().unwrap().iter().all(|(op, arg)| {
                let value = metadata.get(field);
                if op == "$exists" {
                    return value.is_some() == arg.as_bool().unwrap();
                }
                let Some(value) = value else {
                    return matches!(op.as_str(), "$ne" | "$nin") && absent_negations;
                };
                let items: Vec<&Value> = match value {
                    Value::Array(items) => items.iter().collect(),
                    v => vec![v],
                };
                let same = |a: &Value, b: &Value| match (a.as_f64(), b.as_f64()) {
                    (Some(x), Some(y)) => x == y,
                    _ => a == b,
                };
                let among = |list: &Value| {
                    items
                        .iter()
                        .any(|i| list.as_array().unwrap().iter().any(|x| same(i, x)))
                };
                let cmp = |test: fn(f64, f64) -> bool| {
                    items.iter().any(|i| {
                        i.as_f64()
                            .zip(arg.as_f64())
                            .is_some_and(|(x, b)| test(x, b))
                    })
                };
                match op.as_str() {
                    "$eq" => items.iter().any(|i| same(i, arg)),
                    "$ne" => !items.iter().any(|i| same(i, arg)),
                    "$in" => among(arg),
                    "$nin" => !among(arg),
                    "$gt" => cmp(|x, b| x > b),
                    "$gte" => cmp(|x, b| x >= b),
                    "$lt" => cmp(|x, b| x < b),
                    "$lte" => cmp(|x, b| x <= b),
                    other => panic!("not a Pinecone operator: {other}"),
                }
            }),
        })
}
