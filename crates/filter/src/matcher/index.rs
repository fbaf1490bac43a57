//! The rules a request may match, found without trying every rule's match.
//!
//! Compiled once with the plan. A rule's path condition files it in one
//! place: an exact path in a sorted table, a prefix in a sorted table of
//! prefixes, any path or a regular expression in a residual list that
//! every request tries. A request's path picks one list from each (the
//! prefix table's list holds the rules of every prefix of the path), and
//! the three sorted lists are merged in rule order. Each candidate's method
//! is then checked against its bitset, and only then its regular
//! expression, headers, key parts and `not`. So a request costs a hash
//! lookup, a binary search and its candidates, whatever the rule count,
//! with no allocation.

use super::{Matcher, PathMatch};
use crate::key::{Request, RequestView};

/// The most distinct methods given a bit; a rule naming a method beyond
/// them is checked against its own list.
const METHOD_BITS: usize = u64::BITS as usize;

/// Candidate rules by path and method; see the module's documentation.
#[derive(Debug, Default)]
pub struct RuleIndex {
    /// Rules with an exact path, by that path, in rule order.
    exact: Vec<(String, Box<[usize]>)>,
    /// Rules with a path prefix.
    prefixes: Prefixes,
    /// Rules of any path or a regular expression: candidates of every
    /// request.
    residual: Box<[usize]>,
    /// The distinct methods rules name; a method's bit is its position.
    methods: Vec<String>,
    /// What remains to check of each rule once it is a candidate.
    rules: Box<[Entry]>,
}

/// What the index leaves to check of a candidate rule, beyond its headers,
/// key parts and `not`.
#[derive(Debug, Clone, Copy)]
struct Entry {
    methods: Methods,
    /// The path is a regular expression.
    regex: bool,
}

/// A rule's methods.
#[derive(Debug, Clone, Copy)]
enum Methods {
    /// Any method (the rule names none).
    Any,
    /// The methods of these bits.
    Bits(u64),
    /// Some method has no bit: the rule's own list decides.
    Listed,
}

impl RuleIndex {
    /// Indexes `rules`, in order; `matcher` gives a rule's match, or `None`
    /// for a rule never matched on its own (a pool rule).
    pub fn new<'m, T>(rules: &'m [T], matcher: impl Fn(&'m T) -> Option<&'m Matcher>) -> Self {
        let mut index = RuleIndex::default();
        // Sorted tables rather than maps: the wasm carries less code.
        let mut exact: Vec<(&str, Vec<usize>)> = Vec::new();
        let mut prefixes: Vec<(&str, Vec<usize>)> = Vec::new();
        let mut residual = Vec::new();
        let mut entries = Vec::with_capacity(rules.len());
        for (i, rule) in rules.iter().enumerate() {
            let Some(m) = matcher(rule) else {
                entries.push(Entry {
                    methods: Methods::Any,
                    regex: false,
                });
                continue;
            };
            match &m.path {
                PathMatch::Exact(path) => file(&mut exact, path, i),
                PathMatch::Prefix(prefix) => file(&mut prefixes, prefix, i),
                PathMatch::Any | PathMatch::Regex(_) => residual.push(i),
            }
            entries.push(Entry {
                methods: index.method_bits(&m.methods),
                regex: matches!(m.path, PathMatch::Regex(_)),
            });
        }
        index.exact = exact
            .into_iter()
            .map(|(path, rules)| (path.to_owned(), rules.into_boxed_slice()))
            .collect();
        index.prefixes = Prefixes::new(prefixes);
        index.residual = residual.into_boxed_slice();
        index.rules = entries.into_boxed_slice();
        index
    }

    /// The bits of `methods`, giving new methods the next free bits.
    fn method_bits(&mut self, methods: &[String]) -> Methods {
        if methods.is_empty() {
            return Methods::Any;
        }
        let mut bits = 0u64;
        for method in methods {
            let bit = match self.methods.iter().position(|m| m == method) {
                Some(bit) => bit,
                None if self.methods.len() < METHOD_BITS => {
                    self.methods.push(method.clone());
                    self.methods.len() - 1
                }
                None => return Methods::Listed,
            };
            bits |= 1 << bit;
        }
        Methods::Bits(bits)
    }

