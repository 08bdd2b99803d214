//! The website walk and the address rule against a real site served on 127.0.0.1 (the
//! operator's allow-list in these tests: `127.0.0.1/32`, nothing else inside).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_contract::net::IpRange;
use sluice_fetch::{Answer, Crawl, Fetcher, Found, Lookup, Site, Validator};
use sluice_testkit::site::{Page, Site as TestSite};

fn html(body: &str) -> Page {
    Page::html(body)
}

fn status(code: u16) -> Page {
    Page::status(code)
}

fn redirect(to: &str) -> Page {
    Page::redirect(to)
}

/// The site served on 127.0.0.1, and its base URL.
async fn site() -> (Arc<TestSite>, String) {
    let site = TestSite::serve().await;
    let base = site.base.clone();
    (site, base)
}

fn fetcher() -> Fetcher {
    Fetcher::new(
        IpRange::list("127.0.0.1/32").unwrap(),
        Duration::from_secs(5),
    )
}

fn walk(start: &str) -> Site {
    Site {
        sitemap: None,
        start: vec![start.into()],
        scope: vec!["/docs/".into()],
        max_pages: 100,
        max_depth: 5,
        max_bytes: 1 << 20,
        max_page_bytes: 64 << 10,
        interval: Duration::ZERO,
    }
}

async fn all(crawl: &mut Crawl<'_>) -> Vec<(String, Found)> {
    let mut visits = Vec::new();
    while let Some(v) = crawl.next().await {
        visits.push((v.url, v.found));
    }
    visits
}

fn path(visits: &[(String, Found)], base: &str) -> Vec<(String, String)> {
    (visits.iter())
        .map(|(url, found)| {
            let what = match found {
                Found::Page(_) => "page".to_string(),
                Found::Unchanged => "unchanged".into(),
                Found::Gone(s) => format!("gone {s}"),
                Found::Moved(to) => format!("moved {}", to.replace(base, "")),
                Found::Disallowed => "disallowed".into(),
                Found::NoIndex => "noindex".into(),
                Found::Failed(why) => format!("failed: {why}"),
            };
            (url.replace(base, ""), what)
        })
        .collect()
}

