//! The tree into a program of instructions (a Thompson NFA), built the way
//! `regex-lite` builds its own so that the VM prefers the same matches:
//! the order of a split's branches is the order of preference.
//!
//! Counted repetitions copy their item (`x{3}` is `xxx`), so a program is
//! bounded by [`MAX_INSTS`] and refused past it, as soon as it gets there.
//! Recursion follows the tree, whose height the parser bounds.

use super::class::Ranges;
use super::parse::{Error, Kind, Node, Parsed};

/// Most instructions in a program (about 256 KiB compiled by `regex-lite`).
pub(super) const MAX_INSTS: usize = 8192;

/// One step of a program; `u32` fields are the next instruction.
pub(super) enum Inst {
    /// This character.
    Char(char, u32),
    /// A character of the class of this index.
    Class(u32, u32),
    /// Go on at every target, in order of preference; reversed (the last
    /// preferred) for a lazy repetition.
    Split(Vec<u32>, bool),
    Goto(u32),
    /// Go on only at the end of the value (`$`, true) or at its start (`^`).
    Assert(bool, u32),
    /// Record the position as the first group's start (0) or end (1).
    Save(usize, u32),
    /// The whole pattern matched (a match only at the end of the value).
    Match,
}

/// A compiled pattern.
pub(super) struct Program {
    pub insts: Vec<Inst>,
    pub classes: Vec<Ranges>,
    pub start: u32,
    /// The index of [`Inst::Match`].
    pub matched: u32,
}

/// Compiles `parsed`, refused past [`MAX_INSTS`].
pub(super) fn compile(parsed: Parsed) -> Result<Program, Error> {
    let mut c = Compiler { insts: Vec::new() };
    let body = c.node(&parsed.root)?;
    let matched = c.add(Inst::Match)?;
    c.patch(body.end, matched);
    Ok(Program {
        insts: c.insts,
        classes: parsed.classes,
        start: body.start,
        matched,
    })
}

/// A compiled piece: where it starts and the instruction whose next is
/// still to be set.
#[derive(Clone, Copy)]
struct Piece {
    start: u32,
    end: u32,
}

struct Compiler {
    insts: Vec<Inst>,
}

impl Compiler {
    // Not inlined here nor in `patch`: called from many places.
    #[inline(never)]
    fn add(&mut self, inst: Inst) -> Result<u32, Error> {
        let id = u32::try_from(self.insts.len()).map_err(|_| TOO_BIG)?;
        if self.insts.len() >= MAX_INSTS {
            return Err(TOO_BIG);
        }
        self.insts.push(inst);
        Ok(id)
    }

    fn one(&mut self, inst: Inst) -> Result<Piece, Error> {
        let id = self.add(inst)?;
        Ok(Piece { start: id, end: id })
    }

    fn empty(&mut self) -> Result<u32, Error> {
        self.add(Inst::Goto(0))
    }

    fn split(&mut self, lazy: bool) -> Result<u32, Error> {
        self.add(Inst::Split(Vec::new(), lazy))
    }

    /// Sets where `from` goes on (adds a branch to a split).
    #[inline(never)]
    fn patch(&mut self, from: u32, to: u32) {
        match self.insts.get_mut(from as usize) {
            Some(
                Inst::Char(_, next)
                | Inst::Class(_, next)
                | Inst::Goto(next)
                | Inst::Assert(_, next)
                | Inst::Save(_, next),
            ) => *next = to,
            Some(Inst::Split(targets, _)) => targets.push(to),
            Some(Inst::Match) | None => {}
        }
    }

    /// `first` then `next`.
    fn then(&mut self, first: Option<Piece>, next: Piece) -> Piece {
        match first {
            Some(first) => {
                self.patch(first.end, next.start);
                Piece {
                    start: first.start,
                    end: next.end,
                }
            }
            None => next,
        }
    }

