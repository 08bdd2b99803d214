//! A walk of a tenant's website: the pages its sitemap lists, or those reached by links from
//! its start URLs, inside the hosts and path prefixes it names — bounded and polite:
//!
//! - **Bounded.** At most `max_pages` requests for pages and `max_bytes` of them in all (each
//!   page at most `max_page_bytes`, checked while it is read); links followed `max_depth`
//!   deep. A walk cut by a cap says so ([`Crawl::cut`]): what it did not reach is not known
//!   to be gone.
//! - **Polite.** Each host's `robots.txt` is read first and obeyed ([`Robots`]); requests to
//!   one host are spaced by `interval`, or by its `Crawl-delay` when longer; a page that was
//!   seen before is asked for with its validator, so an unchanged page costs a 304.
//! - **Safe.** Every request goes through the [`Fetcher`]: each URL, and each redirect's
//!   target, is checked, resolved and checked again before a connection is made.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;
use url::Url;

use crate::client::{Answer, Fetched, Fetcher, Refused, Validator, joined};
use crate::links::links;
use crate::robots::{MAX_ROBOTS_BYTES, Robots};
use crate::sitemap::{self, MAX_SITEMAP_BYTES, Sitemap};

/// The most sitemaps an index may make a walk read.
pub const MAX_SITEMAPS: usize = 50;

/// What to walk, and within what.
#[derive(Debug, Clone)]
pub struct Site {
    /// A sitemap listing the pages (then links are followed only `max_depth` deep from them).
    pub sitemap: Option<String>,
    /// Pages to start from.
    pub start: Vec<String>,
    /// Path prefixes a page must start with (on the hosts of `sitemap` and `start`); empty:
    /// the whole of those hosts.
    pub scope: Vec<String>,
    /// The most pages asked for.
    pub max_pages: usize,
    /// How many links deep from a listed page.
    pub max_depth: usize,
    /// The most bytes of pages in all.
    pub max_bytes: u64,
    /// The most bytes of one page.
    pub max_page_bytes: usize,
    /// The least time between two requests to one host.
    pub interval: Duration,
}

/// One page the walk came to, and what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visit {
    /// The page's URL.
    pub url: String,
    /// What was found there.
    pub found: Found,
}

/// What the walk found at a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The page, new or changed.
    Page(Fetched),
    /// The version held is current (304).
    Unchanged,
    /// It answered 404 or 410: it is gone.
    Gone(u16),
    /// It redirects to another page (followed when that one is in scope): its content lives
    /// there now.
    Moved(String),
    /// Not fetched: `robots.txt` disallows it.
    Disallowed,
    /// Fetched, but it asks not to be indexed (`<meta name="robots" content="noindex">`).
    NoIndex,
    /// No usable answer (a status, the connection, a cap), or its URL is refused; what it
    /// was is said.
    Failed(String),
}

/// A walk in progress.
pub struct Crawl<'a> {
    fetcher: &'a Fetcher,
    site: Site,
    /// `scheme://host:port` of every URL the site was given: the hosts pages may be on.
    origins: HashSet<String>,
    held: HashMap<String, Validator>,
    queue: VecDeque<(String, usize)>,
    seen: HashSet<String>,
    robots: HashMap<String, Robots>,
    last: HashMap<String, Instant>,
    pages: usize,
    bytes: u64,
    cut: Option<String>,
    deeper: HashSet<String>,
}

impl<'a> Crawl<'a> {
    /// A walk of `site` through `fetcher`, knowing the validators of the pages `held` (by URL)
    /// already; its URLs checked (what is wrong with one is the error).
    pub fn new(
        fetcher: &'a Fetcher,
        site: Site,
        held: HashMap<String, Validator>,
    ) -> Result<Self, Refused> {
        let mut origins = HashSet::new();
        for url in site.sitemap.iter().chain(&site.start) {
            let parsed = sluice_contract::net::site_url(url).map_err(Refused)?;
            origins.insert(parsed.origin().ascii_serialization());
        }
        let mut crawl = Self {
            fetcher,
            site,
            origins,
            held,
            queue: VecDeque::new(),
            seen: HashSet::new(),
            robots: HashMap::new(),
            last: HashMap::new(),
            pages: 0,
            bytes: 0,
            cut: None,
            deeper: HashSet::new(),
        };
        for url in crawl.site.start.clone() {
            crawl.enqueue(&url, 0);
        }
        Ok(crawl)
    }

