//! The word tables, and a text's canonical words: contractions spelt out,
//! negations as one word, fixed phrases and spellings as one form, numbers as their values.

use std::ops::Range;

/// The content word every negation stands for: not a word itself, so that no word ("note")
/// can stem into it.
pub(crate) const NOT: &str = "¬";

/// Words that negate (after [`normalise`], so without apostrophes), all read as [`NOT`].
pub(crate) const NEGATIONS: &[&str] = &[
    "not", "no", "never", "none", "nothing", "nobody", "nowhere", "neither", "nor", "without",
    "unable", "cannot",
];

/// Contractions as the words they stand for (apostrophes are gone after [`normalise`]).
pub(crate) const CONTRACTIONS: &[(&str, &[&str])] = &[
    ("cant", &["can", "not"]),
    ("wont", &["will", "not"]),
    ("dont", &["do", "not"]),
    ("doesnt", &["does", "not"]),
    ("didnt", &["did", "not"]),
    ("isnt", &["is", "not"]),
    ("arent", &["are", "not"]),
    ("wasnt", &["was", "not"]),
    ("werent", &["were", "not"]),
    ("shouldnt", &["should", "not"]),
    ("couldnt", &["could", "not"]),
    ("wouldnt", &["would", "not"]),
    ("hasnt", &["has", "not"]),
    ("havent", &["have", "not"]),
    ("hadnt", &["had", "not"]),
    ("mustnt", &["must", "not"]),
    ("aint", &["is", "not"]),
    ("whats", &["what", "is"]),
    ("hows", &["how", "is"]),
    ("wheres", &["where", "is"]),
    ("whens", &["when", "is"]),
    ("whys", &["why", "is"]),
    ("whos", &["who", "is"]),
    ("thats", &["that", "is"]),
    ("theres", &["there", "is"]),
    ("im", &["i", "am"]),
    ("ive", &["i", "have"]),
];

/// Fixed phrases with one meaning, read as one word.
pub(crate) const PHRASES: &[(&[&str], &str)] = &[
    (&["per", "day"], "daily"),
    (&["a", "day"], "daily"),
    (&["each", "day"], "daily"),
    (&["every", "day"], "daily"),
    (&["per", "week"], "weekly"),
    (&["a", "week"], "weekly"),
    (&["each", "week"], "weekly"),
    (&["every", "week"], "weekly"),
    (&["per", "month"], "monthly"),
    (&["a", "month"], "monthly"),
    (&["each", "month"], "monthly"),
    (&["every", "month"], "monthly"),
    (&["per", "year"], "yearly"),
    (&["a", "year"], "yearly"),
    (&["each", "year"], "yearly"),
    (&["every", "year"], "yearly"),
    (&["per", "annum"], "yearly"),
    (&["e", "mail"], "email"),
    (&["log", "in"], "login"),
    (&["sign", "in"], "signin"),
    (&["set", "up"], "setup"),
    (&["on", "line"], "online"),
    (&["turn", "on"], "turn_on"),
    (&["switch", "on"], "turn_on"),
    (&["turn", "off"], "turn_off"),
    (&["switch", "off"], "turn_off"),
];

/// Words with one meaning and two spellings (British / American, and the like), read as the
/// second. Regular patterns (-ise / -ize, -our / -or, -tre / -ter, doubled l) are rules below.
pub(crate) const SPELLINGS: &[(&str, &str)] = &[
    ("cheque", "check"),
    ("cheques", "checks"),
    ("programme", "program"),
    ("licence", "license"),
    ("instalment", "installment"),
    ("instalments", "installments"),
    ("judgement", "judgment"),
    ("annual", "yearly"),
    ("annually", "yearly"),
    ("which", "what"),
    ("each", "every"),
];

/// Function words: what changes no answer ("how do I" / "how can I" / "how should I", "the",
/// "my", "fee on transfers" / "transfer fee"). Question words, quantifiers, prepositions of
/// place and direction, particles ("off", "in", "out", "up", "down"; "on" in "turn on" is a
/// phrase), second and third persons stay: they do change answers.
pub(crate) const STOP: &[&str] = &[
    "a", "an", "the", "i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "it", "its",
    "am", "is", "are", "was", "were", "be", "been", "being", "do", "does", "did", "have", "has",
    "had", "can", "could", "will", "would", "shall", "should", "may", "might", "must", "to", "of",
    "for", "on", "at", "by", "with", "about", "as", "than", "and", "that", "this", "there", "here",
    "so", "then", "please", "just", "also", "really", "actually", "able", "possible", "get",
    "going",
];

/// Words after which what follows has a role ("from savings to checking"): when both
/// questions use one, the words each points at must be the same, besides the bag of words
/// ("how to" in one question and none in the other is no conflict).
pub(crate) const MARKERS: &[&str] = &["from", "to", "into", "than", "between"];

