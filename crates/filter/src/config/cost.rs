//! A rule's `cost`: a fixed weight, a request header, or a cost known from
//! the response (admitted for an estimate, settled when the response says
//! what the request cost). What the rule's limits must be for it is
//! checked where the plan is put together, by their kinds.

use super::checks::field_path;
use super::plan::{Cost, CostSource, Estimate, PricedSource, ResponseCost, MAX_COST_SOURCES};
use super::raw::{RawCost, RawEstimate, RawPlace, RawResponseCost, COST_EXPECTED};
use crate::cost::extract::FieldPath;
use crate::cost::metadata::MetadataPlace;
use crate::cost::price::Price;
use sluice_core::{FieldError, MAX_REQUESTS};

/// Checks a rule's `cost`: an integer from 1 to the largest `requests`,
/// `header:NAME`, or `{"estimate", "response"}`.
pub(crate) fn compile(path: &str, raw: &RawCost) -> Result<Cost, FieldError> {
    match raw {
        RawCost::Fixed(n) if (1..=MAX_REQUESTS).contains(n) => Ok(Cost::Fixed(*n)),
        RawCost::Fixed(n) => Err(FieldError::at(
            path,
            format!("must be between 1 and {MAX_REQUESTS}, got {n}"),
        )),
        RawCost::Text(text) => match text.split_once(':') {
            Some(("header", name)) if !name.is_empty() => {
                Ok(Cost::Header(name.to_ascii_lowercase()))
            }
            Some(("metadata", place)) => MetadataPlace::parse(place)
                .map(Cost::Metadata)
                .ok_or_else(|| {
                    FieldError::at(
                        path,
                        format!(
                            "\"metadata:NAMESPACE:KEY\" needs a namespace and a key, got {text:?}"
                        ),
                    )
                }),
            _ => Err(FieldError::at(
                path,
                format!("{COST_EXPECTED}, got {text:?}"),
            )),
        },
        RawCost::Response(raw) => response(path, raw).map(Cost::Response),
    }
}

fn response(path: &str, raw: &RawResponseCost) -> Result<ResponseCost, FieldError> {
    let estimate_path = field_path(path, "estimate");
    let estimate = match &raw.estimate {
        RawEstimate::Fixed(n) if *n <= MAX_REQUESTS => Estimate::Fixed(*n),
        RawEstimate::Fixed(n) => {
            return Err(FieldError::at(
                estimate_path,
                format!("must be between 0 and {MAX_REQUESTS}, got {n}"),
            ))
        }
        RawEstimate::Text(text) => match text.split_once(':') {
            Some(("header", name)) if !name.is_empty() => {
                Estimate::Header(name.to_ascii_lowercase())
            }
            Some(("body", field)) => Estimate::Body(body_path(&estimate_path, field)?),
            _ => {
                return Err(FieldError::at(
                    estimate_path,
                    format!("must be an integer, \"header:NAME\" or \"body:PATH\", got {text:?}"),
                ))
            }
        },
    };
    let response_path = field_path(path, "response");
    if raw.response.0.is_empty() || raw.response.0.len() > MAX_COST_SOURCES {
        return Err(FieldError::at(
            response_path,
            format!("must name 1 to {MAX_COST_SOURCES} places"),
        ));
    }
    let sources = raw
        .response
        .0
        .iter()
        .enumerate()
        .map(|(i, place)| {
            let at = if raw.response.0.len() == 1 {
                response_path.clone()
            } else {
                format!("{response_path}[{i}]")
            };
            priced(&at, place)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ResponseCost { estimate, sources })
}

/// A place of the response, at `path`, with its price.
fn priced(path: &str, raw: &RawPlace) -> Result<PricedSource, FieldError> {
    match raw {
        RawPlace::Text(text) => Ok(PricedSource {
            source: source(path, text)?,
            price: Price::ONE,
        }),
        RawPlace::Priced(p) => Ok(PricedSource {
            source: source(&field_path(path, "from"), &p.from)?,
            price: Price::parse(&p.times.0)
                .map_err(|m| FieldError::at(field_path(path, "times"), m))?,
        }),
    }
}

fn source(path: &str, text: &str) -> Result<CostSource, FieldError> {
    match text.split_once(':') {
        Some(("header", name)) if header_name(name) => {
            Ok(CostSource::Header(name.to_ascii_lowercase()))
        }
        Some(("trailer", name)) if header_name(name) => {
            Ok(CostSource::Trailer(name.to_ascii_lowercase()))
        }
        Some(("body", field)) => body_path(path, field).map(CostSource::Body),
        Some(("metadata", place)) => MetadataPlace::parse(place)
            .map(CostSource::Metadata)
            .ok_or_else(|| {
                FieldError::at(
                    path,
                    format!("\"metadata:NAMESPACE:KEY\" needs a namespace and a key, got {text:?}"),
                )
            }),
        _ => Err(FieldError::at(
            path,
            format!("must be \"header:NAME\", \"trailer:NAME\", \"body:PATH\" or \"metadata:NAMESPACE:KEY\", got {text:?}"),
        )),
    }
}

fn header_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with(':') && name.bytes().all(|b| b.is_ascii_graphic())
}

/// A body field's path (see [`FieldPath::parse`]).
fn body_path(path: &str, field: &str) -> Result<FieldPath, FieldError> {
    FieldPath::parse(field).map_err(|e| FieldError::at(path, format!("body:{field}: {e}")))
}

/// Why a limit's setting is refused in a rule whose cost comes from the
/// response.
pub(crate) const RESPONSE_ONLY: &str =
    "not with a cost from the response: each request is admitted \
     for its estimate and charged the rest after its response, on its own";

/// What a rate limit admits at most at once, in `check_capacity`'s message.
pub(crate) const SOFT_BURST: &str = "its burst with the soft allowance";
