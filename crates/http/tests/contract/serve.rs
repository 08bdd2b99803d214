//! `sluice serve`'s connections, on a real socket (the rest of the contract calls the router
//! directly): what hyper answers by itself — a request it cannot parse, headers too large —
//! is JSON with a code like every other error, and a client that sends its request slowly
//! is cut off by the head and body time limits instead of holding its connection for ever.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::kit::Kit;

/// `request` sent whole to a server of the kit's app on a real socket, its response read as
/// the router's are (for what only the socket shows: hyper's own refusals).
pub(crate) async fn over_the_wire(request: &[u8]) -> crate::kit::Reply {
    let response = exchange(serving(&[]).await, request).await;
    let (status, body) = parse(&response);
    let head = response.split("\r\n\r\n").next().unwrap_or_default();
    let mut headers = axum::http::HeaderMap::new();
    for line in head.lines().skip(1) {
        if let Some((name, value)) = line.split_once(": ")
            && let (Ok(name), Ok(value)) = (
                axum::http::HeaderName::from_bytes(name.as_bytes()),
                axum::http::HeaderValue::from_str(value),
            )
        {
            headers.insert(name, value);
        }
    }
    crate::kit::Reply {
        status,
        headers,
        body,
        raw: response,
    }
}

/// Serves the kit's app with `overrides` on a port of 127.0.0.1; its address.
async fn serving(overrides: &[(&str, &str)]) -> std::net::SocketAddr {
    let kit = Kit::new(overrides);
    let header_timeout = kit.parts.wire.limits.header_timeout;
    let app = kit.app();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = sluice_http::router(app.server.clone());
    tokio::spawn(sluice_http::serve(
        listener,
        router,
        header_timeout,
        std::future::pending(),
    ));
    addr
}

/// Sends `request` on a new connection and reads until the server closes it (at most a
/// minute: a server that never closes fails the test, however busy the machine).
async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), tcp.read_to_end(&mut response))
        .await
        .expect("the server closes the connection")
        .ok();
    String::from_utf8_lossy(&response).into_owned()
}

/// The status and the JSON body of a whole response.
fn parse(response: &str) -> (u16, Value) {
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {response:?}"));
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    let json = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response:?}"));
    (status, json)
}

#[tokio::test]
async fn requests_hyper_cannot_parse_get_json_errors_with_a_code() {
    let addr = serving(&[]).await;
    let bad_length = b"POST /v1/answer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n";
    let garbage = b"HELLO THERE\r\n\r\n";
    for request in [&bad_length[..], garbage] {
        let (status, body) = parse(&exchange(addr, request).await);
        assert_eq!(status, 400);
        assert_eq!(body["error"]["code"], "invalid_request");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("cannot be read"),
            "{body}"
        );
    }
    let mut huge = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n".to_vec();
    for i in 0..200 {
        huge.extend(format!("x-filler-{i}: {}\r\n", "y".repeat(4000)).as_bytes());
    }
    huge.extend(b"\r\n");
    let (status, body) = parse(&exchange(addr, &huge).await);
    assert_eq!(status, 431);
    assert_eq!(body["error"]["code"], "headers_too_large");
    // A request that parses is the router's, as always.
    let ok = exchange(
        addr,
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
}

/// A head sent a line at a time and never finished is cut off at the head's time limit, and
/// a body that stops coming at the body's: each connection ends (the server closes it) where
/// before it stayed open as long as the client liked.
#[tokio::test]
async fn slow_heads_and_bodies_are_cut_off() {
    let addr = serving(&[
        ("SLUICE_HEADER_READ_TIMEOUT_MS", "300"),
        ("SLUICE_BODY_READ_TIMEOUT_MS", "300"),
    ])
    .await;
    // The head's first line, then nothing: closed with no response.
    let head = exchange(addr, b"GET /healthz HTTP/1.1\r\n").await;
    assert!(!head.starts_with("HTTP/1.1 200"), "{head:?}");
    // A head, then one byte of a 100-byte body, then nothing.
    let body = exchange(
        addr,
        b"POST /v1/answer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{",
    )
    .await;
    let (status, json) = parse(&body);
    assert_eq!(status, 408, "{body}");
    assert_eq!(json["error"]["code"], "body_timeout");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("SLUICE_BODY_READ_TIMEOUT_MS"),
        "{json}"
    );
}
