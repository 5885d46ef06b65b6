//! A fleet acts as one server for live quotas: servers (each its own `RedisStore`) on one
//! real Redis, deciding on one `ManualClock`.
//!
//! - A change through one server's handle (the layer's quotas, or a plan's) is in force on
//!   another within the stated time, measured with the test process's clock, and its clients
//!   keep what they used there (every small case).
//! - A server started after the change decides its first request by it.
//! - A change made while Redis is down holds on its server, and reaches the others once
//!   Redis answers; two changes racing through two servers end as one on both.
//! - With local leases, a change through another server never lets the fleet admit more
//!   than the quotas allow, across resets.
//! - What a server not yet changed admits under the old quotas, after a key was carried over
//!   on a server already changed, counts against the new quotas (through the fleet or by
//!   hand, one change or two in a row; and a property over random fleets and raises).

use crate::support::redis as server;
use crate::support::services;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use tollgate::clock::ManualClock;
use tollgate::key::{Header, RequestHead};
use tollgate::layer::Handle;
use tollgate::store::{Leases, OnFailure, RedisStore};
use tollgate::{Key, Quota, RateLimitLayer};
use tower::{Layer, ServiceExt};

use server::{needs_redis_async, RedisServer};

/// The bound the crate states for a change to reach every server (Redis's `Live quotas`):
/// 250 ms and three calls; the test allows the contract's 1 s.
const BOUND: Duration = Duration::from_secs(1);

type Svc = tower::util::BoxCloneService<
    Request<String>,
    Response<tollgate::layer::ResponseBody<String>>,
    std::convert::Infallible,
>;

/// A fresh prefix for one test's servers.
fn prefix() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("fleet{}", N.fetch_add(1, Ordering::Relaxed))
}

/// A server's store on `url` under `prefix`: its own connection, on the caller's clock.
async fn store(url: &str, prefix: &str) -> RedisStore {
    RedisStore::connect(url)
        .await
        .expect("redis connects")
        .with_caller_clock()
        .deny_cache(0)
        .on_failure(OnFailure::Closed)
        .timeout(Duration::from_millis(200))
        .prefix(prefix)
}

fn pro() -> Quota {
    Quota::per_minute(5).named("pro")
}

/// A server: `make` over 4 a minute named "api" (keys `pro-*` on the plan [`pro`]) on
/// `store`, keyed on `x-key`.
fn serve(
    make: fn(Quota) -> RateLimitLayer,
    store: RedisStore,
    clock: &ManualClock,
) -> (Handle, Svc) {
    let layer = make(Quota::per_minute(4).named("api"))
        .store(store)
        .key(Header::new("x-key"))
        .clock(clock.clone())
        .quota_for(|key: &Key, _: RequestHead<'_>| {
            if key.as_bytes().is_some_and(|k| k.starts_with(b"pro-")) {
                pro()
            } else {
                Quota::per_minute(4).named("api")
            }
        });
    let handle = layer.handle();
    (handle, Svc::new(layer.layer(services::ok())))
}

async fn admitted(svc: &Svc, key: &str, n: usize) -> usize {
    let mut passed = 0;
    for _ in 0..n {
        let req = Request::builder()
            .header("x-key", key)
            .body(String::new())
            .unwrap();
        passed += usize::from(svc.clone().oneshot(req).await.unwrap().status() == StatusCode::OK);
    }
    passed
}

/// A server of `make` with a store of its own on `redis` under `prefix`.
async fn server(
    make: fn(Quota) -> RateLimitLayer,
    redis: &RedisServer,
    prefix: &str,
    clock: &ManualClock,
) -> (Handle, Svc) {
    serve(make, store(&redis.url(), prefix).await, clock)
}

/// How long until `handle`'s quotas are `quota` (at most 2 s, else a panic saying `what`).
async fn sees(handle: &Handle, quota: Quota, what: &str) -> Duration {
    within(|| std::future::ready(handle.quotas() == std::slice::from_ref(&quota)))
        .await
        .expect(what)
}

