//! `--store`: which store to use, read from its URL.

use super::redis;
use std::fmt;

/// Which store to use, as given by `--store`.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// `memory`: the embedded store.
    Memory,
    /// `redis://[user:password@]host:port[/db]` (or `rediss://` for TLS):
    /// one Redis server.
    Redis(String),
    /// `redis-cluster://[user:password@]host:port,host:port` (or
    /// `rediss-cluster://` for TLS): a Redis Cluster, by seed nodes, each
    /// held as `redis[s]://[user:password@]host:port`.
    RedisCluster(Vec<String>),
    /// `redis+sentinel://[user:password@]host:port,host:port/master-name[/db]`
    /// (or `rediss+sentinel://`): the primary that Redis Sentinel names.
    RedisSentinel(redis::SentinelTarget),
}

/// `url` with the password of its user information (if any) replaced by
/// `***`, for logs.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let (head, rest) = url.split_at(scheme_end);
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let user = &rest[..at];
    match user.find(':') {
        Some(colon) => format!("{head}{}:***{}", &user[..colon], &rest[at..]),
        None => url.to_string(),
    }
}

impl fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Redis(url) => f.write_str(&redact(url)),
            StoreSpec::RedisCluster(nodes) => {
                let nodes: Vec<String> = nodes.iter().map(|n| redact(n)).collect();
                write!(f, "redis cluster {}", nodes.join(","))
            }
            StoreSpec::RedisSentinel(t) => write!(f, "{t}"),
        }
    }
}

/// Splits `user:password@rest` into the user information and the rest.
fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    }
}

/// `host:port` pairs separated by commas.
fn host_ports(list: &str, what: &str) -> Result<Vec<(String, u16)>, String> {
    let mut out = Vec::new();
    for node in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let (host, port) = node
            .rsplit_once(':')
            .ok_or_else(|| format!("{what}: expected host:port, got {node:?}"))?;
        let port = port
            .parse::<u16>()
            .map_err(|_| format!("{what}: bad port in {node:?}"))?;
        out.push((host.trim_matches(['[', ']']).to_string(), port));
    }
    if out.is_empty() {
        return Err(format!("{what} needs at least one host:port"));
    }
    Ok(out)
}

/// Percent-decodes user information (`%40` for `@`, and so on).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: Option<&u8>| b.and_then(|&b| (b as char).to_digit(16));
        match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
            (b'%', Some(h), Some(l)) => {
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl std::str::FromStr for StoreSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "memory" {
            Ok(StoreSpec::Memory)
        } else if s.starts_with("redis://") || s.starts_with("rediss://") {
            Ok(StoreSpec::Redis(s.to_string()))
        } else if let Some((scheme, rest)) = s
            .strip_prefix("redis-cluster://")
            .map(|r| ("redis", r))
            .or_else(|| s.strip_prefix("rediss-cluster://").map(|r| ("rediss", r)))
        {
            cluster_spec(scheme, rest)
        } else if let Some((tls, rest)) = s
            .strip_prefix("redis+sentinel://")
            .map(|r| (false, r))
            .or_else(|| s.strip_prefix("rediss+sentinel://").map(|r| (true, r)))
        {
            sentinel_spec(tls, rest)
        } else {
            Err(format!(
                "unknown store {:?} (expected memory, redis[s]://host:port, \
                 redis[s]-cluster://host:port,host:port or \
                 redis[s]+sentinel://host:port,host:port/master-name)",
                redact(s)
            ))
        }
    }
}

/// `redis[s]-cluster://[userinfo@]host:port,...`: one node URL per host.
fn cluster_spec(scheme: &str, rest: &str) -> Result<StoreSpec, String> {
    let (userinfo, hosts) = split_userinfo(rest);
    let prefix = match userinfo {
        Some(u) => format!("{scheme}://{u}@"),
        None => format!("{scheme}://"),
    };
    let nodes = host_ports(hosts.trim_end_matches('/'), &format!("{scheme}-cluster://"))?
        .into_iter()
        .map(|(h, p)| {
            if h.contains(':') {
                format!("{prefix}[{h}]:{p}")
            } else {
                format!("{prefix}{h}:{p}")
            }
        })
        .collect();
    Ok(StoreSpec::RedisCluster(nodes))
}

