//! The build's promises: every cargo invocation in the repository — `make check`, `make
//! test`, an editor, a plain `cargo build` — compiles the workspace through clippy's driver with
//! every warning denied (`.cargo/config.toml` and `[workspace.lints]`), so no build drops the
//! lints `.ci/run` promises; `make check` runs every test target that needs no service; and
//! `make demo`'s build and `make test`'s resolve every library with the same features, so that
//! they share one compile.

use std::process::Command;

/// Every package of the graph of `packages` (`--workspace`, or `-p NAME`) with its features,
/// as `cargo tree` resolves them for Linux with the dependency kinds `edges`: `name version
/// [features]` lines.
fn resolved_features(packages: &[&str], edges: &str) -> std::collections::BTreeSet<String> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["tree", "--offline", "--prefix", "none"])
        .args(packages)
        .args(["--target", "x86_64-unknown-linux-gnu", "-e", edges])
        .args(["-f", "{p} [{f}]"])
        .current_dir(sluice_tests::repo())
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        // A repeated package ends in ` (*)`; workspace members and proc-macros carry a note
        // in parentheses: keep name, version and features.
        .map(|l| l.trim_end_matches(" (*)"))
        .map(|l| match (l.find(" ("), l.rfind(") [")) {
            (Some(a), Some(b)) => format!("{}{}", &l[..a], &l[b + 1..]),
            _ => l.to_string(),
        })
        .collect()
}

#[test]
fn the_demo_build_and_the_test_build_resolve_the_same_features() {
    // `make demo` builds `--workspace --bin sluice` (the workspace's features, no
    // dev-dependencies), `make test` every target:
    // a library resolved with other features in one of them is compiled twice.
    let demo = resolved_features(&["--workspace"], "normal,build");
    let test = resolved_features(&["--workspace"], "normal,build,dev");
    let differing: Vec<&String> = demo.difference(&test).collect();
    assert!(
        differing.is_empty(),
        "features that only the test build turns on (run `cargo hakari generate`): {:#?}",
        test.difference(&demo)
            .filter(|t| differing
                .iter()
                .any(|d| d.split(' ').next() == t.split(' ').next()))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_build_of_one_crate_resolves_every_dependency_as_the_workspace_build_does() {
    // Each crate depends on crates/workspace-hack, which asks every dependency for the
    // features the whole workspace asks of it (cargo-hakari writes it): so `cargo test -p
    // sluice-core`, an editor's build of one crate, and `make check` share one compile of
    // each dependency instead of each resolving its own.
    let workspace = resolved_features(&["--workspace"], "normal,build,dev");
    let metadata = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(sluice_tests::repo())
        .output()
        .expect("cargo metadata runs");
    let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout).unwrap();
    let members: Vec<&str> = (metadata["packages"].as_array().unwrap().iter())
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(members.len() > 15, "{members:?}");
    for member in members {
        let alone = resolved_features(&["-p", member], "normal,build,dev");
        let differing: Vec<&String> = alone.difference(&workspace).collect();
        assert!(
            differing.is_empty(),
            "`cargo test -p {member}` resolves these otherwise than the workspace (run `cargo \
             hakari generate` and `cargo hakari manage-deps`): {differing:#?}"
        );
    }
}

#[test]
fn a_plain_cargo_build_with_the_repositorys_configuration_fails_a_crate_that_breaks_a_lint() {
    // A scratch workspace with the repository's `.cargo/config.toml` and its
    // `[workspace.lints]` tables, built by a plain `cargo build` (no wrapper in the
    // environment): with a lint broken it does not compile; without, it does.
    let repo = sluice_tests::repo();
    let manifest = std::fs::read_to_string(repo.join("Cargo.toml")).unwrap();
    let lints: String = manifest
        .split("\n[")
        .filter(|table| table.starts_with("workspace.lints"))
        .map(|table| format!("[{table}\n"))
        .collect();
    assert!(lints.contains("warnings = \"deny\""), "{lints}");
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join(".cargo")).unwrap();
    std::fs::copy(
        repo.join(".cargo/config.toml"),
        dir.join(".cargo/config.toml"),
    )
    .unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"scratch\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[lints]\nworkspace = true\n\n[workspace]\n\n{lints}"
        ),
    )
    .unwrap();
    let build = |body: &str| {
        std::fs::write(
            dir.join("src/lib.rs"),
            format!("pub fn twice(x: u32) -> u32 {{ {body} }}\n"),
        )
        .unwrap();
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--offline", "--quiet"])
            .current_dir(dir)
            .env("CARGO_TARGET_DIR", dir.join("target"))
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .env_remove("RUSTC_WRAPPER")
            .env_remove("CLIPPY_ARGS")
            .output()
            .unwrap()
    };
    // clippy::needless_return, a warning made an error by `warnings = "deny"`.
    let linted = build("return x * 2;");
    assert!(!linted.status.success(), "a lint passed the build");
    let stderr = String::from_utf8_lossy(&linted.stderr);
    assert!(stderr.contains("needless_return"), "{stderr}");
    let clean = build("x * 2");
    assert!(clean.status.success(), "{clean:?}");
}

#[test]
fn make_check_runs_every_test_target_that_needs_no_service() {
    // The rule scripts/check.sh applies (scripts/in-process-tests.sh): every integration test
    // target whose files never call `needs!` nor run their package's binary — the API
    // contract, the stores, the sandbox's hostile components, the docs — and none of those
    // that do; a binary only when it has unit tests; a library without unit tests
    // (`test = false`) in a package with nothing else chosen is left out.
    let out = Command::new("scripts/in-process-tests.sh")
        .current_dir(sluice_tests::repo())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let chosen = String::from_utf8_lossy(&out.stdout);
    for inside in [
        "contract", "store", "remote", "hostile", "registry", "files", "docs",
    ] {
        assert!(
            chosen.contains(&format!("--test {inside}\n")),
            "{inside}: {chosen}"
        );
    }
    for outside in ["e2e", "soak", "lambda", "browser", "cli", "commands"] {
        assert!(
            !chosen.contains(&format!("--test {outside}\n")),
            "{outside}: {chosen}"
        );
    }
    assert!(chosen.contains("--exclude sluice-tests\n"), "{chosen}");
    // No binary holds a unit test today: none is linked as a test harness for nothing.
    for bin in ["sluice", "answer", "ingest", "registry"] {
        assert!(
            !chosen.contains(&format!("--bin {bin}\n")),
            "{bin}: {chosen}"
        );
    }
}
