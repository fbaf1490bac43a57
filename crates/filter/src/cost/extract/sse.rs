//! [`SseScanner`]: a `text/event-stream` body, its events' `data` read by
//! one [`JsonScanner`] as the lines arrive, nothing buffered.

use super::{FieldPath, Findings, Found, JsonScanner, MAX_EVENT_DATA, MAX_LINE, MAX_PATHS};

/// Where in a line the scanner is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    /// Nothing read yet: a line ending here ends the event.
    Start,
    /// In the field name: its bytes read, and whether they are `data` so far.
    Name { at: u8, data: bool },
    /// Just after `data:` (one space there is not part of the value).
    DataFirst,
    /// In a `data` value.
    Data,
    /// A comment, another field, or a line too long: read to its end.
    Ignore,
}

/// Finds the values at up to [`MAX_PATHS`] paths in a server-sent events
/// body (`text/event-stream`, as OpenAI-compatible APIs stream), fed in
/// chunks of any size.
///
/// Lines end with `\n`, `\r\n` or `\r`; a blank line ends an event. An
/// event's `data` lines, joined with `\n`, are its payload, read as one JSON
/// document by a [`JsonScanner`] as they arrive; `event:`, `id:`, `retry:`
/// and comments (`:` lines) are ignored. An event counts only when its
/// payload is one whole JSON document: `[DONE]`, text and broken JSON are
/// ignored. Per path, the result is the value of the **last event in which
/// the path had a value** (the usage event: earlier events' `"usage":
/// null` never hide it, a later value replaces an earlier one); with no
/// value anywhere it is [`Found::Malformed`] if a counted event had
/// something else there, else [`Found::Missing`].
///
/// Bounds: a line longer than [`MAX_LINE`] bytes is skipped whole and
/// counted ([`overlong_lines`](Self::overlong_lines)); an event whose
/// payload exceeds [`MAX_EVENT_DATA`] bytes (which a data line over
/// [`MAX_LINE`] makes it) is skipped and counted
/// ([`skipped_events`](Self::skipped_events)). The end of the body ends its
/// last line and event, so a final event without its blank line still
/// counts when its payload is whole (the SSE standard drops it; a usage
/// count is worth keeping).
#[derive(Clone, Debug)]
pub struct SseScanner {
    json: JsonScanner,
    line: Line,
    /// Bytes of the line so far (line end excluded).
    line_len: usize,
    /// The last byte was `\r`: a `\n` now ends nothing more.
    after_cr: bool,
    /// The event has a `data` line.
    has_data: bool,
    /// Bytes of the event's payload so far.
    data_len: usize,
    /// The event is over a bound: its payload is not read.
    skipping: bool,
    /// Per path, the value of the last counted event that had one.
    values: [Option<u64>; MAX_PATHS],
    /// Paths malformed in some counted event.
    malformed: u8,
    overlong_lines: u64,
    skipped_events: u64,
}

impl SseScanner {
    /// A scanner for `paths`; only the first [`MAX_PATHS`] are looked for.
    pub fn new(paths: &[FieldPath]) -> SseScanner {
        SseScanner {
            json: JsonScanner::new(paths),
            line: Line::Start,
            line_len: 0,
            after_cr: false,
            has_data: false,
            data_len: 0,
            skipping: false,
            values: [None; MAX_PATHS],
            malformed: 0,
            overlong_lines: 0,
            skipped_events: 0,
        }
    }

    /// Reads the next bytes of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        for &b in chunk {
            self.step(b);
        }
    }

    /// Ends the body (its last line and event, see the type's doc) and
    /// tells what was found at each path, in the order given to
    /// [`new`](Self::new).
    pub fn finish(&mut self) -> Findings {
        if self.line != Line::Start {
            self.end_line();
        }
        self.end_event();
        let mut found = [Found::Missing; MAX_PATHS];
        for (i, f) in found.iter_mut().enumerate() {
            *f = match self.values.get(i).copied().flatten() {
                Some(v) => Found::Value(v),
                None if self.malformed & (1 << i) != 0 => Found::Malformed,
                None => Found::Missing,
            };
        }
        let paths = self.json.finish().len();
        Findings::new(&found[..paths])
    }

    /// Lines longer than [`MAX_LINE`] skipped so far.
    pub fn overlong_lines(&self) -> u64 {
        self.overlong_lines
    }

    /// Events skipped so far for a payload over [`MAX_EVENT_DATA`].
    pub fn skipped_events(&self) -> u64 {
        self.skipped_events
    }

    fn step(&mut self, b: u8) {
        if self.after_cr {
            self.after_cr = false;
            if b == b'\n' {
                return;
            }
        }
        match b {
            b'\r' => {
                self.after_cr = true;
                self.end_line();
            }
            b'\n' => self.end_line(),
            _ => {
                self.line_len += 1;
                if self.line_len == MAX_LINE + 1 {
                    self.overlong_lines += 1;
                    if matches!(self.line, Line::DataFirst | Line::Data) {
                        self.skip_event();
                    }
                    self.line = Line::Ignore;
                }
                self.line_byte(b);
            }
        }
    }

    fn line_byte(&mut self, b: u8) {
        self.line = match self.line {
            Line::Start if b == b':' => Line::Ignore,
            Line::Start => name_byte(0, true, b),
            Line::Name { at, data } if b == b':' => {
                if data && at == 4 {
                    self.start_data();
                    Line::DataFirst
                } else {
                    Line::Ignore
                }
            }
            Line::Name { at, data } => name_byte(at, data, b),
            Line::DataFirst if b == b' ' => Line::Data,
            Line::DataFirst | Line::Data => {
                self.data_byte(b);
                Line::Data
            }
            Line::Ignore => Line::Ignore,
        };
    }

    fn end_line(&mut self) {
        match self.line {
            Line::Start => self.end_event(),
            // `data` alone: an empty data line.
            Line::Name { at: 4, data: true } => self.start_data(),
            _ => {}
        }
        self.line = Line::Start;
        self.line_len = 0;
    }

    /// A data line begins: lines after the first are joined with `\n`.
    fn start_data(&mut self) {
        if self.has_data {
            self.data_byte(b'\n');
        }
        self.has_data = true;
    }

    fn data_byte(&mut self, b: u8) {
        if self.skipping {
            return;
        }
        self.data_len += 1;
        if self.data_len > MAX_EVENT_DATA {
            self.skip_event();
            return;
        }
        self.json.feed(&[b]);
    }

    fn skip_event(&mut self) {
        if !self.skipping {
            self.skipping = true;
            self.skipped_events += 1;
        }
    }

    /// The event ends: its payload counts if it is one whole document.
    fn end_event(&mut self) {
        if self.has_data && !self.skipping && self.json.is_complete() {
            for (i, found) in self.json.finish().iter().enumerate() {
                match *found {
                    Found::Value(v) => {
                        if let Some(slot) = self.values.get_mut(i) {
                            *slot = Some(v);
                        }
                    }
                    Found::Malformed => self.malformed |= 1 << i,
                    Found::Missing => {}
                }
            }
        }
        self.json.reset();
        self.has_data = false;
        self.data_len = 0;
        self.skipping = false;
    }
}

/// One byte of a field name: still `data`?
fn name_byte(at: u8, data: bool, b: u8) -> Line {
    Line::Name {
        at: at.saturating_add(1),
        data: data && b"data".get(usize::from(at)) == Some(&b),
    }
}
