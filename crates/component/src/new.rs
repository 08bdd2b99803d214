//! `new`: a component crate from the template, with the SDK and the world this binary carries.

use std::path::{Path, PathBuf};

use crate::{LoopError, Result};

/// The crates `new` writes (`components/template` and `components/prompt-template`, built
/// and tested with the other components): a 0.2 rerank component that keeps the fused order,
/// and a prompt component that keeps the built-in messages (a locale first when the caller
/// sends one), each with the places to put a tenant's rules marked; its name is the template's.
const TEMPLATES: [(&str, &str, &str); 2] = [
    (
        "template",
        include_str!("../../../components/template/src/lib.rs"),
        include_str!("../../../components/template/Cargo.toml"),
    ),
    (
        "prompt-template",
        include_str!("../../../components/prompt-template/src/lib.rs"),
        include_str!("../../../components/prompt-template/Cargo.toml"),
    ),
];

/// Which component `new` makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A rerank component (`sluice:rerank@0.2.0`).
    Rerank,
    /// A prompt-assembly component (`sluice:prompt@0.1.0`).
    Prompt,
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "rerank" => Ok(Kind::Rerank),
            "prompt" => Ok(Kind::Prompt),
            other => Err(format!(
                "{other:?} is not a component kind: rerank or prompt"
            )),
        }
    }
}

/// The SDK and the world `new` writes into a workspace of its own: the ones this binary was
/// built with, so a component built from them fits the host that runs it.
const SDK_LIB: &str = include_str!("../../../components/sdk/src/lib.rs");
const SDK_MANIFEST: &str = include_str!("../../../components/sdk/Cargo.toml");
const WORLD: &str = include_str!("../../../wit/rerank-0.2/rerank.wit");
const PROMPT_WORLD: &str = include_str!("../../../wit/prompt/prompt.wit");
/// The components workspace's manifest: where the SDK's `wit-bindgen` is pinned.
const COMPONENTS_MANIFEST: &str = include_str!("../../../components/Cargo.toml");

/// A workspace of one component: the crate, the SDK under `vendor/` (which reads the WIT at
/// `../../wit/rerank-0.2`, as in Sluice's own tree) and the release profile components need
/// (`NAME` and `VERSION` filled in).
const STANDALONE_MANIFEST: &str = include_str!("../../../components/template/standalone.toml");

/// A component crate of `kind` called `name` — in `dir` when that is a components workspace (Sluice's
/// own `components/`), else a workspace of its own at `dir/NAME` (default `dir`:
/// `components/` when it is one, else the current folder); returns the crate's folder.
pub fn new(name: &str, kind: Kind, dir: Option<&Path>) -> Result<PathBuf> {
    let (template_name, template_lib, template_manifest) = TEMPLATES[kind as usize];
    let valid = name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name != "sdk";
    if !valid {
        return Err(LoopError::Invalid(format!(
            "{name:?} is not a crate name for a component: lowercase ASCII letters, digits and \
             -, starting with a letter, at most 40 characters (and not `sdk`)"
        )));
    }
    let is_workspace = |dir: &Path| {
        std::fs::read_to_string(dir.join("Cargo.toml"))
            .is_ok_and(|m| m.contains("[workspace]") && m.contains("sluice-rerank-sdk"))
    };
    let dir = match dir {
        Some(dir) => dir.to_path_buf(),
        None if is_workspace(Path::new("components")) => PathBuf::from("components"),
        None => PathBuf::from("."),
    };
    let root = dir.join(name);
    if root.exists() {
        return Err(LoopError::Invalid(format!(
            "{} already exists",
            root.display()
        )));
    }
    let write = |path: &Path, text: &str| -> Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(LoopError::io(format!("creating {}", parent.display())))?;
        }
        std::fs::write(path, text).map_err(LoopError::io(format!("writing {}", path.display())))
    };
    write(
        &root.join("src/lib.rs"),
        &template_lib.replacen(template_name, name, 1),
    )?;
    if is_workspace(&dir) {
        write(
            &root.join("Cargo.toml"),
            &template_manifest.replacen(
                &format!("name = \"{template_name}\""),
                &format!("name = \"{name}\""),
                1,
            ),
        )?;
        return Ok(root);
    }
    let version = env!("CARGO_PKG_VERSION");
    let manifest = STANDALONE_MANIFEST
        .replace("NAME", name)
        .replace("VERSION", version);
    let manifest = match kind {
        Kind::Rerank => manifest,
        Kind::Prompt => manifest
            .replace(
                "rerank component for the sluice:rerank@0.2.0",
                "prompt component for the sluice:prompt@0.1.0",
            )
            .replace(
                "A Sluice rerank component.",
                "A Sluice prompt-assembly component.",
            ),
    };
    write(&root.join("Cargo.toml"), &manifest)?;
    write(&root.join("vendor/sluice-rerank-sdk/src/lib.rs"), SDK_LIB)?;
    write(
        &root.join("vendor/sluice-rerank-sdk/Cargo.toml"),
        &standalone_sdk_manifest(version),
    )?;
    // Both worlds, whichever the kind: the SDK reads them both.
    write(&root.join("wit/rerank-0.2/rerank.wit"), WORLD)?;
    write(&root.join("wit/prompt/prompt.wit"), PROMPT_WORLD)?;
    write(&root.join(".gitignore"), "/target\n")?;
    Ok(root)
}

