//! Local leases on a real `redis-server`: a fleet of stores (each its own connection and
//! tables, as separate servers) deciding one hot key, with slices of its budget spent locally.
//!
//! - Whatever the fleet admits, in any order of servers, costs, refunds and clock moves, the
//!   algorithm itself admits: every admission is replayed, in order, through the in-memory
//!   limiter of the same quotas, and each must pass there too (fixed and sliding windows, tiers
//!   of them).
//! - Under the quota (90 %, sent evenly from 4 servers), at least 99 % of requests pass, and
//!   Redis runs at least ten times fewer scripts than there are decisions.
//! - Algorithms that do not lease are decided exactly, one script per decision.
//! - Blocks and resets: through the server holding a slice they end it at once; through
//!   another they reach it when the slice ends, within `max_life`.
//! - The book of leased keys stays within its bound however many keys are sprayed.

use crate::support::http as web;
use crate::support::redis as server;
use crate::support::rng::Rng;

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::redis::RedisAlgorithm;
use tollgate::store::{Leases, MemoryStore, RedisStore};
use tollgate::{Decision, Quota, RateLimiter};

type Fleet<A> = Vec<RateLimiter<A, RedisStore, ManualClock>>;

/// `servers` stores on `url`, each its own connection (as separate servers), deciding on the
/// caller's clock, with `leases`.
async fn fleet<A>(
    url: &str,
    servers: usize,
    leases: &Leases,
    clock: &ManualClock,
    template: &RateLimiter<A>,
) -> Fleet<A>
where
    A: RedisAlgorithm,
{
    let leases = vec![Some(leases.clone()); servers];
    mixed_fleet(url, &leases, clock, template).await
}

/// A store on `url` per entry of `leases` (each its own connection, as separate servers),
/// deciding on the caller's clock, with those leases or (`None`) without.
async fn mixed_fleet<A>(
    url: &str,
    leases: &[Option<Leases>],
    clock: &ManualClock,
    template: &RateLimiter<A>,
) -> Fleet<A>
where
    A: RedisAlgorithm,
{
    let mut fleet = Vec::new();
    for leases in leases {
        // A long timeout: the machine may be busy, and a timeout here would only fail the test.
        let mut store = server::closed_on_caller_clock(url)
            .await
            .timeout(Duration::from_secs(5));
        if let Some(leases) = leases {
            store = store.local_leases(leases.clone());
        }
        fleet.push(template.clone().with_clock(clock.clone()).with_store(store));
    }
    fleet
}

/// One admission of the fleet and the oracle's of the same request, kept for a refund.
struct Admitted {
    server: usize,
    cost: u64,
    fleet: Decision,
    oracle: Decision,
}

/// Runs `steps` random steps of the fleet on one key, replaying every admission (and refund,
/// with `refunds`) through `oracle`: each admission must pass there too. Returns how many the
/// fleet admitted.
#[allow(clippy::too_many_arguments)]
async fn replay<A>(
    rng: &mut Rng,
    fleet: &Fleet<A>,
    oracle: &RateLimiter<A, MemoryStore, ManualClock>,
    clock: &ManualClock,
    period: Duration,
    steps: usize,
    refunds: bool,
    label: &str,
) -> (usize, usize)
where
    A: RedisAlgorithm,
{
    let key = "hot";
    let mut admitted: Vec<Admitted> = Vec::new();
    let (mut count, mut checks) = (0, 0);
    let nanos = u64::try_from(period.as_nanos()).unwrap();
    // A check of `cost` on `server`; an admission is replayed through the oracle, where it
    // must pass too. Whether it was admitted.
    macro_rules! check {
        ($step:expr, $server:expr, $cost:expr, $what:expr) => {{
            let (server, cost) = ($server, $cost);
            checks += 1;
            let decision = fleet[server]
                .check_n(key, cost)
                .await
                .unwrap_or_else(|e| panic!("{label}: check at step {}: {e}", $step));
            let allowed = decision.allowed;
            if allowed {
                let replayed = oracle.check_n(key, cost).await.unwrap();
                assert!(
                    replayed.allowed,
                    "{label}: step {}: server {server} admitted a request of cost {cost} ({}) \
                     that the algorithm denies given every earlier admission ({replayed:?})",
                    $step, $what
                );
                count += 1;
                admitted.push(Admitted {
                    server,
                    cost,
                    fleet: decision,
                    oracle: replayed,
                });
            }
            allowed
        }};
    }
    let pick = |rng: &mut Rng| usize::try_from(rng.below(fleet.len() as u64)).unwrap();
    for step in 0..steps {
        match rng.below(20) {
            // Time moves: not at all, a little, about a bucket's slice life, or up to half a
            // period.
            0..=5 => {
                let dt = match rng.below(4) {
                    0 => rng.below(1_000),
                    1 => rng.below(nanos / 40 + 1),
                    2 => rng.below(nanos / 12 + 1),
                    _ => rng.below(nanos / 2 + 1),
                };
                clock.advance(Duration::from_nanos(dt));
            }
            // One server takes all it can at once (up to 64), as a client that found the key
            // elsewhere emptied would: what slices held meanwhile must still fit.
            8 => {
                let server = pick(rng);
                for _ in 0..64 {
                    if !check!(step, server, 1, "taking all it can") {
                        break;
                    }
                }
            }
            // The attack on a bucket's slices: once the key has drained (a period; a bucket's
            // burst window), one server takes a slice (two checks at once), keeps it while
            // time moves up to a bucket's slice life, another server takes all it can, and
            // then the first spends what it can.
            9 => {
                let (holder, other) = (pick(rng), pick(rng));
                clock.advance(period);
                check!(step, holder, 1, "taking a slice");
                check!(step, holder, 1, "taking a slice");
                clock.advance(Duration::from_nanos(rng.below(nanos / 16 + 1)));
                for _ in 0..64 {
                    if !check!(step, other, 1, "filling the key elsewhere") {
                        break;
                    }
                }
                for _ in 0..64 {
                    if !check!(step, holder, 1, "spending a slice kept") {
                        break;
                    }
                }
            }
            // A refund (count_if) of an admission not refunded yet.
            6..=7 if refunds && !admitted.is_empty() => {
                let at = usize::try_from(rng.below(admitted.len() as u64)).unwrap();
                let a = admitted.swap_remove(at);
                fleet[a.server]
                    .refund(key, &a.fleet, a.cost)
                    .await
                    .unwrap_or_else(|e| panic!("{label}: refund at step {step}: {e}"));
                oracle.refund(key, &a.oracle, a.cost).await.unwrap();
            }
            _ => {
                let server = pick(rng);
                let cost = if rng.below(6) == 0 {
                    1 + rng.below(3)
                } else {
                    1
                };
                check!(step, server, cost, "a check");
            }
        }
    }
    (count, checks)
}

