//! What checking an end user's token adds to a request: [`Identities::verify`] — the header,
//! the key (held: a JWKS fetched once from a stand-in on 127.0.0.1), the signature, the
//! claims and the principals — for each algorithm, with a few groups and with 999 (a user of
//! 1,000 principals, the most one may hold), 2,000 times each after 100 to warm up.
//!
//! Prints p50, p99 and the largest, in microseconds (`identity:` lines).

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;
use sluice_contract::access::IdentitySettings;
use sluice_identity::Identities;
use sluice_testkit::users::{AUDIENCE, ISSUER, key, now};

const ROUNDS: usize = 2_000;
const TENANT: &str = "acme";

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run());
}

fn encoding(alg: Algorithm, file: &str) -> EncodingKey {
    let pem = key(file);
    match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(pem.as_bytes()),
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()),
        _ => EncodingKey::from_ed_pem(pem.as_bytes()),
    }
    .expect("a test key")
}

async fn run() {
    let signers = [
        (Algorithm::RS256, "rsa.pem", "RS256"),
        (Algorithm::ES256, "ec.pem", "ES256"),
        (Algorithm::EdDSA, "ed.pem", "EdDSA"),
    ];
    // The JWKS stand-in: every test key under its algorithm's name.
    let keys: Vec<serde_json::Value> = (signers.iter())
        .map(|(alg, file, kid)| {
            let jwk = Jwk::from_encoding_key(&encoding(*alg, file), *alg).expect("a JWK");
            let mut jwk = serde_json::to_value(jwk).expect("JSON");
            jwk["kid"] = json!(kid);
            jwk
        })
        .collect();
    let document = json!({ "keys": keys });
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let document = document.clone();
            async move { axum::Json(document) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let settings = json!({"issuer": ISSUER, "audience": AUDIENCE, "jwks_url": url});
    let by_jwks: IdentitySettings = serde_json::from_value(settings).expect("settings");
    // The JWKS stand-in is on 127.0.0.1, a range the operator allows here.
    let loopback = sluice_contract::net::IpRange::list("127.0.0.0/8").expect("a range");
    let ids = Identities::new(Duration::from_secs(60)).allowing(loopback);

    for groups in [3usize, 999] {
        for (alg, file, kid) in &signers {
            let claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice",
                "exp": now() + 3600,
                "groups": (0..groups).map(|g| format!("team{g}")).collect::<Vec<_>>()});
            let mut header = Header::new(*alg);
            header.kid = Some(kid.to_string());
            let token = jsonwebtoken::encode(&header, &claims, &encoding(*alg, file)).unwrap();
            let mut samples = Vec::with_capacity(ROUNDS);
            for round in 0..ROUNDS + 100 {
                let started = Instant::now();
                let user = ids
                    .verify(TENANT, &by_jwks, &token)
                    .await
                    .expect("verifies");
                let took = started.elapsed();
                assert_eq!(user.principals.len(), groups + 1);
                if round >= 100 {
                    samples.push(took);
                }
            }
            samples.sort();
            let at =
                |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
            println!(
                "identity: verify {kid} (JWKS, held), {} principals: p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs",
                groups + 1,
                at(0.5),
                at(0.99),
                at(1.0)
            );
        }
    }
}
