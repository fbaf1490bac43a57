//! Descriptors from a directory: several domains, a domain spanning files
//! (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`, with its own test files
//! `test/config/merge_domain_key1.yaml`, `merge_domain_key2.yaml`,
//! `duplicate_domain.yaml`), and a directory mounted as Kubernetes mounts a
//! ConfigMap, updated by swapping its `..data` symlink.
#![cfg(test)]

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use sluice_limiter::clock::{Clock, ManualClock};
use sluice_limiter::metrics::Metrics;
use sluice_limiter::rls::config::{Descriptors, SameDomain, Snapshot};
use sluice_limiter::rls::reload::ConfigCell;
use sluice_limiter::rls::service::RlsService;
use sluice_limiter::store::redis::Target;
use sluice_limiter::store::Store;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use support::rls::{ask, descriptor, memory, request, T0};

const MERGE_KEY1: &str = "# Basic configuration which will be merged with `merge_domain2.yaml`
domain: test-domain
descriptors:
  # Top level key/value which is not specified in `merge_domain2.yaml`
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 10
";

const MERGE_KEY2: &str = "# Basic configuration which will be merged with `merge_domain.yaml`
domain: test-domain
descriptors:
  # Top level key/value which is not specified in `merge_domain.yaml`
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

const DUPLICATE_DOMAIN: &str = "domain: test-domain\ndescriptors:\n";

/// A fresh directory of its own for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-confdir-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn snapshot(files: &[(&str, &str)]) -> Snapshot {
    Snapshot {
        files: files
            .iter()
            .map(|(name, text)| (PathBuf::from(name), text.to_string()))
            .collect(),
    }
}

fn load(files: &[(&str, &str)], same: SameDomain) -> Result<Descriptors, String> {
    Descriptors::from_snapshot(&snapshot(files), same).map_err(|e| e.to_string())
}

#[test]
fn the_peers_merge_and_duplicate_cases() {
    let both = [
        ("merge_domain_key1.yaml", MERGE_KEY1),
        ("merge_domain_key2.yaml", MERGE_KEY2),
    ];
    let e = load(&both, SameDomain::Refuse).unwrap_err();
    assert_eq!(
        e,
        "merge_domain_key2.yaml: domain: duplicate domain \"test-domain\" (also in merge_domain_key1.yaml; merging needs --merge-domains)"
    );
    let d = load(&both, SameDomain::Merge).unwrap();
    let domain = &d.domains["test-domain"];
    let limit = |k: &str, v: &str| {
        let found = domain.lookup([(k, v)].into_iter()).unwrap();
        (found.node.path.clone(), found.rate_limit.requests_per_unit)
    };
    assert_eq!(limit("key1", "value1"), ("key1_value1".to_string(), 10));
    assert_eq!(limit("key2", "value2"), ("key2_value2".to_string(), 20));
    assert!(domain.lookup([("key1", "other")].into_iter()).is_none());

    // TestDuplicateKeyDomainMerge: the same file twice, merging.
    let twice = [
        ("merge_domain_key1.yaml", MERGE_KEY1),
        ("merge_domain_key1_copy.yaml", MERGE_KEY1),
    ];
    let e = load(&twice, SameDomain::Merge).unwrap_err();
    assert_eq!(
        e,
        "merge_domain_key1_copy.yaml: descriptors: duplicate descriptor composite key 'test-domain.key1_value1' (also in merge_domain_key1.yaml)"
    );

    // TestDuplicateDomain: refused unless merging.
    let dup = [
        ("basic_config.yaml", MERGE_KEY1),
        ("duplicate_domain.yaml", DUPLICATE_DOMAIN),
    ];
    let e = load(&dup, SameDomain::Refuse).unwrap_err();
    assert!(
        e.starts_with("duplicate_domain.yaml: domain: duplicate domain \"test-domain\""),
        "{e}"
    );
    let d = load(&dup, SameDomain::Merge).unwrap();
    assert_eq!(d.domains["test-domain"].root.each().len(), 1);
}