/// Random leases: small slices and shares, lives short and long.
fn leases(rng: &mut Rng) -> Leases {
    let life = [
        Duration::from_millis(30),
        Duration::from_millis(400),
        Duration::from_secs(60),
    ][usize::try_from(rng.below(3)).unwrap()];
    Leases::default()
        .max_slice(1 + rng.below(12))
        .share(1 + rng.below(4))
        .max_life(life)
}

/// Makes a case's limiter (of quotas named by the string) and the period its time moves by.
type Build<'a, A> = dyn Fn(&mut Rng, String) -> (RateLimiter<A>, Duration) + 'a;

/// Runs `cases` random cases of one kind of algorithm, each with its own policy name; returns
/// how many the fleet admitted. Slices must have been spent: the fleet ran fewer scripts than
/// it made checks.
async fn cases<A>(
    server: &server::RedisServer,
    kind: &str,
    seed: u64,
    cases: u64,
    build: &Build<'_, A>,
) -> usize
where
    A: RedisAlgorithm,
{
    let url = &server.url();
    let before = server.calls("evalsha");
    let (mut total, mut checks) = (0, 0);
    for case in 0..cases {
        let seed = seed.wrapping_add(case).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut rng = Rng(seed);
        let name = format!("{kind}-{case}");
        let (template, period) = build(&mut rng, name);
        let leases = leases(&mut rng);
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(1_000));
        let servers = 1 + usize::try_from(rng.below(4)).unwrap();
        // A server in four decides without leases: what the others' slices leave in the state
        // (a bucket's lease margin) holds for it too.
        let each: Vec<Option<Leases>> = (0..servers)
            .map(|_| (rng.below(4) != 0).then(|| leases.clone()))
            .collect();
        let fleet = mixed_fleet(url, &each, &clock, &template).await;
        // Refunds, in half the cases: each server's table is told first, as a layer with
        // count_if does where it is built (windows that a refund may start again then stop
        // leasing; calendar windows lease on).
        let refunds = rng.below(2) == 0;
        if refunds {
            for limiter in &fleet {
                limiter.table().expect_refunds();
            }
        }
        let oracle = template.with_clock(clock.clone());
        let plain = each.iter().filter(|l| l.is_none()).count();
        let label = format!(
            "{kind} case {case} (seed {seed:#x}, {servers} servers of which {plain} without \
             leases, refunds {refunds}, {leases:?})"
        );
        let (admitted, checked) = replay(
            &mut rng, &fleet, &oracle, &clock, period, 160, refunds, &label,
        )
        .await;
        total += admitted;
        checks += checked;
    }
    let scripts = server.calls("evalsha") - before;
    eprintln!("{kind}: {total} admitted of {checks} checks, {scripts} scripts");
    assert!(
        scripts * 10 < u64::try_from(checks).unwrap() * 9,
        "{kind}: {scripts} scripts for {checks} checks: few slices were spent"
    );
    total
}

