use super::*;

fn with(vars: &[(&str, &str)]) -> Result<WireConfig, ConfigError> {
    WireConfig::from_lookup(&sluice_contract::settings::pairs(vars), Path::new("data"))
}

#[test]
fn bad_values_name_the_variable() {
    for (name, value) in [
        ("SLUICE_ADDR", "localhost"),
        ("SLUICE_DEFAULT_TENANT", "a b"),
        ("SLUICE_FETCH_ALLOW", "10.0.0.0/33"),
        ("SLUICE_BODY_READ_TIMEOUT_MS", "soon"),
    ] {
        let e = with(&[(name, value)]).unwrap_err();
        assert_eq!(e.name, name, "{name}={value}: {e}");
    }
    assert_eq!(with(&[]).unwrap().server.addr.to_string(), "127.0.0.1:8080");
}

#[test]
fn auth_and_limits_have_defaults_and_are_checked() {
    let c = with(&[]).unwrap();
    assert_eq!(c.auth.api_keys_file, None);
    assert_eq!(c.auth.settings_file, PathBuf::from("data/settings.json"));
    assert_eq!(
        (
            c.limits.tenant_rate,
            c.limits.tenant_burst,
            c.limits.tenant_max_streams
        ),
        (50.0, 100, 64)
    );
    let c = with(&[
        ("SLUICE_API_KEYS_FILE", "/etc/sluice/keys.json"),
        ("SLUICE_TENANT_RATE", "0.5"),
    ])
    .unwrap();
    assert_eq!(
        c.auth.api_keys_file,
        Some(PathBuf::from("/etc/sluice/keys.json"))
    );
    assert_eq!(c.limits.tenant_rate, 0.5);
    for (name, value) in [
        ("SLUICE_TENANT_RATE", "-1"),
        ("SLUICE_TENANT_RATE", "lots"),
        ("SLUICE_TENANT_BURST", "0"),
    ] {
        let e = with(&[(name, value)]).unwrap_err();
        assert_eq!(e.name, name, "{name}={value}: {e}");
    }
}

#[test]
fn the_local_server_guards_have_safe_defaults_and_are_checked() {
    let c = with(&[]).unwrap();
    assert_eq!(c.server.allowed_hosts, None);
    assert!(!c.server.allow_unauthenticated);
    assert_eq!(c.server.sse_keepalive, Duration::from_secs(5));
    let c = with(&[
        ("SLUICE_ALLOWED_HOSTS", " Sluice.Internal ,10.0.0.5,[::1]"),
        ("SLUICE_ALLOW_UNAUTHENTICATED", "true"),
        ("SLUICE_SSE_KEEPALIVE_MS", "0"),
    ])
    .unwrap();
    assert_eq!(
        c.server.allowed_hosts,
        Some(vec![
            "sluice.internal".into(),
            "10.0.0.5".into(),
            "[::1]".into()
        ])
    );
    assert!(c.server.allow_unauthenticated);
    assert_eq!(c.server.sse_keepalive, Duration::ZERO);
    assert_eq!(
        with(&[("SLUICE_ALLOWED_HOSTS", "*")])
            .unwrap()
            .server
            .allowed_hosts,
        Some(vec!["*".into()])
    );
    for (name, value) in [
        ("SLUICE_ALLOWED_HOSTS", "localhost:8080"),
        ("SLUICE_ALLOWED_HOSTS", "*,localhost"),
        ("SLUICE_ALLOWED_HOSTS", "http://x"),
        ("SLUICE_ALLOWED_HOSTS", ","),
        ("SLUICE_ALLOW_UNAUTHENTICATED", "yes"),
        ("SLUICE_SSE_KEEPALIVE_MS", "-1"),
    ] {
        let e = with(&[(name, value)]).unwrap_err();
        assert_eq!(e.name, name, "{name}={value}: {e}");
    }
}
