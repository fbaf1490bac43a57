//! Sluice: rate limiting for Envoy, as a proxy-wasm HTTP filter.
//!
//! Every request is checked before routing against the rules of the filter's
//! configuration. *Local* limits keep their state in Envoy shared data, shared
//! by all worker threads and updated with compare-and-swap, so that workers
//! together never admit more than the limit. *Global* limits are decided by a
//! `sluice-limiter` cluster through one HTTP call-out per request.
//!
//! # Configuration
//!
//! The plugin configuration is JSON. Unknown fields are errors. Durations are
//! strings: `"250ms"`, `"1s"`, `"1m"`, `"1h"`, `"1d"`.
//!
//! ```json
//! {
//!   "domain": "demo",
//!   "headers": "ietf",
//!   "client_ip": { "xff_trusted_hops": 0, "ipv4_prefix": 32, "ipv6_prefix": 64 },
//!   "limiter": { "cluster": "sluice_limiter", "authority": "sluice-limiter",
//!                "timeout": "50ms", "failure_mode": "allow" },
//!   "local_max_keys": 100000,
//!   "response": { "status": 429, "body": "rate limited\n",
//!                 "headers": { "content-type": "text/plain" } },
//!   "rules": [{
//!     "name": "per-ip",
//!     "match": { "path_prefix": "/api/", "methods": ["GET", "POST"],
//!                "headers": [{ "name": "x-tier", "exact": "free" }] },
//!     "key": ["client_ip"],
//!     "limits": [
//!       { "algorithm": "gcra", "requests": 100, "window": "1m", "burst": 20 },
//!       { "algorithm": "sliding_window", "requests": 1000, "window": "1h", "scope": "global" }
//!     ],
//!     "overrides": [{ "key": "203.0.113.7", "requests": 1000 }],
//!     "mode": "enforce"
//!   }]
//! }
//! ```
//!
//! * `domain` (required, 1 to 128 bytes of `[A-Za-z0-9_.-]`, as the limiter
//!   accepts): namespace of all counters, locally and in the limiter. Two
//!   filters with the same domain on one `vm_id` share counters.
//! * `headers`: `none`, `legacy`, `ietf` (default) or `both`; see [`headers`].
//!   A denial always carries `retry-after`.
//! * `client_ip`: `xff_trusted_hops` (default 0: the downstream peer address;
//!   `N > 0`: the `N`th `x-forwarded-for` entry from the right as the trusted
//!   proxies sent it — the entry Envoy appends itself is not counted — falling
//!   back to the peer address when the header is shorter or the entry is not
//!   an address), `ipv4_prefix` (default 32, 0..=32) and `ipv6_prefix` (default
//!   64, 0..=128) to treat a network as one client. See [`client_ip`] for the
//!   key text (`203.0.113.7`, `203.0.113.0/24`, `2001:db8:1:2::/64`).
//!   **Set `use_remote_address: true` on Envoy's HTTP connection manager**:
//!   otherwise Envoy itself replaces the downstream address with the last
//!   `x-forwarded-for` entry, which the client chooses (Sluice logs a warning
//!   once when it sees this with zero trusted hops).
//! * `limiter`: `cluster` and `authority` of the limiter, `timeout` (default
//!   `50ms`) and `failure_mode` (`allow`, the default, or `deny`) applied on
//!   error, timeout, non-200 status or malformed answer. Required only when
//!   some limit is global.
//! * `local_max_keys` (default 100000, 1..=10000000): slots per local limit.
//!   Keys are hashed into slots with a secret per-domain seed; clients that
//!   share a slot share a bucket, so nobody is admitted beyond their limit,
//!   some may be limited early, and memory stays bounded (see [`slots`]).
//!   Changing it moves keys to other slots, which resets their counters.
//! * `response`: `status` (default 429, 400..=599), `body` (default
//!   `"rate limited\n"`) and extra `headers` of a denial.
//! * `rules`: may be empty. Every matching rule applies; all their limits must
//!   pass.
//!
//! A rule has:
//! * `name` (required, unique, 1 to 128 bytes of `[A-Za-z0-9_.-]`): used in
//!   metric names, headers and storage keys. Renaming a rule starts its
//!   counters afresh.
//! * `match` (optional; absent matches every request): `path_prefix` or exact
//!   `path` (compared without the query string), `methods`, and `headers`
//!   conditions `{name, exact}`, `{name, present: true}` or
//!   `{name, present: false}` (the header is absent). All given conditions must hold.
//! * `key` (non-empty): parts `client_ip`, `header:NAME`, `path`, `method`,
//!   `authority`, `query:NAME` (raw value; `?a` gives an empty value),
//!   `const:TEXT`, joined with `|`. For global limits the limiter key is
//!   `<rule>/<limit index>/<key>`, with the key replaced by a hash when it
//!   would exceed the limiter's 512 bytes. **A request that lacks a part (header or
//!   query parameter absent, no client address) is not counted by the rule**
//!   and increments `sluice.<rule>.skipped`.
//! * `limits` (non-empty): `algorithm` (`token_bucket`, `leaky_bucket`,
//!   `gcra`, `fixed_window`, `sliding_log`, `sliding_window`), `requests` per
//!   `window` (both at least 1 / 1ms), `burst` (default `requests`: a fresh key
//!   admits exactly `requests` at once), `scope` (`local`, default, or
//!   `global`), `precision` (`sliding_window` only: sub-windows per window).
//! * `overrides`: `{key, requests, window?, burst?, limit?}` replaces, for the
//!   request whose key text equals `key`, limit number `limit` (default: every
//!   limit of the rule) with `requests` per `window` (default: the limit's
//!   window) and `burst` (default: the override's `requests`). An override key
//!   has its own dedicated counter, never shared through a slot.
//! * `mode`: `enforce` (default) or `shadow`: decide and count, never deny.
//!   Shadow rules do not appear in the rate-limit headers; a response whose
//!   request a shadow rule would have denied gets
//!   `x-sluice-shadow-denied: <rule>[,<rule>...]`.
//!
//! # Decisions
//!
//! Limits are decided in configuration order. When one denies, the limits
//! already consumed by the request are refunded, so a denied request consumes
//! nothing. Local limits are decided first; a request denied locally makes no
//! call-out. The global limits of all matching enforcing rules go to the
//! limiter in one call, decided together; those of shadow rules go in a
//! second, parallel call, so that a shadow denial never keeps the enforcing
//! limits from being counted. A failed shadow call is ignored.
//!
//! A denial answers with `response.status`, the configured headers,
//! `retry-after` (seconds, rounded up, at least 1), the rate-limit headers of
//! the denying limit and `x-sluice-rule: <rule>`. An admitted request's
//! response gets the rate-limit headers of the enforcing limit closest to
//! exhaustion (none when no enforcing rule counted it). When the limiter
//! denies a key with a retry time, Sluice remembers it and denies that key
//! locally until then, without calling out. Heavy contention on one key
//! (64 failed compare-and-swap attempts) denies, with `retry-after: 1`.
//!
//! Configuration errors are logged at error level, naming the field
//! (`sluice: invalid configuration: rules[0].limits[1].window: must be at
//! least 1ms`), counted in `sluice.config_errors`, and make Envoy reject
//! the configuration. A new configuration on the same `vm_id` keeps the
//! counters of rules and limits with the same name, position, algorithm and
//! window (see [`layout`]).
//!
//! # Cost per request
//!
//! Host calls, not wasm code, dominate the filter's cost in Envoy, so the
//! request path makes as few as its decisions need. An admitted request on
//! the local path reads the clock once (only when some rule applies), each
//! request header (of up to eight names) and the `source.address` property
//! at most once and only when a matching rule's conditions or key use it,
//! reads and writes shared data once per local limit (compare-and-swap: more
//! only under contention), and adds one response header per rate-limit header
//! of the `headers` mode.
//! Counting makes no call per request (see below).
//!
//! # Metrics
//!
//! Counters, as Envoy lists them in `/stats`: per rule
//! `wasmcustom.sluice.<rule>.allowed`, `.denied`, `.shadow_denied` and
//! `.skipped`; filter-wide `wasmcustom.sluice.cas_exhausted`,
//! `wasmcustom.sluice.config_errors`, `wasmcustom.sluice.failure_mode_allowed`
//! and `wasmcustom.sluice.limiter_errors`. See [`metrics`].
//!
//! Each worker counts in its own VM and hands the counts to Envoy every
//! 500 ms (and after every 1024 events), so that a request costs no metric
//! host call: **`/stats` lags the requests by up to half a second.**

pub mod client_ip;
pub mod config;
pub mod decimal;
pub mod engine;
pub mod global;
pub mod headers;
pub mod key;
pub mod layout;
pub mod local;
pub mod matcher;
pub mod metrics;
pub mod response;
pub mod slots;

#[cfg(target_arch = "wasm32")]
mod host;
