//! A reader of answers in any JSON form (spaces, any field order, unknown
//! fields), for what the compact reader leaves: it reads nothing that serde
//! would refuse or read otherwise, at none of serde's cost per type in the
//! filter's wasm (serde's struct visitors link float printing for their
//! error messages). Stricter than serde in rare forms no JSON writer uses
//! for this answer, each read as malformed: a key written with an escape,
//! an escaped surrogate in a skipped string, bytes that are not UTF-8, an
//! answer written as an array, and unknown values nested deeper than
//! [`MAX_DEPTH`].

use crate::answer::{CheckResponse, LimitResult};

/// Nesting allowed in a value the reader skips (serde_json allows 128).
const MAX_DEPTH: usize = 64;

/// The answer in `body`, read as serde reads a `CheckResponse`.
pub(crate) fn parse(body: &[u8]) -> Option<CheckResponse> {
    std::str::from_utf8(body).ok()?;
    let mut p = Parser { b: body, i: 0 };
    let response = p.response()?;
    p.ws();
    (p.i == body.len()).then_some(response)
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

/// Fields of one object, each at most once (serde refuses a repeated one).
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn first(&mut self, field: u32) -> Option<()> {
        let bit = 1 << field;
        (self.0 & bit == 0).then(|| self.0 |= bit)
    }
}

impl<'a> Parser<'a> {
    fn ws(&mut self) {
        while matches!(self.b.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.i += 1)
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        self.ws();
        let rest = self.b.get(self.i..)?;
        rest.starts_with(word).then(|| self.i += word.len())
    }

    /// Reads `{ key: value, ... }`, handing each key to `member`, which
    /// reads the value.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.key()?;
            self.eat(b':')?;
            member(self, key)?;
            if self.eat(b'}').is_some() {
                return Some(());
            }
            self.eat(b',')?;
        }
    }

    /// A key without escapes (the only form compared with field names).
    fn key(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        let len = self.b.get(start..)?.iter().position(|&c| c == b'"')?;
        let key = self.b.get(start..start + len)?;
        if key.iter().any(|&c| c == b'\\' || c < 0x20) {
            return None;
        }
        self.i = start + len + 1;
        Some(key)
    }

    fn boolean(&mut self) -> Option<bool> {
        if self.word(b"true").is_some() {
            return Some(true);
        }
        self.word(b"false").map(|()| false)
    }

    /// A `u64` as serde reads one: digits, no sign, fraction or exponent
    /// (those are other types), no leading zero, no overflow.
    fn u64(&mut self) -> Option<u64> {
        self.ws();
        let start = self.i;
        self.number()?;
        let text = self.b.get(start..self.i)?;
        if text.first() == Some(&b'-') || !text.iter().all(u8::is_ascii_digit) {
            return None;
        }
        text.iter().try_fold(0u64, |n, &d| {
            n.checked_mul(10)?
                .checked_add(u64::from(d.wrapping_sub(b'0')))
        })
    }

    fn array<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        self.eat(b'[')?;
        let mut items = Vec::new();
        if self.eat(b']').is_some() {
            return Some(items);
        }
        loop {
            items.push(item(self)?);
            if self.eat(b']').is_some() {
                return Some(items);
            }
            self.eat(b',')?;
        }
    }

    fn response(&mut self) -> Option<CheckResponse> {
        let (mut allowed, mut limits, mut admitted, mut delays_ms) = (None, None, None, None);
        let mut seen = Seen::default();
        self.object(|p, key| match key {
            b"allowed" => {
                seen.first(0)?;
                allowed = Some(p.boolean()?);
                Some(())
            }
            b"limits" => {
                seen.first(1)?;
                limits = Some(p.array(Self::result)?);
                Some(())
            }
            b"admitted" => {
                seen.first(2)?;
                if p.word(b"null").is_none() {
                    admitted = Some(u32::try_from(p.u64()?).ok()?);
                }
                Some(())
            }
            b"delays_ms" => {
                seen.first(3)?;
                delays_ms = Some(p.array(Self::u64)?);
                Some(())
            }
            _ => p.skip(1),
        })?;
        Some(CheckResponse {
            allowed: allowed?,
            limits: limits?,
            admitted,
            delays_ms: delays_ms.unwrap_or_default(),
        })
    }

    fn result(&mut self) -> Option<LimitResult> {
        let mut numbers: [Option<u64>; 6] = [None; 6];
        let mut allowed = None;
        let mut blocked = None;
        let mut seen = Seen::default();
        self.object(|p, key| {
            if key == b"allowed" {
                seen.first(0)?;
                allowed = Some(p.boolean()?);
                return Some(());
            }
            if key == b"blocked" {
                seen.first(7)?;
                blocked = Some(p.boolean()?);
                return Some(());
            }
            match RESULT_NUMBERS.iter().position(|f| *f == key) {
                Some(at) => {
                    seen.first(u32::try_from(at).ok()? + 1)?;
                    *numbers.get_mut(at)? = Some(p.u64()?);
                    Some(())
                }
                None => p.skip(2),
            }
        })?;
        let [limit, remaining, reset_ms, retry_after_ms, delay_ms, leased] = numbers;
        Some(LimitResult {
            allowed: allowed?,
            limit: limit?,
            remaining: remaining?,
            reset_ms: reset_ms?,
            retry_after_ms: retry_after_ms?,
            delay_ms: delay_ms.unwrap_or(0),
            leased: leased.unwrap_or(0),
            blocked: blocked.unwrap_or(false),
        })
    }

    /// Skips any value, `depth` levels down.
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => self.object(|p, _| p.skip(depth + 1)),
            b'[' => self.array(|p| p.skip(depth + 1)).map(drop),
            b'"' => self.string(),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            _ => self.number(),
        }
    }

    /// Skips a string with valid escapes and no control characters.
    fn string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            let c = *self.b.get(self.i)?;
            self.i += 1;
            match c {
                b'"' => return Some(()),
                b'\\' => self.escape()?,
                0..=0x1f => return None,
                _ => {}
            }
        }
    }

    fn escape(&mut self) -> Option<()> {
        let c = *self.b.get(self.i)?;
        self.i += 1;
        match c {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(()),
            b'u' => {
                let hex = self.b.get(self.i..self.i + 4)?;
                self.i += 4;
                let code = u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                // A surrogate must be a pair: refuse both halves alone.
                (!(0xD800..=0xDFFF).contains(&code)).then_some(())
            }
            _ => None,
        }
    }

    /// Skips a number in JSON's grammar.
    fn number(&mut self) -> Option<()> {
        self.ws();
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits()?,
            _ => return None,
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            self.digits()?;
        }
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.digits()?;
        }
        Some(())
    }

    fn digits(&mut self) -> Option<()> {
        let n = self
            .b
            .get(self.i..)?
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        self.i += n;
        (n > 0).then_some(())
    }
}