fn the_fleet_admits_only_what_the_algorithm_admits() {
    let server = server::RedisServer::start().expect("redis-server");
    server::runtime().block_on(async {
        let quota = |rng: &mut Rng, name: String| {
            let limit = 2 + rng.below(30);
            let period = Duration::from_millis(200 + rng.below(3_000));
            (Quota::new(limit, period).named(name), period)
        };
        let mut admitted = 0;
        admitted += cases(&server, "fixed", 1, 40, &|rng, name| {
            let (q, period) = quota(rng, name);
            (RateLimiter::fixed_window(q), period)
        })
        .await;
        admitted += cases(&server, "fixed-aligned", 5, 40, &|rng, name| {
            let (q, period) = quota(rng, name);
            (RateLimiter::fixed_window(q).aligned(), period)
        })
        .await;
        admitted += cases(&server, "sliding", 2, 40, &|rng, name| {
            let (q, period) = quota(rng, name);
            let k = 1 + usize::try_from(rng.below(4)).unwrap();
            (RateLimiter::sliding_window(q).sub_windows(k), period)
        })
        .await;
        admitted += cases(&server, "fixed-tiers", 3, 25, &|rng, name| {
            let (a, period) = quota(rng, format!("{name}-a"));
            let (b, _) = quota(rng, format!("{name}-b"));
            let b = Quota::new(b.limit() * 3, period * 4).named(name);
            (RateLimiter::fixed_window([a, b]), period)
        })
        .await;
        admitted += cases(&server, "sliding-tiers", 4, 25, &|rng, name| {
            let (a, period) = quota(rng, format!("{name}-a"));
            let (b, _) = quota(rng, format!("{name}-b"));
            let b = Quota::new(b.limit() * 3, period * 4).named(name);
            (RateLimiter::sliding_window([a, b]), period)
        })
        .await;
        // Buckets: bursts from 1 to 96, so margins from a fraction of a unit to 6. Time moves by the burst window (`burst × period / limit`), of
        // which a slice lives a sixteenth: its small moves are about a slice's life, and
        // take a slice past the moment the bucket filled elsewhere.
        let bucket = |rng: &mut Rng, name: String| {
            let (q, period) = quota(rng, name);
            let burst = 1 + rng.below(96);
            let window = period * u32::try_from(burst).unwrap() / u32::try_from(q.limit()).unwrap();
            (q.with_burst(burst), window)
        };
        admitted += cases(&server, "gcra", 6, 80, &|rng, name| {
            let (q, period) = bucket(rng, name);
            (RateLimiter::gcra(q), period)
        })
        .await;
        admitted += cases(&server, "token-bucket", 7, 80, &|rng, name| {
            let (q, period) = bucket(rng, name);
            (RateLimiter::token_bucket(q), period)
        })
        .await;
        admitted += cases(&server, "gcra-tiers", 8, 25, &|rng, name| {
            let (a, period) = bucket(rng, format!("{name}-a"));
            let (b, _) = bucket(rng, format!("{name}-b"));
            let b = Quota::new(b.limit() * 3, period * 4)
                .with_burst(b.burst() * 2)
                .named(name);
            (RateLimiter::gcra([a, b]), period)
        })
        .await;
        // The cases admit plenty: the property is not met by denying everything.
        assert!(admitted > 5_000, "only {admitted} admissions in all cases");
    });
}

/// `servers` stores sending 90 % of `limit` per `period`, evenly and in turn, for `periods`
/// periods; returns (decisions, admitted, scripts run).
async fn under_the_quota<A: RedisAlgorithm>(
    server: &server::RedisServer,
    template: RateLimiter<A>,
    servers: usize,
    limit: u64,
    period: Duration,
    periods: u64,
) -> (u64, u64, u64) {
    let clock = ManualClock::new();
    let fleet = fleet(
        &server.url(),
        servers,
        &Leases::default(),
        &clock,
        &template,
    )
    .await;
    let decisions = limit * 9 / 10 * periods;
    let gap = period / u32::try_from(limit * 9 / 10).unwrap();
    let before = server.calls("evalsha");
    let mut admitted = 0;
    for i in 0..decisions {
        let at = usize::try_from(i).unwrap() % servers;
        if fleet[at].check("hot").await.unwrap().allowed {
            admitted += 1;
        }
        clock.advance(gap);
    }
    (decisions, admitted, server.calls("evalsha") - before)
}

fn under_the_quota_nearly_all_pass_with_ten_times_fewer_scripts() {
    let server = server::RedisServer::start().expect("redis-server");
    server::runtime().block_on(async {
        let period = Duration::from_secs(1);
        let limit = 5_000;
        let runs: Vec<(&str, RateLimiter<_>)> = vec![
            (
                "fixed",
                RateLimiter::fixed_window(Quota::new(limit, period).named("u-fixed")),
            ),
            (
                "fixed-aligned",
                RateLimiter::fixed_window(Quota::new(limit, period).named("u-fa")).aligned(),
            ),
        ];
        for (kind, template) in runs {
            let (decisions, admitted, scripts) =
                under_the_quota(&server, template, 4, limit, period, 4).await;
            report(kind, decisions, admitted, scripts);
        }
        let sliding = RateLimiter::sliding_window(Quota::new(limit, period).named("u-sliding"));
        let (decisions, admitted, scripts) =
            under_the_quota(&server, sliding, 4, limit, period, 4).await;
        report("sliding", decisions, admitted, scripts);
        let tiers = RateLimiter::fixed_window([
            Quota::new(limit, period).named("u-t1"),
            Quota::new(limit * 50, period * 60).named("u-t2"),
        ]);
        let (decisions, admitted, scripts) =
            under_the_quota(&server, tiers, 4, limit, period, 4).await;
        report("fixed-tiers", decisions, admitted, scripts);
        let gcra = RateLimiter::gcra(Quota::new(limit, period).named("u-gcra"));
        let (decisions, admitted, scripts) =
            under_the_quota(&server, gcra, 4, limit, period, 4).await;
        report("gcra", decisions, admitted, scripts);
        let bucket = RateLimiter::token_bucket(Quota::new(limit, period).named("u-tb"));
        let (decisions, admitted, scripts) =
            under_the_quota(&server, bucket, 4, limit, period, 4).await;
        report("token-bucket", decisions, admitted, scripts);
    });
}

