//! Query normalisation and the false-hit guard.
//!
//! Embeddings of "how do I turn on X" and "how do I turn off X" are nearly identical (cosine
//! ≈ 0.97 with MiniLM), as are "fees in 2023" and "fees in 2024". A similarity threshold
//! alone therefore answers the wrong question. The guard compares what embeddings blur:
//! negation, numbers, and words of opposite polarity, and refuses a match when they differ.
//! It only ever turns hits into misses; a miss costs one LLM call, a false hit a wrong answer.

use std::collections::BTreeSet;

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

/// Words that negate what follows (after [`normalise`], so without apostrophes).
const NEGATIONS: &[&str] = &[
    "not", "no", "never", "none", "nothing", "nobody", "nowhere", "neither", "nor", "without",
    "cannot", "unable", "cant", "dont", "doesnt", "didnt", "isnt", "arent", "wasnt", "werent",
    "wont", "wouldnt", "shouldnt", "couldnt", "hasnt", "havent", "hadnt", "mustnt", "aint",
];

/// Pairs of opposite word groups: a question with words from one side never matches a
/// question with words from the other side of the same pair.
const OPPOSITES: &[(&[&str], &[&str])] = &[
    (
        &[
            "on",
            "enable",
            "enabled",
            "enabling",
            "activate",
            "activated",
            "activating",
            "start",
            "started",
            "starting",
            "open",
            "opened",
            "opening",
            "unlock",
            "unlocked",
            "unfreeze",
            "allow",
            "allowed",
            "resume",
            "subscribe",
            "join",
            "connect",
        ],
        &[
            "off",
            "disable",
            "disabled",
            "disabling",
            "deactivate",
            "deactivated",
            "stop",
            "stopped",
            "stopping",
            "close",
            "closed",
            "closing",
            "lock",
            "locked",
            "freeze",
            "frozen",
            "block",
            "blocked",
            "deny",
            "denied",
            "pause",
            "cancel",
            "cancelled",
            "unsubscribe",
            "leave",
            "disconnect",
        ],
    ),
    (
        &[
            "increase",
            "increased",
            "raise",
            "raised",
            "more",
            "higher",
            "highest",
            "above",
            "over",
            "max",
            "maximum",
            "most",
            "upgrade",
            "up",
            "exceed",
            "exceeds",
        ],
        &[
            "decrease",
            "decreased",
            "lower",
            "lowest",
            "reduce",
            "reduced",
            "less",
            "fewer",
            "below",
            "under",
            "min",
            "minimum",
            "least",
            "downgrade",
            "down",
        ],
    ),
    (
        &[
            "deposit", "deposits", "receive", "received", "incoming", "credit", "import", "upload",
            "buy", "buying", "add", "added", "inbound",
        ],
        &[
            "withdraw",
            "withdrawal",
            "withdrawals",
            "send",
            "sent",
            "outgoing",
            "debit",
            "export",
            "download",
            "sell",
            "selling",
            "remove",
            "removed",
            "delete",
            "deleted",
            "outbound",
        ],
    ),
    (
        &["before", "earlier", "first", "earliest", "oldest", "past"],
        &["after", "later", "last", "latest", "newest", "future"],
    ),
    (
        &["domestic", "local"],
        &["international", "foreign", "abroad"],
    ),
    (&["personal", "individual"], &["business", "corporate"]),
    (
        &["monthly"],
        &["yearly", "annual", "annually", "weekly", "daily"],
    ),
];

/// Number words, read as the digits they stand for, so that "three days" == "3 days".
const NUMBER_WORDS: &[(&str, &str)] = &[
    ("zero", "0"),
    ("one", "1"),
    ("two", "2"),
    ("three", "3"),
    ("four", "4"),
    ("five", "5"),
    ("six", "6"),
    ("seven", "7"),
    ("eight", "8"),
    ("nine", "9"),
    ("ten", "10"),
    ("eleven", "11"),
    ("twelve", "12"),
    ("fifteen", "15"),
    ("twenty", "20"),
    ("thirty", "30"),
    ("fifty", "50"),
    ("hundred", "100"),
    ("thousand", "1000"),
    ("million", "1000000"),
    ("once", "1x"),
    ("twice", "2x"),
    ("half", "0.5"),
    ("double", "2x"),
    ("triple", "3x"),
];

