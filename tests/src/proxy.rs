//! Proxies on 127.0.0.1 in front of real services: a TCP proxy that holds every new
//! connection for a while (a slow network path to the AWS emulator), an HTTP proxy that holds
//! chosen requests, and a stand-in for CloudFront's signing in front of a function URL — so
//! that a process under test meets them while the service behind still speaks the real
//! protocol.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::request::Parts;

/// Starts a proxy to `upstream` (`http://host:port`) that waits `delay` before forwarding
/// each connection; its URL (`http://127.0.0.1:PORT`). It runs until the runtime stops.
pub async fn delaying(upstream: &str, delay: Duration) -> String {
    let upstream = upstream
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                if let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    url
}

/// Starts an HTTP proxy to `upstream` (`http://host:port`) that holds each request whose body
/// contains `needle` for `delay` and passes every other on at once; its URL, and a notice
/// given as each such request starts being held. For a dependency
/// slow for one caller only (one API key's lookup in the key table), which a connection-level
/// delay cannot show: the client pools its connections. It runs until the runtime stops.
pub async fn delaying_requests(
    upstream: &str,
    needle: &str,
    delay: Duration,
) -> (String, Arc<tokio::sync::Notify>) {
    let needle = needle.to_string();
    let holding = Arc::new(tokio::sync::Notify::new());
    let told = Arc::clone(&holding);
    let url = http_proxy(upstream, move |parts, body| {
        let held = String::from_utf8_lossy(&body).contains(&needle);
        let told = Arc::clone(&told);
        async move {
            if held {
                told.notify_one();
                tokio::time::sleep(delay).await;
            }
            Ok((parts, body))
        }
    })
    .await;
    (url, holding)
}

/// Starts a stand-in for CloudFront in front of a Lambda function URL with origin access
/// control, forwarding to `upstream`; its URL. As the signed origin would, it refuses (403) a
/// POST, PUT or PATCH whose `x-amz-content-sha256` is missing or is not the lowercase hex
/// SHA-256 of its body, and it drops the viewer's `Authorization` (the access control signs
/// in its place). Covered: the header a client must send, and that its key travels elsewhere;
/// not covered: SigV4 itself, CloudFront's timeouts, WAF.
pub async fn signing_edge(upstream: &str) -> String {
    http_proxy(upstream, |mut parts, body| async move {
        let hashed = matches!(parts.method.as_str(), "POST" | "PUT" | "PATCH");
        let sent = parts.headers.get("x-amz-content-sha256");
        if hashed && sent.and_then(|v| v.to_str().ok()) != Some(&sluice_contract::sha256_hex(&body)) {
            let refusal = axum::http::Response::builder()
                .status(403)
                .header("content-type", "application/json")
                .body(Body::from(
                    r#"{"Message":"The request signature we calculated does not match the signature you provided."}"#,
                ))
                .expect("a response");
            return Err(refusal);
        }
        parts.headers.remove("authorization");
        Ok((parts, body))
    })
    .await
}

/// An HTTP proxy to `upstream` on 127.0.0.1: each request is read whole (API calls, not
/// uploads of any size) and given to `check`, which may hold it, change its head or answer it
/// instead; the rest go on, and the upstream's answer streams back. Runs until the runtime
/// stops; returns its URL.
async fn http_proxy<F, Fut>(upstream: &str, check: F) -> String
where
    F: Fn(Parts, Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<(Parts, Bytes), axum::http::Response<Body>>> + Send,
{
    let upstream = upstream.trim_end_matches('/').to_string();
    let forward = move |request: Request| {
        let (upstream, check) = (upstream.clone(), check.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body: Bytes = axum::body::to_bytes(body, 16 << 20)
                .await
                .expect("a request body");
            let (parts, body) = match check(parts, body).await {
                Ok(request) => request,
                Err(response) => return response,
            };
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let mut sent = crate::http().request(parts.method, format!("{upstream}{path}"));
            for (name, value) in &parts.headers {
                if name != "host" && name != "content-length" {
                    sent = sent.header(name, value);
                }
            }
            let answer = sent.body(body).send().await.expect("the upstream answers");
            let mut response = axum::http::Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                if name != "content-length" && name != "transfer-encoding" {
                    response = response.header(name, value);
                }
            }
            response
                .body(Body::from_stream(answer.bytes_stream()))
                .expect("a response")
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let app = axum::Router::new().fallback(forward);
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}
