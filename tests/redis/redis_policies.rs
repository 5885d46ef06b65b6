//! Policies in one Redis never read each other's state: every algorithm on one quota and one
//! client, one name given to two quotas, one name with two sub-window counts. Limiters with the
//! same configuration, on different connections (as different servers), still share one limit.

use crate::support::redis as server;

use tollgate::algorithm::Algorithm;
use tollgate::clock::ManualClock;
use tollgate::store::{RedisStore, Store};
use tollgate::{Error, Key, Quota, RateLimiter};

/// A store that fails closed (so a store error is seen, not hidden by a fallback), deciding on
/// the limiters' manual clock, without a deny cache (every check reaches Redis).
async fn store(url: &str) -> RedisStore {
    server::closed_on_caller_clock(url).await.deny_cache(0)
}

/// How many of `attempts` checks of `key` pass; any store error fails the test.
async fn admitted<A>(
    limiter: &RateLimiter<A, RedisStore, ManualClock>,
    key: &str,
    attempts: u64,
) -> u64
where
    A: Algorithm,
    RedisStore: Store<A>,
{
    let mut admitted = 0;
    for _ in 0..attempts {
        let decision: Result<_, Error> = limiter.check(key).await;
        match decision {
            Ok(d) if d.allowed => admitted += 1,
            Ok(_) => {}
            Err(e) => panic!("policy {:?}: the store failed: {e}", limiter.policy()),
        }
    }
    admitted
}

fn every_algorithm_on_one_unnamed_quota_keeps_its_own_state() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    server::runtime().block_on(async {
        let clock = ManualClock::new();
        let s = store(&server.url()).await;
        let q = Quota::per_minute(10);
        let gcra = RateLimiter::gcra(q.clone())
            .with_clock(clock.clone())
            .with_store(s.clone());
        let fixed = RateLimiter::fixed_window(q.clone())
            .with_clock(clock.clone())
            .with_store(s.clone());
        let leaky = RateLimiter::leaky_bucket(q.clone())
            .with_clock(clock.clone())
            .with_store(s.clone());
        let tokens = RateLimiter::token_bucket(q.clone())
            .with_clock(clock.clone())
            .with_store(s.clone());
        let sliding = RateLimiter::sliding_window(q.clone())
            .with_clock(clock.clone())
            .with_store(s.clone());
        let log = RateLimiter::sliding_log(q.clone())
            .with_clock(clock.clone())
            .with_store(s.clone());
        let hybrid = RateLimiter::hybrid(q)
            .with_clock(clock.clone())
            .with_store(s);
        // The sequence: the client's first `/api` request (GCRA), then `/login` (fixed
        // window) on the same Redis policy name `10/min`.
        assert_eq!(admitted(&gcra, "client", 1).await, 1);
        assert_eq!(admitted(&fixed, "client", 12).await, 10);
        // Interleaved: every algorithm still sees its own fresh state.
        let mut counts = [0u64; 6];
        for _ in 0..12 {
            counts[0] += admitted(&gcra, "client", 1).await;
            counts[1] += admitted(&leaky, "client", 1).await;
            counts[2] += admitted(&tokens, "client", 1).await;
            counts[3] += admitted(&sliding, "client", 1).await;
            counts[4] += admitted(&log, "client", 1).await;
            counts[5] += admitted(&hybrid, "client", 1).await;
        }
        assert_eq!(counts, [9, 10, 10, 10, 10, 10]);
        // Each names its algorithm in its keys.
        let key = Key::from("client");
        for (keys, name) in [
            (gcra.table().redis_keys(&key), "gcra"),
            (fixed.table().redis_keys(&key), "fixed_window"),
            (leaky.table().redis_keys(&key), "leaky_bucket"),
            (tokens.table().redis_keys(&key), "token_bucket"),
            (sliding.table().redis_keys(&key), "sliding_window"),
            (log.table().redis_keys(&key), "sliding_log"),
            (hybrid.table().redis_keys(&key), "hybrid"),
        ] {
            let text = String::from_utf8(keys[0].clone()).unwrap();
            assert!(
                text.starts_with(&format!("tollgate:{{s:client}}:10/min:{name}.")),
                "{text}"
            );
        }
    });
}

fn one_name_on_two_quotas_or_two_sub_window_counts_keeps_them_apart() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    server::runtime().block_on(async {
        let clock = ManualClock::new();
        let s = store(&server.url()).await;
        let minute = RateLimiter::gcra(Quota::per_minute(10).named("api"))
            .with_clock(clock.clone())
            .with_store(s.clone());
        let hour = RateLimiter::gcra(Quota::per_hour(100).named("api"))
            .with_clock(clock.clone())
            .with_store(s.clone());
        // Had they shared a TAT, the minute's 10 requests would have cost the hour 60 s of
        // its 3600 s tolerance: 98 instead of 100.
        assert_eq!(admitted(&minute, "u", 12).await, 10);
        assert_eq!(admitted(&hour, "u", 120).await, 100);
        assert_ne!(
            minute.table().redis_keys(&Key::from("u")),
            hour.table().redis_keys(&Key::from("u"))
        );

        let one = RateLimiter::sliding_window(Quota::per_minute(10).named("win"))
            .with_clock(clock.clone())
            .with_store(s.clone());
        let four = RateLimiter::sliding_window(Quota::per_minute(10).named("win"))
            .sub_windows(4)
            .with_clock(clock.clone())
            .with_store(s);
        for _ in 0..3 {
            assert_eq!(admitted(&one, "w", 12).await, 10);
            assert_eq!(admitted(&four, "w", 12).await, 10);
            clock.advance(std::time::Duration::from_secs(120));
        }
    });
}

fn two_servers_with_one_configuration_share_one_limit() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    server::runtime().block_on(async {
        let clock = ManualClock::new();
        // Two stores: two connections, as two servers have.
        let (a, b) = (store(&server.url()).await, store(&server.url()).await);
        let q = Quota::per_minute(10);
        let gcra_a = RateLimiter::gcra(q.clone())
            .with_clock(clock.clone())
            .with_store(a.clone());
        let gcra_b = RateLimiter::gcra(q.clone())
            .with_clock(clock.clone())
            .with_store(b.clone());
        let win_a = RateLimiter::sliding_window(q.clone().named("w"))
            .sub_windows(4)
            .with_clock(clock.clone())
            .with_store(a);
        let win_b = RateLimiter::sliding_window(q.named("w"))
            .sub_windows(4)
            .with_clock(clock.clone())
            .with_store(b);
        let mut gcra = 0;
        let mut win = 0;
        for _ in 0..8 {
            gcra += admitted(&gcra_a, "c", 1).await + admitted(&gcra_b, "c", 1).await;
            win += admitted(&win_a, "c", 1).await + admitted(&win_b, "c", 1).await;
        }
        assert_eq!((gcra, win), (10, 10), "one limit across both servers");
        let key = Key::from("c");
        assert_eq!(
            gcra_a.table().redis_keys(&key),
            gcra_b.table().redis_keys(&key)
        );
    });
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis(
            "every_algorithm_on_one_unnamed_quota_keeps_its_own_state",
            every_algorithm_on_one_unnamed_quota_keeps_its_own_state,
        ),
        server::needs_redis(
            "one_name_on_two_quotas_or_two_sub_window_counts_keeps_them_apart",
            one_name_on_two_quotas_or_two_sub_window_counts_keeps_them_apart,
        ),
        server::needs_redis(
            "two_servers_with_one_configuration_share_one_limit",
            two_servers_with_one_configuration_share_one_limit,
        ),
    ]
}
