//! A Redis Cluster master killed (SIGKILL) under load, on a cluster of three masters with a
//! replica each: its replica is promoted, and the same `RedisStore::cluster`, with no restart,
//! decides the lost slots' keys again (the client refreshes its slot map; the new master,
//! which never had the scripts, gets them through the `NOSCRIPT` path). Until then the failure
//! policy answers those keys; the other masters' keys are decided by Redis throughout.
//!
//! Time here is real: the cluster's own failover. The test polls with deadlines and prints
//! what it measured (the recovery time, the failures, the over-admission).

#[path = "support/redis.rs"]
mod server;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use server::RedisCluster;
use tollgate::algorithm::Gcra;
use tollgate::store::{OnFailure, RedisStore};
use tollgate::{Decision, Error, ErrorKind, Key, Quota, RateLimiter};

/// The cluster's `cluster-node-timeout`: a master is failed over about this long after it
/// stops answering (plus the election).
const NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Keys under load, spread over every slot range.
const KEYS: usize = 192;
/// Load tasks per failure policy.
const WORKERS: usize = 4;
/// The longest the cluster and the client may take to decide a lost slot's key again.
const RECOVERY_BOUND: Duration = Duration::from_secs(30);
/// The quota each key of the over-admission measure spends before the kill.
const SPENT_QUOTA: u64 = 10;
/// Keys of the killed master's slots whose quota is spent just before the kill.
const SPENT_KEYS: usize = 16;

/// Who answered one check.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    /// Redis: an admission that carries the script's receipt.
    Redis,
    /// The local fallback: an admission without a receipt (the load's quota is never spent,
    /// so every answer is an admission).
    Local,
    /// An error: a closed failure policy.
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

