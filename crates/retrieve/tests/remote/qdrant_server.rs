//! Qdrant's REST API over Qdrant's own engine: a server on 127.0.0.1 whose collections are
//! Qdrant Edge shards (the engine a Qdrant server runs, embedded), so that the REST adapter is
//! held to the store contract by real filtering, fusion, scrolling and counting — not by
//! canned answers. The request bodies are read into the engine's own request types (its
//! filter, scroll, count, point and index types take Qdrant's REST JSON as it is); the query
//! API's vector forms are read here. It serves the calls the adapter makes; anything else is
//! 501, a body the engine refuses 400 with Qdrant's error form.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::{Method, StatusCode};
use qdrant_edge::external::ordered_float::OrderedFloat;
use qdrant_edge::{
    CountRequest, CreateIndex, Distance, EdgeConfigBuilder, EdgeShard,
    EdgeSparseVectorParamsBuilder, EdgeVectorParamsBuilder, FieldIndexOperations, Filter, Fusion,
    Modifier, NamedQuery, PointId, PointInsertOperations, PointOperations, Prefetch, QueryEnum,
    QueryRequest, ScoredPoint, ScoringQuery, ScrollRequest, SparseVector, UpdateOperation,
    VectorInternal, VectorStructInternal, WithPayloadInterface, WithVector,
};
use serde_json::{Value, json};

/// The server: its collections by name, each a shard in a folder of its own.
pub struct QdrantServer {
    /// Before the folder: a shard flushes into it as it closes.
    collections: Mutex<HashMap<String, Arc<EdgeShard>>>,
    dir: tempfile::TempDir,
}

type Answer = (StatusCode, Value);

fn ok(result: Value) -> Answer {
    (
        StatusCode::OK,
        json!({"result": result, "status": "ok", "time": 0.0}),
    )
}

