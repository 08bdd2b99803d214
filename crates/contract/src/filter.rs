//! Metadata filters: which documents an answer may be built from, in the language Pinecone
//! and MongoDB users already write.
//!
//! ```json
//! {"year": 2025, "groups": {"$in": ["finance", "hr"]},
//!  "$or": [{"updated_at": {"$gte": "2025-01-01"}}, {"pinned": true}]}
//! ```
//!
//! The keys of an object are ANDed; a bare value means `$eq`. Operators: `$eq $ne` (string,
//! number, boolean or date), `$in $nin` (a list of strings and numbers), `$gt $gte $lt $lte`
//! (a number or a date), `$exists` (boolean), `$and $or` (a list of filters). A string that is
//! an RFC 3339 date ([`crate::metadata::parse_date`]) is compared as an instant by `$eq $ne
//! $gt $gte $lt $lte`, so `"2025-03-01T11:00:00+02:00"` equals `"2025-03-01T09:00:00Z"`.
//!
//! The meaning, for a document's value `v` under the key (the reference is
//! [`Filter::matches`]; each store's translation gives the same answers, which the tests check
//! store by store):
//! - `$eq x`: `v` is `x`, or `v` is a list holding `x`; `$in xs`: `$eq` one of `xs`;
//! - `$ne x`, `$nin xs`: not `$eq x`, not `$in xs` — including when the key is absent (as in
//!   MongoDB);
//! - ranges: `v` is a number (for a number) or a date (for a date) in range; strings, lists
//!   and booleans never are;
//! - `$exists b`: whether the document has the key.
//!
//! A filter is applied by the store, inside its query, never to the `k` results afterwards.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::metadata::{MetaValue, Metadata, check_key, parse_date};

/// Most conditions (field operators) in one filter.
pub const MAX_CONDITIONS: usize = 64;
/// Deepest nesting of `$and` / `$or`.
pub const MAX_DEPTH: usize = 6;
/// Most values in one `$in` or `$nin`.
pub const MAX_IN_VALUES: usize = 256;

/// A value a condition compares with.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// A string (that is not a date, or one in `$in`/`$nin`, which compare strings).
    Text(String),
    /// A number.
    Number(f64),
    /// A boolean.
    Bool(bool),
    /// A date: the string as sent and its instant (seconds since the epoch).
    Date {
        /// As sent.
        text: String,
        /// Seconds since 1970-01-01T00:00:00Z.
        seconds: f64,
    },
}

/// The bound of a range: a number compares with numbers, a date with dates.
#[derive(Debug, Clone, PartialEq)]
pub enum Bound {
    /// A number.
    Number(f64),
    /// A date: the string as sent and its instant (seconds since the epoch).
    Date {
        /// As sent.
        text: String,
        /// Seconds since 1970-01-01T00:00:00Z.
        seconds: f64,
    },
}

/// A range operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `$gt`
    Gt,
    /// `$gte`
    Gte,
    /// `$lt`
    Lt,
    /// `$lte`
    Lte,
}

impl Cmp {
    /// The operator as written in a filter (`$gt`, …).
    pub fn operator(self) -> &'static str {
        match self {
            Cmp::Gt => "$gt",
            Cmp::Gte => "$gte",
            Cmp::Lt => "$lt",
            Cmp::Lte => "$lte",
        }
    }

    /// The operator's name without the `$` (also Qdrant's range field).
    pub fn name(self) -> &'static str {
        &self.operator()[1..]
    }

    fn holds(self, value: f64, bound: f64) -> bool {
        match self {
            Cmp::Gt => value > bound,
            Cmp::Gte => value >= bound,
            Cmp::Lt => value < bound,
            Cmp::Lte => value <= bound,
        }
    }
}

/// One condition on one key.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `$eq` (or a bare value).
    Eq(Scalar),
    /// `$ne`.
    Ne(Scalar),
    /// `$in`: strings and numbers.
    In(Vec<Scalar>),
    /// `$nin`.
    Nin(Vec<Scalar>),
    /// `$gt $gte $lt $lte`.
    Range(Cmp, Bound),
    /// `$exists`.
    Exists(bool),
}

/// A validated filter: build it with [`Filter::parse`].
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// Every one holds (`$and`, or the keys of one object).
    And(Vec<Filter>),
    /// At least one holds (`$or`).
    Or(Vec<Filter>),
    /// A condition on the metadata key `key`.
    Field {
        /// The metadata key.
        key: String,
        /// The condition.
        op: Op,
    },
}

/// Why a filter was refused: the message names the problem (a 400 `invalid_filter`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FilterError(pub String);

