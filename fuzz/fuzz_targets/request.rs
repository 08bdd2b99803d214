//! Request parsing: the body of `POST /v1/answer` with its headers, the documents of
//! `POST /v1/documents` (JSON body or an uploaded file) and `traceparent`. Anything may be
//! refused; nothing may panic, and what is accepted must be within the documented limits.
#![no_main]

use std::sync::OnceLock;
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use sluice_contract::Tenant;
use sluice_contract::document::{MAX_ID_CHARS, validate};
use sluice_contract::stages::MAX_K;
use sluice_convert::parse_file;
use sluice_core::Config;
use sluice_core::config::AnswerConfig;
use sluice_http::answer::MAX_QUERY_CHARS;

fn config() -> &'static AnswerConfig {
    static CONFIG: OnceLock<AnswerConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        Config::from_lookup(|_| None)
            .expect("default configuration")
            .answer
    })
}

const FILES: [&str; 5] = ["a.json", "a.jsonl", "a.md", "a.txt", "a.xlsx"];

fuzz_target!(|data: &[u8]| {
    // Liveness, once: known-good inputs are accepted (a target that refused everything would
    // never reach its assertions).
    static LIVE: std::sync::Once = std::sync::Once::new();
    LIVE.call_once(|| {
        let tenant = Tenant::new("t").expect("a valid tenant");
        let headers = http::HeaderMap::new();
        let body = br#"{"query": "How long does a card take?", "k": 3}"#;
        let r = sluice_http::answer_request(config(), tenant, None, &headers, body, Instant::now(), None)
            .expect("a known-good answer request");
        assert_eq!((r.query.as_str(), r.k), ("How long does a card take?", 3));
        let documents = parse_file("a.md", b"# Title\nSome text.", &Default::default())
            .expect("a known-good file");
        validate(&documents).expect("valid documents");
    });
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    // Bit 7: the first line is a header (bit 6: cache-control, else traceparent), the body
    // the rest.
    let mut headers = http::HeaderMap::new();
    let mut body = rest;
    if selector & 0x80 != 0 {
        let (line, after) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &[][..]),
        };
        body = after;
        if let Ok(value) = http::HeaderValue::from_bytes(line) {
            let name = if selector & 0x40 != 0 {
                "cache-control"
            } else {
                "traceparent"
            };
            headers.insert(name, value);
        }
    }
    let rest = body;
    let selector = selector & 0x3f;
    match selector % 3 {
        0 => {
            if let Ok(r) = sluice_http::answer_request(
                config(),
                Tenant::new("t").expect("a valid tenant"),
                None,
                &headers,
                rest,
                Instant::now(),
                None,
            ) {
                assert!(!r.query.is_empty() && r.query.trim() == r.query);
                assert!(r.query.chars().count() <= MAX_QUERY_CHARS);
                assert!((1..=MAX_K).contains(&r.k));
                assert_eq!(r.trace.trace_id.len(), 32);
            }
        }
        1 => {
            let name = FILES[usize::from(selector / 3) % FILES.len()];
            if let Ok(documents) = parse_file(name, rest, &Default::default())
                && validate(&documents).is_ok()
            {
                for d in &documents {
                    assert!(!d.id.trim().is_empty() && d.id.chars().count() <= MAX_ID_CHARS);
                    let text = d.text.trim().is_empty();
                    assert!(!text || d.sections.iter().any(|s| !s.text.trim().is_empty()));
                }
            }
        }
        _ => {
            let header = std::str::from_utf8(rest).ok();
            let trace = sluice_core::trace::TraceContext::from_header(header);
            let out = trace.header();
            // What is sent on is always well-formed, whatever came in.
            let again = sluice_core::trace::TraceContext::from_header(Some(&out));
            assert_eq!(again.trace_id, trace.trace_id);
        }
    }
});