/// Skipped when finding the word a [`MARKERS`] word points at ("to my savings" → savings).
pub(crate) const DETERMINERS: &[&str] = &[
    "a", "an", "the", "my", "our", "your", "their", "his", "her", "its",
];

/// Number words and their values; a run of them is one number ("twenty five" = 25).
pub(crate) const UNITS: &[(&str, f64)] = &[
    ("zero", 0.0),
    ("one", 1.0),
    ("two", 2.0),
    ("three", 3.0),
    ("four", 4.0),
    ("five", 5.0),
    ("six", 6.0),
    ("seven", 7.0),
    ("eight", 8.0),
    ("nine", 9.0),
    ("ten", 10.0),
    ("eleven", 11.0),
    ("twelve", 12.0),
    ("thirteen", 13.0),
    ("fourteen", 14.0),
    ("fifteen", 15.0),
    ("sixteen", 16.0),
    ("seventeen", 17.0),
    ("eighteen", 18.0),
    ("nineteen", 19.0),
    ("twenty", 20.0),
    ("thirty", 30.0),
    ("forty", 40.0),
    ("fifty", 50.0),
    ("sixty", 60.0),
    ("seventy", 70.0),
    ("eighty", 80.0),
    ("ninety", 90.0),
    ("dozen", 12.0),
    ("half", 0.5),
];
pub(crate) const SCALES: &[(&str, f64)] = &[
    ("hundred", 100.0),
    ("thousand", 1e3),
    ("million", 1e6),
    ("billion", 1e9),
];
/// Ordinals and multiples, as what they stand for.
pub(crate) const ORDINALS: &[(&str, &str)] = &[
    ("first", "1st"),
    ("second", "2nd"),
    ("third", "3rd"),
    ("fourth", "4th"),
    ("fifth", "5th"),
    ("once", "1x"),
    ("twice", "2x"),
    ("double", "2x"),
    ("triple", "3x"),
];

/// A text's words with contractions spelt out, negations as [`NOT`], fixed phrases and
/// spelling variants as one form, and numbers as their values — before stop words go.
pub(crate) fn canonical_tokens(normalised: &str) -> Vec<String> {
    let words: Vec<&str> = normalised.split(' ').filter(|w| !w.is_empty()).collect();
    canonical_spans(&words)
        .into_iter()
        .map(|(word, _)| word)
        .collect()
}

/// [`canonical_tokens`] of `words` (each already [`normalise`](super::normalise)d), each
/// with the range of `words` it was read from.
pub(crate) fn canonical_spans(words: &[&str]) -> Vec<(String, Range<usize>)> {
    let mut expanded: Vec<(&str, usize)> = Vec::with_capacity(words.len());
    for (at, &word) in words.iter().enumerate().filter(|(_, w)| !w.is_empty()) {
        match CONTRACTIONS.iter().find(|(c, _)| *c == word) {
            Some((_, parts)) => expanded.extend(parts.iter().map(|p| (*p, at))),
            None => expanded.push((word, at)),
        }
    }
    // A toggle with its object inside ("turn alerts on") is the phrase too.
    for i in 0..expanded.len() {
        if matches!(expanded[i].0, "turn" | "switch")
            && let Some(gap) =
                (i + 2..expanded.len().min(i + 5)).find(|&j| matches!(expanded[j].0, "on" | "off"))
        {
            let particle = expanded.remove(gap);
            expanded.insert(i + 1, particle);
        }
    }
    let texts: Vec<&str> = expanded.iter().map(|(w, _)| *w).collect();
    let from = |i: usize, used: usize| {
        let places = expanded[i..i + used].iter().map(|(_, at)| *at);
        let (lo, hi) = places.fold((usize::MAX, 0), |(lo, hi), at| (lo.min(at), hi.max(at)));
        lo..hi + 1
    };
    let mut out = Vec::with_capacity(texts.len());
    let mut i = 0;
    while i < texts.len() {
        if let Some((phrase, one)) = PHRASES.iter().find(|(p, _)| texts[i..].starts_with(p)) {
            out.push(((*one).to_string(), from(i, phrase.len())));
            i += phrase.len();
            continue;
        }
        if let Some((value, used)) = number_words(&texts[i..]) {
            out.push((value, from(i, used)));
            i += used;
            continue;
        }
        let word = texts[i];
        let canonical = if NEGATIONS.contains(&word) {
            NOT.to_string()
        } else if let Some((_, o)) = ORDINALS.iter().find(|(w, _)| *w == word) {
            (*o).to_string()
        } else if let Some(n) = number(word) {
            n
        } else if let Some((_, us)) = SPELLINGS.iter().find(|(w, _)| *w == word) {
            (*us).to_string()
        } else {
            word.to_string()
        };
        out.push((canonical, from(i, 1)));
        i += 1;
    }
    out
}