/// Asserts at least 99 % admitted and ten times fewer scripts than decisions.
fn report(kind: &str, decisions: u64, admitted: u64, scripts: u64) {
    eprintln!("{kind}: {admitted} of {decisions} admitted, {scripts} scripts");
    assert!(
        admitted * 100 >= decisions * 99,
        "{kind}: only {admitted} of {decisions} admitted at 90 % of the quota"
    );
    assert!(
        scripts * 10 <= decisions,
        "{kind}: {scripts} scripts for {decisions} decisions"
    );
}

/// Two leasing servers sending 200 requests of one key in turn, 1 ms apart, under
/// `template`'s quota: each must be one script, and no book kept.
async fn decided_exactly<A: RedisAlgorithm>(
    server: &server::RedisServer,
    kind: &str,
    template: RateLimiter<A>,
) {
    let clock = ManualClock::new();
    let fleet = fleet(&server.url(), 2, &Leases::default(), &clock, &template).await;
    // Loads the script (its first EVALSHA is refused with NOSCRIPT and counted).
    assert!(fleet[0].check("warm").await.unwrap().allowed);
    let before = server.calls("evalsha");
    for i in 0..200 {
        assert!(fleet[i % 2].check("hot").await.unwrap().allowed, "{kind}");
        clock.advance(Duration::from_millis(1));
    }
    assert_eq!(
        server.calls("evalsha") - before,
        200,
        "{kind}: one script per decision"
    );
    assert_eq!(fleet[0].table().leased_keys(), 0, "{kind}: no book");
}

fn algorithms_that_do_not_lease_are_decided_exactly() {
    let server = server::RedisServer::start().expect("redis-server");
    server::runtime().block_on(async {
        // 400/s: the most a sliding log keeps in Redis is 500.
        let quota = |name: &str| Quota::per_second(400).named(name);
        decided_exactly(&server, "log", RateLimiter::sliding_log(quota("x-log"))).await;
        decided_exactly(
            &server,
            "leaky",
            RateLimiter::leaky_bucket(quota("x-leaky")),
        )
        .await;
        decided_exactly(&server, "hybrid", RateLimiter::hybrid(quota("x-hybrid"))).await;
        // Shaped buckets: a request from a slice would skip the wait it is given.
        let shaped = RateLimiter::gcra(quota("x-shaped")).max_delay(Duration::from_millis(5));
        decided_exactly(&server, "shaped gcra", shaped).await;
        let shaped =
            RateLimiter::token_bucket(quota("x-shaped-tb")).max_delay(Duration::from_millis(5));
        decided_exactly(&server, "shaped token bucket", shaped).await;
    });
}

/// A bucket whose slices are out is decided with its burst less the lease margin (a
/// sixteenth of the burst here), on every server, leasing or not; once the bucket has stood
/// empty for the margin after the last slice ended, the whole burst passes again.
fn a_buckets_lease_margin_holds_on_every_server_and_lifts_once_drained() {
    let server = server::RedisServer::start().expect("redis-server");
    server::runtime().block_on(async {
        // 160/s, burst 160: T = 6.25 ms, margin 62.5 ms = 10 units.
        let quota = |name: &str| Quota::per_second(160).named(name);
        let gcra = RateLimiter::gcra(quota("m-gcra"));
        margin_holds_and_lifts(&server, "gcra", gcra).await;
        let bucket = RateLimiter::token_bucket(quota("m-tb"));
        margin_holds_and_lifts(&server, "token bucket", bucket).await;
    });
}

/// The attack the margin answers: a slice taken from an empty bucket, kept while the bucket
/// drains on (in Redis, which counted it) and then filled to the top through another server,
/// and only then spent. Every admission is replayed through the in-memory limiter.
fn a_slice_kept_while_the_bucket_refills_elsewhere_admits_nothing_past_it() {
    let server = server::RedisServer::start().expect("redis-server");
    server::runtime().block_on(async {
        // 100/s, burst 96: T = 10 ms, margin 60 ms (6 units).
        let quota = |name: &str| Quota::per_second(100).with_burst(96).named(name);
        let gcra = RateLimiter::gcra(quota("k-gcra"));
        kept_while_refilled(&server, "gcra", gcra).await;
        let bucket = RateLimiter::token_bucket(quota("k-tb"));
        kept_while_refilled(&server, "token bucket", bucket).await;
    });
}

async fn kept_while_refilled<A: RedisAlgorithm>(
    server: &server::RedisServer,
    kind: &str,
    template: RateLimiter<A>,
) {
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1_000));
    let leases = [Some(Leases::default()), None];
    let fleet = mixed_fleet(&server.url(), &leases, &clock, &template).await;
    let oracle = template.with_clock(clock.clone());
    let mut admitted = 0;
    let step = |limiter: usize, what: &'static str| {
        let (fleet, oracle) = (&fleet, &oracle);
        async move {
            let decision = fleet[limiter].check("hot").await.unwrap();
            if decision.allowed {
                let replayed = oracle.check("hot").await.unwrap();
                assert!(
                    replayed.allowed,
                    "{kind}: {what} on server {limiter}: admitted past the algorithm"
                );
            }
            decision.allowed
        }
    };
    // Two checks on the leasing server: the second takes a slice (of 2: twice what the server
    // spent, at a pace it does not know yet).
    assert!(step(0, "first check").await);
    assert!(step(0, "the lease").await);
    admitted += 2;
    // 50 ms: the bucket drains 5 units in Redis, which counted the slice (4 units in all, so
    // it is empty too); the algorithm, which has seen 2, is empty.
    clock.advance(Duration::from_millis(50));
    while step(1, "filling the bucket").await {
        admitted += 1;
    }
    // The slice, still alive, is spent.
    while step(0, "spending the slice").await {
        admitted += 1;
    }
    assert!(admitted >= 80, "{kind}: only {admitted} admitted");
}