#[test]
fn merging_joins_keys_wildcards_and_nesting_and_refuses_each_duplicate() {
    let a = "domain: d\ndescriptors:\n  - key: k\n    value: a*\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: n\n    descriptors:\n      - key: x\n        rate_limit: {unit: second, requests_per_unit: 2}\n";
    let b = "domain: d\ndescriptors:\n  - key: k\n    value: b*\n    rate_limit: {unit: second, requests_per_unit: 3}\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4}\n";
    let d = load(&[("a.yaml", a), ("b.yaml", b)], SameDomain::Merge).unwrap();
    let rpu = |entries: &[(&str, &str)]| {
        d.domains["d"]
            .lookup(entries.iter().copied())
            .map(|f| f.rate_limit.requests_per_unit)
    };
    assert_eq!(rpu(&[("k", "ax")]), Some(1));
    assert_eq!(rpu(&[("k", "bx")]), Some(3));
    assert_eq!(rpu(&[("k", "cx")]), Some(4));
    assert_eq!(rpu(&[("n", "v"), ("x", "1")]), Some(2));
    let same_pattern = "domain: d\ndescriptors:\n  - key: k\n    value: a*\n";
    let e = load(
        &[("a.yaml", a), ("c.yaml", same_pattern)],
        SameDomain::Merge,
    )
    .unwrap_err();
    assert!(e.contains("composite key 'd.k_a*'"), "{e}");
    let same_key = "domain: d\ndescriptors:\n  - key: n\n";
    let e = load(&[("a.yaml", a), ("c.yaml", same_key)], SameDomain::Merge).unwrap_err();
    assert!(e.contains("composite key 'd.n'"), "{e}");
}

/// (code, requests_per_unit, limit_remaining) of one call.
async fn answer<S: Store>(svc: &RlsService<S>, domain: &str, k: &str, v: &str) -> (Code, u32, u32) {
    let r = ask(svc, &request(domain, vec![descriptor(&[(k, v)])])).await;
    let s = &r.statuses[0];
    let limit = s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
    (Code::try_from(s.code).unwrap(), limit, s.limit_remaining)
}

/// A directory of two domains, one of them spanning two files.
fn three_files(dir: &Path) {
    std::fs::write(dir.join("merge_domain_key1.yaml"), MERGE_KEY1).unwrap();
    std::fs::write(dir.join("merge_domain_key2.yaml"), MERGE_KEY2).unwrap();
    std::fs::write(
        dir.join("other.yml"),
        "domain: other\ndescriptors:\n  - key: key1\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), "domain: ignored\n").unwrap();
}

async fn serves_the_merged_directory<S: Store>(store: S, clock: &Arc<ManualClock>, name: &str) {
    let dir = scratch(name);
    three_files(&dir);
    assert!(ConfigCell::load(&dir).is_err(), "refused without merging");
    let cell = Arc::new(ConfigCell::load_as(&dir, SameDomain::Merge).unwrap());
    assert_eq!(cell.current().domains.len(), 2);
    let clock: Arc<dyn Clock> = Arc::clone(clock) as Arc<dyn Clock>;
    let svc = RlsService::new(store, cell, Arc::new(Metrics::default()), clock);
    assert_eq!(
        answer(&svc, "test-domain", "key1", "value1").await,
        (Code::Ok, 10, 9)
    );
    assert_eq!(
        answer(&svc, "test-domain", "key2", "value2").await,
        (Code::Ok, 20, 19)
    );
    assert_eq!(answer(&svc, "other", "key1", "x").await, (Code::Ok, 2, 1));
    assert_eq!(answer(&svc, "other", "key1", "x").await, (Code::Ok, 2, 0));
    assert_eq!(answer(&svc, "other", "key1", "x").await.0, Code::OverLimit);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn several_domains_and_a_merged_one_answer_on_memory() {
    let clock = Arc::new(ManualClock::new(T0));
    serves_the_merged_directory(memory(&clock), &clock, "memory").await;
}

#[tokio::test]
async fn several_domains_and_a_merged_one_answer_on_redis() {
    let Some(server) = support::RedisServer::start(&[]) else {
        return;
    };
    let store = support::connected(Target::Single(server.url()), Duration::from_secs(2)).await;
    let clock = Arc::new(ManualClock::new(T0));
    serves_the_merged_directory(store, &clock, "redis").await;
}

/// Writes one version of a ConfigMap into `dir` as the kubelet does: the
/// files in a new `..<timestamp>` directory, a `..data_tmp` symlink to it
/// renamed over `..data`, a visible symlink `name -> ..data/name` per file,
/// then the previous version removed.
fn kubelet_write(dir: &Path, version: &str, files: &[(&str, &str)]) {
    let stamp = format!("..2026_11_28_20_00_00.{version}");
    std::fs::create_dir(dir.join(&stamp)).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(&stamp).join(name), text).unwrap();
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    std::os::unix::fs::symlink(&stamp, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    for (name, _) in files {
        let visible = dir.join(name);
        if std::fs::symlink_metadata(&visible).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), &visible).unwrap();
        }
    }
    if let Some(old) = old {
        std::fs::remove_dir_all(dir.join(old)).unwrap();
    }
}

fn limit(cell: &ConfigCell) -> u32 {
    cell.current().domains["edge"]
        .lookup([("user", "u")].into_iter())
        .map_or(0, |f| f.rate_limit.requests_per_unit)
}

fn edge(requests: u32) -> String {
    format!("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {{unit: minute, requests_per_unit: {requests}}}\n")
}

