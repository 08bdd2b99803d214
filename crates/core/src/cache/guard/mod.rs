//! Query normalisation and the false-hit guard.
//!
//! Embeddings of "how do I turn on X" and "how do I turn off X" are nearly identical (cosine
//! ≈ 0.97 with MiniLM), as are "fees in 2023" and "fees in 2024", or "does the card include
//! travel insurance" and "… exclude travel insurance". A similarity threshold alone therefore
//! answers the wrong question, and a list of known opposites always misses the next pair.
//! So the guard decides from what differs: two questions match only when they are made of the
//! same content words, after setting aside the differences it knows to be equivalent —
//! inflection ("transfers" / "transferring" / "transfer"), British and American spelling
//! ("cancelled" / "canceled", "cheque" / "check"), function words ("how do I" / "how can I",
//! "the", "my"), contractions ("what's" / "what is"), negations written another way ("can't" /
//! "cannot" / "can not"), numbers written another way ("three" / "3", "1,000" / "1000",
//! "2.50" / "2.5"), and a few fixed phrases ("per day" / "daily"). Any other word that is in
//! one question and not the other — an antonym, another product, place, date, amount,
//! quantifier, a negation — makes them different questions, whatever it is. So does a swap of
//! what comes after "from", "to", "into", "than" or "between" ("from savings to checking" is
//! not "from checking to savings"). It only ever turns hits into misses; a miss costs one LLM
//! call, a false hit a wrong answer.
//!
//! Two words that differ may still stand for one another where the [lexicon](Lexicon) —
//! WordNet — says so: a common sense they share ("shut" / "close", "cheque" / "check",
//! "call off" / "cancel") or a derivation ("pay" / "payment"), and no sense in which they are
//! opposites.
//!
//! The word tables and how a question becomes its canonical words are in
//! [`crate::language`], which the grounding check shares.

use crate::language::lexicon::Lexicon;
use crate::language::normalise;
use crate::language::words::*;

/// What the guard compares between two normalised questions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// The canonical words, function words included (for the lexicon's phrases).
    tokens: Vec<String>,
    /// The content words, canonical, sorted (a bag: "transfer fee" = "fee for transfers").
    words: Vec<String>,
    /// Each role word, and the words it points at ("from savings" → from: [saving]).
    roles: std::collections::BTreeMap<String, Vec<String>>,
}

impl Guard {
    /// The guard features of a question already passed through [`normalise`].
    pub fn of(normalised: &str) -> Self {
        let tokens = canonical_tokens(normalised);
        let mut roles = std::collections::BTreeMap::<String, Vec<String>>::new();
        for (i, t) in tokens.iter().enumerate() {
            if MARKERS.contains(&t.as_str())
                && let Some(next) = tokens[i + 1..]
                    .iter()
                    .find(|n| !DETERMINERS.contains(&n.as_str()))
            {
                roles.entry(t.clone()).or_default().push(stem(next));
            }
        }
        roles.values_mut().for_each(|targets| targets.sort());
        let mut words: Vec<String> = tokens
            .iter()
            .filter(|t| !STOP.contains(&t.as_str()))
            .map(|t| stem(t))
            .collect();
        words.sort();
        Guard {
            tokens,
            words,
            roles,
        }
    }

    /// Why a cached answer to `other` must not answer this question, or `None` when the two
    /// are made of the same content words in the same roles, a word of one standing for a
    /// word of the other only where `lexicon` says it may.
    pub fn conflict(&self, other: &Guard, lexicon: &Lexicon) -> Option<String> {
        if self.words != other.words {
            // Without a lexicon nothing is substitutable, and any differing word refuses.
            let ((mine, my_spare), (theirs, their_spare)) =
                (units(&self.tokens, lexicon), units(&other.tokens, lexicon));
            let (mine, theirs) = unmatched(mine, theirs);
            if !substitutable(&mine, &theirs, &my_spare, &their_spare, lexicon) {
                let texts = |u: &[Unit]| u.iter().map(|u| u.text.clone()).collect::<Vec<_>>();
                return Some(format!(
                    "words differ: {:?} / {:?}",
                    texts(&mine),
                    texts(&theirs)
                ));
            }
        }
        self.role_differing(other).map(|(marker, targets, others)| {
            format!("roles differ: {marker} {targets:?} / {marker} {others:?}")
        })
    }