/// Waits until `done` holds, asking every 10 ms for at most 2 s; how long it took, or `None`.
async fn within<F: Future<Output = bool>>(mut done: impl FnMut() -> F) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        if done().await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// A change through A is in force on B within the bound; the key keeps on B what it used on
/// A and B.
async fn a_change_through_one_server_reaches_another_in_time() {
    let redis = RedisServer::start().expect("redis-server");
    let (clock, prefix) = (ManualClock::new(), prefix());
    let (a, on_a) = server(RateLimitLayer::gcra, &redis, &prefix, &clock).await;
    let (b, on_b) = server(RateLimitLayer::gcra, &redis, &prefix, &clock).await;
    assert_eq!(admitted(&on_a, "k", 2).await, 2);
    assert_eq!(admitted(&on_b, "k", 1).await, 1);
    a.set_quotas(Quota::per_minute(10).named("api")).unwrap();
    let took = sees(
        &b,
        Quota::per_minute(10).named("api"),
        "B never saw the change",
    )
    .await;
    assert!(took <= BOUND, "B saw the change after {took:?}");
    assert_eq!(admitted(&on_b, "k", 10).await, 7, "3 used of 10");
    assert_eq!(admitted(&on_a, "k", 1).await, 0);
}

/// A server started after a change decides its very first request by it, and the key keeps
/// what it used before the change.
async fn a_server_started_later_starts_with_the_change() {
    let redis = RedisServer::start().expect("redis-server");
    let (clock, prefix) = (ManualClock::new(), prefix());
    let (a, on_a) = server(RateLimitLayer::gcra, &redis, &prefix, &clock).await;
    assert_eq!(admitted(&on_a, "k", 4).await, 4);
    a.set_quotas(Quota::per_minute(10).named("api")).unwrap();
    // Written by A's task: the first request of a server started now reads it.
    let written = within(|| {
        let url = redis.url();
        let prefix = prefix.clone();
        async move { raw_version(&url, &prefix).await > 0 }
    })
    .await;
    assert!(written.is_some(), "A never wrote the change");
    let (c, on_c) = server(RateLimitLayer::gcra, &redis, &prefix, &clock).await;
    assert_eq!(admitted(&on_c, "k", 10).await, 6, "4 used of 10");
    assert_eq!(c.quotas(), [Quota::per_minute(10).named("api")]);
}

/// The version of the record of the layer "api" under `prefix`.
async fn raw_version(url: &str, prefix: &str) -> u64 {
    let mut raw = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let version: Option<u64> = redis::cmd("HGET")
        .arg(format!("{prefix}:live:api"))
        .arg("v")
        .query_async(&mut raw)
        .await
        .unwrap();
    version.unwrap_or(0)
}

/// A plan's change through A reaches B in time; its clients keep what they used, and B's
/// `peek_plan` reports the plan's standing; a server started later has it too.
async fn a_plans_change_reaches_another_server() {
    let redis = RedisServer::start().expect("redis-server");
    let (clock, prefix) = (ManualClock::new(), prefix());
    let (a, on_a) = server(RateLimitLayer::fixed_window, &redis, &prefix, &clock).await;
    let (b, on_b) = server(RateLimitLayer::fixed_window, &redis, &prefix, &clock).await;
    assert_eq!(admitted(&on_b, "pro-1", 3).await, 3);
    assert_eq!(admitted(&on_a, "pro-1", 1).await, 1);
    let eight = Quota::per_minute(8).named("pro");
    a.set_plan_quotas(pro(), eight.clone()).unwrap();
    let took = within(|| std::future::ready(b.plan_quotas(pro()) == [eight.clone()]))
        .await
        .expect("B never saw the plan's change");
    assert!(took <= BOUND, "B saw the change after {took:?}");
    let seen = b.peek_plan(pro(), Key::from("pro-1")).await.unwrap();
    assert_eq!((seen.limit, seen.remaining), (8, 4));
    assert_eq!(admitted(&on_b, "pro-1", 10).await, 4);
    let (_, on_c) = server(RateLimitLayer::fixed_window, &redis, &prefix, &clock).await;
    assert_eq!(
        admitted(&on_c, "pro-2", 10).await,
        8,
        "a new client of the plan on C"
    );
    assert_eq!(
        admitted(&on_c, "k", 10).await,
        4,
        "the layer's own quotas stay"
    );
}

