//! How the algorithms compare: every algorithm gets the same quota (100 per minute) and the
//! same traffic, and the simulator prints what each let through and draws a chart per pattern.
//! Then a key's token budget under an LLM workload, whose requests' true costs are known only
//! when their answers end: reserving a fixed estimate against settling to the true cost
//! (`docs/sim-llm-tokens.svg`).
//!
//! Run it with `cargo run --example simulate` to print the tables and rewrite the charts in
//! `docs/` (`docs/sim-abuse-2x.svg`, ...), or `cargo run --example simulate -- OUT_DIR` to
//! write them elsewhere.
//!
//! Time is a `ManualClock` set to each request's time, so the simulation of many minutes of
//! traffic takes milliseconds and comes out the same on every run.

mod chart;
mod sim;
mod tokens;

use std::error::Error;
use std::path::PathBuf;

use sim::{patterns, quota, secs, simulate_all, table, COLUMNS};
use tokens::thousands;

fn main() -> Result<(), Box<dyn Error>> {
    let out = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "docs".to_owned()));
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;

    let q = quota();
    let period = u64::try_from(q.period().as_nanos())?;
    println!(
        "Quota: {} per {} (one request every {}), the same for every algorithm.\n",
        q.limit(),
        secs(period),
        secs(u64::try_from(q.emission_interval().as_nanos())?)
    );
    println!("{COLUMNS}\n");

    for pattern in patterns(&q) {
        let outcomes = simulate_all(&q, &pattern);
        let path = out.join(format!("sim-{}.svg", pattern.slug));
        chart::draw(&path, &pattern, &outcomes)?;
        println!("{}\n", pattern.title);
        println!("{}", table(&outcomes));
        println!("chart: {}\n", path.display());
    }
    let q = tokens::token_quota();
    let calls = tokens::workload();
    let demand = tokens::demand_per_minute(&calls);
    let asked: u64 = demand.iter().sum();
    let title = tokens::title(&q, &demand);
    println!(
        "{title} ({} requests, {} tokens in {}).",
        calls.len(),
        thousands(asked),
        secs(tokens::SPAN)
    );
    println!(
        "GCRA; each request reserves an estimate when it arrives and is settled to its true cost\n\
         when its answer ends (300 ms, then 100 tokens a second), or never. Denied requests are\n\
         dropped. \"of quota\": the true tokens admitted, of the {} the quota allows in {}\n\
         (its burst and its rate).\n",
        thousands(tokens::allowed(&q)),
        secs(tokens::SPAN)
    );
    let outcomes = tokens::simulate_strategies(&q);
    let path = out.join("sim-llm-tokens.svg");
    chart::draw_tokens(&path, &title, q.limit(), &demand, &outcomes)?;
    println!("{}", tokens::token_table(&q, &outcomes));
    println!("{}\n", tokens::FINDING);
    println!("chart: {}", path.display());
    Ok(())
}
