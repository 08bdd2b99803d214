//! The worlds a component may implement — for rerank `sluice:rerank@0.2.0` and the frozen
//! `@0.1.0`, for prompt assembly `sluice:prompt@0.1.0` — and what a 0.1 rerank component is
//! given in place of 0.2's candidates.

// Generated from the WIT; its docs live in `wit/rerank-0.2/rerank.wit`. Host functions may
// trap (`trappable`): that is how a call over its host budget is stopped where the WIT gives
// the function no error to return.
#[allow(missing_docs)]
pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        world: "reranker",
        path: "../../wit/rerank-0.2",
        imports: { default: trappable },
    });
}

// The frozen 0.1 world (`wit/rerank/rerank.wit`), for components built before 0.2.
#[allow(missing_docs)]
pub(crate) mod bindings_0_1 {
    wasmtime::component::bindgen!({
        world: "reranker",
        path: "../../wit/rerank",
        imports: { default: trappable },
    });
}

// The prompt-assembly world (`wit/prompt/prompt.wit`).
#[allow(missing_docs)]
pub(crate) mod bindings_prompt {
    wasmtime::component::bindgen!({
        world: "assembler",
        path: "../../wit/prompt",
        imports: { default: trappable },
    });
}

pub use bindings::sluice::rerank::host::Level;
pub use bindings::sluice::rerank::types::{
    Candidate, ContextEntry, Date, MetaField, MetaValue, Ranking, Scored,
};
pub use bindings_prompt::sluice::prompt::types::{
    Message, PromptInput, Settings as PromptSettings, Source, Turn,
};

/// Interface names a component may import (any patch release of 0.1 or 0.2).
pub(crate) const ALLOWED_IMPORTS: [&str; 6] = [
    "sluice:rerank/host@0.2.",
    "sluice:rerank/types@0.2.",
    "sluice:rerank/host@0.1.",
    "sluice:rerank/types@0.1.",
    "sluice:prompt/host@0.1.",
    "sluice:prompt/types@0.1.",
];
/// The world a component implements, as [`Prepared::world`] names it.
pub const WORLD_0_2: &str = "sluice:rerank/reranker@0.2.0";
/// The world of components built before 0.2.
pub const WORLD_0_1: &str = "sluice:rerank/reranker@0.1.0";
/// The world of prompt-assembly components.
pub const WORLD_PROMPT: &str = "sluice:prompt/assembler@0.1.0";

/// The route a component goes to (`rerank` or `prompt`), read from the function it exports
/// without compiling it (`rerank` in both rerank worlds, `assemble` in the prompt world): what
/// `sluice component upload` needs no flag for. `None` for bytes that are not a component
/// exporting either.
pub fn kind_of(bytes: &[u8]) -> Option<&'static str> {
    let binary = wat::parse_bytes(bytes).ok()?;
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(&binary) {
        match payload.ok()? {
            wasmparser::Payload::Version { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth = depth.saturating_sub(1),
            // The outer component's own exports, not those of a component nested in it.
            wasmparser::Payload::ComponentExportSection(exports) if depth == 1 => {
                for export in exports {
                    match export.ok()?.name.name {
                        "rerank" => return Some("rerank"),
                        "assemble" => return Some("prompt"),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    None
}

/// A candidate as a 0.1 component sees it: no chunk index, no metadata.
pub(crate) fn candidate_0_1(c: &Candidate) -> bindings_0_1::sluice::rerank::types::Candidate {
    bindings_0_1::sluice::rerank::types::Candidate {
        id: c.id.clone(),
        title: c.title.clone(),
        text: c.text.clone(),
        score: c.score,
    }
}
