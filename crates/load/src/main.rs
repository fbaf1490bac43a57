//! `sluice-load`: HTTP/1.1 load that accounts for every request.
//!
//! Sluice's flood, fault and soak checks need more than a request rate: how
//! many requests got which status, how many were never answered within a
//! deadline, the worst latency, and all of it over time. Each connection
//! sends one request at a time; header values can carry a fresh client
//! address per request (`{ip}`) to flood a limiter with new keys. The
//! report is one JSON object on stdout.

mod grpc;
mod stats;
mod template;

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::time::Instant;

use stats::{Outcome, Stats};
use template::Template;

/// Pause before reconnecting after a refused connection.
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);

#[derive(Parser, Debug)]
#[command(
    name = "sluice-load",
    version,
    about = "HTTP load that counts every answer, its status and latency"
)]
struct Args {
    /// Target URL (http://host:port/path); several: connections are spread over them in turn.
    #[arg(long = "url", required = true)]
    urls: Vec<String>,
    /// Keep-alive connections, each with one request in flight.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Stop after this many seconds (decimal).
    #[arg(long)]
    duration: Option<f64>,
    /// Stop after this many requests in all.
    #[arg(long)]
    requests: Option<u64>,
    /// Most requests per second in all (paced); none: as fast as answers come.
    #[arg(long)]
    rate: Option<f64>,
    /// Seconds a request may take; later, it counts as a timeout and its connection is replaced.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
    /// A request header, `Name: value`; `{ip}` in the value is a distinct IPv4 address per request, `{n}` the counter.
    #[arg(long = "header")]
    headers: Vec<String>,
    /// A request body, sent with POST (else GET, no body); `{ip}` and `{n}` as in header values.
    #[arg(long)]
    body: Option<String>,
    /// The counter runs modulo this (keys repeat after it).
    #[arg(long)]
    distinct: Option<u64>,
    /// The counter's first value.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Width of a timeline bucket, seconds.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Runtime threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// gRPC unary calls instead of HTTP/1.1: the request message (protobuf,
    /// in hex), sent over HTTP/2 (prior knowledge) to the URL's path
    /// (`/package.Service/Method`); an answer counts as 200 when its
    /// `grpc-status` is 0, else 500.
    #[arg(long)]
    grpc: Option<String>,
}

/// A target: where to connect, what to ask for, what to call the host.
#[derive(Debug, Clone)]
struct Target {
    addr: String,
    host: String,
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("--url {url}: only http:// is supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("--url {url}: no host"));
        }
        let addr = if authority.contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(Target {
            addr,
            host: authority.to_string(),
            path: path.to_string(),
        })
    }
}

/// What every connection shares.
struct Plan {
    targets: Vec<Target>,
    headers: Vec<(String, Template)>,
    body: Option<Template>,
    start: Instant,
    deadline: Option<Instant>,
    requests: Option<u64>,
    rate: Option<f64>,
    timeout: Duration,
    interval: Duration,
    distinct: Option<u64>,
    first: u64,
    /// The framed message of every gRPC call, if the run makes them.
    grpc: Option<Bytes>,
    /// Tickets handed out: request numbers, for the budget, the pacing and the counter.
    issued: AtomicU64,
}

impl Plan {
    /// The next request's number, or `None` when the run is over.
    fn ticket(&self) -> Option<u64> {
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        if self.requests.is_some_and(|max| n >= max)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
        {
            return None;
        }
        Some(n)
    }

    /// When ticket `n` may be sent under `--rate`.
    fn send_at(&self, n: u64) -> Option<Instant> {
        let rate = self.rate?;
        Some(self.start + Duration::from_secs_f64(n as f64 / rate))
    }

    fn counter(&self, n: u64) -> u64 {
        let k = self.first.wrapping_add(n);
        match self.distinct {
            Some(d) if d > 0 => self.first.wrapping_add(n % d),
            _ => k,
        }
    }

