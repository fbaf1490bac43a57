//! What the native benches share: an allocation counter and in-memory
//! stand-ins for Envoy's shared data and metrics.
#![allow(dead_code, clippy::unwrap_used)]

use sluice_core::Nanos;
use sluice_filter::config::{self, Plan};
use sluice_filter::local::{SetError, SharedStore};
use sluice_filter::metrics::{Batch, GlobalEvent, MetricSink, RuleEvent};
use sluice_filter::slots::SlotHasher;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts allocations, to say how many a request makes.
pub struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

/// What `f` returns and how many allocations it made.
pub fn allocations<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let out = f();
    (out, ALLOCATIONS.load(Ordering::Relaxed) - before)
}

/// Shared data in memory (values are copied out, as from Envoy).
#[derive(Default)]
pub struct Store(RefCell<HashMap<String, Vec<u8>>>);

impl SharedStore for Store {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        match self.0.borrow().get(key) {
            Some(v) => (Some(v.clone()), Some(1)),
            None => (None, None),
        }
    }

    fn set(&self, key: &str, value: &[u8], _cas: Option<u32>) -> Result<(), SetError> {
        self.0.borrow_mut().insert(key.to_string(), value.to_vec());
        Ok(())
    }
}

/// Counts batched as the host batches them.
pub struct Metrics(pub Batch);

impl MetricSink for Metrics {
    fn rule(&self, rule: usize, event: RuleEvent) {
        if self.0.add(Batch::rule_position(rule, event)) {
            self.0.drain(|_, _| {});
        }
    }

    fn rule_n(&self, rule: usize, event: RuleEvent, n: u64) {
        self.0.add_n(Batch::rule_position(rule, event), n);
    }

    fn global(&self, event: GlobalEvent) {
        self.0.add(Batch::global_position(event));
    }

    fn delayed(&self, _rule: usize, _delay: Nanos) {}
}

/// A plan and the stand-ins its requests are decided with.
pub struct World {
    pub plan: Plan,
    pub hasher: SlotHasher,
    pub store: Store,
    pub metrics: Metrics,
}

impl World {
    /// The plan of configuration `json`, with empty shared data.
    pub fn new(json: &str) -> World {
        let plan = config::parse(json.as_bytes()).unwrap();
        let metrics = Metrics(Batch::new(plan.rules.len()));
        World {
            plan,
            hasher: SlotHasher::from_seed(&SlotHasher::new_seed(7)).unwrap(),
            store: Store::default(),
            metrics,
        }
    }
}
