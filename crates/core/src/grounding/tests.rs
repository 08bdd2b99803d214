//! The evidence and the verdict on the sample corpus's own documents, with answers made from
//! them: reworded (which must pass) and with one fact changed (which must not).

use super::*;
use sluice_contract::grounding::FactKind;

fn sample(name: &str) -> String {
    let path = format!("{}/../../samples/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    // The chunk text starts after the front matter, as ingest stores it.
    match text
        .strip_prefix("---\n")
        .and_then(|t| t.split_once("\n---\n"))
    {
        Some((_, body)) => body.trim_start().to_string(),
        None => text,
    }
}

fn none() -> Lexicon {
    Lexicon::default()
}

/// The verdict on `answer` over the named samples.
fn check(answer: &str, names: &[&str]) -> Grounding {
    let texts: Vec<String> = names.iter().map(|n| sample(n)).collect();
    let sources: Vec<&str> = texts.iter().map(String::as_str).collect();
    verdict(answer, &sources, &none())
}

use sluice_contract::grounding::Grounding;

#[track_caller]
fn supported(answer: &str, names: &[&str]) {
    let g = check(answer, names);
    assert_eq!(g.unsupported, 0, "{answer:?} was found unsupported: {g:#?}");
}

#[track_caller]
fn unsupported(answer: &str, names: &[&str], fact: &str) -> Grounding {
    let g = check(answer, names);
    assert_eq!(g.unsupported, 1, "{answer:?} passed: {g:#?}");
    let facts: Vec<&str> = g
        .sentences
        .iter()
        .flat_map(|s| &s.unsupported_facts)
        .map(|f| f.text.as_str())
        .collect();
    assert!(
        facts.contains(&fact),
        "{answer:?}: {fact:?} not among the unsupported facts {facts:?}"
    );
    g
}

const ALL: &[&str] = &[
    "lost-card.md",
    "card-limits.md",
    "savings-rates.md",
    "international-transfers.md",
    "password-reset.md",
];

#[test]
fn a_sentence_a_source_states_is_supported_however_it_is_worded() {
    supported(
        "A replacement card arrives within 5 business days [1].",
        ALL,
    );
    supported("Replacement cards arrive in five business days.", ALL);
    supported("Express delivery in two business days costs $15 [1].", ALL);
    supported(
        "Premium checking accounts can withdraw up to $1,000 per day [2].",
        ALL,
    );
    supported(
        "The Everyday Saver account pays 2.1% annual interest [3].",
        ALL,
    );
    supported(
        "The Goal Saver pays 3.4% if you make no more than one withdrawal per month.",
        ALL,
    );
}

#[test]
fn a_fact_of_one_option_said_of_another_is_unsupported() {
    // The sentence has "two business days" — for express delivery.
    let g = unsupported(
        "A replacement card arrives within two business days [1].",
        ALL,
        "two",
    );
    let s = &g.sentences[0];
    assert_eq!(s.cites, [1]);
    let evidence = s.evidence.as_ref().expect("the closest passage");
    assert_eq!(evidence.source, 1);
    assert!(
        evidence
            .text
            .starts_with("A replacement card arrives within five"),
        "{evidence:?}"
    );
    assert_eq!(s.unsupported_facts[0].kind, FactKind::Duration);
    // $15 is what express delivery costs, not the card.
    unsupported("A replacement card costs $15.", ALL, "$15");
    // 1.00% is the Goal Saver's rate in a month with more withdrawals.
    unsupported(
        "The Goal Saver pays 1.00% on balances up to $50,000.",
        ALL,
        "1.00%",
    );
}

#[test]
fn a_changed_number_name_or_negation_is_unsupported_and_spanned() {
    let answer = "The daily ATM limit on a premium account is $25.";
    let g = unsupported(answer, ALL, "$25");
    let fact = &g.sentences[0].unsupported_facts[0];
    let spanned: String = answer
        .chars()
        .skip(fact.start)
        .take(fact.end - fact.start)
        .collect();
    assert_eq!(spanned, "$25");
    assert_eq!(fact.kind, FactKind::Amount);
    unsupported("A frozen card does not decline new payments.", ALL, "not");
    unsupported(
        "You can pay with the virtual card in Samsung Pay.",
        ALL,
        "Samsung",
    );
}

#[test]
fn a_sentence_from_no_source_is_unsupported_and_nothing_to_check_is_not() {
    let g = check(
        "Mortgage overpayments are free up to 10% a year. I hope this helps!",
        &["lost-card.md"],
    );
    assert_eq!(g.unsupported, 1, "{g:#?}");
    assert!(!g.sentences[0].supported);
    assert!(g.sentences[1].supported, "{g:#?}");
    let g = check("I don't know.", &["lost-card.md"]);
    assert_eq!((g.unsupported, g.score), (0, 1.0), "{g:#?}");
}

#[test]
fn every_sentence_is_spanned_with_its_citations() {
    let answer =
        "Freeze the card in the app [1]. A replacement arrives within five business days [1][2].";
    let g = check(answer, &["lost-card.md", "card-limits.md"]);
    let spans: Vec<String> = (g.sentences.iter())
        .map(|s| answer.chars().skip(s.start).take(s.end - s.start).collect())
        .collect();
    assert_eq!(
        spans,
        [
            "Freeze the card in the app [1].",
            "A replacement arrives within five business days [1][2]."
        ]
    );
    assert_eq!(g.sentences[1].cites, [1, 2]);
    assert_eq!(g.unsupported, 0, "{g:#?}");
}

#[test]
fn highlights_are_the_sentences_that_answer_best_first() {
    let texts = [sample("card-limits.md"), sample("lost-card.md")];
    let sources: Vec<&str> = texts.iter().map(String::as_str).collect();
    let found = evidence(
        "How long does a replacement card take to arrive?",
        &sources,
        &none(),
    );
    let extract = found.extract.expect("an extract");
    assert_eq!(extract.source, 2);
    assert!(
        extract
            .text
            .starts_with("A replacement card arrives within five business days"),
        "{extract:?}"
    );
    let chars: Vec<char> = texts[1].chars().collect();
    let at: String = chars[extract.start..extract.end].iter().collect();
    assert_eq!(at, extract.text);
    assert_eq!(found.highlights[1][0].text, extract.text);
    let found = evidence(
        "What is the daily ATM limit on a premium account?",
        &sources,
        &none(),
    );
    let top = &found.highlights[0][0];
    assert!(
        top.text
            .starts_with("Premium checking accounts can withdraw up to $1,000"),
        "{found:#?}"
    );
    assert!(found.highlights[0].len() <= evidence::HIGHLIGHTS_PER_SOURCE);
}

/// A claim with nothing behind it is not supported, cited or not: no word of it near any
/// source and no fact to look up does not make it a courtesy. What is said to the reader
/// ("I hope this helps!") still is one.
#[test]
fn a_claim_no_source_comes_near_is_unsupported() {
    for claim in [
        "The moon is made of green cheese.",
        "Cats are excellent pilots and often fly commercial jets.",
    ] {
        let g = check(claim, &["lost-card.md"]);
        assert_eq!(g.unsupported, 1, "{claim}: {g:#?}");
    }
    for courtesy in [
        "I hope this helps!",
        "Let me know if you have any other questions.",
        "Feel free to ask if anything is unclear.",
    ] {
        let g = check(courtesy, &["lost-card.md"]);
        assert_eq!(g.unsupported, 0, "{courtesy}: {g:#?}");
    }
}

/// Characters that look like a number, or hide inside one, read as what a reader reads:
/// fullwidth digits are digits, a zero-width space inside "fifty" leaves "fifty" — a changed
/// number is caught however it is written, and spans stay in the answer as written.
#[test]
fn lookalike_and_hidden_characters_carry_no_fact_past_the_check() {
    let wrong = [
        "A replacement card arrives within \u{FF19} business days [1].",
        "A replacement card arrives within fi\u{200B}fty business days [1].",
        "A replacement card arrives within \u{FEFF}nine business days [1].",
    ];
    for answer in wrong {
        let g = check(answer, &["lost-card.md"]);
        assert_eq!(g.unsupported, 1, "{answer}: {g:#?}");
        let fact = &g.sentences[0].unsupported_facts[0];
        let spanned: String = (answer.chars())
            .skip(fact.start)
            .take(fact.end - fact.start)
            .collect();
        assert_eq!(spanned, fact.text, "{answer}");
        assert!(!fact.text.is_empty(), "{answer}");
    }
    // The same numbers written the same way as the source, in look-alike characters: still
    // supported.
    for answer in [
        "A replacement card arrives within fi\u{200B}ve business days [1].",
        "A replacement card arrives within \u{FF15} business days [1].",
    ] {
        let g = check(answer, &["lost-card.md"]);
        assert_eq!(g.unsupported, 0, "{answer}: {g:#?}");
        let end = g.sentences[0].end;
        assert_eq!(end, answer.chars().count(), "{answer}");
    }
}

#[test]
fn a_span_that_ends_at_a_comma_reads_no_word_past_its_end() {
    // A comma at the span's last place, the next sentence's space and "but" after it: the
    // clause split looks for the conjunction inside the span only (it read past the end, and
    // panicked, when a sentence was cut there).
    let chars: Vec<char> = "Five days, but more abroad.".chars().collect();
    let clauses = super::segment::clauses(&chars, 0..10);
    assert_eq!(clauses.len(), 1, "{clauses:?}");
    assert_eq!(clauses[0].start, 0);
    assert!(clauses[0].end <= 10, "{clauses:?}");
}
