//! The host calls a request makes, counted: what each path costs in Envoy
//! beyond the wasm code (every call crosses into the host, and a read
//! copies its value back into the VM).

use super::*;
use crate::key::RequestView;
use crate::local::{SetError, SharedStore};
use std::cell::Cell;

/// A store that counts its calls and the bytes they move.
struct Counting<'a> {
    inner: &'a MemoryStore,
    calls: Cell<usize>,
    bytes: Cell<usize>,
}

impl SharedStore for Counting<'_> {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        let got = self.inner.get(key);
        self.calls.set(self.calls.get() + 1);
        let len = got.0.as_ref().map_or(0, Vec::len);
        self.bytes.set(self.bytes.get() + len);
        got
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SetError> {
        self.calls.set(self.calls.get() + 1);
        self.bytes.set(self.bytes.get() + value.len());
        self.inner.set(key, value, cas)
    }

    fn clock(&self) -> Option<Nanos> {
        self.calls.set(self.calls.get() + 1);
        self.inner.clock()
    }
}

/// A request view that counts its reads.
struct Viewed<'a> {
    inner: &'a FakeRequest,
    reads: Cell<usize>,
}

impl RequestView for Viewed<'_> {
    fn header(&self, name: &str) -> Option<String> {
        self.reads.set(self.reads.get() + 1);
        self.inner.header(name)
    }

    fn source_address(&self) -> Option<String> {
        self.reads.set(self.reads.get() + 1);
        self.inner.source_address()
    }

    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        self.reads.set(self.reads.get() + 1);
        self.inner.property(path)
    }
}

/// Host calls: (shared data and clock calls, the request's clock included;
/// bytes they move; request reads) of one request of `w` at `now`, which
/// must be allowed without a call.
fn counted(w: &World, now: Nanos) -> (usize, usize, usize) {
    let store = Counting {
        inner: &w.store,
        calls: Cell::new(0),
        bytes: Cell::new(0),
    };
    let req = FakeRequest::get("/").with("x-forwarded-for", "198.51.100.1");
    let view = Viewed {
        inner: &req,
        reads: Cell::new(0),
    };
    let verdict = evaluate(
        &w.plan,
        &w.hasher,
        HOLDER,
        &view,
        &store,
        &w.metrics,
        || {
            store.calls.set(store.calls.get() + 1);
            now
        },
    );
    assert!(allowed(&verdict), "{verdict:?}");
    (store.calls.get(), store.bytes.get(), view.reads.get())
}

const LOCAL: &str = r#"{"name":"ip","key":["client_ip"],"limits":[
    {"algorithm":"gcra","requests":1000,"window":"10ms"}]}"#;

const LEASED: &str = r#"{"name":"ip","key":["client_ip"],"limits":[
    {"algorithm":"gcra","requests":1000,"window":"10ms","scope":"global",
     "sync":{"mode":"lease","max_share":"10%"}}]}"#;

fn with_xff(rule: &str) -> String {
    format!(
        r#"{{"domain":"t","client_ip":{{"xff_trusted_hops":1}},"limiter":{{"cluster":"c","authority":"a","failure_mode":"allow"}},"rules":[{rule}]}}"#
    )
}

#[test]
fn a_request_spent_from_its_lease_calls_the_host_no_more_than_a_local_one() {
    let local = World::new(&with_xff(LOCAL));
    counted(&local, NOW);
    let local_calls = counted(&local, NOW + MILLISECOND);

    let leased = World::new(&with_xff(LEASED));
    let grant = r#"{"allowed":true,"limits":[{"allowed":true,"limit":1000,"remaining":900,"reset_ms":10,"retry_after_ms":0,"leased":100}]}"#;
    let mut ask = pending(leased.eval_at(
        &FakeRequest::get("/").with("x-forwarded-for", "198.51.100.1"),
        NOW,
    ));
    ask.record(0, Some(grant.as_bytes()));
    assert!(allowed(&finish(
        &leased.plan,
        ask,
        &leased.store,
        &leased.metrics
    )));
    let leased_calls = counted(&leased, NOW + MILLISECOND);

    // Local: the key table's bucket read, the one clock read after it, its
    // write; leased: the clock, the lease's read and write. Both read the
    // same request parts.
    assert_eq!(local_calls.0, 3, "local {local_calls:?}");
    assert_eq!(leased_calls.0, 3, "leased {leased_calls:?}");
    assert_eq!(local_calls.2, leased_calls.2);
    // A lease value is 73 bytes each way; a bucket of one entry less.
    assert_eq!(leased_calls.1, 2 * 73);
    println!(
        "host calls, bytes moved, request reads: local {local_calls:?}, leased {leased_calls:?}"
    );
}