/// A limit's numeric fields, in `LimitResult` order.
const RESULT_NUMBERS: [&[u8]; 6] = [
    b"limit",
    b"remaining",
    b"reset_ms",
    b"retry_after_ms",
    b"delay_ms",
    b"leased",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;
    use serde_json::{json, Value};

    /// Answers in other forms (sorted keys, spaces and new lines, unknown
    /// fields of every JSON type) read as serde reads them; and whatever the
    /// reader reads after bytes are changed, serde reads alike.
    #[test]
    fn reads_any_form_as_serde_does() {
        let mut rng = Rng(0x0105_e0ff_5eed_0002);
        let mut read = 0;
        for _ in 0..2000 {
            let response = rng.answer();
            let mut value = serde_json::to_value(&response).unwrap();
            value["extra"] = json!({"a": [1, -2.5e3, "x\\u00e9\"", null, true], "b": {}});
            if let Some(Value::Object(first)) = value["limits"].get_mut(0) {
                first.insert("new".into(), json!([[], {"k": false}]));
            }
            let body = serde_json::to_vec_pretty(&value).unwrap();
            assert_eq!(parse(&body).as_ref(), Some(&response));
            for _ in 0..20 {
                let changed = rng.mutate(&body, b"0123456789,:{}[]\"\\ ae-.nul");
                let serde: Option<CheckResponse> = serde_json::from_slice(&changed).ok();
                if let Some(loose) = parse(&changed) {
                    read += 1;
                    assert_eq!(Some(loose), serde, "{}", String::from_utf8_lossy(&changed));
                }
            }
        }
        assert!(read > 5000, "{read}");
    }

    #[test]
    fn refuses_what_serde_refuses() {
        let ok = r#"{"allowed":true,"limits":[]}"#;
        assert!(parse(ok.as_bytes()).is_some());
        for bad in [
            r#"{"allowed":true,"allowed":true,"limits":[]}"#,
            r#"{"allowed":true,"limits":[],"admitted":4294967296}"#,
            r#"{"allowed":true,"limits":[],"delays_ms":null}"#,
            r#"{"allowed":true,"limits":[{"allowed":true,"limit":1.0,"remaining":0,"reset_ms":0,"retry_after_ms":0}]}"#,
            r#"{"allowed":true,"limits":[],"x":01}"#,
            r#"{"allowed":true,"limits":[],"x":"\q"}"#,
            r#"{"allowed":true,"limits":[]} x"#,
            r#"{"allowed":true}"#,
        ] {
            assert!(parse(bad.as_bytes()).is_none(), "{bad}");
            assert!(serde_json::from_str::<CheckResponse>(bad).is_err(), "{bad}");
        }
        let null = r#"{"allowed":true,"limits":[],"admitted":null}"#;
        assert_eq!(parse(null.as_bytes()).and_then(|r| r.admitted), None);
        assert!(parse(null.as_bytes()).is_some());
    }
}
