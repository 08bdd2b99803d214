//! The chunker (`sluice_core::chunk::chunk_text`) on any text, chunk size and overlap, with a
//! token counter that makes long words several tokens. The documented promises are checked:
//! no empty chunk, none over the size unless it is one word that alone is over it, and every
//! word of the input in the chunks, in order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::chunk::chunk_text;

fn count(text: &str) -> usize {
    text.split_whitespace().map(|w| w.len() / 8 + 1).sum()
}

fuzz_target!(|data: &[u8]| {
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
        let words = c.text.split_whitespace().count();
        assert!(
            c.tokens <= max || words == 1,
            "{} tokens over {max} in {:?}",
            c.tokens,
            c.text
        );
    }
    // Every input word, in order, is a subsequence of the chunks' words.
    let mut out = chunks.iter().flat_map(|c| c.text.split_whitespace());
    for word in text.split_whitespace() {
        assert!(out.any(|w| w == word), "{word:?} lost or out of order");
    }
});