async fn margin_holds_and_lifts<A: RedisAlgorithm>(
    server: &server::RedisServer,
    kind: &str,
    template: RateLimiter<A>,
) {
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1_000));
    let leases = [Some(Leases::default()), None];
    let fleet = mixed_fleet(&server.url(), &leases, &clock, &template).await;
    // The leasing server's second check takes a slice; then both servers take all they can
    // at this instant: the burst less the margin, whoever holds what.
    let mut admitted = 0;
    for limiter in &fleet {
        while limiter.check("hot").await.unwrap().allowed {
            admitted += 1;
        }
    }
    assert!(fleet[0].table().leased_keys() > 0, "{kind}: leased");
    assert_eq!(admitted, 150, "{kind}: 160 less the margin of 10");
    // The slice lives 62.5 ms; the bucket drains in 1 s, and the margin lifts 62.5 ms later.
    clock.advance(Duration::from_millis(1_000 + 63));
    let mut burst = 0;
    while fleet[1].check("hot").await.unwrap().allowed {
        burst += 1;
    }
    assert_eq!(burst, 160, "{kind}: the whole burst passes again");
}

/// Two servers with slices of one key's budget (a window of 10 s, slices living at most
/// 100 ms), each having admitted once from its slice.
async fn two_leasing(
    url: &str,
    clock: &ManualClock,
    name: &str,
) -> Fleet<tollgate::algorithm::FixedWindow> {
    let leases = Leases::default().max_life(Duration::from_millis(100));
    let template =
        RateLimiter::fixed_window(Quota::new(1_000, Duration::from_secs(10)).named(name));
    let fleet = fleet(url, 2, &leases, clock, &template).await;
    for limiter in &fleet {
        for _ in 0..3 {
            assert!(limiter.check("hot").await.unwrap().allowed);
        }
    }
    fleet
}

fn a_block_ends_a_slice_here_at_once_and_elsewhere_within_its_life() {
    let server = server::RedisServer::start().expect("redis-server");
    server::runtime().block_on(async {
        let clock = ManualClock::new();
        let fleet = two_leasing(&server.url(), &clock, "blocks").await;
        let before = server.calls("evalsha");
        assert!(fleet[0].check("hot").await.unwrap().allowed);
        assert_eq!(server.calls("evalsha"), before, "admitted from the slice");

        fleet[0]
            .block("hot", Duration::from_secs(60))
            .await
            .unwrap();
        let here = fleet[0].check("hot").await.unwrap();
        assert!(
            !here.allowed && here.is_blocked(),
            "the blocking server's slice ended"
        );
        // The other server spends its slice until the slice ends, and no longer.
        clock.advance(Duration::from_millis(99));
        assert!(
            fleet[1].check("hot").await.unwrap().allowed,
            "its slice lives 100 ms"
        );
        clock.advance(Duration::from_millis(1));
        let there = fleet[1].check("hot").await.unwrap();
        assert!(
            !there.allowed && there.is_blocked(),
            "the block reached it with the slice's end"
        );

        // A reset through a server ends its slice too: the next check asks Redis.
        fleet[1].reset("hot").await.unwrap();
        let before = server.calls("evalsha");
        let fresh = fleet[1].check("hot").await.unwrap();
        assert!(fresh.allowed);
        assert_eq!(
            server.calls("evalsha"),
            before + 1,
            "decided by Redis after the reset"
        );
    });
}

fn a_slice_is_spent_while_redis_is_away_and_then_the_failure_policy_answers() {
    let mut server = server::RedisServer::start().expect("redis-server");
    server::runtime().block_on(async {
        let clock = ManualClock::new();
        let fleet = two_leasing(&server.url(), &clock, "away").await;
        server.kill();
        // The slice was counted in Redis before it was spent: it is spent with Redis away.
        let mut local = 0;
        loop {
            match fleet[0].check("hot").await {
                Ok(d) if d.allowed => local += 1,
                Ok(d) => panic!("denied with Redis away: {d:?}"),
                // Closed: once the slice is spent, Redis's silence is an error.
                Err(_) => break,
            }
            assert!(local < 1_000, "a slice holds at most max_slice");
        }
        assert!(local > 0, "the slice was spent");
    });
}

fn the_book_of_leased_keys_stays_bounded() {
    let server = server::RedisServer::start().expect("redis-server");
    server::runtime().block_on(async {
        let clock = ManualClock::new();
        let leases = Leases::default()
            .keys(100)
            .max_life(Duration::from_millis(50));
        let template =
            RateLimiter::fixed_window(Quota::new(10, Duration::from_secs(60)).named("book"));
        let fleet = fleet(&server.url(), 1, &leases, &clock, &template).await;
        let limiter = &fleet[0];
        for key in 0..3_000u64 {
            // Each sprayed key is checked twice, so each would be leased.
            assert!(limiter.check(key).await.unwrap().allowed);
            assert!(limiter.check(key).await.unwrap().allowed);
            assert!(limiter.table().leased_keys() <= 100, "bounded");
        }
        assert_eq!(limiter.table().leased_keys(), 100, "full");
        // Keys no longer checked, whose slices ended, make room for new ones.
        clock.advance(Duration::from_millis(50));
        let before = server.calls("evalsha");
        for _ in 0..3 {
            assert!(limiter.check("new").await.unwrap().allowed);
        }
        assert_eq!(
            server.calls("evalsha") - before,
            2,
            "the new key is tracked: its second check takes a slice, its third spends it"
        );
        assert!(limiter.table().leased_keys() <= 100);
    });
}