/// The SDK's manifest outside Sluice's workspace: its own version (Sluice's) and the
/// `wit-bindgen` pin of the components workspace, written out.
fn standalone_sdk_manifest(version: &str) -> String {
    let bindgen = (COMPONENTS_MANIFEST.lines())
        .find(|l| l.starts_with("wit-bindgen = "))
        .unwrap_or("wit-bindgen = \"*\"");
    let mut out = String::new();
    for line in SDK_MANIFEST.lines() {
        let line = match line {
            "version.workspace = true" => format!("version = \"{version}\""),
            "edition.workspace = true" => "edition = \"2024\"".into(),
            "license.workspace = true" => "license = \"Apache-2.0\"".into(),
            "publish.workspace = true" => "publish = false".into(),
            "wit-bindgen.workspace = true" => bindgen.to_string(),
            other => other.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manifests are fixed at build time: this is where a key the writer does not know,
    /// or a lost `wit-bindgen` pin, is caught (not in a tenant's folder).
    #[test]
    fn the_standalone_sdk_manifest_names_no_workspace_key() {
        let manifest = standalone_sdk_manifest("9.9.9");
        assert!(!manifest.contains(".workspace = true"), "{manifest}");
        assert!(manifest.contains("version = \"9.9.9\""), "{manifest}");
        let pin = (COMPONENTS_MANIFEST.lines())
            .find(|l| l.starts_with("wit-bindgen = "))
            .expect("the components workspace pins wit-bindgen");
        assert!(manifest.contains(pin), "{manifest}");
    }

    #[test]
    fn names_that_are_no_crate_name_are_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        for bad in ["Upper", "1digit", "sdk", "under_score", "", &"a".repeat(41)] {
            let e = new(bad, Kind::Rerank, Some(dir.path())).expect_err(bad);
            assert!(matches!(e, LoopError::Invalid(_)), "{bad}: {e}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).expect("read").count(), 0);
    }

    #[test]
    fn each_kind_gets_its_template_and_both_worlds_for_the_sdk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let read = |path: &std::path::Path| std::fs::read_to_string(path).expect("written");
        let prompt = new("my-prompt", Kind::Prompt, Some(dir.path())).expect("made");
        assert!(read(&prompt.join("src/lib.rs")).contains("export_assembler!"));
        let manifest = read(&prompt.join("Cargo.toml"));
        assert!(manifest.contains("name = \"my-prompt\""), "{manifest}");
        assert!(manifest.contains("prompt-assembly"), "{manifest}");
        let rerank = new("my-rerank", Kind::Rerank, Some(dir.path())).expect("made");
        assert!(read(&rerank.join("src/lib.rs")).contains("export_reranker!"));
        for root in [&prompt, &rerank] {
            assert!(root.join("wit/prompt/prompt.wit").is_file());
            assert!(root.join("wit/rerank-0.2/rerank.wit").is_file());
        }
        assert_eq!("prompt".parse::<Kind>(), Ok(Kind::Prompt));
        assert!("ranking".parse::<Kind>().is_err());
    }
}
