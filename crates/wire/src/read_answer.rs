//! Reading the limiter's answers: the compact form the limiter writes
//! (`crate::answer::compact`) at no cost beyond the bytes, any other JSON
//! form by the loose reader (`crate::loose`).

use crate::answer::{compact, CheckResponse};
use crate::loose;

impl CheckResponse {
    /// Reads the answer to a check of `expected` limits; `None` for anything
    /// malformed, including an answer with another number of limits.
    #[inline]
    pub fn parse(body: &[u8], expected: usize) -> Option<CheckResponse> {
        let response = match compact::parse(body) {
            Some(response) => response,
            None => loose::parse(body)?,
        };
        (response.limits.len() == expected).then_some(response)
    }

    /// Reads the answer to a batch of `requests` over `expected` limits;
    /// `None` for anything malformed, including an answer without
    /// `admitted`, with more than `requests` admitted, or with delays that
    /// are not one per admitted request.
    #[inline]
    pub fn parse_batch(body: &[u8], expected: usize, requests: u32) -> Option<CheckResponse> {
        let response = CheckResponse::parse(body, expected)?;
        let admitted = response.admitted?;
        let delays_fit = response.delays_ms.is_empty()
            || usize::try_from(admitted).is_ok_and(|k| k == response.delays_ms.len());
        (admitted <= requests && delays_fit && response.allowed == (admitted == requests))
            .then_some(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;
    use sluice_core::{Denial, MILLISECOND};

    #[test]
    fn parses_answers() {
        let body = br#"{"allowed":false,"limits":[{"allowed":false,"limit":100,"remaining":0,"reset_ms":540,"retry_after_ms":600,"extra":1}]}"#;
        let r = CheckResponse::parse(body, 1).unwrap();
        assert!(!r.allowed);
        let d = r.limits[0].decision();
        assert_eq!(
            (d.reset, d.retry_after, d.denial),
            (
                540 * MILLISECOND,
                600 * MILLISECOND,
                Some(Denial::OverLimit)
            )
        );
        assert!(CheckResponse::parse(body, 2).is_none());
        assert!(CheckResponse::parse(b"garbage", 1).is_none());
        assert!(CheckResponse::parse(br#"{"allowed":true}"#, 0).is_none());
    }

    #[test]
    fn batch_answers() {
        let limits = r#""limits":[{"allowed":false,"limit":10,"remaining":0,"reset_ms":900,"retry_after_ms":100}]"#;
        let body = format!(r#"{{"allowed":false,{limits},"admitted":2,"delays_ms":[0,100]}}"#);
        let r = CheckResponse::parse_batch(body.as_bytes(), 1, 3).unwrap();
        assert_eq!((r.admitted, &r.delays_ms[..]), (Some(2), &[0, 100][..]));
        // Round trip: the limiter writes what the filter reads.
        assert_eq!(serde_json::to_string(&r).unwrap(), body);
        // More admitted than sent, delays not one per admitted request,
        // `allowed` not saying whether all were admitted, no `admitted`.
        assert!(CheckResponse::parse_batch(body.as_bytes(), 1, 1).is_none());
        let bad = format!(r#"{{"allowed":false,{limits},"admitted":2,"delays_ms":[0]}}"#);
        assert!(CheckResponse::parse_batch(bad.as_bytes(), 1, 3).is_none());
        let bad = format!(r#"{{"allowed":true,{limits},"admitted":2}}"#);
        assert!(CheckResponse::parse_batch(bad.as_bytes(), 1, 3).is_none());
        let plain = format!(r#"{{"allowed":false,{limits}}}"#);
        assert!(CheckResponse::parse_batch(plain.as_bytes(), 1, 3).is_none());
        // Without a batch the answer has neither field.
        let r = CheckResponse::parse(plain.as_bytes(), 1).unwrap();
        assert_eq!((r.admitted, r.delays_ms.len()), (None, 0));
        assert_eq!(serde_json::to_string(&r).unwrap(), plain);
    }

    /// The compact reader reads every answer the limiter writes as serde
    /// does, and anything it reads at all (here: answers with bytes changed,
    /// dropped or added) as serde does.
    #[test]
    fn the_compact_reader_agrees_with_serde() {
        let mut rng = Rng(0x00dd_ba11_5eed_0001);
        let mut read = 0;
        for _ in 0..3000 {
            let response = rng.answer();
            let body = serde_json::to_vec(&response).unwrap();
            assert_eq!(compact::parse(&body).as_ref(), Some(&response));
            for _ in 0..20 {
                let changed = rng.mutate(&body, b"0123456789,:{}[]\" ae-.");
                let serde: Option<CheckResponse> = serde_json::from_slice(&changed).ok();
                if let Some(fast) = compact::parse(&changed) {
                    read += 1;
                    assert_eq!(Some(fast), serde, "{}", String::from_utf8_lossy(&changed));
                }
            }
        }
        assert!(read > 1000, "{read}");
        // Other forms are the loose reader's.
        let spaced = br#"{ "allowed": true, "limits": [] }"#;
        assert!(compact::parse(spaced).is_none());
        assert!(CheckResponse::parse(spaced, 0).is_some());
    }
}