/// Links are followed inside the scope (hosts and path prefixes), depth-first by level, each
/// page once; `robots.txt` is obeyed, `noindex` pages are not kept, a redirect in scope is
/// followed, and 404/410 say a page is gone.
#[tokio::test]
async fn a_walk_keeps_to_its_scope_and_obeys_the_site() {
    let (site, base) = site().await;
    site.put(
        "/robots.txt",
        Page::text("User-agent: *\nDisallow: /docs/private\n"),
    );
    site.put(
        "/docs/",
        html(
            r#"<a href="a">a</a> <a href="/docs/b#part">b</a> <a href="/blog/x">blog</a>
            <a href="https://elsewhere.example/docs/">out</a> <a href="private/keys">p</a>
            <a href="old">old</a> <a href="gone">g</a> <a href="removed">r</a>
            <a href="hidden">h</a>"#,
        ),
    );
    site.put(
        "/docs/a",
        html(r#"<a href="/docs/">home</a> <a href="deep/1">d</a>"#),
    );
    site.put("/docs/b", html("b"));
    site.put("/docs/deep/1", html("deep"));
    site.put("/docs/private/keys", html("secret"));
    site.put("/docs/old", redirect("/docs/new"));
    site.put("/docs/new", html("new"));
    site.put("/docs/removed", status(410));
    site.put(
        "/docs/hidden",
        html(r#"<meta name="robots" content="noindex">"#),
    );
    let fetcher = fetcher();
    let mut crawl = Crawl::new(&fetcher, walk(&format!("{base}/docs/")), HashMap::new()).unwrap();
    let visits = all(&mut crawl).await;
    let seen = path(&visits, &base);
    let expected: Vec<(String, String)> = [
        ("/docs/", "page"),
        ("/docs/a", "page"),
        ("/docs/b", "page"),
        ("/docs/private/keys", "disallowed"),
        ("/docs/old", "moved /docs/new"),
        ("/docs/gone", "gone 404"),
        ("/docs/removed", "gone 410"),
        ("/docs/hidden", "noindex"),
        ("/docs/deep/1", "page"),
        ("/docs/new", "page"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(seen, expected);
    assert_eq!(crawl.cut(), None);
    assert_eq!(site.asked("/blog/x"), 0, "out of scope");
    assert_eq!(
        site.asked("/docs/private/keys"),
        0,
        "disallowed by robots.txt"
    );
    assert_eq!(site.asked("/robots.txt"), 1, "read once per host");
}

/// The caps: pages, depth and bytes; a walk cut by one says so and what it did not reach.
#[tokio::test]
async fn a_walk_stops_at_its_caps_and_says_so() {
    let (site, base) = site().await;
    let links: String = (0..20)
        .map(|i| format!(r#"<a href="p{i}">{i}</a>"#))
        .collect();
    site.put("/docs/", html(&links));
    for i in 0..20 {
        site.put(
            &format!("/docs/p{i}"),
            html(r#"<a href="/docs/deeper">x</a>"#),
        );
    }
    site.put("/docs/deeper", html("deeper"));
    let fetcher = fetcher();
    let mut capped = walk(&format!("{base}/docs/"));
    capped.max_pages = 5;
    let mut crawl = Crawl::new(&fetcher, capped, HashMap::new()).unwrap();
    assert_eq!(all(&mut crawl).await.len(), 5);
    assert!(
        crawl.cut().unwrap().contains("page cap (5)"),
        "{:?}",
        crawl.cut()
    );
    assert_eq!(
        crawl.not_reached().0,
        17,
        "p5..p19, and the page they link to"
    );
    let mut shallow = walk(&format!("{base}/docs/"));
    shallow.max_depth = 1;
    let mut crawl = Crawl::new(&fetcher, shallow, HashMap::new()).unwrap();
    assert_eq!(all(&mut crawl).await.len(), 21);
    assert_eq!(crawl.cut(), None, "a depth is the scope, not a cut");
    assert!(crawl.not_reached().1 >= 1);
    assert_eq!(site.asked("/docs/deeper"), 0);
    // A page over its own cap fails (read no further than the cap); the byte cap cuts.
    site.put("/docs/big", html(&"x".repeat(100 << 10)));
    let mut bytes = walk(&format!("{base}/docs/big"));
    bytes.max_page_bytes = 10 << 10;
    let mut crawl = Crawl::new(&fetcher, bytes.clone(), HashMap::new()).unwrap();
    let visits = all(&mut crawl).await;
    assert!(matches!(&visits[0].1, Found::Failed(why) if why.contains("over 10240 bytes")));
    bytes.max_page_bytes = 1 << 20;
    bytes.max_bytes = 1_000;
    bytes.start.push(format!("{base}/docs/p1"));
    let mut crawl = Crawl::new(&fetcher, bytes, HashMap::new()).unwrap();
    assert_eq!(all(&mut crawl).await.len(), 1);
    assert!(crawl.cut().unwrap().contains("byte cap"));
}

/// A page held already is asked for with its validator: unchanged, it answers 304 and sends
/// nothing; changed, it is sent with its new validator.
#[tokio::test]
async fn a_held_page_is_asked_for_with_its_validator() {
    let (site, base) = site().await;
    let tagged = |body: &str, tag: &str| html(body).with("etag", tag);
    site.put("/docs/a", tagged("a", "\"v1\""));
    site.put("/docs/b", tagged("b", "\"v1\""));
    let fetcher = fetcher();
    let mut start = walk(&format!("{base}/docs/a"));
    start.start.push(format!("{base}/docs/b"));
    let mut crawl = Crawl::new(&fetcher, start.clone(), HashMap::new()).unwrap();
    let first = all(&mut crawl).await;
    let Found::Page(page) = &first[0].1 else {
        panic!("{first:?}")
    };
    assert_eq!(page.validator, Some(Validator::Etag("\"v1\"".into())));
    site.put("/docs/b", tagged("b, changed", "\"v2\""));
    let held: HashMap<String, Validator> = (first.iter())
        .map(|(url, _)| (url.clone(), Validator::Etag("\"v1\"".into())))
        .collect();
    let mut crawl = Crawl::new(&fetcher, start, held).unwrap();
    let second = all(&mut crawl).await;
    assert_eq!(second[0].1, Found::Unchanged);
    assert!(
        matches!(&second[1].1, Found::Page(p) if p.validator == Some(Validator::Etag("\"v2\"".into())))
    );
    let asked = site.requests();
    assert!(asked.contains(&("/docs/a".into(), Some("\"v1\"".into()))));
}

/// Requests to one host are spaced by the site's interval, or by its `Crawl-delay` when
/// longer (a lower bound: it holds on a busy machine).
#[tokio::test]
async fn requests_to_a_host_are_spaced_by_its_crawl_delay() {
    let (site, base) = site().await;
    site.put(
        "/robots.txt",
        Page::text("User-agent: sluice\nCrawl-delay: 0.4\n"),
    );
    site.put("/docs/", html(r#"<a href="a">a</a> <a href="b">b</a>"#));
    site.put("/docs/a", html("a"));
    site.put("/docs/b", html("b"));
    let fetcher = fetcher();
    let started = std::time::Instant::now();
    let mut crawl = Crawl::new(&fetcher, walk(&format!("{base}/docs/")), HashMap::new()).unwrap();
    assert_eq!(all(&mut crawl).await.len(), 3);
    // robots.txt, then three pages each at least 0.4 s after the one before.
    assert!(
        started.elapsed() >= Duration::from_millis(1_200),
        "{:?}",
        started.elapsed()
    );
}

/// A sitemap (an index of sitemaps among them) lists the pages; one that cannot be read
/// fails the listing, so that nothing is taken for gone.
#[tokio::test]
async fn a_sitemap_lists_the_pages_and_a_failed_one_fails_the_listing() {
    let (site, base) = site().await;
    let xml = |body: String| Page::xml(&body);
    site.put(
        "/sitemap.xml",
        xml(format!(
            "<sitemapindex><sitemap><loc>{base}/pages.xml</loc></sitemap></sitemapindex>"
        )),
    );
    site.put(
        "/pages.xml",
        xml(format!(
            "<urlset><url><loc>{base}/docs/a</loc></url><url><loc>{base}/docs/b</loc></url>\
             <url><loc>{base}/outside</loc></url></urlset>"
        )),
    );
    site.put("/docs/a", html(r#"<a href="/docs/c">c</a>"#));
    site.put("/docs/b", html("b"));
    let fetcher = fetcher();
    let mut listed = walk(&format!("{base}/docs/a"));
    listed.start.clear();
    listed.sitemap = Some(format!("{base}/sitemap.xml"));
    listed.max_depth = 0;
    let mut crawl = Crawl::new(&fetcher, listed.clone(), HashMap::new()).unwrap();
    assert_eq!(crawl.list().await, Ok(2));
    let seen = path(&all(&mut crawl).await, &base);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        site.asked("/docs/c"),
        0,
        "links are not followed at depth 0"
    );
    site.put("/pages.xml", status(500));
    let mut crawl = Crawl::new(&fetcher, listed, HashMap::new()).unwrap();
    let failed = crawl.list().await.unwrap_err();
    assert!(failed.contains("answered 500"), "{failed}");
}

/// Every kind of address inside is refused — written in the URL, a name that resolves to it,
/// a redirect to it — before any connection; a name that answers an allowed address, then an
/// inside one (rebinding), is checked at each lookup and never reaches the inside one.
#[tokio::test]
async fn no_url_redirect_or_name_reaches_an_address_inside() {
    let (site, base) = site().await;
    let fetcher = fetcher();
    for url in [
        "http://10.0.0.1/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.2/",
        "http://0.0.0.0/",
        "http://[::1]/",
        "http://[fd00:ec2::254]/",
        "http://[::ffff:10.0.0.1]/",
        "http://100.64.0.1/",
    ] {
        let refused = fetcher.page(url, None, 1024).await.unwrap_err();
        assert!(refused.0.contains("public addresses"), "{url}: {refused}");
    }
    for (url, why) in [
        ("file:///etc/passwd", "http or https"),
        ("gopher://docs.example.com/", "http or https"),
        ("http://user:pw@docs.example.com/", "user name"),
    ] {
        let refused = fetcher.page(url, None, 1024).await.unwrap_err();
        assert!(refused.0.contains(why), "{url}: {refused}");
    }
    // Redirects into the private range, the metadata service, another loopback address: the
    // target is refused and nothing there is asked.
    let port = base.rsplit(':').next().unwrap();
    site.put(
        "/docs/",
        html(r#"<a href="a">a</a> <a href="b">b</a> <a href="c">c</a>"#),
    );
    site.put("/docs/a", redirect("http://192.168.0.10/docs/a"));
    site.put("/docs/b", redirect("http://169.254.169.254/docs/latest"));
    site.put(
        "/docs/c",
        redirect(&format!("http://127.0.0.2:{port}/docs/c")),
    );
    let mut start = walk(&format!("{base}/docs/"));
    // The redirects' hosts are the site's own, so only the address rule stops them.
    start.start.extend([
        "http://192.168.0.10/docs/".to_string(),
        "http://169.254.169.254/docs/".to_string(),
        format!("http://127.0.0.2:{port}/docs/"),
    ]);
    let mut crawl = Crawl::new(&fetcher, start, HashMap::new()).unwrap();
    let visits = all(&mut crawl).await;
    let failed: Vec<&String> = (visits.iter())
        .filter_map(|(_, f)| match f {
            Found::Failed(why) => Some(why),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 6, "{visits:?}");
    assert!(
        failed.iter().all(|why| why.contains("public addresses")),
        "{failed:?}"
    );
    assert_eq!(
        site.asked("/docs/c"),
        1,
        "only the redirect itself, on 127.0.0.1"
    );

    // A name: answered first with the allowed address, then with one inside.
    let answers = Arc::new(Mutex::new(vec![
        vec!["127.0.0.1".parse().unwrap()],
        vec!["10.1.2.3".parse().unwrap(), "127.0.0.2".parse().unwrap()],
    ]));
    let lookups = Arc::new(AtomicUsize::new(0));
    let (given, counted) = (Arc::clone(&answers), Arc::clone(&lookups));
    let lookup: Lookup = Arc::new(move |_name: String| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        let answer = given.lock().unwrap()[n.min(1)].clone();
        Box::pin(async move { Ok(answer) })
    });
    let named = Fetcher::resolving(
        IpRange::list("127.0.0.1/32").unwrap(),
        Duration::from_secs(5),
        lookup,
    );
    // Each answer closes its connection: the next request makes a new one, and looks again.
    site.put("/docs/page", html("page").with("connection", "close"));
    let url = format!("http://rebinding.test:{port}/docs/page");
    assert!(matches!(
        named.page(&url, None, 1024).await,
        Ok(Answer::Page(_))
    ));
    let refused = named.page(&url, None, 1024).await.unwrap_err();
    assert!(refused.0.contains("public addresses"), "{refused}");
    assert_eq!(
        site.asked("/docs/page"),
        1,
        "the second lookup reached nothing"
    );
}