fn fail<T>(message: impl Into<String>) -> Result<T, FilterError> {
    Err(FilterError(message.into()))
}

struct Parser {
    conditions: usize,
}

impl Parser {
    fn object(&mut self, value: &Value, depth: usize) -> Result<Filter, FilterError> {
        if depth > MAX_DEPTH {
            return fail(format!("nested deeper than {MAX_DEPTH} levels of $and/$or"));
        }
        let Value::Object(object) = value else {
            return fail(format!(
                "a filter is a JSON object ({{\"key\": value, ...}}), not {}",
                kind(value)
            ));
        };
        if object.is_empty() {
            return fail("an empty filter object");
        }
        let mut all = Vec::with_capacity(object.len());
        for (key, value) in object {
            all.push(match key.as_str() {
                "$and" | "$or" => {
                    let Value::Array(items) = value else {
                        return fail(format!("{key} takes a list of filters"));
                    };
                    if items.is_empty() {
                        return fail(format!("{key} with an empty list"));
                    }
                    let parts = items
                        .iter()
                        .map(|item| self.object(item, depth + 1))
                        .collect::<Result<Vec<_>, _>>()?;
                    if key == "$and" {
                        Filter::And(parts)
                    } else {
                        Filter::Or(parts)
                    }
                }
                op if op.starts_with('$') => {
                    return fail(format!(
                        "unknown operator {op} at the top of a filter (only $and and $or go \
                         there; field operators go under a key: {{\"year\": {{\"$gt\": 2020}}}})"
                    ));
                }
                _ => {
                    check_key(key).map_err(|e| FilterError(format!("filter key {e}")))?;
                    self.field(key, value)?
                }
            });
        }
        Ok(if all.len() == 1 {
            all.remove(0)
        } else {
            Filter::And(all)
        })
    }

    fn field(&mut self, key: &str, value: &Value) -> Result<Filter, FilterError> {
        let ops = match value {
            Value::Object(ops) if ops.is_empty() => {
                return fail(format!("{key:?}: an empty object"));
            }
            Value::Object(ops) => ops
                .iter()
                .map(|(op, arg)| self.op(key, op, arg))
                .collect::<Result<Vec<_>, _>>()?,
            bare => vec![self.op(key, "$eq", bare)?],
        };
        let mut fields: Vec<Filter> = ops
            .into_iter()
            .map(|op| Filter::Field {
                key: key.to_string(),
                op,
            })
            .collect();
        Ok(if fields.len() == 1 {
            fields.remove(0)
        } else {
            Filter::And(fields)
        })
    }