    /// The rules of `rules` (those the index was built from) whose match
    /// `request` satisfies, in rule order, with their positions.
    pub fn matching<'a, 'r, T, V, F>(
        &'a self,
        request: &'r Request<'a, V>,
        rules: &'a [T],
        matcher: F,
    ) -> Matching<'a, 'r, T, V, F>
    where
        V: RequestView,
        F: Fn(&'a T) -> &'a Matcher,
    {
        let by_path = !(self.exact.is_empty() && self.prefixes.entries.is_empty());
        // The path is read only when some rule is filed by it.
        let (exact, prefixed) = match by_path.then(|| request.path()).flatten() {
            Some(path) => (
                self.exact
                    .binary_search_by(|(p, _)| p.as_str().cmp(path))
                    .ok()
                    .and_then(|at| self.exact.get(at))
                    .map_or(&[][..], |(_, rules)| &rules[..]),
                self.prefixes.longest(path),
            ),
            None => (&[][..], &[][..]),
        };
        Matching {
            index: self,
            request,
            rules,
            matcher,
            candidates: Merge {
                lists: [exact, prefixed, &self.residual],
            },
            method_bit: None,
        }
    }
}

/// The rules a request matches, in rule order (see [`RuleIndex::matching`]).
pub struct Matching<'a, 'r, T, V: RequestView, F> {
    index: &'a RuleIndex,
    request: &'r Request<'a, V>,
    rules: &'a [T],
    matcher: F,
    candidates: Merge<'a>,
    /// The request method's bit (0: none), once read.
    method_bit: Option<u64>,
}

impl<'a, T, V, F> Iterator for Matching<'a, '_, T, V, F>
where
    V: RequestView,
    F: Fn(&'a T) -> &'a Matcher,
{
    type Item = (usize, &'a T);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let i = self.candidates.next()?;
            let (Some(rule), Some(entry)) = (self.rules.get(i), self.index.rules.get(i)) else {
                continue;
            };
            let m = (self.matcher)(rule);
            let method = match entry.methods {
                Methods::Any => true,
                Methods::Bits(bits) => self.method_bit() & bits != 0,
                Methods::Listed => m.method_holds(self.request),
            };
            if method
                && (!entry.regex || m.path_holds(self.request))
                && m.conditions_hold(self.request)
            {
                return Some((i, rule));
            }
        }
    }
}

impl<T, V: RequestView, F> Matching<'_, '_, T, V, F> {
    /// The request method's bit, read at the first rule that names methods.
    fn method_bit(&mut self) -> u64 {
        let (index, request) = (self.index, self.request);
        *self.method_bit.get_or_insert_with(|| {
            request
                .method()
                .and_then(|method| index.methods.iter().position(|m| m == method))
                .map_or(0, |bit| 1 << bit)
        })
    }
}

/// Files rule `rule` under `key` in `table`, kept sorted by key.
fn file<'k>(table: &mut Vec<(&'k str, Vec<usize>)>, key: &'k str, rule: usize) {
    match table.binary_search_by(|(k, _)| (*k).cmp(key)) {
        Ok(at) => {
            if let Some((_, rules)) = table.get_mut(at) {
                rules.push(rule);
            }
        }
        Err(at) => table.insert(at, (key, vec![rule])),
    }
}

/// Rule positions of sorted lists, merged in order (no position is in two).
#[derive(Debug, Clone)]
struct Merge<'a> {
    lists: [&'a [usize]; 3],
}

impl Iterator for Merge<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let mut least: Option<&mut &[usize]> = None;
        for list in &mut self.lists {
            let Some(&first) = list.first() else {
                continue;
            };
            if least.as_ref().map_or(true, |l| l.first() > Some(&first)) {
                least = Some(list);
            }
        }
        let list = least?;
        let (&first, rest) = list.split_first()?;
        *list = rest;
        Some(first)
    }
}

/// Path prefixes sorted bytewise, each with the rules of every configured
/// prefix of itself (itself included): the longest prefix of a path found
/// gives all the rules whose prefix the path starts with.
#[derive(Debug, Default)]
struct Prefixes {
    entries: Vec<Prefix>,
}

#[derive(Debug)]
struct Prefix {
    text: String,
    /// The longest other configured prefix of `text`.
    parent: Option<usize>,
    /// The rules of `text` and of its parents, in rule order.
    rules: Box<[usize]>,
}

impl Prefixes {
    /// The table of `prefixes` (each with its rules in order).
    fn new(prefixes: Vec<(&str, Vec<usize>)>) -> Self {
        let mut entries: Vec<Prefix> = Vec::with_capacity(prefixes.len());
        // The prefixes of the entry being added, shortest first: sorted,
        // every entry between a prefix of it and itself starts with that
        // prefix, so none has been dropped from the chain.
        let mut chain: Vec<usize> = Vec::new();
        for (text, own) in prefixes {
            while let Some(&top) = chain.last() {
                if entries.get(top).is_some_and(|e| text.starts_with(&e.text)) {
                    break;
                }
                chain.pop();
            }
            let parent = chain.last().copied();
            let inherited = parent
                .and_then(|p| entries.get(p))
                .map_or(&[][..], |p| &p.rules[..]);
            let rules = Merge {
                lists: [inherited, &own, &[]],
            }
            .collect();
            chain.push(entries.len());
            entries.push(Prefix {
                text: text.to_owned(),
                parent,
                rules,
            });
        }
        Prefixes { entries }
    }

    /// The rules whose prefix `path` starts with, in rule order.
    fn longest(&self, path: &str) -> &[usize] {
        // The last entry not after `path`: a prefix of `path`, or an entry
        // whose parents include `path`'s longest prefix.
        let mut at = self
            .entries
            .partition_point(|e| e.text.as_str() <= path)
            .checked_sub(1);
        while let Some(entry) = at.and_then(|i| self.entries.get(i)) {
            if path.starts_with(&entry.text) {
                return &entry.rules;
            }
            at = entry.parent;
        }
        &[]
    }
}

#[cfg(test)]
mod tests;
