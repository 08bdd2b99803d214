//! End users' tokens against a JWKS stand-in on 127.0.0.1 (and a static public key): what
//! verifies, what is refused and why, and how the key set is fetched. The keys are made for
//! these tests (`crates/testkit/keys`); tokens are signed with `jsonwebtoken`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use sluice_contract::access::IdentitySettings;
use sluice_identity::{Identities, TokenError};

const ISSUER: &str = "https://idp.example.com/";
const AUDIENCE: &str = "sluice";
const TENANT: &str = "acme";

fn pem(name: &str) -> String {
    sluice_testkit::users::key(name)
}

/// A signing key: its algorithm, private key and `kid`.
struct Signer {
    alg: Algorithm,
    key: EncodingKey,
    kid: &'static str,
}

fn signer(alg: Algorithm, file: &str, kid: &'static str) -> Signer {
    let private = pem(file);
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(private.as_bytes()),
        Algorithm::ES256 => EncodingKey::from_ec_pem(private.as_bytes()),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(private.as_bytes()),
        _ => unreachable!("the test keys' algorithms"),
    }
    .expect("a private key");
    Signer { alg, key, kid }
}

impl Signer {
    fn jwk(&self) -> Value {
        let mut jwk =
            serde_json::to_value(Jwk::from_encoding_key(&self.key, self.alg).unwrap()).unwrap();
        jwk["kid"] = json!(self.kid);
        jwk
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.into());
        jsonwebtoken::encode(&header, claims, &self.key).expect("signed")
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn claims() -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now() + 600,
           "groups": ["hr", "emea"], "department": "finance"})
}

/// The JWKS stand-in: serves `keys` while `up`, counting fetches.
#[derive(Default)]
struct Jwks {
    keys: std::sync::Mutex<Vec<Value>>,
    down: AtomicBool,
    fetches: AtomicUsize,
}

