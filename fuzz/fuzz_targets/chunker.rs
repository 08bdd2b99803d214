//! The chunker (`sluice_core::chunk::chunk_text`) on any text, chunk size and overlap, with a
//! token counter that makes long words several tokens. The documented promises are checked:
//! no empty chunk, none over the size (a word longer than a chunk is cut inside itself), and
//! every character of the input's words in the chunks, in order — without overlap, exactly the
//! input's. A known text must chunk (liveness).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::chunk::chunk_text;

fn count(text: &str) -> usize {
    text.split_whitespace().map(|w| w.len() / 8 + 1).sum()
}

/// Words of `text` in order.
fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}

fuzz_target!(|data: &[u8]| {
    // Liveness, once: a known text is chunked, and without overlap the chunks are the text's
    // words exactly (a target that accepted nothing would find nothing).
    static LIVE: std::sync::Once = std::sync::Once::new();
    LIVE.call_once(|| {
        let known = "one two three four five six seven";
        let chunks = chunk_text(known, 3, 0, &count);
        assert!(chunks.len() >= 2, "{chunks:?}");
        let joined: Vec<&str> = chunks.iter().flat_map(|c| words(&c.text)).collect();
        assert_eq!(joined, words(known));
    });
    let Some((&[size, overlap], text)) = data.split_first_chunk::<2>() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let max = usize::from(size % 64) + 1;
    let overlap = usize::from(overlap) % (max / 2 + 1);
    let chunks = chunk_text(text, max, overlap, &count);
    for c in &chunks {
        assert!(!c.text.trim().is_empty(), "an empty chunk");
        assert!(c.tokens <= max, "{} tokens over {max} in {:?}", c.tokens, c.text);
    }
    // The input's words, spaces aside, in order in the chunks (a cut word's pieces follow one
    // another); without overlap, exactly the input's.
    let squeezed = |s: &str| s.split_whitespace().collect::<String>();
    let out: String = chunks.iter().map(|c| squeezed(&c.text)).collect();
    let input = squeezed(text);
    if overlap == 0 {
        assert_eq!(out, input, "the chunks do not reconstruct the text");
    } else {
        let mut rest = out.chars();
        for ch in input.chars() {
            assert!(rest.any(|o| o == ch), "{ch:?} lost or out of order");
        }
    }
});
