//! A request body that breaks off mid-way, over a real socket: hyper's error becomes a clear
//! JSON 400 (`unreadable_body`), and nothing hangs. (Every other bad input is a contract
//! test: `crates/http/tests/contract/codes.rs`.)

use sluice_tests::start;

/// Sends `head` (request line and headers), a body shorter than its `content-length` says,
/// then ends the request side: what a client that breaks off mid-body leaves. The response.
async fn broken_off(url: &str, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(br#"{"query": "#).await.unwrap();
    tcp.shutdown().await.unwrap();
    let mut response = String::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tcp.read_to_string(&mut response),
    )
    .await;
    response
}

#[tokio::test]
async fn a_body_broken_off_is_unreadable() {
    sluice_testkit::needs!(Llm, Model);
    let server = start(&[]).await;
    let head = "POST /v1/answer HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
    let response = broken_off(&server.url, head).await;
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
    assert!(response.contains("\"unreadable_body\""), "{response}");
}
