//! End users for tests: tokens signed with the test keys of `keys/` (made for these tests
//! only), and a tenant identity that verifies them.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

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
