//! The decision code as Redis runs it, the arguments of one call and the
//! reading of its reply.

use crate::store::{StoreError, StoreItem};
use redis::Script;
use sluice_core::permits::{MAX_HOLDERS, PERMITS_CODE, PERMIT_RETRY_AFTER};
use sluice_core::{Algorithm, Decision, Denial, Nanos};

/// The decision code: a Lua chunk returning `main(KEYS, ARGV)`; see the
/// module documentation. The store runs it after defining `CODE`, each
/// algorithm's name mapped to its [`Algorithm::code`].
pub const DECIDE_LUA: &str = include_str!("../decide.lua");

/// The decision code as it runs: [`DECIDE_LUA`] after `CODE`, a table of
/// every algorithm's name and [`Algorithm::code`], so that the script and
/// sluice-core number the algorithms alike, and `PERMITS`, sluice-core's
/// constants of concurrency limits.
fn lua_source() -> String {
    let codes: Vec<String> = Algorithm::ALL
        .iter()
        .map(|a| format!("{} = {}", a.name(), a.code()))
        .collect();
    format!(
        "local CODE = {{{}}}\nlocal PERMITS = {{code = {PERMITS_CODE}, max_holders = {MAX_HOLDERS}, \
         retry_us = {}}}\n{DECIDE_LUA}",
        codes.join(", "),
        PERMIT_RETRY_AFTER / MICROS
    )
}

/// The decision code packaged for Redis: as a function library (Redis 7+;
/// its closures are built once, not on every call) and as an EVAL script
/// for older servers.
#[derive(Debug)]
pub(super) struct Packaged {
    /// `FUNCTION LOAD` text.
    pub(super) library: String,
    /// The function to `FCALL`; named after a hash of the code, so
    /// limiters of different versions sharing a Redis never clash.
    pub(super) function: String,
    /// The EVAL form.
    pub(super) script: Script,
}

impl Packaged {
    pub(super) fn new() -> Packaged {
        let source = lua_source();
        // FNV-1a: only to tell versions of the code apart.
        let hash = source.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let function = format!("sluice_{hash:016x}");
        // Libraries may not touch globals such as `math` while loading, so
        // the code is built on the first call and kept.
        let library = format!(
            "#!lua name={function}\nlocal function build()\n{source}\nend\n\
             local main\n\
             redis.register_function('{function}', function(keys, args)\n\
             if not main then main = build() end\n\
             return main(keys, args)\n\
             end)\n"
        );
        let script = Script::new(&format!(
            "local function build()\n{source}\nend\nreturn build()(KEYS, ARGV)\n"
        ));
        Packaged {
            library,
            function,
            script,
        }
    }
}

/// Nanoseconds per microsecond, the script's time unit.
pub(super) const MICROS: u64 = 1_000;

/// Values the script returns per limit.
const FIELDS_PER_LIMIT: usize = 8;

/// Appends one item's script arguments (times in microseconds).
pub(super) fn push_item_args(args: &mut Vec<String>, item: &StoreItem) {
    let item = match item {
        StoreItem::Rate(r) => r,
        StoreItem::Permits(p) => {
            args.extend([
                PERMITS_CODE.to_string(),
                p.permits.max.to_string(),
                (p.permits.ttl / MICROS).to_string(),
                p.holder.to_string(),
                String::new(),
                String::new(),
                p.hits.to_string(),
                String::new(),
                "0".into(),
                "0".into(),
                "0".into(),
                "0".into(),
                "0".into(),
            ]);
            return;
        }
    };
    let limit = &item.limit;
    args.extend([
        limit.algorithm.code().to_string(),
        limit.requests.to_string(),
        (limit.window / MICROS).to_string(),
        limit.burst.to_string(),
        limit.precision.to_string(),
        limit.soft_percent.to_string(),
        item.hits.to_string(),
        // Rounded up, so that a delay never ends before the request conforms.
        limit
            .max_delay
            .map(|d| d.div_ceil(MICROS).to_string())
            .unwrap_or_default(),
        item.lease.to_string(),
        item.returned.to_string(),
        // Ages come in whole milliseconds: exact in microseconds.
        (item.returned_age / MICROS).to_string(),
        item.reserve.to_string(),
        // Whole milliseconds on the wire: exact in microseconds.
        (item.block / MICROS).to_string(),
    ]);
}

/// What one script call decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptOutcome {
    /// True when every request of the call was admitted by every limit
    /// (and states were written).
    pub allowed: bool,
    /// The script's clock, microseconds since the epoch.
    pub now_us: u64,
    /// How many of the call's requests were admitted (the first ones);
    /// 0 for a refund.
    pub admitted: u32,
    /// One decision per key, of the last request decided (see
    /// [`Verdict::decisions`]), times in nanoseconds (whole microseconds).
    pub decisions: Vec<Decision>,
    /// Delay mode: the wait of each admitted request, in nanoseconds (whole
    /// microseconds); empty when none waits.
    pub delays: Vec<Nanos>,
    /// Leases: the units granted per key (0 when none, or not admitted).
    pub leased: Vec<u64>,
}

