//! A rule's `cost` as written: a fixed weight, a request header, or a cost
//! known from the response (its estimate, and the places the response says
//! what the request cost, each with its price).

use crate::config::describe::raw_struct;

/// A rule's request weight as written: `5`, `"header:x-cost"`, or an
/// object for a cost known from the response.
///
/// Read by hand so that a negative, fractional or otherwise wrong value gets
/// a message saying what is expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawCost {
    /// A fixed weight (checked by `compile`).
    Fixed(u64),
    /// The text form, `header:NAME` (checked by `compile`).
    Text(String),
    /// `{"estimate": ..., "response": ...}`: admitted for the estimate,
    /// charged what the response says.
    Response(RawResponseCost),
}

raw_struct! {
/// A cost known from the response: each request is admitted for `estimate`, then charged or refunded the difference with what `response` says it cost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawResponseCost {
    /// What a request is admitted for: an integer (0 by default), `header:NAME` or `body:PATH` of the request.
    #[default]
    #[schema(schemars(schema_with = "crate::config::schema::estimate"))]
    pub estimate: RawEstimate,
    /// Where the response says what the request cost: `header:NAME`, `trailer:NAME` or `body:PATH`, or a list of 1 to 4 of them (each may be `{"from", "times"}`), summed.
    #[schema(schemars(schema_with = "crate::config::schema::response_places::<RawPricedPlace>"))]
    pub response: RawPlaces,
}
}

/// A response cost's places as written: one, or a list of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawPlaces(pub Vec<RawPlace>);

raw_struct! {
/// Where in the request's dynamic metadata another filter wrote a limit: a struct with an integer `requests_per_unit` and a `unit` (`second` to `year`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawMetadataPlace {
    /// The `filter_metadata` namespace (`envoy.filters.http.ext_proc`).
    pub namespace: String,
    /// The key of the struct in it.
    pub key: String,
}
}

/// A place a response says a count, as written: its text, or an object
/// weighting it (read as a [`RawPricedPlace`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawPlace {
    /// `header:NAME`, `trailer:NAME` or `body:PATH`: the count as is.
    Text(String),
    /// `{"from": ..., "times": ...}`.
    Priced(RawPricedPlace),
}

raw_struct! {
/// A place a response says a count, weighted: the count times `times`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawPricedPlace {
    /// `header:NAME`, `trailer:NAME` or `body:PATH`.
    #[schema(schemars(schema_with = "crate::config::schema::response_place"))]
    pub from: String,
    /// What one unit of the count costs: a non-negative decimal of at most 3 decimal places, at most 1000000 (`4`, `0.1`).
    #[schema(schemars(schema_with = "crate::config::schema::times"))]
    pub times: RawTimes,
}
}

/// A price as written: a number or a string of one (`4`, `0.1`, `"0.1"`),
/// its text checked when compiled (`crate::cost::price`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTimes(pub String);

/// A response cost's estimate as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawEstimate {
    /// A fixed estimate, 0 or more.
    Fixed(u64),
    /// `header:NAME` or `body:PATH`.
    Text(String),
}

impl Default for RawEstimate {
    fn default() -> Self {
        RawEstimate::Fixed(0)
    }
}

/// The schema's default of a response cost's `estimate`: as written.
#[cfg(feature = "schema")]
impl serde::Serialize for RawEstimate {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RawEstimate::Fixed(units) => serializer.serialize_u64(*units),
            RawEstimate::Text(text) => serializer.serialize_str(text),
        }
    }
}

impl Default for RawCost {
    fn default() -> Self {
        RawCost::Fixed(1)
    }
}

/// What a `cost` must be, for error messages.
pub const COST_EXPECTED: &str =
    "must be an integer of at least 1, \"header:NAME\", \"metadata:NAMESPACE:KEY\" or {\"estimate\", \"response\"}";
