//! A Redis Cluster master that is down is answered at once by the failure policy for the keys
//! of its slots, while the other masters go on deciding theirs exactly: a killed master
//! (refused connections) and a frozen one (calls time out), on a cluster of three masters
//! without replicas; back on Redis within 1 s of the master answering again.
//!
//! The cluster runs with `cluster-require-full-coverage no`, so that the other masters keep
//! answering should the cluster mark the lost master failed (after its 5 s node timeout) on
//! this busy machine.

use crate::support::redis as server;

use std::time::{Duration, Instant};

use server::RedisCluster;
use tollgate::algorithm::Gcra;
use tollgate::store::{MemoryStore, OnFailure, RedisStore};
use tollgate::{Error, ErrorKind, Key, Quota, RateLimiter};

type Limiter = RateLimiter<Gcra, RedisStore>;

/// Each call's bound: far above a check's time, so that a check that waits for it shows.
const TIMEOUT: Duration = Duration::from_millis(200);

/// Two worker threads: the store's probes and watch run on them while a test blocks its own
/// thread (restarting a node, waiting for it).
fn runtime() -> tokio::runtime::Runtime {
    server::runtime_two_workers()
}

/// One store on a fresh cluster, and two policies over it (3 an hour): failing closed (an
/// `Ok` is Redis's decision) and to a local table.
struct Setup {
    cluster: RedisCluster,
    closed: Limiter,
    local: Limiter,
    /// The master lost, and keys of its slots.
    victim: u16,
    lost: Vec<Key>,
    /// Keys of the other masters' slots: three on each.
    others: Vec<Key>,
}

impl Setup {
    fn victim(&mut self) -> &mut server::RedisServer {
        self.cluster.node(self.victim)
    }
}

async fn setup() -> Option<Setup> {
    let cluster = RedisCluster::start_with(&["--cluster-require-full-coverage", "no"])?;
    let store = RedisStore::cluster(cluster.urls())
        .await
        .unwrap()
        .timeout(TIMEOUT)
        .on_failure(OnFailure::Closed);
    let quota = |name: &str| Quota::per_hour(3).named(name);
    let closed = RateLimiter::gcra(quota("closed")).with_store(store.clone());
    let local = RateLimiter::gcra(quota("local"))
        .with_store(store.on_failure(OnFailure::Local(MemoryStore::new())));
    let slot = |key: &Key| cluster.slot(&closed.table().redis_keys(key).remove(0));
    let key = |n: usize| Key::from(format!("user-{n}"));
    let victim = cluster.master_of(slot(&key(0)));
    let mut lost = Vec::new();
    let mut others: Vec<(u16, Key)> = Vec::new();
    for n in 0..120 {
        let k = key(n);
        let s = slot(&k);
        let local_slot = cluster.slot(&local.table().redis_keys(&k).remove(0));
        assert_eq!(s, local_slot, "a key's slot is its hash tag's");
        if victim.serves(s) {
            lost.push(k);
        } else {
            let port = cluster.master_of(s).port;
            if others.iter().filter(|(p, _)| *p == port).count() < 3 {
                others.push((port, k));
            }
        }
    }
    assert!(lost.len() >= 10, "{} of 120 keys on one master", lost.len());
    assert_eq!(
        others.len(),
        6,
        "three keys on each other master: {others:?}"
    );
    // Redis decides on every master before the loss.
    for k in [&lost[0], &others[0].1, &others[5].1] {
        assert!(closed.check(k.clone()).await.unwrap().allowed);
    }
    Some(Setup {
        victim: victim.port,
        cluster,
        closed,
        local,
        lost,
        others: others.into_iter().map(|(_, k)| k).collect(),
    })
}

/// An error answered while the store knows the master on `port` is down: `Unreachable`,
/// naming the master, saying that the failure policy answers until it answers a probe.
fn assert_down_error(error: &Error, port: u16) {
    let text = error.to_string();
    assert!(
        error.kind() == ErrorKind::Unreachable
            && text.contains(&format!("master at 127.0.0.1:{port} is down"))
            && text.contains("failure policy")
            && text.contains("probe"),
        "{:?}: {text}",
        error.kind()
    );
}