/// A server started after a plan's change decides the plan's very first request by it: a
/// client that used up the plan's new quota through A gets nothing more through C, even
/// while C has not read the fleet's record yet.
async fn a_server_started_later_starts_with_a_plans_change() {
    let redis = RedisServer::start().expect("redis-server");
    let (clock, prefix) = (ManualClock::new(), prefix());
    let (a, on_a) = server(RateLimitLayer::fixed_window, &redis, &prefix, &clock).await;
    let (b, _on_b) = server(RateLimitLayer::fixed_window, &redis, &prefix, &clock).await;
    let two = Quota::per_minute(2).named("pro");
    a.set_plan_quotas(pro(), two.clone()).unwrap();
    within(|| std::future::ready(b.plan_quotas(pro()) == [two.clone()]))
        .await
        .expect("the plan's change was never written");
    assert_eq!(admitted(&on_a, "pro-1", 5).await, 2, "2 of the new 2");
    let (_, on_c) = server(RateLimitLayer::fixed_window, &redis, &prefix, &clock).await;
    assert_eq!(
        admitted(&on_c, "pro-1", 5).await,
        0,
        "C's first requests decided by the plan's old quotas"
    );
}

/// Every small case: a key that used `used` of 4 a minute on B, moved through A to `to` a
/// minute, has on B what `to` leaves after `used`, never a fresh budget (GCRA, the fixed and
/// sliding windows).
async fn clients_keep_what_they_used_across_a_remote_change() {
    let redis = RedisServer::start().expect("redis-server");
    let makers: [fn(Quota) -> RateLimitLayer; 3] = [
        RateLimitLayer::gcra,
        RateLimitLayer::fixed_window,
        RateLimitLayer::sliding_window,
    ];
    for (m, make) in makers.into_iter().enumerate() {
        for used in 0..=4usize {
            for to in [2usize, 6] {
                let (clock, prefix) = (ManualClock::new(), prefix());
                let (a, _on_a) = server(make, &redis, &prefix, &clock).await;
                let (b, on_b) = server(make, &redis, &prefix, &clock).await;
                assert_eq!(admitted(&on_b, "k", used).await, used);
                let new = Quota::per_minute(to as u64).named("api");
                a.set_quotas(new.clone()).unwrap();
                sees(&b, new.clone(), "B never saw the change").await;
                let left = to.saturating_sub(used);
                assert_eq!(
                    admitted(&on_b, "k", 8).await,
                    left,
                    "algorithm {m}, used {used}, to {to}"
                );
            }
        }
    }
}

/// Redis down while A changes: A decides by the change, B keeps its quotas; once Redis
/// answers again, B has it.
async fn a_change_while_redis_is_down_reaches_the_fleet_once_it_answers() {
    let mut redis = RedisServer::start().expect("redis-server");
    let (clock, prefix) = (ManualClock::new(), prefix());
    let (a, on_a) = server(RateLimitLayer::gcra, &redis, &prefix, &clock).await;
    let (b, on_b) = server(RateLimitLayer::gcra, &redis, &prefix, &clock).await;
    assert_eq!(admitted(&on_a, "k", 1).await, 1);
    assert_eq!(admitted(&on_b, "k", 1).await, 1);
    redis.kill();
    let ten = Quota::per_minute(10).named("api");
    a.set_quotas(ten.clone()).unwrap();
    assert_eq!(a.quotas(), std::slice::from_ref(&ten));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        b.quotas(),
        [Quota::per_minute(4).named("api")],
        "B keeps its quotas"
    );
    redis.restart();
    let took = within(|| std::future::ready(b.quotas() == [ten.clone()])).await;
    assert!(
        took.is_some(),
        "B never saw the change made while Redis was down"
    );
}

/// Two changes racing through A and B end as one figure on both: the one Redis took last.
async fn two_racing_changes_converge() {
    let redis = RedisServer::start().expect("redis-server");
    for round in 0..5u64 {
        let (clock, prefix) = (ManualClock::new(), prefix());
        let (a, on_a) = server(RateLimitLayer::gcra, &redis, &prefix, &clock).await;
        let (b, on_b) = server(RateLimitLayer::gcra, &redis, &prefix, &clock).await;
        assert_eq!(
            admitted(&on_a, "k", 1).await + admitted(&on_b, "k", 1).await,
            2
        );
        a.set_quotas(Quota::per_minute(7 + round).named("api"))
            .unwrap();
        b.set_quotas(Quota::per_minute(20 + round).named("api"))
            .unwrap();
        let took = within(|| std::future::ready(a.quotas() == b.quotas()))
            .await
            .expect("A and B never agreed");
        assert!(took <= BOUND, "agreed after {took:?}");
        // They stay agreed, on one of the two.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(a.quotas(), b.quotas(), "round {round}");
        let figure = a.quotas()[0].limit();
        assert!(
            [7 + round, 20 + round].contains(&figure),
            "round {round}: {figure}"
        );
    }
}

