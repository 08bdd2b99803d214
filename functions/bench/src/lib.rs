//! Load testing Sluice. So far: [`synthetic`], an OpenAI-compatible upstream that streams at a
//! fixed token rate — a benchmark fixture, so that a load test measures Sluice and not a model.
#![warn(missing_docs)]

pub mod synthetic;
