//! [`JsonScanner`]: one JSON document read a byte at a time, keeping only
//! where it is (a fixed stack of open containers) and the values at its
//! paths.

use super::{FieldPath, Findings, Found, MAX_DEPTH, MAX_PATHS};

/// The three literals, by their first byte's index in [`State::Literal`].
const LITERALS: [&[u8]; 3] = [b"true", b"false", b"null"];

/// Where in a string's escape sequence a byte falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Esc {
    /// Not in an escape.
    No,
    /// After `\`.
    Backslash,
    /// In `\uXXXX`: the hex digits read and their value so far.
    Hex { digits: u8, code: u16 },
}

/// What one byte of a string does.
enum StrStep {
    /// A character is complete: the byte it stands for when it is ASCII
    /// (`0xFF`, which no path key holds, otherwise), and the next state.
    Char(u8, Esc),
    /// Inside an escape sequence.
    Pending(Esc),
    /// The closing quote.
    End,
    /// Not JSON.
    Bad,
}

/// Where in a number (JSON's grammar: `-? (0 | [1-9][0-9]*) (.[0-9]+)?
/// ([eE][+-]?[0-9]+)?`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    E,
    ESign,
    Exp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A value is expected (the document, after `:`, after `,` in an array).
    Value,
    /// After `[`: a value or `]`.
    FirstItem,
    /// After `{`: a key or `}`.
    FirstKey,
    /// After `,` in an object: a key.
    Key,
    KeyStr(Esc),
    /// After a key: `:`.
    Colon,
    /// After a value: `,` or the container's close; after the document,
    /// only whitespace.
    After,
    ValueStr(Esc),
    Number(Num),
    /// In `true`, `false` or `null` ([`LITERALS`]): which, and the bytes
    /// read.
    Literal {
        which: u8,
        at: u8,
    },
    /// In a container deeper than [`MAX_DEPTH`], counted by `skip_depth`:
    /// only strings and brackets are followed.
    Skip {
        in_str: bool,
        escaped: bool,
    },
    /// Not JSON: everything after is ignored.
    Failed,
}

/// Finds the values at up to [`MAX_PATHS`] paths in one JSON document fed
/// in chunks of any size, as non-negative integers.
///
/// At each path: an integer is [`Found::Value`] (one over `u64::MAX` is
/// `u64::MAX`); a negative number, a fraction or an exponent (`-1`, `12.0`,
/// `1e3`), a string, `true`, `false`, `null`, an object or an array is
/// [`Found::Malformed`]; no value is [`Found::Missing`]. A path follows
/// objects only: a value inside an array never matches, and a path through
/// something other than an object (`"usage": null`) is missing. When an
/// object has a key twice, the last one wins, as when a JSON reader builds
/// the object: what an earlier `usage` held is forgotten when `usage`
/// comes again.
///
/// Keys are compared as they stream, after unescaping (`"usag\u0065"` is
/// `usage`), and never stored. A value counts once it is complete (a number
/// once the byte after it is read), so a body cut short reports what was
/// complete before the cut. After a syntax error the scanner stops: values
/// complete before it stay found, the rest are missing
/// ([`is_complete`](Self::is_complete) tells a whole document from a broken
/// or unfinished one). Nesting deeper than [`MAX_DEPTH`] is skipped, its
/// brackets counted and its strings followed, but its syntax not checked
/// further (a path is at most 8 keys deep, so nothing there can match).
/// Strings are not checked for UTF-8.
#[derive(Clone, Debug)]
pub struct JsonScanner {
    paths: Vec<FieldPath>,
    state: State,
    /// Open containers, at most [`MAX_DEPTH`].
    depth: usize,
    /// Bit `d`: the container at depth `d + 1` is an array.
    arrays: u64,
    /// For the container at depth `d + 1`, bit `i`: path `i` is followed
    /// into it (its keys so far led there); bit `4 + i`: the container is
    /// path `i`'s value (malformed, once it closes).
    masks: [u8; MAX_DEPTH],
    /// The paths the key being read still equals.
    key_paths: u8,
    /// The key's bytes read so far (unescaped; stops counting past 255,
    /// which no path key reaches).
    key_len: u8,
    /// The paths the value about to be read (or being read) is on.
    value_paths: u8,
    /// The paths whose value is the scalar being read.
    scalar_paths: u8,
    /// The number being read: its value, if it is still a plain integer.
    number: u64,
    plain: bool,
    /// Open containers below [`MAX_DEPTH`].
    skip_depth: u64,
    found: [Found; MAX_PATHS],
}

