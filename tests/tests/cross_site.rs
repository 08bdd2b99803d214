//! No web page can drive a server: with auth off (`sluice serve`'s default) a browser's
//! request from a page of another origin — a form posted to 127.0.0.1, a `fetch` — is refused
//! on every `/v1` route before anything is read, written or asked of the LLM. Clients that are
//! not browsers (curl, the CLI, SDKs) send no `Origin` and are served; so is the page at `/`,
//! which is same-origin. (`sluice serve`'s `Host` check against DNS rebinding, and the real
//! browser, are in `functions/local/tests/cli.rs` and `browser.rs`.)

use reqwest::Method;
use serde_json::Value;
use sluice_tests::{TestServer, error_code, start, v1_routes};

/// `method path` with `headers`; status and JSON body.
async fn send(
    server: &TestServer,
    headers: &[(&str, &str)],
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let (status, _, body) = sluice_tests::request(&server.url, headers, method, path, body).await;
    (status, body)
}

#[tokio::test]
async fn a_page_of_another_origin_is_refused_on_every_v1_route() {
    let server = start(&[]).await;
    for foreign in [
        vec![("origin", "http://evil.example")],
        vec![("origin", "null")],
        // Another port of the same host is another origin.
        vec![("origin", "http://127.0.0.1:1")],
        vec![("sec-fetch-site", "cross-site")],
        vec![("sec-fetch-site", "same-site")],
    ] {
        for (method, path, body) in v1_routes() {
            let mut headers = foreign.clone();
            // What a form posts: text/plain (or urlencoded), read as JSON whatever it says.
            headers.push(("content-type", "text/plain"));
            let (status, error) = send(&server, &headers, method.clone(), path, body).await;
            assert_eq!(
                (status, error_code(&error)),
                (403, "cross_origin"),
                "{method} {path} with {foreign:?}"
            );
        }
    }
    server.assert_nothing_written("default").await;
    let metrics = server.server.metrics.encode();
    assert!(
        !metrics.contains("sluice_answers_total{"),
        "an answer was started: {metrics}"
    );
}

#[tokio::test]
async fn clients_without_an_origin_and_the_servers_own_pages_are_served() {
    let server = start(&[]).await;
    let own = server.url.clone();
    let document = br#"{"documents":[{"id":"a","text":"Refunds take five days."}]}"#.to_vec();
    for headers in [
        // curl, the CLI, an SDK.
        vec![],
        // The page at `/`, same origin.
        vec![("origin", own.as_str()), ("sec-fetch-site", "same-origin")],
        // Behind a proxy that rewrites Host and says what the browser used.
        vec![
            ("origin", "https://sluice.example"),
            ("x-forwarded-host", "sluice.example"),
        ],
        // A navigation typed by the user.
        vec![("sec-fetch-site", "none")],
    ] {
        let (status, body) = send(
            &server,
            &headers,
            Method::POST,
            "/v1/documents",
            document.clone(),
        )
        .await;
        assert_eq!(status, 200, "{headers:?}: {body}");
        let (status, _) = send(&server, &headers, Method::GET, "/v1/models", vec![]).await;
        assert_eq!(status, 200, "{headers:?}");
    }
    // The default port of the scheme is the same origin as no port.
    let (status, _) = send(
        &server,
        &[("origin", "http://localhost"), ("host", "localhost:80")],
        Method::GET,
        "/v1/models",
        vec![],
    )
    .await;
    assert_eq!(status, 200);
}
