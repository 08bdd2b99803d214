//! Files as people have them, to text in sections: PDF (its text layer, page by page),
//! HTML (the main content), Word (`.docx`) and Markdown. Each section carries its heading
//! path and, for PDFs, its page, which chunks and citations keep.
//!
//! The parsers are maintained crates (pdf_oxide, office_oxide, dom_smoothie, pulldown-cmark;
//! docs/ingestion.md says why each). They read what clients upload, so every conversion is
//! bounded ([`ConvertLimits`]) and contained ([`convert_contained`]): a parser that panics or
//! runs past its time budget fails that file, never the process.

mod docx;
mod files;
mod html;
mod markdown;
mod pdf;

pub use files::{Files, parse_as, parse_file, parse_until, parse_upload, read_files};

use std::time::Duration;

use sluice_contract::cancel::{Cancel, Stopped};
use sluice_contract::document::Section;
use sluice_contract::settings::{ConfigError, millis, ranged};

/// A file format Sluice reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Plain text (`.txt`).
    Text,
    /// Markdown (`.md`, `.markdown`).
    Markdown,
    /// HTML (`.html`, `.htm`).
    Html,
    /// PDF's text layer (`.pdf`).
    Pdf,
    /// Word (`.docx`).
    Docx,
    /// Documents as JSON: one, a list, or `{"documents": [...]}` (`.json`).
    Json,
    /// JSON Lines, a document a line (`.jsonl`, `.ndjson`).
    Jsonl,
}

impl Format {
    /// The format a file name's extension names.
    pub fn from_name(name: &str) -> Option<Format> {
        let (_, ext) = name.rsplit_once('.')?;
        Some(match ext.to_ascii_lowercase().as_str() {
            "txt" | "text" => Format::Text,
            "md" | "markdown" => Format::Markdown,
            "html" | "htm" | "xhtml" => Format::Html,
            "pdf" => Format::Pdf,
            "docx" => Format::Docx,
            "json" => Format::Json,
            "jsonl" | "ndjson" => Format::Jsonl,
            _ => return None,
        })
    }

    /// The format a media type names (`Content-Type`, parameters ignored).
    pub fn from_media_type(media_type: &str) -> Option<Format> {
        let essence = media_type.split(';').next()?.trim().to_ascii_lowercase();
        Some(match essence.as_str() {
            "text/plain" => Format::Text,
            "text/markdown" | "text/x-markdown" => Format::Markdown,
            "text/html" | "application/xhtml+xml" => Format::Html,
            "application/pdf" => Format::Pdf,
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document" => {
                Format::Docx
            }
            "application/json" => Format::Json,
            "application/jsonl" | "application/x-ndjson" | "application/x-jsonlines" => {
                Format::Jsonl
            }
            _ => return None,
        })
    }

    /// Its name as documents and listings show it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Markdown => "markdown",
            Format::Html => "html",
            Format::Pdf => "pdf",
            Format::Docx => "docx",
            Format::Json => "json",
            Format::Jsonl => "jsonl",
        }
    }

    /// The format of an upload: by its name's extension, else by its media type.
    pub fn of(name: Option<&str>, media_type: Option<&str>) -> Option<Format> {
        name.and_then(Format::from_name)
            .or_else(|| media_type.and_then(Format::from_media_type))
    }

    /// The extension of its files, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Text => "txt",
            Format::Markdown => "md",
            Format::Html => "html",
            Format::Pdf => "pdf",
            Format::Docx => "docx",
            Format::Json => "json",
            Format::Jsonl => "jsonl",
        }
    }

    /// The extensions [`from_name`](Self::from_name) reads, for messages.
    pub const EXTENSIONS: &'static str = ".txt, .md, .html, .pdf, .docx, .json or .jsonl";
}

/// What a file holds, converted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Converted {
    /// The title the file gives itself (a PDF's or an HTML page's title, the first level-1
    /// heading), when it has one.
    pub title: Option<String>,
    /// Its text in reading order, in sections.
    pub sections: Vec<Section>,
}

impl Converted {
    /// All the text, sections a blank line apart.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self.sections.iter().map(|s| s.text.as_str()).collect();
        texts.join("\n\n")
    }
}

