use super::*;
use std::path::Path;

fn with(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_lookup(sluice_contract::settings::pairs(vars))
}

#[test]
fn defaults_apply_when_nothing_is_set() {
    let c = with(&[("HOME", "/home/u")]).unwrap();
    assert_eq!(c.home, PathBuf::from("/home/u/.cache/sluice"));
    assert_eq!(
        c.cache.lexicon,
        Some(PathBuf::from(
            "/home/u/.cache/sluice/models/all-MiniLM-L6-v2/lexicon.txt"
        ))
    );
    assert_eq!(c.answer.retrieval_deadline, Duration::from_millis(200));
    assert_eq!(c.answer.top_k, 5);
}

#[test]
fn values_are_read() {
    let c = with(&[
        ("SLUICE_RETRIEVAL_DEADLINE_MS", "0"),
        ("SLUICE_TOP_K", "12"),
    ])
    .unwrap();
    assert_eq!(c.answer.retrieval_deadline, Duration::ZERO);
    assert_eq!(c.answer.top_k, 12);
}

#[test]
fn bad_values_name_the_variable_and_the_expectation() {
    let e = with(&[("SLUICE_TOP_K", "0")]).unwrap_err();
    assert_eq!(e.name, "SLUICE_TOP_K");
    assert!(e.to_string().contains("from 1 to 50"), "{e}");
    let e = with(&[("SLUICE_RETRIEVAL_DEADLINE_MS", "soon")]).unwrap_err();
    assert_eq!(e.name, "SLUICE_RETRIEVAL_DEADLINE_MS");
    let e = with(&[
        ("SLUICE_CHUNK_TOKENS", "64"),
        ("SLUICE_CHUNK_OVERLAP_TOKENS", "40"),
    ])
    .unwrap_err();
    assert_eq!(e.name, "SLUICE_CHUNK_OVERLAP_TOKENS");
    let e = with(&[("SLUICE_CONTEXT_HEADER", "on")]).unwrap_err();
    assert_eq!(e.name, "SLUICE_CONTEXT_HEADER");
    assert!(
        !with(&[("SLUICE_CONTEXT_HEADER", "false")])
            .unwrap()
            .ingest
            .context_header
    );
    let e = with(&[("SLUICE_PACK_SECTIONS", "1")]).unwrap_err();
    assert_eq!(e.name, "SLUICE_PACK_SECTIONS");
}

#[test]
fn ingest_limits_have_defaults_and_are_checked() {
    let c = with(&[]).unwrap();
    assert_eq!(
        (c.ingest.max_documents, c.ingest.max_chunks),
        (1000, 20_000)
    );
    for (name, value) in [("SLUICE_MAX_DOCUMENTS", "0"), ("SLUICE_MAX_CHUNKS", "x")] {
        let e = with(&[(name, value)]).unwrap_err();
        assert_eq!(e.name, name, "{name}={value}: {e}");
    }
}

#[test]
fn usage_is_counted_in_a_file_by_default_and_budgets_are_checked() {
    let c = with(&[("SLUICE_DATA_DIR", "/srv/sluice")]).unwrap();
    assert_eq!(c.usage.backend, UsageBackend::File);
    assert_eq!(c.usage.file, PathBuf::from("/srv/sluice/usage.json"));
    assert!(c.usage.tenant_budgets.is_empty());
    assert_eq!(c.usage.refresh, Duration::from_secs(10));
    let c = with(&[
        ("SLUICE_USAGE", "dynamodb"),
        ("SLUICE_TENANT_TOKEN_BUDGETS", " acme=5000000, globex=1 "),
    ])
    .unwrap();
    assert_eq!(c.usage.backend, UsageBackend::Dynamodb);
    assert_eq!(
        c.usage.tenant_budgets[&Tenant::new("acme").unwrap()],
        5_000_000
    );
    assert_eq!(c.usage.tenant_budgets.len(), 2);
    for (name, value, says) in [
        ("SLUICE_USAGE", "redis", "file, dynamodb or off"),
        ("SLUICE_TENANT_TOKEN_BUDGETS", "acme=0", "acme's budget"),
        ("SLUICE_TENANT_TOKEN_BUDGETS", "acme=lots", "whole number"),
        ("SLUICE_TENANT_TOKEN_BUDGETS", "acme", "has no '='"),
        ("SLUICE_USAGE_REFRESH_MS", "-5", "whole number"),
    ] {
        let e = with(&[(name, value)]).unwrap_err();
        assert_eq!(e.name, name, "{name}={value}: {e}");
        assert!(e.to_string().contains(says), "{name}={value}: {e}");
    }
}

