//! Usage and budgets: what `GET /v1/usage` reports is exactly what the answers and ingests
//! reported (the `done` events' token counts, cache hits, the component's fuel, the ingest
//! reports), per tenant and per key; budgets refuse answers with 429 `budget_exceeded` once
//! spent and start again with the month; losing the usage store never fails an answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::{auth::Permission, auth::Principal};
use sluice_contract::{usage::Date, usage::Month, usage::day_string};
use sluice_core::{usage::Meter, usage::MeterSettings, usage::today};
use sluice_testkit::{
    BrokenUsage, MemoryKeys, SCRIPTED_FUEL_PER_HIT, ScriptedReranker, Verdict, tenant,
};

use crate::kit::{App, Kit, Stream, documents};

/// What a run of answers reported, summed as the usage should count it.
#[derive(Debug, Default, PartialEq)]
struct Reported {
    answers: u64,
    cache_hits: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    cached_tokens: u64,
    component_calls: u64,
    component_fuel: u64,
}

impl Reported {
    fn add(&mut self, stream: &Stream) {
        let done = stream.first("done");
        self.answers += 1;
        let tokens = done["token_count"].as_u64().unwrap();
        if done["cached"] == true {
            self.cache_hits += 1;
            self.cached_tokens += tokens;
        } else {
            self.prompt_tokens += done["prompt_tokens"].as_u64().unwrap();
            self.completion_tokens += tokens;
        }
        if let Some(fuel) = done["timings"]["rerank_fuel"].as_u64() {
            self.component_calls += 1;
            self.component_fuel += fuel;
        }
    }

