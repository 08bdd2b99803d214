//! `sluice serve`'s connections: HTTP/1.1 over hyper, each connection with a time limit on
//! its request heads, and the errors hyper answers by itself (a request it cannot parse)
//! written as JSON like every other error.
//!
//! axum's own `serve` sets no timer, so a client that sends one header line every few
//! seconds held its connection (and a task) for as long as it liked; here hyper's
//! `header_read_timeout` closes a connection whose request head has not arrived in time. The
//! body has its own limit where handlers read it ([`crate::answer::read_body`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use sluice_contract::codes::Code;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Serves `router` (usually [`crate::router`]) on `listener` until `shutdown` completes, then
/// lets open connections finish what they are sending.
///
/// Every accepted connection gets `TCP_NODELAY`: SSE events are small writes, and with
/// Nagle's algorithm a token written right after `meta` waits for the client's delayed ACK
/// (40 ms on Linux) — measured as 40 ms of extra time to first token before this. A request
/// head that has not arrived within `header_timeout` closes its connection.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    header_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    // Every connection holds a receiver of `stop` until it has ended, its last response
    // written: the sender then knows when all have.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (tcp, _) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors, a connection reset before it was taken: the next one.
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(router.clone());
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            // Held until the connection has ended (the receiver below is let go of as soon as
            // the stop is seen): `stop.closed()` waits for this one.
            let _open = stopped.clone();
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(JsonErrors::new(tcp)), service);
            tokio::pin!(connection);
            let shutting_down = async move {
                while !*stopped.borrow_and_update() {
                    if stopped.changed().await.is_err() {
                        // The server is gone without a shutdown: the connection runs out.
                        std::future::pending::<()>().await;
                    }
                }
            };
            tokio::select! {
                _ = connection.as_mut() => {}
                () = shutting_down => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    drop(stopped);
    let _ = stop.send(true);
    stop.closed().await;
    Ok(())
}

/// A connection's socket, through which the responses hyper writes by itself — to a request
/// it could not parse, before any handler ran — go out as Sluice's JSON errors. hyper writes
/// such a response as one head with `content-length: 0` and closes the connection; no
/// handler's error response is empty (each has its JSON body), so such a head is hyper's.
struct JsonErrors {
    tcp: TcpStream,
    /// A replacement being written, and the length of what hyper asked to write.
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl JsonErrors {
    fn new(tcp: TcpStream) -> Self {
        Self { tcp, pending: None }
    }
}

/// The JSON response that replaces hyper's own empty one, if `head` is one.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let status_line = text.strip_prefix("HTTP/1.1 4")?.split("\r\n").next()?;
    if !text.ends_with("\r\n\r\n")
        || !text
            .to_ascii_lowercase()
            .contains("\r\ncontent-length: 0\r\n")
    {
        return None;
    }
    let status: u16 = format!("4{}", status_line.get(..2)?).parse().ok()?;
    let (code, message) = match status {
        431 => (
            Code::HeadersTooLarge,
            "the request's headers are too many or too large",
        ),
        414 => (Code::UriTooLong, "the request's URI is too long"),
        _ => (
            Code::InvalidRequest,
            "the request cannot be read: its request line or a header is malformed (a Content-Length that is not a number, say)",
        ),
    };
    let body = json!({"error": {"code": code, "message": message}}).to_string();
    Some(
        format!(
            "HTTP/1.1 4{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl AsyncRead for JsonErrors {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for JsonErrors {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.pending.is_none() {
            match replacement(buf) {
                Some(json) => this.pending = Some((json, 0, buf.len())),
                None => return Pin::new(&mut this.tcp).poll_write(cx, buf),
            }
        }
        // Write all of the replacement, then tell hyper its head was written.
        while let Some((json, written, asked)) = &mut this.pending {
            if *written == json.len() {
                let asked = *asked;
                this.pending = None;
                return Poll::Ready(Ok(asked));
            }
            match Pin::new(&mut this.tcp).poll_write(cx, &json[*written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *written += n,
                other => return other,
            }
        }
        Poll::Ready(Ok(0))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_empty_errors_become_json_and_nothing_else_is_touched() {
        let head = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Fri, 04 Dec 2026 18:00:00 GMT\r\n\r\n";
        let json = String::from_utf8(replacement(head).unwrap()).unwrap();
        assert!(
            json.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{json}"
        );
        let body = json.split("\r\n\r\n").nth(1).unwrap();
        let value: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(value["error"]["code"], "headers_too_large");
        assert!(json.contains(&format!("content-length: {}\r\n", body.len())));
        let bad = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        assert!(
            String::from_utf8(replacement(bad).unwrap())
                .unwrap()
                .contains("invalid_request")
        );
        // A handler's response (a body, or not an error) is left as it is.
        for other in [
            &b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 60\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
        ] {
            assert_eq!(replacement(other), None);
        }
    }
}
