//! The token budget of `cargo run --example simulate`: a key limited to 20 000 tokens a minute
//! (GCRA, burst 20 000, so one token every 3 ms) under an LLM workload, its requests' costs
//! counted by a fixed estimate or settled to their true cost when their answers end.
//!
//! What the quota allows a fresh key in the ten minutes is its burst and its rate:
//! `20 000 + 10 · 20 000 = 220 000` tokens.

use crate::{chart, sim, tokens};

use tokens::{Call, Strategy, TokenOutcome, FEWEST, MOST, SPAN};

const ALLOWED: u64 = 220_000;

fn run(strategy: Strategy, calls: &[Call]) -> TokenOutcome {
    tokens::simulate_tokens(strategy, &tokens::token_quota(), calls)
}

/// The workload with every answer ending as it starts: each settles before the next arrives.
fn at_once() -> Vec<Call> {
    let calls = tokens::workload();
    calls.into_iter().map(|c| Call { lasts: 0, ..c }).collect()
}

#[test]
fn the_quota_and_the_workload_are_the_ones_the_numbers_assume() {
    let q = tokens::token_quota();
    assert_eq!((q.limit(), q.burst()), (20_000, 20_000));
    assert_eq!(tokens::allowed(&q), ALLOWED);
    // The law's inverse at u = 0, 1/2 and just under 1: 200 000 / (4 000 − u·3 950) gives 50,
    // 200 000 / 2 025 = 98.8 and 200 000 / 50.000001 = 3 999.99.
    assert_eq!(tokens::pareto(0), FEWEST);
    assert_eq!(tokens::pareto(1 << 31), 98);
    assert_eq!(tokens::pareto(u64::from(u32::MAX)), MOST - 1);
    let calls = tokens::workload();
    assert!(calls.iter().all(|c| (FEWEST..=MOST).contains(&c.tokens)));
    assert!(calls.windows(2).all(|w| w[0].at <= w[1].at));
    assert!(calls.iter().all(|c| c.at < SPAN));
    // The law's mean is ln(80) / (1/50 − 1/4 000) = 221.9 and its standard deviation 389, so
    // the mean of n requests is 221.9 within 3 · 389 / sqrt(n).
    let n = calls.len() as f64;
    let mean = calls.iter().map(|c| c.tokens).sum::<u64>() as f64 / n;
    assert!((mean - 221.9).abs() < 3.0 * 389.0 / n.sqrt(), "mean {mean}");
    // Bursts of 4.5 requests on average every 2 s: 2.25 requests a second, some 1 350 in ten
    // minutes, asking about 30 000 tokens a minute, one and a half times the quota.
    assert!((1_200..1_500).contains(&calls.len()), "{}", calls.len());
    let asked: u64 = tokens::demand_per_minute(&calls).iter().sum();
    assert_eq!(asked, calls.iter().map(|c| c.tokens).sum::<u64>());
    assert!((270_000..330_000).contains(&asked), "{asked}");
}

#[test]
fn a_low_fixed_estimate_admits_everything_asked() {
    let calls = tokens::workload();
    let o = run(Strategy::Fixed(100), &calls);
    // Reserving 100 a request, the key counts 225 tokens a second against a rate of 333, in
    // bursts of at most 800 against a burst of 20 000: it is never denied, and admits the
    // whole demand, far more than the quota allows.
    assert_eq!((o.admitted, o.denied), (calls.len() as u64, 0));
    assert_eq!(o.tokens(), calls.iter().map(|c| c.tokens).sum::<u64>());
    assert!(o.tokens() > ALLOWED * 13 / 10, "{}", o.tokens());
    assert_eq!(o.deepest_debt, 0);
}

#[test]
fn a_high_fixed_estimate_admits_a_quota_of_estimates() {
    let calls = tokens::workload();
    let o = run(Strategy::Fixed(1_000), &calls);
    // Each admission takes 3 s of the key's TAT. The key is asked 2 250 a second, more than
    // its rate from the start: once the burst is spent the TAT stays 60 s ahead, so the n-th
    // admission (from 0) passes at n·3 s − 57 s at the earliest, and at most 3 s later (the
    // longest gap between bursts). The last request arrives in [597 s, 600 s): n ≤ 219.
    let last = calls.last().map_or(0, |c| c.at);
    let most = (last + 60 * sim::SECOND) / (3 * sim::SECOND);
    assert!(most <= 219);
    assert!((most - 1..=most).contains(&o.admitted), "{}", o.admitted);
    // What it reserved is the quota; what it admitted is under a third of it.
    assert!(o.admitted * 1_000 <= ALLOWED);
    assert!(o.tokens() < ALLOWED / 3, "{}", o.tokens());
}

#[test]
fn settled_from_a_low_estimate_the_key_gets_what_its_quota_allows() {
    let o = run(Strategy::Settled(100), &tokens::workload());
    // A key's count never passes its burst and its rate but by its debt; settling counts the
    // true tokens, and a refund kept (behind a later admission) counts more, never less. At
    // 600 s the answers still streaming may have charged at most MOST − 100 each.
    assert!(
        o.deepest_debt > 0,
        "a request far over its estimate puts the key in debt"
    );
    assert!(o.tokens() <= ALLOWED + o.deepest_debt);
    // The chart's claim: the key gets what its quota allows, less what it is denied while it
    // pays a debt back and what the first minutes (asked less than the quota) leave unused.
    assert!(o.tokens() >= ALLOWED * 9 / 10, "{}", o.tokens());
    assert!(o.denied > 0);
}

#[test]
fn settled_at_once_the_estimate_does_not_matter_streaming_a_high_one_keeps_its_refunds() {
    // Each answer settled before the next request: every refund is the key's last admission,
    // so it is given back whole, and both estimates count the true tokens alone.
    let low = run(Strategy::Settled(100), &at_once());
    let high = run(Strategy::Settled(1_000), &at_once());
    for o in [&low, &high] {
        assert!(o.tokens() <= ALLOWED + o.deepest_debt);
        assert!(o.tokens() >= ALLOWED * 95 / 100, "{}", o.tokens());
    }
    assert!(low.tokens().abs_diff(high.tokens()) < ALLOWED / 100);
    // While answers stream, a refund behind a later admission is kept (a place a later request
    // stands behind is not given back): reserving 1 000 for requests of 222 on average, the
    // key counts most of what it reserved and admits well under half its quota.
    let streaming = run(Strategy::Settled(1_000), &tokens::workload());
    assert!(streaming.tokens() < ALLOWED / 2, "{}", streaming.tokens());
    let fixed = run(Strategy::Fixed(1_000), &tokens::workload());
    assert!(streaming.tokens() > fixed.tokens());
}

#[test]
fn the_token_chart_in_docs_is_the_one_the_simulator_draws() {
    let q = tokens::token_quota();
    let out = std::env::temp_dir().join(format!("tollgate-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let demand = tokens::demand_per_minute(&tokens::workload());
    let outcomes = tokens::simulate_strategies(&q);
    let name = "sim-llm-tokens.svg";
    let title = tokens::title(&q, &demand);
    chart::draw_tokens(&out.join(name), &title, q.limit(), &demand, &outcomes).unwrap();
    let drawn = std::fs::read_to_string(out.join(name)).unwrap();
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let committed = std::fs::read_to_string(docs.join(name)).unwrap_or_default();
    std::fs::remove_dir_all(&out).unwrap();
    assert!(
        drawn == committed,
        "docs/{name} is not what the simulator draws now: run `cargo run --example simulate`"
    );
}
