//! How the stages meet time: a read bounded by the deadline, a read driven beside a stage,
//! and a stream that ends with an `error` when it must stop.

use std::future::Future;
use std::time::Duration;

use futures::future::maybe_done;
use futures::{Stream, StreamExt};
use tokio::time::Instant as Deadline;

use sluice_contract::codes::Code;
use sluice_contract::sse::{ErrorEvent, Event};

/// `work` unless `deadline` passes first (`None`; the work is dropped). A future that is
/// ready at once answers even past the deadline: what is in memory is never refused.
pub(super) async fn bounded<T>(deadline: Deadline, work: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout_at(deadline, work).await.ok()
}

/// Awaits `main` while driving `side` too: reads that run beside a stage and are awaited
/// later. `side` is not polled again once it is done.
pub(super) async fn beside<T>(main: impl Future<Output = T>, side: impl Future) -> T {
    let mut main = std::pin::pin!(main);
    let mut side = std::pin::pin!(maybe_done(side));
    std::future::poll_fn(|cx| {
        let _ = side.as_mut().poll(cx);
        main.as_mut().poll(cx)
    })
    .await
}

/// `events` until `stop` resolves; a stream that has not ended by then gets `stop`'s closing
/// `error` instead of being cut off with no ending, and the rest of it (the upstream LLM
/// request) is dropped.
pub(super) fn until(
    events: impl Stream<Item = Event> + Send + 'static,
    stop: impl Future<Output = ErrorEvent> + Send + 'static,
) -> impl Stream<Item = Event> + Send + 'static {
    async_stream::stream! {
        let mut events = std::pin::pin!(events);
        let mut stop = std::pin::pin!(stop);
        // After its closing event a stream may still finish work (the cache write): it is
        // polled to its end, and nothing more is sent.
        let mut ended = false;
        loop {
            let next = tokio::select! {
                biased;
                closing = &mut stop, if !ended => Err(closing),
                event = events.next() => Ok(event),
            };
            match next {
                Ok(Some(event)) => {
                    ended |= matches!(event, Event::Done(_) | Event::Error(_));
                    yield event;
                }
                Ok(None) => break,
                Err(closing) => {
                    yield Event::Error(closing);
                    break;
                }
            }
        }
    }
}

/// Resolves when an open answer must end now: with its closing `error` (the server's
/// drain time is up, or the entry point's time).
pub(super) fn stop(
    drained: &tokio::sync::watch::Sender<bool>,
    ends_by: Option<Deadline>,
) -> impl Future<Output = ErrorEvent> + Send + 'static {
    let mut draining = drained.subscribe();
    async move {
        let drained = async move {
            let _ = draining.wait_for(|over| *over).await;
            ErrorEvent::new(Code::ShuttingDown, "the server is shutting down; ask again")
        };
        let Some(at) = ends_by else {
            return drained.await;
        };
        tokio::select! {
            e = drained => e,
            () = tokio::time::sleep_until(at) => ErrorEvent::new(
                Code::DeadlineExceeded,
                "the function's time limit was reached before the answer ended",
            ),
        }
    }
}

/// `events`, polled inside `span`, so that every log line of the answer carries its fields.
pub(super) fn in_span<S: Stream<Item = Event> + Send + 'static>(
    span: tracing::Span,
    events: S,
) -> impl Stream<Item = Event> + Send + 'static {
    let mut events = Box::pin(events);
    futures::stream::poll_fn(move |cx| span.in_scope(|| events.as_mut().poll_next(cx)))
}

/// Adds `d` to a timing that may not have started yet.
pub(super) fn add_ms(slot: &mut Option<f64>, d: Duration) {
    *slot = Some(slot.unwrap_or(0.0) + ms(d));
}

