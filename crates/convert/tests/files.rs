//! Each format converted from a file made for the test (tests/../testkit/src/files.rs): the
//! text, the sections, the pages, and the refusals, as a client would meet them.

use sluice_contract::cancel::Cancel;
use sluice_convert::{ConvertError, ConvertLimits, Converted, Format, convert, convert_contained};
use sluice_testkit::files::{PdfOptions, docx, pdf};

fn paths(c: &Converted) -> Vec<(String, Option<u32>)> {
    (c.sections.iter())
        .map(|s| (s.path.join(" › "), s.page))
        .collect()
}

fn section<'a>(c: &'a Converted, path: &str) -> &'a str {
    (c.sections.iter())
        .find(|s| s.path.join(" › ") == path)
        .map(|s| s.text.as_str())
        .unwrap_or_else(|| panic!("no section {path:?} in {:?}", paths(c)))
}

const BODY: f32 = 10.0;

/// A PDF of `pages` with `outline` (level, title, page), converted.
fn outlined(pages: &[&[(f32, &str)]], outline: &[(u32, &str, u32)]) -> Converted {
    let options = PdfOptions {
        outline,
        ..Default::default()
    };
    convert(Format::Pdf, &pdf(pages, options), &ConvertLimits::default()).unwrap()
}

/// A PDF of `pages` with no outline or password, converted.
fn plain_pdf(pages: &[&[(f32, &str)]]) -> Converted {
    convert(
        Format::Pdf,
        &pdf(pages, PdfOptions::default()),
        &ConvertLimits::default(),
    )
    .unwrap()
}

#[test]
fn pdf_pages_in_order_with_outline_sections() {
    let pages: [&[(f32, &str)]; 3] = [
        &[
            (16.0, "Cards"),
            (BODY, "Debit cards are free."),
            (BODY, "Page 1"),
        ],
        &[
            (14.0, "Lost or stolen"),
            (BODY, "Freeze the card in the app, then call"),
            (BODY, "us. Replacements take five days."),
            (BODY, "Page 2"),
        ],
        &[
            (16.0, "Loans"),
            (BODY, "Loans are priced by risk."),
            (BODY, "Page 3"),
        ],
    ];
    let outline = [(1, "Cards", 1), (2, "Lost or stolen", 2), (1, "Loans", 3)];
    let c = outlined(&pages, &outline);
    assert_eq!(
        paths(&c),
        [
            ("Cards".to_string(), Some(1)),
            ("Cards › Lost or stolen".to_string(), Some(2)),
            ("Loans".to_string(), Some(3)),
        ]
    );
    assert_eq!(
        section(&c, "Cards › Lost or stolen"),
        "Freeze the card in the app, then call us. Replacements take five days."
    );
    // "Page N" sits at the bottom of every page: a running footer, dropped (3 pages is the least
    // that counts).
    assert!(!c.text().contains("Page"), "{}", c.text());
}

#[test]
fn pdf_headings_from_font_sizes_when_there_is_no_outline() {
    let pages: [&[(f32, &str)]; 2] = [
        &[
            (20.0, "Travel"),
            (BODY, "Cards work abroad at no cost in the euro area."),
            (15.0, "Cash"),
            (BODY, "Withdrawals cost two per cent elsewhere."),
        ],
        &[
            (15.0, "Insurance"),
            (BODY, "Travel insurance comes with the gold account only."),
        ],
    ];
    let c = plain_pdf(&pages);
    assert_eq!(
        section(&c, "Travel › Cash"),
        "Withdrawals cost two per cent elsewhere."
    );
    assert_eq!(
        section(&c, "Travel › Insurance"),
        "Travel insurance comes with the gold account only."
    );
    assert_eq!(c.title.as_deref(), Some("Travel"));
}

#[test]
fn pdf_words_hyphenated_at_line_ends_are_joined() {
    let pages: [&[(f32, &str)]; 1] = [&[
        (BODY, "The replace-"),
        (BODY, "ment card and the self-"),
        (BODY, "Service portal."),
    ]];
    let c = plain_pdf(&pages);
    assert_eq!(
        c.text(),
        "The replacement card and the self- Service portal."
    );
}

