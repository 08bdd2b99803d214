use super::*;

fn words(s: &str) -> usize {
    s.split_whitespace().count()
}

/// A section without a page.
fn section(path: &[&str], text: &str) -> Section {
    Section {
        path: path.iter().map(|p| p.to_string()).collect(),
        page: None,
        text: text.into(),
    }
}

/// The chunks' texts, after checking that each reported count is the text's count.
fn texts(text: &str, max: usize, overlap: usize) -> Vec<String> {
    let chunks = chunk_text(text, max, overlap, &words);
    for c in &chunks {
        assert_eq!(c.tokens, words(&c.text), "{c:?}");
    }
    chunks.into_iter().map(|c| c.text).collect()
}

#[test]
fn short_text_is_one_chunk() {
    let chunks = texts("One sentence. Another one!", 50, 5);
    assert_eq!(chunks, vec!["One sentence. Another one!"]);
}

#[test]
fn empty_text_gives_no_chunks() {
    assert!(texts("  \n\n ", 50, 5).is_empty());
}

#[test]
fn chunks_respect_the_budget_and_overlap_at_sentence_boundaries() {
    let text = (0..40)
        .map(|i| format!("Sentence number {i} is here."))
        .collect::<Vec<_>>()
        .join(" ");
    let chunks = texts(&text, 20, 5);
    assert!(chunks.len() > 5, "{chunks:?}");
    for c in &chunks {
        assert!(words(c) <= 20, "{c}");
        assert!(
            c.ends_with('.'),
            "chunk should end at a sentence boundary: {c}"
        );
    }
    // Each chunk after the first starts with the last sentence of the previous one.
    for pair in chunks.windows(2) {
        let last_sentence = pair[0].rsplit_once(" Sentence").map(|(_, s)| s).unwrap();
        assert!(
            pair[1].starts_with(&format!("Sentence{last_sentence}").trim().to_string()),
            "{pair:?}"
        );
    }
    // Nothing lost: every sentence is in some chunk.
    for i in 0..40 {
        let s = format!("Sentence number {i} is here.");
        assert!(chunks.iter().any(|c| c.contains(&s)), "lost {s}");
    }
}

#[test]
fn a_sentence_longer_than_the_budget_is_cut_between_words() {
    let text = (0..95)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let chunks = texts(&text, 30, 0);
    assert_eq!(chunks.len(), 4);
    assert!(chunks.iter().all(|c| words(c) <= 30));
    assert_eq!(chunks.join(" "), text);
}

/// A run without spaces counts (as the embedder counts it) up to a token per byte; such a
/// run past the chunk size is cut inside itself, so that no chunk is over the budget and
/// none is a megabyte that the prompt would send whole.
#[test]
fn a_word_longer_than_a_chunk_is_cut_inside_itself() {
    let bytes_when_long = |s: &str| -> usize {
        (s.split_whitespace())
            .map(|w| if w.len() > 100 { w.len() } else { 1 })
            .sum()
    };
    let text = format!("Before it. {} After it.", "x".repeat(10_000));
    let chunks = chunk_text(&text, 256, 32, &bytes_when_long);
    for c in &chunks {
        assert!(c.tokens <= 256, "{} tokens", c.tokens);
        assert!(c.text.len() <= 256 + 64, "{} bytes", c.text.len());
    }
    let kept: usize = chunks.iter().map(|c| c.text.matches('x').count()).sum();
    assert!(kept >= 10_000, "every byte is kept (with overlaps): {kept}");
    // Cut at character boundaries.
    let accents = "é".repeat(100);
    let wide: Vec<&str> = cut_bytes(&accents, 7).collect();
    assert!(wide.iter().all(|c| c.len() <= 7 && !c.is_empty()));
    assert_eq!(wide.concat(), accents);
}

#[test]
fn paragraph_breaks_and_decimals() {
    let s = sentences("Title line\n\nPrice is 3.50 dollars. Next? Yes");
    assert_eq!(
        s,
        vec!["Title line", "Price is 3.50 dollars.", "Next?", "Yes"]
    );
}