    /// The first role marker both questions use with other targets ("from savings" / "from
    /// checking"), and the two targets.
    fn role_differing<'a>(
        &'a self,
        other: &'a Guard,
    ) -> Option<(&'a String, &'a Vec<String>, &'a Vec<String>)> {
        (self.roles.iter()).find_map(|(marker, targets)| {
            let others = other.roles.get(marker)?;
            (targets != others).then_some((marker, targets, others))
        })
    }
}

impl Guard {
    /// Whether all that keeps `other` from answering this question ([`conflict`](Self::conflict))
    /// is ordinary words: the same roles, at most four differing words a side, none of them a
    /// number, a negation, a quantifier, a question word or a direction, and none the antonym
    /// of a differing word of the other side — what a second signal (the two questions'
    /// retrievals agreeing) might decide, where a number or a negation never may.
    pub fn differs_in_ordinary_words(&self, other: &Guard, lexicon: &Lexicon) -> bool {
        let same_roles = self.role_differing(other).is_none();
        let ((mine, _), (theirs, _)) =
            (units(&self.tokens, lexicon), units(&other.tokens, lexicon));
        let (mine, theirs) = unmatched(mine, theirs);
        let ordinary = |u: &Unit| {
            u.text != NOT
                && number(&u.text).is_none()
                && !u.text.chars().any(|c| c.is_ascii_digit())
                && !crate::language::lexicon::DECISIVE.contains(&u.text.as_str())
        };
        same_roles
            && mine.len().max(theirs.len()) <= 4
            && mine.iter().chain(&theirs).all(ordinary)
            && !(mine.iter()).any(|x| theirs.iter().any(|y| lexicon.opposed(&x.lemmas, &y.lemmas)))
    }
}

/// Whether two answers state the same facts as far as words can tell, however they are
/// worded: the same numbers (as values: "five" = "5", "2.50" = "2.5"), as many negations, and
/// no word of one the antonym of a word of the other ("freeze" / "unfreeze"). Embeddings of
/// "arrives in 5 days" and "arrives in 10 days" are nearly identical.
pub fn same_facts(a: &str, b: &str, lexicon: &Lexicon) -> bool {
    let decisive = |tokens: &[String]| {
        let mut numbers: Vec<String> = tokens
            .iter()
            .filter(|t| t.bytes().any(|b| b.is_ascii_digit()))
            .cloned()
            .collect();
        numbers.sort();
        let negations = tokens.iter().filter(|t| *t == NOT).count();
        (numbers, negations)
    };
    let (a, b) = (
        canonical_tokens(&normalise(a)),
        canonical_tokens(&normalise(b)),
    );
    if decisive(&a) != decisive(&b) {
        return false;
    }
    let lemmas = |tokens: &[String], other: &[String]| -> Vec<Vec<u32>> {
        let theirs: std::collections::HashSet<String> = other.iter().map(|t| stem(t)).collect();
        tokens
            .iter()
            .filter(|t| !theirs.contains(&stem(t)))
            .map(|t| lexicon.lemmas(t))
            .collect()
    };
    let (only_a, only_b) = (lemmas(&a, &b), lemmas(&b, &a));
    !only_a
        .iter()
        .any(|x| only_b.iter().any(|y| lexicon.opposed(x, y)))
}

/// A content word or phrase as the lexicon sees it.
struct Unit {
    /// What identical words share: the stem, or the phrase's lemma.
    key: String,
    /// The word as written (canonical), for the lexicon's word lists and messages.
    text: String,
    /// Its lemmas in the lexicon.
    lemmas: Vec<u32>,
}

