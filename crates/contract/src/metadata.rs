//! Document metadata: the facts a tenant attaches to a document (`{"year": 2025, "groups":
//! ["finance"], "updated_at": "2025-03-01T09:00:00Z"}`) so that answers can be restricted to
//! some documents ([`crate::filter`]). Every chunk of the document carries it in the store.
//!
//! A value is a string, a number, a boolean, an RFC 3339 date (a string that parses as one:
//! `2025-03-01T09:00:00Z`, `2025-03-01T11:00:00+02:00` or a bare `2025-03-01`, midnight UTC)
//! or a list of strings. Dates are kept as sent and compared as instants. Nothing nested, no
//! nulls, no empty lists (leave the key out): each of those has no single meaning in the
//! three stores' filter languages, so it is refused rather than guessed at.
//!
//! The limits keep a document's metadata small enough to travel with every one of its chunks
//! (Pinecone caps a record's metadata at 40 KB, and the chunk's text rides there too).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Most keys one document's metadata may have.
pub const MAX_KEYS: usize = 32;
/// Longest key, in characters.
pub const MAX_KEY_CHARS: usize = 64;
/// Longest string value (and list item), in characters.
pub const MAX_VALUE_CHARS: usize = 512;
/// Most items in one list.
pub const MAX_LIST_ITEMS: usize = 64;
/// Most bytes of the whole metadata as JSON.
pub const MAX_BYTES: usize = 8 * 1024;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// A string that is not a date.
    Text(String),
    /// A number (JSON's: integers and decimals; stores compare them as doubles).
    Number(serde_json::Number),
    /// `true` or `false`.
    Bool(bool),
    /// An RFC 3339 date, as sent, and its instant in seconds since the Unix epoch.
    Date {
        /// The string as sent.
        text: String,
        /// Seconds since 1970-01-01T00:00:00Z (fractional).
        seconds: f64,
    },
    /// A list of strings: a filter for one of them matches the document.
    List(Vec<String>),
}

impl MetaValue {
    /// The value as JSON, as the client sent it.
    pub fn to_json(&self) -> Value {
        match self {
            MetaValue::Text(s) | MetaValue::Date { text: s, .. } => Value::String(s.clone()),
            MetaValue::Number(n) => Value::Number(n.clone()),
            MetaValue::Bool(b) => Value::Bool(*b),
            MetaValue::List(items) => items.iter().cloned().map(Value::String).collect(),
        }
    }
}

/// A document's validated metadata, by key (empty when the document has none).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata(BTreeMap<String, MetaValue>);

/// Whether `key` may name a metadata field: ASCII letters, digits and `_`, not starting with a
/// digit, at most [`MAX_KEY_CHARS`]. No dots or `$` (paths and operators in the stores' filter
/// languages), so a key means the same thing in all three.
pub fn check_key(key: &str) -> Result<(), String> {
    let ok = !key.is_empty()
        && key.len() <= MAX_KEY_CHARS
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !key.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{key:?} is not a valid key: ASCII letters, digits and _, not starting with a digit, \
             at most {MAX_KEY_CHARS} characters"
        ))
    }
}

/// The instant `text` names, in seconds since the Unix epoch, when it is an RFC 3339 date-time
/// (with its offset) or a bare `YYYY-MM-DD` (midnight UTC); `None` for any other string.
pub fn parse_date(text: &str) -> Option<f64> {
    use time::format_description::well_known::{Iso8601, Rfc3339};
    // A cheap shape check first: most strings are not dates, and parsing is not free.
    let b = text.as_bytes();
    if b.len() < 10 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    if b.len() == 10 {
        let date = time::Date::parse(text, &Iso8601::DATE).ok()?;
        return Some(date.midnight().assume_utc().unix_timestamp() as f64);
    }
    let at = time::OffsetDateTime::parse(text, &Rfc3339).ok()?;
    Some(at.unix_timestamp_nanos() as f64 / 1e9)
}

fn check_text(key: &str, text: &str) -> Result<(), String> {
    if text.chars().count() > MAX_VALUE_CHARS {
        return Err(format!(
            "{key:?}: a value longer than {MAX_VALUE_CHARS} characters"
        ));
    }
    Ok(())
}

