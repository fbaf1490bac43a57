//! The limiter's answers.

use serde::{Deserialize, Serialize};
use sluice_core::{Decision, Denial, MILLISECOND};

/// `POST /v1/check` answer. Readers ignore fields they do not know, so
/// that the limiter can add some.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResponse {
    /// True when every limit allowed (and then every limit consumed); for a
    /// batch, when every request was admitted.
    pub allowed: bool,
    /// One result per requested limit, in request order. For a batch, the
    /// result of the last request decided: the last one when all were
    /// admitted, else the first refused one, decided after the admitted
    /// ones (`retry_after_ms` is its wait; `remaining` and `reset_ms` what
    /// the admitted ones left).
    pub limits: Vec<LimitResult>,
    /// A batch (the check's `batch`): how many requests were admitted, the
    /// first `admitted` in arrival order, each all-or-nothing across the
    /// limits; the others consumed nothing. Absent for a check without
    /// `batch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted: Option<u32>,
    /// A batch in delay mode: how long to hold each admitted request, in
    /// arrival order (`admitted` entries; each the longest of its limits'
    /// waits, rounded up). Absent when no admitted request waits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delays_ms: Vec<u64>,
}

/// What one limit decided, in whole milliseconds rounded up (a client that
/// waits the time given and retries is never early).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitResult {
    /// Whether this limit allowed the request.
    pub allowed: bool,
    /// The quota: requests per window.
    pub limit: u64,
    /// Requests of weight 1 that would pass now.
    pub remaining: u64,
    /// Time until the quota is entirely available again.
    pub reset_ms: u64,
    /// Time until a request of this weight can pass; 0 when allowed.
    pub retry_after_ms: u64,
    /// Delay mode: how long to hold the admitted request before it
    /// conforms; absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
    /// Leases: the units of the limit's `lease` granted to the caller,
    /// already debited (`remaining` and `reset_ms` count them); absent when
    /// 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub leased: u64,
    /// A penalty box holds the key: `retry_after_ms` is when it ends;
    /// absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub blocked: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl From<&Decision> for LimitResult {
    fn from(d: &Decision) -> Self {
        LimitResult {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            reset_ms: d.reset.div_ceil(MILLISECOND),
            retry_after_ms: d.retry_after.div_ceil(MILLISECOND),
            delay_ms: d.delay.div_ceil(MILLISECOND),
            leased: 0,
            blocked: matches!(d.denial, Some(Denial::Blocked { .. })),
        }
    }
}

impl LimitResult {
    /// As a core decision (a denial is [`Denial::OverLimit`]).
    #[inline]
    pub fn decision(&self) -> Decision {
        Decision {
            allowed: self.allowed,
            limit: self.limit,
            remaining: self.remaining,
            reset: self.reset_ms.saturating_mul(MILLISECOND),
            retry_after: self.retry_after_ms.saturating_mul(MILLISECOND),
            delay: self.delay_ms.saturating_mul(MILLISECOND),
            denial: (!self.allowed).then_some(Denial::OverLimit),
        }
    }
}

/// An error body: `{"error": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, starting with the field at fault when there is one.
    pub error: String,
}

/// A reader of answers in the one form the limiter writes them (compact,
/// fields in declaration order), without serde's machinery. It reads only
/// that form, and whatever it reads serde reads alike; anything else
/// (spaces, other field orders, unknown fields, escapes) is left to the
/// loose reader (`crate::loose`).
pub(crate) mod compact {
    use super::{CheckResponse, LimitResult};