    fn op(&mut self, key: &str, op: &str, arg: &Value) -> Result<Op, FilterError> {
        self.conditions += 1;
        if self.conditions > MAX_CONDITIONS {
            return fail(format!("more than {MAX_CONDITIONS} conditions"));
        }
        let dated = |v: &Value| scalar(key, op, v, true);
        Ok(match op {
            "$eq" => Op::Eq(dated(arg)?),
            "$ne" => Op::Ne(dated(arg)?),
            "$in" | "$nin" => {
                let Value::Array(items) = arg else {
                    return fail(format!(
                        "{key:?}: {op} takes a list of strings or numbers, not {}",
                        kind(arg)
                    ));
                };
                if items.is_empty() {
                    return fail(format!("{key:?}: {op} with an empty list"));
                }
                if items.len() > MAX_IN_VALUES {
                    return fail(format!(
                        "{key:?}: {op} with {} values; at most {MAX_IN_VALUES}",
                        items.len()
                    ));
                }
                let values = items
                    .iter()
                    .map(|item| match scalar(key, op, item, false)? {
                        Scalar::Bool(_) => fail(format!(
                            "{key:?}: {op} takes strings and numbers; use $eq for a boolean"
                        )),
                        s => Ok(s),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if op == "$in" {
                    Op::In(values)
                } else {
                    Op::Nin(values)
                }
            }
            "$gt" | "$gte" | "$lt" | "$lte" => {
                let cmp = match op {
                    "$gt" => Cmp::Gt,
                    "$gte" => Cmp::Gte,
                    "$lt" => Cmp::Lt,
                    _ => Cmp::Lte,
                };
                match dated(arg)? {
                    Scalar::Number(x) => Op::Range(cmp, Bound::Number(x)),
                    Scalar::Date { text, seconds } => Op::Range(cmp, Bound::Date { text, seconds }),
                    _ => {
                        return fail(format!(
                            "{key:?}: {op} compares numbers or RFC 3339 dates, not {}",
                            kind(arg)
                        ));
                    }
                }
            }
            "$exists" => match arg {
                Value::Bool(b) => Op::Exists(*b),
                _ => return fail(format!("{key:?}: $exists takes true or false")),
            },
            "$and" | "$or" => {
                return fail(format!(
                    "{key:?}: {op} goes at the top of a filter, not under a key"
                ));
            }
            other if other.starts_with('$') => {
                return fail(format!(
                    "{key:?}: unknown operator {other} (use $eq $ne $in $nin $gt $gte $lt $lte $exists)"
                ));
            }
            other => {
                return fail(format!(
                    "{key:?}: {other:?} is not an operator (nested keys are not supported; \
                     operators start with $)"
                ));
            }
        })
    }
}

/// The comparison value of `op` on `key`; a string is a date when `dates` and it parses as one.
fn scalar(key: &str, op: &str, value: &Value, dates: bool) -> Result<Scalar, FilterError> {
    Ok(match value {
        Value::String(s) => match parse_date(s).filter(|_| dates) {
            Some(seconds) => Scalar::Date {
                text: s.clone(),
                seconds,
            },
            None => Scalar::Text(s.clone()),
        },
        Value::Number(n) => match n.as_f64() {
            Some(x) if x.is_finite() => Scalar::Number(x),
            _ => return fail(format!("{key:?}: {op} with a number out of range")),
        },
        Value::Bool(b) => Scalar::Bool(*b),
        other => {
            return fail(format!(
                "{key:?}: {op} compares a string, number, boolean or date, not {}",
                kind(other)
            ));
        }
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

impl Bound {
    /// The bound as JSON, as sent.
    pub fn to_json(&self) -> Value {
        match self {
            Bound::Number(x) => json!(x),
            Bound::Date { text, .. } => Value::String(text.clone()),
        }
    }
}

impl Scalar {
    /// The value as JSON, as sent.
    pub fn to_json(&self) -> Value {
        match self {
            Scalar::Text(s) | Scalar::Date { text: s, .. } => Value::String(s.clone()),
            Scalar::Number(x) => json!(x),
            Scalar::Bool(b) => json!(b),
        }
    }

    /// Whether a document's value equals this one (a list: holds it).
    fn equals(&self, value: &MetaValue) -> bool {
        match (self, value) {
            (Scalar::Text(s), MetaValue::Text(t) | MetaValue::Date { text: t, .. }) => s == t,
            (Scalar::Text(s), MetaValue::List(items)) => items.contains(s),
            (Scalar::Number(x), MetaValue::Number(n)) => n.as_f64() == Some(*x),
            (Scalar::Bool(b), MetaValue::Bool(c)) => b == c,
            (Scalar::Date { seconds, .. }, MetaValue::Date { seconds: s, .. }) => seconds == s,
            _ => false,
        }
    }
}

impl Filter {
    /// Reads and checks a filter sent as JSON.
    pub fn parse(value: &Value) -> Result<Self, FilterError> {
        Parser { conditions: 0 }.object(value, 0)
    }

    /// Both filters: what a key's mandatory filter does to the filter a request sends. The
    /// result can only match fewer documents than either.
    pub fn and(a: Option<&Filter>, b: Option<&Filter>) -> Option<Filter> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Filter::And(vec![a.clone(), b.clone()])),
            (a, b) => a.or(b).cloned(),
        }
    }

    /// Whether a document with `metadata` passes: the reference meaning every store's
    /// translation keeps.
    pub fn matches(&self, metadata: &Metadata) -> bool {
        match self {
            Filter::And(all) => all.iter().all(|f| f.matches(metadata)),
            Filter::Or(any) => any.iter().any(|f| f.matches(metadata)),
            Filter::Field { key, op } => {
                let value = metadata.get(key);
                let eq = |x: &Scalar| value.is_some_and(|v| x.equals(v));
                match op {
                    Op::Eq(x) => eq(x),
                    Op::Ne(x) => !eq(x),
                    Op::In(xs) => xs.iter().any(eq),
                    Op::Nin(xs) => !xs.iter().any(eq),
                    Op::Range(cmp, bound) => match (bound, value) {
                        (Bound::Number(b), Some(MetaValue::Number(n))) => {
                            n.as_f64().is_some_and(|x| cmp.holds(x, *b))
                        }
                        (Bound::Date { seconds: b, .. }, Some(MetaValue::Date { seconds, .. })) => {
                            cmp.holds(*seconds, *b)
                        }
                        _ => false,
                    },
                    Op::Exists(b) => value.is_some() == *b,
                }
            }
        }
    }

    /// The filter in its canonical JSON form (every condition under its key, with its
    /// operator): [`Filter::parse`] reads it back to the same filter.
    pub fn to_json(&self) -> Value {
        match self {
            Filter::And(all) => {
                json!({"$and": all.iter().map(Filter::to_json).collect::<Vec<_>>()})
            }
            Filter::Or(any) => json!({"$or": any.iter().map(Filter::to_json).collect::<Vec<_>>()}),
            Filter::Field { key, op } => {
                let list = |xs: &[Scalar]| xs.iter().map(Scalar::to_json).collect::<Vec<_>>();
                let (name, arg) = match op {
                    Op::Eq(x) => ("$eq", x.to_json()),
                    Op::Ne(x) => ("$ne", x.to_json()),
                    Op::In(xs) => ("$in", json!(list(xs))),
                    Op::Nin(xs) => ("$nin", json!(list(xs))),
                    Op::Range(cmp, bound) => (cmp.operator(), bound.to_json()),
                    Op::Exists(b) => ("$exists", json!(b)),
                };
                let mut inner = Map::new();
                inner.insert(name.to_string(), arg);
                let mut outer = Map::new();
                outer.insert(key.clone(), Value::Object(inner));
                Value::Object(outer)
            }
        }
    }

    /// Hex SHA-256 of the canonical form: what the answer cache keeps the filter as.
    pub fn digest(&self) -> String {
        crate::sha256_hex(self.to_json().to_string().as_bytes())
    }
}

impl Serialize for Filter {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Filter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Filter::parse(&Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(v: Value) -> Filter {
        Filter::parse(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    fn doc(v: Value) -> Metadata {
        Metadata::from_json(v.as_object().unwrap()).unwrap()
    }

    /// A corpus of metadata, and which of its documents a filter lets through.
    fn passing(f: Value) -> Vec<&'static str> {
        let docs = [
            (
                "a",
                json!({"year": 2024, "team": "payments", "groups": ["finance", "hr"],
                      "updated_at": "2024-06-01T12:00:00Z", "public": true}),
            ),
            (
                "b",
                json!({"year": 2025, "team": "cards", "groups": ["finance"],
                      "updated_at": "2025-03-01T11:00:00+02:00", "public": false}),
            ),
            ("c", json!({"year": 2025.5, "team": "legal"})),
            ("d", json!({})),
        ];
        let f = filter(f);
        docs.iter()
            .filter(|(_, m)| f.matches(&doc(m.clone())))
            .map(|(id, _)| *id)
            .collect()
    }

    #[test]
    fn each_operator_means_what_the_module_says() {
        assert_eq!(passing(json!({"year": 2025})), ["b"]);
        assert_eq!(passing(json!({"year": {"$eq": 2025.5}})), ["c"]);
        assert_eq!(passing(json!({"team": {"$ne": "cards"}})), ["a", "c", "d"]);
        assert_eq!(passing(json!({"groups": "hr"})), ["a"]);
        assert_eq!(passing(json!({"groups": {"$in": ["hr", "x"]}})), ["a"]);
        assert_eq!(
            passing(json!({"groups": {"$nin": ["hr"]}})),
            ["b", "c", "d"]
        );
        assert_eq!(
            passing(json!({"team": {"$in": ["legal", "cards"]}})),
            ["b", "c"]
        );
        assert_eq!(
            passing(json!({"year": {"$in": [2024, 2025.5]}})),
            ["a", "c"]
        );
        assert_eq!(passing(json!({"year": {"$gt": 2024}})), ["b", "c"]);
        assert_eq!(
            passing(json!({"year": {"$gte": 2024, "$lt": 2025.5}})),
            ["a", "b"]
        );
        assert_eq!(passing(json!({"year": {"$lte": 2025}})), ["a", "b"]);
        assert_eq!(passing(json!({"public": true})), ["a"]);
        assert_eq!(passing(json!({"public": {"$exists": false}})), ["c", "d"]);
        assert_eq!(
            passing(json!({"updated_at": {"$exists": true}})),
            ["a", "b"]
        );
        // Dates compare as instants, whatever their offset or precision.
        assert_eq!(passing(json!({"updated_at": {"$gt": "2025-01-01"}})), ["b"]);
        assert_eq!(
            passing(json!({"updated_at": "2025-03-01T09:00:00.000Z"})),
            ["b"]
        );
        assert_eq!(
            passing(json!({"updated_at": {"$lt": "2025-03-01T09:00:00Z"}})),
            ["a"]
        );
        // A number never equals a string, a date never compares with a number.
        assert!(passing(json!({"year": "2025"})).is_empty());
        assert!(passing(json!({"updated_at": {"$gt": 0}})).is_empty());
        assert!(passing(json!({"team": {"$gt": 0}})).is_empty());
    }

    #[test]
    fn combinations_and_and_or() {
        assert_eq!(passing(json!({"year": 2025, "team": "cards"})), ["b"]);
        assert_eq!(
            passing(json!({"$or": [{"team": "legal"}, {"groups": "hr"}]})),
            ["a", "c"]
        );
        assert_eq!(
            passing(
                json!({"$and": [{"year": {"$gte": 2025}}, {"$or": [{"public": false}, {"team": "legal"}]}]})
            ),
            ["b", "c"]
        );
    }

    #[test]
    fn a_mandatory_filter_can_only_narrow() {
        let key = filter(json!({"groups": {"$in": ["finance"]}}));
        for sent in [
            json!({"$or": [{"groups": "hr"}, {"groups": {"$exists": false}}]}),
            json!({"groups": {"$nin": ["finance"]}}),
            json!({"team": {"$ne": "nobody"}}),
        ] {
            let sent = filter(sent);
            let both = Filter::and(Some(&key), Some(&sent)).unwrap();
            for m in [
                json!({"groups": ["hr"]}),
                json!({}),
                json!({"groups": ["finance"], "team": "x"}),
            ] {
                let m = doc(m);
                if both.matches(&m) {
                    assert!(key.matches(&m) && sent.matches(&m));
                }
            }
        }
        assert_eq!(Filter::and(Some(&key), None), Some(key.clone()));
        assert_eq!(Filter::and(None, None), None);
    }

    #[test]
    fn the_canonical_form_reads_back_and_digests_tell_filters_apart() {
        for v in [
            json!({"year": 2025, "team": {"$in": ["a", "b"]}}),
            json!({"$or": [{"d": {"$gte": "2025-01-01", "$lt": "2025-02-01T00:00:00Z"}}, {"x": {"$exists": true}}]}),
            json!({"g": {"$nin": ["x"], "$ne": "y"}}),
        ] {
            let f = filter(v);
            assert_eq!(Filter::parse(&f.to_json()).unwrap(), f);
            let back: Filter = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
            assert_eq!(back, f);
        }
        let a = filter(json!({"year": 2025}));
        assert_eq!(a.digest(), filter(json!({"year": {"$eq": 2025}})).digest());
        assert_ne!(a.digest(), filter(json!({"year": 2024})).digest());
        assert_eq!(a.digest().len(), 64);
    }

    #[test]
    fn invalid_filters_name_the_problem() {
        let refused = |v: Value, says: &str| {
            let e = Filter::parse(&v).unwrap_err().to_string();
            assert!(e.contains(says), "{v}: {e}");
        };
        refused(json!([1]), "a filter is a JSON object");
        refused(json!("year"), "not a string");
        refused(json!({}), "empty filter");
        refused(json!({"year": {"$regex": "x"}}), "unknown operator $regex");
        refused(json!({"$not": {"a": 1}}), "unknown operator $not");
        refused(json!({"a.b": 1}), "filter key \"a.b\" is not a valid key");
        refused(
            json!({"year": {"$gt": "soon"}}),
            "compares numbers or RFC 3339 dates, not a string",
        );
        refused(json!({"year": {"$gt": true}}), "not a boolean");
        refused(json!({"year": {"$in": 2025}}), "takes a list");
        refused(json!({"year": {"$in": []}}), "empty list");
        refused(json!({"year": {"$in": [true]}}), "use $eq for a boolean");
        refused(json!({"year": {"$in": [[1]]}}), "not a list");
        refused(json!({"year": {"$exists": 1}}), "takes true or false");
        refused(json!({"year": null}), "not null");
        refused(json!({"year": [2025]}), "not a list");
        refused(json!({"year": {"gt": 1}}), "nested keys are not supported");
        refused(json!({"year": {"$or": []}}), "goes at the top");
        refused(json!({"$and": {"a": 1}}), "takes a list");
        refused(json!({"$or": []}), "empty list");
        refused(json!({"$and": [1]}), "not a number");
        let mut deep = json!({"a": 1});
        for _ in 0..7 {
            deep = json!({"$and": [deep]});
        }
        refused(deep, "nested deeper");
        let many: Map<String, Value> = (0..65).map(|i| (format!("k{i}"), json!(i))).collect();
        refused(Value::Object(many), "more than 64 conditions");
    }
}