fn concurrent_callers_share_one_call_for_a_slice_and_never_pass_the_limit() {
    let server = server::RedisServer::start().expect("redis-server");
    server::runtime().block_on(async {
        // The clock stands still: one window, which the callers overrun.
        let clock = ManualClock::new();
        let limit = 10_000;
        let template =
            RateLimiter::fixed_window(Quota::new(limit, Duration::from_secs(60)).named("crowd"));
        let fleet = fleet(&server.url(), 4, &Leases::default(), &clock, &template).await;
        let before = server.calls("evalsha");
        let mut tasks = tokio::task::JoinSet::new();
        for limiter in &fleet {
            for _ in 0..16 {
                let limiter = limiter.clone();
                tasks.spawn(async move {
                    let mut admitted = 0u64;
                    for _ in 0..200 {
                        if limiter.check("hot").await.unwrap().allowed {
                            admitted += 1;
                        }
                        tokio::task::yield_now().await;
                    }
                    admitted
                });
            }
        }
        let mut admitted = 0;
        while let Some(done) = tasks.join_next().await {
            admitted += done.unwrap();
        }
        let scripts = server.calls("evalsha") - before;
        eprintln!("{admitted} of 12800 admitted, limit {limit}, {scripts} scripts");
        assert!(
            admitted <= limit,
            "{admitted} admitted, over the limit of {limit}"
        );
        // What the servers held unused when the window filled is all that is lost.
        assert!(
            admitted >= limit * 9 / 10,
            "only {admitted} admitted of {limit}"
        );
        assert!(
            scripts * 10 <= 12_800,
            "{scripts} scripts for 12 800 decisions"
        );
    });
}

/// Two axum servers with leases on one Redis, over HTTP: one client's quota holds across both
/// (exactly 20 of 40 pass in a window), most requests take no script, the headers count the
/// slice in `remaining`, and new quotas set live on both keep what the client used.
async fn two_leasing_servers_over_http_hold_the_quota_and_take_new_quotas() {
    use axum::routing::get;
    use axum::Router;
    use reqwest::StatusCode;
    use tollgate::RateLimitLayer;

    let redis = server::RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let (mut urls, mut handles) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        let store = server::closed_on_caller_clock(&redis.url())
            .await
            .timeout(Duration::from_secs(5))
            .local_leases(Leases::default());
        let layer = RateLimitLayer::fixed_window(Quota::per_minute(20).named("web"))
            .store(store)
            .key(tollgate::key::Global)
            .clock(clock.clone());
        handles.push(layer.handle());
        let app = Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer);
        urls.push(web::serve(app).await);
    }
    let client = web::client();
    let before = redis.calls("evalsha");
    let (mut passed, mut here) = (0, [0, 0]);
    for i in 0..40 {
        let resp = client.get(&urls[i % 2]).send().await.unwrap();
        let limit = web::header(&resp, "ratelimit");
        if resp.status() == StatusCode::OK {
            passed += 1;
            here[i % 2] += 1;
            // What Redis had left after the slice, plus what the slice holds: never more than
            // the quota less what passed through this server (the other server's admissions
            // since its slice was taken are not seen here).
            let r: u64 = limit
                .split(";r=")
                .nth(1)
                .and_then(|rest| rest.split(';').next())
                .and_then(|r| r.parse().ok())
                .unwrap_or_else(|| panic!("no remaining in {limit:?}"));
            assert!(r <= 20 - here[i % 2], "remaining {r} after {here:?} passed");
        } else {
            assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        }
    }
    assert_eq!(passed, 20, "exactly the quota, across both servers");
    let scripts = redis.calls("evalsha") - before;
    assert!(scripts < 20, "{scripts} scripts for 40 requests");

    // The next window: 10 pass, then the quota is set to 15 a minute on both servers. The
    // client keeps what it used (carried over, decided exactly): 5 more, on either server.
    clock.advance(Duration::from_secs(60));
    let mut passed = 0;
    for i in 0..10 {
        let resp = client.get(&urls[i % 2]).send().await.unwrap();
        passed += u32::from(resp.status() == StatusCode::OK);
    }
    assert_eq!(passed, 10);
    for handle in &handles {
        handle
            .set_quotas(Quota::per_minute(15).named("web"))
            .unwrap();
    }
    let mut passed = 0;
    for i in 0..20 {
        let resp = client.get(&urls[i % 2]).send().await.unwrap();
        passed += u32::from(resp.status() == StatusCode::OK);
    }
    assert_eq!(
        passed, 5,
        "what was used under 20 a minute is kept under 15"
    );
}

