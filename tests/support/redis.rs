//! Real `redis-server` processes for the Redis store's tests: one server on a free loopback
//! port, or a three-master Redis Cluster, and the harness of the files that use them: without
//! `redis-server` on PATH their Redis tests are reported as ignored (the reason on stderr),
//! unless `TOLLGATE_REQUIRE_REDIS=1` (set by CI), which makes them run and fail.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A current-thread runtime for a test that starts its own server and blocks on it.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A runtime of two worker threads, for tests whose stores run tasks of their own (probes,
/// watches) while the test blocks its thread.
pub fn runtime_two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A store on `url` that answers an error when Redis does not (fail closed).
#[cfg(feature = "redis")]
pub async fn closed(url: &str) -> tollgate::store::RedisStore {
    tollgate::store::RedisStore::connect(url)
        .await
        .unwrap()
        .on_failure(tollgate::store::OnFailure::Closed)
}

/// A store on `url` that fails closed and reads the time from the limiter's clock (a
/// `ManualClock` in the tests) rather than Redis's.
#[cfg(feature = "redis")]
pub async fn closed_on_caller_clock(url: &str) -> tollgate::store::RedisStore {
    closed(url).await.with_caller_clock()
}

/// How long the Redis store keeps the key of a state fresh again in `fresh_in`, with
/// `remaining` of the `capacity` a fresh key has, for a quota whose states take at most `span`
/// ns to be fresh again after a request: in whole ms, 0 for a key deleted. As the scripts keep
/// it (`lifetime` in driver.lua): until fresh, rounded up, plus the share of the capacity used
/// of the span (in whole ms, rounded down), plus a whole span while no request passes.
pub fn kept_ms(fresh_in: Duration, remaining: u64, capacity: u64, span: u64) -> u64 {
    if fresh_in.is_zero() {
        return 0;
    }
    let ms = u64::try_from(fresh_in.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    if capacity == 0 {
        return ms;
    }
    let span = span.div_ceil(1_000_000);
    let used = capacity - remaining.min(capacity);
    let share = u64::try_from(u128::from(span) * u128::from(used) / u128::from(capacity))
        .unwrap_or(u64::MAX);
    let limited = if remaining == 0 { span } else { 0 };
    ms.saturating_add(share).saturating_add(limited)
}

/// Takes the TTL off every key that matches `pattern` (`*`: all of them), so that Redis,
/// whose clock runs while a `ManualClock` stands still, keeps them; and returns how many keys
/// Redis has expired since it started. A parity case that sees this count grow compares no
/// more: some state is gone that the memory store still has.
///
/// A key whose TTL ran out but which Redis has not reclaimed yet is counted too: `SCAN`
/// reclaims each expired key it meets, as any read does. (`KEYS` skips such a key without
/// reclaiming or counting it, so the next step's script would find it gone unnoticed.)
#[cfg(feature = "redis")]
pub async fn persist_all(conn: &mut redis::aio::MultiplexedConnection, pattern: &str) -> u64 {
    let script = redis::Script::new(
        "local cursor = '0' \
         repeat \
           local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000) \
           cursor = page[1] \
           for _, k in ipairs(page[2]) do redis.call('PERSIST', k) end \
         until cursor == '0' \
         return tonumber(string.match(redis.call('INFO', 'stats'), 'expired_keys:(%d+)'))",
    );
    script
        .arg(pattern)
        .invoke_async(conn)
        .await
        .expect("PERSIST and INFO")
}

/// Whether `redis-server` is on PATH and runs.
fn found() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether CI requires the Redis tests to run (`TOLLGATE_REQUIRE_REDIS=1`).
fn required() -> bool {
    std::env::var("TOLLGATE_REQUIRE_REDIS").is_ok_and(|v| v == "1")
}

/// Whether `redis-server` can be run. A test that needs it only runs when it can (the harness
/// below reports it as ignored otherwise), so a missing server here fails the test: it was
/// required by CI or asked for with `--ignored`.
pub fn available() -> bool {
    assert!(
        found(),
        "redis-server is not on PATH (apt-get install redis-server); this test needs it"
    );
    true
}

/// The test harness of the files with Redis tests (`harness = false`): each test is a
/// [`Trial`], and those that start `redis-server` are reported as *ignored*, with the reason
/// on stderr, when it is not on PATH, never as passed. With `TOLLGATE_REQUIRE_REDIS=1` (CI)
/// they run, and fail, instead.
pub fn harness(trials: Vec<Trial>) -> std::process::ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    libtest_mimic::run(&args, trials).exit_code()
}

