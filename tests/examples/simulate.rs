//! The numbers `cargo run --example simulate` prints, checked against what each algorithm
//! must do by its definition, and the charts in `docs/` checked to be the ones it draws.
//!
//! Every expected number below is derived in the comment above it from the quota and the
//! pattern, not copied from the simulator's output. The quota is the simulator's:
//! 100 per minute, so `T = 600 ms` and `burst = 100`.

// `examples/simulate/chart.rs` names the simulator `crate::sim`: main.rs declares both.
use crate::{chart, sim};

use sim::{Algo, Outcome, Pattern, SECOND};

const MS: u64 = 1_000_000;
const T: u64 = 600 * MS;
const PERIOD: u64 = 60 * SECOND;

fn run(name: &str, pattern: &Pattern) -> Outcome {
    let algo: Algo = sim::algorithms()
        .into_iter()
        .find(|a| a.name == name)
        .unwrap_or_else(|| panic!("no algorithm named {name:?} in the simulator's table"));
    sim::simulate(&algo, &sim::quota(), pattern)
}

/// Two minutes of one client at twice the rate: a request every `d = 300 ms`, `k = 0..400`.
fn abuse_2x() -> Pattern {
    sim::steady(&sim::quota(), 2, 1, 2 * PERIOD)
}

#[test]
fn the_quota_is_the_one_the_numbers_assume() {
    let q = sim::quota();
    assert_eq!((q.limit(), q.burst()), (100, 100));
    assert_eq!(q.period().as_nanos(), u128::from(PERIOD));
    let p = abuse_2x();
    assert_eq!(p.attempts.len(), 400);
    assert_eq!(p.attempts[1].at, 300 * MS);
}

#[test]
fn gcra_at_twice_the_rate() {
    let o = run("GCRA", &abuse_2x());
    // While nothing is denied, the TAT after request k is (k+1)·T (it is always ahead of
    // now, as T > d), and request k at k·d passes iff (k+1)·T − k·d <= burst·T, that is
    // k·300 ms <= 99·600 ms, k <= 198. So 199 pass before the first denial, at k = 199
    // (59.7 s). The continuous estimate q·a/(a−1) = 200 for a = 2 also counts the request
    // that the last fraction of a token would let through; requests are whole.
    assert_eq!(o.before_first_denial, Some(199));
    // All 199 are in [0, 60 s).
    assert_eq!(o.first_window, 199);
    // After the denial the TAT is 199·T = 119.4 s, and a request passes once now >= TAT +
    // T − 100·T: at 60.0 s, then every T (every other request): 60.0, 60.6, ..., 119.4 s,
    // 100 more in [60 s, 120 s). The other 100 of those 200 are denied, plus k = 199.
    assert_eq!((o.admitted, o.denied), (299, 101));
    // GCRA lets at most burst + floor((t − s)/T) pass in any [s, t]; in a half-open window of
    // one period t − s < 100·T, so at most 100 + 99 = 199, reached by [0, 60 s).
    assert_eq!(o.busiest_window, 199);
    // Nothing waits in a queue; a denied request passes on the client's next try, 300 ms on.
    assert_eq!(o.longest_wait, 300 * MS);
}

#[test]
fn the_leaky_bucket_at_twice_the_rate() {
    let gcra = run("GCRA", &abuse_2x());
    let o = run("leaky bucket", &abuse_2x());
    // Request k takes the next place in the queue, which leaves at k·T (the queue never
    // empties, as T > d): its delay is k·T − k·d = k·300 ms, allowed while the queue of 100
    // holds it, delay <= 99·T = 59.4 s, so k <= 198: 199 before the first denial. In general
    // a request passes iff max(TAT, now) − now <= (burst − 1)·T, which is GCRA's
    // max(TAT, now) + T − now <= burst·T: the same requests pass, only later.
    assert_eq!(o.before_first_denial, Some(199));
    assert_eq!((o.admitted, o.denied), (gcra.admitted, gcra.denied));
    // Served at k·T: only k = 0..=99 in the first 60 s, and never two within one T, so never
    // more than 100 in a period.
    assert_eq!((o.first_window, o.busiest_window), (100, 100));
    assert!(o.served.windows(2).all(|w| w[1] - w[0] >= T));
    // k = 199 (59.7 s) is denied (delay 59.7 s); k = 200 at 60.0 s gets the place at
    // 199·T = 119.4 s, delay 59.4 s. Then every other request: the one at 60.3 s would wait
    // 59.7 s and is denied, the one at 60.6 s gets 120.0 s. So each denied request is served
    // 300 ms + 59.4 s after it was first tried.
    assert_eq!(o.longest_wait, 59_700 * MS);
}

