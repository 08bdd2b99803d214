//! The rerank sandbox's section of the configuration, read and checked by its owner.

use std::time::Duration;

use sluice_contract::settings::{ConfigError, millis, ranged};
use sluice_contract::stages::MAX_K;

/// The limits every tenant's rerank component runs under.
#[derive(Debug, Clone)]
pub struct RerankConfig {
    /// `SLUICE_RERANK_MEMORY_MB`: linear memory a rerank component may use.
    pub memory_mb: usize,
    /// `SLUICE_RERANK_FUEL`: instructions a rerank call may execute.
    pub fuel: u64,
    /// `SLUICE_RERANK_DEADLINE_MS`: wall-clock budget of a rerank call.
    pub deadline: Duration,
    /// `SLUICE_RERANK_MAX_CANDIDATES`: most candidates passed to a component.
    pub max_candidates: usize,
    /// `SLUICE_RERANK_MAX_TEXT_BYTES`: candidate text is cut to this many bytes.
    pub max_text_bytes: usize,
    /// `SLUICE_COMPONENT_REFRESH_MS`: how long a process trusts the active component it
    /// knows before reading the pointer again (another process may have activated one).
    pub refresh: Duration,
    /// `SLUICE_COMPONENT_MAX_COMPILE_WORK`: what an upload's code may ask of the compiler
    /// ([`crate::Complexity::max_work`]); the default keeps any upload near 2 s of CPU.
    pub max_compile_work: u64,
}

impl RerankConfig {
    /// Reads the section through `get` (the environment, or a map in tests).
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Ok(RerankConfig {
            memory_mb: ranged(get, "SLUICE_RERANK_MEMORY_MB", 16, 1, 1024)?,
            fuel: ranged(get, "SLUICE_RERANK_FUEL", 50_000_000, 10_000, 1 << 40)? as u64,
            deadline: millis(get, "SLUICE_RERANK_DEADLINE_MS", 5, 1)?,
            max_candidates: ranged(get, "SLUICE_RERANK_MAX_CANDIDATES", 200, MAX_K, 10_000)?,
            max_text_bytes: ranged(get, "SLUICE_RERANK_MAX_TEXT_BYTES", 8192, 64, 1 << 20)?,
            refresh: millis(get, "SLUICE_COMPONENT_REFRESH_MS", 5000, 0)?,
            max_compile_work: ranged(
                get,
                "SLUICE_COMPONENT_MAX_COMPILE_WORK",
                crate::Complexity::default().max_work as usize,
                1_000,
                100_000_000,
            )? as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<RerankConfig, ConfigError> {
        RerankConfig::from_lookup(&sluice_contract::settings::pairs(vars))
    }

    #[test]
    fn limits_have_defaults_and_are_checked() {
        let c = with(&[]).unwrap();
        assert_eq!(c.refresh, Duration::from_secs(5));
        assert_eq!(c.deadline, Duration::from_millis(5));
        assert_eq!(c.max_candidates, 200);
        // A component is given at least as many candidates as a request may ask sources.
        let e = with(&[("SLUICE_RERANK_MAX_CANDIDATES", "10")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_RERANK_MAX_CANDIDATES");
        let e = with(&[("SLUICE_RERANK_FUEL", "lots")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_RERANK_FUEL");
    }
}