/// With local leases on both servers, a fixed window of 60 a minute: slices taken on both,
/// then a change to 30 a minute through B, then a reset through A: the fleet admits, in the
/// window, at most what the quotas allow (30 once changed, 30 again after the reset).
async fn leases_never_over_admit_across_a_remote_change() {
    let redis = RedisServer::start().expect("redis-server");
    let (clock, prefix) = (ManualClock::new(), prefix());
    let leasing = |store: RedisStore| store.local_leases(Leases::default());
    let (a, on_a) = serve(
        RateLimitLayer::fixed_window,
        leasing(store(&redis.url(), &prefix).await),
        &clock,
    );
    let (b, on_b) = serve(
        RateLimitLayer::fixed_window,
        leasing(store(&redis.url(), &prefix).await),
        &clock,
    );
    a.set_quotas(Quota::per_minute(60).named("api")).unwrap();
    sees(
        &b,
        Quota::per_minute(60).named("api"),
        "B never saw 60 a minute",
    )
    .await;
    let mut used = 0;
    for _ in 0..10 {
        used += admitted(&on_a, "k", 1).await + admitted(&on_b, "k", 1).await;
    }
    assert_eq!(used, 20);
    let thirty = Quota::per_minute(30).named("api");
    b.set_quotas(thirty.clone()).unwrap();
    sees(&a, thirty.clone(), "A never saw 30 a minute").await;
    let mut more = 0;
    for _ in 0..40 {
        more += admitted(&on_a, "k", 1).await + admitted(&on_b, "k", 1).await;
    }
    assert!(more <= 10, "admitted {more} after 20 of 30 were used");
    a.reset(Key::from("k")).await.unwrap();
    clock.advance(Duration::from_secs(2));
    let mut fresh = 0;
    for _ in 0..40 {
        fresh += admitted(&on_a, "k", 1).await + admitted(&on_b, "k", 1).await;
    }
    assert!(fresh <= 30, "admitted {fresh} of 30 after the reset");
}

/// A property over random fleets, with local leases or without (2 or 3 servers, a fixed
/// window of one minute, time standing still): requests on any server, quota raises and
/// blocks through any server (each change made once the previous one reached every server,
/// with requests on every server while it is on its way). Whatever the order, the fleet
/// admits in the window at most the latest quota; once every server has it, at most that
/// quota or what was used before it. (A lower quota caps what a key carries over at what it
/// allows at once, so a raise after it may let a key use more than any one quota.)
async fn a_fleet_never_over_admits_across_remote_raises() {
    raises_never_over_admit(RateLimitLayer::fixed_window).await;
}

/// The same for the other algorithms a key's usage is carried over by (time standing still,
/// each admits at most its quota's burst, the quota here).
async fn other_algorithms_never_over_admit_across_remote_raises() {
    for make in [
        RateLimitLayer::gcra as fn(Quota) -> RateLimitLayer,
        RateLimitLayer::sliding_window,
        RateLimitLayer::sliding_log,
        RateLimitLayer::token_bucket,
    ] {
        raises_never_over_admit(make).await;
    }
}

