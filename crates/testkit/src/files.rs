//! Files the conversion tests upload, made here with the writers of the libraries that read
//! them (lopdf for PDF, office_oxide for Word), so that each test states what its file holds:
//! pages of lines in given font sizes, an outline, a password, a page of no text.

use lopdf::content::{Content, Operation};
use lopdf::{Bookmark, Document, Object, ObjectId, Stream, dictionary};

/// A PDF page: its lines, top to bottom, each in a font size.
pub type PdfPage<'a> = &'a [(f32, &'a str)];

/// How a made PDF differs from a plain one.
#[derive(Debug, Clone, Copy, Default)]
pub struct PdfOptions<'a> {
    /// Outline entries: level (1 outermost), title, page (from 1).
    pub outline: &'a [(u32, &'a str, u32)],
    /// Encrypted with this user password.
    pub password: Option<&'a str>,
    /// Pages with no MediaBox (which pdf-extract panics on: the containment test's file).
    pub no_media_box: bool,
}

/// A PDF of `pages`, set in Helvetica (a standard font every reader knows).
pub fn pdf(pages: &[PdfPage<'_>], options: PdfOptions<'_>) -> Vec<u8> {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font = doc.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica",
    });
    let resources = doc.add_object(dictionary! { "Font" => dictionary! { "F1" => font } });
    let mut kids: Vec<ObjectId> = Vec::new();
    for lines in pages {
        let mut operations = Vec::new();
        let mut y = 800.0;
        for (size, text) in lines.iter() {
            y -= size * 1.6;
            operations.extend([
                Operation::new("BT", vec![]),
                Operation::new("Tf", vec!["F1".into(), (*size).into()]),
                Operation::new("Td", vec![60.into(), y.into()]),
                Operation::new("Tj", vec![Object::string_literal(*text)]),
                Operation::new("ET", vec![]),
            ]);
        }
        if lines.is_empty() {
            // A page of a scan: a drawn rectangle (standing in for the image), no text.
            operations.extend([
                Operation::new("re", vec![50.into(), 50.into(), 400.into(), 600.into()]),
                Operation::new("f", vec![]),
            ]);
        }
        let content = Content { operations }.encode().expect("content encodes");
        let content = doc.add_object(Stream::new(dictionary! {}, content));
        let mut page = dictionary! {
            "Type" => "Page", "Parent" => pages_id, "Contents" => content, "Resources" => resources,
        };
        if !options.no_media_box {
            page.set("MediaBox", vec![0.into(), 0.into(), 595.into(), 842.into()]);
        }
        kids.push(doc.add_object(page));
    }
    let count = kids.len() as i64;
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages",
            "Kids" => kids.iter().map(|&k| Object::Reference(k)).collect::<Vec<_>>(),
            "Count" => count,
        }),
    );
    let catalog = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
    doc.trailer.set("Root", catalog);
    // Bookmarks under the last open one of the level above.
    let mut open: Vec<(u32, u32)> = Vec::new();
    for &(level, title, page) in options.outline {
        open.retain(|(l, _)| *l < level);
        let parent = open.last().map(|(_, id)| *id);
        let bookmark = Bookmark::new(title.into(), [0.0; 3], 0, kids[page as usize - 1]);
        open.push((level, doc.add_bookmark(bookmark, parent)));
    }
    if let Some(outline) = doc.build_outline()
        && let Ok(Object::Dictionary(catalog)) = doc.get_object_mut(catalog)
    {
        catalog.set("Outlines", Object::Reference(outline));
    }
    doc.trailer.set(
        "ID",
        vec![
            Object::string_literal("sluice-test-file"),
            Object::string_literal("sluice-test-file"),
        ],
    );
    if let Some(password) = options.password {
        let version = lopdf::EncryptionVersion::V2 {
            document: &doc,
            owner_password: password,
            user_password: password,
            key_length: 128,
            permissions: lopdf::Permissions::all(),
        };
        let state = lopdf::EncryptionState::try_from(version).expect("encryption state");
        doc.encrypt(&state).expect("the PDF encrypts");
    }
    let mut bytes = Vec::new();
    doc.save_to(&mut bytes).expect("the PDF is written");
    bytes
}

/// A Word document of `markdown` (headings, lists, tables), written by office_oxide.
pub fn docx(markdown: &str) -> Vec<u8> {
    let mut bytes = std::io::Cursor::new(Vec::new());
    office_oxide::create::create_from_markdown_to_writer(
        markdown,
        office_oxide::DocumentFormat::Docx,
        &mut bytes,
    )
    .expect("the .docx is written");
    bytes.into_inner()
}

/// A PDF written byte by byte, for shapes lopdf's writer does not keep (it drops object
/// streams it did not make): `objects[i]` is object `i + 1`'s dictionary, with its stream's
/// data when it has one (`/Length` is added); object 1 must be the catalog. The
/// cross-reference table is exact.
pub fn raw_pdf(objects: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
    let mut out = b"%PDF-1.7\n%\xE2\xE3\xCF\xD3\n".to_vec();
    let mut offsets = Vec::with_capacity(objects.len());
    for (i, (dictionary, stream)) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        match stream {
            None => out.extend_from_slice(dictionary.as_bytes()),
            Some(data) => {
                let open = dictionary.trim_end().trim_end_matches(">>");
                out.extend_from_slice(
                    format!("{open} /Length {} >>\nstream\n", data.len()).as_bytes(),
                );
                out.extend_from_slice(data);
                out.extend_from_slice(b"\nendstream");
            }
        }
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for at in offsets {
        out.extend_from_slice(format!("{at:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}
