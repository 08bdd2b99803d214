//! Whether the official API documents are here for the contract tests (`tests/remote/`:
//! Qdrant and Pinecone): from `SLUICE_SPECS_DIR`, default `../shared/specs` beside the project.
//! Without them (a user's clone has none) those tests are compiled as ignored, so that
//! `make test` counts them as skipped instead of passing them; under `CI` they are never
//! ignored, and fail for want of the documents.
use std::path::PathBuf;

const DOCUMENTS: [&str; 3] = [
    "qdrant-1.19.0-openapi.json",
    "pinecone-2025-10-db_data.oas.yaml",
    "pinecone-2025-10-db_control.oas.yaml",
];

fn main() {
    println!("cargo::rerun-if-env-changed=SLUICE_SPECS_DIR");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rustc-check-cfg=cfg(specs_absent)");
    let dir = std::env::var_os("SLUICE_SPECS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
                .join("../../../shared/specs")
        });
    let present: Vec<PathBuf> = DOCUMENTS
        .iter()
        .map(|d| dir.join(d))
        .filter(|p| p.is_file())
        .collect();
    // Watch the documents that exist (a missing path would make Cargo run this every build,
    // and rebuild the crate); a folder that appears later is seen when SLUICE_SPECS_DIR or CI
    // changes, or this file does.
    for path in &present {
        println!("cargo::rerun-if-changed={}", path.display());
    }
    println!("cargo::rerun-if-changed=build.rs");
    if present.len() < DOCUMENTS.len() && std::env::var_os("CI").is_none() {
        println!("cargo::rustc-cfg=specs_absent");
        println!(
            "cargo::warning=the official API documents are not all in {}: the Qdrant and Pinecone contract tests are skipped (set SLUICE_SPECS_DIR)",
            dir.display()
        );
    }
}