impl JsonScanner {
    /// A scanner for `paths`; only the first [`MAX_PATHS`] are looked for.
    pub fn new(paths: &[FieldPath]) -> JsonScanner {
        JsonScanner {
            paths: paths.iter().take(MAX_PATHS).cloned().collect(),
            state: State::Value,
            depth: 0,
            arrays: 0,
            masks: [0; MAX_DEPTH],
            key_paths: 0,
            key_len: 0,
            value_paths: 0,
            scalar_paths: 0,
            number: 0,
            plain: false,
            skip_depth: 0,
            found: [Found::Missing; MAX_PATHS],
        }
    }

    /// Ready for a new document with the same paths (nothing allocated).
    pub fn reset(&mut self) {
        self.state = State::Value;
        self.depth = 0;
        self.value_paths = 0;
        self.scalar_paths = 0;
        self.skip_depth = 0;
        self.found = [Found::Missing; MAX_PATHS];
    }

    /// Reads the next bytes of the document.
    pub fn feed(&mut self, chunk: &[u8]) {
        for &b in chunk {
            if self.state == State::Failed {
                return;
            }
            self.step(b);
        }
    }

    /// What was found at each path (in the order given to [`new`](Self::new))
    /// in what was fed so far.
    pub fn finish(&self) -> Findings {
        Findings::new(self.found.get(..self.paths.len()).unwrap_or_default())
    }

    /// Whether what was fed is one whole JSON value (with whitespace around
    /// it) and nothing else.
    pub fn is_complete(&self) -> bool {
        self.depth == 0
            && match self.state {
                State::After => true,
                State::Number(n) => matches!(n, Num::Zero | Num::Int | Num::Frac | Num::Exp),
                _ => false,
            }
    }

    fn step(&mut self, b: u8) {
        match self.state {
            State::Value => self.value(b),
            State::FirstItem if b == b']' => self.close(b),
            State::FirstItem => self.value(b),
            State::FirstKey if b == b'}' => self.close(b),
            State::FirstKey | State::Key => match b {
                b'"' => self.start_key(),
                _ if is_ws(b) => {}
                _ => self.state = State::Failed,
            },
            State::KeyStr(esc) => self.key_byte(esc, b),
            State::Colon => match b {
                b':' => self.state = State::Value,
                _ if is_ws(b) => {}
                _ => self.state = State::Failed,
            },
            State::After => self.after(b),
            State::ValueStr(esc) => {
                self.state = match string_step(esc, b) {
                    StrStep::Char(_, esc) | StrStep::Pending(esc) => State::ValueStr(esc),
                    StrStep::End => {
                        // A string is no count.
                        self.mark(self.scalar_paths, Found::Malformed);
                        State::After
                    }
                    StrStep::Bad => State::Failed,
                }
            }
            State::Number(n) => self.number_byte(n, b),
            State::Literal { which, at } => self.literal(which, at, b),
            State::Skip { in_str, escaped } => self.skip(in_str, escaped, b),
            State::Failed => {}
        }
    }