/// The other masters decide their keys exactly: 3 an hour admits three, denies the fourth,
/// each decision Redis's (the policy fails closed).
async fn others_decide_exactly(setup: &Setup, name: &str) {
    let limiter =
        RateLimiter::gcra(Quota::per_hour(3).named(name)).with_store(setup.closed.store().clone());
    for k in &setup.others {
        for n in 0..3 {
            let d = limiter.check(k.clone()).await.unwrap();
            assert!(d.allowed, "check {n} of a live master's key: {d:?}");
        }
        let d = limiter.check(k.clone()).await.unwrap();
        assert!(!d.allowed, "the fourth is denied by Redis: {d:?}");
    }
}

/// Checks on `limiter` for `key` until one answers in less than `fast`; how many it took (at
/// most `within`).
async fn until_fast(limiter: &Limiter, key: &Key, fast: Duration, within: usize) -> usize {
    for n in 1..=within {
        let started = Instant::now();
        let _ = limiter.check(key.clone()).await;
        if started.elapsed() < fast {
            return n;
        }
    }
    panic!("no check answered within {fast:?} in {within} checks: the master never known down");
}

/// Checks `key` every 10 ms until Redis decides one (failing closed, `Ok` is Redis's); how
/// long that took.
async fn until_back(limiter: &Limiter, key: &Key, within: Duration) -> Duration {
    let started = Instant::now();
    while started.elapsed() < within {
        if limiter.check(key.clone()).await.is_ok() {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("Redis decided no check of the master's keys within {within:?} of it answering");
}

/// Waits until the node on `port` serves its slots (`cluster_state:ok`: a master refuses every
/// key for 2 s after it restarts).
fn serving(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server::command(port, "CLUSTER INFO").is_some_and(|r| r.contains("cluster_state:ok")) {
        assert!(
            Instant::now() < deadline,
            "the restarted node did not serve within 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// 1. A killed master: 50 checks of its keys take well under one timeout each (under 1 s in
///    all, five timeouts), the closed policy's errors saying why, the local table limiting
///    them on its own; the other masters decide exactly; back within 1 s of the restarted
///    master serving its slots.
fn a_killed_master_is_answered_at_once() {
    runtime().block_on(async {
        let Some(mut setup) = setup().await else {
            return;
        };
        setup.cluster.node(setup.victim).kill();

        let started = Instant::now();
        let mut errors = Vec::new();
        for k in setup.lost.iter().cycle().take(50) {
            errors.push(setup.closed.check(k.clone()).await.unwrap_err());
        }
        let took = started.elapsed();
        println!("kill: 50 checks of the lost master's keys took {took:?}");
        assert!(
            took < Duration::from_secs(1),
            "50 closed checks took {took:?}"
        );
        for error in &errors {
            let kind = error.kind();
            assert!(
                matches!(kind, ErrorKind::Unreachable | ErrorKind::Timeout),
                "{error}"
            );
        }
        assert_down_error(&errors[49], setup.victim);

        // Shared by the store's other tables: answered at once from the first check, and
        // limited by the local table (3 an hour).
        let started = Instant::now();
        let mut admitted = Vec::new();
        for _ in 0..50 {
            admitted.push(
                setup
                    .local
                    .check(setup.lost[1].clone())
                    .await
                    .unwrap()
                    .allowed,
            );
        }
        let took = started.elapsed();
        assert!(took < TIMEOUT, "50 local checks took {took:?}");
        assert_eq!(admitted.iter().filter(|a| **a).count(), 3, "{admitted:?}");
        assert!(admitted[..3].iter().all(|a| *a), "{admitted:?}");

        others_decide_exactly(&setup, "others-kill").await;

        let victim = setup.victim;
        tokio::task::block_in_place(|| {
            setup.cluster.node(victim).restart();
            serving(victim);
        });
        let took = until_back(&setup.closed, &setup.lost[2], Duration::from_secs(5)).await;
        println!("kill: Redis decided the master's keys again {took:?} after it served them");
        assert!(took <= Duration::from_secs(1), "back after {took:?}");
        // Every lost key is decided by Redis again, the other masters' still are.
        for k in &setup.lost {
            assert!(setup.closed.check(k.clone()).await.is_ok());
        }
        others_decide_exactly(&setup, "others-after-kill").await;
    });
}

/// 2. A frozen master (its connections open, nothing answers): after a few calls time out in
///    a row, checks of its keys are answered at once, and resets and blocks of them do not
///    wait either; the other masters decide exactly; back within 1 s of it going on.
fn a_frozen_master_is_answered_at_once_once_known() {
    runtime().block_on(async {
        let Some(mut setup) = setup().await else {
            return;
        };
        setup.victim().pause();
        let lost = setup.lost.clone();

        let first = setup.closed.check(lost[0].clone()).await.unwrap_err();
        assert_eq!(
            first.kind(),
            ErrorKind::Timeout,
            "one timeout is only a timeout: {first}"
        );
        let tripped = until_fast(&setup.closed, &lost[0], Duration::from_millis(50), 10).await;
        println!("freeze: answered at once after {tripped} calls timed out in a row");
        let started = Instant::now();
        for k in lost.iter().cycle().take(50) {
            assert_down_error(
                &setup.closed.check(k.clone()).await.unwrap_err(),
                setup.victim,
            );
        }
        let took = started.elapsed();
        assert!(
            took < TIMEOUT,
            "50 checks took {took:?}, a timeout is {TIMEOUT:?}"
        );

        let started = Instant::now();
        assert!(setup
            .local
            .block(lost[1].clone(), Duration::from_secs(60))
            .await
            .is_err());
        assert!(setup.local.reset(lost[2].clone()).await.is_err());
        let took = started.elapsed();
        assert!(took < TIMEOUT, "a reset and a block took {took:?}");
        assert!(
            !setup.local.check(lost[1].clone()).await.unwrap().allowed,
            "the block holds in the local fallback"
        );

        others_decide_exactly(&setup, "others-freeze").await;

        setup.victim().resume();
        let took = until_back(&setup.closed, &lost[3], Duration::from_secs(5)).await;
        println!("freeze: Redis decided the master's keys again {took:?} after SIGCONT");
        assert!(took <= Duration::from_secs(1), "back after {took:?}");
        others_decide_exactly(&setup, "others-after-freeze").await;
    });
}

/// How many `CLUSTER SLOTS` the nodes other than `victim` ran: a probe of a down master reads
/// the slot map from every node it knows, each probe.
fn slot_map_reads(cluster: &RedisCluster, victim: u16) -> u64 {
    cluster
        .nodes
        .iter()
        .filter(|node| node.port != victim)
        .map(|node| node.calls("cluster|slots"))
        .sum()
}

/// 3. A store dropped while a master is down leaves no probe behind: the probe's reads of the
///    slot map, one round every 200 ms while the master is down, stop once the last clone of
///    the store is gone (a probe that kept the store's connection would run for the life of
///    the process).
fn a_store_dropped_while_a_master_is_down_leaves_no_probe_behind() {
    runtime().block_on(async {
        let Some(mut setup) = setup().await else {
            return;
        };
        let victim = setup.victim;
        setup.victim().kill();
        until_fast(&setup.closed, &setup.lost[0], TIMEOUT / 4, 10).await;

        // Probing: the other nodes are asked for the slot map.
        let probing = slot_map_reads(&setup.cluster, victim);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let read = slot_map_reads(&setup.cluster, victim) - probing;
        assert!(
            read >= 2,
            "{read} slot map reads in 1 s while the master was down"
        );

        let Setup {
            cluster,
            closed,
            local,
            ..
        } = setup;
        drop((closed, local));
        // A probe under way when the store went ends with it; none starts after.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let gone = slot_map_reads(&cluster, victim);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let after = slot_map_reads(&cluster, victim) - gone;
        assert_eq!(
            after, 0,
            "slot map reads in the 1 s after the store was dropped"
        );
    });
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis(
            "a_killed_master_is_answered_at_once",
            a_killed_master_is_answered_at_once,
        ),
        server::needs_redis(
            "a_frozen_master_is_answered_at_once_once_known",
            a_frozen_master_is_answered_at_once_once_known,
        ),
        server::needs_redis(
            "a_store_dropped_while_a_master_is_down_leaves_no_probe_behind",
            a_store_dropped_while_a_master_is_down_leaves_no_probe_behind,
        ),
    ]
}
