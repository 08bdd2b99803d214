//! The upstream stream parser: bytes from the LLM, cut into network reads at places the
//! input chooses, through the event-size cap (`sluice_llm::capped`), the SSE framing
//! (eventsource-stream) and the OpenAI chunk parser (`sluice_llm::ChunkParser`). Anything may
//! be an error; nothing may panic, no token is empty, no event passes the cap, and a stream
//! that ends is either a finish or an error, never a silent truncation.
#![no_main]

use eventsource_stream::Eventsource;
use futures::StreamExt;
use libfuzzer_sys::fuzz_target;
use sluice_contract::stages::LlmEvent;
use sluice_llm::ChunkParser;

fuzz_target!(|data: &[u8]| {
    // Liveness, once: a known-good stream gives its token and its finish.
    static LIVE: std::sync::Once = std::sync::Once::new();
    LIVE.call_once(|| {
        let mut parser = ChunkParser::default();
        let token = parser
            .data(r#"{"choices": [{"delta": {"content": "Hi"}}]}"#)
            .expect("a known-good chunk");
        assert_eq!(token, Some(vec!["Hi".to_string()]));
        let last = r#"{"choices": [{"delta": {}, "finish_reason": "stop"}]}"#;
        parser.data(last).expect("a known-good finish");
        assert_eq!(parser.data("[DONE]").expect("the end"), None);
        assert!(matches!(parser.finish(), Ok(LlmEvent::Finish { .. })));
    });
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let step = usize::from(cut).max(1);
    let reads: Vec<Result<Vec<u8>, std::io::Error>> =
        body.chunks(step).map(|c| Ok(c.to_vec())).collect();
    futures::executor::block_on(async {
        let mut events = sluice_llm::capped(futures::stream::iter(reads)).eventsource();
        let mut parser = ChunkParser::default();
        while let Some(event) = events.next().await {
            let Ok(event) = event else { return };
            assert!(event.data.len() <= sluice_llm::MAX_EVENT_BYTES);
            match parser.data(&event.data) {
                Err(_) => return,
                Ok(None) => break,
                Ok(Some(tokens)) => assert!(tokens.iter().all(|t| !t.is_empty())),
            }
        }
        if let Ok(event) = parser.finish() {
            assert!(matches!(event, LlmEvent::Finish { .. }));
        }
    });
});
