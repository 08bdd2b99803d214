//! What Sluice knows of English text, shared by the cache's guard (are two questions one?)
//! and the grounding check (does a source say what an answer says?):
//!
//! - this file: [`normalise`], and a text read as [`Word`]s that keep their place in it;
//! - [`words`]: the word tables (negations, contractions, phrases, spellings, function words,
//!   numbers and units) and how a text becomes its canonical words;
//! - [`lexicon`]: WordNet's synonyms, antonyms and derivations.

pub mod lexicon;
pub mod words;

use std::ops::Range;

/// Lowercases, drops apostrophes ("can't" → "cant"), keeps digits grouped ("2.5", "1,000" →
/// "1000"), turns every other non-alphanumeric character into a space, and collapses spaces.
/// Two questions with the same normalised text share the exact cache key.
pub fn normalise(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for (i, &c) in chars.iter().enumerate() {
        let digit_around = |j: Option<usize>| {
            j.and_then(|j| chars.get(j))
                .is_some_and(char::is_ascii_digit)
        };
        if c.is_alphanumeric() {
            if space && !out.is_empty() {
                out.push(' ');
            }
            space = false;
            out.extend(c.to_lowercase());
        } else if matches!(c, '\'' | '\u{2019}' | '\u{2018}' | '`') {
            // "can't" and "cant" are the same word to the guard and to the exact key.
        } else if c == ',' && digit_around(i.checked_sub(1)) && digit_around(Some(i + 1)) {
            // Thousands separator: "1,000" == "1000".
        } else if c == '.' && digit_around(i.checked_sub(1)) && digit_around(Some(i + 1)) {
            out.push('.');
        } else {
            space = true;
        }
    }
    out
}

/// A word of a text, where it stands in it: its canonical form (see [`words::canonical_spans`])
/// and the span, in characters, of what it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The canonical form: lowercase, numbers as values, negations as [`words::NOT`].
    pub text: String,
    /// Characters `start..end` of the text it was read from.
    pub span: Range<usize>,
}

/// The words of `text` in order, each with its span in characters: runs of letters and
/// digits (with the apostrophes inside them, and the `,` or `.` between two digits), read as
/// [`normalise`] reads them, then made canonical as the guard makes a question's words (a
/// contraction's two words share its span; a run of number words is one word spanning the run).
pub fn words_in(text: &str) -> Vec<Word> {
    let chars: Vec<char> = text.chars().collect();
    let mut raw: Vec<(String, Range<usize>)> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_alphanumeric() {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() {
            let c = chars[i];
            let joins = |j: usize| chars.get(j).is_some_and(|c| c.is_alphanumeric());
            let digits = |j: usize| chars.get(j).is_some_and(char::is_ascii_digit);
            if c.is_alphanumeric()
                || (matches!(c, '\'' | '\u{2019}') && i > start && joins(i + 1))
                || (matches!(c, ',' | '.' | ':') && digits(i.wrapping_sub(1)) && digits(i + 1))
            {
                i += 1;
            } else {
                break;
            }
        }
        let word: String = chars[start..i].iter().collect();
        // A time of day keeps its colon ("9:30"), which `normalise` would split.
        let read = if word.contains(':') {
            word.to_lowercase()
        } else {
            normalise(&word)
        };
        raw.push((read, start..i));
    }
    let texts: Vec<&str> = raw.iter().map(|(w, _)| w.as_str()).collect();
    words::canonical_spans(&texts)
        .into_iter()
        .map(|(text, from)| Word {
            text,
            span: raw[from.start].1.start..raw[from.end - 1].1.end,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_drops_case_punctuation_and_apostrophes_but_keeps_numbers() {
        assert_eq!(normalise("  What's the FEE?? "), "whats the fee");
        assert_eq!(
            normalise("Can’t I send $1,000.50 (USD)?"),
            "cant i send 1000.50 usd"
        );
        assert_eq!(normalise("v2.5, then 3"), "v2.5 then 3");
        assert_eq!(normalise("end."), "end");
        assert_eq!(
            normalise("Überweisung ins Ausland"),
            "überweisung ins ausland"
        );
        assert_eq!(normalise("?!"), "");
    }

    #[test]
    fn a_word_of_any_script_is_stemmed_whole() {
        // Tamil "தினம்" ends in two characters whose UTF-8 ends in equal bytes.
        for word in ["தினம", "தினம்", "überweisung", "ßß", "日本日本"] {
            let stemmed = words::stem(word);
            assert!(word.starts_with(&stemmed), "{word} → {stemmed}");
        }
        assert_eq!(words::stem("cancelled"), words::stem("cancel"));
    }

    #[test]
    fn a_number_is_its_value_however_it_is_written() {
        let texts = |t: &str| -> Vec<String> { words_in(t).into_iter().map(|w| w.text).collect() };
        assert_eq!(texts("1.5 million"), ["1500000"]);
        assert_eq!(texts("1.5 million"), texts("1,500,000"));
        assert_eq!(texts("two thousand"), ["2000"]);
        assert_eq!(texts("2,000"), ["2000"]);
    }

    #[test]
    fn words_keep_their_place_in_the_text() {
        let text = "It can't cost twenty five dollars, or $1,000.50 at 9:30.";
        let words = words_in(text);
        let shown: Vec<(&str, String)> = words
            .iter()
            .map(|w| {
                let read: String = text.chars().skip(w.span.start).take(w.span.len()).collect();
                (w.text.as_str(), read)
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("it", "It".into()),
                ("can", "can't".into()),
                (words::NOT, "can't".into()),
                ("cost", "cost".into()),
                ("25", "twenty five".into()),
                ("dollars", "dollars".into()),
                ("or", "or".into()),
                ("1000.5", "1,000.50".into()),
                ("at", "at".into()),
                ("9:30", "9:30".into()),
            ]
        );
    }
}
