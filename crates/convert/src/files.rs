//! Files to documents: the format by the file's name (or a `Content-Type`), Markdown's front
//! matter as title and metadata, JSON and JSON Lines as documents already, the other formats
//! converted ([`convert_contained`]) — what `POST /v1/documents` uploads, the ingest function's
//! S3 objects and `sluice ingest` read.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sluice_contract::cancel::Cancel;
use sluice_contract::document::{Converter, Document};
use sluice_contract::error::IngestError;

use crate::{ConvertError, ConvertLimits, Format};

/// Reads documents from a file's bytes; `name` (a path) picks the format by its extension
/// and becomes the id and source of a converted file (and its title when the file names
/// none). Conversion runs within `limits` ([`crate::convert_contained`]).
pub fn parse_file(
    name: &str,
    bytes: &[u8],
    limits: &ConvertLimits,
) -> Result<Vec<Document>, IngestError> {
    let format = Format::from_name(name).ok_or_else(|| {
        IngestError::Unsupported(format!(
            "{name}: unsupported file type (use {})",
            Format::EXTENSIONS
        ))
    })?;
    parse_as(format, name, bytes, limits)
}

/// [`parse_file`] of a file whose format is known otherwise (a `Content-Type`).
pub fn parse_as(
    format: Format,
    name: &str,
    bytes: &[u8],
    limits: &ConvertLimits,
) -> Result<Vec<Document>, IngestError> {
    parse_until(format, name, bytes, limits, &Cancel::new())
}

/// [`parse_as`], whose conversion stops once `cancel` says so.
pub fn parse_until(
    format: Format,
    name: &str,
    bytes: &[u8],
    limits: &ConvertLimits,
    cancel: &Cancel,
) -> Result<Vec<Document>, IngestError> {
    let utf8 = || {
        std::str::from_utf8(bytes)
            .map_err(|e| IngestError::Invalid(format!("{name}: not UTF-8 text ({e})")))
    };
    let stem = name.rsplit('/').next().unwrap_or(name);
    let stem = stem.rsplit_once('.').map_or(stem, |(s, _)| s).to_string();
    let document = |title: Option<String>, text: String, sections, metadata| Document {
        id: name.to_string(),
        title: Some(title.unwrap_or_else(|| stem.clone())),
        text,
        sections,
        source: Some(name.to_string()),
        metadata,
        format: Some(format.name().to_string()),
    };
    match format {
        Format::Text => Ok(vec![document(
            None,
            utf8()?.to_string(),
            Vec::new(),
            serde_json::Map::new(),
        )]),
        Format::Markdown => {
            let (mut metadata, body) = front_matter(name, utf8()?)?;
            let converted = crate::convert_until(format, body.as_bytes(), limits, cancel)
                .map_err(|e| convert_error(name, e))?;
            let title = match metadata.remove("title") {
                Some(serde_json::Value::String(t)) => Some(t),
                Some(other) => {
                    return Err(IngestError::Invalid(format!(
                        "{name}: the front matter's title is not a string ({other})"
                    )));
                }
                None => converted.title,
            };
            Ok(vec![document(
                title,
                String::new(),
                converted.sections,
                metadata,
            )])
        }
        Format::Html | Format::Pdf | Format::Docx => {
            let converted = crate::convert_contained(format, bytes.to_vec(), limits, cancel)
                .map_err(|e| convert_error(name, e))?;
            Ok(vec![document(
                converted.title,
                String::new(),
                converted.sections,
                serde_json::Map::new(),
            )])
        }
        Format::Json => {
            #[derive(Deserialize)]
            #[serde(untagged)]
            enum JsonFile {
                Many(Vec<Document>),
                Wrapped { documents: Vec<Document> },
                One(Document),
            }
            let parsed: JsonFile = serde_json::from_str(utf8()?).map_err(|e| {
                IngestError::Invalid(format!(
                    "{name}: expected a document {{\"id\",\"text\",\"title\"?,\"source\"?,\"metadata\"?}}, a list of them, \
                     or {{\"documents\": [...]}} ({e})"
                ))
            })?;
            Ok(match parsed {
                JsonFile::Many(d) | JsonFile::Wrapped { documents: d } => d,
                JsonFile::One(d) => vec![d],
            })
        }
        Format::Jsonl => utf8()?
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l)
                    .map_err(|e| IngestError::Invalid(format!("{name} line {}: {e}", i + 1)))
            })
            .collect(),
    }
}

