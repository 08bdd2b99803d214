//! The contexts a component declares for its upload check: a custom section of the component
//! (`sluice:contexts`, a JSON array of `rerank_context` objects) that `sluice component build`
//! writes from the crate's `[package.metadata.sluice] contexts`. The upload's smoke run runs
//! once under each of them besides its own (`{"plan": "smoke"}`), so that a rule that fails
//! only for one kind of caller is refused at upload, not found by live traffic.

use sluice_contract::stages::RerankContext;
use wasmparser::{Parser, Payload};

use crate::UploadError;

/// The custom section's name.
pub const SECTION: &str = "sluice:contexts";

/// Most contexts a component may declare (each is a smoke run at upload).
pub const MAX_CONTEXTS: usize = 16;

/// The component `bytes` with `contexts` declared: a custom section appended at its top level
/// (a component's sections may come in any order; a custom one changes nothing it runs).
pub fn declare(bytes: &[u8], contexts: &[serde_json::Value]) -> Result<Vec<u8>, String> {
    check(contexts)?;
    let payload = serde_json::to_vec(contexts).map_err(|e| e.to_string())?;
    let mut section = Vec::new();
    leb128(&mut section, SECTION.len());
    section.extend_from_slice(SECTION.as_bytes());
    section.extend_from_slice(&payload);
    let mut out = bytes.to_vec();
    out.push(0); // the custom section's id
    leb128(&mut out, section.len());
    out.extend_from_slice(&section);
    Ok(out)
}

/// The contexts the component `binary` declares (none when it has no such section).
pub(crate) fn declared(binary: &[u8]) -> Result<Vec<RerankContext>, UploadError> {
    let bad = |why: String| UploadError::NotAComponent(format!("its {SECTION} section: {why}"));
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(binary) {
        match payload.map_err(|e| UploadError::NotAComponent(format!("{e:#}")))? {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::CustomSection(c) if depth == 0 && c.name() == SECTION => {
                let values: Vec<serde_json::Value> =
                    serde_json::from_slice(c.data()).map_err(|e| bad(e.to_string()))?;
                check(&values).map_err(bad)?;
                return Ok(values
                    .iter()
                    .filter_map(|v| RerankContext::parse(v).ok())
                    .collect());
            }
            _ => {}
        }
    }
    Ok(Vec::new())
}

/// At most [`MAX_CONTEXTS`], each a valid `rerank_context`.
fn check(contexts: &[serde_json::Value]) -> Result<(), String> {
    if contexts.len() > MAX_CONTEXTS {
        return Err(format!(
            "{} contexts; at most {MAX_CONTEXTS} may be declared",
            contexts.len()
        ));
    }
    for (i, c) in contexts.iter().enumerate() {
        RerankContext::parse(c).map_err(|e| format!("context {}: {e}", i + 1))?;
    }
    Ok(())
}

fn leb128(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}
