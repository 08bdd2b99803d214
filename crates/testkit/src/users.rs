//! End users for tests: tokens signed with the test keys of `keys/` (made for these tests
//! only), and a tenant identity that verifies them.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use sluice_contract::access::{ACCESS_KEY, access_filter, may_see};
use sluice_contract::filter::Filter;
use sluice_contract::metadata::{MetaValue, Metadata};

/// The issuer and audience of [`identity`] and [`token`].
pub const ISSUER: &str = "https://idp.test/";
/// The audience.
pub const AUDIENCE: &str = "sluice";

/// A test key's PEM (`rsa.pem`, `rsa.pub.pem`, `ec.pem`, …).
pub fn key(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("keys")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A tenant settings' `identity` that verifies [`token`]'s tokens by the RSA test key
/// (`required` as given).
pub fn identity(required: bool) -> Value {
    json!({"issuer": ISSUER, "audience": AUDIENCE, "public_key": key("rsa.pub.pem"),
           "algorithm": "RS256", "required": required})
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    since.as_secs() as i64
}

/// A token for `sub` in `groups`, valid for ten minutes, signed by the RSA test key.
pub fn token(sub: &str, groups: &[&str]) -> String {
    sign(
        &json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "groups": groups,
                 "exp": now() + 600}),
    )
}

/// `claims` signed by the RSA test key (RS256).
pub fn sign(claims: &Value) -> String {
    let key = EncodingKey::from_rsa_pem(key("rsa.pem").as_bytes()).expect("the RSA test key");
    jsonwebtoken::encode(&Header::new(Algorithm::RS256), claims, &key).expect("signed")
}

/// The HMAC secret [`Secret`] holds and [`hs256_token`] signs with.
pub const SECRET: &[u8] = b"the test identity provider's shared secret";

/// A secret store holding [`SECRET`] under every id.
pub struct Secret;

#[async_trait::async_trait]
impl sluice_contract::access::SecretReader for Secret {
    async fn read(&self, _id: &str) -> Result<Vec<u8>, String> {
        Ok(SECRET.to_vec())
    }
}

/// A tenant settings' `identity` that verifies [`hs256_token`]'s tokens by the secret `id`.
pub fn secret_identity(id: &str) -> Value {
    json!({"issuer": ISSUER, "audience": AUDIENCE, "secret_arn": id})
}

/// A token for `sub` in `groups`, valid for ten minutes, signed with [`SECRET`] (HS256).
pub fn hs256_token(sub: &str, groups: &[&str]) -> String {
    let claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "groups": groups,
                        "exp": now() + 600});
    let key = EncodingKey::from_secret(SECRET).expect("the test secret");
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key).expect("signed")
}

/// The groups property tests draw principals from.
pub const GROUPS: [&str; 6] = ["hr", "finance", "legal", "sales", "emea", "apac"];
/// The users they draw from.
pub const USERS: [&str; 8] = [
    "alice", "bob", "carol", "dan", "erin", "frank", "grace", "heidi",
];

/// How many random cases each property test checks: `SLUICE_TEST_CASES`, default 10,000
/// (`make test`); `make check` runs 1,000 of the same seeded sequence, so the fast lane checks
/// a prefix of what `make test` checks.
pub fn case_count() -> usize {
    match std::env::var("SLUICE_TEST_CASES") {
        Err(_) => 10_000,
        Ok(n) => match n.parse() {
            Ok(n) if n >= 100 => n,
            _ => panic!("SLUICE_TEST_CASES must be a number of at least 100, not {n:?}"),
        },
    }
}

/// Random end users, access lists and filters for property tests, from a seed (the load
/// generator's SplitMix: cases repeat by their seed).
pub struct Cases(sluice_contract::random::SplitMix);

