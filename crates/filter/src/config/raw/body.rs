//! The raw form of `headers_while_reading_body` (described as the other
//! raw types are: see [`super`]).

use crate::config::describe::raw_enum;

raw_enum! {
/// What a request's headers do while its decision waits for its body (a
/// rule reads the body).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HeadersWhileBody {
    /// They go on to the upstream; the body only once the request is
    /// admitted.
    #[default]
    Forward = "forward",
    /// Envoy holds them until the decision: nothing of a refused request
    /// reaches the upstream. Needs the filter's
    /// `allow_on_headers_stop_iteration` (Envoy 1.35 and later).
    Hold = "hold",
}
}