fn denial_from_code(code: i64) -> Option<Denial> {
    match code {
        1 => Some(Denial::OverLimit),
        2 => Some(Denial::CostExceedsCapacity),
        3 => Some(Denial::DelayTooLong),
        4 => Some(Denial::Blocked { started: false }),
        5 => Some(Denial::Blocked { started: true }),
        _ => None,
    }
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Reads the script's reply: `allowed, now_us, admitted, delays`, then per
/// limit `allowed, limit, remaining, reset_us, retry_after_us, denial,
/// delay_us, leased`, then `delays` waits (0, or one per admitted request).
pub fn parse_reply(reply: &[i64], n: usize) -> Result<ScriptOutcome, StoreError> {
    let (allowed, now_us, admitted, waits, rest) = match reply {
        [a, t, k, w, rest @ ..] => (*a == 1, to_u64(*t), to_u64(*k), to_u64(*w), rest),
        _ => return Err(StoreError::Protocol("short reply".into())),
    };
    let per_limit = n.saturating_mul(FIELDS_PER_LIMIT);
    let waits = usize::try_from(waits).unwrap_or(usize::MAX);
    let expected = per_limit.saturating_add(waits).saturating_add(4);
    if reply.len() != expected {
        return Err(StoreError::Protocol(format!(
            "script returned {} values, expected {expected}",
            reply.len()
        )));
    }
    let admitted = u32::try_from(admitted)
        .map_err(|_| StoreError::Protocol(format!("admitted {admitted}")))?;
    if waits != 0 && u32::try_from(waits) != Ok(admitted) {
        return Err(StoreError::Protocol(format!(
            "{waits} delays for {admitted} admitted requests"
        )));
    }
    let (limits, delays) = rest.split_at(per_limit.min(rest.len()));
    let leased = limits
        .chunks_exact(FIELDS_PER_LIMIT)
        .map(|c| c.last().copied().map_or(0, to_u64))
        .collect();
    let decisions = limits
        .chunks_exact(FIELDS_PER_LIMIT)
        .map(|c| match c {
            [a, l, rem, reset, retry, denial, delay, _] => Decision {
                allowed: *a == 1,
                limit: to_u64(*l),
                remaining: to_u64(*rem),
                reset: to_u64(*reset).saturating_mul(MICROS),
                retry_after: to_u64(*retry).saturating_mul(MICROS),
                delay: to_u64(*delay).saturating_mul(MICROS),
                denial: denial_from_code(*denial),
            },
            _ => Decision {
                allowed: false,
                limit: 0,
                remaining: 0,
                reset: 0,
                retry_after: 0,
                delay: 0,
                denial: None,
            },
        })
        .collect();
    Ok(ScriptOutcome {
        allowed,
        now_us,
        admitted,
        decisions,
        delays: delays
            .iter()
            .map(|&d| to_u64(d).saturating_mul(MICROS))
            .collect(),
        leased,
    })
}

/// Reads the permits mode's reply: `now`, then per key `released,
/// renewed`; the two flags of each of `n` keys.
pub fn parse_permits_reply(reply: &[i64], n: usize) -> Result<Vec<(bool, bool)>, StoreError> {
    match reply {
        [_, flags @ ..] if flags.len() == n.saturating_mul(2) => Ok(flags
            .chunks_exact(2)
            .map(|c| (c.first() == Some(&1), c.get(1) == Some(&1)))
            .collect()),
        _ => Err(StoreError::Protocol(format!(
            "permits reply of {} values for {n} keys",
            reply.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::Denial;

    #[test]
    fn replies_are_checked() {
        assert!(parse_reply(&[], 0).is_err());
        assert!(parse_reply(&[1, 5, 1, 0], 1).is_err());
        let out = parse_reply(&[0, 7, 0, 0, 0, 10, 0, 5, 6, 1, 0, 0], 1).unwrap();
        assert!(!out.allowed);
        assert_eq!((out.now_us, out.admitted), (7, 0));
        let d = out.decisions[0];
        assert_eq!((d.limit, d.reset, d.retry_after), (10, 5_000, 6_000));
        assert_eq!(d.denial, Some(Denial::OverLimit));
        let out = parse_reply(&[1, 7, 1, 0, 1, 10, 0, 300, 0, 0, 200, 0], 1).unwrap();
        let d = out.decisions[0];
        assert_eq!((d.allowed, d.delay, d.denial), (true, 200_000, None));
        let out = parse_reply(&[0, 7, 0, 0, 0, 10, 0, 5, 1_200, 3, 0, 0], 1).unwrap();
        assert_eq!(out.decisions[0].denial, Some(Denial::DelayTooLong));
        // A batch: two of three admitted, with their waits.
        let out = parse_reply(&[0, 7, 2, 2, 0, 10, 0, 5, 6, 3, 0, 0, 0, 100], 1).unwrap();
        assert_eq!((out.admitted, &out.delays[..]), (2, &[0, 100_000][..]));
        // Delays that are not one per admitted request, or missing.
        assert!(parse_reply(&[0, 7, 2, 1, 0, 10, 0, 5, 6, 3, 0, 0, 0], 1).is_err());
        assert!(parse_reply(&[0, 7, 2, 2, 0, 10, 0, 5, 6, 3, 0, 0, 0], 1).is_err());
        // A lease: 4 units granted on the second limit.
        let reply = [
            1, 7, 1, 0, 1, 10, 9, 100, 0, 0, 0, 0, 1, 10, 5, 500, 0, 0, 0, 4,
        ];
        let out = parse_reply(&reply, 2).unwrap();
        assert_eq!(out.leased, [0, 4]);
        assert_eq!(out.decisions[1].remaining, 5);
    }

    #[test]
    fn the_library_is_named_after_its_code() {
        let p = Packaged::new();
        assert!(p.function.starts_with("sluice_"));
        assert!(p
            .library
            .starts_with(&format!("#!lua name={}\n", p.function)));
        assert_eq!(Packaged::new().function, p.function);
    }
}
