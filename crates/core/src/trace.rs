//! W3C Trace Context (`traceparent`), so that an answer's LLM call joins the caller's trace.
//!
//! A request that arrives with a valid `traceparent` keeps its trace id; Sluice is a new span
//! in it (a new parent id). One without (or with an invalid one, which the specification says
//! to ignore) starts a new trace. The header sent to the LLM is
//! `00-<trace id>-<Sluice's span id>-<flags>`; the trace id is in `meta` and in every log line
//! of the answer, so the three (client, Sluice, vLLM) can be joined.

/// One request's trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lowercase hex digits, not all zero.
    pub trace_id: String,
    /// This request's span id: 16 lowercase hex digits, not all zero.
    pub span_id: String,
    /// Trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceContext {
    /// The context of a request that sent `traceparent` (or none): a child span of the
    /// caller's when the header is valid, else the root of a new, sampled trace.
    pub fn from_header(traceparent: Option<&str>) -> Self {
        let span_id = random_hex(16);
        match traceparent.and_then(parse) {
            Some((trace_id, flags)) => Self {
                trace_id,
                span_id,
                flags,
            },
            None => Self {
                trace_id: random_hex(32),
                span_id,
                flags: 1,
            },
        }
    }

    /// The `traceparent` value for calls made on this request's behalf.
    pub fn header(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, self.span_id, self.flags)
    }
}

/// The `traceparent` that continues an AWS X-Ray trace header, such as the one Lambda gives
/// each invocation (`Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`):
/// the root's two hex parts, joined, are the W3C trace id (how X-Ray itself maps the two),
/// `Parent` the parent id and `Sampled=0` an unsampled flag. `None` without a valid root.
/// On Lambda Managed Instances the runtime does not set `_X_AMZN_TRACE_ID` (one process
/// serves many invocations at once), so the header is read per invocation, from its context.
pub fn traceparent_from_xray(header: &str) -> Option<String> {
    let field = |name: &str| {
        header
            .split(';')
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    };
    let mut root = field("Root")?.split('-');
    let (version, time, id) = (root.next()?, root.next()?, root.next()?);
    if version != "1" || root.next().is_some() || time.len() != 8 || id.len() != 24 {
        return None;
    }
    let parent = field("Parent").map_or_else(|| random_hex(16), str::to_string);
    let flags = if field("Sampled") == Some("0") { 0 } else { 1 };
    let header = format!("00-{time}{id}-{parent}-{flags:02x}");
    // The same rules as a caller's header (hex, lowercase, not all zero).
    parse(&header).map(|_| header)
}

/// `(trace id, flags)` of a valid version-00 `traceparent`. Later versions are read by their
/// first four fields, as the specification asks.
fn parse(value: &str) -> Option<(String, u8)> {
    let mut parts = value.trim().split('-');
    let (version, trace_id, parent_id, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    let valid = hex(version, 2)
        && version != "ff"
        && (version != "00" || parts.next().is_none())
        && hex(trace_id, 32)
        && !zero(trace_id)
        && hex(parent_id, 16)
        && !zero(parent_id)
        && hex(flags, 2);
    if !valid {
        return None;
    }
    Some((trace_id.to_string(), u8::from_str_radix(flags, 16).ok()?))
}

/// `len` random lowercase hex digits (from v4 UUIDs: 122 random bits each), never all zero.
fn random_hex(len: usize) -> String {
    loop {
        let mut out = String::with_capacity(len + 32);
        while out.len() < len {
            out.push_str(&uuid::Uuid::new_v4().simple().to_string());
        }
        out.truncate(len);
        if out.bytes().any(|b| b != b'0') {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_header_keeps_the_trace_and_gets_a_new_span() {
        let t = TraceContext::from_header(Some(CALLER));
        assert_eq!(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_ne!(t.span_id, "00f067aa0ba902b7");
        assert_eq!(t.flags, 1);
        let header = t.header();
        assert!(header.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
        assert!(parse(&header).is_some(), "{header}");
        // Not sampled by the caller: not sampled here either.
        let t = TraceContext::from_header(Some(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        ));
        assert!(t.header().ends_with("-00"));
    }

    #[test]
    fn invalid_headers_start_a_new_trace() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            let t = TraceContext::from_header(Some(bad));
            assert_ne!(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736", "{bad:?}");
            assert!(parse(&t.header()).is_some(), "{bad:?} → {}", t.header());
        }
        // A future version may add fields after the flags.
        let t = TraceContext::from_header(Some(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more",
        ));
        assert_eq!(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn an_xray_header_becomes_the_same_trace() {
        let xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
        let header = traceparent_from_xray(xray).unwrap();
        assert_eq!(
            header,
            "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"
        );
        let t = TraceContext::from_header(Some(&header));
        assert_eq!(t.trace_id, "5759e988bd862e3fe1be46a994272793");
        // Fields in any order; unsampled stays unsampled; no parent is still a trace.
        let header = traceparent_from_xray(
            "Sampled=0;Root=1-5759e988-bd862e3fe1be46a994272793;Lineage=a87bd80c:1",
        )
        .unwrap();
        assert!(header.starts_with("00-5759e988bd862e3fe1be46a994272793-"));
        assert!(header.ends_with("-00"), "{header}");
        for bad in [
            "",
            "Parent=53995c3f42cd8ad8",
            "Root=2-5759e988-bd862e3fe1be46a994272793",
            "Root=1-5759e98-bd862e3fe1be46a994272793",
            "Root=1-5759e988-BD862E3FE1BE46A994272793",
            "Root=1-5759e988-bd862e3fe1be46a994272793-x",
            "Root=1-00000000-000000000000000000000000",
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=zz",
        ] {
            assert_eq!(traceparent_from_xray(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn new_traces_differ() {
        let (a, b) = (
            TraceContext::from_header(None),
            TraceContext::from_header(None),
        );
        assert_ne!(a.trace_id, b.trace_id);
        assert_eq!((a.trace_id.len(), a.span_id.len()), (32, 16));
    }
}