    fn of(total: &Value) -> Self {
        let n = |name: &str| {
            total[name]
                .as_u64()
                .unwrap_or_else(|| panic!("{name} in {total}"))
        };
        Reported {
            answers: n("answers"),
            cache_hits: n("cache_hits"),
            prompt_tokens: n("prompt_tokens"),
            completion_tokens: n("completion_tokens"),
            cached_tokens: n("cached_tokens"),
            component_calls: n("component_calls"),
            component_fuel: n("component_fuel"),
        }
    }
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

async fn usage(app: &App, key: &str, query: &str) -> crate::kit::Reply {
    let auth = bearer(key);
    app.send(
        Method::GET,
        &format!("/v1/usage{query}"),
        &[("authorization", &auth)],
        "",
    )
    .await
}

async fn ask(app: &App, key: &str, body: &Value) -> Stream {
    app.answer_with(&[("authorization", &bearer(key))], body)
        .await
}

#[tokio::test]
async fn usage_is_exactly_what_the_answers_and_ingests_reported_per_tenant_and_per_key() {
    let keys = Arc::new(MemoryKeys::default());
    let admin = keys.add(
        "acme",
        &[
            Permission::Answer,
            Permission::Documents,
            Permission::Usage,
            Permission::UsageKeys,
        ],
    );
    let user = keys.add("acme", &Permission::DEFAULT);
    let other = keys.add("globex", &Permission::DEFAULT);
    // Acme's answers go through its component, which reports fuel per candidate.
    let mut kit = Kit::new(&[]).keys(keys);
    kit.parts.reranker = Some(Arc::new(
        ScriptedReranker::new(Verdict::Reverse).only_for(&[tenant("acme")]),
    ));
    let app = kit.app();
    let auth = bearer(&admin);
    let ingested = app
        .send(
            Method::POST,
            "/v1/documents",
            &[("authorization", &auth)],
            documents().to_string(),
        )
        .await;
    assert_eq!(ingested.status, 200, "{}", ingested.raw);

    // A mixed run: fresh answers, repeats served from the cache, a bypass, both keys.
    let mut reported = Reported::default();
    let mut by_user = Reported::default();
    let questions = [
        "How long does a replacement card take?",
        "What is the daily ATM limit?",
        "How long does a replacement card take?",
        "Can I overpay my mortgage?",
        "What is the daily ATM limit?",
    ];
    for (i, q) in questions.iter().enumerate() {
        let key = if i % 2 == 0 { &admin } else { &user };
        let stream = ask(&app, key, &json!({"query": q})).await;
        reported.add(&stream);
        if key == &user {
            by_user.add(&stream);
        }
    }
    let bypass = ask(
        &app,
        &admin,
        &json!({"query": questions[0], "cache": "bypass"}),
    )
    .await;
    reported.add(&bypass);
    assert!(
        reported.cache_hits >= 1,
        "the run has cache hits: {reported:?}"
    );
    assert!(
        reported.component_fuel >= SCRIPTED_FUEL_PER_HIT,
        "{reported:?}"
    );
    // Globex asks once; it is not acme's.
    let theirs = ask(
        &app,
        &other,
        &json!({"query": "Can I overpay my mortgage?"}),
    )
    .await;

    let reply = usage(&app, &admin, "?keys=true").await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let body = &reply.body;
    assert_eq!(body["tenant"], "acme");
    assert_eq!(Reported::of(&body["total"]), reported);
    assert_eq!(body["total"]["ingests"], 1);
    assert_eq!(body["total"]["documents"], 3);
    assert_eq!(
        body["total"]["chunks"].as_u64(),
        ingested.body["chunks"].as_u64()
    );
    let days = body["days"].as_array().unwrap();
    assert_eq!(days.len(), 1);
    assert_eq!(days[0]["day"], day_string(today()));
    assert_eq!(Reported::of(&days[0]), reported);
    // Per key: the user's answers under its id, the admin's (and the ingest) under the other.
    let keys = body["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2, "{body}");
    let user_id = sluice_contract::auth::key_id(&sluice_contract::auth::digest(&user));
    let user_row = keys.iter().find(|k| k["key"] == user_id.as_str()).unwrap();
    assert_eq!(Reported::of(&user_row["total"]), by_user);
    for key in keys {
        assert_eq!(key["key"].as_str().map(str::len), Some(12), "{key}");
    }

    // Globex sees only its own answer.
    let reply = usage(&app, &other, "").await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let mut globex = Reported::default();
    globex.add(&theirs);
    assert_eq!(Reported::of(&reply.body["total"]), globex);
    assert_eq!(reply.body["total"]["ingests"], 0);
    // Per key needs usage:keys.
    let reply = usage(&app, &user, "?keys=true").await;
    assert_eq!(
        (reply.status, reply.code()),
        (403, "permission_denied"),
        "{}",
        reply.raw
    );
    assert!(reply.raw.contains("usage:keys"), "{}", reply.raw);
    // A key without the usage permission (made before it existed) cannot read it.
    let keys = Arc::new(MemoryKeys::default());
    let old = keys.add("acme", &[Permission::Answer]);
    let app = Kit::new(&[]).keys(keys).app();
    let reply = usage(&app, &old, "").await;
    assert_eq!((reply.status, reply.code()), (403, "permission_denied"));
}

#[tokio::test]
async fn a_dropped_stream_counts_the_tokens_it_was_sent() {
    use http_body_util::BodyExt;
    let app = Kit::new(&[]).ingested("default").await.app();
    let request = crate::kit::request(
        Method::POST,
        "/v1/answer",
        &[],
        json!({"query": "How long does a replacement card take?"}).to_string(),
    );
    let mut body = app.open(request).await.into_body();
    // Read until the first token has come, then go away.
    let mut seen = String::new();
    while !seen.contains("event: token") {
        let frame = body.frame().await.expect("a frame").expect("bytes");
        seen.push_str(&String::from_utf8_lossy(frame.data_ref().expect("data")));
    }
    let sent = seen.matches("event: token").count() as u64;
    let meta: Value = (seen.split("\n\n"))
        .find(|frame| frame.starts_with("event: meta"))
        .and_then(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).expect("meta is JSON"))
        .expect("a meta event");
    let prompt = meta["prompt_tokens"]
        .as_u64()
        .expect("meta counts the prompt");
    assert!(prompt > 0, "{meta}");
    drop(body);
    let meter = app.server.usage.clone().expect("usage on");
    let mut total = 0;
    for _ in 0..200 {
        meter.flush().await.expect("flushed");
        let rows = meter
            .store()
            .read(&tenant("default"), today(), today())
            .await
            .unwrap();
        total = rows.iter().map(|(_, c)| c.completion_tokens).sum::<u64>();
        if total > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(total >= sent, "{total} tokens counted, {sent} were sent");
    let rows = meter
        .store()
        .read(&tenant("default"), today(), today())
        .await
        .unwrap();
    // The LLM had read the prompt (it sent a token): the prompt is paid for.
    assert_eq!(
        rows.iter().map(|(_, c)| c.prompt_tokens).sum::<u64>(),
        prompt,
        "the prompt of the abandoned answer"
    );
    assert_eq!(
        rows.iter().map(|(_, c)| c.answers).sum::<u64>(),
        0,
        "no answer was completed"
    );
}

#[tokio::test]
async fn answers_started_together_cannot_overshoot_a_budget_together() {
    use http_body_util::BodyExt;
    // Answers that stream one token and then hang, so that all are in flight at once; each
    // may spend up to the 2,048-token window, against a key's budget of 5,000.
    let keys = Arc::new(MemoryKeys::default());
    let capped = keys.add_principal(Principal {
        token_budget: Some(5_000),
        ..Principal::new(tenant("acme"), Permission::DEFAULT.to_vec())
    });
    let stalling =
        sluice_testkit::ScriptedLlm::new(sluice_testkit::Reply::StallAfter(vec!["w ".into()]));
    let app = Kit::with_llm(&[("SLUICE_LLM_CONTEXT_TOKENS", "2048")], stalling)
        .keys(keys)
        .ingested("acme")
        .await
        .app();
    let auth = bearer(&capped);
    let mut open = Vec::new();
    let mut refused = 0;
    for i in 0..20 {
        let body = json!({"query": format!("Lost card? ({i})"), "cache": "bypass"});
        let request = crate::kit::request(
            Method::POST,
            "/v1/answer",
            &[("authorization", &auth)],
            body.to_string(),
        );
        let response = app.open(request).await;
        match response.status().as_u16() {
            200 => open.push(response.into_body()),
            429 => refused += 1,
            other => panic!("status {other}"),
        }
    }
    // Held 0, 2,048, 4,096 when the first three were admitted: the fourth finds 6,144 held.
    assert_eq!((open.len(), refused), (3, 17));
    // Each gets its token; then the clients leave. What they used is counted, the rest of
    // what they held is released: the key answers again (its usage is far under 5,000).
    for body in &mut open {
        let mut seen = String::new();
        while !seen.contains("event: token") {
            let frame = body.frame().await.expect("a frame").expect("bytes");
            seen.push_str(&String::from_utf8_lossy(frame.data_ref().expect("data")));
        }
    }
    let meter = app.server.usage.clone().unwrap();
    assert_eq!(meter.used(&tenant("acme"), None), 0, "held, not yet used");
    drop(open);
    // The streams' ends are recorded as their bodies go (on the runtime's tasks).
    let used = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            match meter.used(&tenant("acme"), None) {
                0 => tokio::task::yield_now().await,
                used => break used,
            }
        }
    })
    .await
    .expect("the abandoned answers are counted");
    assert!(used < 5_000, "{used}");
    let again = crate::kit::request(
        Method::POST,
        "/v1/answer",
        &[("authorization", &auth)],
        json!({"query": "Lost card? (again)", "cache": "bypass"}).to_string(),
    );
    assert_eq!(app.open(again).await.status(), 200);
}

