//! Header values with placeholders filled per request: `{ip}` (a distinct
//! IPv4 address per counter value) and `{n}` (the counter in decimal).

use std::net::Ipv4Addr;

/// First address `{ip}` yields (counter 0); later values count up from it.
const FIRST_IP: u32 = 0x0100_0000; // 1.0.0.0

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Ip,
    Counter,
}

/// A header value split at its placeholders once, filled cheaply per request.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    pub fn parse(text: &str) -> Template {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while !rest.is_empty() {
            let (part, len) = if rest.starts_with("{ip}") {
                (Some(Part::Ip), 4)
            } else if rest.starts_with("{n}") {
                (Some(Part::Counter), 3)
            } else {
                (None, rest.chars().next().map_or(1, char::len_utf8))
            };
            match part {
                Some(p) => {
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(p);
                }
                None => literal.push_str(&rest[..len]),
            }
            rest = &rest[len..];
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Template { parts }
    }

    pub fn fill(&self, counter: u64) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Ip => out.push_str(&ip_of(counter).to_string()),
                Part::Counter => out.push_str(&counter.to_string()),
            }
        }
        out
    }
}

/// The address `{ip}` stands for at `counter`.
pub fn ip_of(counter: u64) -> Ipv4Addr {
    // Truncation is the wrap: 2^32 - 2^24 values before addresses repeat.
    Ipv4Addr::from(FIRST_IP.wrapping_add(counter as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_placeholders() {
        let t = Template::parse("{ip}, 9.9.9.9 #{n}");
        assert_eq!(t.fill(0), "1.0.0.0, 9.9.9.9 #0");
        assert_eq!(t.fill(258), "1.0.1.2, 9.9.9.9 #258");
    }

    #[test]
    fn keeps_other_braces() {
        let t = Template::parse("a{b}{n}c{");
        assert_eq!(t.fill(7), "a{b}7c{");
        assert_eq!(Template::parse("plain").fill(3), "plain");
    }

    #[test]
    fn addresses_are_distinct_over_sixteen_million() {
        assert_eq!(ip_of(16_777_215).to_string(), "1.255.255.255");
        assert_eq!(ip_of(16_777_216).to_string(), "2.0.0.0");
    }
}