/// The trials `make` lists, named `module::test` as libtest names the tests of a module: for
/// a binary whose `main.rs` gathers the trials of its modules.
pub fn module(name: &'static str, make: fn() -> Vec<Trial>) -> Vec<Trial> {
    in_group(name, false, make)
}

/// [`module`], each trial running with no other trial of the binary beside it (what
/// `--test-threads=1` gave when its file was a binary of its own): for trials that start many
/// servers and measure times.
pub fn alone(name: &'static str, make: fn() -> Vec<Trial>) -> Vec<Trial> {
    in_group(name, true, make)
}

thread_local! {
    /// The module whose trials are being made, and whether they run alone.
    static GROUP: std::cell::Cell<Option<(&'static str, bool)>> = const { std::cell::Cell::new(None) };
}

/// Trials take this shared, or, when they must run alone, exclusive.
static TURNS: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn in_group(name: &'static str, alone: bool, make: fn() -> Vec<Trial>) -> Vec<Trial> {
    GROUP.with(|g| g.set(Some((name, alone))));
    let trials = make();
    GROUP.with(|g| g.set(None));
    trials
}

pub use libtest_mimic::Trial;

/// A test that needs no Redis.
pub fn plain(name: &'static str, test: impl FnOnce() + Send + 'static) -> Trial {
    let (name, alone) = match GROUP.with(std::cell::Cell::get) {
        Some((module, alone)) => (format!("{module}::{name}"), alone),
        None => (name.to_owned(), false),
    };
    Trial::test(name, move || {
        use std::sync::PoisonError;
        let _shared = (!alone).then(|| TURNS.read().unwrap_or_else(PoisonError::into_inner));
        let _alone = alone.then(|| TURNS.write().unwrap_or_else(PoisonError::into_inner));
        #[cfg(feature = "redis")]
        super::parity::forget();
        test();
        Ok(())
    })
}

/// An async test that needs no Redis, run on a current-thread runtime (as `#[tokio::test]`).
pub fn plain_async<F>(name: &'static str, test: impl FnOnce() -> F + Send + 'static) -> Trial
where
    F: std::future::Future<Output = ()>,
{
    plain(name, move || runtime().block_on(test()))
}

/// A test that starts `redis-server`: ignored when it is missing (unless CI requires it).
pub fn needs_redis(name: &'static str, test: impl FnOnce() + Send + 'static) -> Trial {
    plain(name, test).with_ignored_flag(skip_redis())
}

/// [`needs_redis`] for an async test.
pub fn needs_redis_async<F>(name: &'static str, test: impl FnOnce() -> F + Send + 'static) -> Trial
where
    F: std::future::Future<Output = ()>,
{
    plain_async(name, test).with_ignored_flag(skip_redis())
}

/// Whether tests that need `redis-server` are to be ignored; says why once.
fn skip_redis() -> bool {
    static SKIP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SKIP.get_or_init(|| {
        let skip = !found() && !required();
        if skip {
            eprintln!(
                "Redis tests ignored: redis-server is not on PATH. Install it (apt-get install \
                 redis-server) to run them; TOLLGATE_REQUIRE_REDIS=1 makes a missing server fail."
            );
        }
        skip
    })
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("a bound address").port()
}

/// Sends one inline command and returns the raw reply (enough for PING and INFO checks).
pub fn command(port: u16, cmd: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
    let mut buf = vec![0; 64 * 1024];
    let mut reply = Vec::new();
    loop {
        let n = stream.read(&mut buf).ok()?;
        reply.extend_from_slice(&buf[..n]);
        // A simple or error reply ends at its first CRLF; a bulk reply after its length.
        let text = String::from_utf8_lossy(&reply);
        if n == 0 || complete(&text) {
            return Some(text.into_owned());
        }
    }
}

fn complete(text: &str) -> bool {
    match text.as_bytes().first() {
        Some(b'$') => {
            let Some((len, rest)) = text[1..].split_once("\r\n") else {
                return false;
            };
            match len.parse::<i64>() {
                Ok(len) if len >= 0 => rest.len() >= len as usize + 2,
                _ => true,
            }
        }
        Some(_) => text.contains("\r\n"),
        None => false,
    }
}

/// One `redis-server` on a loopback port, killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// A new server. (An `Option` for the tests written as `let Some(server) = .. else`: a
    /// missing `redis-server` is a panic in [`available`], as the harness only runs a Redis
    /// test when it is there or CI requires it.)
    pub fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Option<Self> {
        if !available() {
            return None;
        }
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("tollgate-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for redis-server");
        let mut server = Self {
            child: None,
            port,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        server.restart();
        Some(server)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts the server (again) on its port, and waits until it answers.
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if command(self.port, "PING").is_some_and(|r| r.starts_with("+PONG")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "redis-server on port {} did not answer within 10 s",
            self.port
        );
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("a running server").id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// How many times Redis ran `command` (from `INFO commandstats`).
    pub fn calls(&self, command: &str) -> u64 {
        let info = self.info("commandstats");
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// `INFO <section>` as text.
    pub fn info(&self, section: &str) -> String {
        command(self.port, &format!("INFO {section}")).unwrap_or_default()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster on loopback, made with `redis-cli --cluster create`: three masters, and
/// with [`start_replicated`](Self::start_replicated) a replica for each.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

/// One node as the cluster sees it (a line of `CLUSTER NODES`).
#[derive(Debug, Clone)]
pub struct ClusterNode {
    pub id: String,
    pub port: u16,
    /// Whether the node is a master (`master` among its flags).
    pub master: bool,
    /// Whether the cluster holds the node failed (`fail`, or `fail?` before a majority agrees).
    pub failed: bool,
    /// The id of the master a replica follows.
    pub master_id: Option<String>,
    /// The slot ranges a master serves, both ends included.
    pub slots: Vec<(u16, u16)>,
}

impl ClusterNode {
    pub fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|&(from, to)| (from..=to).contains(&slot))
    }
}

impl RedisCluster {
    /// Three masters, no replicas, a node timeout of 5 s.
    pub fn start() -> Option<Self> {
        Self::create(3, 0, Duration::from_secs(5), &[])
    }

    /// Three masters, no replicas, a node timeout of 5 s, every node started with `options`
    /// too.
    pub fn start_with(options: &[&str]) -> Option<Self> {
        Self::create(3, 0, Duration::from_secs(5), options)
    }

    /// Three masters with one replica each, failing a master over after `node_timeout` (the
    /// cluster's `cluster-node-timeout`), every node started with `options` too. Returns once
    /// every node reports `cluster_state:ok` and sees the six nodes, none failed, and every
    /// replica's link to its master is up and its first sync done.
    pub fn start_replicated(node_timeout: Duration, options: &[&str]) -> Option<Self> {
        Self::create(3, 1, node_timeout, options)
    }

    fn create(
        masters: usize,
        replicas: usize,
        node_timeout: Duration,
        options: &[&str],
    ) -> Option<Self> {
        if !available() {
            return None;
        }
        let timeout = node_timeout.as_millis().to_string();
        let mut nodes = Vec::new();
        for _ in 0..masters * (1 + replicas) {
            let port = free_port();
            let conf = format!("nodes-{port}.conf");
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &conf,
                "--cluster-node-timeout",
                &timeout,
                // A replica's first full sync starts at once (not 5 s later, the default).
                "--repl-diskless-sync-delay",
                "0",
            ];
            args.extend_from_slice(options);
            let node = RedisServer::start_with(&args)?;
            nodes.push(node);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(status.success(), "redis-cli --cluster create failed");
        let cluster = Self { nodes };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if cluster.ready(masters, replicas) {
                return Some(cluster);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the Redis Cluster did not become ready within 30 s");
    }

    /// Every node: `cluster_state:ok` and a view of every node, none failed; every master
    /// with its replicas online; every replica's link up and its sync done.
    fn ready(&self, masters: usize, replicas: usize) -> bool {
        self.nodes.iter().all(|node| {
            let state_ok =
                command(node.port, "CLUSTER INFO").is_some_and(|r| r.contains("cluster_state:ok"));
            let Some(view) = Self::view_from(node.port) else {
                return false;
            };
            let complete = view.len() == self.nodes.len()
                && view.iter().filter(|n| n.master).count() == masters
                && view.iter().all(|n| !n.failed);
            let info = node.info("replication");
            let replication = if info.contains("role:master") {
                info.matches("state=online").count() == replicas
            } else {
                info.contains("master_link_status:up") && info.contains("master_sync_in_progress:0")
            };
            state_ok && complete && replication
        })
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The cluster as the first node that answers sees it.
    pub fn view(&self) -> Vec<ClusterNode> {
        self.nodes
            .iter()
            .find_map(|n| Self::view_from(n.port))
            .expect("a node of the cluster answers CLUSTER NODES")
    }

    /// The cluster as the node on `port` sees it (`CLUSTER NODES`).
    pub fn view_from(port: u16) -> Option<Vec<ClusterNode>> {
        let reply = command(port, "CLUSTER NODES")?;
        // A bulk reply: `$<len>`, then one line per node.
        let body = reply.split_once("\r\n")?.1;
        let nodes = body
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let address = fields[1].split('@').next().unwrap_or_default();
                let port = address.rsplit(':').next().unwrap_or_default();
                let flags: Vec<&str> = fields[2].split(',').collect();
                let slots = fields[8..]
                    .iter()
                    // Slots being moved (`[..->-..]`) are not served yet.
                    .filter(|range| !range.starts_with('['))
                    .map(|range| match range.split_once('-') {
                        Some((from, to)) => (from.parse().unwrap(), to.parse().unwrap()),
                        None => (range.parse().unwrap(), range.parse().unwrap()),
                    })
                    .collect();
                ClusterNode {
                    id: fields[0].to_owned(),
                    port: port.parse().unwrap_or(0),
                    master: flags.contains(&"master"),
                    failed: flags.contains(&"fail") || flags.contains(&"fail?"),
                    master_id: (fields[3] != "-").then(|| fields[3].to_owned()),
                    slots,
                }
            })
            .collect();
        Some(nodes)
    }

    /// The master that serves `slot`, as the cluster sees it.
    pub fn master_of(&self, slot: u16) -> ClusterNode {
        self.view()
            .into_iter()
            .find(|n| n.master && n.serves(slot))
            .unwrap_or_else(|| panic!("no master serves slot {slot}"))
    }

    /// The replica of the master `master`.
    pub fn replica_of(&self, master: &ClusterNode) -> ClusterNode {
        self.view()
            .into_iter()
            .find(|n| n.master_id.as_deref() == Some(master.id.as_str()))
            .unwrap_or_else(|| panic!("the master on port {} has no replica", master.port))
    }

    /// The slot of a Redis key, as Redis computes it (`CLUSTER KEYSLOT`).
    pub fn slot(&self, key: &[u8]) -> u16 {
        let key = String::from_utf8(key.to_vec()).expect("a key of text");
        assert!(!key.contains(['"', ' ', '\\']), "{key:?} needs quoting");
        let reply = self
            .nodes
            .iter()
            .find_map(|n| command(n.port, &format!("CLUSTER KEYSLOT \"{key}\"")))
            .expect("a node answers CLUSTER KEYSLOT");
        reply
            .trim()
            .trim_start_matches(':')
            .parse()
            .unwrap_or_else(|_| panic!("CLUSTER KEYSLOT answered {reply:?}"))
    }

    /// The node on `port`.
    pub fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }
}

/// The name the sentinels of [`RedisSentinels`] monitor their primary by.
pub const MASTER: &str = "mymaster";

/// How long the sentinels of [`RedisSentinels`] wait before they call a silent primary down.
pub const DOWN_AFTER_MS: u64 = 500;

/// The sentinels' `failover-timeout`: also how long they wait before they turn a server that
/// came back as a primary into a replica.
pub const FAILOVER_TIMEOUT_MS: u64 = 2000;

/// One `redis-sentinel` on a loopback port, killed when dropped.
pub struct SentinelProcess {
    child: Child,
    pub port: u16,
}

impl SentinelProcess {
    /// A `redis-sentinel` with its configuration in `dir`, monitoring the server on
    /// `primary_port` as [`MASTER`] with `quorum`.
    fn monitoring(dir: &std::path::Path, primary_port: &str, quorum: usize) -> Self {
        let port = free_port();
        let conf = dir.join(format!("sentinel-{port}.conf"));
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {primary_port} {quorum}\n\
                 sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {MASTER} 1\n",
                dir = dir.display()
            ),
        )
        .expect("a sentinel configuration");
        let child = Command::new("redis-sentinel")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-sentinel starts");
        Self { child, port }
    }

    /// The sentinel's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

/// A sentinel that names a primary of its own as [`MASTER`]: a lone server that only it
/// monitors, as a sentinel that missed a failover names the old primary, restarted empty and
/// still answering as a primary. Killed, and its directory removed, when dropped.
pub struct StaleSentinel {
    pub sentinel: SentinelProcess,
    pub server: RedisServer,
    dir: PathBuf,
}

impl StaleSentinel {
    /// Starts the server and its sentinel, and waits until the sentinel names it.
    pub fn start() -> Option<Self> {
        if !available() {
            return None;
        }
        let server = RedisServer::start()?;
        let dir = std::env::temp_dir().join(format!(
            "tollgate-stale-sentinel-{}-{}",
            std::process::id(),
            server.port
        ));
        std::fs::create_dir_all(&dir).expect("a directory for the sentinel");
        let sentinel = SentinelProcess::monitoring(&dir, &server.port.to_string(), 1);
        let stale = Self {
            sentinel,
            server,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let reply = cli(
                stale.sentinel.port,
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER],
            );
            if reply.lines().nth(1).map(str::trim) == Some(&*stale.server.port.to_string()) {
                return Some(stale);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the stale sentinel did not name its server within 10 s");
    }
}

impl Drop for StaleSentinel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A primary, its replicas and three `redis-sentinel` processes (quorum 2) monitoring it as
/// [`MASTER`], on loopback ports, with a short `down-after-milliseconds` ([`DOWN_AFTER_MS`])
/// and `failover-timeout` ([`FAILOVER_TIMEOUT_MS`]). Every process is killed and every
/// directory removed when dropped.
pub struct RedisSentinels {
    /// The servers: `servers[0]` is the first primary, the others its replicas.
    pub servers: Vec<RedisServer>,
    pub sentinels: Vec<SentinelProcess>,
    dir: PathBuf,
}

impl RedisSentinels {
    /// Starts them, and waits until the replicas are in sync and every sentinel knows the
    /// replicas and the other sentinels (so that a failover can happen).
    pub fn start(replicas: usize) -> Option<Self> {
        if !available() {
            return None;
        }
        let primary = RedisServer::start()?;
        let primary_port = primary.port.to_string();
        let mut servers = vec![primary];
        for _ in 0..replicas {
            servers.push(RedisServer::start_with(&[
                "--replicaof",
                "127.0.0.1",
                &primary_port,
            ])?);
        }
        let dir = std::env::temp_dir().join(format!(
            "tollgate-sentinels-{}-{primary_port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("a directory for the sentinels");
        let sentinels = (0..3)
            .map(|_| SentinelProcess::monitoring(&dir, &primary_port, 2))
            .collect();
        let cluster = Self {
            servers,
            sentinels,
            dir,
        };
        cluster.wait_until_ready(replicas);
        Some(cluster)
    }

    fn wait_until_ready(&self, replicas: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let synced = self.servers[0]
                .info("replication")
                .matches("state=online")
                .count()
                == replicas;
            let known = self.sentinels.iter().all(|s| {
                let master = cli(s.port, &["SENTINEL", "MASTER", MASTER]);
                let field = |name: &str| {
                    let mut lines = master.lines();
                    lines.find(|l| *l == name);
                    lines.next().and_then(|v| v.parse::<usize>().ok())
                };
                field("num-slaves") == Some(replicas) && field("num-other-sentinels") == Some(2)
            });
            if synced && known {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the sentinels did not find the replicas and each other within 20 s");
    }

    /// The sentinels' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}/", s.port))
            .collect()
    }

    /// The port of the primary the sentinels name now (the first that answers).
    pub fn primary_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let reply = cli(s.port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]);
            reply.lines().nth(1)?.trim().parse().ok()
        })
    }

    /// The server on `port`.
    pub fn server(&mut self, port: u16) -> &mut RedisServer {
        self.servers
            .iter_mut()
            .find(|s| s.port == port)
            .expect("a server of the set")
    }

    /// Waits until every sentinel names a primary other than `old` and that primary says it
    /// is one; its port.
    pub fn wait_for_new_primary(&self, old: u16, within: Duration) -> u16 {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(|s| {
                    let reply = cli(s.port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]);
                    reply.lines().nth(1)?.trim().parse().ok()
                })
                .collect();
            if let Some(Some(port)) = named.first() {
                let agreed = named.iter().all(|n| *n == Some(*port));
                if agreed && *port != old && role(*port) == "master" {
                    return *port;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the sentinels named no primary other than port {old} within {within:?}");
    }

    /// Waits until the server on `port` is a replica in sync with the primary on `primary`.
    pub fn wait_until_replica_of(&self, port: u16, primary: u16, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let info = command(port, "INFO replication").unwrap_or_default();
            if info.contains("role:slave")
                && info.contains(&format!("master_port:{primary}"))
                && info.contains("master_link_status:up")
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the server on port {port} did not become a replica of {primary} within {within:?}");
    }
}

impl Drop for RedisSentinels {
    fn drop(&mut self) {
        // The sentinels first, so that none reconfigures a server being killed.
        self.sentinels.clear();
        self.servers.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `master` or `slave` (`role:` of `INFO replication`), or empty when the server does not
/// answer within 2 s.
pub fn role(port: u16) -> String {
    let info = command(port, "INFO replication").unwrap_or_default();
    info.lines()
        .find_map(|line| line.trim().strip_prefix("role:"))
        .unwrap_or("")
        .to_owned()
}

/// A command through `redis-cli` (its plain output, one line per element), or empty when it
/// fails. Only for servers that answer (a frozen one would hold it).
pub fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}
