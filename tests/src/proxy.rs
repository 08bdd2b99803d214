//! A TCP proxy on 127.0.0.1 that holds every new connection for a while before passing it on:
//! a stand-in for a slow network path to a real service (the AWS emulator), so that a process
//! under test meets a slow dependency that still speaks the real protocol.

use std::time::Duration;

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
/// contains `needle` for `delay` and passes every other on at once; its URL. For a dependency
/// slow for one caller only (one API key's lookup in the key table), which a connection-level
/// delay cannot show: the client pools its connections. Bodies are read whole (API calls, not
/// streams); it runs until the runtime stops.
pub async fn delaying_requests(upstream: &str, needle: &str, delay: Duration) -> String {
    use axum::body::{Body, Bytes};
    use axum::extract::Request;
    let upstream = upstream.trim_end_matches('/').to_string();
    let needle = needle.to_string();
    let forward = move |request: Request| {
        let (upstream, needle) = (upstream.clone(), needle.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body: Bytes = axum::body::to_bytes(body, 16 << 20)
                .await
                .expect("a request body");
            if String::from_utf8_lossy(&body).contains(&needle) {
                tokio::time::sleep(delay).await;
            }
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
            let bytes = answer.bytes().await.expect("the upstream's body");
            response.body(Body::from(bytes)).expect("a response")
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