#[test]
fn a_scan_has_no_text_layer() {
    let pages: [&[(f32, &str)]; 2] = [&[], &[]];
    let e = convert(
        Format::Pdf,
        &pdf(&pages, PdfOptions::default()),
        &ConvertLimits::default(),
    )
    .unwrap_err();
    assert!(matches!(e, ConvertError::NoTextLayer { pages: 2 }), "{e}");
}

#[test]
fn a_password_is_refused_an_empty_one_opens() {
    let pages: [&[(f32, &str)]; 1] = [&[(BODY, "Secret terms.")]];
    let locked = pdf(
        &pages,
        PdfOptions {
            password: Some("hunter2"),
            ..Default::default()
        },
    );
    let e = convert(Format::Pdf, &locked, &ConvertLimits::default()).unwrap_err();
    assert!(matches!(e, ConvertError::Encrypted), "{e}");
    let open = pdf(
        &pages,
        PdfOptions {
            password: Some(""),
            ..Default::default()
        },
    );
    assert_eq!(
        convert(Format::Pdf, &open, &ConvertLimits::default())
            .unwrap()
            .text(),
        "Secret terms."
    );
}

#[test]
fn pages_read_on_many_threads_come_out_as_on_one() {
    // Lines of their own on each page (a line that recurs would be a running header).
    let texts: Vec<String> = (1..=24)
        .map(|n| format!("A {} long page.", "very ".repeat(n).trim_end()))
        .collect();
    let lines: Vec<[(f32, &str); 1]> = texts.iter().map(|t| [(BODY, t.as_str())]).collect();
    let pages: Vec<&[(f32, &str)]> = lines.iter().map(|l| &l[..]).collect();
    let file = pdf(&pages, PdfOptions::default());
    let on = |threads| {
        let limits = ConvertLimits {
            threads,
            ..ConvertLimits::default()
        };
        convert(Format::Pdf, &file, &limits).unwrap()
    };
    let one = on(1);
    let pages_seen: Vec<Option<u32>> = one.sections.iter().map(|s| s.page).collect();
    assert_eq!(pages_seen, (1..=24).map(Some).collect::<Vec<_>>());
    assert!(one.text().contains(&texts[16]), "{}", one.text());
    assert_eq!(
        on(4),
        one,
        "the same sections, pages and order on 4 threads"
    );
    // The text cap holds across threads: 24 pages of 15 to 130 bytes against 1 KiB.
    let limits = ConvertLimits {
        threads: 4,
        max_text_bytes: 1024,
        ..ConvertLimits::default()
    };
    let e = convert(Format::Pdf, &file, &limits).unwrap_err();
    assert!(e.to_string().contains("SLUICE_MAX_TEXT_BYTES"), "{e}");
}

#[test]
fn caps_refuse_what_is_over_them() {
    let page: &[(f32, &str)] = &[(BODY, "A page.")];
    let limits = ConvertLimits {
        max_pdf_pages: 2,
        ..ConvertLimits::default()
    };
    let e = convert(
        Format::Pdf,
        &pdf(&[page, page, page], PdfOptions::default()),
        &limits,
    )
    .unwrap_err();
    assert!(e.to_string().contains("SLUICE_MAX_PDF_PAGES"), "{e}");
    let limits = ConvertLimits {
        max_text_bytes: 1024,
        ..ConvertLimits::default()
    };
    let long = "word ".repeat(200);
    let lines: Vec<(f32, &str)> = (0..20).map(|_| (BODY, long.as_str())).collect();
    let e = convert(Format::Pdf, &pdf(&[&lines], PdfOptions::default()), &limits).unwrap_err();
    assert!(e.to_string().contains("SLUICE_MAX_TEXT_BYTES"), "{e}");
}

#[test]
fn a_parser_panic_is_contained() {
    // pdf-extract panics on a page without a MediaBox: on the conversion's thread, or on one
    // of the threads reading its pages.
    let page: &[(f32, &str)] = &[(BODY, "text")];
    for (pages, threads) in [(1, 1), (6, 3)] {
        let file = pdf(
            &vec![page; pages],
            PdfOptions {
                no_media_box: true,
                ..Default::default()
            },
        );
        let limits = ConvertLimits {
            threads,
            ..ConvertLimits::default()
        };
        let e = convert_contained(Format::Pdf, file, &limits, &Cancel::new()).unwrap_err();
        assert!(matches!(e, ConvertError::Crashed { .. }), "{e}");
        // What the parser said is for the log; the client reads a sentence.
        assert_eq!(
            e.to_string(),
            "the file is malformed: its parser could not read it"
        );
    }
}