/// The content words of `tokens`, multi-word expressions the lexicon knows read as one
/// ("get in touch", "call off"); and the function words the lexicon knows, which a content
/// word of the other question may stand for ("get" / "obtain").
fn units(tokens: &[String], lexicon: &Lexicon) -> (Vec<Unit>, Vec<Unit>) {
    let mut out = Vec::with_capacity(tokens.len());
    let mut spare = Vec::new();
    let mut lemmas: Vec<Vec<u32>> = tokens.iter().map(|t| lexicon.lemmas(t)).collect();
    let mut i = 0;
    while i < tokens.len() {
        if let Some((id, used)) = lexicon.phrase(&tokens[i..], &lemmas[i..]) {
            let text = lexicon.word(id).to_string();
            out.push(Unit {
                key: text.clone(),
                text,
                lemmas: vec![id],
            });
            i += used;
            continue;
        }
        let token = &tokens[i];
        let unit = Unit {
            key: stem(token),
            text: token.clone(),
            lemmas: std::mem::take(&mut lemmas[i]),
        };
        i += 1;
        if !STOP.contains(&token.as_str()) {
            out.push(unit);
        } else if !unit.lemmas.is_empty() {
            spare.push(unit);
        }
    }
    (out, spare)
}

/// The units of each side that the other side has no identical unit for.
fn unmatched(mut a: Vec<Unit>, mut b: Vec<Unit>) -> (Vec<Unit>, Vec<Unit>) {
    a.retain(|u| match b.iter().position(|v| v.key == u.key) {
        Some(i) => {
            b.remove(i);
            false
        }
        None => true,
    });
    (a, b)
}

/// Whether the differing units of both sides pair up, each with its own unit of the other
/// side that the lexicon lets it stand for: a differing unit there, or one of its function
/// words (`a_spare`, `b_spare`: "get" / "obtain"). More than a few differing words is another
/// question, whatever they are.
fn substitutable(
    a: &[Unit],
    b: &[Unit],
    a_spare: &[Unit],
    b_spare: &[Unit],
    lexicon: &Lexicon,
) -> bool {
    const MAX_SUBSTITUTIONS: usize = 4;
    let stands_for =
        |x: &Unit, y: &Unit| lexicon.equivalent(&x.text, &x.lemmas, &y.text, &y.lemmas);
    /// Pairs every unit of `a` with one of `b` or of `spare`, so that no unit of `b` is left.
    fn pair(
        a: &[&Unit],
        b: Vec<&Unit>,
        spare: Vec<&Unit>,
        stands_for: &dyn Fn(&Unit, &Unit) -> bool,
    ) -> bool {
        let Some((first, rest)) = a.split_first() else {
            return b.is_empty();
        };
        (0..b.len()).any(|i| {
            stands_for(first, b[i]) && {
                let mut b = b.clone();
                b.remove(i);
                pair(rest, b, spare.clone(), stands_for)
            }
        }) || (0..spare.len()).any(|i| {
            stands_for(first, spare[i]) && {
                let mut spare = spare.clone();
                spare.remove(i);
                pair(rest, b.clone(), spare, stands_for)
            }
        })
    }
    if a.len() + b.len() > 2 * MAX_SUBSTITUTIONS {
        return false;
    }
    // A unit of `b` that no unit of `a` can stand for may stand for a function word of `a`.
    let mut a_spare: Vec<&Unit> = a_spare.iter().collect();
    let mut rest_of_b = Vec::new();
    for y in b {
        let by_spare = (!a.iter().any(|x| stands_for(x, y)))
            .then(|| a_spare.iter().position(|s| stands_for(s, y)))
            .flatten();
        match by_spare {
            Some(i) => {
                a_spare.remove(i);
            }
            None => rest_of_b.push(y),
        }
    }
    pair(
        &a.iter().collect::<Vec<_>>(),
        rest_of_b,
        b_spare.iter().collect(),
        &stands_for,
    )
}

#[cfg(test)]
mod tests;