/// [`parse_as`] off the async threads (a conversion is CPU work and may take seconds): what
/// the server and the ingest function run on an upload. The conversion ends with this
/// future: dropped (its client left), it stops at its next check.
pub async fn parse_upload(
    format: Format,
    name: String,
    bytes: Vec<u8>,
    limits: ConvertLimits,
) -> Result<Vec<Document>, IngestError> {
    let failed = format!("{name}: the conversion failed");
    let cancel = Cancel::new();
    let _stop_when_dropped = cancel.on_drop();
    tokio::task::spawn_blocking(move || parse_until(format, &name, &bytes, &limits, &cancel))
        .await
        .map_err(|e| IngestError::Unreadable(format!("{failed} ({e})")))?
}

/// The file parsers as the processes that ingest use them ([`Converter`]): uploads converted
/// within these caps and time budget.
#[derive(Debug, Clone, Default)]
pub struct Files(pub ConvertLimits);

#[async_trait::async_trait]
impl Converter for Files {
    fn reads_media_type(&self, media_type: &str) -> bool {
        Format::from_media_type(media_type)
            .is_some_and(|f| !matches!(f, Format::Json | Format::Text))
    }

    async fn convert(
        &self,
        name: Option<String>,
        media_type: Option<&str>,
        bytes: Vec<u8>,
    ) -> Result<Vec<Document>, IngestError> {
        let format = Format::of(name.as_deref(), media_type).ok_or_else(|| {
            IngestError::Unsupported(format!(
                "{}: unsupported file type (use {}, or a Content-Type that names one)",
                name.as_deref().unwrap_or("the body"),
                Format::EXTENSIONS
            ))
        })?;
        let name = name.unwrap_or_else(|| {
            let digest = sluice_contract::sha256_hex(&bytes);
            format!("upload-{}.{}", &digest[..16], format.extension())
        });
        parse_upload(format, name, bytes, self.0.clone()).await
    }
}

/// The documents of every supported file under `paths` (folders searched recursively, files
/// in name order), converted within `limits`, parsed and validated (errors name the file),
/// and the number of files; `progress` hears of each file before it is read. What `sluice
/// ingest` sends and `sluice component test --corpus` ingests.
pub fn read_files(
    paths: &[PathBuf],
    limits: &ConvertLimits,
    progress: &dyn Fn(&Path),
) -> Result<(Vec<Document>, usize), IngestError> {
    fn walk(p: &Path, out: &mut Vec<PathBuf>) -> Result<(), IngestError> {
        if p.is_dir() {
            let unreadable = |e: std::io::Error| {
                IngestError::Unreadable(format!("reading {}: {e}", p.display()))
            };
            for entry in std::fs::read_dir(p).map_err(unreadable)? {
                walk(&entry.map_err(unreadable)?.path(), out)?;
            }
        } else if p.is_file() {
            if Format::from_name(&p.display().to_string()).is_some() {
                out.push(p.to_path_buf());
            }
        } else {
            return Err(IngestError::Invalid(format!(
                "{} does not exist",
                p.display()
            )));
        }
        Ok(())
    }
    // Each file with the id it is given (see [`named`]), in path order.
    let mut files = Vec::new();
    for p in paths {
        let mut found = Vec::new();
        walk(p, &mut found)?;
        files.extend(found.into_iter().map(|f| (named(p, &f), f)));
    }
    files.sort_by(|a, b| a.1.cmp(&b.1));
    if files.is_empty() {
        return Err(IngestError::Invalid(format!(
            "no {} files under the given paths",
            Format::EXTENSIONS
        )));
    }
    let mut documents: Vec<Document> = Vec::new();
    for (name, f) in &files {
        progress(f);
        let bytes = std::fs::read(f)
            .map_err(|e| IngestError::Unreadable(format!("reading {}: {e}", f.display())))?;
        documents.extend(parse_file(name, &bytes, limits)?);
    }
    sluice_contract::document::validate(&documents)?;
    Ok((documents, files.len()))
}

