//! Write Sluice components in Rust: rerank components (this module's root) and
//! prompt-assembly components ([`prompt`]).
//!
//! A rerank component, for the `sluice:rerank@0.2.0` world
//! (`wit/rerank-0.2`): score the candidates of a question, read their documents' metadata and
//! the caller's request context, drop the ones that do not belong.
//!
//! ```ignore
//! use sluice_rerank_sdk::{Candidate, Context, Guest, Ranking, export_reranker, ranking};
//!
//! struct MyReranker;
//! impl Guest for MyReranker {
//!     fn rerank(query: String, context: Context, candidates: Vec<Candidate>) -> Result<Ranking, String> {
//!         let plan = sluice_rerank_sdk::context(&context, "plan");
//!         // `None` drops the candidate; `Some(score)` keeps it with that score.
//!         Ok(ranking(candidates.iter().map(|c| {
//!             let allowed = c.strings("audience").is_none_or(|a| plan.is_some_and(|p| a.iter().any(|x| x == p)));
//!             allowed.then_some(c.score)
//!         })))
//!     }
//! }
//! export_reranker!(MyReranker);
//! ```
//!
//! Start from `sluice component new NAME`, build with `sluice component build`, try it with
//! `sluice component test`, and upload the `.component.wasm` the build prints.
//!
//! A panic is reported to the host before the component traps (the export macros install a
//! panic hook that writes Rust's `panicked at FILE:LINE:COLUMN: MESSAGE` as an error log
//! line): the failure then says which line of the source failed, and why — in `sluice
//! component test`, in an answer's `meta.rerank_error` and in the versions listing.

/// The generated bindings of the `reranker` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "reranker",
        path: "../../wit/rerank-0.2",
        pub_export_macro: true,
        export_macro_name: "export_bindings",
        default_bindings_module: "sluice_rerank_sdk::bindings",
    });
}

/// Exports `$ty`'s [`Guest::rerank`] as the component's `rerank`, with panics reported to the
/// host first ([`report_panics`]).
#[macro_export]
macro_rules! export_reranker {
    ($ty:ident) => {
        struct __SluiceReportsPanics;
        impl $crate::Guest for __SluiceReportsPanics {
            fn rerank(
                query: ::std::string::String,
                context: $crate::Context,
                candidates: ::std::vec::Vec<$crate::Candidate>,
            ) -> ::std::result::Result<$crate::Ranking, ::std::string::String> {
                $crate::report_panics();
                <$ty as $crate::Guest>::rerank(query, context, candidates)
            }
        }
        $crate::bindings::export_bindings!(__SluiceReportsPanics with_types_in $crate::bindings);
    };
}

/// Exports `$ty`'s [`prompt::Guest::assemble`] as the component's `assemble`, with panics
/// reported to the host first ([`prompt::report_panics`]).
#[macro_export]
macro_rules! export_assembler {
    ($ty:ident) => {
        struct __SluiceReportsPanics;
        impl $crate::prompt::Guest for __SluiceReportsPanics {
            fn assemble(
                input: $crate::prompt::PromptInput,
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::prompt::Message>,
                ::std::string::String,
            > {
                $crate::prompt::report_panics();
                <$ty as $crate::prompt::Guest>::assemble(input)
            }
        }
        $crate::prompt::bindings::export_bindings!(
            __SluiceReportsPanics with_types_in $crate::prompt::bindings
        );
    };
}

/// Has a panic written to the host's log, as an error line in Rust's own words (`panicked at
/// src/lib.rs:36:59: every document has tags`), before the component traps: the host keeps
/// that line as what the failed call says. [`export_reranker!`] calls it before each call.
pub fn report_panics() {
    hook_panics(|line| log(Level::Error, line));
}

/// Installs, once, a panic hook that hands `write` the panic as one line. Each world logs
/// through its own import, so that a component imports only its world's host.
#[doc(hidden)]
pub fn hook_panics(write: fn(&str)) {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(move |info| {
            write(&info.to_string().replace('\n', " "));
        }));
    });
}

pub use bindings::sluice::rerank::host::{Level, count_tokens, embed, log};
pub use bindings::sluice::rerank::types::{Date, MetaField, MetaValue, Scored};
pub use bindings::{Candidate, ContextEntry, Guest, Ranking};