/// A server whose calendar is `offset` days after 2026-11-28.
fn with_calendar(kit: Kit, offset: Arc<AtomicI64>) -> App {
    let store = kit.parts.usage.clone().expect("usage on");
    let settings = MeterSettings::from_config(&kit.parts.config.usage);
    kit.app_with(move |server| {
        let start = Date::from_calendar_date(2026, Month::November, 28).unwrap();
        let meter = Meter::new(store, settings).with_clock(move || {
            start + std::time::Duration::from_secs(86_400 * offset.load(Ordering::SeqCst) as u64)
        });
        server.usage = Some(Arc::new(meter));
    })
}

#[tokio::test]
async fn budgets_refuse_answers_once_spent_and_start_again_with_the_month() {
    let keys = Arc::new(MemoryKeys::default());
    // A key whose budget one answer spends, another with none, under a tenant budget that
    // a few answers spend.
    let capped = keys.add_principal(Principal {
        token_budget: Some(1),
        ..Principal::new(tenant("acme"), Permission::DEFAULT.to_vec())
    });
    let free = keys.add("acme", &Permission::DEFAULT);
    let globex = keys.add("globex", &Permission::DEFAULT);
    let offset = Arc::new(AtomicI64::new(0));
    let kit = Kit::new(&[("SLUICE_TENANT_TOKEN_BUDGETS", "acme=1000")])
        .keys(keys)
        .ingested("acme")
        .await
        .ingested("globex")
        .await;
    let app = with_calendar(kit, offset.clone());
    let fresh = |i: usize| json!({"query": format!("How long does a replacement card take? ({i})"), "cache": "bypass"});

    let first = ask(&app, &capped, &fresh(0)).await;
    assert_eq!(first.names().last(), Some(&"done"));
    let auth = bearer(&capped);
    let refused = app
        .send(
            Method::POST,
            "/v1/answer",
            &[("authorization", &auth)],
            fresh(1).to_string(),
        )
        .await;
    assert_eq!(
        (refused.status, refused.code()),
        (429, "budget_exceeded"),
        "{}",
        refused.raw
    );
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("API key's") && message.contains("2026-12-01"),
        "{message}"
    );
    let retry: u64 = refused.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1, "{retry}");
    // The chat route is refused the same way.
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "Lost card?"}]});
    let refused = app
        .send(
            Method::POST,
            "/v1/chat/completions",
            &[("authorization", &auth)],
            chat.to_string(),
        )
        .await;
    assert_eq!(refused.status, 429, "{}", refused.raw);

    // The other key answers until the tenant's budget is spent.
    let mut last = 0;
    let mut answered = 0;
    loop {
        let auth = bearer(&free);
        let reply = app
            .send(
                Method::POST,
                "/v1/answer",
                &[("authorization", &auth)],
                fresh(10 + answered).to_string(),
            )
            .await;
        if reply.status == 429 {
            assert_eq!(reply.code(), "budget_exceeded");
            assert!(reply.raw.contains("tenant \\\"acme\\\"'s"), "{}", reply.raw);
            break;
        }
        assert_eq!(reply.status, 200, "{}", reply.raw);
        let done = Stream::parse(&reply.raw).first("done").clone();
        last = done["prompt_tokens"].as_u64().unwrap() + done["token_count"].as_u64().unwrap();
        answered += 1;
        assert!(answered < 200, "the tenant budget never tripped");
    }
    // Refused only once spent, and by no more than the last answer's overshoot.
    assert!(answered >= 1);
    let usage_now = usage(&app, &free, "?from=2026-11-01&to=2026-11-30").await;
    let used = usage_now.body["total"]["prompt_tokens"].as_u64().unwrap()
        + usage_now.body["total"]["completion_tokens"]
            .as_u64()
            .unwrap();
    assert!(
        used >= 1000 && used - last < 1000,
        "{used} used, {last} by the last answer admitted"
    );
    assert_eq!(usage_now.body["budgets"]["tenant"], 1000);
    // Another tenant is not limited by acme's budget.
    let theirs = ask(&app, &globex, &fresh(99)).await;
    assert_eq!(theirs.names().last(), Some(&"done"));

    // December: both budgets start again; November's usage is still there to read.
    offset.store(3, Ordering::SeqCst);
    let again = ask(&app, &capped, &fresh(100)).await;
    assert_eq!(again.names().last(), Some(&"done"));
    let again = ask(&app, &free, &fresh(101)).await;
    assert_eq!(again.names().last(), Some(&"done"));
    let november = usage(&app, &free, "?from=2026-11-01&to=2026-11-30").await;
    assert_eq!(november.body["total"], usage_now.body["total"]);
}