fn ack() -> Answer {
    ok(json!({"operation_id": 0, "status": "completed"}))
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Answer {
    (
        status,
        json!({"status": {"error": message.to_string()}, "time": 0.0}),
    )
}

fn bad(e: impl std::fmt::Display) -> Answer {
    error(StatusCode::BAD_REQUEST, format!("Bad request: {e}"))
}

/// `body[key]` (or the whole body for `None`) read into the engine's type `T`.
fn read<T: serde::de::DeserializeOwned>(body: &Value, key: Option<&str>) -> Result<T, Answer> {
    let part = key.map_or(body, |k| &body[k]).clone();
    serde_json::from_value(part).map_err(bad)
}

impl QdrantServer {
    /// Starts a server with no collection; returns it and its base URL.
    pub async fn start() -> (Arc<Self>, String) {
        let server = Arc::new(Self {
            collections: Mutex::default(),
            dir: tempfile::tempdir().unwrap(),
        });
        let serving = Arc::clone(&server);
        let url = crate::common::serve_json(move |method, uri, body| {
            serving.answer(method, uri.path(), &body)
        })
        .await;
        (server, url)
    }

    /// One call; the engine's calls are synchronous and short (a test's few hundred points).
    fn answer(&self, method: &Method, path: &str, body: &Value) -> Answer {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let answer = match (method, parts.as_slice()) {
            (&Method::PUT, ["collections", name]) => self.create(name, body),
            (_, ["collections", name, rest @ ..]) => match self.collection(name) {
                None => Err(error(
                    StatusCode::NOT_FOUND,
                    format!("Not found: Collection `{name}` doesn't exist!"),
                )),
                Some(shard) => serve(&shard, method, rest, body),
            },
            _ => Err((StatusCode::NOT_IMPLEMENTED, Value::Null)),
        };
        answer.unwrap_or_else(|e| e)
    }

    fn collection(&self, name: &str) -> Option<Arc<EdgeShard>> {
        self.collections.lock().unwrap().get(name).cloned()
    }

    /// `PUT /collections/{name}`: dense vectors (one unnamed or several named, each with its
    /// size and distance) and sparse ones (with their modifier).
    fn create(&self, name: &str, body: &Value) -> Result<Answer, Answer> {
        let mut config = EdgeConfigBuilder::new();
        let dense = |name: &str, params: &Value| -> Result<_, Answer> {
            let size = params["size"].as_u64().ok_or_else(|| bad("vector size"))?;
            let distance: Distance = read(params, Some("distance"))?;
            Ok((
                name.to_string(),
                EdgeVectorParamsBuilder::new(size as usize, distance).build(),
            ))
        };
        let vectors = &body["vectors"];
        let named = match vectors.get("size") {
            Some(_) => vec![dense("", vectors)?],
            None => (vectors.as_object().into_iter().flatten())
                .map(|(name, params)| dense(name, params))
                .collect::<Result<_, _>>()?,
        };
        for (name, params) in named {
            config = config.vector(&name, params);
        }
        for (name, params) in body["sparse_vectors"].as_object().into_iter().flatten() {
            let modifier: Modifier = match params.get("modifier") {
                Some(m) => read(m, None)?,
                None => Modifier::None,
            };
            let params = EdgeSparseVectorParamsBuilder::new()
                .modifier(modifier)
                .build();
            config = config.sparse_vector(name, params);
        }
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(&path).map_err(bad)?;
        let shard = EdgeShard::new(&path, config.build()).map_err(bad)?;
        (self.collections.lock().unwrap()).insert(name.to_string(), Arc::new(shard));
        Ok(ok(json!(true)))
    }
}

/// One call on an existing collection.
fn serve(
    shard: &EdgeShard,
    method: &Method,
    path: &[&str],
    body: &Value,
) -> Result<Answer, Answer> {
    let update = |op: UpdateOperation| shard.update(op).map(|_| ack()).map_err(bad);
    let points = |op: PointOperations| update(UpdateOperation::PointOperation(op));
    match (method, path) {
        (&Method::GET, []) => Ok(ok(json!({"status": "green", "points_count": null}))),
        (&Method::PUT, ["index"]) => {
            let index: CreateIndex = read(body, None)?;
            update(UpdateOperation::FieldIndexOperation(
                FieldIndexOperations::CreateIndex(index),
            ))
        }
        (&Method::PUT, ["points"]) => {
            let insert: PointInsertOperations = read(body, None)?;
            points(PointOperations::UpsertPoints(insert))
        }
        (&Method::POST, ["points", "delete"]) => {
            let filter: Filter = read(body, Some("filter"))?;
            points(PointOperations::DeletePointsByFilter(filter))
        }
        (&Method::POST, ["points", "count"]) => {
            let request: CountRequest = read(body, None)?;
            let count = shard.count(request).map_err(bad)?;
            Ok(ok(json!({ "count": count })))
        }
        (&Method::POST, ["points", "scroll"]) => {
            let request: ScrollRequest = read(body, None)?;
            let (records, next) = shard.scroll(request).map_err(bad)?;
            let points: Vec<Value> = (records.into_iter())
                .map(|r| json!({"id": r.id, "payload": r.payload}))
                .collect();
            Ok(ok(json!({"points": points, "next_page_offset": next})))
        }
        (&Method::GET, ["points", id]) => {
            let id: PointId = read(&json!(id), None)?;
            let found = shard.retrieve(&[id], None, None).map_err(bad)?;
            match found.into_iter().next() {
                Some(r) => Ok(ok(json!({"id": r.id, "payload": r.payload}))),
                None => Err(error(
                    StatusCode::NOT_FOUND,
                    format!("Not found: Point with id {id} does not exists!"),
                )),
            }
        }
        (&Method::POST, ["points", "query"]) => Ok(ok(json!({"points": query(shard, body)?}))),
        (&Method::POST, ["points", "query", "batch"]) => {
            let searches = body["searches"].as_array().ok_or_else(|| bad("searches"))?;
            let results: Vec<Value> = (searches.iter())
                .map(|s| query(shard, s).map(|points| json!({ "points": points })))
                .collect::<Result<_, _>>()?;
            Ok(ok(json!(results)))
        }
        _ => Err((StatusCode::NOT_IMPLEMENTED, Value::Null)),
    }
}

/// A Query API request (`query`: a dense vector, a sparse one or an RRF fusion of its
/// prefetches) run on the engine; the scored points in the REST form.
fn query(shard: &EdgeShard, body: &Value) -> Result<Vec<Value>, Answer> {
    let filter: Option<Filter> = read(body, Some("filter"))?;
    let limit = body["limit"].as_u64().unwrap_or(10) as usize;
    let prefetches = (body["prefetch"].as_array().into_iter().flatten())
        .map(|p| {
            Ok(Prefetch {
                prefetches: vec![],
                query: Some(scoring(p)?),
                limit: p["limit"].as_u64().unwrap_or(10) as usize,
                params: None,
                filter: read(p, Some("filter"))?,
                score_threshold: None,
            })
        })
        .collect::<Result<_, Answer>>()?;
    let with_vector = match body.get("with_vector") {
        Some(v) => read(v, None)?,
        None => WithVector::Bool(false),
    };
    let request = QueryRequest {
        prefetches,
        query: Some(scoring(body)?),
        filter,
        score_threshold: None,
        limit,
        offset: 0,
        params: None,
        with_vector,
        with_payload: WithPayloadInterface::Bool(body["with_payload"] == true),
    };
    let points = shard.query(request).map_err(bad)?;
    Ok(points.into_iter().map(scored_point).collect())
}

/// What a query (or a prefetch) ranks by.
fn scoring(body: &Value) -> Result<ScoringQuery, Answer> {
    let query = &body["query"];
    if let Some(rrf) = query.get("rrf") {
        let k = rrf["k"].as_u64().unwrap_or(2) as usize;
        let weights = (rrf["weights"].as_array()).map(|ws| {
            ws.iter()
                .map(|w| OrderedFloat(w.as_f64().unwrap_or(1.0) as f32))
                .collect()
        });
        return Ok(ScoringQuery::Fusion(Fusion::Rrf { k, weights }));
    }
    let vector = match query {
        Value::Array(_) => VectorInternal::Dense(read(query, None)?),
        _ => VectorInternal::Sparse(
            SparseVector::new(read(query, Some("indices"))?, read(query, Some("values"))?)
                .map_err(bad)?,
        ),
    };
    let using = body["using"].as_str().unwrap_or_default();
    Ok(ScoringQuery::Vector(QueryEnum::Nearest(NamedQuery::new(
        vector, using,
    ))))
}

/// A scored point in the REST form (`vector`: the named dense vectors asked for).
fn scored_point(p: ScoredPoint) -> Value {
    let vector = match p.vector {
        Some(VectorStructInternal::Named(named)) => Value::Object(
            (named.into_iter())
                .filter_map(|(name, v)| match v {
                    VectorInternal::Dense(v) => Some((name.to_string(), json!(v))),
                    _ => None,
                })
                .collect(),
        ),
        _ => Value::Null,
    };
    json!({"id": p.id, "version": p.version, "score": p.score, "payload": p.payload,
           "vector": vector})
}