#[test]
fn sections_chunk_apart_with_their_path_and_pages() {
    let section = |path: &[&str], page: u32, text: &str| Section {
        page: Some(page),
        ..section(path, text)
    };
    let sections = [
        section(&["Cards"], 1, "Cards are free. They work abroad."),
        section(&["Cards", "Lost"], 1, "Call us at once."),
        // The same path over a page break: one run, chunks that span the pages.
        section(
            &["Cards", "Lost"],
            2,
            "We send a new card. It takes five days.",
        ),
        section(&["Loans"], 3, "Loans cost interest."),
    ];
    let chunks = chunk_sections(&sections, None, false, 9, 0, &words);
    let summary: Vec<(String, &str, Option<[u32; 2]>)> = (chunks.iter())
        .map(|c| {
            (
                c.chunk.text.clone(),
                c.place.section.as_str(),
                c.place.pages,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "Cards are free. They work abroad.".into(),
                "Cards",
                Some([1, 1])
            ),
            (
                "Call us at once. We send a new card.".into(),
                "Cards › Lost",
                Some([1, 2])
            ),
            ("It takes five days.".into(), "Cards › Lost", Some([2, 2])),
            ("Loans cost interest.".into(), "Loans", Some([3, 3])),
        ]
    );
    // Text without pages has none.
    let plain = [Section {
        path: vec!["A".into()],
        page: None,
        text: "x y.".into(),
    }];
    assert_eq!(
        chunk_sections(&plain, None, false, 8, 0, &words)[0]
            .place
            .pages,
        None
    );
    assert!(chunks.iter().all(|c| c.header.is_empty()));
}

#[test]
fn a_title_heads_every_chunk_with_its_path_and_takes_its_tokens_from_the_budget() {
    let sections = [
        section(&[], "Read this first."),
        section(&["Cards", "Lost"], "Call us now. We send new cards."),
    ];
    let chunks = chunk_sections(&sections, Some("Policies"), false, 8, 0, &words);
    let summary: Vec<(&str, &str)> = (chunks.iter())
        .map(|c| (c.header.as_str(), c.chunk.text.as_str()))
        .collect();
    // "Policies › Cards › Lost" counts 5 words, capped at a quarter of 8: the text's
    // budget is 6, and the two sentences (3 + 4 words) no longer share a chunk.
    assert_eq!(
        summary,
        [
            ("Policies", "Read this first."),
            ("Policies › Cards › Lost", "Call us now."),
            ("Policies › Cards › Lost", "We send new cards."),
        ]
    );
    // Without a title the two sentences share one chunk of 8 (and the first section has
    // its own).
    let untitled = chunk_sections(&sections, None, false, 8, 0, &words);
    assert_eq!(untitled.len(), 2);
    assert_eq!(untitled[1].chunk.text, "Call us now. We send new cards.");
}

#[test]
fn packed_small_sections_share_a_chunk_whole_each_under_its_heading() {
    let sections = [
        section(&[], "Intro text here."),
        section(&["Fees"], "Fees are low."),
        section(&["Fees", "Cards"], "Cards cost nothing."),
        section(&["Loans"], "Loans cost interest here."),
    ];
    // The longest header, "Guide › Fees › Cards", takes its 5 words' cap of a quarter of
    // 16 from every chunk: the text's budget is 12.
    let chunks = chunk_sections(&sections, Some("Guide"), true, 16, 0, &words);
    let summary: Vec<(&str, &str, &str)> = (chunks.iter())
        .map(|c| {
            (
                c.chunk.text.as_str(),
                c.place.section.as_str(),
                c.header.as_str(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            // Three runs fit in 12 words with their heading lines (11); the fourth does
            // not, and is not cut: it starts the next chunk. The first chunk's path is
            // what its runs share (nothing here).
            (
                "Intro text here.\n\nFees\nFees are low.\n\nCards\nCards cost nothing.",
                "",
                "Guide"
            ),
            ("Loans cost interest here.", "Loans", "Guide › Loans"),
        ]
    );
    for c in &chunks {
        assert_eq!(c.chunk.tokens, words(&c.chunk.text), "{c:?}");
    }
    // Not packed, each section is a chunk of its own, citing its own path.
    let apart = chunk_sections(&sections, Some("Guide"), false, 16, 0, &words);
    let paths: Vec<&str> = apart.iter().map(|c| c.place.section.as_str()).collect();
    assert_eq!(paths, ["", "Fees", "Fees › Cards", "Loans"]);
    assert_eq!(apart[1].chunk.text, "Fees are low.");
    // Runs under one parent share its path.
    let nested = [
        section(&["Fees", "Cards"], "Cards cost nothing."),
        section(&["Fees", "Loans"], "Loans cost more."),
    ];
    let chunks = chunk_sections(&nested, None, true, 12, 0, &words);
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].place.section, "Fees");
    assert_eq!(
        chunks[0].chunk.text,
        "Cards\nCards cost nothing.\n\nLoans\nLoans cost more."
    );
}

#[test]
fn a_header_names_the_title_once() {
    assert_eq!(
        context_header("Guide", "Install › Linux"),
        "Guide › Install › Linux"
    );
    assert_eq!(
        context_header("Guide", "Guide › Install"),
        "Guide › Install"
    );
    assert_eq!(context_header("Guide", "Guide"), "Guide");
    assert_eq!(context_header("Guide", ""), "Guide");
    assert_eq!(context_header(" ", "Install"), "Install");
}