impl Cases {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(sluice_contract::random::SplitMix(seed))
    }

    /// A number in `0..n` (n ≥ 1).
    pub fn below(&mut self, n: usize) -> usize {
        self.0.below(n)
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// An end user: their subject and 0 to 3 groups.
    pub fn user(&mut self) -> (String, Vec<String>) {
        let sub = self.pick(&USERS).to_string();
        let groups = (0..self.below(4)).map(|_| self.pick(&GROUPS).to_string());
        let mut groups: Vec<String> = groups.collect();
        groups.sort();
        groups.dedup();
        (sub, groups)
    }

    /// A document's access list: absent a quarter of the time, empty an eighth, else one to
    /// three principals, users and groups.
    pub fn access(&mut self) -> Option<Vec<String>> {
        match self.below(8) {
            0 | 1 => None,
            2 => Some(Vec::new()),
            _ => Some(
                (0..1 + self.below(3))
                    .map(|_| match self.below(2) {
                        0 => format!("user:{}", self.pick(&USERS)),
                        _ => format!("group:{}", self.pick(&GROUPS)),
                    })
                    .collect(),
            ),
        }
    }

    /// A filter on the `team` label (`a`, `b` or `c`), or none: what keys are bound to and
    /// requests send.
    pub fn team_filter(&mut self) -> Option<Value> {
        let team = *self.pick(&["a", "b", "c"]);
        match self.below(4) {
            0 => None,
            1 => Some(json!({ "team": team })),
            2 => Some(json!({"team": {"$ne": team}})),
            _ => Some(json!({"team": {"$in": [team, *self.pick(&["a", "b", "c"])]}})),
        }
    }
}

/// The principals of `sub` in `groups`, as a verified token gives them.
pub fn principals(sub: &str, groups: &[String]) -> Vec<String> {
    let groups = groups.iter().map(|g| format!("group:{g}"));
    std::iter::once(format!("user:{sub}"))
        .chain(groups)
        .collect()
}

/// Documents for the stores' access property tests: `n` ids (`a00`, …), each with its
/// metadata — a `team` label and, mostly, an access list ([`Cases::access`]).
pub fn access_corpus(cases: &mut Cases, n: usize) -> Vec<(String, Metadata)> {
    (0..n)
        .map(|i| {
            let mut metadata = json!({"team": cases.pick(&["a", "b", "c"])});
            if let Some(list) = cases.access() {
                metadata["_access"] = json!(list);
            }
            let object = metadata.as_object().cloned().unwrap_or_default();
            (
                format!("a{i:02}"),
                Metadata::from_json(&object).expect("test metadata"),
            )
        })
        .collect()
}

/// One case over `corpus`: the filter a store is asked with — a random user's access (a
/// user's principals, no user, or a tenant without end users) ANDed with a random key
/// binding and a random request filter, as the routes AND them (`None`: no filter at all) —
/// and the documents it lets
/// through by the reference ([`may_see`] and [`Filter::matches`]), in id order.
pub fn access_case(
    cases: &mut Cases,
    corpus: &[(String, Metadata)],
) -> (Option<Filter>, Vec<String>) {
    let held = match cases.below(6) {
        0 => None,
        _ => {
            let (sub, groups) = cases.user();
            Some(principals(&sub, &groups))
        }
    };
    let identity = cases.below(8) != 0;
    let access = identity.then(|| access_filter(held.as_deref()));
    let parse = |f: Option<Value>| f.map(|f| Filter::parse(&f).expect("a test filter"));
    let (key, request) = (parse(cases.team_filter()), parse(cases.team_filter()));
    let reads = Filter::and(key.as_ref(), access.as_ref());
    let filter = Filter::and(reads.as_ref(), request.as_ref());
    let seen = |m: &Metadata| {
        let list = match m.get(ACCESS_KEY) {
            Some(MetaValue::List(l)) => Some(l.as_slice()),
            _ => None,
        };
        (!identity || may_see(list, held.as_deref()))
            && [&key, &request]
                .iter()
                .all(|f| f.as_ref().is_none_or(|f| f.matches(m)))
    };
    let mut expected: Vec<String> = (corpus.iter())
        .filter(|(_, m)| seen(m))
        .map(|(id, _)| id.clone())
        .collect();
    expected.sort();
    (filter, expected)
}
