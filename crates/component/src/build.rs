//! `build`: a component crate built for `wasm32-unknown-unknown` and made a component
//! in-process.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::{LoopError, Result};

/// How this machine builds for `wasm32-unknown-unknown`.
enum Toolchain {
    /// A toolchain whose sysroot has the target's standard library (rustup's
    /// `rustup target add wasm32-unknown-unknown`).
    Installed,
    /// Debian's `rustc-web` with the standard library's sources (`rust-web-src`) and LLVM's
    /// linker (`lld-22`): the standard library is built with the component.
    DebianSources,
}

fn toolchain() -> Result<Toolchain> {
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if sysroot.is_some_and(|s| s.join("lib/rustlib/wasm32-unknown-unknown/lib").is_dir()) {
        return Ok(Toolchain::Installed);
    }
    if Path::new("/usr/bin/rustc").is_file()
        && Path::new("/usr/lib/rustlib/src/rust").is_dir()
        && Path::new("/usr/bin/wasm-ld-22").is_file()
    {
        return Ok(Toolchain::DebianSources);
    }
    Err(LoopError::Toolchain(
        "no Rust toolchain here builds for wasm32-unknown-unknown. With rustup: \
         `rustup target add wasm32-unknown-unknown`; on Debian or Ubuntu: \
         `apt-get install rustc-web cargo-web rust-web-src lld-22`"
            .into(),
    ))
}

/// Where component crates build when `CARGO_TARGET_DIR` is not set: `components-target`
/// under `SLUICE_HOME` (`~/.cache/sluice`), shared by every crate (and by
/// `scripts/build-components.sh`).
fn shared_target() -> PathBuf {
    let home = sluice_contract::settings::home(&sluice_contract::settings::env);
    home.join("components-target")
}

/// The component crate in `dir` built for `wasm32-unknown-unknown` (release) and made a
/// component in-process; returns the path of the `.component.wasm`, written beside the
/// build's output (`<target dir>/NAME.component.wasm`).
pub fn build(dir: &Path) -> Result<PathBuf> {
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).map_err(LoopError::io(format!(
        "{} is not a component crate (no Cargo.toml); start one with `sluice component new NAME`",
        dir.display()
    )))?;
    let name = (text.lines())
        .skip_while(|l| l.trim() != "[package]")
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == "name").then(|| value.trim().trim_matches('"').to_string())
        })
        .ok_or_else(|| {
            LoopError::Invalid(format!("{} has no [package] name", manifest.display()))
        })?;
    let toolchain = toolchain()?;
    let cargo = |args: &[&str]| {
        let mut command = match toolchain {
            Toolchain::Installed => Command::new("cargo"),
            Toolchain::DebianSources => {
                let mut c = Command::new("/usr/bin/cargo");
                // RUSTC_BOOTSTRAP lets the stable toolchain build the standard library
                // (-Zbuild-std); Debian ships no rust-lld, hence the linker.
                c.env("RUSTC", "/usr/bin/rustc")
                    .env("RUSTC_BOOTSTRAP", "1")
                    .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", "wasm-ld-22");
                c
            }
        };
        // One target folder for every component crate unless the caller chose one: the SDK's
        // dependencies (wit-bindgen, serde) are built once, not once per crate.
        if sluice_contract::settings::env("CARGO_TARGET_DIR").is_none() {
            command.env("CARGO_TARGET_DIR", shared_target());
        }
        // A wrapper of the host toolchain (clippy's, sccache) must not wrap this one.
        command
            .env_remove("RUSTC_WRAPPER")
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .arg(args[0])
            .arg("--manifest-path")
            .arg(&manifest)
            .args(&args[1..]);
        command
    };
    let failed = |what: &str| {
        let what = what.to_string();
        move |e: std::io::Error| LoopError::Toolchain(format!("running {what}: {e}"))
    };
    let metadata = cargo(&["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .map_err(failed("cargo metadata"))?;
    if !metadata.status.success() {
        return Err(LoopError::Toolchain(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&metadata.stderr)
        )));
    }
    let metadata: Value = serde_json::from_slice(&metadata.stdout)
        .map_err(|e| LoopError::Toolchain(format!("cargo metadata: {e}")))?;
    let target =
        PathBuf::from(metadata["target_directory"].as_str().ok_or_else(|| {
            LoopError::Toolchain("cargo metadata names no target directory".into())
        })?);
    let mut args = vec![
        "build",
        "--release",
        "--target",
        "wasm32-unknown-unknown",
        "-p",
        &name,
    ];
    if let Toolchain::DebianSources = toolchain {
        args.push("-Zbuild-std=std,panic_abort");
    }
    let status = cargo(&args).status().map_err(failed("cargo build"))?;
    if !status.success() {
        return Err(LoopError::Toolchain(
            "cargo build failed (its errors are above)".into(),
        ));
    }
    let core_path = target
        .join("wasm32-unknown-unknown/release")
        .join(format!("{}.wasm", name.replace('-', "_")));
    let core = std::fs::read(&core_path).map_err(LoopError::io(format!(
        "reading the built module {}",
        core_path.display()
    )))?;
    let component = wit_component::ComponentEncoder::default()
        .module(&core)
        .and_then(|e| e.validate(true).encode())
        .map_err(|e| {
            LoopError::Toolchain(format!("making {} a component: {e:#}", core_path.display()))
        })?;
    // The contexts its upload check runs under, from `[package.metadata.sluice] contexts`.
    let package = (metadata["packages"].as_array().into_iter().flatten())
        .find(|p| p["name"] == name.as_str());
    let contexts = package.map(|p| &p["metadata"]["sluice"]["contexts"]);
    let contexts = match contexts {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list.clone(),
        Some(_) => {
            return Err(LoopError::Invalid(
                "[package.metadata.sluice] contexts must be a list of tables of strings".into(),
            ));
        }
    };
    let component = sluice_rerank::contexts::declare(&component, &contexts)
        .map_err(|e| LoopError::Invalid(format!("[package.metadata.sluice] contexts: {e}")))?;
    let out = target.join(format!("{name}.component.wasm"));
    std::fs::write(&out, component).map_err(LoopError::io(format!("writing {}", out.display())))?;
    Ok(out)
}