#[test]
fn docx_headings_lists_and_tables() {
    let file = docx(
        "# Accounts\n\nWe offer two accounts.\n\n## Fees\n\n- No monthly fee\n- Free transfers\n\n| Account | Rate |\n|---|---|\n| Saver | 3% |\n",
    );
    let c = convert(Format::Docx, &file, &ConvertLimits::default()).unwrap();
    assert_eq!(section(&c, "Accounts"), "We offer two accounts.");
    let fees = section(&c, "Accounts › Fees");
    for part in ["No monthly fee", "Free transfers", "Saver", "3%"] {
        assert!(fees.contains(part), "{part:?} missing from {fees:?}");
    }
}

#[test]
fn a_docx_that_decompresses_past_the_cap_is_refused() {
    let file = docx(&"All work and no play. ".repeat(20_000));
    assert!(
        file.len() < 64 << 10,
        "the test file is small compressed: {}",
        file.len()
    );
    let limits = ConvertLimits {
        max_docx_bytes: 64 << 10,
        ..ConvertLimits::default()
    };
    let e = convert(Format::Docx, &file, &limits).unwrap_err();
    assert!(matches!(e, ConvertError::TooLarge(_)), "{e}");
    assert!(e.to_string().contains("SLUICE_MAX_DOCX_BYTES"), "{e}");
    // Under the default cap it reads.
    assert!(convert(Format::Docx, &file, &ConvertLimits::default()).is_ok());
}

#[test]
fn garbage_in_each_format_is_an_error_not_a_panic() {
    let garbage = b"\x00\x01garbage\xff".to_vec();
    for format in [Format::Pdf, Format::Docx, Format::Markdown] {
        let result = convert_contained(
            format,
            garbage.clone(),
            &ConvertLimits::default(),
            &Cancel::new(),
        );
        assert!(
            matches!(result, Err(ConvertError::Malformed(_))),
            "{format:?}: {result:?}"
        );
    }
    // Any bytes are an HTML page (browsers show them too): its text is read.
    let page = convert_contained(
        Format::Html,
        garbage,
        &ConvertLimits::default(),
        &Cancel::new(),
    )
    .unwrap();
    assert!(page.text().contains("garbage"), "{page:?}");
}

/// An outline that is not a tree (an entry its own first child, or the last entry's `Next`
/// the first) is read as no outline: lopdf would recurse until the converting thread's stack
/// overflowed (the process died; found by the fuzzer), or loop for ever. The headings then
/// come from the font sizes.
#[test]
fn a_pdf_whose_outline_leads_back_to_itself_converts_without_it() {
    let pages: [&[(f32, &str)]; 2] = [
        &[(16.0, "Cards"), (BODY, "Debit cards are free.")],
        &[(16.0, "Loans"), (BODY, "Loans are priced by risk.")],
    ];
    let outline = [(1, "Cards", 1), (1, "Loans", 2)];
    let file = pdf(
        &pages,
        PdfOptions {
            outline: &outline,
            ..Default::default()
        },
    );
    for cycle in ["First", "Next"] {
        let mut doc = lopdf::Document::load_mem(&file).unwrap();
        let root = doc.catalog().unwrap().get(b"Outlines").unwrap().clone();
        let root = doc.get_object(root.as_reference().unwrap()).unwrap();
        let first = root
            .as_dict()
            .unwrap()
            .get(b"First")
            .unwrap()
            .as_reference()
            .unwrap();
        let last = root
            .as_dict()
            .unwrap()
            .get(b"Last")
            .unwrap()
            .as_reference()
            .unwrap();
        // First: the first entry is its own child. Next: the last entry is followed by the first.
        let (entry, to) = if cycle == "First" {
            (first, first)
        } else {
            (last, first)
        };
        doc.get_object_mut(entry)
            .unwrap()
            .as_dict_mut()
            .unwrap()
            .set(cycle, lopdf::Object::Reference(to));
        let mut bytes = Vec::new();
        doc.save_to(&mut bytes).unwrap();
        let c = convert_contained(
            Format::Pdf,
            bytes,
            &ConvertLimits::default(),
            &Cancel::new(),
        )
        .unwrap();
        assert_eq!(
            paths(&c),
            [
                ("Cards".to_string(), Some(1)),
                ("Loans".to_string(), Some(2))
            ],
            "{cycle}"
        );
    }
}

