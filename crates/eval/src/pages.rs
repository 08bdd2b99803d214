//! `sluice eval pages`: whether retrieval over converted PDFs cites the page an answer is on.
//!
//! Every PDF of a folder (by default the conversion benchmark's corpus, Debian's
//! documentation, which `scripts/setup.sh docs` fetches) is converted and ingested as
//! `sluice ingest` would into a fresh Qdrant Edge store. Each labelled question names a phrase
//! of its answer, not a page: the page is found in poppler's text of the files (`<file>.ref.txt`
//! beside each PDF, pages split by form feeds), so that the label holds whatever the package's
//! version and never depends on Sluice's own converter. A question is answered on every page
//! that holds the phrase (the same text may be in two manuals). Each question is searched as a
//! request would (hybrid, plain RRF); it is a hit at k when one of the first k chunks is of a
//! file and spans a page that holds its answer.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sluice_contract::{stages::Search, stages::Store};
use sluice_convert::parse_file;

use crate::{Corpus, EvalError, Result};

/// Chunks looked at per question: the citations of an answer with `k` = 3.
const K: usize = 3;

/// One labelled question (a line of the questions file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuestion {
    /// What is asked, in a user's words.
    pub question: String,
    /// A phrase of the answer, as the PDF prints it (compared with spacing and case ignored).
    pub answer: String,
}

/// A file and a page of it, from 1.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct PageRef {
    /// The PDF's file name (its document id).
    pub file: String,
    /// The page.
    pub page: u32,
}

/// How one question fared.
#[derive(Debug, Clone, Serialize)]
pub struct PageResult {
    /// The question.
    pub question: String,
    /// The pages its answer is on (poppler's text).
    pub answer_pages: Vec<PageRef>,
    /// The first [`K`] chunks: file, first and last page.
    pub cited: Vec<(String, Option<[u32; 2]>)>,
    /// Where the first chunk on an answer page ranks, from 1 (none among the first [`K`]).
    pub rank: Option<usize>,
    /// Whether one of the first [`K`] chunks is of a file the answer is in.
    pub right_file: bool,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct PageReport {
    /// PDFs ingested.
    pub files: usize,
    /// Their pages (poppler's count).
    pub pages: usize,
    /// Chunks they made.
    pub chunks: usize,
    /// Seconds converting every file took.
    pub convert_seconds: f64,
    /// Seconds chunking, embedding and storing took.
    pub ingest_seconds: f64,
    /// Whether each chunk was embedded and indexed with its title and section path.
    pub context_header: bool,
    /// Share of questions with an answer page among the first chunk.
    pub hit_at_1: f64,
    /// … among the first [`K`].
    pub hit_at_3: f64,
    /// Share of questions with a chunk of an answer's file among the first [`K`].
    pub file_at_3: f64,
    /// Each question.
    pub results: Vec<PageResult>,
}

/// Spacing and case folded away, so that a phrase matches across poppler's line breaks.
fn fold(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Each file's pages as poppler printed them (`<file>.ref.txt`, split at form feeds), folded.
fn reference_pages(folder: &Path, files: &[String]) -> Result<BTreeMap<String, Vec<String>>> {
    files
        .iter()
        .map(|file| {
            let path = folder.join(format!("{file}.ref.txt"));
            let text = std::fs::read_to_string(&path).map_err(EvalError::io(format!(
                "reading {} (poppler's text of {file}: run `scripts/setup.sh docs`)",
                path.display()
            )))?;
            Ok((file.clone(), text.split('\u{c}').map(fold).collect()))
        })
        .collect()
}

/// The pages that hold `answer`.
fn answer_pages(references: &BTreeMap<String, Vec<String>>, answer: &str) -> Vec<PageRef> {
    let phrase = fold(answer);
    let mut found = Vec::new();
    for (file, pages) in references {
        for (i, page) in pages.iter().enumerate() {
            if page.contains(&phrase) {
                found.push(PageRef {
                    file: file.clone(),
                    page: i as u32 + 1,
                });
            }
        }
    }
    found
}

/// Where the first cited chunk on an answer page ranks, from 1.
fn first_hit(cited: &[(String, Option<[u32; 2]>)], answers: &[PageRef]) -> Option<usize> {
    cited
        .iter()
        .position(|(file, pages)| {
            pages.is_some_and(|[from, to]| {
                (answers.iter()).any(|a| &a.file == file && (from..=to).contains(&a.page))
            })
        })
        .map(|i| i + 1)
}

/// The built-in questions: 24 on Debian's documentation (the Bash reference manual, the
/// Debian Reference, X.Org's documents), each with a phrase of its answer.
const QUESTIONS: &str = include_str!("../data/pdf-pages.jsonl");

/// Reads a questions file (one [`PageQuestion`] a line), or the built-in ones.
pub fn questions(path: Option<&Path>) -> Result<Vec<PageQuestion>> {
    let (text, name) = match path {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(EvalError::io(format!("reading {}", path.display())))?,
            path.display().to_string(),
        ),
        None => (QUESTIONS.to_string(), "the built-in questions".to_string()),
    };
    (text.lines().enumerate())
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                EvalError::Data(format!(
                    "{name} line {}: expected {{\"question\", \"answer\"}} ({e})",
                    i + 1
                ))
            })
        })
        .collect()
}

