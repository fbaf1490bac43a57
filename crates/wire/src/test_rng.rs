//! A small deterministic generator (xorshift) for the wire tests' varied
//! inputs.

use crate::{CheckResponse, LimitResult};

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A number from small to the largest, edges included.
    pub fn number(&mut self) -> u64 {
        match self.below(4) {
            0 => self.below(10),
            1 => self.below(100_000),
            2 => u64::MAX - self.below(3),
            _ => self.next() >> self.below(64),
        }
    }

    /// A number or nothing.
    pub fn option(&mut self) -> Option<u64> {
        (self.below(2) == 0).then(|| self.number())
    }

    /// Text of awkward pieces: quotes, escapes, control characters,
    /// multi-byte characters.
    pub fn text(&mut self) -> String {
        const PIECES: &[&str] = &[
            "a", "per-ip", "/", "0", "\"", "\\", "\n", "\r", "\t", "\u{8}", "\u{c}", "\u{0}",
            "\u{1f}", "\u{7f}", "é", "日本", "😀", "'", "10.0.0.1", "|", " ",
        ];
        let len = self.below(8);
        (0..len)
            .map(|_| PIECES[self.below(PIECES.len() as u64) as usize])
            .collect()
    }

    /// `body` with one byte from `bytes` written over, inserted, or one
    /// byte removed, at a random place.
    pub fn mutate(&mut self, body: &[u8], bytes: &[u8]) -> Vec<u8> {
        let mut changed = body.to_vec();
        let at = self.below(changed.len() as u64 + 1) as usize;
        let byte = bytes[self.below(bytes.len() as u64) as usize];
        match self.below(3) {
            0 if at < changed.len() => changed[at] = byte,
            1 if at < changed.len() => {
                changed.remove(at);
            }
            _ => changed.insert(at, byte),
        }
        changed
    }

    /// An answer of up to three limits, batch fields present or not, each
    /// optional field zero (absent when written) half the time.
    pub fn answer(&mut self) -> CheckResponse {
        let limits = (0..self.below(4))
            .map(|_| LimitResult {
                allowed: self.below(2) == 0,
                limit: self.number(),
                remaining: self.number(),
                reset_ms: self.number(),
                retry_after_ms: self.number(),
                delay_ms: if self.below(2) == 0 { 0 } else { self.number() },
                leased: if self.below(2) == 0 { 0 } else { self.number() },
                blocked: self.below(4) == 0,
            })
            .collect();
        let admitted = (self.below(2) == 0).then(|| self.below(1 << 33) as u32);
        let delays_ms = (0..self.below(3)).map(|_| self.number()).collect();
        CheckResponse {
            allowed: self.below(2) == 0,
            limits,
            admitted,
            delays_ms,
        }
    }
}