/// The id of `file`, found under `root` as the caller wrote it: the folder's own name and the
/// path inside it (`samples/cards/lost.md`, whether the folder was written `samples/`,
/// `../../samples`, an absolute path or `.`), and for a file given itself, its folder's name
/// and its own. The same files get the same ids from any working directory, whichever command
/// reads them (`sluice ingest`, `sluice component test --corpus`).
fn named(root: &Path, file: &Path) -> String {
    let folder = match (root.is_dir(), root.parent()) {
        (true, _) => root,
        (false, Some(parent)) if !parent.as_os_str().is_empty() => parent,
        (false, _) => Path::new("."),
    };
    let own = (folder.file_name().map(PathBuf::from))
        .filter(|n| n != Path::new(".") && n != Path::new(".."))
        .or_else(|| {
            let canonical = folder.canonicalize().ok()?;
            canonical.file_name().map(PathBuf::from)
        });
    let inside = file.strip_prefix(folder).unwrap_or(file);
    let name = own.map_or_else(|| inside.to_path_buf(), |own| own.join(inside));
    // `/` between the parts, as ids are written on every platform.
    (name.components())
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// A conversion's failure as an ingest error naming the file.
fn convert_error(name: &str, e: ConvertError) -> IngestError {
    let message = format!("{name}: {e}");
    match e {
        ConvertError::NoTextLayer { .. } => IngestError::NoTextLayer(message),
        ConvertError::Encrypted => IngestError::Encrypted(message),
        ConvertError::TooLarge(_) => IngestError::TooLarge(message),
        ConvertError::Malformed(_) => IngestError::Invalid(message),
        ConvertError::Crashed { detail } => {
            // The parser's words are the operator's; the client reads the error's sentence.
            tracing::warn!(file = name, %detail, "a parser failed on an upload");
            IngestError::Unreadable(message)
        }
        ConvertError::TimedOut(_) | ConvertError::Cancelled => IngestError::Unreadable(message),
    }
}

/// A Markdown file's YAML front matter (between a first line `---` and the next `---`) and
/// the text after it: the front matter's `title` titles the document, its other keys are the
/// document's metadata. A file without front matter has no metadata.
fn front_matter<'a>(
    name: &str,
    text: &'a str,
) -> Result<(serde_json::Map<String, serde_json::Value>, &'a str), IngestError> {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return Ok((serde_json::Map::new(), text));
    };
    let Some((yaml, body)) = rest
        .split_once("\n---\n")
        .or_else(|| rest.split_once("\r\n---\r\n"))
        .or_else(|| rest.strip_suffix("\n---").map(|y| (y, "")))
    else {
        return Err(IngestError::Invalid(format!(
            "{name}: the front matter opened by the first line `---` is never closed"
        )));
    };
    let metadata = if yaml.trim().is_empty() {
        serde_json::Map::new()
    } else {
        serde_saphyr::from_str(yaml).map_err(|e| {
            IngestError::Invalid(format!(
                "{name}: the front matter is not a YAML mapping of metadata ({e})"
            ))
        })?
    };
    Ok((metadata, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_contract::document::validate;

    #[test]
    fn text_and_markdown_files_take_their_name_and_heading() {
        let d = parse_file(
            "docs/guide.md",
            b"intro\n# Getting started\nbody",
            &ConvertLimits::default(),
        )
        .unwrap();
        assert_eq!(d[0].id, "docs/guide.md");
        assert_eq!(d[0].title.as_deref(), Some("Getting started"));
        let d = parse_file("notes.txt", b"plain", &ConvertLimits::default()).unwrap();
        assert_eq!(d[0].title.as_deref(), Some("notes"));
    }

    #[test]
    fn markdown_front_matter_is_the_title_and_the_metadata() {
        let file = b"---\ntitle: Card policy\nyear: 2025\ngroups: [finance, hr]\nupdated_at: \"2025-03-01T09:00:00Z\"\n---\n# Heading\nbody";
        let d = parse_file("policies/cards.md", file, &ConvertLimits::default()).unwrap();
        assert_eq!(d[0].title.as_deref(), Some("Card policy"));
        // Its text in sections under its headings; the front matter is not text.
        assert_eq!(d[0].sections.len(), 1);
        assert_eq!(d[0].sections[0].path, ["Heading"]);
        assert_eq!(d[0].sections[0].text, "body");
        assert_eq!(
            serde_json::Value::Object(d[0].metadata.clone()),
            serde_json::json!({"year": 2025, "groups": ["finance", "hr"], "updated_at": "2025-03-01T09:00:00Z"})
        );
        assert!(validate(&d).is_ok());
        // Without a title in it, the first heading still titles the document.
        let d = parse_file(
            "a.md",
            b"---\nyear: 2024\n---\n# From the heading\n",
            &ConvertLimits::default(),
        )
        .unwrap();
        assert_eq!(d[0].title.as_deref(), Some("From the heading"));
        // Nested values are refused by validation, naming the key.
        let d = parse_file(
            "a.md",
            b"---\nowner:\n  name: x\n---\ntext",
            &ConvertLimits::default(),
        )
        .unwrap();
        assert!(
            validate(&d)
                .unwrap_err()
                .to_string()
                .contains("\"owner\": a nested object")
        );
        // An unclosed or non-mapping front matter is an error naming the file.
        for bad in [&b"---\nyear: 2024\ntext"[..], b"---\n- a list\n---\ntext"] {
            let e = parse_file("bad.md", bad, &ConvertLimits::default())
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("bad.md: the front matter"), "{e}");
        }
        // A .txt file's dashes are text.
        let d = parse_file("a.txt", b"---\nyear: 1\n---\n", &ConvertLimits::default()).unwrap();
        assert!(d[0].metadata.is_empty() && d[0].text.starts_with("---"));
    }

    #[test]
    fn json_accepts_one_a_list_or_a_wrapper_and_content_as_text() {
        let one = parse_file(
            "a.json",
            br#"{"id":"1","content":"x"}"#,
            &ConvertLimits::default(),
        )
        .unwrap();
        assert_eq!(one[0].text, "x");
        let list = parse_file(
            "a.json",
            br#"[{"id":"1","text":"x"},{"id":"2","text":"y"}]"#,
            &ConvertLimits::default(),
        )
        .unwrap();
        assert_eq!(list.len(), 2);
        let wrapped = parse_file(
            "a.json",
            br#"{"documents":[{"id":"1","text":"x"}]}"#,
            &ConvertLimits::default(),
        )
        .unwrap();
        assert_eq!(wrapped[0].id, "1");
    }

    #[test]
    fn jsonl_errors_name_the_line() {
        let err = parse_file(
            "a.jsonl",
            b"{\"id\":\"1\",\"text\":\"x\"}\n\n{\"id\":2}\n",
            &ConvertLimits::default(),
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("a.jsonl line 3:"), "{err}");
    }

    #[test]
    fn unsupported_and_binary_files_are_refused() {
        assert!(
            parse_file("a.xlsx", b"PK", &ConvertLimits::default())
                .unwrap_err()
                .to_string()
                .contains("unsupported")
        );
        assert!(
            parse_file("a.txt", &[0xff, 0xfe], &ConvertLimits::default())
                .unwrap_err()
                .to_string()
                .contains("UTF-8")
        );
    }

    #[test]
    fn files_under_folders_are_read_in_name_order_and_others_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b.txt"), "second").unwrap();
        std::fs::write(dir.path().join("a.md"), "# First\nbody").unwrap();
        std::fs::write(dir.path().join("skip.xlsx"), "PK").unwrap();
        let seen = std::cell::RefCell::new(Vec::new());
        let (documents, files) = read_files(
            &[dir.path().to_path_buf()],
            &ConvertLimits::default(),
            &|f| seen.borrow_mut().push(f.to_path_buf()),
        )
        .unwrap();
        assert_eq!(files, 2);
        assert_eq!(documents.len(), 2);
        assert_eq!(documents[0].title.as_deref(), Some("First"));
        // Named by the folder's own name and the path inside it.
        let folder = dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        assert_eq!(documents[1].id, format!("{folder}/sub/b.txt"));
        assert_eq!(seen.borrow().len(), 2);

        let missing = dir.path().join("nope");
        let e = read_files(&[missing], &ConvertLimits::default(), &|_| {}).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let empty = tempfile::tempdir().unwrap();
        let e = read_files(
            &[empty.path().to_path_buf()],
            &ConvertLimits::default(),
            &|_| {},
        )
        .unwrap_err();
        assert!(e.to_string().contains("no .txt"), "{e}");
    }

    #[test]
    fn a_files_id_is_the_same_however_its_folder_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let samples = dir.path().join("samples");
        std::fs::create_dir_all(samples.join("cards")).unwrap();
        std::fs::write(samples.join("cards/lost.md"), "# Lost\nA new card.").unwrap();
        let nested = samples.join("cards");
        let ids = |root: PathBuf| {
            let (documents, _) = read_files(&[root], &ConvertLimits::default(), &|_| {}).unwrap();
            documents.into_iter().map(|d| d.id).collect::<Vec<_>>()
        };
        // The folder as written from its parent, from inside it, from below it, absolutely.
        for root in [
            samples.clone(),
            samples.join("."),
            nested.join(".."),
            nested.join("../../samples/"),
        ] {
            assert_eq!(
                ids(root.clone()),
                ["samples/cards/lost.md"],
                "{}",
                root.display()
            );
        }
        // A file given itself: its folder's name and its own, as its folder names it.
        assert_eq!(ids(nested.join("lost.md")), ["cards/lost.md"]);
        assert_eq!(ids(nested.clone()), ["cards/lost.md"]);
    }
}