/// The load on one policy: `WORKERS` tasks, each checking its share of the keys in turn
/// (one check a millisecond at most) until `stop`; every answer recorded in `log`.
fn load(
    limiter: &RateLimiter<Gcra, RedisStore>,
    stop: &Arc<AtomicBool>,
    log: &Arc<Mutex<Vec<Record>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..WORKERS)
        .map(|worker| {
            let limiter = limiter.clone();
            let stop = Arc::clone(stop);
            let log = Arc::clone(log);
            tokio::spawn(async move {
                let mut pace = tokio::time::interval(Duration::from_millis(1));
                pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mine: Vec<usize> = (worker..KEYS).step_by(WORKERS).collect();
                for &n in mine.iter().cycle() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    pace.tick().await;
                    let sent = Instant::now();
                    let result = limiter.check(key(n)).await;
                    if let Err(error) = &result {
                        // Errors never carry the client's key.
                        let text = format!("{error} {error:?}");
                        assert!(!text.contains("user-"), "a key in an error: {text}");
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

/// The first check of a lost key, sent after `after`, that Redis decided.
fn first_redis(log: &Mutex<Vec<Record>>, lost: &[bool], after: Instant) -> Option<Record> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|r| r.sent > after && lost[r.key] && r.answer == Answer::Redis)
        .min_by_key(|r| r.answered)
        .copied()
}

/// Whether every lost key had a check sent after `after` that Redis decided.
fn every_lost_key_decided(log: &Mutex<Vec<Record>>, lost: &[bool], after: Instant) -> bool {
    let mut decided = vec![false; KEYS];
    for r in log.lock().unwrap().iter() {
        if r.sent > after && r.answer == Answer::Redis {
            decided[r.key] = true;
        }
    }
    (0..KEYS).all(|n| !lost[n] || decided[n])
}

/// What the answers to one policy's load were, around the kill.
struct Outcome {
    /// From the kill to the first Redis decision of a lost key sent after it.
    recovery: Duration,
    /// Answers to lost keys' checks sent between the kill and that decision, by kind.
    lost_between: Vec<Answer>,
    /// Answers to the other keys' checks sent between the kill and the end of the load.
    others_after: Vec<Answer>,
}

fn outcome(log: &Mutex<Vec<Record>>, lost: &[bool], killed: Instant) -> Outcome {
    let _ = Duration::ZERO;
    let first = first_redis(log, lost, killed).expect("Redis decided a lost key again");
    let log = log.lock().unwrap();
    Outcome {
        recovery: first.answered - killed,
        lost_between: log
            .iter()
            .filter(|r| lost[r.key] && r.sent > killed && r.answered < first.answered)
            .map(|r| r.answer)
            .collect(),
        others_after: log
            .iter()
            .filter(|r| !lost[r.key] && r.sent > killed)
            .map(|r| r.answer)
            .collect(),
    }
}

fn count(answers: &[Answer], which: impl Fn(&Answer) -> bool) -> usize {
    answers.iter().filter(|a| which(a)).count()
}

fn a_killed_master_is_replaced_without_a_restart() {
    let Some(mut cluster) = RedisCluster::start_replicated(NODE_TIMEOUT) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // One store, one connection to the cluster; two failure policies over it.
        let store = RedisStore::cluster(cluster.urls()).await.unwrap();
        let quota = |name: &str| Quota::per_hour(1_000_000_000).named(name);
        let closed = RateLimiter::gcra(quota("closed"))
            .with_store(store.clone().on_failure(OnFailure::Closed));
        let local = RateLimiter::gcra(quota("local")).with_store(store.clone());
        // Each key's quota spent exactly before the kill; no denial remembered locally, so
        // every check after the failover asks Redis.
        let spent = RateLimiter::fixed_window(Quota::per_hour(SPENT_QUOTA).named("spent"))
            .with_store(store.clone().on_failure(OnFailure::Closed).deny_cache(0));

        // The master to kill: the one of key 0's slot. The lost keys are those it serves.
        let slot = |name: Vec<u8>| cluster.slot(&name);
        let victim = cluster.master_of(slot(closed.table().redis_keys(&key(0)).remove(0)));
        let replica = cluster.replica_of(&victim);
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

        // Every key is decided by Redis before the kill.
        for n in 0..KEYS {
            assert_eq!(answer(&closed.check(key(n)).await), Answer::Redis);
            assert_eq!(answer(&local.check(key(n)).await), Answer::Redis);
        }

        let stop = Arc::new(AtomicBool::new(false));
        let closed_log = Arc::new(Mutex::new(Vec::new()));
        let local_log = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = load(&closed, &stop, &closed_log);
        tasks.extend(load(&local, &stop, &local_log));
        // The load runs a while before the kill.
        let deadline = Instant::now() + Duration::from_secs(10);
        while closed_log.lock().unwrap().len() < 500 || local_log.lock().unwrap().len() < 500 {
            assert!(Instant::now() < deadline, "the load did not start");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }

        // The spent keys' quotas are spent, then the master is killed at once: the last of
        // these writes race its replication.
        let spending: Vec<_> = spent_keys
            .iter()
            .map(|k| {
                let spent = spent.clone();
                let k = k.clone();
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
        if std::env::var("FREEZE").is_ok() {
            cluster.node(victim.port).pause();
        } else {
            cluster.node(victim.port).kill();
        }
        let killed = Instant::now();

        // The replica is promoted, and Redis decides a lost key again through the same store.
        let mut promoted = None;
        let mut recovered = None;
        while promoted.is_none() || recovered.is_none() {
            assert!(
                killed.elapsed() < RECOVERY_BOUND,
                "after {RECOVERY_BOUND:?}: replica promoted {promoted:?}, Redis deciding a lost \
                 key again {recovered:?}"
            );
            if promoted.is_none()
                && server::command(replica.port, "ROLE").is_some_and(|r| r.contains("master"))
            {
                promoted = Some(killed.elapsed());
            }
            if recovered.is_none() {
                recovered = first_redis(&closed_log, &lost, killed).map(|r| r.answered);
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

        if std::env::var("DEBUG_FAILOVER").is_ok() {
            for r in closed_log.lock().unwrap().iter().filter(|r| r.sent > killed - Duration::from_millis(200)) {
                println!("DBG {} {:>6} {:>6} {:?}", lost[r.key], (r.sent - killed).as_millis(), (r.answered - r.sent).as_millis(), r.answer);
            }
        }
        let closed_outcome = outcome(&closed_log, &lost, killed);
        let local_outcome = outcome(&local_log, &lost, killed);
        let promoted = promoted.unwrap();
        println!(
            "node timeout {NODE_TIMEOUT:?}: replica promoted {promoted:?} after the kill; \
             first Redis decision of a lost key {:?} (closed), {:?} (local fallback)",
            closed_outcome.recovery, local_outcome.recovery
        );

        // Closed: every lost key's check until then was answered by an error saying Redis
        // could not be reached or did not answer in time, never by an admission.
        let failed = |a: &Answer| {
            matches!(
                a,
                Answer::Failed(ErrorKind::Unreachable | ErrorKind::Timeout)
            )
        };
        let between = &closed_outcome.lost_between;
        println!(
            "closed: {} checks of lost keys between the kill and Redis again: {} unreachable, \
             {} timed out",
            between.len(),
            count(between, |a| *a == Answer::Failed(ErrorKind::Unreachable)),
            count(between, |a| *a == Answer::Failed(ErrorKind::Timeout)),
        );
        assert!(!between.is_empty(), "the failover took some checks");
        assert_eq!(count(between, failed), between.len(), "{between:?}");
        // The local fallback: every check answered, the lost keys' by the local table.
        let between = &local_outcome.lost_between;
        println!(
            "local fallback: {} checks of lost keys between the kill and Redis again, all \
             answered: {} locally",
            between.len(),
            count(between, |a| *a == Answer::Local),
        );
        assert!(!between.is_empty(), "the failover took some checks");
        assert_eq!(count(between, |a| *a == Answer::Local), between.len());
        // A closed policy never answers but from Redis or with an error; the local fallback
        // never answers with an error.
        let closed_answers = closed_log.lock().unwrap();
        assert!(closed_answers.iter().all(|r| r.answer != Answer::Local));
        let local_answers = local_log.lock().unwrap();
        assert!(local_answers
            .iter()
            .all(|r| !matches!(r.answer, Answer::Failed(_))));
        drop((closed_answers, local_answers));

        // The other masters' keys: decided by Redis throughout.
        for (policy, outcome) in [("closed", &closed_outcome), ("local", &local_outcome)] {
            let after = &outcome.others_after;
            let redis = count(after, |a| *a == Answer::Redis);
            println!(
                "{policy}: {} checks of the other masters' keys after the kill: {redis} decided \
                 by Redis, {} unreachable, {} timed out, {} answered locally",
                after.len(),
                count(after, |a| *a == Answer::Failed(ErrorKind::Unreachable)),
                count(after, |a| *a == Answer::Failed(ErrorKind::Timeout)),
                count(after, |a| *a == Answer::Local),
            );
            assert!(redis > 0);
        }

        // The new master never had the scripts: the store loaded them there after a NOSCRIPT.
        let new_master = RedisCluster::view_from(replica.port)
            .unwrap()
            .into_iter()
            .find(|n| n.port == replica.port)
            .unwrap();
        assert!(new_master.master && !new_master.slots.is_empty());
        let info = |section: &str| server::command(replica.port, &format!("INFO {section}"));
        let errors = info("errorstats").unwrap_or_default();
        let commands = info("commandstats").unwrap_or_default();
        println!(
            "new master: {}, {}",
            errors
                .lines()
                .find(|l| l.starts_with("errorstat_NOSCRIPT"))
                .unwrap_or("no NOSCRIPT"),
            commands
                .lines()
                .find(|l| l.starts_with("cmdstat_script|load"))
                .unwrap_or("no SCRIPT LOAD"),
        );
        assert!(errors.contains("errorstat_NOSCRIPT"), "{errors}");
        assert!(commands.contains("cmdstat_script|load"), "{commands}");

        // Over-admission: the writes the old master acknowledged but had not replicated are
        // lost, so a key gets back what they took. The store then admits exactly what the
        // new master's state allows.
        let mut over = Vec::new();
        for k in &spent_keys {
            let left = spent.peek(k.clone()).await.unwrap().remaining;
            let mut admitted = 0;
            while spent.check(k.clone()).await.unwrap().allowed {
                admitted += 1;
                assert!(admitted <= SPENT_QUOTA, "more than the quota after the failover");
            }
            assert_eq!(admitted, left, "the new master's state decides");
            over.push(admitted);
        }
        println!(
            "over-admission after the failover, {SPENT_KEYS} keys whose quota of {SPENT_QUOTA} \
             was spent just before the kill: {} in all, per key {over:?}",
            over.iter().sum::<u64>()
        );
    });
}

fn main() -> std::process::ExitCode {
    server::harness(vec![server::needs_redis(
        "a_killed_master_is_replaced_without_a_restart",
        a_killed_master_is_replaced_without_a_restart,
    )])
}
