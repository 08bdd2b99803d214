//! Per-tenant limits: a request rate (token bucket) and a number of open answer streams.
//!
//! Both are counted in this process. `sluice serve` is one process, so they are the tenant's
//! limits; on Lambda each instance serves one request at a time, so they bound nothing there
//! (the README says what does: the function's reserved concurrency).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_contract::codes::Code;

/// Past this many tenants in the table, idle ones (full bucket, no stream) are forgotten.
const PRUNE_ABOVE: usize = sluice_contract::REMEMBERED_TENANTS;

/// A request refused by a limit: answered 429 with `Retry-After`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    /// `rate_limited` or `too_many_streams`.
    pub code: Code,
    /// What the limit is, for people.
    pub message: String,
    /// When a retry may succeed (whole seconds, at least 1, in the header).
    pub retry_after: Duration,
}

/// The limits, and what each tenant has used of them.
#[derive(Debug)]
pub struct Quotas {
    /// Requests per second refilled into each tenant's bucket; 0 = no rate limit.
    rate: f64,
    /// The bucket's size: requests a tenant may make at once after being idle.
    burst: f64,
    /// Open answer streams per tenant; 0 = no limit.
    max_streams: usize,
    tenants: Mutex<HashMap<String, Usage>>,
}

#[derive(Debug)]
struct Usage {
    tokens: f64,
    refilled: Instant,
    streams: usize,
}

/// An open stream's place in its tenant's quota, given back when dropped (the stream ended
/// or the client went away).
#[derive(Debug)]
pub struct StreamPermit {
    quotas: Arc<Quotas>,
    tenant: String,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut tenants = self.quotas.lock();
        if let Some(u) = tenants.get_mut(&self.tenant) {
            u.streams = u.streams.saturating_sub(1);
        }
    }
}

