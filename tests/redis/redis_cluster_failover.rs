//! A Redis Cluster master lost under load, on a cluster of three masters with a replica each:
//! its replica is promoted, and the same `RedisStore::cluster`, with no restart, decides the
//! lost slots' keys again (it learns the new slot map; a new master without the scripts gets
//! them through the `NOSCRIPT` path), within a second of the promotion. Until then the failure
//! policy answers those keys, at once from the moment the store knows the master down. The
//! master is killed (SIGKILL: its connections close) or frozen (SIGSTOP: they stay open and
//! nothing answers, as with a hung machine).
//!
//! Time here is real: the cluster's own failover. The tests poll with deadlines and print what
//! they measured: the recovery time, the failures, the over-admission.

use crate::support::redis as server;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use server::RedisCluster;
use tollgate::algorithm::Gcra;
use tollgate::store::{OnFailure, RedisStore};
use tollgate::{Decision, Error, ErrorKind, Key, Quota, RateLimiter};

/// The cluster's `cluster-node-timeout`: a master is failed over about this long after it
/// stops answering (and the election).
const NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Keys under load, spread over every master.
const KEYS: usize = 192;
/// Load tasks per failure policy and group of keys (the lost master's, the others).
const WORKERS: usize = 2;
/// The longest the cluster and the store may take to decide a lost slot's key again.
const RECOVERY_BOUND: Duration = Duration::from_secs(30);
/// The quota each key of the over-admission measure spends just before the master is lost.
const SPENT_QUOTA: u64 = 10;
/// Keys of the lost master's slots whose quota is spent just before it is lost.
const SPENT_KEYS: usize = 16;

/// How the master is lost.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// SIGKILL: a crash; the kernel closes its connections.
    Kill,
    /// SIGSTOP: a hang; its connections stay open and nothing answers.
    Freeze,
}

/// Who answered one check.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    /// Redis: an admission that carries the script's receipt.
    Redis,
    /// The local fallback: an admission without a receipt (the load's quota is never spent,
    /// so every answer is an admission).
    Local,
    /// An error: the closed failure policy.
    Failed(ErrorKind),
}

/// One check of the load.
#[derive(Debug, Clone, Copy)]
struct Record {
    sent: Instant,
    answered: Instant,
    key: usize,
    answer: Answer,
}

type Log = Arc<Mutex<Vec<Record>>>;

fn answer(result: &Result<Decision, Error>) -> Answer {
    match result {
        Ok(decision) => {
            assert!(
                decision.allowed,
                "the load's quota is never spent: {decision:?}"
            );
            if decision.receipt() != 0 {
                Answer::Redis
            } else {
                Answer::Local
            }
        }
        Err(error) => Answer::Failed(error.kind()),
    }
}

fn key(n: usize) -> Key {
    Key::from(format!("user-{n}"))
}

/// The load on one policy over `keys`: `WORKERS` tasks, each checking its share of them in
/// turn (at most one check a millisecond) until `stop`; every answer recorded in `log`.
fn load(
    limiter: &RateLimiter<Gcra, RedisStore>,
    keys: &[usize],
    stop: &Arc<AtomicBool>,
    log: &Log,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..WORKERS)
        .map(|worker| {
            let limiter = limiter.clone();
            let stop = Arc::clone(stop);
            let log = Arc::clone(log);
            let mine: Vec<usize> = keys.iter().copied().skip(worker).step_by(WORKERS).collect();
            tokio::spawn(async move {
                let mut pace = tokio::time::interval(Duration::from_millis(1));
                pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                for &n in mine.iter().cycle() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    pace.tick().await;
                    let sent = Instant::now();
                    let result = limiter.check(key(n)).await;
                    if let Err(error) = &result {
                        let text = format!("{error} {error:?}");
                        assert!(
                            !text.contains("user-"),
                            "a client's key in an error: {text}"
                        );
                    }
                    let record = Record {
                        sent,
                        answered: Instant::now(),
                        key: n,
                        answer: answer(&result),
                    };
                    log.lock().unwrap().push(record);
                }
            })
        })
        .collect()
}

/// The first answer from Redis to a check of a lost key sent after `after`.
fn first_redis(log: &Log, lost: &[bool], after: Instant) -> Option<Instant> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|r| r.sent > after && lost[r.key] && r.answer == Answer::Redis)
        .map(|r| r.answered)
        .min()
}

