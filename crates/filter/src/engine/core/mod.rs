//! The engine's core: what every kind of limit shares and none of them
//! owns. The environment ([`env`]), the request's tally and its undo log of
//! plain data ([`tally`], [`undo`]), what it holds ([`held`]) and owes
//! ([`settle`], [`cost_reader`]), lease renewals ([`renewal`]), the calls to
//! the limiter ([`call`]), the walk over rules and the answer's handling
//! ([`walk`], [`finish`]), driven through the registry's [`walk::Steps`]
//! and [`follow::FollowUp`], and the verdict ([`verdict`]). No module here
//! names a kind: the kinds import the core, never the reverse. The
//! mechanics several kinds share over shared data are here too: local
//! state ([`local`]), global limits' items and over-limit cache
//! ([`global`], [`deny_cache`]), elastic borrowing ([`elastic`]), the
//! penalty box ([`block`]).

pub(crate) mod block;
pub(crate) mod call;
pub mod cost_reader;
pub(crate) mod deny_cache;
pub(crate) mod elastic;
pub(crate) mod env;
pub(crate) mod finish;
pub(crate) mod follow;
pub(crate) mod global;
pub(crate) mod held;
pub(crate) mod local;
pub(crate) mod pending;
pub(crate) mod renewal;
pub mod settle;
pub(crate) mod tally;
pub(crate) mod undo;
pub(crate) mod verdict;
pub(crate) mod walk;