impl Quotas {
    /// `rate` requests per second with bursts of `burst`, and `max_streams` open streams, per
    /// tenant; 0 turns a limit off.
    pub fn new(rate: f64, burst: u32, max_streams: usize) -> Self {
        Self {
            rate: rate.max(0.0),
            burst: f64::from(burst.max(1)),
            max_streams,
            tenants: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Usage>> {
        // A panic while holding this lock leaves only counters behind: keep using them.
        self.tenants.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one request from `tenant`'s rate.
    pub fn request(&self, tenant: &str) -> Result<(), Limited> {
        let mut tenants = self.lock();
        self.take(&mut tenants, tenant, Instant::now())
    }

    /// Opens a stream in `tenant`'s quota (the request itself was counted against its rate
    /// by [`Quotas::request`] when it was admitted).
    pub fn stream(self: &Arc<Self>, tenant: &str) -> Result<StreamPermit, Limited> {
        let mut tenants = self.lock();
        let now = Instant::now();
        let open = tenants.get(tenant).map_or(0, |u| u.streams);
        if self.max_streams > 0 && open >= self.max_streams {
            return Err(Limited {
                code: Code::TooManyStreams,
                message: format!(
                    "tenant {tenant} has {open} answers streaming; the limit is {}",
                    self.max_streams
                ),
                // A stream's end cannot be known; a second is a fair first wait.
                retry_after: Duration::from_secs(1),
            });
        }
        self.prune(&mut tenants, tenant, now);
        tenants
            .entry(tenant.to_string())
            .or_insert_with(|| self.fresh(now))
            .streams += 1;
        Ok(StreamPermit {
            quotas: Arc::clone(self),
            tenant: tenant.to_string(),
        })
    }

    fn take(
        &self,
        tenants: &mut HashMap<String, Usage>,
        tenant: &str,
        now: Instant,
    ) -> Result<(), Limited> {
        self.prune(tenants, tenant, now);
        let usage = tenants
            .entry(tenant.to_string())
            .or_insert_with(|| self.fresh(now));
        if self.rate == 0.0 {
            return Ok(());
        }
        let tokens = self.refill(usage, now);
        usage.tokens = tokens;
        usage.refilled = now;
        if tokens >= 1.0 {
            usage.tokens -= 1.0;
            return Ok(());
        }
        let wait = (1.0 - tokens) / self.rate;
        Err(Limited {
            code: Code::RateLimited,
            message: format!(
                "tenant {tenant} is over its rate of {} requests per second (bursts of {})",
                self.rate, self.burst
            ),
            retry_after: Duration::from_secs_f64(wait.ceil().max(1.0)),
        })
    }

    /// A tenant's usage before its first request: a full bucket, no stream.
    fn fresh(&self, now: Instant) -> Usage {
        Usage {
            tokens: self.burst,
            refilled: now,
            streams: 0,
        }
    }

    /// Before `tenant` is added to a full table, forgets the idle tenants (a full bucket and
    /// no stream): the table is as big as the tenants active lately, whatever names come in.
    fn prune(&self, tenants: &mut HashMap<String, Usage>, tenant: &str, now: Instant) {
        if tenants.len() > PRUNE_ABOVE && !tenants.contains_key(tenant) {
            tenants.retain(|_, u| u.streams > 0 || self.refill(u, now) < self.burst);
        }
    }

    /// `usage`'s tokens as of `now`.
    fn refill(&self, usage: &Usage, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(usage.refilled).as_secs_f64();
        (usage.tokens + elapsed * self.rate).min(self.burst)
    }

    /// `tenant`'s open streams.
    pub fn open_streams(&self, tenant: &str) -> usize {
        self.lock().get(tenant).map_or(0, |u| u.streams)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_allowed_then_the_rate_holds_and_tenants_are_apart() {
        let q = Quotas::new(2.0, 3, 0);
        for _ in 0..3 {
            q.request("acme").unwrap();
        }
        let e = q.request("acme").unwrap_err();
        assert_eq!(e.code, Code::RateLimited);
        assert_eq!(e.retry_after, Duration::from_secs(1));
        // Another tenant has its own bucket.
        q.request("globex").unwrap();
        // Half a second refills one request at 2/s.
        std::thread::sleep(Duration::from_millis(550));
        q.request("acme").unwrap();
        assert!(q.request("acme").is_err());
    }

    #[test]
    fn streams_are_counted_until_their_permit_drops() {
        let q = Arc::new(Quotas::new(0.0, 1, 2));
        let a = q.stream("acme").unwrap();
        let b = q.stream("acme").unwrap();
        let e = q.stream("acme").unwrap_err();
        assert_eq!(
            (e.code, e.retry_after),
            (Code::TooManyStreams, Duration::from_secs(1))
        );
        assert_eq!(q.open_streams("acme"), 2);
        let _other = q.stream("globex").unwrap();
        drop(a);
        assert_eq!(q.open_streams("acme"), 1);
        let _c = q.stream("acme").unwrap();
        drop(b);
        assert_eq!(q.open_streams("acme"), 1);
    }

    #[test]
    fn opening_a_stream_takes_nothing_from_the_rate() {
        // The request was counted when it was admitted; its stream is not a second request.
        let q = Arc::new(Quotas::new(1.0, 1, 5));
        q.request("acme").unwrap();
        let _a = q.stream("acme").unwrap();
        let _b = q.stream("acme").unwrap();
        assert_eq!(q.open_streams("acme"), 2);
        assert_eq!(q.request("acme").unwrap_err().code, Code::RateLimited);
    }

    #[test]
    fn zero_turns_limits_off_and_idle_tenants_are_forgotten() {
        let q = Arc::new(Quotas::new(0.0, 1, 0));
        let permits: Vec<_> = (0..100).map(|_| q.stream("acme").unwrap()).collect();
        assert_eq!(q.open_streams("acme"), 100);
        drop(permits);
        assert_eq!(q.open_streams("acme"), 0);
        let busy = q.stream("busy").unwrap();
        for i in 0..=PRUNE_ABOVE + 1 {
            q.request(&format!("t{i}")).unwrap();
        }
        // Past the bound the idle tenants went; the one with an open stream stayed.
        assert!(q.lock().len() < 10, "{}", q.lock().len());
        assert_eq!(q.open_streams("busy"), 1);
        drop(busy);
        assert_eq!(q.open_streams("busy"), 0);
    }
}
