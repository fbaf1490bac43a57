//! A pattern's text into a tree ([`Node`]), refusing what the engine does
//! not support with a message naming the construct.
//!
//! The tree has the shape `regex-lite`'s parser gives (a concatenation or
//! alternation of one item is that item, `x{1}` is `x`, `x{0}` is empty),
//! so that the program compiled from it prefers matches in the same order.
//! The parser recurses once per group, at most [`NEST_LIMIT`] deep; counted
//! and stacked repetitions build nodes without recursing, and each node
//! carries its height, so the compiler's recursion is bounded too.

use super::class::{self, Ranges};

/// Deepest nesting: groups inside groups, and the height of the tree (each
/// group, repetition, alternation and sequence a level, the pattern itself
/// the first).
pub(super) const NEST_LIMIT: u32 = 32;

pub(super) use super::class::Error;

const UNCLOSED: Error = "a class is not closed: '[' without ']'";

/// A parsed pattern: its tree and the character classes it refers to.
pub(super) struct Parsed {
    pub root: Node,
    pub classes: Vec<Ranges>,
}

/// A node of the tree, with what the compiler needs to know of it.
pub(super) struct Node {
    pub kind: Kind,
    /// Whether it can match the empty string.
    pub nullable: bool,
    /// Levels from this node to its deepest leaf, itself included.
    height: u32,
}

/// What a node matches.
pub(super) enum Kind {
    Empty,
    Char(char),
    /// A class, by its index in [`Parsed::classes`]; an empty class
    /// matches nothing.
    Class(u32),
    /// `^` (false) or `$` (true).
    Assert(bool),
    Repeat {
        min: u32,
        max: Option<u32>,
        greedy: bool,
        sub: Box<Node>,
    },
    /// A capturing group; `first` for the first group, the one captured.
    Group {
        first: bool,
        sub: Box<Node>,
    },
    Concat(Vec<Node>),
    Alt(Vec<Node>),
}

/// Parses `text`; the error names the construct refused.
pub(super) fn parse(text: &str) -> Result<Parsed, Error> {
    let mut p = Parser {
        rest: text,
        fold: false,
        groups: 0,
        depth: 0,
        classes: Vec::new(),
    };
    let root = p.alternation()?;
    Ok(Parsed {
        root,
        classes: p.classes,
    })
}

struct Parser<'a> {
    /// What is left to read.
    rest: &'a str,
    /// `(?i)`: ASCII letters match either case.
    fold: bool,
    /// Capturing groups opened so far.
    groups: u32,
    /// Groups open, the pattern itself counting one.
    depth: u32,
    classes: Vec<Ranges>,
}