/// A layer with `count_if` does not lease windows that a refund may start again (a refund that
/// empties a key opens its next window at its next admission, which Redis cannot see while
/// slices are out); calendar-aligned fixed windows, which no refund moves, lease on.
async fn count_if_stops_leases_but_for_calendar_windows() {
    use axum::routing::get;
    use axum::Router;
    use tollgate::RateLimitLayer;

    let redis = server::RedisServer::start().expect("redis-server");
    let client = web::client();
    for (name, aligned, leased) in [("refunded", false, false), ("calendar", true, true)] {
        let clock = ManualClock::new();
        let store = server::closed_on_caller_clock(&redis.url())
            .await
            .timeout(Duration::from_secs(5))
            .local_leases(Leases::default());
        let mut layer = RateLimitLayer::fixed_window(Quota::per_minute(1_000).named(name));
        if aligned {
            layer = layer.aligned();
        }
        // Only server errors count: every request here is refunded.
        let layer = layer
            .store(store)
            .key(tollgate::key::Global)
            .clock(clock)
            .count_if(|parts| parts.status.is_server_error());
        let app = Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer);
        let url = web::serve(app).await;
        let before = redis.calls("evalsha");
        for _ in 0..20 {
            assert!(client.get(&url).send().await.unwrap().status().is_success());
        }
        let scripts = redis.calls("evalsha") - before;
        if leased {
            assert!(
                scripts < 20,
                "{name}: {scripts} scripts for 20 requests and refunds"
            );
        } else {
            // A check and a refund per request, both in Redis (the first check may meet
            // NOSCRIPT once).
            assert!(
                scripts >= 40,
                "{name}: {scripts} scripts for 20 requests and refunds"
            );
        }
    }
}

/// A refund that empties a key's window while a slice is out: the algorithm opens its next
/// window at the key's next admission, which Redis cannot see while the slice's units are
/// counted there. A table told of refunds (as a layer with `count_if` tells it) does not
/// lease such windows, so everything admitted still passes the algorithm.
fn refunds_that_empty_a_window_never_move_it_past_the_algorithms() {
    let server = server::RedisServer::start().expect("redis-server");
    server::runtime().block_on(async {
        let clock = ManualClock::new();
        let template =
            RateLimiter::fixed_window(Quota::new(80, Duration::from_secs(10)).named("emptied"));
        let fleet = fleet(&server.url(), 1, &Leases::default(), &clock, &template).await;
        let limiter = &fleet[0];
        limiter.table().expect_refunds();
        let oracle = template.with_clock(clock.clone());
        let mut admitted = 0;
        let check = |_: ()| async {
            let decision = limiter.check("k").await.unwrap();
            let replayed = if decision.allowed {
                let replayed = oracle.check("k").await.unwrap();
                assert!(
                    replayed.allowed,
                    "admitted past the algorithm: {replayed:?}"
                );
                Some(replayed)
            } else {
                None
            };
            (decision, replayed)
        };
        // Two requests (the second would take a slice), both refunded.
        let (a, ra) = check(()).await;
        clock.advance(Duration::from_millis(1));
        let (b, rb) = check(()).await;
        for (d, r) in [(a, ra), (b, rb)] {
            limiter.refund("k", &d, 1).await.unwrap();
            oracle.refund("k", &r.unwrap(), 1).await.unwrap();
        }
        // The algorithm's window opens again at 0.5 s; fill it, then knock until 10.5 s.
        clock.advance(Duration::from_millis(499));
        for step in 0..200 {
            if check(()).await.0.allowed {
                admitted += 1;
            }
            if step >= 100 {
                clock.advance(Duration::from_millis(96));
            }
        }
        assert_eq!(admitted, 80, "the algorithm's window holds 80");
    });
}

