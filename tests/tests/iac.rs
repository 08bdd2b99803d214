//! Infrastructure as code, validated offline: every CloudFormation template in `infra/`
//! passes `cfn-lint` (AWS's resource specifications: property names, types, allowed values,
//! references) and `checkov --skip-download` (security policies) with no failed check; a
//! check skipped in a template carries its reason there. Nothing is deployed: these say the
//! templates are well-formed and follow the policies, not that the stacks come up.
//!
//! The tools come from the validators' venv that `scripts/setup.sh tools` makes (pinned there).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A validator from `SLUICE_HOME/iac/bin` (default `~/.cache/sluice`).
fn tool(name: &str) -> PathBuf {
    let home = std::env::var_os("SLUICE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/sluice")
        });
    let path = home.join("iac/bin").join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `scripts/setup.sh tools`",
        path.display()
    );
    path
}

fn templates() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(repo().join("infra"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no template in infra/");
    found
}

/// cfn-lint's findings for `template` (empty when clean).
fn cfn_lint(template: &Path) -> String {
    let out = Command::new(tool("cfn-lint"))
        .arg(template)
        .output()
        .expect("cfn-lint runs");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn every_template_passes_cfn_lint() {
    for template in templates() {
        let findings = cfn_lint(&template);
        assert!(
            findings.trim().is_empty(),
            "{}:\n{findings}",
            template.display()
        );
    }
}

#[test]
fn cfn_lint_does_find_a_misspelt_property() {
    // The control: the same linter on a copy with one property name wrong must complain.
    let template = &templates()[0];
    let text = std::fs::read_to_string(template).unwrap();
    assert!(text.contains("HealthCheckPath:"));
    let broken = tempfile::NamedTempFile::with_suffix(".yaml").unwrap();
    std::fs::write(
        broken.path(),
        text.replacen("HealthCheckPath:", "HealthCheckPth:", 1),
    )
    .unwrap();
    let findings = cfn_lint(broken.path());
    assert!(findings.contains("HealthCheckPth"), "{findings}");
}

#[test]
fn every_template_passes_checkov_with_no_failed_check() {
    for template in templates() {
        let out = Command::new(tool("checkov"))
            .args(["--skip-download", "--quiet", "-o", "json", "-f"])
            .arg(&template)
            .output()
            .expect("checkov runs");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "checkov output is not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let summary = &report["summary"];
        let failed = report["results"]["failed_checks"]
            .as_array()
            .map(|f| {
                f.iter()
                    .map(|c| format!("{} {}", c["check_id"], c["resource"]))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        assert_eq!(summary["failed"], 0, "{}: {failed:#?}", template.display());
        assert!(
            summary["passed"].as_u64().unwrap_or(0) >= 20,
            "checkov checked too little: {summary}"
        );
        assert_eq!(summary["parsing_errors"], 0);
    }
}