    /// Reads the sitemap (and those an index lists) and queues its pages in scope; the error
    /// says why it could not be read whole — a walk that cannot list its pages deletes none.
    pub async fn list(&mut self) -> Result<usize, String> {
        let Some(first) = self.site.sitemap.clone() else {
            return Ok(self.queue.len());
        };
        let mut maps = VecDeque::from([first]);
        let mut read = 0;
        while let Some(map) = maps.pop_front() {
            read += 1;
            if read > MAX_SITEMAPS {
                return Err(format!("its index lists more than {MAX_SITEMAPS} sitemaps"));
            }
            self.wait(&map).await;
            let (at, answer) = (self.fetcher.follow(&map, MAX_SITEMAP_BYTES).await)
                .map_err(|r| format!("the sitemap {map} {r}"))?;
            let bytes = match answer {
                Answer::Page(page) => page.bytes,
                Answer::Status(status) => {
                    return Err(format!("the sitemap {at} answered {status}"));
                }
                other => return Err(format!("the sitemap {at}: {}", said(&other))),
            };
            match sitemap::parse(&bytes).map_err(|e| format!("the sitemap {at}: {e}"))? {
                Sitemap::Pages(pages) => pages.iter().for_each(|p| self.enqueue(p, 0)),
                Sitemap::Index(more) => maps.extend(more),
            }
        }
        Ok(self.queue.len())
    }

    /// The pages queued, in the order they will be visited: after [`list`](Self::list), the
    /// start URLs and what the sitemap lists in scope — the whole of a sitemap's site.
    pub fn queued(&self) -> Vec<String> {
        self.queue.iter().map(|(url, _)| url.clone()).collect()
    }

    /// Starts the walk after `url`, when it is queued: the pages after it first, then those
    /// up to it (a walk that continues where an earlier one stopped).
    pub fn start_after(&mut self, url: &str) {
        if let Some(at) = self.queue.iter().position(|(u, _)| u == url) {
            self.queue.rotate_left(at + 1);
        }
    }

    /// The next page, or `None` when every page in scope was visited or a cap was reached.
    pub async fn next(&mut self) -> Option<Visit> {
        let (url, depth) = self.queue.pop_front()?;
        if self.cut.is_none() && self.pages >= self.site.max_pages {
            self.cut = Some(format!(
                "the page cap ({}) was reached",
                self.site.max_pages
            ));
        }
        if self.cut.is_some() {
            self.queue.push_front((url, depth));
            return None;
        }
        let found = self.visit(&url, depth).await;
        Some(Visit { url, found })
    }

    /// Why the walk stopped before it had visited every page in scope, if it did.
    pub fn cut(&self) -> Option<&str> {
        self.cut.as_deref()
    }

    /// Pages in scope the walk did not visit: queued when a cap cut it, and those linked
    /// deeper than `max_depth`.
    pub fn not_reached(&self) -> (usize, usize) {
        (self.queue.len(), self.deeper.len())
    }

