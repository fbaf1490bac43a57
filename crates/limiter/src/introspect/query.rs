//! A query string read strictly: known parameters only, each at most once.

/// The parameters of one request.
#[derive(Debug, Default)]
pub(super) struct Query(Vec<(String, String)>);

impl Query {
    /// Reads `raw`, refusing a parameter not in `known` or given twice.
    pub(super) fn parse(raw: Option<&str>, known: &[&str]) -> Result<Query, String> {
        let mut out: Vec<(String, String)> = Vec::new();
        for (name, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
            if !known.contains(&name.as_ref()) {
                return Err(format!(
                    "{name}: unknown parameter (expected one of {})",
                    known.join(", ")
                ));
            }
            if out.iter().any(|(n, _)| *n == name) {
                return Err(format!("{name}: given more than once"));
            }
            out.push((name.into_owned(), value.into_owned()));
        }
        Ok(Query(out))
    }

    /// The value of `name`, if given.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `name`, which must be given and not empty.
    pub(super) fn required(&self, name: &str) -> Result<&str, String> {
        match self.get(name) {
            Some(v) if !v.is_empty() => Ok(v),
            Some(_) | None => Err(format!("{name}: required")),
        }
    }

    /// `name` as a whole number from `min` to `max`, if given.
    pub(super) fn number(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>, String> {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        match text.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
            Ok(_) | Err(_) => Err(format!(
                "{name}: expected a whole number from {min} to {max}, got {text:?}"
            )),
        }
    }
}
