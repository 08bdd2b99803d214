//! What hostile files cost the converters before they are refused (docs/security.md has the
//! figures, with the commands): one case per process, so that `/usr/bin/time -v` reports the
//! case's own CPU time and peak memory.
//!
//! `cargo run -p sluice-convert --example hostile -- CASE [N]`, CASE one of:
//! - `pdf-chain N`: a PDF whose content stream is a gibibyte of spaces deflated N times over
//!   (`/Filter [/FlateDecode …]`, N ≥ 2; the audit's file deflated it twice);
//! - `pdf-objstm`: an object stream of the same gibibyte, deflated twice;
//! - `html-lists N`: `<ul><li>` N times (a list the tree builder nests, N deep);
//! - `html-formatting N`: N paragraphs, each reopening every formatting element before it.

use std::io::Write;
use std::time::Instant;

use sluice_convert::{ConvertLimits, Format, convert};

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(data).expect("in memory");
    z.finish().expect("in memory")
}

/// A gibibyte of spaces deflated once, a mebibyte at a time (the stream of each mebibyte is
/// the same once the window is full of spaces, so it is made once and repeated; no checksum:
/// the parsers inflate what comes before one).
fn gibibyte_deflated() -> Vec<u8> {
    const MIB: usize = 1 << 20;
    let spaces = vec![b' '; MIB];
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    let mut ends = vec![];
    for _ in 0..3 {
        z.write_all(&spaces).expect("in memory");
        z.flush().expect("in memory");
        ends.push(z.get_ref().len());
    }
    let out = z.get_ref();
    let mut stream = out[..ends[0]].to_vec();
    for _ in 1..1024 {
        stream.extend_from_slice(&out[ends[0]..ends[1]]);
    }
    stream.extend_from_slice(&[0x03, 0x00]);
    stream
}

/// A PDF of one page whose content stream is `content`, decoded by `filters`, with `extra`
/// objects.
fn pdf(filters: &[&str], content: Vec<u8>, extra: Vec<lopdf::Object>) -> Vec<u8> {
    use lopdf::{Object, Stream, dictionary};
    let mut doc = lopdf::Document::with_version("1.7");
    let pages = doc.new_object_id();
    let filters: Vec<Object> = (filters.iter())
        .map(|f| Object::Name(f.as_bytes().to_vec()))
        .collect();
    let stream = Stream::new(dictionary! {"Filter" => filters}, content).with_compression(false);
    let contents = doc.add_object(stream);
    let page =
        doc.add_object(dictionary! {"Type" => "Page", "Parent" => pages, "Contents" => contents});
    doc.objects.insert(
        pages,
        Object::Dictionary(
            dictionary! {"Type" => "Pages", "Kids" => vec![page.into()], "Count" => 1},
        ),
    );
    let catalog = doc.add_object(dictionary! {"Type" => "Catalog", "Pages" => pages});
    doc.trailer.set("Root", catalog);
    for object in extra {
        doc.add_object(object);
    }
    let mut bytes = Vec::new();
    doc.save_to(&mut bytes).expect("in memory");
    bytes
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = |default: usize| args.get(1).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (format, bytes) = match args.first().map(String::as_str) {
        Some("pdf-chain") => {
            let mut data = gibibyte_deflated();
            for _ in 1..n(2) {
                data = zlib(&data);
            }
            (Format::Pdf, pdf(&vec!["FlateDecode"; n(2)], data, vec![]))
        }
        Some("pdf-objstm") => {
            let data = zlib(&gibibyte_deflated());
            let page = zlib(b"BT /F1 12 Tf 72 700 Td (x) Tj ET");
            let file = sluice_testkit::files::raw_pdf(&[
                ("<< /Type /Catalog /Pages 2 0 R >>", None),
                ("<< /Type /Pages /Kids [3 0 R] /Count 1 >>", None),
                (
                    "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
                    None,
                ),
                ("<< /Filter /FlateDecode >>", Some(&page)),
                (
                    "<< /Type /ObjStm /N 1 /First 4 /Filter [/FlateDecode /FlateDecode] >>",
                    Some(&data),
                ),
            ]);
            (Format::Pdf, file)
        }
        Some("html-lists") => (Format::Html, "<ul><li>".repeat(n(60_000)).into_bytes()),
        Some("html-formatting") => {
            let page: String = (0..n(20_000))
                .map(|i| format!("<p><b id={i}>x</p>"))
                .collect();
            (Format::Html, page.into_bytes())
        }
        _ => {
            eprintln!("usage: hostile pdf-chain N | pdf-objstm | html-lists N | html-formatting N");
            std::process::exit(2);
        }
    };
    let started = Instant::now();
    let outcome = convert(format, &bytes, &ConvertLimits::default());
    println!(
        "{} bytes: {} in {:.3} s",
        bytes.len(),
        match outcome {
            Ok(c) => format!("converted ({} sections)", c.sections.len()),
            Err(e) => format!("refused: {e}"),
        },
        started.elapsed().as_secs_f64()
    );
}
