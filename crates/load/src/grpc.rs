//! gRPC unary calls over HTTP/2 (prior knowledge): the framed message and
//! the call's outcome as an HTTP-like status for the report.

use bytes::{BufMut, Bytes, BytesMut};
use hyper::HeaderMap;

/// The body of a unary call carrying `message` (protobuf): a 5-byte prefix
/// (not compressed, the length big-endian) and the message.
pub fn frame(message: &[u8]) -> Result<Bytes, String> {
    let len = u32::try_from(message.len()).map_err(|_| "--grpc: message too large".to_string())?;
    let mut body = BytesMut::with_capacity(message.len() + 5);
    body.put_u8(0);
    body.put_u32(len);
    body.put_slice(message);
    Ok(body.freeze())
}

/// The bytes of `hex` (two digits per byte).
pub fn from_hex(hex: &str) -> Result<Vec<u8>, String> {
    let hex = hex.trim();
    if hex.len() % 2 != 0 {
        return Err("--grpc: an odd number of hex digits".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("--grpc: not hex at {i}"))
        })
        .collect()
}

/// The call's outcome as a status: the HTTP status unless it is 200, then
/// 200 for `grpc-status: 0` (in the trailers, or the headers of a
/// trailers-only answer) and 500 for any other or none.
pub fn status(http: u16, headers: &HeaderMap, trailers: Option<&HeaderMap>) -> u16 {
    if http != 200 {
        return http;
    }
    let code = trailers
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| headers.get("grpc-status"));
    match code.map(|v| v.as_bytes()) {
        Some(b"0") => 200,
        _ => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_framed_with_its_length() {
        let body = frame(&from_hex("0a0362656e6368").unwrap()).unwrap();
        assert_eq!(&body[..], b"\x00\x00\x00\x00\x07\x0a\x03bench");
        assert!(from_hex("0a0").is_err());
        assert!(from_hex("zz").is_err());
    }

    #[test]
    fn grpc_status_zero_is_success_wherever_it_comes() {
        let mut ok = HeaderMap::new();
        ok.insert("grpc-status", "0".parse().unwrap());
        let mut failed = HeaderMap::new();
        failed.insert("grpc-status", "14".parse().unwrap());
        let none = HeaderMap::new();
        assert_eq!(status(200, &none, Some(&ok)), 200);
        assert_eq!(status(200, &ok, None), 200);
        assert_eq!(status(200, &none, Some(&failed)), 500);
        assert_eq!(status(200, &none, None), 500);
        assert_eq!(status(503, &ok, Some(&ok)), 503);
    }
}
