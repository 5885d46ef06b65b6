//! How the algorithms compare: every algorithm gets the same quota (100 per minute) and the
//! same traffic, and the simulator prints what each let through and draws a chart per pattern.
//!
//! Run it with `cargo run --example simulate` to print the tables and rewrite the charts in
//! `docs/` (`docs/sim-abuse-2x.svg`, ...), or `cargo run --example simulate -- OUT_DIR` to
//! write them elsewhere.
//!
//! Time is a `ManualClock` set to each request's time, so the simulation of many minutes of
//! traffic takes milliseconds and comes out the same on every run.

mod chart;
mod sim;

use std::error::Error;
use std::path::PathBuf;

use sim::{patterns, quota, secs, simulate_all, table, COLUMNS};

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
    Ok(())
}