#[test]
fn the_windows_at_twice_the_rate() {
    let p = abuse_2x();
    // Fixed window: the first request opens [0, 60 s); k = 0..=99 (up to 29.7 s) fill it and
    // k = 100..=199 are denied. k = 200 at 60.0 s opens [60 s, 120 s): 100 more, then 100
    // denied. Any 60 s holds the tail of one window's run and the head of the next, which
    // add up to 100 (from 0.3·m s: 100 − m of the first, m of the second). The request
    // denied at 30.0 s passes with the one at 60.0 s.
    let fixed = run("fixed window", &p);
    assert_eq!((fixed.admitted, fixed.denied), (200, 200));
    assert_eq!(fixed.before_first_denial, Some(100));
    assert_eq!((fixed.first_window, fixed.busiest_window), (100, 100));
    assert_eq!(fixed.longest_wait, 30 * SECOND);

    // Sliding log: the log of (now − 60 s, now] is full from 29.7 s; the request at 0 s
    // leaves it at 60.0 s, the one at 0.3 s at 60.3 s, ...: the first minute's admissions
    // are repeated 60 s later, exactly as under the fixed window.
    let log = run("sliding log", &p);
    assert_eq!(log.served, fixed.served);
    assert_eq!(log.longest_wait, 30 * SECOND);

    // Sliding window: [0, 60 s) takes k = 0..=99 as above. In [60 s, 120 s), e s into it,
    // the estimate is 100·(60 − e)/60 + c for c admitted there; the next passes iff
    // 100 − 100·e/60 + c + 1 <= 100, e >= 0.6·(c + 1) s: at 60.6, 61.2, ..., 119.4 s, 99 of
    // them (the first at 60.0 s and 60.3 s are still over). 30.6 s after the first denial.
    let sliding = run("sliding window", &p);
    assert_eq!((sliding.admitted, sliding.denied), (199, 201));
    assert_eq!(sliding.before_first_denial, Some(100));
    assert_eq!((sliding.first_window, sliding.busiest_window), (100, 100));
    assert_eq!(sliding.longest_wait, 30_600 * MS);

    // Hybrid (seed 000): a bursty window of 100 at 0 s; the request taking the last token
    // (k = 99, 29.7 s) switches to smooth mode with a bucket of −(60 − 29.7) s + T, one token
    // being T. It refills by 300 ms per request, holding T (one token) at 60.0 s, and from
    // then on every other request: k = 200, 202, ..., 398, 100 in [60 s, 120 s). Any 60 s
    // holds at most 100: the seed's promise of no more than the quota before the window
    // ends, then the rate.
    let hybrid = run("hybrid", &p);
    assert_eq!((hybrid.admitted, hybrid.denied), (200, 200));
    assert_eq!(hybrid.before_first_denial, Some(100));
    assert_eq!((hybrid.first_window, hybrid.busiest_window), (100, 100));
    assert_eq!(hybrid.longest_wait, 30 * SECOND);
}

#[test]
fn bursts_and_pauses() {
    let p = sim::burst_pause(&sim::quota());
    // 100 at 0 s, 100 at 45 s, 100 at 150 s.
    assert_eq!(p.attempts.len(), 300);
    let gcra = run("GCRA", &p);
    // The first burst takes the whole burst: TAT = 100·T = 60 s. At 45 s a request passes
    // while TAT + n·T − 45 s <= 60 s, n <= 45 s / T = 75: 75 pass, 25 are denied. By 150 s
    // the TAT (105 s) is in the past: the key is fresh and all 100 pass.
    assert_eq!((gcra.admitted, gcra.denied), (275, 25));
    assert_eq!(gcra.before_first_denial, Some(175));
    assert_eq!((gcra.first_window, gcra.busiest_window), (175, 175));
    // A burst's denied requests are dropped, and nothing is delayed.
    assert_eq!(gcra.longest_wait, 0);

    let leaky = run("leaky bucket", &p);
    assert_eq!((leaky.admitted, leaky.denied), (275, 25));
    // The first burst is served at 0, T, ..., 99·T = 59.4 s: the last one waited 59.4 s.
    // The 75 of the second burst are served from 60 s on, after the first.
    assert_eq!((leaky.first_window, leaky.busiest_window), (100, 100));
    assert_eq!(leaky.longest_wait, 99 * T);
    assert_eq!(leaky.served[100], 60 * SECOND);

    // The windows: the first burst fills the key's first window [0, 60 s); at 45 s it is
    // still full (the sliding ones count all 100 within the last 60 s; the hybrid's smooth
    // bucket, at T − 60 s after the burst, has refilled to T − 15 s, less than a token). At
    // 150 s the key is fresh for every one of them: the previous window [60 s, 120 s) is
    // empty, and the hybrid's bucket (T + 90 s) holds more than a quota, so it starts over.
    for algo in [
        "fixed window",
        "sliding window",
        "sliding window, 6 sub-windows",
        "sliding log",
        "hybrid",
    ] {
        let o = run(algo, &p);
        assert_eq!((o.admitted, o.denied), (200, 100), "{algo}");
        assert_eq!(o.before_first_denial, Some(100), "{algo}");
        assert_eq!((o.first_window, o.busiest_window), (100, 100), "{algo}");
    }
}