/// Why a file could not be converted. Messages do not name the file; the caller adds it.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// A PDF whose pages carry no text (a scan): it needs OCR first.
    #[error("the PDF has no text layer ({pages} pages, no text on any; a scan needs OCR first)")]
    NoTextLayer {
        /// Its page count.
        pages: usize,
    },
    /// A PDF that needs a password.
    #[error("the PDF is encrypted and opens only with a password; send it decrypted")]
    Encrypted,
    /// Over one of the [`ConvertLimits`].
    #[error("{0}")]
    TooLarge(String),
    /// Not a valid file of its format.
    #[error("{0}")]
    Malformed(String),
    /// The parser ran past the time budget (`SLUICE_CONVERT_TIMEOUT_MS`).
    #[error(
        "conversion took longer than {0:?} (SLUICE_CONVERT_TIMEOUT_MS); the file is too complex or malformed"
    )]
    TimedOut(Duration),
    /// Its request ended (the client left) before the conversion did: it stopped.
    #[error("the conversion stopped: its request ended")]
    Cancelled,
    /// The parser failed on the file (a panic in it, contained). What the parser said is for
    /// the operator's log ([`ConvertError::Crashed::detail`]), not for the client.
    #[error("the file is malformed: its parser could not read it")]
    Crashed {
        /// The parser's own words (a panic message), logged.
        detail: String,
    },
}

/// Caps on what one file may make a conversion do; each is a setting.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvertLimits {
    /// `SLUICE_MAX_PDF_PAGES`: pages of one PDF.
    pub max_pdf_pages: usize,
    /// `SLUICE_MAX_DOCX_BYTES`: the decompressed size of one `.docx` package (and of any
    /// part of it), so that a zip bomb is refused while it is read, not expanded.
    pub max_docx_bytes: usize,
    /// `SLUICE_MAX_HTML_DEPTH`: how deep an HTML page's elements may nest (checked while the
    /// page is tokenised, before its tree is built).
    pub max_html_depth: usize,
    /// `SLUICE_MAX_PDF_STREAM_BYTES`: what one compressed stream of a PDF may inflate to,
    /// checked while inflating, before the parser inflates it.
    pub max_pdf_stream_bytes: usize,
    /// `SLUICE_MAX_PDF_INFLATED_BYTES`: what all of one PDF's compressed streams may inflate
    /// to together.
    pub max_pdf_inflated_bytes: usize,
    /// `SLUICE_MAX_TEXT_BYTES`: text extracted from one file.
    pub max_text_bytes: usize,
    /// `SLUICE_CONVERT_TIMEOUT_MS`: time budget of one file's conversion.
    pub timeout: Duration,
    /// `SLUICE_CONVERT_THREADS`: threads one PDF's pages are read on (default: the cores
    /// there are, at most 4).
    pub threads: usize,
}

impl Default for ConvertLimits {
    fn default() -> Self {
        Self::from_lookup(&|_| None).expect("the defaults are valid")
    }
}

impl ConvertLimits {
    /// Reads the section through `get` (the environment, or a map in tests).
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Ok(Self {
            max_pdf_pages: ranged(get, "SLUICE_MAX_PDF_PAGES", 2000, 1, 100_000)?,
            max_docx_bytes: ranged(get, "SLUICE_MAX_DOCX_BYTES", 256 << 20, 1 << 10, 4 << 30)?,
            max_html_depth: ranged(get, "SLUICE_MAX_HTML_DEPTH", 256, 8, 10_000)?,
            max_pdf_stream_bytes: ranged(
                get,
                "SLUICE_MAX_PDF_STREAM_BYTES",
                64 << 20,
                1 << 10,
                4 << 30,
            )?,
            max_pdf_inflated_bytes: ranged(
                get,
                "SLUICE_MAX_PDF_INFLATED_BYTES",
                256 << 20,
                1 << 10,
                16 << 30,
            )?,
            max_text_bytes: ranged(get, "SLUICE_MAX_TEXT_BYTES", 32 << 20, 1 << 10, 1 << 30)?,
            timeout: millis(get, "SLUICE_CONVERT_TIMEOUT_MS", 60_000, 100)?,
            threads: ranged(get, "SLUICE_CONVERT_THREADS", default_threads(), 1, 64)?,
        })
    }
}

/// The cores there are, at most 4: reading a PDF's pages scales to a few threads, and a
/// server converts one upload per request beside others.
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// What is left of `SLUICE_MAX_TEXT_BYTES` while a file is read.
#[derive(Debug)]
pub struct TextBudget {
    left: usize,
    cap: usize,
}

impl TextBudget {
    /// A budget of `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self { left: cap, cap }
    }

    /// Spends `bytes`, or says the file is over the cap.
    pub fn take(&mut self, bytes: usize) -> Result<(), ConvertError> {
        self.left = self
            .left
            .checked_sub(bytes)
            .ok_or_else(|| self.exceeded())?;
        Ok(())
    }

    /// What is left of it.
    pub fn left(&self) -> usize {
        self.left
    }

    /// The error of a file whose text went over the cap.
    pub fn exceeded(&self) -> ConvertError {
        ConvertError::TooLarge(format!(
            "its text is over {} bytes (SLUICE_MAX_TEXT_BYTES)",
            self.cap
        ))
    }
}