#[test]
fn a_configmap_swap_is_seen_by_content_and_a_broken_one_refused() {
    let dir = scratch("configmap");
    kubelet_write(&dir, "1", &[("edge.yaml", &edge(100))]);
    let metrics = Metrics::default();
    let cell = ConfigCell::load(&dir).unwrap();
    cell.record_first_load(&metrics);
    assert_eq!(limit(&cell), 100);
    let first_hash = metrics.rls_config_hash();
    assert_ne!(first_hash, 0);
    assert!(cell.reload_if_changed(&metrics).is_none(), "unchanged");
    let mtime = std::fs::metadata(dir.join("edge.yaml"))
        .unwrap()
        .modified()
        .unwrap();

    // Same length, same modification time: only the content tells.
    kubelet_write(&dir, "2", &[("edge.yaml", &edge(200))]);
    let file = std::fs::File::options()
        .write(true)
        .open(dir.join("edge.yaml"))
        .unwrap();
    file.set_modified(mtime).unwrap();
    assert_eq!(
        std::fs::metadata(dir.join("edge.yaml"))
            .unwrap()
            .modified()
            .unwrap(),
        mtime
    );
    // The last version, unless the loop loaded it already.
    if let Some(r) = cell.reload_if_changed(&metrics) {
        assert!(r.is_ok(), "{r:?}");
    }
    assert_eq!(limit(&cell), 200);
    let second_hash = metrics.rls_config_hash();
    assert_ne!(second_hash, first_hash);
    assert_eq!(metrics.rls_reload_count(true), 2);

    // A broken version: refused once, counted, the last good one answers.
    kubelet_write(
        &dir,
        "3",
        &[("edge.yaml", "domain: edge\ndescriptors: [{key: }]\n")],
    );
    let e = cell.reload_if_changed(&metrics).unwrap().unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("{}", dir.join("edge.yaml").display())),
        "{e}"
    );
    assert!(cell.reload_if_changed(&metrics).is_none(), "refused once");
    assert_eq!(metrics.rls_reload_count(false), 1);
    assert_eq!(limit(&cell), 200);
    assert_eq!(metrics.rls_config_hash(), second_hash);

    // A version adding a file: its visible symlink appears, both load.
    let other = "domain: other\ndescriptors:\n  - key: k\n";
    kubelet_write(
        &dir,
        "4",
        &[("edge.yaml", &edge(300)), ("other.yaml", other)],
    );
    // The last version, unless the loop loaded it already.
    if let Some(r) = cell.reload_if_changed(&metrics) {
        assert!(r.is_ok(), "{r:?}");
    }
    assert_eq!(limit(&cell), 300);
    let mut domains: Vec<_> = cell.current().domains.keys().cloned().collect();
    domains.sort();
    assert_eq!(
        domains,
        ["edge", "other"],
        "the ..-prefixed entries are no files of their own"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn requests_of(cell: &ConfigCell, domain: &str) -> u32 {
    cell.current().domains[domain]
        .lookup([("user", "u")].into_iter())
        .map_or(0, |f| f.rate_limit.requests_per_unit)
}

#[test]
fn swaps_while_polling_never_load_half_of_two_versions() {
    let dir = scratch("torn");
    let version = |v: u32| {
        [
            ("a.yaml", format!("domain: a\ndescriptors:\n  - key: user\n    rate_limit: {{unit: minute, requests_per_unit: {v}}}\n")),
            ("b.yaml", format!("domain: b\ndescriptors:\n  - key: user\n    rate_limit: {{unit: minute, requests_per_unit: {v}}}\n")),
        ]
    };
    let write = move |dir: &Path, v: u32| {
        let files = version(v);
        let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
        kubelet_write(dir, &v.to_string(), &files);
    };
    write(&dir, 1);
    let metrics = Metrics::default();
    let cell = ConfigCell::load(&dir).unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (dir, done) = (dir.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            for v in 2..=300 {
                write(&dir, v);
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let mut loads = 0;
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        if let Some(r) = cell.reload_if_changed(&metrics) {
            assert!(r.is_ok(), "{r:?}");
            loads += 1;
            assert_eq!(
                requests_of(&cell, "a"),
                requests_of(&cell, "b"),
                "one version"
            );
        }
    }
    writer.join().unwrap();
    assert!(loads >= 1, "polled while swapping");
    // The last version, unless the loop loaded it already.
    if let Some(r) = cell.reload_if_changed(&metrics) {
        assert!(r.is_ok(), "{r:?}");
    }
    assert_eq!(
        (requests_of(&cell, "a"), requests_of(&cell, "b")),
        (300, 300)
    );
    assert_eq!(
        metrics.rls_reload_count(false),
        0,
        "{loads} loads, none refused"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
