//! What calls to a component cost, measured the same way by `make bench` and by
//! `sluice component bench` / `sluice component test`: wall time and fuel per call, as
//! nearest-rank percentiles — for rerank calls and prompt-assembly calls alike.

use std::collections::HashMap;
use std::time::Duration;

use sluice_contract::stages::nearest_rank;

use crate::{
    Call, Candidate, Date, Message, MetaField, MetaValue, Prepared, PromptInput, PromptSettings,
    RerankError, Sandbox, Source,
};

/// Candidates like a request's: `n` chunks of about 860 bytes of text, each with five
/// metadata fields of every kind (an audience list, a date, a topic, a year, a flag).
pub fn sample_candidates(n: usize) -> Vec<Candidate> {
    (0..n)
        .map(|i| Candidate {
            id: format!("doc-{i}"),
            title: format!("Document {i}"),
            text: "a chunk of retrieved text about card limits and international transfers "
                .repeat(12),
            score: 1.0 / (60.0 + i as f32),
            chunk: (i % 7) as u32,
            metadata: vec![
                MetaField {
                    key: "audience".into(),
                    value: MetaValue::Strings(if i % 4 == 0 {
                        vec!["enterprise".into()]
                    } else {
                        vec!["free".into(), "pro".into(), "enterprise".into()]
                    }),
                },
                MetaField {
                    key: "draft".into(),
                    value: MetaValue::Boolean(i % 9 == 0),
                },
                MetaField {
                    key: "topic".into(),
                    value: MetaValue::Text("cards".into()),
                },
                MetaField {
                    key: "updated_at".into(),
                    value: MetaValue::Date(Date {
                        text: "2025-03-01T09:00:00Z".into(),
                        seconds: 1_740_819_600.0 - 86_400.0 * i as f64,
                    }),
                },
                MetaField {
                    key: "year".into(),
                    value: MetaValue::Number(2025.0 - (i % 3) as f64),
                },
            ],
        })
        .collect()
}

/// What `runs` calls cost.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Calls made.
    pub calls: usize,
    /// Median and 99th percentile of wall time per call.
    pub wall: (Duration, Duration),
    /// Median and 99th percentile of fuel per call.
    pub fuel: (u64, u64),
    /// Median and 99th percentile of CPU time per call (what the deadline is measured in).
    pub cpu: (Duration, Duration),
    /// Calls that failed.
    pub failed: usize,
    /// The first failure, if any call failed.
    pub failure: Option<RerankError>,
}

impl Measured {
    /// The share of the calls that failed.
    pub fn failed_rate(&self) -> f64 {
        self.failed as f64 / self.calls.max(1) as f64
    }
}

/// Runs `call` `runs` times (at least once), each in a fresh store as a request does.
pub fn measure(sandbox: &Sandbox, prepared: &Prepared, call: &Call<'_>, runs: usize) -> Measured {
    measured(runs, || {
        let (result, cost) = sandbox.rerank_costed(prepared, call, HashMap::new());
        (result.err(), cost)
    })
}

/// Runs a prompt component on `input` `runs` times (at least once), each in a fresh store.
pub fn measure_prompt(
    sandbox: &Sandbox,
    prepared: &Prepared,
    input: &PromptInput,
    runs: usize,
) -> Measured {
    measured(runs, || {
        let (result, cost) = sandbox.assemble_costed(prepared, input);
        (result.err(), cost)
    })
}

/// `runs` calls of `call` (its failure, if any, and its cost), as percentiles.
fn measured(
    runs: usize,
    mut call: impl FnMut() -> (Option<RerankError>, crate::CallCost),
) -> Measured {
    let runs = runs.max(1);
    let mut wall = Vec::with_capacity(runs);
    let mut cpu = Vec::with_capacity(runs);
    let mut fuel = Vec::with_capacity(runs);
    let (mut failed, mut failure) = (0, None);
    for _ in 0..runs {
        let (error, cost) = call();
        if let Some(e) = error {
            failed += 1;
            failure.get_or_insert(e);
        }
        wall.push(cost.wall);
        cpu.push(cost.cpu);
        fuel.push(cost.fuel);
    }
    wall.sort_unstable();
    cpu.sort_unstable();
    fuel.sort_unstable();
    Measured {
        calls: runs,
        wall: (nearest_rank(&wall, 0.5), nearest_rank(&wall, 0.99)),
        fuel: (nearest_rank(&fuel, 0.5), nearest_rank(&fuel, 0.99)),
        cpu: (nearest_rank(&cpu, 0.5), nearest_rank(&cpu, 0.99)),
        failed,
        failure,
    }
}

/// The input of a prompt component for `n` sources like [`sample_candidates`]' (their text,
/// title and metadata as JSON text), with the built-in messages made of them as Sluice numbers
/// them, default settings and the default deployment's token budget (7,117: an 8,192-token
/// window less 256 for the answer and a 10 % margin).
pub fn sample_prompt(n: usize) -> PromptInput {
    let question = "what is the card limit";
    let sources: Vec<Source> = (sample_candidates(n).into_iter().zip(1u32..))
        .map(|(c, number)| Source {
            number,
            id: c.id,
            title: c.title,
            text: c.text,
            section: String::new(),
            page: 0,
            metadata: vec![("topic".into(), "\"cards\"".into())],
        })
        .collect();
    let numbered: Vec<String> = (sources.iter())
        .map(|s| format!("[{}] {}\n{}", s.number, s.title, s.text))
        .collect();
    let user = format!(
        "Sources:\n{}\n\nQuestion: {question}",
        numbered.join("\n\n")
    );
    let message = |role: &str, content: String| Message {
        role: role.into(),
        content,
    };
    PromptInput {
        question: question.into(),
        turns: Vec::new(),
        sources,
        context: Vec::new(),
        settings: PromptSettings {
            instructions: String::new(),
            no_answer: String::new(),
            citations: true,
            answer_without_sources: true,
        },
        budget: 7_117,
        built_in: vec![
            message(
                "system",
                "Answer using only the numbered sources provided. Cite the sources you use \
                 inline as [n], the number of the source."
                    .into(),
            ),
            message("user", user),
        ],
    }
}