#[test]
fn cache_settings_are_validated() {
    let c = with(&[]).unwrap();
    assert_eq!(c.cache.backend, CacheBackend::Memory);
    assert_eq!(c.cache.threshold, 0.9);
    assert_eq!(c.cache.ttl, Duration::from_secs(86_400));
    // The guard's lexicon sits beside the model unless named, or is off.
    let c = with(&[("SLUICE_MODEL_DIR", "/opt/model")]).unwrap();
    assert_eq!(
        c.cache.lexicon.as_deref(),
        Some(Path::new("/opt/model/lexicon.txt"))
    );
    let c = with(&[("SLUICE_CACHE_LEXICON", "/x/words.txt")]).unwrap();
    assert_eq!(c.cache.lexicon.as_deref(), Some(Path::new("/x/words.txt")));
    assert_eq!(
        with(&[("SLUICE_CACHE_LEXICON", "none")])
            .unwrap()
            .cache
            .lexicon,
        None
    );
    // Learning thresholds: off by default, rates per tenant, a bound.
    assert!(c.cache.explore.is_empty() && c.cache.error_bound == 0.01);
    let c = with(&[
        ("SLUICE_CACHE_EXPLORE", "acme=0.05"),
        ("SLUICE_CACHE_ERROR_BOUND", "0.02"),
    ])
    .unwrap();
    assert_eq!(c.cache.explore.get("acme"), Some(&0.05));
    assert_eq!(c.cache.error_bound, 0.02);
    for (name, bad) in [
        ("SLUICE_CACHE_EXPLORE", "acme=0"),
        ("SLUICE_CACHE_EXPLORE", "acme=1.5"),
        ("SLUICE_CACHE_EXPLORE", "acme"),
        ("SLUICE_CACHE_ERROR_BOUND", "0"),
        ("SLUICE_CACHE_ERROR_BOUND", "one percent"),
    ] {
        assert_eq!(with(&[(name, bad)]).unwrap_err().name, name, "{bad}");
    }
    let c = with(&[
        ("SLUICE_CACHE", "dynamodb"),
        ("SLUICE_CACHE_TENANT_THRESHOLDS", " acme=0.97, globex=0.9 "),
    ])
    .unwrap();
    assert_eq!(c.cache.backend, CacheBackend::Dynamodb);
    assert_eq!(c.cache.tenant_thresholds.get("acme"), Some(&0.97));
    assert_eq!(c.cache.tenant_thresholds.get("globex"), Some(&0.9));
    for (name, value) in [
        ("SLUICE_CACHE", "redis"),
        ("SLUICE_CACHE_THRESHOLD", "0.5"),
        ("SLUICE_CACHE_THRESHOLD", "high"),
        ("SLUICE_CACHE_TENANT_THRESHOLDS", "acme"),
        ("SLUICE_CACHE_TENANT_THRESHOLDS", "acme=1.5"),
        ("SLUICE_CACHE_TENANT_THRESHOLDS", "a b=0.9"),
        ("SLUICE_CACHE_BUDGET_MS", "0"),
    ] {
        let e = with(&[(name, value)]).unwrap_err();
        assert_eq!(e.name, name, "{name}={value}: {e}");
    }
}

#[test]
fn fusion_settings_are_read_per_tenant_and_validated() {
    use sluice_contract::fusion::Fusion;
    let c = with(&[]).unwrap();
    assert_eq!(c.answer.fusion.default, Fusion::default());
    assert!(c.answer.fusion.tenants.is_empty());
    let c = with(&[
        ("SLUICE_FUSION", "rrf:k=20:bm25=0.5"),
        ("SLUICE_FUSION_TENANTS", "acme=convex:dense=0.8"),
    ])
    .unwrap();
    let t = |n: &str| Tenant::new(n).unwrap();
    let rrf = Fusion::Rrf {
        k: 20,
        dense: 1.0,
        bm25: 0.5,
    };
    assert_eq!(c.answer.fusion.for_tenant(&t("globex")), rrf);
    assert_eq!(
        c.answer.fusion.for_tenant(&t("acme")),
        Fusion::Convex { dense: 0.8 }
    );
    for (name, value, says) in [
        ("SLUICE_FUSION", "dbsf", "unknown method"),
        ("SLUICE_FUSION", "rrf:k=0", "k=0"),
        ("SLUICE_FUSION_TENANTS", "acme", "tenant=fusion"),
        ("SLUICE_FUSION_TENANTS", "acme=convex:dense=2", "dense=2"),
    ] {
        let e = with(&[(name, value)]).unwrap_err();
        assert_eq!(e.name, name, "{name}={value}: {e}");
        assert!(e.to_string().contains(says), "{name}={value}: {e}");
    }
}