async fn jwks(keys: Vec<Value>) -> (Arc<Jwks>, String) {
    let state = Arc::new(Jwks {
        keys: std::sync::Mutex::new(keys),
        ..Jwks::default()
    });
    let served = Arc::clone(&state);
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let state = Arc::clone(&served);
            async move {
                state.fetches.fetch_add(1, Ordering::SeqCst);
                if state.down.load(Ordering::SeqCst) {
                    return StatusCode::SERVICE_UNAVAILABLE.into_response();
                }
                let keys = state.keys.lock().unwrap().clone();
                Json(json!({ "keys": keys })).into_response() as Response
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (state, url)
}

fn by_jwks(url: &str) -> IdentitySettings {
    serde_json::from_value(json!({
        "issuer": ISSUER, "audience": AUDIENCE, "jwks_url": url,
        "claims": {"department": "dept"},
    }))
    .unwrap()
}

/// A verifier that may fetch from the stand-in on 127.0.0.1 (the operator's allowed range).
fn identities(refetch_every: Duration) -> Identities {
    Identities::new(refetch_every).allowing(loopback())
}

/// A clock the test moves: the time it was made, plus how far it has been moved.
#[derive(Clone, Default)]
struct Moved(Arc<std::sync::atomic::AtomicU64>);

impl Moved {
    /// [`identities`] telling time by this clock.
    fn identities(&self, refetch_every: Duration) -> Identities {
        let (start, moved) = (std::time::Instant::now(), Arc::clone(&self.0));
        identities(refetch_every)
            .with_clock(move || start + Duration::from_millis(moved.load(Ordering::SeqCst)))
    }

    /// Moves the clock on by `by`.
    fn pass(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
}

fn loopback() -> Vec<sluice_contract::net::IpRange> {
    sluice_contract::net::IpRange::list("127.0.0.0/8").unwrap()
}

#[tokio::test]
async fn each_algorithm_verifies_and_its_claims_become_principals() {
    let signers = [
        signer(Algorithm::RS256, "rsa.pem", "r1"),
        signer(Algorithm::ES256, "ec.pem", "e1"),
        signer(Algorithm::EdDSA, "ed.pem", "d1"),
    ];
    let (_, url) = jwks(signers.iter().map(Signer::jwk).collect()).await;
    let ids = identities(Duration::from_secs(60));
    for s in &signers {
        let user = ids.verify(TENANT, &by_jwks(&url), &s.sign(&claims())).await;
        let user = user.unwrap_or_else(|e| panic!("{:?}: {e}", s.alg));
        assert_eq!(user.subject, "alice");
        assert_eq!(
            user.principals,
            ["user:alice", "group:hr", "group:emea", "dept:finance"]
        );
    }
}

#[tokio::test]
async fn a_static_public_key_verifies_its_own_algorithm_only() {
    let rsa = signer(Algorithm::RS256, "rsa.pem", "r1");
    let ec = signer(Algorithm::ES256, "ec.pem", "e1");
    let settings = |key: &str, alg: &str| -> IdentitySettings {
        serde_json::from_value(json!({"issuer": ISSUER, "audience": AUDIENCE,
                                      "public_key": pem(key), "algorithm": alg}))
        .unwrap()
    };
    let ids = identities(Duration::from_secs(60));
    let user = ids
        .verify(
            TENANT,
            &settings("rsa.pub.pem", "RS256"),
            &rsa.sign(&claims()),
        )
        .await;
    assert_eq!(user.unwrap().principals[0], "user:alice");
    let ec_token = ec.sign(&claims());
    assert!(matches!(
        ids.verify(TENANT, &settings("rsa.pub.pem", "RS256"), &ec_token)
            .await,
        Err(TokenError::Algorithm(_))
    ));
    assert!(
        ids.verify(TENANT, &settings("ec.pub.pem", "ES256"), &ec_token)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn each_bad_token_is_refused_with_its_reason() {
    let rsa = signer(Algorithm::RS256, "rsa.pem", "r1");
    let other = signer(Algorithm::RS256, "rsa2.pem", "r1");
    let (_, url) = jwks(vec![rsa.jwk()]).await;
    let ids = identities(Duration::from_secs(60));
    let settings = by_jwks(&url);
    let with = |change: Value| {
        let mut c = claims();
        for (k, v) in change.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    let cases: Vec<(&str, String, Expected)> = vec![
        (
            "expired",
            rsa.sign(&with(json!({"exp": now() - 120}))),
            |e| *e == TokenError::Expired,
        ),
        (
            "not yet valid",
            rsa.sign(&with(json!({"nbf": now() + 600}))),
            |e| *e == TokenError::NotYetValid,
        ),
        (
            "another audience",
            rsa.sign(&with(json!({"aud": "other"}))),
            |e| *e == TokenError::Audience,
        ),
        (
            "another issuer",
            rsa.sign(&with(json!({"iss": "https://evil/"}))),
            |e| *e == TokenError::Issuer,
        ),
        ("another key, same kid", other.sign(&claims()), |e| {
            *e == TokenError::Signature
        }),
        (
            "no exp",
            rsa.sign(&json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "a"})),
            |e| matches!(e, TokenError::Claims(_)),
        ),
        (
            "groups not strings",
            rsa.sign(&with(json!({"groups": [1]}))),
            |e| matches!(e, TokenError::Claims(_)),
        ),
        ("not a JWT", "abc.def".into(), |e| {
            matches!(e, TokenError::Malformed(_))
        }),
    ];
    for (name, token, expected) in cases {
        let got = ids.verify(TENANT, &settings, &token).await;
        match got {
            Err(e) if expected(&e) => {}
            other => panic!("{name}: {other:?}"),
        }
    }

    // The payload changed after signing: the signature no longer verifies.
    let token = rsa.sign(&claims());
    let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
    let forged = serde_json::to_vec(&with(json!({"groups": ["admin"]}))).unwrap();
    parts[1] = b64(&forged);
    let tampered = parts.join(".");
    assert_eq!(
        ids.verify(TENANT, &settings, &tampered).await,
        Err(TokenError::Signature)
    );

    // `alg: none`, and the RS256 key's public PEM used as an HS256 secret: refused before any
    // signature is read.
    let header = |alg: &str| {
        b64(json!({"alg": alg, "kid": "r1", "typ": "JWT"})
            .to_string()
            .as_bytes())
    };
    let payload = b64(claims().to_string().as_bytes());
    let unsigned = format!("{}.{payload}.", header("none"));
    assert!(ids.verify(TENANT, &settings, &unsigned).await.is_err());
    let hs = jsonwebtoken::encode(
        &Header {
            kid: Some("r1".into()),
            ..Header::new(Algorithm::HS256)
        },
        &claims(),
        &EncodingKey::from_secret(pem("rsa.pub.pem").as_bytes()).unwrap(),
    )
    .unwrap();
    assert!(matches!(
        ids.verify(TENANT, &settings, &hs).await,
        Err(TokenError::Algorithm(_))
    ));
}

/// What a refused token's error must be.
type Expected = fn(&TokenError) -> bool;

fn b64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

#[tokio::test]
async fn an_unknown_key_is_fetched_again_once_a_window_and_never_let_through() {
    let old = signer(Algorithm::RS256, "rsa.pem", "old");
    let new = signer(Algorithm::ES256, "ec.pem", "new");
    let (server, url) = jwks(vec![old.jwk()]).await;
    let window = Duration::from_secs(60);
    let clock = Moved::default();
    let ids = clock.identities(window);
    let settings = by_jwks(&url);
    assert!(
        ids.verify(TENANT, &settings, &old.sign(&claims()))
            .await
            .is_ok()
    );
    assert_eq!(server.fetches.load(Ordering::SeqCst), 1);

    // The provider rotates: the new key is fetched for the first token that names it.
    *server.keys.lock().unwrap() = vec![old.jwk(), new.jwk()];
    clock.pass(window);
    assert!(
        ids.verify(TENANT, &settings, &new.sign(&claims()))
            .await
            .is_ok()
    );
    assert_eq!(server.fetches.load(Ordering::SeqCst), 2);

    // Down, and a token names a key it never published: refused; the keys held still verify,
    // and within the window nothing is fetched however many such tokens come.
    server.down.store(true, Ordering::SeqCst);
    let stranger = Signer {
        kid: "stranger",
        ..signer(Algorithm::RS256, "rsa2.pem", "x")
    };
    clock.pass(window);
    for _ in 0..20 {
        let got = ids
            .verify(TENANT, &settings, &stranger.sign(&claims()))
            .await;
        assert!(matches!(got, Err(TokenError::UnknownKey(_))), "{got:?}");
    }
    assert_eq!(
        server.fetches.load(Ordering::SeqCst),
        3,
        "one fetch a window"
    );
    assert!(
        ids.verify(TENANT, &settings, &old.sign(&claims()))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn with_no_keys_ever_fetched_a_token_cannot_be_checked() {
    let rsa = signer(Algorithm::RS256, "rsa.pem", "r1");
    let (server, url) = jwks(vec![rsa.jwk()]).await;
    server.down.store(true, Ordering::SeqCst);
    let ids = identities(Duration::from_secs(60));
    let got = ids
        .verify(TENANT, &by_jwks(&url), &rsa.sign(&claims()))
        .await;
    assert!(
        matches!(got, Err(TokenError::KeysUnavailable(_))),
        "{got:?}"
    );
    // A JWKS that never answers is given up on within the fetch timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", silent.local_addr().unwrap());
    let started = std::time::Instant::now();
    let got = ids
        .verify(TENANT, &by_jwks(&url), &rsa.sign(&claims()))
        .await;
    assert!(
        matches!(got, Err(TokenError::KeysUnavailable(_))),
        "{got:?}"
    );
    assert!(started.elapsed() < sluice_identity::FETCH_TIMEOUT + Duration::from_secs(5));
    drop(silent);
}

#[tokio::test]
async fn a_token_minted_by_the_documented_script_verifies() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let key = repo.join("crates/testkit/keys/rsa.pem");
    let minted = std::process::Command::new("python3")
        .arg(repo.join("scripts/user-token.py"))
        .arg(&key)
        .args(["--sub", "alice", "--groups", "hr,emea", "--issuer", ISSUER])
        .output()
        .expect("python3 and openssl (scripts/user-token.py)");
    assert!(
        minted.status.success(),
        "{}",
        String::from_utf8_lossy(&minted.stderr)
    );
    let token = String::from_utf8(minted.stdout).unwrap();
    let settings: IdentitySettings = serde_json::from_value(json!({
        "issuer": ISSUER, "audience": AUDIENCE, "public_key": pem("rsa.pub.pem"),
        "algorithm": "RS256"}))
    .unwrap();
    let user = identities(Duration::from_secs(60))
        .verify(TENANT, &settings, token.trim())
        .await;
    assert_eq!(
        user.unwrap().principals,
        ["user:alice", "group:hr", "group:emea"]
    );
}

/// A secret store stand-in: the value it holds (`None`: it fails), counting reads.
#[derive(Default)]
struct Secrets {
    value: std::sync::Mutex<Option<Vec<u8>>>,
    reads: AtomicUsize,
}

#[async_trait::async_trait]
impl sluice_contract::access::SecretReader for Secrets {
    async fn read(&self, id: &str) -> Result<Vec<u8>, String> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        assert_eq!(id, "arn:aws:secretsmanager:us-east-1:1:secret:idp");
        (self.value.lock().unwrap().clone()).ok_or_else(|| "AccessDenied".to_string())
    }
}

fn hs256(secret: &[u8], claims: &Value) -> String {
    let key = EncodingKey::from_secret(secret).unwrap();
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &key).unwrap()
}

#[tokio::test]
async fn a_tenant_secret_verifies_hs256_alone_and_is_read_again_once_a_window() {
    let first = b"a secret the identity provider shares, 32+ bytes".to_vec();
    let store = Arc::new(Secrets::default());
    *store.value.lock().unwrap() = Some(first.clone());
    let window = Duration::from_secs(60);
    let clock = Moved::default();
    let ids = clock
        .identities(window)
        .with_secrets(Arc::clone(&store) as _);
    let settings: IdentitySettings = serde_json::from_value(json!({
        "issuer": ISSUER, "audience": AUDIENCE,
        "secret_arn": "arn:aws:secretsmanager:us-east-1:1:secret:idp",
    }))
    .unwrap();
    let user = ids
        .verify(TENANT, &settings, &hs256(&first, &claims()))
        .await;
    assert_eq!(user.map(|u| u.subject), Ok("alice".to_string()));
    // Another secret, or an RS256 token, or none at all: refused.
    let other = hs256(b"another secret of the same length, 32+ bytes!!", &claims());
    assert_eq!(
        ids.verify(TENANT, &settings, &other).await,
        Err(TokenError::Signature)
    );
    let rsa = signer(Algorithm::RS256, "rsa.pem", "r1").sign(&claims());
    assert!(matches!(
        ids.verify(TENANT, &settings, &rsa).await,
        Err(TokenError::Algorithm(_))
    ));
    assert_eq!(
        store.reads.load(Ordering::SeqCst),
        1,
        "read once, then held"
    );
    // Rotated: within the window the old secret is held; past it, the new one is read.
    let second = b"the rotated secret, also thirty-two bytes or more".to_vec();
    *store.value.lock().unwrap() = Some(second.clone());
    assert!(
        ids.verify(TENANT, &settings, &hs256(&first, &claims()))
            .await
            .is_ok()
    );
    clock.pass(window);
    assert!(
        ids.verify(TENANT, &settings, &hs256(&second, &claims()))
            .await
            .is_ok()
    );
    assert_eq!(
        ids.verify(TENANT, &settings, &hs256(&first, &claims()))
            .await,
        Err(TokenError::Signature)
    );
    // The store failing keeps the secret held.
    *store.value.lock().unwrap() = None;
    clock.pass(window);
    assert!(
        ids.verify(TENANT, &settings, &hs256(&second, &claims()))
            .await
            .is_ok()
    );

    // A fresh process whose store fails, one that reads no secrets, or a short secret: the
    // token cannot be checked.
    let failing = Arc::new(Secrets::default());
    let ids = identities(window).with_secrets(failing as _);
    let got = ids
        .verify(TENANT, &settings, &hs256(&second, &claims()))
        .await;
    assert!(
        matches!(got, Err(TokenError::KeysUnavailable(ref why)) if why.contains("AccessDenied")),
        "{got:?}"
    );
    let got = identities(window)
        .verify(TENANT, &settings, &hs256(&second, &claims()))
        .await;
    assert!(
        matches!(got, Err(TokenError::KeysUnavailable(_))),
        "{got:?}"
    );
    let short = Arc::new(Secrets::default());
    *short.value.lock().unwrap() = Some(b"too short".to_vec());
    let ids = identities(window).with_secrets(short as _);
    let got = ids
        .verify(TENANT, &settings, &hs256(b"too short", &claims()))
        .await;
    assert!(
        matches!(got, Err(TokenError::KeysUnavailable(ref why)) if why.contains("32")),
        "{got:?}"
    );
}

/// A JWKS stand-in whose one route answers `answer` (a redirect, a 404, text), counting calls.
async fn answering(answer: Response) -> (Arc<AtomicUsize>, String) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let answer = Arc::new(std::sync::Mutex::new(Some(answer)));
    let app = axum::Router::new().fallback(move || {
        let (calls, answer) = (Arc::clone(&counted), Arc::clone(&answer));
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            answer
                .lock()
                .unwrap()
                .take()
                .unwrap_or_else(|| StatusCode::GONE.into_response())
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (calls, url)
}

fn unavailable(got: Result<sluice_identity::User, TokenError>) -> String {
    match got {
        Err(TokenError::KeysUnavailable(why)) => why,
        other => panic!("{other:?}"),
    }
}

/// Where the URL leads is checked, not how it is written: with no range allowed (a
/// deployment's default), an address and a name that resolves inside are refused before any
/// request is sent, and the message says what is wrong with the setting.
#[tokio::test]
async fn a_jwks_url_that_leads_inside_is_never_fetched() {
    let rsa = signer(Algorithm::RS256, "rsa.pem", "r1");
    let (server, url) = jwks(vec![rsa.jwk()]).await;
    let port = url
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let ids = Identities::new(Duration::from_secs(60));
    let token = rsa.sign(&claims());
    for url in [
        url.clone(),
        format!("http://localhost:{port}/jwks.json"),
        format!("http://[::ffff:127.0.0.1]:{port}/jwks.json"),
        format!("http://2130706433:{port}/jwks.json"),
    ] {
        let why = unavailable(ids.verify(TENANT, &by_jwks(&url), &token).await);
        assert!(why.contains("public addresses"), "{url}: {why}");
    }
    assert_eq!(
        server.fetches.load(Ordering::SeqCst),
        0,
        "nothing was fetched"
    );
    // A name resolved to an inside address for https is refused the same way (the resolver's
    // check: the connection would go to the address it checked).
    let why = unavailable(
        ids.verify(
            TENANT,
            &by_jwks(&format!("https://localhost:{port}/jwks.json")),
            &token,
        )
        .await,
    );
    assert!(why.contains("loopback"), "{why}");
    // Allowed by the operator, the same URL is fetched.
    let allowed = identities(Duration::from_secs(60));
    assert!(allowed.verify(TENANT, &by_jwks(&url), &token).await.is_ok());
    assert_eq!(server.fetches.load(Ordering::SeqCst), 1);
}

/// A redirect is not followed (it could lead anywhere), and what the network answered — a
/// redirect, a 404, text that is not JSON, a closed port — reads the same to the tenant, never
/// naming the URL or what was found there.
#[tokio::test]
async fn no_redirect_is_followed_and_no_failure_says_what_a_probe_found() {
    let rsa = signer(Algorithm::RS256, "rsa.pem", "r1");
    let (keys, target) = jwks(vec![rsa.jwk()]).await;
    let redirect = (StatusCode::FOUND, [("location", target.clone())]).into_response();
    let (calls, redirecting) = answering(redirect).await;
    let (_, missing) = answering(StatusCode::NOT_FOUND.into_response()).await;
    let (_, text) = answering("<html>an admin page</html>".into_response()).await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/jwks.json", l.local_addr().unwrap())
    };
    let ids = identities(Duration::from_secs(60));
    let token = rsa.sign(&claims());
    let mut messages = Vec::new();
    for (tenant, url) in [
        ("a", &redirecting),
        ("b", &missing),
        ("c", &text),
        ("d", &closed),
    ] {
        let why = unavailable(ids.verify(tenant, &by_jwks(url), &token).await);
        let port = url.split(':').nth(2).unwrap().split('/').next().unwrap();
        assert!(!why.contains(port) && !why.contains("127.0.0.1"), "{why}");
        messages.push(why);
    }
    assert!(messages.windows(2).all(|w| w[0] == w[1]), "{messages:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        keys.fetches.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );
}

/// One tenant's fetches are rate-limited and its key sets are its own: a tenant that makes
/// Sluice fetch URL after URL is refused after a few a minute, and pushes out only its own
/// sets, never another tenant's keys.
#[tokio::test]
async fn one_tenants_fetches_are_limited_and_never_evict_anothers_keys() {
    let rsa = signer(Algorithm::RS256, "rsa.pem", "r1");
    let (server, url) = jwks(vec![rsa.jwk()]).await;
    let ids = identities(Duration::from_secs(60));
    let token = rsa.sign(&claims());
    assert!(ids.verify("victim", &by_jwks(&url), &token).await.is_ok());
    let limit = sluice_fetch::FETCHES_PER_MINUTE as usize;
    let mut refused = 0;
    for n in 0..limit + 4 {
        let got = ids
            .verify("prober", &by_jwks(&format!("{url}?n={n}")), &token)
            .await;
        if let Err(TokenError::KeysUnavailable(why)) = &got {
            assert!(why.contains("in a minute"), "{why}");
            refused += 1;
        }
    }
    assert_eq!(refused, 4, "{limit} fetches a minute, then refused");
    let fetched = server.fetches.load(Ordering::SeqCst);
    assert_eq!(fetched, 1 + limit);
    // The victim's keys were kept: its token verifies with no new fetch.
    assert!(ids.verify("victim", &by_jwks(&url), &token).await.is_ok());
    assert_eq!(server.fetches.load(Ordering::SeqCst), fetched);
}

/// A listener on `ip` at `port` that counts the connections it is offered (and answers none:
/// which address a fetch reaches is what is counted).
async fn counting(ip: &str, port: u16) -> Option<Arc<AtomicUsize>> {
    let listener = tokio::net::TcpListener::bind((ip, port)).await.ok()?;
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    Some(seen)
}

/// The connection goes to an address that was checked, from the lookup that was checked: a
/// name that answers an inside address beside an allowed one reaches only the allowed one, and
/// a name that answers differently from one lookup to the next (rebinding) is checked again at
/// each — the inside address is never reached.
#[tokio::test]
async fn a_rebinding_name_reaches_only_addresses_that_were_checked() {
    use sluice_fetch::{FetchError, Fetcher, Lookup};
    // The same port on two loopback addresses: 127.0.0.2 stands for an address the operator
    // allows, 127.0.0.1 for one inside.
    let probe = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let (Some(allowed_seen), Some(inside_seen)) = (
        counting("127.0.0.2", port).await,
        counting("127.0.0.1", port).await,
    ) else {
        panic!("port {port} is taken on one of the two addresses");
    };
    let answers = Arc::new(std::sync::Mutex::new(vec![
        vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()],
        vec!["127.0.0.2".parse().unwrap()],
        vec!["127.0.0.1".parse().unwrap()],
    ]));
    let lookups = Arc::new(AtomicUsize::new(0));
    let (given, counted) = (Arc::clone(&answers), Arc::clone(&lookups));
    let lookup: Lookup = Arc::new(move |name: String| {
        assert_eq!(name, "rebinding.example");
        let n = counted.fetch_add(1, Ordering::SeqCst);
        let answer = given.lock().unwrap()[n.min(2)].clone();
        Box::pin(async move { Ok(answer) })
    });
    let allowed = sluice_contract::net::IpRange::list("127.0.0.2").unwrap();
    let fetcher = Fetcher::resolving(allowed, Duration::from_secs(2), lookup);
    let url = format!("https://rebinding.example:{port}/keys");
    // Lookup 1 (inside and allowed) and 2 (allowed): each fetch reaches the allowed address
    // alone (and fails there: it speaks no TLS).
    for tenant in ["a", "b"] {
        let got = fetcher.get(tenant, &url, 1024).await;
        assert_eq!(got, Err(FetchError::Failed), "{tenant}");
    }
    assert!(allowed_seen.load(Ordering::SeqCst) >= 2);
    // Lookup 3: the name now answers the inside address alone: refused, nothing reached.
    let got = fetcher.get("c", &url, 1024).await;
    assert!(
        matches!(&got, Err(FetchError::Refused(why)) if why.contains("loopback")),
        "{got:?}"
    );
    assert_eq!(
        lookups.load(Ordering::SeqCst),
        3,
        "one lookup a fetch, each checked"
    );
    assert_eq!(
        inside_seen.load(Ordering::SeqCst),
        0,
        "the inside address was never reached"
    );
}
