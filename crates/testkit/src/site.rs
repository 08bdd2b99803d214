//! A website served on 127.0.0.1 for the tests of website sources: pages by path (and query)
//! with their status and headers, changed while it runs; an `ETag` answered with 304 when a
//! request sends it back; every request noted with the validator it carried.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// A page of the site: its status, headers and body.
#[derive(Debug, Clone)]
pub struct Page {
    /// Its status.
    pub status: u16,
    /// Its headers.
    pub headers: Vec<(&'static str, String)>,
    /// Its body.
    pub body: String,
}

impl Page {
    /// An HTML page with `body` in its `<body>`.
    pub fn html(body: &str) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type", "text/html".into())],
            body: format!("<html><body>{body}</body></html>"),
        }
    }

    /// A titled HTML page: `<title>` and a paragraph of `text`, and `links`.
    pub fn article(title: &str, text: &str, links: &[&str]) -> Self {
        let links: String = (links.iter())
            .map(|l| format!(r#"<a href="{l}">{l}</a> "#))
            .collect();
        Self {
            status: 200,
            headers: vec![("content-type", "text/html; charset=utf-8".into())],
            body: format!(
                "<html><head><title>{title}</title></head><body><h1>{title}</h1><p>{text}</p>\
                 <nav>{links}</nav></body></html>"
            ),
        }
    }

    /// A plain text file (`robots.txt`).
    pub fn text(body: &str) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type", "text/plain".into())],
            body: body.into(),
        }
    }

    /// An XML file (a sitemap).
    pub fn xml(body: &str) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type", "application/xml".into())],
            body: body.into(),
        }
    }

    /// Nothing but `status`.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            headers: vec![],
            body: String::new(),
        }
    }

    /// A 302 to `to`.
    pub fn redirect(to: &str) -> Self {
        Self {
            status: 302,
            headers: vec![("location", to.into())],
            body: String::new(),
        }
    }

    /// The page with `header` set to `value` too.
    pub fn with(mut self, header: &'static str, value: &str) -> Self {
        self.headers.push((header, value.into()));
        self
    }
}

/// The site: its pages, and the requests it had.
#[derive(Default)]
pub struct Site {
    pages: Mutex<HashMap<String, Page>>,
    asked: Mutex<Vec<(String, Option<String>)>>,
    /// Its base URL (`http://127.0.0.1:<port>`).
    pub base: String,
}

impl Site {
    /// A site with no pages, served on 127.0.0.1 until the runtime ends.
    pub async fn serve() -> Arc<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port on 127.0.0.1");
        let port = listener.local_addr().expect("its address").port();
        let site = Arc::new(Self {
            base: format!("http://127.0.0.1:{port}"),
            ..Self::default()
        });
        let router = axum::Router::new()
            .fallback(serve_page)
            .with_state(Arc::clone(&site));
        tokio::spawn(async move { axum::serve(listener, router).await });
        site
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Serves `page` at `path` (and query) from now on.
    pub fn put(&self, path: &str, page: Page) {
        let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        pages.insert(path.into(), page);
    }

    /// A sitemap (`<urlset>`) listing the pages at `paths` of this site.
    pub fn sitemap(&self, paths: &[impl AsRef<str>]) -> Page {
        let urls: String = (paths.iter())
            .map(|p| format!("<url><loc>{}</loc></url>", self.url(p.as_ref())))
            .collect();
        Page::xml(&format!("<urlset>{urls}</urlset>"))
    }

    /// Serves nothing at `path` (404) from now on.
    pub fn remove(&self, path: &str) {
        let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        pages.remove(path);
    }

    /// How many requests `path` had.
    pub fn asked(&self, path: &str) -> usize {
        let asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        asked.iter().filter(|(p, _)| p == path).count()
    }

    /// Every request so far: its path and the `If-None-Match` it sent.
    pub fn requests(&self) -> Vec<(String, Option<String>)> {
        self.asked.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

async fn serve_page(State(site): State<Arc<Site>>, uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let validator = (headers.get("if-none-match"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (site.asked.lock().unwrap_or_else(|e| e.into_inner())).push((path.clone(), validator.clone()));
    let page = (site.pages.lock().unwrap_or_else(|e| e.into_inner()))
        .get(&path)
        .cloned();
    let Some(page) = page else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let etag = page.headers.iter().find(|(n, _)| *n == "etag");
    if let (Some((_, tag)), Some(sent)) = (etag, &validator)
        && tag == sent
    {
        return StatusCode::NOT_MODIFIED.into_response();
    }
    let status = StatusCode::from_u16(page.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, page.body).into_response();
    for (name, value) in page.headers {
        if let Ok(value) = value.parse() {
            response.headers_mut().insert(name, value);
        }
    }
    response
}