/// Whether Redis answered a check sent after `after` for every lost key.
fn every_lost_key_decided(log: &Log, lost: &[bool], after: Instant) -> bool {
    let mut decided = [false; KEYS];
    for r in log.lock().unwrap().iter() {
        if r.sent > after && r.answer == Answer::Redis {
            decided[r.key] = true;
        }
    }
    (0..KEYS).all(|n| !lost[n] || decided[n])
}

/// One policy's answers around the loss.
struct Outcome {
    /// From the loss to Redis's first answer for a lost key's check sent after it.
    recovery: Duration,
    /// The answers to lost keys' checks sent after the loss and answered before that.
    lost_between: Vec<Answer>,
    /// How many of those waited the store's timeout (or longer): the store answers the keys
    /// of a master it knows down at once, so only the first few.
    lost_slow: usize,
    /// The answers to the other keys' checks sent after the loss, and when each was sent.
    others_after: Vec<(Duration, Answer)>,
}

impl Outcome {
    fn of(log: &Log, lost: &[bool], at: Instant, timeout: Duration) -> Self {
        let first = first_redis(log, lost, at).expect("Redis decided a lost key again");
        let log = log.lock().unwrap();
        let between = || {
            log.iter()
                .filter(|r| lost[r.key] && r.sent > at && r.answered < first)
        };
        Self {
            recovery: first - at,
            lost_between: between().map(|r| r.answer).collect(),
            lost_slow: between().filter(|r| r.answered - r.sent >= timeout).count(),
            others_after: log
                .iter()
                .filter(|r| !lost[r.key] && r.sent > at)
                .map(|r| (r.sent - at, r.answer))
                .collect(),
        }
    }

    /// How many of the other keys' checks failed (an error, or the local fallback's answer).
    fn others_failed(&self) -> usize {
        self.others_after
            .iter()
            .filter(|(_, a)| *a != Answer::Redis)
            .count()
    }

    /// When the first and the last of the other keys' failed checks were sent.
    fn others_failing(&self) -> Option<(Duration, Duration)> {
        let failed = self
            .others_after
            .iter()
            .filter(|(_, a)| *a != Answer::Redis);
        let first = failed.clone().map(|(t, _)| *t).min()?;
        Some((first, failed.map(|(t, _)| *t).max()?))
    }
}

/// `field` of the `INFO` line `name` (`name:calls=3,failed_calls=1,..`), 0 when absent.
fn stat(info: &str, name: &str, field: &str) -> u64 {
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'));
    line.into_iter()
        .flat_map(|l| l.split(','))
        .find_map(|pair| pair.strip_prefix(field)?.strip_prefix('=')?.parse().ok())
        .unwrap_or(0)
}

