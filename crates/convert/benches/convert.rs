//! Extraction quality and speed on real documents nobody here wrote, against references
//! nobody here wrote: PDFs against poppler's `pdftotext`, HTML pages against trafilatura's
//! main text (both made by `scripts/setup.sh docs`, which also fetches the files from
//! Debian's documentation packages). Prints a row per file, then the medians and the speed
//! ratios (`pdftotext` run side by side, file by file, in the same loop).
//!
//! `cargo bench -p sluice-convert --bench convert` (part of `make bench`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sluice_convert::{ConvertLimits, Format, convert};

/// Words as both sides are compared: runs of letters and digits, lower-cased, so that
/// markup one tool writes (a table's pipes, quotes set apart) and the other does not is not
/// counted as text.
fn words(text: &str) -> Vec<String> {
    (text.split(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Shares of `ours` found in `reference` and of `reference` found in `ours`, as multisets.
fn overlap(ours: &[String], reference: &[String]) -> (f64, f64) {
    let mut left: HashMap<&str, i64> = HashMap::new();
    for w in reference {
        *left.entry(w.as_str()).or_default() += 1;
    }
    let mut common = 0;
    for w in ours {
        if let Some(n) = left.get_mut(w.as_str())
            && *n > 0
        {
            *n -= 1;
            common += 1;
        }
    }
    let share = |n: usize| {
        if n == 0 {
            0.0
        } else {
            common as f64 / n as f64
        }
    };
    (share(ours.len()), share(reference.len()))
}

fn f1((precision, recall): (f64, f64)) -> f64 {
    if precision + recall == 0.0 {
        0.0
    } else {
        2.0 * precision * recall / (precision + recall)
    }
}

/// Longest common subsequence of words over the longer text: reading order kept.
fn lcs_ratio(ours: &[String], reference: &[String]) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let ops = similar::capture_diff_slices_deadline(
        similar::Algorithm::Myers,
        ours,
        reference,
        Some(deadline),
    );
    let same: usize = (ops.iter())
        .map(|op| match op {
            similar::DiffOp::Equal { len, .. } => *len,
            _ => 0,
        })
        .sum();
    same as f64 / ours.len().max(reference.len()).max(1) as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = (std::fs::read_dir(dir).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    out
}

fn reference(path: &Path) -> String {
    std::fs::read_to_string(format!("{}.ref.txt", path.display())).unwrap_or_default()
}

/// The text a plain tag stripper keeps: every text node of the body.
fn stripped(html: &[u8]) -> String {
    let document = dom_query::Document::from(String::from_utf8_lossy(html).as_ref());
    document.select("script, style").remove();
    document.select("body").text().to_string()
}

/// The process's peak resident set size so far (`VmHWM`), in MB.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (status.lines())
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() {
    let home = std::env::var("SLUICE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/sluice")
        });
    let corpus = std::env::var("SLUICE_DOCS_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| home.join("docs-corpus"));
    let limits = ConvertLimits::default();
    let pdfs = files(&corpus.join("pdf"), "pdf");
    let pages_html = files(&corpus.join("html"), "html");
    if pdfs.is_empty() || pages_html.is_empty() {
        eprintln!(
            "convert: no corpus under {} (scripts/setup.sh docs)",
            corpus.display()
        );
        std::process::exit(1);
    }

    // Memory first, while the process holds nothing else: its peak resident size before and
    // after converting the largest file.
    let largest = (pdfs.iter().chain(&pages_html))
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("a file");
    let before = peak_rss_mb();
    let bytes = std::fs::read(largest).expect("corpus file");
    let format = Format::from_name(&largest.display().to_string()).expect("a format");
    let _ = convert(format, &bytes, &limits);
    let memory = format!(
        "convert: peak RSS {:.0} MB converting the largest file ({}, {:.1} MB) from {before:.0} MB before it",
        peak_rss_mb(),
        largest.file_name().unwrap_or_default().to_string_lossy(),
        bytes.len() as f64 / 1e6
    );
    drop(bytes);

    println!(
        "{:<44} {:>6} {:>6} {:>6} {:>9} {:>9} {:>9}",
        "PDF", "pages", "F1", "order", "sluice", "1 thread", "pdftotext"
    );
    let one_thread = ConvertLimits {
        threads: 1,
        ..limits.clone()
    };
    let (mut f1s, mut orders) = (Vec::new(), Vec::new());
    let (mut ours_total, mut single_total, mut theirs_total, mut pages_total) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO, 0usize);
    for path in &pdfs {
        let bytes = std::fs::read(path).expect("corpus file");
        let started = Instant::now();
        let converted = convert(Format::Pdf, &bytes, &limits);
        let ours = started.elapsed();
        let started = Instant::now();
        let _ = convert(Format::Pdf, &bytes, &one_thread);
        let single = started.elapsed();
        let started = Instant::now();
        let status = std::process::Command::new("pdftotext")
            .args(["-q", "-enc", "UTF-8"])
            .arg(path)
            .arg("/dev/null")
            .status();
        let theirs = started.elapsed();
        assert!(
            status.is_ok_and(|s| s.success()),
            "pdftotext failed on {}",
            path.display()
        );
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let converted = match converted {
            Ok(c) => c,
            Err(e) => {
                println!("{name:<44} failed: {e}");
                f1s.push(0.0);
                orders.push(0.0);
                continue;
            }
        };
        let pages = converted
            .sections
            .iter()
            .filter_map(|s| s.page)
            .max()
            .unwrap_or(0) as usize;
        let text = converted.text();
        let reference = reference(path);
        let (ours_words, reference_words) = (words(&text), words(&reference));
        let f = f1(overlap(&ours_words, &reference_words));
        let order = lcs_ratio(&ours_words, &reference_words);
        println!(
            "{name:<44} {pages:>6} {f:>6.3} {order:>6.3} {:>7.1}ms {:>7.1}ms {:>7.1}ms",
            ours.as_secs_f64() * 1e3,
            single.as_secs_f64() * 1e3,
            theirs.as_secs_f64() * 1e3
        );
        f1s.push(f);
        orders.push(order);
        ours_total += ours;
        single_total += single;
        theirs_total += theirs;
        pages_total += pages;
    }
    let pdf_f1 = median(f1s);
    let pdf_order = median(orders);

    println!();
    println!(
        "{:<44} {:>7} {:>7} {:>9} {:>9}",
        "HTML", "recall", "extra", "stripper", "MB/s"
    );
    let (mut recalls, mut extra, mut stripper_extra) = (Vec::new(), Vec::new(), Vec::new());
    let (mut html_bytes, mut html_time) = (0usize, Duration::ZERO);
    for path in &pages_html {
        let bytes = std::fs::read(path).expect("corpus file");
        let started = Instant::now();
        let converted = convert(Format::Html, &bytes, &limits).expect("HTML converts");
        let took = started.elapsed();
        html_bytes += bytes.len();
        html_time += took;
        let text = converted.text();
        if let Ok(dir) = std::env::var("SLUICE_CONVERT_DUMP") {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let _ = std::fs::write(format!("{dir}/{name}.txt"), &text);
        }
        let reference = reference(path);
        let (ours_words, reference_words) = (words(&text), words(&reference));
        let (precision, recall) = overlap(&ours_words, &reference_words);
        let plain = stripped(&bytes);
        let (plain_precision, _) = overlap(&words(&plain), &reference_words);
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        println!(
            "{name:<44} {recall:>7.3} {:>7.3} {:>9.3} {:>9.1}",
            1.0 - precision,
            1.0 - plain_precision,
            bytes.len() as f64 / took.as_secs_f64() / 1e6
        );
        recalls.push(recall);
        extra.push(1.0 - precision);
        stripper_extra.push(1.0 - plain_precision);
    }

    // DOCX: the HTML pages written as Word documents by office_oxide, read back.
    let (mut docx_bytes, mut docx_time) = (0usize, Duration::ZERO);
    for path in &pages_html {
        let bytes = std::fs::read(path).expect("corpus file");
        let Ok(converted) = convert(Format::Html, &bytes, &limits) else {
            continue;
        };
        let markdown: String = (converted.sections.iter())
            .map(|s| {
                format!(
                    "{} {}\n\n{}\n\n",
                    "#".repeat(s.path.len().max(1)),
                    s.path.last().cloned().unwrap_or_default(),
                    s.text
                )
            })
            .collect();
        let mut docx = std::io::Cursor::new(Vec::new());
        if office_oxide::create::create_from_markdown_to_writer(
            &markdown,
            office_oxide::DocumentFormat::Docx,
            &mut docx,
        )
        .is_err()
        {
            continue;
        }
        let docx = docx.into_inner();
        let started = Instant::now();
        convert(Format::Docx, &docx, &limits).expect("the written .docx converts");
        docx_time += started.elapsed();
        docx_bytes += docx.len();
    }

    println!();
    println!(
        "convert: PDF {} files, median word F1 against pdftotext {pdf_f1:.3}, median reading order (LCS) {pdf_order:.3}",
        pdfs.len()
    );
    println!(
        "convert: PDF {:.0} pages/s on {} threads, {:.0} on one, pdftotext {:.0} pages/s (ratio {:.2}, on one thread {:.2}; pdftotext's time includes starting its process)",
        pages_total as f64 / ours_total.as_secs_f64(),
        limits.threads,
        pages_total as f64 / single_total.as_secs_f64(),
        pages_total as f64 / theirs_total.as_secs_f64(),
        theirs_total.as_secs_f64() / ours_total.as_secs_f64(),
        theirs_total.as_secs_f64() / single_total.as_secs_f64()
    );
    println!(
        "convert: HTML {} pages, median main-text recall against trafilatura {:.3}, median extra words {:.3} (a tag stripper: {:.3}), {:.1} MB/s",
        pages_html.len(),
        median(recalls),
        median(extra),
        median(stripper_extra),
        html_bytes as f64 / html_time.as_secs_f64() / 1e6
    );
    println!("{memory}");
    println!(
        "convert: DOCX {:.1} MB/s ({} files written from the HTML pages)",
        docx_bytes as f64 / docx_time.as_secs_f64() / 1e6,
        pages_html.len()
    );
}
