//! The few protobuf messages of Envoy's rate limit service protocol
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) that the
//! filter sends and reads, encoded by hand: a gRPC runtime would outweigh
//! the rest of the filter.
//!
//! The request carries one descriptor per global limit; the answer
//! ([`answer`]) is read into the limiter API's [`sluice_wire::CheckResponse`],
//! so the rest of the request path is the same for both protocols, and into
//! the [`Reply`] the service asks for (headers, a denial body).

mod answer;
mod proto;

use crate::cost::metadata::MetadataLimit;
pub use answer::{decode_response, Read, Reply};
use proto::{put_bytes, put_varint_field};

/// The gRPC service and method the filter calls.
pub const SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";
/// See [`SERVICE`].
pub const METHOD: &str = "ShouldRateLimit";

/// One descriptor of a request: its entries, in order, and its weight when
/// it differs from the request's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// `(key, value)` entries.
    pub entries: Vec<(String, String)>,
    /// Per-descriptor `hits_addend`; `None` uses the request's.
    pub hits: Option<u64>,
    /// The request's own limit (`RateLimitDescriptor.limit`), from its
    /// dynamic metadata; `None`: the service's configured one.
    pub limit: Option<MetadataLimit>,
}

/// Encodes a `RateLimitRequest` of `domain` for `descriptors`, each adding
/// `hits` unless it says otherwise. The request's `hits_addend` cannot say
/// 0 (a `uint32` of 0 reads as 1): a weight of 0 goes in each descriptor's
/// own `hits_addend` (a `UInt64Value`), which services that read it honour.
pub fn encode_request(domain: &str, descriptors: &[Descriptor], hits: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put_bytes(&mut out, 1, domain.as_bytes());
    let mut descriptor = Vec::new();
    let mut entry = Vec::new();
    for d in descriptors {
        descriptor.clear();
        for (key, value) in &d.entries {
            entry.clear();
            put_bytes(&mut entry, 1, key.as_bytes());
            put_bytes(&mut entry, 2, value.as_bytes());
            put_bytes(&mut descriptor, 1, &entry);
        }
        if let Some(limit) = d.limit {
            // RateLimitOverride { requests_per_unit = 1, unit = 2 }
            entry.clear();
            put_varint_field(&mut entry, 1, limit.requests);
            put_varint_field(&mut entry, 2, u64::from(limit.unit.code().unsigned_abs()));
            put_bytes(&mut descriptor, 2, &entry);
        }
        if let Some(h) = d.hits.or((hits == 0).then_some(0)) {
            // google.protobuf.UInt64Value { value = 1 }
            entry.clear();
            put_varint_field(&mut entry, 1, h);
            put_bytes(&mut descriptor, 3, &entry);
        }
        put_bytes(&mut out, 2, &descriptor);
    }
    // uint32 on the wire: a larger weight cannot be said, and is capped
    // (it is far above any limit an RLS can hold).
    let hits = hits.min(u64::from(u32::MAX));
    if hits > 1 {
        put_varint_field(&mut out, 3, hits);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> Descriptor {
        Descriptor {
            entries: entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            hits,
            limit: None,
        }
    }

    #[test]
    fn requests_are_encoded_field_by_field() {
        let body = encode_request(
            "d",
            &[descriptor(
                &[("generic_key", "r"), ("remote_address", "1.2.3.4")],
                None,
            )],
            1,
        );
        let mut expected = vec![0x0a, 1, b'd', 0x12];
        let entry1 = [&[0x0a, 11][..], b"generic_key", &[0x12, 1], b"r"].concat();
        let entry2 = [&[0x0a, 14][..], b"remote_address", &[0x12, 7], b"1.2.3.4"].concat();
        let inner = [
            &[0x0a, entry1.len() as u8][..],
            &entry1,
            &[0x0a, entry2.len() as u8],
            &entry2,
        ]
        .concat();
        expected.push(inner.len() as u8);
        expected.extend_from_slice(&inner);
        assert_eq!(body, expected);
        // A weight other than 1: hits_addend (3), and per descriptor (3 in
        // the descriptor, a UInt64Value).
        let body = encode_request("d", &[descriptor(&[("k", "v")], Some(300))], 5);
        assert!(body.ends_with(&[0x18, 5]), "{body:?}");
        let wrapped = [0x1a, 3, 0x08, 0xac, 0x02];
        assert!(body.windows(5).any(|w| w == wrapped), "{body:?}");
        // A weight of 0: in each descriptor without its own (a
        // UInt64Value of 0), none in the request (where 0 reads as 1).
        let body = encode_request(
            "d",
            &[
                descriptor(&[("k", "v")], None),
                descriptor(&[("k", "w")], Some(2)),
            ],
            0,
        );
        let zero = [0x1a, 2, 0x08, 0x00];
        let two = [0x1a, 2, 0x08, 0x02];
        assert_eq!(
            body.windows(4).filter(|w| *w == zero).count(),
            1,
            "{body:?}"
        );
        assert_eq!(body.windows(4).filter(|w| *w == two).count(), 1, "{body:?}");
        assert!(!body.ends_with(&[0x18, 0]), "{body:?}");
    }
}