/// How many scripts the server on `port` holds (`number_of_cached_scripts`).
fn scripts_cached(port: u16) -> u64 {
    let memory = server::command(port, "INFO memory").unwrap_or_default();
    memory
        .lines()
        .find_map(|l| {
            l.strip_prefix("number_of_cached_scripts:")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn count(answers: &[Answer], which: Answer) -> usize {
    answers.iter().filter(|&&a| a == which).count()
}

/// What one failover measured.
struct Failover {
    /// From the loss to the replica's `ROLE` saying `master`.
    promoted: Duration,
    /// When a surviving master first and last said `cluster_state:fail`, from the loss: Redis
    /// refuses every key then (with `cluster-require-full-coverage yes`, the default).
    cluster_down: Option<(Duration, Duration)>,
    closed: Outcome,
    local: Outcome,
    /// For each key whose quota was spent just before the loss, how many more requests were
    /// admitted after the failover.
    over: Vec<u64>,
}

/// Loses a master (`loss`) under load on a replicated cluster started with `options`, the
/// store's calls bounded by `timeout`, and checks what every failover must give: Redis
/// decides the lost keys again within [`RECOVERY_BOUND`], through the same store; until then
/// the closed policy answers errors that say Redis could not be reached or did not answer,
/// the local fallback answers every check; the new master runs the scripts (loaded after a
/// `NOSCRIPT` when it had none); the new master's state, and nothing else, decides the spent
/// keys; a dropped store leaves no connection behind.
fn fail_over(loss: Loss, options: &[&str], timeout: Duration) -> Option<Failover> {
    let mut cluster = RedisCluster::start_replicated(NODE_TIMEOUT, options)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let failover = rt.block_on(async {
        // One store, one connection to the cluster, two failure policies over it.
        let store = RedisStore::cluster(cluster.urls())
            .await
            .unwrap()
            .timeout(timeout);
        let quota = |name: &str| Quota::per_hour(1_000_000_000).named(name);
        let closed = RateLimiter::gcra(quota("closed"))
            .with_store(store.clone().on_failure(OnFailure::Closed));
        let local = RateLimiter::gcra(quota("local")).with_store(store.clone());
        // No denial remembered here: every check of a spent key after the failover asks Redis.
        // These checks wait for Redis as long as it takes: their answers are counted, not timed.
        let spent = RateLimiter::fixed_window(Quota::per_hour(SPENT_QUOTA).named("spent"))
            .with_store(
                store
                    .clone()
                    .on_failure(OnFailure::Closed)
                    .deny_cache(0)
                    .timeout(Duration::from_secs(10)),
            );

        // The master to lose: key 0's. The lost keys are those it serves.
        let slot = |name: Vec<u8>| cluster.slot(&name);
        let victim = cluster.master_of(slot(closed.table().redis_keys(&key(0)).remove(0)));
        let replica = cluster.replica_of(&victim);
        let survivor = cluster
            .view()
            .into_iter()
            .find(|n| n.master && n.id != victim.id)
            .unwrap();
        let lost: Vec<bool> = (0..KEYS)
            .map(|n| {
                let closed_slot = slot(closed.table().redis_keys(&key(n)).remove(0));
                let local_slot = slot(local.table().redis_keys(&key(n)).remove(0));
                assert_eq!(closed_slot, local_slot, "a key's slot is its hash tag's");
                victim.serves(closed_slot)
            })
            .collect();
        let lost_keys = lost.iter().filter(|&&l| l).count();
        assert!(
            (KEYS / 6..KEYS / 2).contains(&lost_keys),
            "{lost_keys} of {KEYS} keys on one of three masters"
        );
        let spent_keys: Vec<Key> = (0..)
            .map(|n| Key::from(format!("spent-{n}")))
            .filter(|k| victim.serves(slot(spent.table().redis_keys(k).remove(0))))
            .take(SPENT_KEYS)
            .collect();

        // Redis decides every key before the loss (a check late on this busy machine is
        // asked again).
        let deadline = Instant::now() + Duration::from_secs(10);
        for n in 0..KEYS {
            for limiter in [&closed, &local] {
                while answer(&limiter.check(key(n)).await) != Answer::Redis {
                    assert!(Instant::now() < deadline, "Redis did not decide key {n}");
                }
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let closed_log = Log::default();
        let local_log = Log::default();
        // The lost keys and the others on tasks of their own: a lost key's check, which waits
        // for the timeout, holds up no other key's.
        let (lost_list, other_list): (Vec<usize>, Vec<usize>) = (0..KEYS).partition(|&n| lost[n]);
        let mut tasks = Vec::new();
        for keys in [&lost_list, &other_list] {
            tasks.extend(load(&closed, keys, &stop, &closed_log));
            tasks.extend(load(&local, keys, &stop, &local_log));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while closed_log.lock().unwrap().len() < 500 || local_log.lock().unwrap().len() < 500 {
            assert!(Instant::now() < deadline, "the load did not start");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }

        // The spent keys' quotas are spent, and at once the master is lost: the last of these
        // writes race its replication.
        let spending: Vec<_> = spent_keys
            .iter()
            .map(|k| {
                let (spent, k) = (spent.clone(), k.clone());
                tokio::spawn(async move {
                    for _ in 0..SPENT_QUOTA {
                        let d = spent.check(k.clone()).await.expect("Redis answers");
                        assert!(d.allowed && d.receipt() != 0, "{d:?}");
                    }
                })
            })
            .collect();
        for task in spending {
            task.await.unwrap();
        }
        // Neither Redis nor Valkey replicates the script cache, but redis-rs sends `SCRIPT LOAD`
        // to every node it holds a connection to, replicas too, so the replica may have them.
        let replica_had_scripts = scripts_cached(replica.port) > 0;
        let victim_node = cluster.node(victim.port);
        match loss {
            Loss::Kill => victim_node.kill(),
            Loss::Freeze => victim_node.pause(),
        }
        let at = Instant::now();

        // The replica is promoted, and Redis decides a lost key again through the same store.
        let mut promoted = None;
        let mut recovered = None;
        let mut down_from = None;
        let mut down_until = None;
        while promoted.is_none() || recovered.is_none() {
            assert!(
                at.elapsed() < RECOVERY_BOUND,
                "{loss:?}: after {RECOVERY_BOUND:?} the replica was promoted after \
                 {promoted:?}, Redis decided a lost key again at {recovered:?}"
            );
            if promoted.is_none()
                && server::command(replica.port, "ROLE").is_some_and(|r| r.contains("master"))
            {
                promoted = Some(at.elapsed());
            }
            let info = server::command(survivor.port, "CLUSTER INFO").unwrap_or_default();
            if info.contains("cluster_state:fail") {
                down_from.get_or_insert(at.elapsed());
                down_until = Some(at.elapsed());
            }
            if recovered.is_none() {
                recovered = first_redis(&closed_log, &lost, at);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let recovered = recovered.unwrap();
        // Every lost key, in both policies, is decided by Redis again.
        while !every_lost_key_decided(&closed_log, &lost, recovered)
            || !every_lost_key_decided(&local_log, &lost, recovered)
        {
            assert!(
                recovered.elapsed() < Duration::from_secs(10),
                "some lost keys were not decided by Redis within 10 s of the first"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop.store(true, Ordering::Relaxed);
        for task in tasks {
            task.await.unwrap();
        }

        let closed_outcome = Outcome::of(&closed_log, &lost, at, timeout);
        let local_outcome = Outcome::of(&local_log, &lost, at, timeout);
        // Closed: until Redis answered again, errors that say Redis could not be reached or
        // did not answer in time; never an admission made up.
        let between = &closed_outcome.lost_between;
        assert!(!between.is_empty(), "the failover took some checks");
        let unreachable = count(between, Answer::Failed(ErrorKind::Unreachable));
        let timed_out = count(between, Answer::Failed(ErrorKind::Timeout));
        assert_eq!(unreachable + timed_out, between.len(), "{between:?}");
        assert!(closed_log
            .lock()
            .unwrap()
            .iter()
            .all(|r| r.answer != Answer::Local));
        // The local fallback: every check answered, the lost keys' by the local table.
        let between = &local_outcome.lost_between;
        assert!(!between.is_empty(), "the failover took some checks");
        assert_eq!(count(between, Answer::Local), between.len(), "{between:?}");
        assert!(local_log
            .lock()
            .unwrap()
            .iter()
            .all(|r| !matches!(r.answer, Answer::Failed(_))));
        // The lost master known down, its keys are answered at once: only a few checks, those
        // that found it down (three timeouts in a row), waited the timeout. The promoted
        // replica decides at once: within a probe of the promotion, and a connection (and a
        // timeout, for checks sent before the store knew the master down).
        for outcome in [&closed_outcome, &local_outcome] {
            assert!(
                outcome.lost_slow <= 8 * 2 * WORKERS,
                "{} of the lost keys' {} checks waited the timeout",
                outcome.lost_slow,
                outcome.lost_between.len()
            );
            let promoted = promoted.expect("promoted");
            assert!(
                outcome.recovery < promoted + timeout + Duration::from_secs(1),
                "Redis decided a lost key {:?} after the promotion",
                outcome.recovery.saturating_sub(promoted)
            );
        }
        // The other masters' keys: Redis decided them after the loss, before the lost keys'.
        for outcome in [&closed_outcome, &local_outcome] {
            assert!(outcome
                .others_after
                .iter()
                .any(|&(t, a)| a == Answer::Redis && t < outcome.recovery));
        }

        // Decisions resumed on the new master: it ran the scripts. One without them before the
        // loss (on Redis 7 every run so far; on Valkey 9 most) got them through a NOSCRIPT.
        let new_master = RedisCluster::view_from(replica.port)
            .unwrap()
            .into_iter()
            .find(|n| n.port == replica.port)
            .unwrap();
        assert!(new_master.master && !new_master.slots.is_empty());
        let errors = server::command(replica.port, "INFO errorstats").unwrap_or_default();
        let commands = server::command(replica.port, "INFO commandstats").unwrap_or_default();
        let evalsha = |field: &str| stat(&commands, "cmdstat_evalsha", field);
        assert!(evalsha("calls") > evalsha("failed_calls"), "{commands}");
        assert!(scripts_cached(replica.port) > 0);
        if !replica_had_scripts {
            assert!(errors.contains("errorstat_NOSCRIPT"), "{errors}");
            assert!(commands.contains("cmdstat_script|load"), "{commands}");
        }

        // Over-admission: writes the old master acknowledged but had not replicated are lost,
        // and a key gets back what they took. The new master's state decides: the store
        // admits exactly what it leaves, never more than the quota.
        let mut over = Vec::new();
        for k in &spent_keys {
            let left = spent.peek(k.clone()).await.unwrap().remaining;
            let mut admitted = 0;
            while spent.check(k.clone()).await.unwrap().allowed {
                admitted += 1;
                assert!(
                    admitted <= SPENT_QUOTA,
                    "more than the quota after the failover"
                );
            }
            assert_eq!(admitted, left, "the new master's state decides");
            over.push(admitted);
        }

        // A store dropped leaves no connection behind (the watch ends with it): no client
        // but the one asking (and replication links) on any live node.
        drop((closed, local, spent, store));
        let deadline = Instant::now() + Duration::from_secs(10);
        for node in cluster.nodes.iter().filter(|n| n.port != victim.port) {
            loop {
                let list = server::command(node.port, "CLIENT LIST").unwrap_or_default();
                let others: Vec<&str> = list
                    .lines()
                    .filter(|l| l.contains(" flags=N ") && !l.contains(" cmd=client|list "))
                    .collect();
                if others.is_empty() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "10 s after the store was dropped, the node on port {} has clients: \
                     {others:?}",
                    node.port
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }

        Failover {
            promoted: promoted.unwrap(),
            cluster_down: down_from.zip(down_until),
            closed: closed_outcome,
            local: local_outcome,
            over,
        }
    });
    Some(failover)
}

/// Prints what a failover measured, one line each.
fn report(name: &str, f: &Failover) {
    println!(
        "{name}: node timeout {NODE_TIMEOUT:?}; replica promoted after {:.2?}; Redis decides a \
         lost key again after {:.2?} (closed), {:.2?} (local fallback)",
        f.promoted, f.closed.recovery, f.local.recovery
    );
    let lost = &f.closed.lost_between;
    println!(
        "{name}: lost keys until then: closed answered {} errors ({} unreachable, {} timed \
         out), the local fallback {} checks locally; {} and {} waited the timeout",
        lost.len(),
        count(lost, Answer::Failed(ErrorKind::Unreachable)),
        count(lost, Answer::Failed(ErrorKind::Timeout)),
        f.local.lost_between.len(),
        f.closed.lost_slow,
        f.local.lost_slow,
    );
    for (policy, outcome) in [("closed", &f.closed), ("local", &f.local)] {
        println!(
            "{name}: other masters' keys ({policy}): {} of {} checks after the loss not \
             decided by Redis, sent from/to {:.2?}; cluster_state:fail first/last seen {:.2?}",
            outcome.others_failed(),
            outcome.others_after.len(),
            outcome.others_failing(),
            f.cluster_down,
        );
    }
    println!(
        "{name}: over-admission of {SPENT_KEYS} keys whose quota of {SPENT_QUOTA} was spent \
         just before the loss: {} in all {:?}",
        f.over.iter().sum::<u64>(),
        f.over
    );
}

fn a_killed_master_is_replaced_without_a_restart() {
    if let Some(failover) = fail_over(Loss::Kill, &[], RedisStore::DEFAULT_TIMEOUT) {
        report("kill", &failover);
    }
}

/// A frozen master keeps its connections open: the store sees no error from it, only calls
/// that never end, and still follows the promotion.
fn a_frozen_master_is_replaced_without_a_restart() {
    if let Some(failover) = fail_over(Loss::Freeze, &[], RedisStore::DEFAULT_TIMEOUT) {
        report("freeze", &failover);
    }
}

/// With `cluster-require-full-coverage no`, the surviving masters keep answering while a
/// master's slots have none: Redis decides their keys throughout the failover. (A timeout of
/// 1 s keeps this busy machine's stalls out of the count; with `yes`, the cluster's refusals
/// outlast it: redis-rs waits 1.28 s before it asks again after a `CLUSTERDOWN`.)
fn without_full_coverage_the_other_masters_keep_deciding() {
    let options = ["--cluster-require-full-coverage", "no"];
    let Some(failover) = fail_over(Loss::Kill, &options, Duration::from_secs(1)) else {
        return;
    };
    report("kill, full coverage off", &failover);
    assert_eq!(failover.cluster_down, None, "the cluster never refuses");
    for outcome in [&failover.closed, &failover.local] {
        assert_eq!(
            outcome.others_failed(),
            0,
            "sent from/to {:?}",
            outcome.others_failing()
        );
    }
}

pub(crate) fn trials() -> Vec<server::Trial> {
    // One at a time: each starts six servers, and measures times.
    vec![
        server::needs_redis(
            "a_killed_master_is_replaced_without_a_restart",
            a_killed_master_is_replaced_without_a_restart,
        ),
        server::needs_redis(
            "a_frozen_master_is_replaced_without_a_restart",
            a_frozen_master_is_replaced_without_a_restart,
        ),
        server::needs_redis(
            "without_full_coverage_the_other_masters_keep_deciding",
            without_full_coverage_the_other_masters_keep_deciding,
        ),
    ]
}