/// The value of a run of number words at the start of `words` ("twenty five", "two
/// thousand", "a hundred" stays two words; digits and a scale, "1.5 million", too), as
/// digits, and how many words it took.
pub(crate) fn number_words(words: &[&str]) -> Option<(String, usize)> {
    if let [digits, scale, ..] = words
        && let Ok(value) = digits.parse::<f64>()
        && let Some((_, scale)) = SCALES.iter().find(|(w, _)| w == scale)
        && value.is_finite()
    {
        return Some((canonical_number(value * scale), 2));
    }
    let (mut total, mut current, mut used) = (0.0f64, 0.0f64, 0);
    for word in words {
        if let Some((_, v)) = UNITS.iter().find(|(w, _)| w == word) {
            current += v;
        } else if let Some((_, scale)) = SCALES.iter().find(|(w, _)| w == word) {
            current = current.max(1.0) * scale;
            if *scale >= 1e3 {
                total += current;
                current = 0.0;
            }
        } else {
            break;
        }
        used += 1;
    }
    (used > 0).then(|| (canonical_number(total + current), used))
}

/// A number written with digits, as its value ("1000", "2.50" → "2.5", "5k" → "5000"); other
/// words with digits (`v2`, `3rd`) as they are; `None` for a word without digits.
pub(crate) fn number(word: &str) -> Option<String> {
    if !word.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let (digits, scale) = match word.strip_suffix('k') {
        Some(d) => (d, 1e3),
        None => match word.strip_suffix('m') {
            Some(d) => (d, 1e6),
            None => (word, 1.0),
        },
    };
    Some(match digits.parse::<f64>() {
        Ok(v) if v.is_finite() => canonical_number(v * scale),
        _ => word.to_string(),
    })
}

pub(crate) fn canonical_number(v: f64) -> String {
    let text = format!("{v:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A word's stem: regular inflections (-s, -es, -ies, -ed, -ing) and spelling variants
/// (-ise / -ize, -our / -or, -tre / -ter, a doubled final consonant, a final e) set aside, so
/// that every form of one word meets in one stem. Only ever compared with other stems.
pub(crate) fn stem(word: &str) -> String {
    if word == NOT || word.bytes().any(|b| b.is_ascii_digit()) || word.chars().count() <= 3 {
        return word.to_string();
    }
    let vowel = |s: &str| s.chars().any(|c| "aeiouy".contains(c));
    // British spellings as American ones, whatever inflection follows.
    let mut w = word.to_string();
    for (uk, us) in [
        ("isation", "ization"),
        ("isations", "izations"),
        ("ising", "izing"),
        ("ised", "ized"),
        ("ises", "izes"),
        ("ise", "ize"),
        ("ysing", "yzing"),
        ("ysed", "yzed"),
        ("yse", "yze"),
    ] {
        if let Some(base) = w.strip_suffix(uk).filter(|b| b.len() >= 2) {
            w = format!("{base}{us}");
            break;
        }
    }
    if let Some(base) = w.strip_suffix("ies").filter(|b| b.len() >= 2) {
        w = format!("{base}y");
    } else if let Some(base) = w.strip_suffix("sses") {
        w = format!("{base}ss");
    } else if let Some(base) = ["ches", "shes", "xes", "zes"]
        .iter()
        .find_map(|s| w.strip_suffix(s).map(|b| (b, &s[..s.len() - 2])))
        .map(|(b, kept)| format!("{b}{kept}"))
    {
        w = base;
    } else if w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        w.pop();
    }
    for suffix in ["ing", "ed"] {
        if let Some(base) = w.strip_suffix(suffix).filter(|b| b.len() >= 3 && vowel(b)) {
            w = base.to_string();
            break;
        }
    }
    if w.len() >= 6
        && let Some(base) = w.strip_suffix("our")
    {
        w = format!("{base}or");
    }
    if let Some(base) = w.strip_suffix("tre").filter(|b| b.len() >= 3) {
        w = format!("{base}ter");
    }
    // A doubled final consonant ("transferr", "cancell"), then a final e ("clos" for close,
    // closed and closing). By characters: a word of any script may end in two equal bytes.
    let mut last = w.chars().rev();
    if let (Some(z), Some(y)) = (last.next(), last.next())
        && z == y
        && z.is_ascii_alphabetic()
        && !"aeiouy".contains(z)
        && w.chars().count() >= 4
    {
        w.pop();
    }
    if w.len() >= 4 && w.ends_with('e') {
        w.pop();
    }
    w
}