#[test]
fn bursts_at_a_window_edge() {
    let p = sim::window_edges(&sim::quota());
    // 1 at 0 s, 100 at 59.00 + i·0.01 s, 100 at 60.00 + j·0.01 s.
    assert_eq!(p.attempts.len(), 201);
    let gcra = run("GCRA", &p);
    // At 59 s the TAT (0.6 s) is long past: the key has its whole burst, and request i of
    // the first burst needs 59 s + (i+1)·T − now = (i+1)·600 ms − i·10 ms <= 60 s, true for
    // every i <= 99. Then TAT = 59 s + 100·T = 119 s, and a request passes once
    // now >= TAT + T − 60 s: at 60.00 s (TAT 119.6 s), 60.20 s (120.2 s) and 60.80 s;
    // the next would be 61.40 s, after the burst. 1 + 100 + 3 pass.
    assert_eq!((gcra.admitted, gcra.denied), (104, 97));
    assert_eq!(gcra.before_first_denial, Some(102));
    // [0, 60 s) holds 1 + 100; [59 s, 119 s) holds 100 + 3.
    assert_eq!((gcra.first_window, gcra.busiest_window), (101, 103));

    let leaky = run("leaky bucket", &p);
    assert_eq!((leaky.admitted, leaky.denied), (104, 97));
    // The places are 0 s, then 59.0 s + i·T, so only 0, 59.0 and 59.6 s are in the first
    // minute; the longest delay is the one at 60.20 s or 60.80 s, exactly 99·T (the 99th
    // request of the first burst waits only 99·590 ms).
    assert_eq!((leaky.first_window, leaky.busiest_window), (3, 100));
    assert_eq!(leaky.longest_wait, 99 * T);

    // Fixed window: [0, 60 s) takes the request at 0 s and 99 of the first burst (the last,
    // at 59.99 s, finds it full); at 60.00 s the window is over and the next one takes the
    // whole second burst. [59 s, 119 s) holds 99 + 100: twice the quota less one, in two
    // seconds.
    let fixed = run("fixed window", &p);
    assert_eq!((fixed.admitted, fixed.denied), (200, 1));
    assert_eq!(fixed.before_first_denial, Some(100));
    assert_eq!((fixed.first_window, fixed.busiest_window), (100, 199));

    // Sliding log: the same 100 before 60 s; at 60.00 s the request at 0 s is no longer in
    // (now − 60 s, now], so one more passes; the other 99 all arrive before 119 s, when the
    // first burst starts to leave.
    let log = run("sliding log", &p);
    assert_eq!((log.admitted, log.denied), (101, 100));
    assert_eq!((log.first_window, log.busiest_window), (100, 100));

    // Hybrid: the request at 0 s opens a bursty window with 99 tokens left; the 99th request
    // of the first burst (59.98 s) takes the last one and switches to smooth mode with
    // T − 0.02 s, 20 ms short of a token. It is whole at 60.00 s (one passes), and again at
    // 60.60 s. So 100 in the key's first window, as the seed promises, but 99 + 2 = 101 in
    // [59 s, 119 s): the promise is per window of the key's own, not per any 60 s.
    let hybrid = run("hybrid", &p);
    assert_eq!((hybrid.admitted, hybrid.denied), (102, 99));
    assert_eq!(hybrid.before_first_denial, Some(100));
    assert_eq!((hybrid.first_window, hybrid.busiest_window), (100, 101));
}