    fn build(&self, target: &Target, n: u64) -> Result<Request<Full<Bytes>>, hyper::http::Error> {
        if let Some(body) = &self.grpc {
            return Request::post(format!("http://{}{}", target.host, target.path))
                .header(hyper::header::CONTENT_TYPE, "application/grpc")
                .header(hyper::header::TE, "trailers")
                .body(Full::new(body.clone()));
        }
        let counter = self.counter(n);
        let builder = match self.body {
            Some(_) => Request::post(target.path.as_str()),
            None => Request::get(target.path.as_str()),
        };
        let mut req = builder.header(hyper::header::HOST, target.host.as_str());
        for (name, value) in &self.headers {
            req = req.header(name.as_str(), value.fill(counter));
        }
        let body = self
            .body
            .as_ref()
            .map(|b| b.fill(counter))
            .unwrap_or_default();
        req.body(Full::new(Bytes::from(body)))
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let plan = match plan_of(&args) {
        Ok(plan) => Arc::new(plan),
        Err(message) => {
            eprintln!("sluice-load: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice-load: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = runtime.block_on(run(plan.clone(), args.connections.max(1)));
    println!("{report}");
    ExitCode::SUCCESS
}

fn plan_of(args: &Args) -> Result<Plan, String> {
    if args.duration.is_none() && args.requests.is_none() {
        return Err("give --duration or --requests".into());
    }
    let positive = |v: f64, name: &str| {
        if v.is_finite() && v > 0.0 {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(format!("--{name} must be a positive number of seconds"))
        }
    };
    let targets = args
        .urls
        .iter()
        .map(|u| Target::parse(u))
        .collect::<Result<Vec<_>, _>>()?;
    let headers = args
        .headers
        .iter()
        .map(|h| match h.split_once(':') {
            Some((name, value)) if !name.trim().is_empty() => {
                Ok((name.trim().to_string(), Template::parse(value.trim())))
            }
            _ => Err(format!("--header {h:?}: expected `Name: value`")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            return Err("--rate must be positive".into());
        }
    }
    let start = Instant::now();
    Ok(Plan {
        targets,
        headers,
        body: args.body.as_deref().map(Template::parse),
        start,
        deadline: args
            .duration
            .map(|d| positive(d, "duration"))
            .transpose()?
            .map(|d| start + d),
        requests: args.requests,
        rate: args.rate,
        timeout: positive(args.timeout, "timeout")?,
        interval: positive(args.interval, "interval")?,
        distinct: args.distinct,
        first: args.first,
        grpc: args
            .grpc
            .as_deref()
            .map(|hex| grpc::from_hex(hex).and_then(|m| grpc::frame(&m)))
            .transpose()?,
        issued: AtomicU64::new(0),
    })
}

async fn run(plan: Arc<Plan>, connections: usize) -> serde_json::Value {
    let tasks: Vec<_> = (0..connections)
        .map(|i| {
            let plan = plan.clone();
            tokio::spawn(async move { connection(&plan, i).await })
        })
        .collect();
    let mut all = Stats::default();
    for task in tasks {
        if let Ok(stats) = task.await {
            all.merge(stats);
        }
    }
    all.report(plan.start.elapsed(), plan.interval)
}

/// One connection's loop: take a ticket, wait for its turn, send, record.
async fn connection(plan: &Plan, index: usize) -> Stats {
    let mut stats = Stats::default();
    let Some(target) = plan.targets.get(index % plan.targets.len().max(1)) else {
        return stats;
    };
    let mut sender: Option<Sender> = None;
    while let Some(n) = plan.ticket() {
        if let Some(at) = plan.send_at(n) {
            if plan.deadline.is_some_and(|d| at >= d) {
                break;
            }
            tokio::time::sleep_until(at).await;
        }
        // Connect until it works or the run ends; refusals are not requests.
        let mut live = loop {
            if let Some(s) = sender.take() {
                break Some(s);
            }
            match connect(&target.addr, plan.grpc.is_some()).await {
                Ok(s) => break Some(s),
                Err(()) => {
                    stats.connect_failed();
                    if plan
                        .deadline
                        .is_some_and(|d| Instant::now() + RECONNECT_PAUSE >= d)
                    {
                        break None;
                    }
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                }
            }
        };
        let Some(s) = live.as_mut() else { break };
        let Ok(request) = plan.build(target, n) else {
            break;
        };
        let began = Instant::now();
        let outcome = match tokio::time::timeout(plan.timeout, exchange(s, request)).await {
            Ok(Ok((status, keep))) => {
                if !keep {
                    live = None;
                }
                Outcome::Answered(status)
            }
            Ok(Err(())) => {
                live = None;
                Outcome::Io
            }
            Err(_) => {
                live = None;
                Outcome::Timeout
            }
        };
        let ended = Instant::now();
        stats.record(outcome, ended - began, ended - plan.start, plan.interval);
        sender = live;
    }
    stats
}

/// A connection's request half: HTTP/1.1, or HTTP/2 for gRPC.
enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

async fn connect(addr: &str, h2: bool) -> Result<Sender, ()> {
    let stream = TcpStream::connect(addr).await.map_err(|_| ())?;
    let _ = stream.set_nodelay(true);
    let io = TokioIo::new(stream);
    // The connection's I/O runs in a task; it ends when the sender is dropped.
    if h2 {
        let (sender, conn) = http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|_| ())?;
        tokio::spawn(conn);
        return Ok(Sender::H2(sender));
    }
    let (sender, conn) = http1::handshake(io).await.map_err(|_| ())?;
    tokio::spawn(conn);
    Ok(Sender::H1(sender))
}

/// One request and its whole answer: the status (of a gRPC call, see
/// [`grpc::status`]), and whether the connection stays open.
async fn exchange(sender: &mut Sender, request: Request<Full<Bytes>>) -> Result<(u16, bool), ()> {
    let response = match sender {
        Sender::H1(s) => {
            s.ready().await.map_err(|_| ())?;
            s.send_request(request).await.map_err(|_| ())?
        }
        Sender::H2(s) => {
            s.ready().await.map_err(|_| ())?;
            let response = s.send_request(request).await.map_err(|_| ())?;
            let (parts, body) = response.into_parts();
            let collected = body.collect().await.map_err(|_| ())?;
            let status = grpc::status(parts.status.as_u16(), &parts.headers, collected.trailers());
            return Ok((status, true));
        }
    };
    let status = response.status().as_u16();
    let close = response
        .headers()
        .get(hyper::header::CONNECTION)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    response.into_body().collect().await.map_err(|_| ())?;
    Ok((status, !close))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        let t = Target::parse("http://127.0.0.1:8080/a?b=1").unwrap();
        assert_eq!(
            (t.addr.as_str(), t.host.as_str(), t.path.as_str()),
            ("127.0.0.1:8080", "127.0.0.1:8080", "/a?b=1")
        );
        assert_eq!(Target::parse("http://h").unwrap().path, "/");
        assert!(Target::parse("https://h/").is_err());
        assert!(Target::parse("http:///x").is_err());
    }

    #[test]
    fn counter_wraps_at_distinct() {
        let args = Args::parse_from([
            "sluice-load",
            "--url",
            "http://h:1/",
            "--requests",
            "5",
            "--distinct",
            "3",
            "--first",
            "10",
        ]);
        let plan = plan_of(&args).unwrap();
        let seen: Vec<u64> = (0..5).map(|n| plan.counter(n)).collect();
        assert_eq!(seen, vec![10, 11, 12, 10, 11]);
    }

    #[test]
    fn budget_ends_the_run() {
        let args = Args::parse_from(["sluice-load", "--url", "http://h:1/", "--requests", "2"]);
        let plan = plan_of(&args).unwrap();
        assert_eq!(
            (plan.ticket(), plan.ticket(), plan.ticket()),
            (Some(0), Some(1), None)
        );
    }

    #[test]
    fn bad_arguments_are_refused() {
        for bad in [
            vec!["sluice-load", "--url", "http://h:1/"],
            vec!["sluice-load", "--url", "http://h:1/", "--duration", "0"],
            vec![
                "sluice-load",
                "--url",
                "http://h:1/",
                "--requests",
                "1",
                "--header",
                "novalue",
            ],
            vec![
                "sluice-load",
                "--url",
                "http://h:1/",
                "--requests",
                "1",
                "--rate=-1",
            ],
        ] {
            assert!(plan_of(&Args::parse_from(bad)).is_err());
        }
    }
}