/// Runs the evaluation on the PDFs of `folder` and `questions`.
pub async fn run(
    settings: &sluice_app::Settings,
    folder: &Path,
    questions: &[PageQuestion],
    progress: impl Fn(&str),
) -> Result<PageReport> {
    let mut files: Vec<String> = std::fs::read_dir(folder)
        .map_err(EvalError::io(format!(
            "reading {} (run `scripts/setup.sh docs`)",
            folder.display()
        )))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".pdf"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(EvalError::Data(format!(
            "{}: no PDF files",
            folder.display()
        )));
    }
    let references = reference_pages(folder, &files)?;
    let mut labelled = Vec::with_capacity(questions.len());
    for q in questions {
        let pages = answer_pages(&references, &q.answer);
        if pages.is_empty() {
            return Err(EvalError::Data(format!(
                "the answer of \"{}\" is on no page of the PDFs in {} (\"{}\")",
                q.question,
                folder.display(),
                q.answer
            )));
        }
        labelled.push((q, pages));
    }

    let config = &settings.config;
    progress(&format!("converting {} PDFs", files.len()));
    let started = Instant::now();
    let mut documents = Vec::new();
    for file in &files {
        let path = folder.join(file);
        let bytes = std::fs::read(&path).map_err(EvalError::io(path.display().to_string()))?;
        documents.extend(parse_file(file, &bytes, &settings.convert)?);
    }
    let convert_seconds = started.elapsed().as_secs_f64();

    let corpus = Corpus::ingested(settings, documents, &progress).await?;

    let mut results = Vec::with_capacity(labelled.len());
    for (q, answer_pages) in labelled {
        let vector = (corpus.embedder.embed(&[q.question.as_str()])?.pop())
            .ok_or_else(|| EvalError::Pipeline("no query vector".into()))?;
        let hits = corpus
            .edge
            .search(&corpus.tenant, &Search::new(&q.question, &vector, K))
            .await?;
        let cited: Vec<(String, Option<[u32; 2]>)> = (hits.into_iter())
            .map(|h| (h.document.id, h.place.pages))
            .collect();
        let right_file =
            (cited.iter()).any(|(file, _)| answer_pages.iter().any(|a| &a.file == file));
        results.push(PageResult {
            question: q.question.clone(),
            rank: first_hit(&cited, &answer_pages),
            answer_pages,
            cited,
            right_file,
        });
    }
    let share = |hit: &dyn Fn(&PageResult) -> bool| {
        results.iter().filter(|r| hit(r)).count() as f64 / results.len().max(1) as f64
    };
    Ok(PageReport {
        files: files.len(),
        pages: references.values().map(Vec::len).sum(),
        chunks: corpus.chunks,
        convert_seconds,
        ingest_seconds: corpus.ingest_seconds,
        context_header: config.ingest.context_header,
        hit_at_1: share(&|r| r.rank == Some(1)),
        hit_at_3: share(&|r| r.rank.is_some()),
        file_at_3: share(&|r| r.right_file),
        results,
    })
}

