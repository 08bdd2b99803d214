//! The upload's smoke run: a component is called once under the limits before it is accepted —
//! on two made-up candidates (metadata of every type on one, none on the other) and a context
//! of its own, then under each context it declares ([`crate::contexts`]).

use std::collections::HashMap;

use crate::UploadError;
use crate::engine::{Call, Prepared, Sandbox};
use crate::host::SMOKE_DIM;
use crate::registry::context_entries;
use crate::worlds::{Candidate, Date, MetaField, MetaValue};
use sluice_contract::stages::RerankContext;

/// Runs `prepared` (compiled from `binary`) as the upload's check.
pub(crate) fn run(
    sandbox: &Sandbox,
    prepared: &Prepared,
    binary: &[u8],
) -> Result<(), UploadError> {
    // Its own smoke context, then each one it declares.
    let own = serde_json::json!({"plan": "smoke"});
    let own = RerankContext::parse(&own).map_err(UploadError::NotAComponent)?;
    let declared = crate::contexts::declared(binary)?;
    let contexts = std::iter::once((String::new(), own)).chain(declared.into_iter().map(|c| {
        let shown = serde_json::to_string(&c).unwrap_or_default();
        (format!(" under the declared context {shown}"), c)
    }));
    let failed = |context: &str| {
        let context = context.to_string();
        move |error| UploadError::SmokeRun { context, error }
    };
    if prepared.is_prompt() {
        for (shown, context) in contexts {
            let input = crate::worlds::PromptInput {
                context: (context.iter())
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..crate::prompt::smoke_input()
            };
            (sandbox.assemble_costed(prepared, &input).0).map_err(failed(&shown))?;
        }
        return Ok(());
    }
    // Metadata of every kind and a context entry, so that a component reading them is
    // exercised before it is accepted.
    let metadata = vec![
        MetaField {
            key: "audience".into(),
            value: MetaValue::Strings(vec!["smoke".into()]),
        },
        MetaField {
            key: "draft".into(),
            value: MetaValue::Boolean(false),
        },
        MetaField {
            key: "topic".into(),
            value: MetaValue::Text("smoke".into()),
        },
        MetaField {
            key: "updated_at".into(),
            value: MetaValue::Date(Date {
                text: "2026-01-01T00:00:00Z".into(),
                seconds: 1_767_225_600.0,
            }),
        },
        MetaField {
            key: "year".into(),
            value: MetaValue::Number(2026.0),
        },
    ];
    let smoke = [
        Candidate {
            id: "a".into(),
            title: "A".into(),
            text: "first candidate".into(),
            score: 0.03,
            chunk: 0,
            metadata: metadata.clone(),
        },
        Candidate {
            id: "b".into(),
            title: "B".into(),
            text: "second candidate".into(),
            score: 0.02,
            chunk: 1,
            metadata: Vec::new(),
        },
    ];
    // The smoke run's texts come with made-up unit vectors, so that a component calling
    // `embed` is checked without running (or depending on) the host's model.
    let unit = |i: usize| {
        (0..SMOKE_DIM)
            .map(|d| if d == i { 1.0 } else { 0.0 })
            .collect::<Vec<f32>>()
    };
    let known = HashMap::from([
        ("smoke test".to_string(), unit(0)),
        (smoke[0].text.clone(), unit(1)),
        (smoke[1].text.clone(), unit(2)),
    ]);
    for (shown, context) in contexts {
        let context = context_entries(&context);
        let call = Call {
            query: "smoke test",
            context: &context,
            candidates: &smoke,
        };
        (sandbox.rerank_costed(prepared, &call, known.clone()).0).map_err(failed(&shown))?;
    }
    Ok(())
}