#[tokio::test]
async fn losing_the_usage_store_never_fails_an_answer_or_an_ingest() {
    // The meter's timeout shortened from its 2 s so that the store that never answers costs
    // this test little; what is asserted is relative to it.
    let timeout = std::time::Duration::from_millis(300);
    for hang in [false, true] {
        let kit = Kit::new(&[]);
        let mut settings = MeterSettings::from_config(&kit.parts.config.usage);
        settings.timeout = timeout;
        let app = kit.app_with(|server| {
            server.usage = Some(Arc::new(Meter::new(
                Arc::new(BrokenUsage { hang }),
                settings,
            )))
        });
        app.ingest("default").await;
        let started = std::time::Instant::now();
        let answer = app
            .answer(&json!({"query": "How long does a replacement card take?"}))
            .await;
        answer.assert_well_formed();
        assert_eq!(answer.names().last(), Some(&"done"), "hang={hang}");
        // A store that never answers delays the end of a stream by the write's timeout at most.
        assert!(started.elapsed() < timeout * 3, "hang={hang}");
        let reply = app.send(Method::GET, "/v1/usage", &[], "").await;
        assert_eq!(
            (reply.status, reply.code()),
            (503, "usage_unavailable"),
            "{}",
            reply.raw
        );
    }
}

#[tokio::test]
async fn bad_ranges_are_refused_with_what_is_wrong() {
    let app = Kit::new(&[]).app();
    for (query, says) in [
        ("?from=2026-13-01", "from must be a day"),
        ("?to=yesterday", "to must be a day"),
        ("?from=2026-12-02&to=2026-12-01", "is after"),
        ("?from=2024-01-01&to=2026-01-01", "longer than 366 days"),
        ("?keys=yes", "keys must be true or false"),
        ("?tenant=globex", "unknown query parameter"),
    ] {
        let reply = app
            .send(Method::GET, &format!("/v1/usage{query}"), &[], "")
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "invalid_range"),
            "{query}: {}",
            reply.raw
        );
        assert!(reply.raw.contains(says), "{query}: {}", reply.raw);
    }
    // A whole year is fine, and days without use are simply absent.
    let reply = app
        .send(
            Method::GET,
            "/v1/usage?from=2025-01-01&to=2025-12-31",
            &[],
            "",
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["days"], json!([]));
    assert_eq!(reply.body["total"]["answers"], 0);
}