/// A PDF of `pages` pages, each of whose content streams is `inflated` spaces, deflated: a
/// decompression bomb when `inflated` is large (a gibibyte of spaces deflates to about a
/// megabyte).
fn bomb(pages: usize, inflated: usize) -> Vec<u8> {
    with_contents(pages, &["FlateDecode"], spaces_zlib(inflated))
}

/// A PDF of `pages` pages whose content streams are `content`, decoded by `filters` in turn.
fn with_contents(pages: usize, filters: &[&str], content: Vec<u8>) -> Vec<u8> {
    let page: &[(f32, &str)] = &[(BODY, "text")];
    let file = pdf(&vec![page; pages], PdfOptions::default());
    let mut doc = lopdf::Document::load_mem(&file).unwrap();
    let ids: Vec<_> = doc.get_pages().into_values().collect();
    let filters: Vec<lopdf::Object> = (filters.iter())
        .map(|f| lopdf::Object::Name(f.as_bytes().to_vec()))
        .collect();
    for page in ids {
        let id = doc.get_page_contents(page)[0];
        let stream = lopdf::Stream::new(
            lopdf::dictionary! {"Filter" => filters.clone()},
            content.clone(),
        )
        .with_compression(false);
        doc.objects.insert(id, lopdf::Object::Stream(stream));
    }
    let mut bytes = Vec::new();
    doc.save_to(&mut bytes).unwrap();
    bytes
}

/// `data`, deflated.
fn zlib(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(data).unwrap();
    z.finish().unwrap()
}

/// `data` in ASCII85, with its end marker.
fn ascii85(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for group in data.chunks(4) {
        let mut word = [0u8; 4];
        word[..group.len()].copy_from_slice(group);
        let mut value = u32::from_be_bytes(word);
        let mut digits = [0u8; 5];
        for d in digits.iter_mut().rev() {
            *d = b'!' + (value % 85) as u8;
            value /= 85;
        }
        out.extend_from_slice(&digits[..group.len() + 1]);
    }
    out.extend_from_slice(b"~>");
    out
}

/// A zlib stream of `n` spaces (at least a mebibyte), made without compressing them all (a
/// gibibyte took seconds of the test's CPU): after a sync flush the window holds only spaces,
/// so deflate's output for every further mebibyte is the same — compressed twice here to show
/// it — and is repeated; then the rest, an empty final block, and Adler-32's closed form for
/// one repeated byte.
fn spaces_zlib(n: usize) -> Vec<u8> {
    use std::io::Write;
    const MIB: usize = 1 << 20;
    assert!(n >= MIB, "{n}");
    let spaces = vec![b' '; MIB];
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    // Where the output of each step ends: the first mebibyte (after the header), two more, and
    // what is left over a whole number of mebibytes.
    let mut ends = vec![];
    for len in [MIB, MIB, MIB, n % MIB] {
        z.write_all(&spaces[..len]).unwrap();
        z.flush().unwrap();
        ends.push(z.get_ref().len());
    }
    let out = z.get_ref();
    let repeated = &out[ends[0]..ends[1]];
    assert_eq!(
        repeated,
        &out[ends[1]..ends[2]],
        "a mebibyte's output repeats"
    );
    let mut stream = out[..ends[0]].to_vec();
    for _ in 1..n / MIB {
        stream.extend_from_slice(repeated);
    }
    stream.extend_from_slice(&out[ends[2]..ends[3]]);
    // An empty final block (fixed Huffman codes: BFINAL, BTYPE 01, end of block).
    stream.extend_from_slice(&[0x03, 0x00]);
    let (m, n, c) = (65_521u64, n as u64, u64::from(b' '));
    let a = (1 + c * (n % m)) % m;
    let b = (n % m + c * ((n * (n + 1) / 2) % m)) % m;
    stream.extend_from_slice(&(((b << 16) | a) as u32).to_be_bytes());
    stream
}

