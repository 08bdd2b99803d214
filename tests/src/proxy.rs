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
