//! Word (`.docx`) to sections: office_oxide reads the package under our caps (its zip layer
//! refuses a part or a package that decompresses past them before allocating, which is what
//! stops a zip bomb) and renders it as Markdown — headings by paragraph style, lists, tables
//! — whose headings [`crate::markdown`] turns into sections.

use std::io::Cursor;

use office_oxide::DocumentFormat;
use office_oxide::core::Error as PackageError;
use office_oxide::docx::DocxError;
use office_oxide::error::OfficeError;
use office_oxide::limits::Limits as PackageLimits;
use office_oxide::options::ParseOptions;

use crate::markdown;
use crate::{ConvertError, ConvertLimits, Converted, TextBudget};

pub fn convert(
    bytes: &[u8],
    limits: &ConvertLimits,
    budget: &mut TextBudget,
) -> Result<Converted, ConvertError> {
    let mut options = ParseOptions::strict();
    options.limits = {
        let mut caps = PackageLimits::strict();
        caps.package_bytes = limits.max_docx_bytes as u64;
        caps.part_bytes = limits.max_docx_bytes as u64;
        caps.text_chars = limits.max_text_bytes;
        caps
    };
    let document = office_oxide::Document::from_reader_with(
        Cursor::new(bytes.to_vec()),
        DocumentFormat::Docx,
        &options,
    )
    .map_err(|e| refusal(e, limits))?;
    let title = document
        .to_ir()
        .metadata
        .title
        .filter(|t| !t.trim().is_empty());
    let mut converted = markdown::convert(&document.to_markdown(), budget)?;
    if title.is_some() {
        converted.title = title;
    }
    Ok(converted)
}

/// A cap the package hit is [`ConvertError::TooLarge`]; anything else is not a `.docx`.
fn refusal(e: OfficeError, limits: &ConvertLimits) -> ConvertError {
    match e {
        OfficeError::Docx(DocxError::Core(
            PackageError::DecompressionLimit { .. } | PackageError::PackageLimit(_),
        )) => ConvertError::TooLarge(format!(
            "it decompresses to more than {} bytes (SLUICE_MAX_DOCX_BYTES): {e}",
            limits.max_docx_bytes
        )),
        e => ConvertError::Malformed(format!("not a readable .docx file ({e})")),
    }
}
