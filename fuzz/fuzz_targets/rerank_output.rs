//! What a tenant's rerank component returns is untrusted: `(index, score)` pairs for `n`
//! candidates, checked by `sluice_core::stages::rerank_order`. Accepted output must be a
//! permutation of the candidates, best score first.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::stages::rerank_order;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 64);
    let scored: Vec<(u32, f32)> = rest
        .chunks_exact(5)
        .map(|c| {
            (
                u32::from(c[0]),
                f32::from_le_bytes([c[1], c[2], c[3], c[4]]),
            )
        })
        .collect();
    if let Ok(order) = rerank_order(&scored, n) {
        let mut seen = vec![false; n];
        for &i in &order {
            assert!(!std::mem::replace(&mut seen[i], true), "{i} twice");
        }
        assert!(seen.iter().all(|&s| s));
        let score = |i: usize| scored.iter().find(|p| p.0 as usize == i).map(|p| p.1);
        for w in order.windows(2) {
            assert!(score(w[0]) >= score(w[1]), "not best first");
        }
    }
});