/// `redis[s]+sentinel://[userinfo@]host:port,.../master-name[/db]`.
fn sentinel_spec(tls: bool, rest: &str) -> Result<StoreSpec, String> {
    let what = if tls {
        "rediss+sentinel://"
    } else {
        "redis+sentinel://"
    };
    let no_master = || format!("{what}host:port,.../master-name: the master name is missing");
    let (userinfo, rest) = split_userinfo(rest);
    let (hosts, path) = rest.split_once('/').ok_or_else(no_master)?;
    let sentinels = host_ports(hosts, what)?;
    let mut parts = path.split('/').filter(|p| !p.is_empty());
    let master = parts.next().ok_or_else(no_master)?.to_string();
    let db = match parts.next() {
        Some(db) => db
            .parse::<i64>()
            .map_err(|_| format!("{what}: bad database number {db:?}"))?,
        None => 0,
    };
    let (username, password) = match userinfo {
        None => (None, None),
        Some(u) => match u.split_once(':') {
            Some((user, pass)) => (
                Some(percent_decode(user)).filter(|u| !u.is_empty()),
                Some(percent_decode(pass)),
            ),
            None => (Some(percent_decode(u)).filter(|u| !u.is_empty()), None),
        },
    };
    Ok(StoreSpec::RedisSentinel(redis::SentinelTarget {
        sentinels,
        master,
        tls,
        username,
        password,
        db,
    }))
}

impl StoreSpec {
    /// Where to connect for a Redis spec; `None` for `memory`.
    pub fn redis_target(&self) -> Option<redis::Target> {
        match self {
            StoreSpec::Memory => None,
            StoreSpec::Redis(url) => Some(redis::Target::Single(url.clone())),
            StoreSpec::RedisCluster(nodes) => Some(redis::Target::Cluster(nodes.clone())),
            StoreSpec::RedisSentinel(t) => Some(redis::Target::Sentinel(t.clone())),
        }
    }

    /// The kind of store, as `/metrics` reports it: `memory`, `redis`,
    /// `redis_cluster` or `redis_sentinel`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreSpec::Memory => "memory",
            StoreSpec::Redis(_) => "redis",
            StoreSpec::RedisCluster(_) => "redis_cluster",
            StoreSpec::RedisSentinel(_) => "redis_sentinel",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_specs() {
        assert_eq!("memory".parse::<StoreSpec>(), Ok(StoreSpec::Memory));
        assert_eq!(
            "redis://127.0.0.1:6379".parse::<StoreSpec>(),
            Ok(StoreSpec::Redis("redis://127.0.0.1:6379".into()))
        );
        assert_eq!(
            "redis-cluster://a:1, b:2".parse::<StoreSpec>(),
            Ok(StoreSpec::RedisCluster(vec![
                "redis://a:1".into(),
                "redis://b:2".into()
            ]))
        );
        assert!("redis-cluster://".parse::<StoreSpec>().is_err());
        assert_eq!(
            "rediss-cluster://u:p%40ss@a:1,b:2".parse::<StoreSpec>(),
            Ok(StoreSpec::RedisCluster(vec![
                "rediss://u:p%40ss@a:1".into(),
                "rediss://u:p%40ss@b:2".into()
            ]))
        );
        let spec = "redis+sentinel://app:s%40cret@s1:26379,s2:26380/mymaster/2"
            .parse::<StoreSpec>()
            .unwrap();
        assert_eq!(
            spec,
            StoreSpec::RedisSentinel(redis::SentinelTarget {
                sentinels: vec![("s1".into(), 26379), ("s2".into(), 26380)],
                master: "mymaster".into(),
                tls: false,
                username: Some("app".into()),
                password: Some("s@cret".into()),
                db: 2,
            })
        );
        assert!(!format!("{spec} {spec:?}").contains("cret"));
        assert!("redis+sentinel://s1:26379".parse::<StoreSpec>().is_err());
        assert!("redis+sentinel://s1/m".parse::<StoreSpec>().is_err());
        assert_eq!(
            redact("rediss://default:hunter2@host:6380/0"),
            "rediss://default:***@host:6380/0"
        );
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert!(!format!("{:?}", "redis://u:pw@h:1".parse::<StoreSpec>()).contains("pw"));
        assert!("postgres://x".parse::<StoreSpec>().is_err());
    }
}