    /// The answer in `body`, if `body` is in the compact form.
    pub(crate) fn parse(body: &[u8]) -> Option<CheckResponse> {
        let mut r = Reader(body);
        r.eat(br#"{"allowed":"#)?;
        let allowed = r.boolean()?;
        r.eat(br#","limits":["#)?;
        let mut limits = Vec::with_capacity(1);
        if r.eat(b"]").is_none() {
            loop {
                limits.push(r.result()?);
                if r.eat(b",").is_none() {
                    r.eat(b"]")?;
                    break;
                }
            }
        }
        let admitted = match r.eat(br#","admitted":"#) {
            Some(()) => Some(u32::try_from(r.number()?).ok()?),
            None => None,
        };
        let mut delays_ms = Vec::new();
        if r.eat(br#","delays_ms":["#).is_some() && r.eat(b"]").is_none() {
            loop {
                delays_ms.push(r.number()?);
                if r.eat(b",").is_none() {
                    r.eat(b"]")?;
                    break;
                }
            }
        }
        r.eat(b"}")?;
        r.0.is_empty().then_some(CheckResponse {
            allowed,
            limits,
            admitted,
            delays_ms,
        })
    }

    struct Reader<'a>(&'a [u8]);

    impl Reader<'_> {
        /// Skips `text` if the input starts with it.
        fn eat(&mut self, text: &[u8]) -> Option<()> {
            self.0 = self.0.strip_prefix(text)?;
            Some(())
        }

        fn boolean(&mut self) -> Option<bool> {
            if self.eat(b"true").is_some() {
                return Some(true);
            }
            self.eat(b"false").map(|()| false)
        }

        /// A `u64` in JSON's form: digits, no leading zero, no overflow.
        fn number(&mut self) -> Option<u64> {
            let digits = self.0.iter().take_while(|b| b.is_ascii_digit()).count();
            let (text, rest) = self.0.split_at_checked(digits)?;
            if text.is_empty() || (text.len() > 1 && text.first() == Some(&b'0')) {
                return None;
            }
            let n = text.iter().try_fold(0u64, |n, &d| {
                n.checked_mul(10)?
                    .checked_add(u64::from(d.wrapping_sub(b'0')))
            })?;
            // A number must end where a value ends.
            if rest
                .first()
                .is_some_and(|b| !matches!(b, b',' | b'}' | b']'))
            {
                return None;
            }
            self.0 = rest;
            Some(n)
        }

        fn result(&mut self) -> Option<LimitResult> {
            self.eat(br#"{"allowed":"#)?;
            let allowed = self.boolean()?;
            self.eat(br#","limit":"#)?;
            let limit = self.number()?;
            self.eat(br#","remaining":"#)?;
            let remaining = self.number()?;
            self.eat(br#","reset_ms":"#)?;
            let reset_ms = self.number()?;
            self.eat(br#","retry_after_ms":"#)?;
            let retry_after_ms = self.number()?;
            let delay_ms = match self.eat(br#","delay_ms":"#) {
                Some(()) => self.number()?,
                None => 0,
            };
            let leased = match self.eat(br#","leased":"#) {
                Some(()) => self.number()?,
                None => 0,
            };
            let blocked = match self.eat(br#","blocked":"#) {
                Some(()) => self.boolean()?,
                None => false,
            };
            self.eat(b"}")?;
            Some(LimitResult {
                allowed,
                limit,
                remaining,
                reset_ms,
                retry_after_ms,
                delay_ms,
                leased,
                blocked,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_up_and_read_back() {
        let d = Decision {
            allowed: false,
            limit: 10,
            remaining: 0,
            reset: 1_500_001,
            retry_after: 999_999,
            delay: 0,
            denial: Some(Denial::OverLimit),
        };
        let r = LimitResult::from(&d);
        assert_eq!((r.reset_ms, r.retry_after_ms), (2, 1));
        // No delay, no lease: the answer has neither field.
        let wire = serde_json::to_string(&r).unwrap();
        assert!(!wire.contains("delay_ms") && !wire.contains("leased"));
        let granted = LimitResult { leased: 5, ..r };
        let wire = serde_json::to_string(&granted).unwrap();
        assert!(wire.ends_with(r#","leased":5}"#), "{wire}");
        let back: LimitResult = serde_json::from_str(&wire).unwrap();
        assert_eq!(back, granted);
        let back = r.decision();
        assert_eq!(
            (back.reset, back.retry_after),
            (2 * MILLISECOND, MILLISECOND)
        );
        assert_eq!(
            (back.allowed, back.limit, back.denial),
            (false, 10, d.denial)
        );
    }
}
