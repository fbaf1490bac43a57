//! What a request cost, as its response tells: [`extract`] reads the counts
//! an upstream reports in its body (an LLM's `usage` tokens) while the body
//! streams past (the request path reads with it in
//! `crate::engine::cost_reader`), [`price`] weighs them, and [`metadata`]
//! reads a count another filter wrote into the request's dynamic metadata.

pub mod extract;
pub mod metadata;
pub mod price;