/// A PDF whose streams inflate past the caps is refused while they are inflated — into a
/// small buffer, counting — before the parser inflates anything whole: per stream, and for
/// the file in all.
#[test]
fn a_pdf_whose_streams_inflate_past_the_caps_is_refused_while_inflating() {
    // The stream the files are made of inflates to what it says, checksum and all.
    let mut back = Vec::new();
    let small = spaces_zlib(5 << 19);
    std::io::Read::read_to_end(&mut flate2::read::ZlibDecoder::new(&small[..]), &mut back).unwrap();
    assert!(back.len() == 5 << 19 && back.iter().all(|&b| b == b' '));
    // The audit's file: about a megabyte that inflates to a gibibyte, under the default caps.
    let file = bomb(1, 1 << 30);
    assert!(file.len() < 2 << 20, "{} bytes", file.len());
    let e = convert(Format::Pdf, &file, &ConvertLimits::default()).unwrap_err();
    assert!(matches!(e, ConvertError::TooLarge(_)), "{e}");
    assert!(e.to_string().contains("SLUICE_MAX_PDF_STREAM_BYTES"), "{e}");
    let limits = ConvertLimits {
        max_pdf_stream_bytes: 3 << 20,
        max_pdf_inflated_bytes: 4 << 20,
        ..ConvertLimits::default()
    };
    // Each stream under its cap, the two over the file's together.
    let e = convert(Format::Pdf, &bomb(2, 5 << 19), &limits).unwrap_err();
    assert!(
        e.to_string().contains("SLUICE_MAX_PDF_INFLATED_BYTES"),
        "{e}"
    );
    // Under both, the file is read (its pages hold only spaces: no text).
    let e = convert(Format::Pdf, &bomb(1, 5 << 19), &limits).unwrap_err();
    assert!(matches!(e, ConvertError::NoTextLayer { .. }), "{e}");
}

/// The cap holds across every decoding step of every filter chain, whatever the chain: a
/// stream deflated twice (the audit's 2,447-byte file decoded to gigabytes in the parser),
/// three times, or wrapped in ASCII85, is refused while it is decoded; so is an object
/// stream, which the parser would expand while loading the file.
#[test]
fn a_chain_of_filters_is_bounded_at_every_step() {
    let once = spaces_zlib(1 << 30);
    let twice = zlib(&once);
    let thrice = zlib(&twice);
    assert!(
        thrice.len() < twice.len() && twice.len() < 64 << 10,
        "{}",
        twice.len()
    );
    let flate = "FlateDecode";
    for (filters, content) in [
        (vec![flate, flate], twice.clone()),
        (vec![flate, flate, flate], thrice.clone()),
        (vec!["ASCII85Decode", flate, flate], ascii85(&twice)),
    ] {
        let file = with_contents(1, &filters, content);
        let e = convert(Format::Pdf, &file, &ConvertLimits::default()).unwrap_err();
        assert!(
            e.to_string().contains("SLUICE_MAX_PDF_STREAM_BYTES"),
            "{filters:?}: {e}"
        );
    }
    // Under the caps, a chained stream is read like any other.
    let text = b"BT /F1 12 Tf 72 700 Td (Chained filters are read.) Tj ET";
    let file = with_contents(
        1,
        &["ASCII85Decode", flate, flate],
        ascii85(&zlib(&zlib(text))),
    );
    let c = convert(Format::Pdf, &file, &ConvertLimits::default()).unwrap();
    assert!(
        c.text().contains("Chained filters are read."),
        "{:?}",
        c.text()
    );
    // An object stream (which lopdf expands while it loads the file, before any page is read)
    // whose data is the twice-deflated gibibyte. Read whole, the same file with a small
    // object stream converts: it is the chain that is refused.
    let page = zlib(b"BT /F1 12 Tf 72 700 Td (Read past an object stream.) Tj ET");
    let with_object_stream = |data: &[u8]| {
        sluice_testkit::files::raw_pdf(&[
            ("<< /Type /Catalog /Pages 2 0 R >>", None),
            ("<< /Type /Pages /Kids [3 0 R] /Count 1 >>", None),
            (
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
                 /Resources << /Font << /F1 5 0 R >> >> >>",
                None,
            ),
            ("<< /Filter /FlateDecode >>", Some(&page)),
            (
                "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
                None,
            ),
            (
                "<< /Type /ObjStm /N 1 /First 4 /Filter [/FlateDecode /FlateDecode] >>",
                Some(data),
            ),
        ])
    };
    let small = zlib(&zlib(b"7 0 << /Title (kept) >>"));
    let c = convert(
        Format::Pdf,
        &with_object_stream(&small),
        &ConvertLimits::default(),
    );
    assert!(c.unwrap().text().contains("Read past an object stream."));
    let e = convert(
        Format::Pdf,
        &with_object_stream(&twice),
        &ConvertLimits::default(),
    )
    .unwrap_err();
    assert!(matches!(e, ConvertError::TooLarge(_)), "{e}");
}

