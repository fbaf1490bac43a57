//! The raw form of `count_when`, a limit's condition on the response's
//! outcome (described as the other raw types are: see [`super`]).

use crate::config::describe::raw_struct;

raw_struct! {
/// A response header condition of `count_when`.
#[derive(Debug)]
pub struct RawResponseHeader {
    /// Header name (case-insensitive).
    pub name: String,
    /// A regular expression the header's whole value matches.
    #[default]
    pub value: Option<String>,
}
}

raw_struct! {
/// Which responses a limit counts; every condition given must hold.
#[derive(Debug)]
pub struct RawCountWhen {
    /// Response statuses, any of: a code (`"401"`), a class (`"5xx"`) or a
    /// range (`"500-504"`).
    #[default]
    pub status: Option<Vec<String>>,
    /// A response header that must be present (and match `value`, if
    /// given).
    #[default]
    pub header: Option<RawResponseHeader>,
    /// gRPC statuses, any of (the response's `grpc-status` header or
    /// trailer).
    #[default]
    pub grpc_status: Option<Vec<u64>>,
}
}
