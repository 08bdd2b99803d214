//! Text as a reader sees it, for the grounding check: Unicode's compatibility forms folded
//! (NFKC: fullwidth `９５` is `95`, a ligature `ﬁ` is `fi`, a superscript `²` is `2`) and
//! invisible characters dropped (zero-width spaces and joiners, soft hyphens, byte order
//! marks, direction marks and isolates, variation selectors, tags) — so that an answer cannot
//! pass a number or a word past the check by writing it in characters that look the same and
//! read differently. Each character read keeps the place of the one it came from, so that
//! spans are reported in the text as it was written.

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// The characters read, and for each the index of the written character it came from (one
/// more at the end: the written text's length).
pub(super) fn visible(written: &[char]) -> (Vec<char>, Vec<usize>) {
    let mut read = Vec::with_capacity(written.len());
    let mut origin = Vec::with_capacity(written.len() + 1);
    let mut i = 0;
    while i < written.len() {
        // A character and the combining marks after it are folded together (é written as e
        // and an accent reads as é).
        let start = i;
        i += 1;
        while i < written.len() && is_combining_mark(written[i]) {
            i += 1;
        }
        let cluster = written[start..i].iter().copied().filter(|c| !invisible(*c));
        for c in cluster.nfkc() {
            if !invisible(c) {
                read.push(c);
                origin.push(start);
            }
        }
    }
    origin.push(written.len());
    (read, origin)
}

/// Characters that show nothing: format characters a text can hide inside a word.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}'                      // soft hyphen
        | '\u{034F}'                    // combining grapheme joiner
        | '\u{061C}'                    // Arabic letter mark
        | '\u{115F}' | '\u{1160}'       // Hangul fillers
        | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}'       // Mongolian selectors and vowel separator
        | '\u{200B}'..='\u{200F}'       // zero-width space, joiners, direction marks
        | '\u{202A}'..='\u{202E}'       // direction embeddings and overrides
        | '\u{2060}'..='\u{206F}'       // word joiner, invisible operators, isolates
        | '\u{3164}' | '\u{FFA0}'       // Hangul fillers
        | '\u{FE00}'..='\u{FE0F}'       // variation selectors
        | '\u{FEFF}'                    // byte order mark, zero-width no-break space
        | '\u{FFF9}'..='\u{FFFB}'       // interlinear annotation
        | '\u{1D173}'..='\u{1D17A}'     // musical formatting
        | '\u{E0000}'..='\u{E007F}'     // tags
        | '\u{E0100}'..='\u{E01EF}'     // variation selectors supplement
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (String, Vec<usize>) {
        let written: Vec<char> = text.chars().collect();
        let (read, origin) = visible(&written);
        (read.into_iter().collect(), origin)
    }

    #[test]
    fn lookalikes_read_as_what_they_look_like_and_keep_their_places() {
        assert_eq!(read("\u{FF19}\u{FF15} dollars").0, "95 dollars");
        assert_eq!(read("fi\u{200B}fty").0, "fifty");
        assert_eq!(read("\u{FEFF}fif\u{00AD}teen\u{2060}").0, "fifteen");
        assert_eq!(read("\u{FB01}ve").0, "five");
        assert_eq!(read("cafe\u{0301}").0, "caf\u{E9}");
        assert_eq!(read("10\u{00B2}").0, "102");
        // Each character read points at the one it came from; the end at the text's end.
        let (text, origin) = read("a\u{200B}\u{FF11}b");
        assert_eq!(text, "a1b");
        assert_eq!(origin, [0, 2, 3, 4]);
        let (text, origin) = read("\u{FB01}x");
        assert_eq!(text, "fix");
        assert_eq!(origin, [0, 0, 1, 2]);
    }
}