    fn node(&mut self, node: &Node) -> Result<Piece, Error> {
        match &node.kind {
            Kind::Empty => self.one(Inst::Goto(0)),
            Kind::Char(c) => self.one(Inst::Char(*c, 0)),
            Kind::Class(index) => self.one(Inst::Class(*index, 0)),
            Kind::Assert(end) => self.one(Inst::Assert(*end, 0)),
            Kind::Repeat {
                min,
                max,
                greedy,
                sub,
            } => self.repeat(sub, *min, *max, !greedy),
            Kind::Group { first, sub } => {
                // Other groups keep their place in the program, capturing nothing.
                let mark = |slot| {
                    if *first {
                        Inst::Save(slot, 0)
                    } else {
                        Inst::Goto(0)
                    }
                };
                let start = self.add(mark(0))?;
                let inner = self.node(sub)?;
                let end = self.add(mark(1))?;
                self.patch(start, inner.start);
                self.patch(inner.end, end);
                Ok(Piece { start, end })
            }
            Kind::Concat(subs) => {
                let mut whole = None;
                for sub in subs {
                    let next = self.node(sub)?;
                    whole = Some(self.then(whole, next));
                }
                whole.map_or_else(|| self.one(Inst::Goto(0)), Ok)
            }
            Kind::Alt(subs) => {
                let split = self.split(false)?;
                let end = self.empty()?;
                for sub in subs {
                    let branch = self.node(sub)?;
                    self.patch(split, branch.start);
                    self.patch(branch.end, end);
                }
                Ok(Piece { start: split, end })
            }
        }
    }

    /// `sub` `n` times in a row.
    fn exactly(&mut self, sub: &Node, n: u32) -> Result<Piece, Error> {
        let mut whole = None;
        for _ in 0..n {
            let next = self.node(sub)?;
            whole = Some(self.then(whole, next));
        }
        whole.map_or_else(|| self.one(Inst::Goto(0)), Ok)
    }

    fn repeat(
        &mut self,
        sub: &Node,
        min: u32,
        max: Option<u32>,
        lazy: bool,
    ) -> Result<Piece, Error> {
        match (min, max) {
            (0, Some(1)) => {
                let split = self.split(lazy)?;
                let body = self.node(sub)?;
                let end = self.empty()?;
                self.patch(split, body.start);
                self.patch(split, end);
                self.patch(body.end, end);
                Ok(Piece { start: split, end })
            }
            (min, None) => self.at_least(sub, min, lazy),
            (min, Some(max)) if min == max => self.exactly(sub, min),
            (min, Some(max)) => {
                // `x{2,4}` is `xx(x(x)?)?`, each optional copy able to skip
                // straight to the end.
                let prefix = self.exactly(sub, min)?;
                let end = self.empty()?;
                let mut last = prefix.end;
                for _ in min..max {
                    let split = self.split(lazy)?;
                    let body = self.node(sub)?;
                    self.patch(last, split);
                    self.patch(split, body.start);
                    self.patch(split, end);
                    last = body.end;
                }
                self.patch(last, end);
                Ok(Piece {
                    start: prefix.start,
                    end,
                })
            }
        }
    }

    /// `sub` `n` times or more.
    fn at_least(&mut self, sub: &Node, n: u32, lazy: bool) -> Result<Piece, Error> {
        if n == 0 && !sub.nullable {
            let split = self.split(lazy)?;
            let body = self.node(sub)?;
            self.patch(split, body.start);
            self.patch(body.end, split);
            return Ok(Piece {
                start: split,
                end: split,
            });
        }
        if n == 0 {
            // `x*` as `(x+)?` when `x` can match the empty string: a loop
            // straight back to its split would prefer the wrong branch.
            let body = self.node(sub)?;
            let plus = self.split(lazy)?;
            self.patch(body.end, plus);
            self.patch(plus, body.start);
            let question = self.split(lazy)?;
            let end = self.empty()?;
            self.patch(question, body.start);
            self.patch(question, end);
            self.patch(plus, end);
            return Ok(Piece {
                start: question,
                end,
            });
        }
        let prefix = if n > 1 {
            Some(self.exactly(sub, n - 1)?)
        } else {
            None
        };
        let last = self.node(sub)?;
        let split = self.split(lazy)?;
        let body = self.then(prefix, last);
        self.patch(last.end, split);
        self.patch(split, last.start);
        Ok(Piece {
            start: body.start,
            end: split,
        })
    }
}

const TOO_BIG: Error = "the pattern compiles to more than 8192 instructions (counted repetitions copy what they repeat)";