impl Metadata {
    /// Validates a JSON object as metadata; the error names the key and what is wrong.
    pub fn from_json(object: &Map<String, Value>) -> Result<Self, String> {
        if object.len() > MAX_KEYS {
            return Err(format!(
                "{} keys; at most {MAX_KEYS} are allowed",
                object.len()
            ));
        }
        let bytes = serde_json::to_string(object).map_or(0, |s| s.len());
        if bytes > MAX_BYTES {
            return Err(format!(
                "{bytes} bytes as JSON; at most {MAX_BYTES} are allowed"
            ));
        }
        let mut out = BTreeMap::new();
        for (key, value) in object {
            check_key(key)?;
            if key == crate::access::ACCESS_KEY {
                out.insert(key.clone(), access_list(value)?);
                continue;
            }
            let value = match value {
                Value::String(s) => {
                    check_text(key, s)?;
                    match parse_date(s) {
                        Some(seconds) => MetaValue::Date {
                            text: s.clone(),
                            seconds,
                        },
                        None => MetaValue::Text(s.clone()),
                    }
                }
                Value::Number(n) => MetaValue::Number(n.clone()),
                Value::Bool(b) => MetaValue::Bool(*b),
                Value::Array(items) => {
                    if items.is_empty() {
                        return Err(format!("{key:?}: an empty list (leave the key out)"));
                    }
                    if items.len() > MAX_LIST_ITEMS {
                        return Err(format!(
                            "{key:?}: a list of {} items; at most {MAX_LIST_ITEMS} are allowed",
                            items.len()
                        ));
                    }
                    let strings = items
                        .iter()
                        .map(|item| match item {
                            Value::String(s) => check_text(key, s).map(|()| s.clone()),
                            _ => Err(format!("{key:?}: lists may hold strings only")),
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    MetaValue::List(strings)
                }
                Value::Null => return Err(format!("{key:?}: null (leave the key out)")),
                Value::Object(_) => {
                    return Err(format!(
                        "{key:?}: a nested object (values are strings, numbers, booleans, dates \
                         or lists of strings)"
                    ));
                }
            };
            out.insert(key.clone(), value);
        }
        Ok(Self(out))
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.0.get(key)
    }

    /// The same metadata with `value` under `key`.
    pub fn with(&self, key: &str, value: MetaValue) -> Self {
        let mut changed = self.0.clone();
        changed.insert(key.to_string(), value);
        Self(changed)
    }

    /// Whether there is no metadata.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every key and value, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The metadata as a JSON object, values as sent.
    pub fn to_json(&self) -> Map<String, Value> {
        self.0
            .iter()
            .map(|(k, v)| (k.clone(), v.to_json()))
            .collect()
    }

    /// Each date's instant (seconds since the epoch) by key: what stores keep beside the
    /// text so that dates compare as numbers in their filter languages.
    pub fn instants(&self) -> Map<String, Value> {
        self.0
            .iter()
            .filter_map(|(k, v)| match v {
                MetaValue::Date { seconds, .. } => Some((k.clone(), Value::from(*seconds))),
                _ => None,
            })
            .collect()
    }
}

/// A document's access list ([`crate::access`]): a list of principals, at most
/// [`MAX_LIST_ITEMS`]; an empty one is stored as [`crate::access::NOBODY`].
fn access_list(value: &Value) -> Result<MetaValue, String> {
    use crate::access::{ACCESS_KEY, NOBODY, check_principal};
    let Value::Array(items) = value else {
        return Err(format!(
            "{ACCESS_KEY:?}: a list of principals (\"group:hr\", \"user:alice\"), or [] for no end \
             user; leave it out for every end user"
        ));
    };
    if items.len() > MAX_LIST_ITEMS {
        return Err(format!(
            "{ACCESS_KEY:?}: {} principals; at most {MAX_LIST_ITEMS} are allowed",
            items.len()
        ));
    }
    let mut list = Vec::with_capacity(items.len().max(1));
    for item in items {
        let Value::String(p) = item else {
            return Err(format!("{ACCESS_KEY:?}: principals are strings"));
        };
        check_principal(p).map_err(|e| format!("{ACCESS_KEY:?}: {e}"))?;
        list.push(p.clone());
    }
    if list.is_empty() {
        list.push(NOBODY.to_string());
    }
    Ok(MetaValue::List(list))
}

impl Serialize for Metadata {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let object = Map::deserialize(d)?;
        Self::from_json(&object).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(v: Value) -> Result<Metadata, String> {
        Metadata::from_json(v.as_object().expect("an object"))
    }

    #[test]
    fn each_kind_of_value_is_read_and_given_back_as_sent() {
        let sent = json!({
            "team": "payments", "year": 2025, "score": 0.5, "public": true,
            "groups": ["finance", "hr"], "updated_at": "2025-03-01T11:00:00+02:00",
            "day": "2025-03-01",
        });
        let m = meta(sent.clone()).unwrap();
        assert_eq!(Value::Object(m.to_json()), sent);
        assert_eq!(m.get("team"), Some(&MetaValue::Text("payments".into())));
        assert!(matches!(m.get("groups"), Some(MetaValue::List(l)) if l.len() == 2));
        // Dates are instants: 11:00 at +02:00 is 09:00 UTC.
        let instants = m.instants();
        assert_eq!(instants["updated_at"], json!(1_740_819_600.0));
        assert_eq!(instants["day"], json!(1_740_787_200.0));
        assert_eq!(instants.len(), 2);
        // Serde goes through the same validation.
        let back: Metadata = serde_json::from_value(sent).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn only_real_dates_are_dates() {
        assert_eq!(parse_date("1970-01-01T00:00:01.5Z"), Some(1.5));
        for not in [
            "2025",
            "2025-13-01",
            "2025-02-30",
            "2025-03-01T25:00:00Z",
            "2025-03-01T09:00:00", // no offset: not RFC 3339
            "payments",
            "2025-03-01 and more",
        ] {
            assert_eq!(parse_date(not), None, "{not}");
        }
    }

    #[test]
    fn what_is_refused_is_named() {
        let refused = |v: Value, says: &str| {
            let e = meta(v.clone()).unwrap_err();
            assert!(e.contains(says), "{v}: {e}");
        };
        refused(json!({"a.b": 1}), "\"a.b\" is not a valid key");
        refused(json!({"$or": 1}), "not a valid key");
        refused(json!({"1st": 1}), "not a valid key");
        refused(json!({"": 1}), "not a valid key");
        refused(json!({"k".repeat(65): 1}), "not a valid key");
        refused(json!({"a": null}), "\"a\": null");
        refused(json!({"a": {"b": 1}}), "nested object");
        refused(json!({"a": []}), "empty list");
        refused(json!({"a": [1, 2]}), "strings only");
        refused(json!({"a": "x".repeat(513)}), "longer than 512");
        refused(json!({"a": vec!["x"; 65]}), "at most 64");
        let many: Map<String, Value> = (0..33).map(|i| (format!("k{i}"), json!(i))).collect();
        refused(Value::Object(many), "33 keys");
        let big: Map<String, Value> = (0..20)
            .map(|i| (format!("k{i}"), json!("x".repeat(500))))
            .collect();
        refused(Value::Object(big), "bytes as JSON");
        assert!(meta(json!({"_private": 1, "A9": "x"})).is_ok());
        refused(json!({"_access": "group:hr"}), "a list of principals");
        refused(json!({"_access": ["hr"]}), "not a principal");
        refused(json!({"_access": [1]}), "principals are strings");
        refused(json!({"_access": vec!["group:x"; 65]}), "at most 64");
    }

    #[test]
    fn an_empty_access_list_is_stored_as_the_principal_nobody_holds() {
        let m = meta(json!({"_access": []})).unwrap();
        assert_eq!(m.to_json()["_access"], json!([crate::access::NOBODY]));
        let back = meta(Value::Object(m.to_json())).unwrap();
        assert_eq!(back, m, "read back from a store as written");
        let m = meta(json!({"_access": ["group:hr", "user:alice"]})).unwrap();
        assert_eq!(m.to_json()["_access"], json!(["group:hr", "user:alice"]));
    }
}
