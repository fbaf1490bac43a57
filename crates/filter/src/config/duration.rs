//! Duration strings: a whole number and a unit (`ms`, `s`, `m`, `h`, `d`),
//! or Envoy's decimal seconds (`"0.25s"`); see [`sluice_core::parse_duration`].

pub use sluice_core::parse_duration;