impl Parser<'_> {
    /// The next byte: the syntax is ASCII.
    fn peek(&self) -> Option<u8> {
        self.rest.as_bytes().first().copied()
    }

    /// The byte after the next one.
    fn peek2(&self) -> Option<u8> {
        self.rest.as_bytes().get(1).copied()
    }

    // Not inlined: one copy of the UTF-8 decoding.
    #[inline(never)]
    fn bump(&mut self) -> Option<char> {
        let mut chars = self.rest.chars();
        let c = chars.next()?;
        self.rest = chars.as_str();
        Some(c)
    }

    #[inline(never)]
    fn eat(&mut self, prefix: &str) -> bool {
        match self.rest.strip_prefix(prefix) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    /// Alternatives up to the end of the pattern or of the group; leaves
    /// a group's `)` to the caller.
    fn alternation(&mut self) -> Result<Node, Error> {
        self.depth += 1;
        if self.depth > NEST_LIMIT {
            return Err("groups nest more than 32 deep");
        }
        let mut alternatives = Vec::new();
        let mut concat = Vec::new();
        while let Some(c) = self.peek() {
            match c {
                b'(' => {
                    self.bump();
                    let fold = self.fold;
                    if let Some(group) = self.group()? {
                        concat.push(group);
                        // A group's flags end with it; `(?i)` lasts to the
                        // end of the enclosing group.
                        self.fold = fold;
                    }
                    if self.bump() != Some(')') {
                        return Err("a group is not closed: '(' without ')'");
                    }
                }
                b')' if self.depth == 1 => return Err("')' without '('"),
                b')' => break,
                b'|' => {
                    self.bump();
                    alternatives.push(node(Kind::Concat(std::mem::take(&mut concat)))?);
                }
                b'[' => {
                    self.bump();
                    let class = self.class()?;
                    concat.push(class);
                }
                b'?' | b'*' | b'+' => self.repeat(&mut concat)?,
                b'{' => self.counted(&mut concat)?,
                _ => {
                    let item = self.primitive()?;
                    concat.push(item);
                }
            }
        }
        self.depth -= 1;
        alternatives.push(node(Kind::Concat(concat))?);
        node(Kind::Alt(alternatives))
    }

    /// What follows a `(`: a group, `None` for a flag directive `(?i)`.
    fn group(&mut self) -> Result<Option<Node>, Error> {
        if self.eat("?=") || self.eat("?!") || self.eat("?<=") || self.eat("?<!") {
            return Err("look-around is not supported");
        }
        if self.eat("?P<") || self.eat("?<") {
            return Err("named groups are not supported: use (...)");
        }
        if self.eat("?") {
            let fold = if self.eat(":") {
                self.fold
            } else {
                const FLAGS: Error =
                    "only the flag i is supported: (?i), (?-i), (?i:...) and (?:...)";
                let fold = !self.eat("-");
                if !self.eat("i") {
                    return Err(FLAGS);
                }
                if self.peek() == Some(b')') {
                    // `(?i)`: to the end of the enclosing group.
                    self.fold = fold;
                    return Ok(None);
                }
                if !self.eat(":") {
                    return Err(FLAGS);
                }
                fold
            };
            self.fold = fold;
            return self.alternation().map(Some);
        }
        self.groups += 1;
        let first = self.groups == 1;
        let sub = self.alternation()?;
        node(Kind::Group {
            first,
            sub: Box::new(sub),
        })
        .map(Some)
    }

    /// `?`, `*` or `+` (lazy with a `?` after) on the last item.
    fn repeat(&mut self, concat: &mut Vec<Node>) -> Result<(), Error> {
        let (min, max) = match self.bump() {
            Some('?') => (0, Some(1)),
            Some('*') => (0, None),
            _ => (1, None),
        };
        self.repeat_last(concat, min, max)
    }

    /// `{n}`, `{n,}` or `{n,m}` on the last item.
    fn counted(&mut self, concat: &mut Vec<Node>) -> Result<(), Error> {
        const FORM: Error = "a counted repetition is {n}, {n,} or {n,m}";
        self.bump();
        let min = self.number().ok_or(FORM)?;
        let max = if self.eat(",") {
            if self.peek() == Some(b'}') {
                None
            } else {
                Some(self.number().ok_or(FORM)?)
            }
        } else {
            Some(min)
        };
        if !self.eat("}") {
            return Err(FORM);
        }
        if max.is_some_and(|max| max < min) {
            return Err("a counted repetition {n,m} has n greater than m");
        }
        self.repeat_last(concat, min, max)
    }

    /// Decimal digits, `None` when there are none or too many.
    fn number(&mut self) -> Option<u32> {
        let mut n: Option<u32> = None;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            self.bump();
            n = Some(
                n.unwrap_or(0)
                    .checked_mul(10)?
                    .checked_add(u32::from(d - b'0'))?,
            );
        }
        n
    }

    fn repeat_last(
        &mut self,
        concat: &mut Vec<Node>,
        min: u32,
        max: Option<u32>,
    ) -> Result<(), Error> {
        let sub = concat
            .pop()
            .ok_or("a repetition (?, *, +, {n}) must follow what it repeats")?;
        let greedy = !self.eat("?");
        let repeated = match (min, max) {
            (0, Some(0)) => node(Kind::Empty)?,
            (1, Some(1)) => sub,
            _ => node(Kind::Repeat {
                min,
                max,
                greedy,
                sub: Box::new(sub),
            })?,
        };
        concat.push(repeated);
        Ok(())
    }

    /// An item without sub-items.
    fn primitive(&mut self) -> Result<Node, Error> {
        match self.bump() {
            Some('\\') => match self.escape()? {
                Item::Char(c) => self.char(c),
                Item::Class(ranges) => self.class_node(ranges),
            },
            Some('.') => self.class_node(class::dot()),
            Some('^') => node(Kind::Assert(false)),
            Some('$') => node(Kind::Assert(true)),
            Some(c) => self.char(c),
            None => node(Kind::Empty),
        }
    }

    /// A literal, both cases of a letter under `(?i)`.
    fn char(&mut self, c: char) -> Result<Node, Error> {
        if self.fold && c.is_ascii_alphabetic() {
            let both = [c.to_ascii_uppercase(), c.to_ascii_lowercase()];
            return self.class_node(both.iter().map(|&c| class::single(c)).collect());
        }
        node(Kind::Char(c))
    }

    /// A bracket class, after its `[`: `-` first or last and `]` first are
    /// literal (as in RE2).
    fn class(&mut self) -> Result<Node, Error> {
        let negate = self.eat("^");
        let mut ranges = Vec::new();
        while self.eat("-") {
            ranges.push(class::single('-'));
        }
        if ranges.is_empty() && self.eat("]") {
            ranges.push(class::single(']'));
        }
        loop {
            match (self.peek().ok_or(UNCLOSED)?, self.peek2()) {
                (b']', _) => break,
                (b'[', _) => {
                    return Err("classes inside classes ([[...]], [[:alpha:]]) are not supported")
                }
                (b'&', Some(b'&')) | (b'-', Some(b'-')) | (b'~', Some(b'~')) => {
                    return Err("class set operations (&&, --, ~~) are not supported")
                }
                _ => self.class_item(&mut ranges)?,
            }
        }
        self.bump();
        let mut ranges = class::canonical(ranges);
        if self.fold {
            ranges = class::fold(&ranges)?;
        }
        if negate {
            ranges = class::negate(&ranges);
        }
        self.class_node(ranges)
    }

    /// A character, an escape or a range `a-z` of a class.
    fn class_item(&mut self, ranges: &mut Ranges) -> Result<(), Error> {
        let first = self.class_atom()?;
        let range = self.peek() == Some(b'-') && !matches!(self.peek2(), Some(b']' | b'-'));
        if !range {
            match first {
                Item::Char(c) => ranges.push(class::single(c)),
                Item::Class(class) => ranges.extend(class),
            }
            return Ok(());
        }
        self.bump();
        match (first, self.class_atom()?) {
            (Item::Char(a), Item::Char(b)) if a <= b => ranges.push((u32::from(a), u32::from(b))),
            (Item::Char(_), Item::Char(_)) => return Err("a class range runs backwards"),
            _ => return Err("a class range must run between two characters"),
        }
        Ok(())
    }

    fn class_atom(&mut self) -> Result<Item, Error> {
        match self.bump().ok_or(UNCLOSED)? {
            '\\' => self.escape(),
            c => Ok(Item::Char(c)),
        }
    }

    fn class_node(&mut self, ranges: Ranges) -> Result<Node, Error> {
        let index = u32::try_from(self.classes.len()).map_err(|_| "too many classes")?;
        self.classes.push(ranges);
        node(Kind::Class(index))
    }

    /// What follows a `\`.
    fn escape(&mut self) -> Result<Item, Error> {
        let c = self.bump().ok_or("a pattern cannot end with \\")?;
        let item = match c {
            'd' | 'D' | 's' | 'S' | 'w' | 'W' => {
                let ranges = class::perl(c.to_ascii_lowercase());
                Item::Class(if c.is_ascii_uppercase() {
                    class::negate(&ranges)
                } else {
                    ranges
                })
            }
            't' => Item::Char('\t'),
            'n' => Item::Char('\n'),
            'r' => Item::Char('\r'),
            'f' => Item::Char('\x0C'),
            'v' => Item::Char('\x0B'),
            'a' => Item::Char('\x07'),
            '0'..='9' => return Err("backreferences are not supported"),
            'p' | 'P' => return Err("Unicode classes (\\p) are not supported"),
            'x' | 'u' | 'U' => return Err("hexadecimal escapes (\\x, \\u) are not supported"),
            'A' | 'z' | 'b' | 'B' | '<' | '>' => {
                return Err("assertions (\\b, \\B, \\A, \\z, \\<, \\>) are not supported: a pattern matches the whole value")
            }
            c if c.is_ascii_punctuation() || c == ' ' => Item::Char(c),
            _ => return Err("unknown escape: \\ escapes punctuation, \\t \\n \\r \\f \\v \\a, \\d \\s \\w and \\D \\S \\W"),
        };
        Ok(item)
    }
}