    /// The first byte of a value (or whitespace before it).
    fn value(&mut self, b: u8) {
        if is_ws(b) {
            return;
        }
        // The document itself is on every path.
        let paths = if self.depth == 0 {
            (1 << self.paths.len()) - 1
        } else {
            self.value_paths
        };
        self.value_paths = 0;
        // The paths ending at this key, and those going on into its value.
        let mut ends = 0;
        for i in bits(paths) {
            // Last wins: this value replaces whatever the key had before.
            set(&mut self.found, i, Found::Missing);
            if self.paths.get(i).map_or(0, FieldPath::depth) == self.depth {
                ends |= 1 << i;
            }
        }
        let through = paths & !ends;
        self.scalar_paths = ends;
        let scalar = match b {
            b'{' => return self.open(false, through, ends),
            b'[' => return self.open(true, 0, ends),
            b'-' | b'0'..=b'9' => {
                self.number = u64::from(b.saturating_sub(b'0'));
                self.plain = b != b'-';
                self.state = State::Number(match b {
                    b'-' => Num::Minus,
                    b'0' => Num::Zero,
                    _ => Num::Int,
                });
                return;
            }
            b'"' => State::ValueStr(Esc::No),
            b't' => State::Literal { which: 0, at: 1 },
            b'f' => State::Literal { which: 1, at: 1 },
            b'n' => State::Literal { which: 2, at: 1 },
            _ => {
                self.state = State::Failed;
                return;
            }
        };
        self.state = scalar;
    }

    /// `{` or `[`: `through` are the paths going on into an object, `ends`
    /// those whose value it is.
    fn open(&mut self, array: bool, through: u8, ends: u8) {
        if self.depth >= MAX_DEPTH {
            self.skip_depth = 1;
            self.state = State::Skip {
                in_str: false,
                escaped: false,
            };
            return;
        }
        if let Some(mask) = self.masks.get_mut(self.depth) {
            *mask = through | ends << 4;
        }
        let bit = 1u64 << self.depth;
        self.arrays = if array {
            self.arrays | bit
        } else {
            self.arrays & !bit
        };
        self.depth += 1;
        self.state = if array {
            State::FirstItem
        } else {
            State::FirstKey
        };
    }

    /// The byte after a value.
    fn after(&mut self, b: u8) {
        if is_ws(b) {
            return;
        }
        if self.depth == 0 {
            self.state = State::Failed;
            return;
        }
        self.state = match b {
            b',' if self.in_array() => State::Value,
            b',' => State::Key,
            b']' | b'}' => return self.close(b),
            _ => State::Failed,
        };
    }

    /// `]` or `}`, which must close the innermost container.
    fn close(&mut self, b: u8) {
        if self.depth == 0 || (b == b']') != self.in_array() {
            self.state = State::Failed;
            return;
        }
        self.depth -= 1;
        // A container is no count.
        let mask = self.masks.get(self.depth).copied().unwrap_or(0);
        self.mark(mask >> 4, Found::Malformed);
        self.state = State::After;
    }

    fn in_array(&self) -> bool {
        self.depth > 0 && self.arrays & (1u64 << (self.depth - 1)) != 0
    }

    fn start_key(&mut self) {
        self.key_paths = self
            .masks
            .get(self.depth.wrapping_sub(1))
            .map_or(0, |m| m & 0xF);
        self.key_len = 0;
        self.state = State::KeyStr(Esc::No);
    }

    /// One byte of a key: compared with the paths' keys at this depth.
    fn key_byte(&mut self, esc: Esc, b: u8) {
        let level = self.depth.wrapping_sub(1);
        match string_step(esc, b) {
            StrStep::Char(c, esc) => {
                self.state = State::KeyStr(esc);
                if self.key_paths == 0 {
                    return;
                }
                for i in bits(self.key_paths) {
                    let key = self.paths.get(i).map_or(&[][..], |p| p.key(level));
                    if key.get(usize::from(self.key_len)) != Some(&c) {
                        self.key_paths &= !(1 << i);
                    }
                }
                self.key_len = self.key_len.saturating_add(1);
            }
            StrStep::Pending(esc) => self.state = State::KeyStr(esc),
            StrStep::End => {
                let mut matched = 0;
                for i in bits(self.key_paths) {
                    let key = self.paths.get(i).map_or(&[][..], |p| p.key(level));
                    if key.len() == usize::from(self.key_len) {
                        matched |= 1 << i;
                    }
                }
                self.value_paths = matched;
                self.state = State::Colon;
            }
            StrStep::Bad => self.state = State::Failed,
        }
    }

