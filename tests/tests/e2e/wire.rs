//! What the server does on the wire, beyond the stream contract: every accepted connection
//! gets `TCP_NODELAY` (SSE events are small writes; with Nagle's algorithm a token written
//! right after `meta` waits for the client's delayed ACK, 40 ms on Linux).

use std::os::fd::BorrowedFd;

use sluice_tests::start;

/// The `TCP_NODELAY` of the socket of this process whose peer is `peer`, if there is one.
fn nodelay_of_socket_with_peer(peer: std::net::SocketAddr) -> Option<bool> {
    for entry in std::fs::read_dir("/proc/self/fd").ok()? {
        let Some(fd) = entry
            .ok()
            .and_then(|e| e.file_name().to_str()?.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: only read through (getsockopt, getpeername) while the entry was just listed;
        // an fd another thread closes meanwhile answers an error, and is never closed here.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&fd);
        if socket.peer_addr().ok().and_then(|a| a.as_socket()) == Some(peer) {
            return socket.tcp_nodelay().ok();
        }
    }
    None
}

#[tokio::test]
async fn accepted_connections_have_tcp_nodelay() {
    sluice_testkit::needs!(Llm, Model);
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = start(&[]).await;
    let addr = server.url.trim_start_matches("http://");
    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    // An answered request: the server has accepted the connection and set it up.
    client
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = client.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let local = client.local_addr().unwrap();
    assert_eq!(
        nodelay_of_socket_with_peer(local),
        Some(true),
        "the server's end of the connection"
    );
    // The check tells the two apart: the client's own socket keeps Nagle's algorithm on.
    assert!(!client.nodelay().unwrap());
    server.stop().await;
}