/// A duration in milliseconds, to the microsecond.
pub(super) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use futures::future::FutureExt;

    use super::*;
    use crate::pipeline::scope::{COMPONENT_READ, Read, ScopeRead, VERSION_READ, output, take};
    use sluice_contract::sse::Token;
    use sluice_contract::{codes::Code, codes::Degraded};

    fn token(index: u64) -> Event {
        Event::Token(Token {
            text: "t".into(),
            index,
        })
    }

    fn names(events: &[Event]) -> Vec<&'static str> {
        events.iter().map(Event::name).collect()
    }

    #[tokio::test]
    async fn a_stream_still_running_when_it_must_stop_ends_with_the_stops_error() {
        // Two tokens, then an upstream that never answers again; the stop comes once both
        // tokens are out (ordered by the event, not by time).
        let (fire, fired) = tokio::sync::oneshot::channel();
        let silence = futures::stream::once(async move {
            let _ = fire.send(());
            futures::future::pending::<Event>().await
        });
        let events = futures::stream::iter([token(0), token(1)]).chain(silence);
        let stop = async move {
            let _ = fired.await;
            ErrorEvent::new(Code::DeadlineExceeded, "time is up")
        };
        let out: Vec<Event> = until(events, stop).collect().await;
        assert_eq!(names(&out), ["token", "token", "error"]);
        match &out[2] {
            Event::Error(e) => {
                assert_eq!(e.code, Code::DeadlineExceeded);
                assert!(e.retryable);
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_stream_that_ended_gets_nothing_added_and_is_polled_to_its_end() {
        let closing_event = Event::Error(ErrorEvent::new(Code::LlmUnavailable, "x"));
        // After its closing event the stream still has work to finish (as the cache write),
        // during which the stop comes: the work finishes and no second ending is sent.
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&finished);
        let (fire, fired) = tokio::sync::oneshot::channel();
        let events = futures::stream::iter([token(0), closing_event]).chain(
            futures::stream::once(async move {
                // The stop is ready from here on; the work goes on past it.
                let _ = fire.send(());
                tokio::task::yield_now().await;
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                None
            })
            .filter_map(futures::future::ready),
        );
        let stop = async move {
            let _ = fired.await;
            ErrorEvent::new(Code::ShuttingDown, "bye")
        };
        let out: Vec<Event> = until(events, stop).collect().await;
        assert_eq!(names(&out), ["token", "error"]);
        if let Event::Error(e) = &out[1] {
            assert_eq!(e.code, Code::LlmUnavailable, "the stream's own ending kept");
        }
        assert!(finished.load(std::sync::atomic::Ordering::SeqCst));
    }

    /// Time is what is tested here: a read that is not ready by its deadline is given up.
    #[tokio::test]
    async fn a_late_read_is_abandoned_and_a_ready_one_answers_even_past_the_deadline() {
        let past = Deadline::now() - Duration::from_millis(1);
        assert_eq!(bounded(past, async { 7 }).await, Some(7));
        let soon = Deadline::now() + Duration::from_millis(20);
        let started = Instant::now();
        let late = bounded(soon, tokio::time::sleep(Duration::from_secs(5))).await;
        assert_eq!(late, None);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn beside_drives_the_side_read_while_the_main_one_runs() {
        // The main read can end only once the side read has run: driven beside it.
        let (ran, side_ran) = tokio::sync::oneshot::channel();
        let mut side = maybe_done(
            async move {
                let _ = ran.send(());
                Read::Got(3)
            }
            .boxed(),
        );
        let main = async move {
            let _ = side_ran.await;
            1
        };
        assert_eq!(beside(main, &mut side).await, 1);
        let mut reasons = Vec::new();
        assert!(matches!(output(&mut side), Some(Read::Got(3))));
        assert_eq!(take(&mut side, VERSION_READ, &mut reasons), Some(3));
        assert!(reasons.is_empty());
        let mut late: ScopeRead<u64> = maybe_done(async { Read::Late }.boxed());
        (&mut late).await;
        assert_eq!(take(&mut late, COMPONENT_READ, &mut reasons), None);
        assert_eq!(reasons, [Degraded::ComponentTimeout]);
    }
}