/// An escape or a class item: one character or a class.
enum Item {
    Char(char),
    Class(Ranges),
}

/// A node of `kind`, refused past the nesting limit.
fn node(kind: Kind) -> Result<Node, Error> {
    let (nullable, below) = match &kind {
        Kind::Empty | Kind::Assert(_) => (true, 0),
        Kind::Char(_) | Kind::Class(_) => (false, 0),
        Kind::Repeat { min, sub, .. } => (*min == 0 || sub.nullable, sub.height),
        Kind::Group { sub, .. } => (sub.nullable, sub.height),
        Kind::Concat(subs) | Kind::Alt(subs) => {
            let all = subs.iter().all(|s| s.nullable);
            let any = subs.iter().any(|s| s.nullable);
            let below = subs.iter().map(|s| s.height).max().unwrap_or(0);
            (
                if matches!(kind, Kind::Alt(_)) {
                    any
                } else {
                    all
                },
                below,
            )
        }
    };
    // A sequence or choice of one item is that item.
    let kind = match kind {
        Kind::Concat(mut subs) | Kind::Alt(mut subs) if subs.len() == 1 => {
            return subs.pop().ok_or("empty");
        }
        Kind::Concat(subs) if subs.is_empty() => Kind::Empty,
        kind => kind,
    };
    let height = below + 1;
    if height > NEST_LIMIT {
        return Err("groups and repetitions nest more than 32 levels deep");
    }
    Ok(Node {
        kind,
        nullable,
        height,
    })
}