    async fn visit(&mut self, url: &str, depth: usize) -> Found {
        let robots = match self.robots_for(url).await {
            Ok(robots) => robots,
            Err(refused) => return Found::Failed(refused.0),
        };
        let path = Url::parse(url).map_or_else(|_| "/".into(), |u| path_of(&u));
        if !robots.allows(&path) {
            return Found::Disallowed;
        }
        self.wait(url).await;
        self.pages += 1;
        let held = self.held.get(url);
        let answer = match self.fetcher.page(url, held, self.site.max_page_bytes).await {
            Ok(answer) => answer,
            Err(refused) => return Found::Failed(refused.0),
        };
        match answer {
            Answer::Page(page) => {
                self.bytes += page.bytes.len() as u64;
                if self.bytes > self.site.max_bytes {
                    self.cut = Some(format!(
                        "the byte cap ({} bytes) was reached",
                        self.site.max_bytes
                    ));
                }
                let html = (page.media_type.as_deref())
                    .is_some_and(|t| t.to_ascii_lowercase().contains("html"));
                if html {
                    let said = links(&String::from_utf8_lossy(&page.bytes), url);
                    if !said.nofollow {
                        for link in &said.links {
                            if depth < self.site.max_depth {
                                self.enqueue(link, depth + 1);
                            } else if self.in_scope(link) && !self.seen.contains(link) {
                                self.deeper.insert(link.clone());
                            }
                        }
                    }
                    if said.noindex {
                        return Found::NoIndex;
                    }
                }
                Found::Page(page)
            }
            Answer::NotModified => Found::Unchanged,
            Answer::Status(status @ (404 | 410)) => Found::Gone(status),
            Answer::Redirect(location) => match joined(url, &location) {
                Ok(target) => {
                    self.enqueue(&target, depth);
                    Found::Moved(target)
                }
                Err(refused) => Found::Failed(refused.0),
            },
            other => Found::Failed(said(&other)),
        }
    }

    /// Queues `url` at `depth` if it is in scope and new.
    fn enqueue(&mut self, url: &str, depth: usize) {
        let Ok(parsed) = sluice_contract::net::site_url(url) else {
            return;
        };
        let url = parsed.to_string();
        if self.in_scope(&url) && self.seen.insert(url.clone()) {
            self.queue.push_back((url, depth));
        }
    }

    /// Whether `url` is on one of the site's hosts, under one of its path prefixes.
    fn in_scope(&self, url: &str) -> bool {
        let Ok(parsed) = Url::parse(url) else {
            return false;
        };
        self.origins
            .contains(&parsed.origin().ascii_serialization())
            && (self.site.scope.is_empty()
                || (self.site.scope.iter()).any(|prefix| parsed.path().starts_with(prefix)))
    }

    /// The rules of `url`'s host, read on its first page.
    async fn robots_for(&mut self, url: &str) -> Result<Robots, Refused> {
        let origin =
            Url::parse(url).map_or_else(|_| url.into(), |u| u.origin().ascii_serialization());
        if let Some(robots) = self.robots.get(&origin) {
            return Ok(robots.clone());
        }
        let at = format!("{origin}/robots.txt");
        self.wait(&at).await;
        let robots = match self.fetcher.follow(&at, MAX_ROBOTS_BYTES).await? {
            (_, Answer::Page(page)) => Robots::parse(&String::from_utf8_lossy(&page.bytes)),
            (_, Answer::Status(400..=499)) => Robots::allow_all(),
            // Unreachable or failing: the RFC's "disallow all" until it can be read.
            _ => Robots::disallow_all(),
        };
        self.robots.insert(origin, robots.clone());
        Ok(robots)
    }

    /// Waits until `url`'s host may be asked again, and notes the request.
    async fn wait(&mut self, url: &str) {
        let origin =
            Url::parse(url).map_or_else(|_| url.into(), |u| u.origin().ascii_serialization());
        let delay = (self.robots.get(&origin))
            .and_then(|r| r.crawl_delay)
            .map_or(self.site.interval, |d| d.max(self.site.interval));
        if let Some(last) = self.last.get(&origin) {
            tokio::time::sleep_until(*last + delay).await;
        }
        self.last.insert(origin, Instant::now());
    }
}

/// A URL's path and query, as `robots.txt` rules are matched against them.
fn path_of(url: &Url) -> String {
    match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_string(),
    }
}

/// What an answer that is not a page says, in a few words.
fn said(answer: &Answer) -> String {
    match answer {
        Answer::Status(status) => format!("it answered {status}"),
        Answer::Failed(why) => why.clone(),
        Answer::Redirect(to) => format!("it redirects to {to}"),
        Answer::NotModified => "it answered 304".into(),
        Answer::Page(_) => "it answered".into(),
    }
}
