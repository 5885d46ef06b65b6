//! The numbers `cargo run --example simulate` prints, checked against what each algorithm
//! must do by its definition, and the charts in `docs/` checked to be the ones it draws.
//!
//! Every expected number below is derived in the comment above it from the quota and the
//! pattern, not copied from the simulator's output. The quota is the simulator's:
//! 100 per minute, so `T = 600 ms` and `burst = 100`.

#[allow(dead_code)]
#[path = "../examples/simulate/sim.rs"]
mod sim;

#[path = "../examples/simulate/chart.rs"]
mod chart;

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
}

#[test]
fn polite_clients_are_never_denied() {
    let p = sim::polite(&sim::quota());
    let attempts = p.attempts.len() as u64;
    for algo in ["GCRA", "leaky bucket"] {
        let o = run(algo, &p);
        // A client sending b at once every b·800 ms asks at most b + (t − s)/800 ms in any
        // [s, t], never more than GCRA's burst + floor((t − s)/T) for b <= 5. The leaky
        // bucket admits the same requests as GCRA.
        assert_eq!((o.admitted, o.denied), (attempts, 0), "{algo}");
        assert_eq!(o.before_first_denial, None, "{algo}");
        // Clients sending 2 every 1.6 s or 4 every 3.2 s fit 38 (60 / 1.6 = 37.5) and 19
        // (60 / 3.2 = 18.75) bursts in a minute: 76 requests. Client 1 (2 every 1.6 s from
        // 0.1 s) does so in the first minute too: 0.1 s + 37·1.6 s = 59.3 s.
        assert_eq!((o.first_window, o.busiest_window), (76, 76), "{algo}");
    }
    // A burst of 5 finds the queue empty (the last one drained 5·T = 3 s after the previous
    // burst, which was 4 s earlier) and its last request waits 4·T.
    assert_eq!(run("leaky bucket", &p).longest_wait, 4 * T);
    assert_eq!(run("GCRA", &p).longest_wait, 0);
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