#[test]
fn polite_clients_are_never_denied() {
    let p = sim::polite(&sim::quota());
    let attempts = p.attempts.len() as u64;
    // A client sending b at once every p = b·800 ms sends at most b + L/800 ms in any
    // stretch of L, and at most b·ceil(60 s / p) in any 60 s: 75 for b = 1, 3, 5 and 76 for
    // b = 2 (38 bursts, 60 / 1.6 = 37.5) and b = 4 (19 bursts, 60 / 3.2 = 18.75). So:
    // - GCRA and the token bucket: b + L/800 ms <= burst + floor(L/T) for b <= 5; the leaky
    //   bucket admits the same requests as GCRA;
    // - the fixed window, the sliding log and the hybrid's bursty windows see at most 76 in
    //   any 60 s, never the quota (the hybrid never reaches smooth mode);
    // - the sliding window's estimate, e into a window, is at most
    //   (60 s/800 ms + 5)·(1 − e/60 s) + e/800 ms + 5 <= 85; with 6 sub-windows the counters
    //   cover at most 70 s, at most 70 s/800 ms + 5 = 92.5 requests.
    // None is ever denied. Served without delay, or spread by the leaky bucket within its
    // own period, each client's requests stay periodic, b every p: 76 in the busiest minute,
    // and in the first one too for client 1 (2 every 1.6 s from 0.1 s: 0.1 s + 37·1.6 s =
    // 59.3 s, and the leaky bucket serves its second at 59.9 s).
    for algo in sim::algorithms() {
        let o = sim::simulate(&algo, &sim::quota(), &p);
        let name = algo.name;
        assert_eq!((o.admitted, o.denied), (attempts, 0), "{name}");
        assert_eq!(o.before_first_denial, None, "{name}");
        assert_eq!((o.first_window, o.busiest_window), (76, 76), "{name}");
    }
    // A burst of 5 finds the queue empty (the last one drained 5·T = 3 s after the previous
    // burst, which was 4 s earlier) and its last request waits 4·T.
    assert_eq!(run("leaky bucket", &p).longest_wait, 4 * T);
    assert_eq!(run("GCRA", &p).longest_wait, 0);
}

#[test]
fn what_each_algorithm_promises_holds_in_every_pattern() {
    let q = sim::quota();
    for pattern in sim::patterns(&q) {
        let slug = pattern.slug;
        let gcra = run("GCRA", &pattern);
        // The token bucket decides as GCRA does (its tokens are GCRA's TAT read the other way).
        assert_eq!(
            run("token bucket", &pattern),
            Outcome {
                algorithm: "token bucket",
                ..gcra.clone()
            },
            "{slug}"
        );
        // The leaky bucket admits what GCRA admits, and serves one key at most every T
        // (`served` mixes the keys: checked where there is one).
        let leaky = run("leaky bucket", &pattern);
        assert_eq!(
            (leaky.admitted, leaky.before_first_denial),
            (gcra.admitted, gcra.before_first_denial),
            "{slug}"
        );
        let one_key = pattern.attempts.iter().all(|a| a.client == 0);
        assert!(
            !one_key || leaky.served.windows(2).all(|w| w[1] - w[0] >= T),
            "{slug}"
        );
        // GCRA: at most burst + limit − 1 in any period.
        assert!(gcra.busiest_window <= 199, "{slug}");
        // The sliding log is exact: never more than the quota in any period.
        assert!(run("sliding log", &pattern).busiest_window <= 100, "{slug}");
        // Nothing but the leaky bucket delays.
        for algo in sim::algorithms()
            .iter()
            .filter(|a| a.name != "leaky bucket")
        {
            let o = sim::simulate(algo, &q, &pattern);
            assert!(
                pattern.retries || o.longest_wait == 0,
                "{slug} {}",
                algo.name
            );
        }
    }
}

#[test]
fn the_busiest_window_is_half_open() {
    // Times 0, 30, 60, 61 s: [0, 60 s) holds two, [30 s, 90 s) holds three.
    let s = [0, 30 * SECOND, 60 * SECOND, 61 * SECOND];
    assert_eq!(sim::busiest(&s, PERIOD), 3);
    assert_eq!(sim::busiest(&s[..3], PERIOD), 2);
    assert_eq!(sim::busiest(&[], PERIOD), 0);
}

#[test]
fn the_charts_in_docs_are_the_ones_the_simulator_draws() {
    let q = sim::quota();
    let out = std::env::temp_dir().join(format!("tollgate-simulate-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    for pattern in sim::patterns(&q) {
        let name = format!("sim-{}.svg", pattern.slug);
        let outcomes = sim::simulate_all(&q, &pattern);
        chart::draw(&out.join(&name), &pattern, &outcomes).unwrap();
        let drawn = std::fs::read_to_string(out.join(&name)).unwrap();
        let committed = std::fs::read_to_string(docs.join(&name)).unwrap_or_default();
        assert!(
            drawn == committed,
            "docs/{name} is not what the simulator draws now: run `cargo run --example simulate`"
        );
    }
    std::fs::remove_dir_all(&out).unwrap();
}
