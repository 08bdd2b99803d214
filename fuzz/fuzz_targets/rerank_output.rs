//! What a tenant's rerank component returns is untrusted: `(index, score)` pairs and dropped
//! indices for `n` candidates, checked by `sluice_contract::stages::rerank_order`. Accepted
//! output must order every candidate not dropped exactly once, best score first, and no
//! dropped one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_contract::stages::rerank_order;

fuzz_target!(|data: &[u8]| {
    // Liveness, once: a known-good output is accepted as the order it says.
    static LIVE: std::sync::Once = std::sync::Once::new();
    LIVE.call_once(|| {
        let order = rerank_order(&[(0, 0.5), (2, 0.9)], &[1], 3).expect("a known-good output");
        assert_eq!(order, vec![(2, 0.9), (0, 0.5)]);
    });
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 64);
    // The first byte after `n` says how many of the following bytes are dropped indices.
    let (dropped, rest) = match rest.split_first() {
        Some((&d, rest)) => rest.split_at(usize::from(d % 64).min(rest.len())),
        None => (&[][..], rest),
    };
    let dropped: Vec<u32> = dropped.iter().map(|&b| u32::from(b)).collect();
    let scored: Vec<(u32, f32)> = rest
        .chunks_exact(5)
        .map(|c| {
            (
                u32::from(c[0]),
                f32::from_le_bytes([c[1], c[2], c[3], c[4]]),
            )
        })
        .collect();
    if let Ok(ranked) = rerank_order(&scored, &dropped, n) {
        let order: Vec<usize> = ranked.iter().map(|&(i, _)| i).collect();
        let mut seen = vec![false; n];
        for &i in &order {
            assert!(!std::mem::replace(&mut seen[i], true), "{i} twice");
            assert!(!dropped.contains(&(i as u32)), "{i} was dropped");
        }
        assert_eq!(order.len() + dropped.len(), n, "a candidate lost");
        let score = |i: usize| scored.iter().find(|p| p.0 as usize == i).map(|p| p.1);
        for w in order.windows(2) {
            assert!(score(w[0]) >= score(w[1]), "not best first");
        }
    }
});