async fn raises_never_over_admit(make: fn(Quota) -> RateLimitLayer) {
    let redis = RedisServer::start().expect("redis-server");
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut below = |n: u64| {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    };
    for case in 0..8 {
        let (clock, prefix) = (ManualClock::new(), prefix());
        let (servers, leasing) = (2 + below(2) as usize, case % 2 == 1);
        let mut fleet = Vec::new();
        for _ in 0..servers {
            let store = store(&redis.url(), &prefix).await;
            let store = if leasing {
                store.local_leases(Leases::default())
            } else {
                store
            };
            fleet.push(serve(make, store, &clock));
        }
        let limit = |n: u64| Quota::per_minute(n).named("api");
        let (mut total, mut latest) = (0u64, 4u64);
        let mut steps = Vec::new();
        for _ in 0..60 {
            let at = below(servers as u64) as usize;
            match below(10) {
                0 => {
                    let n = latest.max([3, 8, 12, 20][below(4) as usize]);
                    fleet[at].0.set_quotas(limit(n)).unwrap();
                    latest = n;
                    steps.push(format!("change to {n} through {at}"));
                    // Requests on the others meanwhile (the change on its way to them).
                    for (_, other) in &fleet {
                        total += admitted(other, "k", 1).await as u64;
                    }
                    // The next change is made once this one reached every server (changes
                    // racing through two servers are `two_racing_changes_converge`).
                    for (handle, _) in &fleet {
                        sees(handle, limit(n), "a server never saw the change").await;
                    }
                }
                1 => {
                    let key = ["k", "other"][below(2) as usize];
                    fleet[at]
                        .0
                        .block(Key::from(key), Duration::from_millis(1))
                        .await
                        .unwrap();
                    steps.push(format!("block {key} through {at}"));
                }
                2 => {
                    for (handle, _) in &fleet {
                        sees(
                            handle,
                            limit(latest),
                            "a server never saw the latest change",
                        )
                        .await;
                    }
                    let used = total;
                    let mut more = 0;
                    for round in 0..30 {
                        more += admitted(&fleet[round % servers].1, "k", 1).await as u64;
                    }
                    total += more;
                    assert!(
                        used + more <= latest.max(used),
                        "case {case}: {more} more after {used} under {latest}: {steps:?}"
                    );
                    steps.push(format!("settled at {latest}: {more} more"));
                }
                _ => {
                    total += admitted(&fleet[at].1, "k", 1).await as u64;
                    steps.push(format!("request on {at}"));
                }
            }
            assert!(
                total <= latest,
                "case {case}: {total} admitted, the latest quota {latest}: {steps:?}"
            );
        }
    }
}

/// `handle`'s quotas are still 4 a minute: a request just made there was decided by them.
fn unchanged(handle: &Handle, what: &str) {
    assert_eq!(
        handle.quotas(),
        [Quota::per_minute(4).named("api")],
        "{what}"
    );
}

/// A runtime that runs only while the test drives it ([`Held::run`]): a server whose first
/// request is made here has its fleet task here, so that it reads the record only when the
/// test lets it, and stays a change behind for as long as the test needs (on a loaded machine
/// a task that polls every 250 ms could otherwise catch up between any two steps).
struct Held(Option<std::sync::Arc<tokio::runtime::Runtime>>);

impl Held {
    fn new() -> Self {
        Self(Some(std::sync::Arc::new(server::runtime())))
    }

    /// Runs the work `work` makes to its end on the held runtime, its tasks with it, then
    /// holds them again.
    async fn run<T: Send + 'static, F: Future<Output = T>>(
        &self,
        work: impl FnOnce() -> F + Send + 'static,
    ) -> T {
        let runtime = self.0.clone().expect("a held runtime");
        tokio::task::spawn_blocking(move || runtime.block_on(work()))
            .await
            .expect("the held runtime's work ends")
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take().and_then(std::sync::Arc::into_inner) {
            runtime.shutdown_background();
        }
    }
}

/// A server of `make` on `redis` under `prefix` built on `held`, its fleet task with it; its
/// store connects on the caller's runtime, so that its requests run on either.
async fn server_on(
    held: &Held,
    make: fn(Quota) -> RateLimitLayer,
    redis: &RedisServer,
    prefix: &str,
    clock: &ManualClock,
) -> (Handle, Svc) {
    let (store, clock) = (store(&redis.url(), prefix).await, clock.clone());
    held.run(move || async move { serve(make, store, &clock) })
        .await
}

/// `n` requests of `key` through `svc`, run on `held`.
async fn admitted_on(held: &Held, svc: &Svc, key: &'static str, n: usize) -> usize {
    let svc = svc.clone();
    held.run(move || async move { admitted(&svc, key, n).await })
        .await
}

/// Drives `held` until `handle`'s quotas are `quota` (at most 2 s, else a panic saying `what`).
async fn sees_on(held: &Held, handle: &Handle, quota: Quota, what: &'static str) -> Duration {
    let handle = handle.clone();
    held.run(move || async move { sees(&handle, quota, what).await })
        .await
}

