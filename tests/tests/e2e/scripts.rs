//! The build scripts' promises: `make test` (and `.ci/run`, `make load`, `make bench`) compile
//! the workspace through clippy's driver, so a build without it would silently drop the lints
//! `.ci/run` promises — it is refused instead; and `make demo`'s build and `make test`'s
//! resolve every library with the same features, so that they share one compile.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Runs `script` in bash, in the repository root, with a `rustup` on the PATH that names a
/// cargo in `toolchain` (where a `clippy-driver` may or may not be).
fn with_toolchain(toolchain: &Path, script: &str) -> std::process::Output {
    let bin = toolchain.join("shims");
    std::fs::create_dir_all(&bin).unwrap();
    let rustup = bin.join("rustup");
    std::fs::write(
        &rustup,
        format!("#!/bin/sh\necho {}/cargo\n", toolchain.display()),
    )
    .unwrap();
    std::fs::set_permissions(&rustup, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("bash")
        .args(["-c", script])
        .current_dir(sluice_tests::repo())
        .env("PATH", path)
        .output()
        .unwrap()
}

#[test]
fn a_build_without_clippy_driver_is_refused() {
    let toolchain = tempfile::tempdir().unwrap();
    let script = "set -e; source scripts/cargo-env.sh; echo \"wrapper=$RUSTC_WORKSPACE_WRAPPER\"";
    let out = with_toolchain(toolchain.path(), script);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "built without lints: {out:?}");
    assert!(stderr.contains("clippy-driver not found"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("wrapper="));

    // With the driver beside cargo, the build goes through it.
    let driver = toolchain.path().join("clippy-driver");
    std::fs::write(&driver, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&driver, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = with_toolchain(toolchain.path(), script);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("wrapper={}", driver.display())
    );
}

/// Every package of the workspace's graph with its features, as `cargo tree` resolves them
/// for Linux with the dependency kinds `edges`: `name version [features]` lines.
fn resolved_features(edges: &str) -> std::collections::BTreeSet<String> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["tree", "--workspace", "--offline", "--prefix", "none"])
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
    // `make demo` builds `--workspace --bins` (no dev-dependencies), `make test` every target:
    // a library resolved with other features in one of them is compiled twice.
    let demo = resolved_features("normal,build");
    let test = resolved_features("normal,build,dev");
    let differing: Vec<&String> = demo.difference(&test).collect();
    assert!(
        differing.is_empty(),
        "features that only the test build turns on (add them in functions/app/Cargo.toml): {:#?}",
        test.difference(&demo)
            .filter(|t| differing
                .iter()
                .any(|d| d.split(' ').next() == t.split(' ').next()))
            .collect::<Vec<_>>()
    );
}

#[test]
fn the_real_build_configuration_fails_a_crate_that_breaks_a_lint() {
    // A scratch crate built as `make test` builds (scripts/cargo-env.sh, the real
    // clippy-driver): with a lint broken it does not compile; without, it does.
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"scratch\"\nversion = \"0.1.0\"\nedition = \"2024\"\n[workspace]\n",
    )
    .unwrap();
    let build = |body: &str| {
        std::fs::write(
            dir.join("src/lib.rs"),
            format!("pub fn twice(x: u32) -> u32 {{ {body} }}\n"),
        )
        .unwrap();
        let script = format!(
            "set -e; source scripts/cargo-env.sh; CARGO_TARGET_DIR={0}/target cargo build --offline --quiet --manifest-path {0}/Cargo.toml",
            dir.display()
        );
        Command::new("bash")
            .args(["-c", &script])
            .current_dir(sluice_tests::repo())
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .env_remove("CLIPPY_ARGS")
            .output()
            .unwrap()
    };
    // clippy::needless_return, a warning made an error by -D warnings.
    let linted = build("return x * 2;");
    assert!(!linted.status.success(), "a lint passed the build");
    let stderr = String::from_utf8_lossy(&linted.stderr);
    assert!(stderr.contains("needless_return"), "{stderr}");
    let clean = build("x * 2");
    assert!(clean.status.success(), "{clean:?}");
}