/// The report as Markdown: the figures, then each question.
pub fn table(report: &PageReport) -> String {
    let pages = |p: &Option<[u32; 2]>| match p {
        Some([a, b]) if a == b => format!("p. {a}"),
        Some([a, b]) => format!("pp. {a}–{b}"),
        None => "no page".into(),
    };
    let mut out = format!(
        "{} PDFs ({} pages, {} chunks; converted in {:.1} s, ingested in {:.1} s), {} questions, \
         contextual header {}: **hit@1 {:.3}, hit@3 {:.3}**; the right file among the first 3: {:.3}.\n\n\
         | question | answer on | cited (first 3) | rank |\n|---|---|---|---|\n",
        report.files,
        report.pages,
        report.chunks,
        report.convert_seconds,
        report.ingest_seconds,
        report.results.len(),
        if report.context_header { "on" } else { "off" },
        report.hit_at_1,
        report.hit_at_3,
        report.file_at_3,
    );
    for r in &report.results {
        let answer: Vec<String> = (r.answer_pages.iter())
            .map(|a| format!("{} p. {}", a.file, a.page))
            .collect();
        let cited: Vec<String> = (r.cited.iter())
            .map(|(file, p)| format!("{file} {}", pages(p)))
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r.question.replace('|', "\\|"),
            answer.join(", "),
            cited.join("; "),
            r.rank.map_or("–".into(), |k| k.to_string())
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(file: &str, page: u32) -> PageRef {
        PageRef {
            file: file.into(),
            page,
        }
    }

    #[test]
    fn an_answer_is_found_across_line_breaks_and_case_on_every_page_that_holds_it() {
        let references = BTreeMap::from([
            (
                "a.pdf".to_string(),
                "Intro\n\u{c}Set the\nTimeout  here.\u{c}nothing"
                    .split('\u{c}')
                    .map(fold)
                    .collect::<Vec<_>>(),
            ),
            ("b.pdf".to_string(), vec![fold("set the timeout HERE")]),
        ]);
        assert_eq!(
            answer_pages(&references, "set the timeout here"),
            [page("a.pdf", 2), page("b.pdf", 1)]
        );
        assert!(answer_pages(&references, "absent").is_empty());
    }

    #[test]
    fn the_built_in_questions_read_and_each_has_an_answer() {
        let questions = questions(None).unwrap();
        assert_eq!(questions.len(), 24);
        assert!((questions.iter()).all(|q| !q.question.trim().is_empty() && q.answer.len() >= 10));
    }

    #[test]
    fn a_hit_is_a_chunk_of_the_right_file_spanning_an_answer_page() {
        let answers = [page("a.pdf", 7)];
        let cited = |c: &[(&str, Option<[u32; 2]>)]| -> Vec<(String, Option<[u32; 2]>)> {
            c.iter().map(|(f, p)| (f.to_string(), *p)).collect()
        };
        // Page 7 of another file, a chunk without pages, then pages 6–8 of a.pdf: rank 3.
        let list = cited(&[
            ("b.pdf", Some([7, 7])),
            ("a.pdf", None),
            ("a.pdf", Some([6, 8])),
        ]);
        assert_eq!(first_hit(&list, &answers), Some(3));
        assert_eq!(
            first_hit(&cited(&[("a.pdf", Some([7, 7]))]), &answers),
            Some(1)
        );
        assert_eq!(
            first_hit(&cited(&[("a.pdf", Some([8, 9]))]), &answers),
            None
        );
        assert_eq!(first_hit(&[], &answers), None);
    }
}