/// A key carried over on A (changed) while B (not yet changed) keeps admitting under the old
/// quotas: once B changes, the fleet has admitted in the window at most the new quota
/// (4 -> 12 a minute, a fixed window; B's admissions after A's carry-over count too).
async fn admissions_under_the_old_quotas_after_a_carry_over_count() {
    let redis = RedisServer::start().expect("redis-server");
    let (clock, prefix) = (ManualClock::new(), prefix());
    let (a, on_a) = server(RateLimitLayer::fixed_window, &redis, &prefix, &clock).await;
    let held = Held::new();
    let (b, on_b) = server_on(&held, RateLimitLayer::fixed_window, &redis, &prefix, &clock).await;
    assert_eq!(admitted_on(&held, &on_b, "k", 2).await, 2);
    let twelve = Quota::per_minute(12).named("api");
    a.set_quotas(twelve.clone()).unwrap();
    assert_eq!(admitted(&on_a, "k", 1).await, 1, "carried 2 of 12 on A");
    assert_eq!(admitted(&on_b, "k", 1).await, 1, "3 of 4 on B");
    unchanged(&b, "B changed too soon");
    sees_on(&held, &b, twelve, "B never saw 12 a minute").await;
    let more = admitted(&on_b, "k", 10).await + admitted(&on_a, "k", 10).await;
    assert_eq!(more, 8, "4 used of 12 (2 + 1 on B, 1 on A)");
}

/// The same with quotas changed by hand on each server (each its own `set_quotas`), and a
/// second change: 4 -> 12 -> 20 a minute, B a change behind A each time.
async fn admissions_behind_two_changes_made_by_hand_count() {
    let redis = RedisServer::start().expect("redis-server");
    let (clock, prefix) = (ManualClock::new(), prefix());
    let (a, on_a) = server(RateLimitLayer::fixed_window, &redis, &prefix, &clock).await;
    let held = Held::new();
    let (b, on_b) = server_on(&held, RateLimitLayer::fixed_window, &redis, &prefix, &clock).await;
    let mut total = admitted(&on_a, "k", 3).await + admitted_on(&held, &on_b, "k", 1).await;
    assert_eq!(total, 4);
    for to in [12, 20] {
        let quotas = Quota::per_minute(to).named("api");
        a.set_quotas(quotas.clone()).unwrap();
        total += admitted(&on_a, "k", 1).await;
        let behind = b.quotas().to_vec();
        total += admitted(&on_b, "k", 1).await;
        assert_eq!(b.quotas(), behind, "B changed too soon");
        b.set_quotas(quotas.clone()).unwrap();
        // B's task writes B's change, and A, reading it, keeps the same quotas.
        sees_on(&held, &b, quotas.clone(), "B lost its change").await;
        sees(&a, quotas.clone(), "A lost the change").await;
    }
    assert_eq!(total, 7, "4, then A 1 + 1, B 1 (under 12)");
    total += admitted(&on_a, "k", 10).await + admitted(&on_b, "k", 10).await;
    assert_eq!(total, 20, "the fleet admitted {total} of 20");
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        needs_redis_async(
            "admissions_under_the_old_quotas_after_a_carry_over_count",
            admissions_under_the_old_quotas_after_a_carry_over_count,
        ),
        needs_redis_async(
            "admissions_behind_two_changes_made_by_hand_count",
            admissions_behind_two_changes_made_by_hand_count,
        ),
        needs_redis_async(
            "a_fleet_never_over_admits_across_remote_raises",
            a_fleet_never_over_admits_across_remote_raises,
        ),
        needs_redis_async(
            "other_algorithms_never_over_admit_across_remote_raises",
            other_algorithms_never_over_admit_across_remote_raises,
        ),
        needs_redis_async(
            "a_change_through_one_server_reaches_another_in_time",
            a_change_through_one_server_reaches_another_in_time,
        ),
        needs_redis_async(
            "a_server_started_later_starts_with_the_change",
            a_server_started_later_starts_with_the_change,
        ),
        needs_redis_async(
            "a_plans_change_reaches_another_server",
            a_plans_change_reaches_another_server,
        ),
        needs_redis_async(
            "a_server_started_later_starts_with_a_plans_change",
            a_server_started_later_starts_with_a_plans_change,
        ),
        needs_redis_async(
            "clients_keep_what_they_used_across_a_remote_change",
            clients_keep_what_they_used_across_a_remote_change,
        ),
        needs_redis_async(
            "a_change_while_redis_is_down_reaches_the_fleet_once_it_answers",
            a_change_while_redis_is_down_reaches_the_fleet_once_it_answers,
        ),
        needs_redis_async("two_racing_changes_converge", two_racing_changes_converge),
        needs_redis_async(
            "leases_never_over_admit_across_a_remote_change",
            leases_never_over_admit_across_a_remote_change,
        ),
    ]
}
