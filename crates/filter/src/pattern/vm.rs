//! A Pike VM: every thread of the program advances together, one character
//! of the value at a time, so matching takes time in proportion to the
//! program times the value, whatever the pattern (no backtracking).
//!
//! Threads are kept in order of preference and a state is entered once per
//! position, by its most preferred thread: the match found is the one a
//! backtracking engine would find first (leftmost-first, as RE2 and
//! `regex-lite`), and with it the first group's bounds. The epsilon closure
//! follows an explicit stack, never recursion.

use super::class;
use super::compile::{Inst, Program};
use std::cell::RefCell;

/// No position recorded.
const NONE: usize = usize::MAX;

/// The first group's start and end.
type Slots = [usize; 2];

/// Runs `program` over the whole of `value`: `None` when it does not
/// match, else the first group's bounds (`NONE` where unset). `capture`
/// false skips recording them.
pub(super) fn run(program: &Program, value: &str, capture: bool) -> Option<Slots> {
    let run = |scratch: &mut Scratch| run_in(scratch, program, value, capture);
    SCRATCH
        .try_with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut scratch) => run(&mut scratch),
            Err(_) => run(&mut Scratch::new()),
        })
        .unwrap_or_else(|_| run(&mut Scratch::new()))
}

thread_local! {
    /// The buffers of runs, kept: once grown to a worker's largest program,
    /// matching allocates nothing.
    static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch::new()) };
}

struct Scratch {
    now: Threads,
    next: Threads,
    stack: Vec<Frame>,
}

impl Scratch {
    const fn new() -> Scratch {
        Scratch {
            now: Threads::new(),
            next: Threads::new(),
            stack: Vec::new(),
        }
    }
}

fn run_in(scratch: &mut Scratch, program: &Program, value: &str, capture: bool) -> Option<Slots> {
    let Scratch { now, next, stack } = scratch;
    let n = program.insts.len();
    now.reset(n);
    next.reset(n);
    stack.clear();
    let mut vm = Vm {
        program,
        end: value.len(),
        capture,
        stack,
    };
    vm.closure(now, program.start, 0, [NONE; 2]);
    for (at, c) in value.char_indices() {
        if now.order.is_empty() {
            return None;
        }
        let after = at + c.len_utf8();
        for &state in &now.order {
            let target = match program.insts.get(state as usize) {
                Some(Inst::Char(want, target)) if *want == c => *target,
                Some(Inst::Class(index, target))
                    if program
                        .classes
                        .get(*index as usize)
                        .is_some_and(|ranges| class::contains(ranges, c)) =>
                {
                    *target
                }
                _ => continue,
            };
            let slots = now.slots.get(state as usize).copied().unwrap_or([NONE; 2]);
            vm.closure(next, target, after, slots);
        }
        std::mem::swap(now, next);
        next.order.clear();
    }
    if now.contains(program.matched) {
        return now.slots.get(program.matched as usize).copied();
    }
    None
}

/// The states reached at one position, in order of preference (a sparse
/// set), and the first group's bounds of the thread waiting at each.
struct Threads {
    order: Vec<u32>,
    /// A state's index in `order`, meaningful only when it points back.
    index: Vec<u32>,
    slots: Vec<Slots>,
}

impl Threads {
    const fn new() -> Threads {
        Threads {
            order: Vec::new(),
            index: Vec::new(),
            slots: Vec::new(),
        }
    }

    /// Empty, with room for the states of a program of `n`.
    fn reset(&mut self, n: usize) {
        self.order.clear();
        if self.index.len() < n {
            // `index` needs no clearing: an entry counts only when it
            // points back at its state.
            self.index.resize(n, 0);
            self.slots.resize(n, [NONE; 2]);
        }
    }

    fn contains(&self, state: u32) -> bool {
        self.index
            .get(state as usize)
            .and_then(|&i| self.order.get(i as usize))
            == Some(&state)
    }

    /// Adds `state`; false when it was already there.
    fn insert(&mut self, state: u32) -> bool {
        if self.contains(state) {
            return false;
        }
        let Some(index) = self.index.get_mut(state as usize) else {
            return false;
        };
        *index = self.order.len() as u32;
        self.order.push(state);
        true
    }
}

/// A step of the epsilon closure's depth-first walk.
enum Frame {
    Explore(u32),
    /// Put a slot back as it was before a branch recorded it.
    Restore(usize, usize),
}

struct Vm<'p> {
    program: &'p Program,
    /// The value's length: where `$` holds.
    end: usize,
    capture: bool,
    stack: &'p mut Vec<Frame>,
}

impl Vm<'_> {
    /// Adds to `set` the threads `state` leads to at position `at` without
    /// reading a character, most preferred first; each thread waiting at a
    /// character, a class or the match keeps the bounds met on its way.
    fn closure(&mut self, set: &mut Threads, state: u32, at: usize, mut slots: Slots) {
        self.stack.push(Frame::Explore(state));
        while let Some(frame) = self.stack.pop() {
            let mut state = match frame {
                Frame::Explore(state) => state,
                Frame::Restore(slot, was) => {
                    if let Some(s) = slots.get_mut(slot) {
                        *s = was;
                    }
                    continue;
                }
            };
            while set.insert(state) {
                match self.program.insts.get(state as usize) {
                    Some(Inst::Goto(next)) => state = *next,
                    Some(Inst::Assert(end, next)) => {
                        let holds = if *end { at == self.end } else { at == 0 };
                        if !holds {
                            break;
                        }
                        state = *next;
                    }
                    Some(Inst::Split(targets, lazy)) => {
                        // The first preferred now, the others stacked to
                        // come off in their order.
                        let first = if *lazy {
                            let Some((first, rest)) = targets.split_last() else {
                                break;
                            };
                            self.stack.extend(rest.iter().map(|&t| Frame::Explore(t)));
                            first
                        } else {
                            let Some((first, rest)) = targets.split_first() else {
                                break;
                            };
                            self.stack
                                .extend(rest.iter().rev().map(|&t| Frame::Explore(t)));
                            first
                        };
                        state = *first;
                    }
                    Some(Inst::Save(slot, next)) => {
                        if self.capture {
                            if let Some(s) = slots.get_mut(*slot) {
                                self.stack.push(Frame::Restore(*slot, *s));
                                *s = at;
                            }
                        }
                        state = *next;
                    }
                    _ => {
                        if let Some(s) = set.slots.get_mut(state as usize) {
                            *s = slots;
                        }
                        break;
                    }
                }
            }
        }
    }
}