/// The threads converting files that are alive now.
fn converting_threads() -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").expect("Linux's /proc");
    (tasks.flatten())
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|name| name.trim() == "sluice-convert")
        })
        .count()
}

/// Work ends with its conversion: ten pages nested a million deep are each refused while
/// tokenised, and a conversion stopped by its time limit (or by its caller) stops between
/// pages — no converting thread outlives its answer for long. Waited on by watching the
/// threads end (they must, within a minute however busy the machine; before, a PDF's pages
/// were all read to the end on a thread nobody waited for).
#[test]
fn no_conversion_outlives_its_request() {
    let deep = "<div>".repeat(1_000_000).into_bytes();
    for _ in 0..10 {
        let e = convert_contained(
            Format::Html,
            deep.clone(),
            &ConvertLimits::default(),
            &Cancel::new(),
        );
        assert!(e.unwrap_err().to_string().contains("SLUICE_MAX_HTML_DEPTH"));
    }
    let page: &[(f32, &str)] = &[(BODY, "Cards are replaced within five days. ")];
    let long = pdf(&vec![page; 2000], PdfOptions::default());
    let hurried = ConvertLimits {
        timeout: std::time::Duration::from_millis(1),
        threads: 1,
        ..ConvertLimits::default()
    };
    let e = convert_contained(Format::Pdf, long.clone(), &hurried, &Cancel::new()).unwrap_err();
    assert!(matches!(e, ConvertError::TimedOut(_)), "{e}");
    // Cancelled by its caller (the client left) rather than by time.
    let cancel = Cancel::new();
    let caller = cancel.clone();
    let worker = std::thread::spawn(move || {
        convert_contained(Format::Pdf, long, &ConvertLimits::default(), &caller)
    });
    cancel.cancel();
    let e = worker.join().unwrap().unwrap_err();
    assert!(matches!(e, ConvertError::Cancelled), "{e}");
    let waited = std::time::Instant::now();
    while converting_threads() > 0 {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "a conversion thread is still running"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The outline is read only while it is a small enough tree: about 10,000 entries and 64
/// levels. Past either, the PDF converts with its headings from font sizes instead. Told
/// apart here by the outline setting "Loans" under "Cards", where the font sizes (both 16
/// pt) make them siblings.
#[test]
fn an_outline_past_its_limits_is_not_read() {
    let pages: [&[(f32, &str)]; 2] = [
        &[(16.0, "Cards"), (BODY, "Debit cards are free.")],
        &[(16.0, "Loans"), (BODY, "Loans are priced by risk.")],
    ];
    let paths_with = |extra: &[(u32, String, u32)]| {
        let mut outline: Vec<(u32, &str, u32)> = vec![(1, "Cards", 1), (2, "Loans", 2)];
        outline.extend(extra.iter().map(|(l, t, p)| (*l, t.as_str(), *p)));
        outlined(&pages, &outline)
            .sections
            .iter()
            .map(|s| s.path.join(" › "))
            .collect::<Vec<_>>()
    };
    let from_outline = ["Cards", "Cards › Loans"];
    let from_sizes = ["Cards", "Loans"];
    assert_eq!(paths_with(&[]), from_outline);
    // Entries: 2 + 9,997 fillers is within; 2 + 9,999 is not.
    let fillers = |n: usize| {
        (0..n)
            .map(|i| (1, format!("filler {i}"), 2))
            .collect::<Vec<_>>()
    };
    assert_eq!(paths_with(&fillers(9_997)), from_outline);
    assert_eq!(paths_with(&fillers(9_999)), from_sizes);
    // Levels: a chain nested to level 64 is within; to 65 is not.
    let chain = |deepest: u32| {
        (3..=deepest)
            .map(|l| (l, format!("level {l}"), 2))
            .collect::<Vec<_>>()
    };
    assert_eq!(paths_with(&chain(64)), from_outline);
    assert_eq!(paths_with(&chain(65)), from_sizes);
}