    fn number_byte(&mut self, n: Num, b: u8) {
        let digit = b.is_ascii_digit();
        let next = match (n, b) {
            (Num::Minus, b'0') => Num::Zero,
            (Num::Minus | Num::Int, _) if digit => Num::Int,
            (Num::Zero | Num::Int, b'.') => Num::Dot,
            (Num::Dot | Num::Frac, _) if digit => Num::Frac,
            (Num::Zero | Num::Int | Num::Frac, b'e' | b'E') => Num::E,
            (Num::E, b'+' | b'-') => Num::ESign,
            (Num::E | Num::ESign | Num::Exp, _) if digit => Num::Exp,
            (Num::Zero | Num::Int | Num::Frac | Num::Exp, _)
                if is_ws(b) || matches!(b, b',' | b']' | b'}') =>
            {
                // The byte after the number ends it (and is read as such).
                let found = if self.plain {
                    Found::Value(self.number)
                } else {
                    Found::Malformed
                };
                self.mark(self.scalar_paths, found);
                self.state = State::After;
                return self.after(b);
            }
            _ => return self.state = State::Failed,
        };
        if next == Num::Int && self.plain {
            let d = u64::from(b - b'0');
            self.number = self.number.saturating_mul(10).saturating_add(d);
        } else if next != Num::Int {
            self.plain &= next == Num::Zero;
        }
        self.state = State::Number(next);
    }

    fn literal(&mut self, which: u8, at: u8, b: u8) {
        let text = LITERALS.get(usize::from(which)).copied().unwrap_or(b"");
        self.state = if text.get(usize::from(at)) != Some(&b) {
            State::Failed
        } else if usize::from(at) + 1 == text.len() {
            self.mark(self.scalar_paths, Found::Malformed);
            State::After
        } else {
            State::Literal { which, at: at + 1 }
        };
    }

    /// A byte deeper than [`MAX_DEPTH`].
    fn skip(&mut self, in_str: bool, escaped: bool, b: u8) {
        let (in_str, escaped) = match b {
            _ if escaped => (true, false),
            b'\\' if in_str => (true, true),
            b'"' => (!in_str, false),
            _ if in_str => (true, false),
            b'{' | b'[' => {
                self.skip_depth = self.skip_depth.saturating_add(1);
                (false, false)
            }
            b'}' | b']' => {
                self.skip_depth = self.skip_depth.saturating_sub(1);
                if self.skip_depth == 0 {
                    self.state = State::After;
                    return;
                }
                (false, false)
            }
            _ => (false, false),
        };
        self.state = State::Skip { in_str, escaped };
    }

    fn mark(&mut self, paths: u8, found: Found) {
        for i in bits(paths) {
            set(&mut self.found, i, found);
        }
    }
}

/// One byte of a string, escapes decoded; control characters are refused.
fn string_step(esc: Esc, b: u8) -> StrStep {
    match esc {
        Esc::No => match b {
            b'"' => StrStep::End,
            b'\\' => StrStep::Pending(Esc::Backslash),
            0..=0x1F => StrStep::Bad,
            _ => StrStep::Char(b, Esc::No),
        },
        Esc::Backslash => match b {
            b'"' | b'\\' | b'/' => StrStep::Char(b, Esc::No),
            b'b' | b'f' | b'n' | b'r' | b't' => StrStep::Char(0, Esc::No),
            b'u' => StrStep::Pending(Esc::Hex { digits: 0, code: 0 }),
            _ => StrStep::Bad,
        },
        Esc::Hex { digits, code } => {
            let Some(v) = (b as char).to_digit(16) else {
                return StrStep::Bad;
            };
            // At most four digits: the value fits.
            let code = code.wrapping_mul(16).wrapping_add(v as u16);
            if digits < 3 {
                return StrStep::Pending(Esc::Hex {
                    digits: digits + 1,
                    code,
                });
            }
            match u8::try_from(code) {
                Ok(c) if c.is_ascii() => StrStep::Char(c, Esc::No),
                _ => StrStep::Char(0xFF, Esc::No),
            }
        }
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The indices of the set bits of a path mask.
fn bits(mask: u8) -> impl Iterator<Item = usize> {
    (0..MAX_PATHS).filter(move |i| mask & (1 << i) != 0)
}

fn set(found: &mut [Found; MAX_PATHS], i: usize, to: Found) {
    if let Some(f) = found.get_mut(i) {
        *f = to;
    }
}