/// Converts `bytes` of a structured `format` (Markdown, HTML, PDF, Word) on this thread.
/// Plain text and JSON are the caller's: they have no structure to find.
pub fn convert(
    format: Format,
    bytes: &[u8],
    limits: &ConvertLimits,
) -> Result<Converted, ConvertError> {
    convert_until(format, bytes, limits, &Cancel::new())
}

/// [`convert`], stopping between steps of bounded cost (a chunk of HTML tokenised, a PDF's
/// page) once `cancel` says so.
pub fn convert_until(
    format: Format,
    bytes: &[u8],
    limits: &ConvertLimits,
    cancel: &Cancel,
) -> Result<Converted, ConvertError> {
    let mut budget = TextBudget::new(limits.max_text_bytes);
    match format {
        Format::Markdown => {
            let text = std::str::from_utf8(bytes)
                .map_err(|e| ConvertError::Malformed(format!("not UTF-8 text ({e})")))?;
            markdown::convert(text, &mut budget)
        }
        Format::Html => html::convert(bytes, limits, &mut budget, cancel),
        Format::Pdf => pdf::convert(bytes, limits, &mut budget, cancel),
        Format::Docx => docx::convert(bytes, limits, &mut budget),
        Format::Text | Format::Json | Format::Jsonl => Err(ConvertError::Malformed(format!(
            "{} has no structure to convert",
            format.name()
        ))),
    }
}

/// What stopped a conversion, as its error.
pub(crate) fn stopped(why: Stopped, limits: &ConvertLimits) -> ConvertError {
    match why {
        Stopped::Cancelled => ConvertError::Cancelled,
        Stopped::TimedOut => ConvertError::TimedOut(limits.timeout),
    }
}

/// [`convert`] on a thread of its own, within `limits.timeout`, with a panic in a parser
/// caught: the file fails, the caller does not. Rust cannot stop a thread, so the work checks
/// `cancel` (and the time budget) between steps of bounded cost — a chunk of HTML tokenised,
/// a PDF's page — and stops there: when the caller gives up, the work ends too. What a step
/// may cost is bounded by the caps ([`ConvertLimits`]) checked before it: nesting while tokenising,
/// inflated bytes before a PDF is parsed, a package's size while it is unzipped.
pub fn convert_contained(
    format: Format,
    bytes: Vec<u8>,
    limits: &ConvertLimits,
    cancel: &Cancel,
) -> Result<Converted, ConvertError> {
    let (send, receive) = std::sync::mpsc::sync_channel(1);
    let thread_limits = limits.clone();
    let thread_cancel = cancel.with_deadline(std::time::Instant::now() + limits.timeout);
    std::thread::Builder::new()
        .name("sluice-convert".into())
        // Parsers recurse on nesting; the default 2 MiB of a spawned thread is too little
        // for a deep (but allowed) document.
        .stack_size(16 << 20)
        .spawn(move || {
            let result = std::panic::catch_unwind(|| {
                convert_until(format, &bytes, &thread_limits, &thread_cancel)
            })
            .unwrap_or_else(|panic| {
                let detail = (panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".into());
                Err(ConvertError::Crashed { detail })
            });
            let _ = send.send(result);
        })
        .map_err(|e| ConvertError::Crashed {
            detail: format!("no thread to convert on: {e}"),
        })?;
    // Past the budget the worker stops at its next check, against the same deadline.
    receive
        .recv_timeout(limits.timeout)
        .unwrap_or(Err(ConvertError::TimedOut(limits.timeout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_name_and_media_type() {
        assert_eq!(Format::from_name("a/b/Guide.PDF"), Some(Format::Pdf));
        assert_eq!(Format::from_name("x.htm"), Some(Format::Html));
        assert_eq!(Format::from_name("x.docx"), Some(Format::Docx));
        assert_eq!(Format::from_name("x.doc"), None);
        assert_eq!(Format::from_name("README"), None);
        assert_eq!(
            Format::from_media_type("text/html; charset=ISO-8859-1"),
            Some(Format::Html)
        );
        assert_eq!(
            Format::from_media_type("application/PDF"),
            Some(Format::Pdf)
        );
        assert_eq!(Format::from_media_type("image/png"), None);
    }

    #[test]
    fn limits_are_settings_with_checked_values() {
        let limits = ConvertLimits::default();
        assert_eq!(limits.max_pdf_pages, 2000);
        let get = sluice_contract::settings::pairs(&[("SLUICE_MAX_PDF_PAGES", "0")]);
        let e = ConvertLimits::from_lookup(&get).unwrap_err();
        assert_eq!(e.name, "SLUICE_MAX_PDF_PAGES");
        let get = sluice_contract::settings::pairs(&[("SLUICE_CONVERT_THREADS", "0")]);
        let e = ConvertLimits::from_lookup(&get).unwrap_err();
        assert_eq!(e.name, "SLUICE_CONVERT_THREADS");
    }
}