/// Write a Sluice prompt-assembly component, for the `sluice:prompt@0.1.0` world
/// (`wit/prompt`): the messages the LLM is sent, from the question, the conversation, the
/// ranked sources, the tenant's settings and the built-in messages.
///
/// ```ignore
/// use sluice_rerank_sdk::prompt::{Guest, Message, PromptInput, export_assembler};
///
/// struct MyPrompt;
/// impl Guest for MyPrompt {
///     fn assemble(input: PromptInput) -> Result<Vec<Message>, String> {
///         let mut messages = input.built_in;
///         messages[0].content = format!("Answer in French.\n{}", messages[0].content);
///         Ok(messages)
///     }
/// }
/// export_assembler!(MyPrompt);
/// ```
pub mod prompt {
    /// The generated bindings of the `assembler` world.
    #[allow(missing_docs)]
    pub mod bindings {
        wit_bindgen::generate!({
            world: "assembler",
            path: "../../wit/prompt",
            pub_export_macro: true,
            export_macro_name: "export_bindings",
            default_bindings_module: "sluice_rerank_sdk::prompt::bindings",
        });
    }

    pub use bindings::sluice::prompt::host::{Level, count_tokens, log};
    pub use bindings::sluice::prompt::types::{Message, PromptInput, Settings, Source, Turn};
    pub use bindings::Guest;
    pub use crate::export_assembler;

    /// [`crate::report_panics`] for a prompt component (through this world's `log`).
    pub fn report_panics() {
        crate::hook_panics(|line| log(Level::Error, line));
    }

    /// A message of `role` with `content`.
    pub fn message(role: &str, content: impl Into<String>) -> Message {
        Message {
            role: role.to_string(),
            content: content.into(),
        }
    }
}

/// The request context as `rerank` receives it: entries sorted by key.
pub type Context = Vec<ContextEntry>;

/// The value of the request context's `key`, if the caller sent it.
pub fn context<'a>(context: &'a [ContextEntry], key: &str) -> Option<&'a str> {
    context
        .binary_search_by(|e| e.key.as_str().cmp(key))
        .ok()
        .map(|i| context[i].value.as_str())
}

/// Typed access to a candidate's document metadata (sorted by key, so lookups are binary
/// searches). Each getter answers `None` when the field is absent or of another type.
impl Candidate {
    /// The field `key`, of whatever type.
    pub fn meta(&self, key: &str) -> Option<&MetaValue> {
        self.metadata
            .binary_search_by(|f| f.key.as_str().cmp(key))
            .ok()
            .map(|i| &self.metadata[i].value)
    }

    /// A string field (not a date).
    pub fn text_meta(&self, key: &str) -> Option<&str> {
        match self.meta(key)? {
            MetaValue::Text(t) => Some(t),
            _ => None,
        }
    }

    /// A number field.
    pub fn number(&self, key: &str) -> Option<f64> {
        match self.meta(key)? {
            MetaValue::Number(n) => Some(*n),
            _ => None,
        }
    }

    /// A boolean field.
    pub fn flag(&self, key: &str) -> Option<bool> {
        match self.meta(key)? {
            MetaValue::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    /// A date field's instant, in seconds since the Unix epoch.
    pub fn date(&self, key: &str) -> Option<f64> {
        match self.meta(key)? {
            MetaValue::Date(d) => Some(d.seconds),
            _ => None,
        }
    }

    /// A list field; a single string reads as a list of one.
    pub fn strings(&self, key: &str) -> Option<&[String]> {
        match self.meta(key)? {
            MetaValue::Strings(items) => Some(items),
            MetaValue::Text(t) => Some(std::slice::from_ref(t)),
            _ => None,
        }
    }
}

/// A [`Ranking`] from one decision per candidate, in input order: `Some(score)` keeps it
/// with that score, `None` drops it.
pub fn ranking(decisions: impl IntoIterator<Item = Option<f32>>) -> Ranking {
    let mut out = Ranking {
        scores: Vec::new(),
        dropped: Vec::new(),
    };
    for (index, decision) in decisions.into_iter().enumerate() {
        let index = index as u32;
        match decision {
            Some(score) => out.scores.push(Scored { index, score }),
            None => out.dropped.push(index),
        }
    }
    out
}

/// A [`Ranking`] that keeps every candidate, from one score each, in input order.
pub fn scores(values: impl IntoIterator<Item = f32>) -> Ranking {
    ranking(values.into_iter().map(Some))
}