/// Per-key plans of a layer with `count_if` are told of refunds where they are made, as the
/// layer's own limiter is: two requests in flight at once, then refunded, leave nothing
/// counted (a plan that leased would have counted a slice). A ban's counter decides every
/// denial in Redis: across two servers the ban comes at the stated number of denials, not
/// before (slices of the counter held by one server would make the other's counter deny
/// early).
async fn plans_of_a_refunding_layer_and_ban_counters_do_not_lease() {
    use axum::routing::get;
    use axum::Router;
    use tollgate::layer::Ban;
    use tollgate::{Key, RateLimitLayer};

    let redis = server::RedisServer::start().expect("redis-server");
    let client = web::client();
    let store = || async {
        server::closed_on_caller_clock(&redis.url())
            .await
            .timeout(Duration::from_secs(5))
            .local_leases(Leases::default())
    };
    let layer = RateLimitLayer::fixed_window(Quota::per_minute(1_000).named("base"))
        .store(store().await)
        .key(tollgate::key::Global)
        .clock(ManualClock::new())
        .count_if(|parts| parts.status.is_server_error())
        .quota_for(|_: &Key, _head| Quota::per_minute(80).named("pro"));
    // Both requests are checked before either is answered (and refunded).
    let gate = std::sync::Arc::new(tokio::sync::Barrier::new(2));
    let app = Router::new()
        .route(
            "/",
            get(move || {
                let gate = gate.clone();
                async move {
                    gate.wait().await;
                    "hi"
                }
            }),
        )
        .layer(layer);
    let url = web::serve(app).await;
    let (a, b) = tokio::join!(client.get(&url).send(), client.get(&url).send());
    assert!(a.unwrap().status().is_success() && b.unwrap().status().is_success());
    // Two more find nothing counted but each other (each answer shows the standing after its
    // own refund): a slice taken by the plan would still be counted.
    let (c, d) = tokio::join!(client.get(&url).send(), client.get(&url).send());
    for resp in [c.unwrap(), d.unwrap()] {
        let limit = web::header(&resp, "ratelimit");
        assert!(
            limit.contains("r=80;") || limit.contains("r=79;"),
            "the plan counted more than its requests: {limit}"
        );
    }

    // One a minute, banned for an hour after 100 denials in a minute, on two servers.
    let mut urls = Vec::new();
    let clock = ManualClock::new();
    for _ in 0..2 {
        let layer = RateLimitLayer::fixed_window(Quota::per_minute(1).named("banned"))
            .store(store().await)
            .key(tollgate::key::Global)
            .clock(clock.clone())
            .ban(Ban::new(
                100,
                Duration::from_secs(60),
                Duration::from_secs(3600),
            ));
        urls.push(
            web::serve(
                Router::new()
                    .route("/", get(|| async { "hi" }))
                    .layer(layer),
            )
            .await,
        );
    }
    assert!(client
        .get(&urls[0])
        .send()
        .await
        .unwrap()
        .status()
        .is_success());
    let mut banned_at = None;
    // Three denials on the first server (a leased counter would take a slice there), the
    // rest on the second.
    for i in 1..=101 {
        let resp = client.get(&urls[usize::from(i > 3)]).send().await.unwrap();
        assert_eq!(resp.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
        if web::header(&resp, "retry-after") == "3600" && banned_at.is_none() {
            banned_at = Some(i);
        }
    }
    assert_eq!(
        banned_at,
        Some(101),
        "banned at the 101st denial, not before"
    );
}

/// A check dropped before it is first polled, having planned to take a slice, does not hold up
/// the key's later checks: the next one takes the slice, and the one after spends it.
fn a_check_dropped_before_its_first_poll_leaves_the_key_leasable() {
    let server = server::RedisServer::start().expect("redis-server");
    server::runtime().block_on(async {
        let clock = ManualClock::new();
        let template = RateLimiter::fixed_window(Quota::per_minute(1_000).named("dropped"));
        let fleet = fleet(&server.url(), 1, &Leases::default(), &clock, &template).await;
        let limiter = &fleet[0];
        assert!(limiter.check("warm").await.unwrap().allowed);
        assert!(limiter.check("hot").await.unwrap().allowed);
        // Planned as a lease (the key's second check), then dropped unpolled.
        drop(limiter.check("hot"));
        let before = server.calls("evalsha");
        for _ in 0..2 {
            assert!(limiter.check("hot").await.unwrap().allowed);
        }
        assert_eq!(
            server.calls("evalsha") - before,
            1,
            "one lease, then a local spend"
        );
    });
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis(
            "the_fleet_admits_only_what_the_algorithm_admits",
            the_fleet_admits_only_what_the_algorithm_admits,
        ),
        server::needs_redis(
            "under_the_quota_nearly_all_pass_with_ten_times_fewer_scripts",
            under_the_quota_nearly_all_pass_with_ten_times_fewer_scripts,
        ),
        server::needs_redis(
            "algorithms_that_do_not_lease_are_decided_exactly",
            algorithms_that_do_not_lease_are_decided_exactly,
        ),
        server::needs_redis(
            "a_block_ends_a_slice_here_at_once_and_elsewhere_within_its_life",
            a_block_ends_a_slice_here_at_once_and_elsewhere_within_its_life,
        ),
        server::needs_redis(
            "a_slice_is_spent_while_redis_is_away_and_then_the_failure_policy_answers",
            a_slice_is_spent_while_redis_is_away_and_then_the_failure_policy_answers,
        ),
        server::needs_redis(
            "concurrent_callers_share_one_call_for_a_slice_and_never_pass_the_limit",
            concurrent_callers_share_one_call_for_a_slice_and_never_pass_the_limit,
        ),
        server::needs_redis_async(
            "two_leasing_servers_over_http_hold_the_quota_and_take_new_quotas",
            two_leasing_servers_over_http_hold_the_quota_and_take_new_quotas,
        ),
        server::needs_redis_async(
            "count_if_stops_leases_but_for_calendar_windows",
            count_if_stops_leases_but_for_calendar_windows,
        ),
        server::needs_redis(
            "refunds_that_empty_a_window_never_move_it_past_the_algorithms",
            refunds_that_empty_a_window_never_move_it_past_the_algorithms,
        ),
        server::needs_redis_async(
            "plans_of_a_refunding_layer_and_ban_counters_do_not_lease",
            plans_of_a_refunding_layer_and_ban_counters_do_not_lease,
        ),
        server::needs_redis(
            "a_check_dropped_before_its_first_poll_leaves_the_key_leasable",
            a_check_dropped_before_its_first_poll_leaves_the_key_leasable,
        ),
        server::needs_redis(
            "the_book_of_leased_keys_stays_bounded",
            the_book_of_leased_keys_stays_bounded,
        ),
        server::needs_redis(
            "a_slice_kept_while_the_bucket_refills_elsewhere_admits_nothing_past_it",
            a_slice_kept_while_the_bucket_refills_elsewhere_admits_nothing_past_it,
        ),
        server::needs_redis(
            "a_buckets_lease_margin_holds_on_every_server_and_lifts_once_drained",
            a_buckets_lease_margin_holds_on_every_server_and_lifts_once_drained,
        ),
    ]
}