/// What the guard compares between two normalised questions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    negated: bool,
    numbers: BTreeSet<String>,
    /// Per pair of [`OPPOSITES`]: bit 1 = a word of the first side, bit 2 = of the second.
    sides: Vec<u8>,
}

impl Guard {
    /// The guard features of a question already passed through [`normalise`].
    pub fn of(normalised: &str) -> Self {
        let mut guard = Guard {
            negated: false,
            numbers: BTreeSet::new(),
            sides: vec![0; OPPOSITES.len()],
        };
        for word in normalised.split(' ') {
            if NEGATIONS.contains(&word) {
                guard.negated = true;
            }
            if word.chars().any(|c| c.is_ascii_digit()) {
                guard.numbers.insert(word.to_string());
            } else if let Some((_, n)) = NUMBER_WORDS.iter().find(|(w, _)| *w == word) {
                guard.numbers.insert((*n).to_string());
            }
            for (pair, (first, second)) in OPPOSITES.iter().enumerate() {
                if first.contains(&word) {
                    guard.sides[pair] |= 1;
                }
                if second.contains(&word) {
                    guard.sides[pair] |= 2;
                }
            }
        }
        guard
    }

    /// Why a cached answer to `other` must not answer this question, or `None` when the two
    /// agree on negation, numbers and polarity. A pair whose words appear in only one of the
    /// two questions is no conflict ("fee on transfers" vs "transfer fee").
    pub fn conflict(&self, other: &Guard) -> Option<String> {
        if self.negated != other.negated {
            return Some("negation differs".into());
        }
        if self.numbers != other.numbers {
            return Some(format!(
                "numbers differ: {:?} vs {:?}",
                self.numbers, other.numbers
            ));
        }
        for (pair, (a, b)) in self.sides.iter().zip(&other.sides).enumerate() {
            if *a != 0 && *b != 0 && a != b {
                let (first, second) = OPPOSITES[pair];
                return Some(format!("opposite words ({} … / {} …)", first[0], second[0]));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conflict(a: &str, b: &str) -> Option<String> {
        Guard::of(&normalise(a)).conflict(&Guard::of(&normalise(b)))
    }

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
    fn polarity_words_of_opposite_sides_conflict() {
        assert!(
            conflict(
                "How do I turn on card payments?",
                "How do I turn off card payments?"
            )
            .is_some()
        );
        assert!(conflict("How do I enable alerts", "how to disable alerts").is_some());
        assert!(conflict("how do I lock my card", "how do I unlock my card").is_some());
        assert!(conflict("how to deposit cash", "how to withdraw cash").is_some());
        assert!(conflict("fees before March", "fees after March").is_some());
        assert!(conflict("domestic transfer limit", "international transfer limit").is_some());
    }

    #[test]
    fn negation_and_numbers_must_agree() {
        assert!(conflict("Can I reset my PIN online?", "Can't I reset my PIN online?").is_some());
        assert!(
            conflict(
                "Why does my card work abroad",
                "Why does my card not work abroad"
            )
            .is_some()
        );
        assert!(conflict("fees in 2023", "fees in 2024").is_some());
        assert!(conflict("limit for 3 transfers", "limit for 4 transfers").is_some());
        assert!(conflict("overdraft fees", "overdraft fees in 2024").is_some());
    }

    #[test]
    fn paraphrases_pass() {
        assert_eq!(
            conflict("How do I turn on alerts?", "how can I switch alerts on"),
            None
        );
        assert_eq!(
            conflict("refund within three days", "refund within 3 days"),
            None
        );
        assert_eq!(
            conflict("What's the fee on transfers?", "what is the transfer fee"),
            None
        );
        assert_eq!(conflict("I can't log in", "I cannot log in"), None);
        assert_eq!(
            conflict("How do I reset my password?", "how can I reset my password"),
            None
        );
    }
}
