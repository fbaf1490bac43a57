//! Reading what a response says its request cost
//! (`sluice_filter::cost::extract`) from arbitrary bodies.

use serde_json::Value;
use sluice_filter::cost::extract::{BodyKind, BodyScanner, FieldPath, Found, JsonScanner};

/// Two sets of paths, chosen by the input.
const PATHS: [[&str; 4]; 2] = [
    ["usage.total_tokens", "usage.prompt_tokens", "usage", "a"],
    ["a.b", "a.b.c.d.e.f.g.h", "usage.completion_tokens", "x-y_z"],
];

/// One selector byte (bit 0: an event stream, else JSON; bit 1: the path
/// set; the rest seeds the chunking), then the body. Never a panic; the
/// body read whole, in random chunks and a byte at a time finds the same;
/// a JSON body serde_json accepts is a whole document to the scanner too,
/// with the same values at the paths.
pub fn cost_extract(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let kind = if sel & 1 == 1 {
        BodyKind::EventStream
    } else {
        BodyKind::Json
    };
    let texts = PATHS[usize::from(sel >> 1 & 1)];
    let paths: Vec<FieldPath> = texts
        .iter()
        .filter_map(|t| FieldPath::parse(t).ok())
        .collect();
    assert_eq!(paths.len(), texts.len());

    let whole = read(kind, &paths, [body]);
    assert_eq!(whole.len(), paths.len());
    let mut rng = u64::from(sel >> 2) << 32 | body.len() as u64 | 1;
    let mut chunks = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        // xorshift: chunks of 1 to 16 bytes, now and then up to 1 KiB.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let n = if rng & 7 == 0 {
            rng >> 8 & 1023
        } else {
            1 + (rng >> 8 & 15)
        };
        let (chunk, tail) = rest.split_at((n as usize).min(rest.len()));
        chunks.push(chunk);
        rest = tail;
    }
    assert_eq!(read(kind, &paths, chunks), whole, "chunked");
    assert_eq!(read(kind, &paths, body.chunks(1)), whole, "byte by byte");

    if kind == BodyKind::Json {
        agrees_with_serde(body, texts, &paths, &whole);
    }
}

fn read<'a>(
    kind: BodyKind,
    paths: &[FieldPath],
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<Found> {
    let mut s = BodyScanner::new(kind, paths);
    for chunk in chunks {
        s.feed(chunk);
    }
    s.finish().to_vec()
}

fn agrees_with_serde(body: &[u8], texts: [&str; 4], paths: &[FieldPath], found: &[Found]) {
    let Ok(doc) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    let mut s = JsonScanner::new(paths);
    s.feed(body);
    assert!(
        s.is_complete(),
        "serde_json read a document the scanner did not"
    );
    for (text, mine) in texts.iter().zip(found) {
        let mut at = Some(&doc);
        for key in text.split('.') {
            at = at.and_then(|v| v.as_object()).and_then(|o| o.get(key));
        }
        let expected = match at {
            None => Found::Missing,
            Some(v) => v.as_u64().map_or(Found::Malformed, Found::Value),
        };
        // serde_json reads an integer over u64::MAX as a float.
        let too_big = at
            .and_then(Value::as_f64)
            .is_some_and(|f| f >= 18_446_744_073_709_551_615.0);
        let saturated = too_big && *mine == Found::Value(u64::MAX);
        assert!(
            *mine == expected || saturated,
            "{text}: {mine:?}, serde_json {expected:?}"
        );
    }
}
