//! The sources a key part reads, listed once: [`KeyPart::parse`] finds a
//! part's source in [`Source::ALL`] and checks what follows its name by the
//! source's [`Argument`]; the JSON Schema's pattern for key parts is built
//! from the same table (`crate::config::schema`), so the two cannot disagree.

use super::context::{self, ContextPart, PeerField};
use super::KeyPart;
use crate::cost::extract::FieldPath;
#[cfg(doc)]
use crate::cost::extract::{MAX_KEYS, MAX_KEY_LEN};

/// Where a key part's value comes from: the text before its first `:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `client_ip`.
    ClientIp,
    /// `header:NAME`.
    Header,
    /// `path`.
    Path,
    /// `method`.
    Method,
    /// `authority`.
    Authority,
    /// `query:NAME`.
    Query,
    /// `const:TEXT`.
    Const,
    /// `jwt:CLAIM`.
    Jwt,
    /// `metadata:NAMESPACE:PATH`.
    Metadata,
    /// `filter_state:NAME`.
    FilterState,
    /// `peer:FIELD`.
    Peer,
    /// `route`.
    Route,
    /// `cluster`.
    Cluster,
    /// `body:PATH`.
    Body,
}

/// What follows a source's name in a key part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Argument {
    /// Nothing: the part is the name alone (`path`).
    Bare,
    /// `:` and text of at least one character, named by the placeholder
    /// (`header:NAME`).
    Text(&'static str),
    /// `:` and any text, empty included (`const:TEXT`).
    AnyText(&'static str),
    /// `:` and a path of 1 to [`context::MAX_PATH`] non-empty names
    /// separated by `.` (`jwt:CLAIM`).
    Names(&'static str),
    /// `:`, a non-empty namespace (which may hold `:`), `:` and a path of
    /// names as for [`Argument::Names`] (`metadata:NAMESPACE:PATH`).
    NamespaceNames,
    /// `:` and one of these words (`peer:uri_san`).
    OneOf(&'static [&'static str]),
    /// `:` and a JSON field path: 1 to [`MAX_KEYS`] keys of 1 to
    /// [`MAX_KEY_LEN`] ASCII letters, digits, `_` and `-`, separated by `.`
    /// (`body:model`).
    Fields(&'static str),
}

impl Source {
    /// Every source, in the order the error for an unknown part lists them.
    pub const ALL: [Source; 14] = [
        Source::ClientIp,
        Source::Header,
        Source::Path,
        Source::Method,
        Source::Authority,
        Source::Query,
        Source::Const,
        Source::Jwt,
        Source::Metadata,
        Source::FilterState,
        Source::Peer,
        Source::Route,
        Source::Cluster,
        Source::Body,
    ];

    /// The source's name: a key part's text before its first `:`.
    pub const fn name(self) -> &'static str {
        match self {
            Source::ClientIp => "client_ip",
            Source::Header => "header",
            Source::Path => "path",
            Source::Method => "method",
            Source::Authority => "authority",
            Source::Query => "query",
            Source::Const => "const",
            Source::Jwt => "jwt",
            Source::Metadata => "metadata",
            Source::FilterState => "filter_state",
            Source::Peer => "peer",
            Source::Route => "route",
            Source::Cluster => "cluster",
            Source::Body => "body",
        }
    }

    /// What follows the name.
    pub const fn argument(self) -> Argument {
        match self {
            Source::ClientIp
            | Source::Path
            | Source::Method
            | Source::Authority
            | Source::Route
            | Source::Cluster => Argument::Bare,
            Source::Header | Source::Query | Source::FilterState => Argument::Text("NAME"),
            Source::Const => Argument::AnyText("TEXT"),
            Source::Jwt => Argument::Names("CLAIM"),
            Source::Metadata => Argument::NamespaceNames,
            Source::Peer => Argument::OneOf(&PeerField::NAMES),
            Source::Body => Argument::Fields("PATH"),
        }
    }

    /// How the reference writes the source's parts: `header:NAME`; one
    /// form per word of an [`Argument::OneOf`] (`peer:uri_san` ...).
    pub fn forms(self) -> Vec<String> {
        let mut forms = Vec::new();
        self.each_form(&mut |name, what| forms.push(form(name, what)));
        forms
    }

    /// Calls `f` with the name and what follows it of each form (`""`
    /// for a bare name).
    fn each_form(self, f: &mut dyn FnMut(&'static str, &'static str)) {
        let name = self.name();
        match self.argument() {
            Argument::Bare => f(name, ""),
            Argument::Text(what)
            | Argument::AnyText(what)
            | Argument::Names(what)
            | Argument::Fields(what) => f(name, what),
            Argument::NamespaceNames => f(name, "NAMESPACE:PATH"),
            Argument::OneOf(words) => words.iter().for_each(|w| f(name, w)),
        }
    }

    /// The part of this source whose text after the name is `rest`
    /// (`None`: no `:`); `Err` names what is wrong with it.
    pub fn part(self, text: &str, rest: Option<&str>) -> Result<KeyPart, String> {
        let arg = match (self.argument(), rest) {
            (Argument::Bare, None) => Some(""),
            (Argument::Text(_), rest) => rest.filter(|a| !a.is_empty()),
            (
                Argument::AnyText(_)
                | Argument::Names(_)
                | Argument::NamespaceNames
                | Argument::OneOf(_)
                | Argument::Fields(_),
                rest,
            ) => rest,
            (Argument::Bare, Some(_)) => None,
        };
        let arg = arg.ok_or_else(|| unknown(text))?;
        let part = match self {
            Source::ClientIp => KeyPart::ClientIp,
            Source::Header => KeyPart::Header(arg.to_ascii_lowercase()),
            Source::Path => KeyPart::Path,
            Source::Method => KeyPart::Method,
            Source::Authority => KeyPart::Authority,
            Source::Query => KeyPart::Query(arg.to_string()),
            Source::Const => KeyPart::Const(arg.to_string()),
            Source::Jwt => KeyPart::Context(ContextPart::Jwt(context::names(arg)?)),
            Source::Metadata => KeyPart::Context(context::metadata(arg)?),
            Source::FilterState => KeyPart::Context(ContextPart::FilterState(arg.to_string())),
            Source::Peer => match PeerField::parse(arg) {
                Some(field) => KeyPart::Context(ContextPart::Peer(field)),
                None => {
                    return Err(format!(
                        "peer:{arg} is not a certificate field (expected {})",
                        or_list(&[self])
                    ))
                }
            },
            Source::Route => KeyPart::Context(ContextPart::Route),
            Source::Cluster => KeyPart::Context(ContextPart::Cluster),
            Source::Body => KeyPart::Body(FieldPath::parse(arg)?),
        };
        Ok(part)
    }
}

/// Every form of every source: `client_ip, header:NAME, ... route or
/// cluster`.
pub fn expected() -> String {
    or_list(&Source::ALL)
}

/// The forms of `sources`: `a, b or c`. Written without a list of strings:
/// the filter only needs it for an error.
fn or_list(sources: &[Source]) -> String {
    let mut forms: Vec<(&str, &str)> = Vec::new();
    for source in sources {
        source.each_form(&mut |name, what| forms.push((name, what)));
    }
    let mut out = String::new();
    for (i, (name, what)) in forms.iter().enumerate() {
        if i > 0 {
            out.push_str(if i + 1 == forms.len() { " or " } else { ", " });
        }
        out.push_str(name);
        if !what.is_empty() {
            out.push(':');
            out.push_str(what);
        }
    }
    out
}

/// A form as the reference writes it: `header:NAME`, `path`.
fn form(name: &str, what: &str) -> String {
    if what.is_empty() {
        name.to_string()
    } else {
        format!("{name}:{what}")
    }
}

/// Why a `body:` part is refused where it is not a rule's key.
pub const BODY_ONLY_IN_KEY: &str =
    "a body: part is read only in a rule's key (the body is in only when the rule is decided)";

/// The error for a part of no source, or of a source with no argument
/// where one is needed (or one where none is).
pub(super) fn unknown(text: &str) -> String {
    format!("unknown key part {text:?} (expected {})", expected())
}
