//! The examples, and the code of the README and the guide, run as users would run them.

#[path = "../support/mod.rs"]
mod support;

/// The simulator of `examples/simulate`, at the root as its `chart.rs` expects (`crate::sim`).
#[allow(dead_code)]
#[path = "../../examples/simulate/sim.rs"]
mod sim;

/// The token budget of `examples/simulate`, beside `sim` as its `chart.rs` expects.
#[allow(dead_code)]
#[path = "../../examples/simulate/tokens.rs"]
mod tokens;

/// The simulator's charts, drawn by the tests to compare with `docs/`.
#[path = "../../examples/simulate/chart.rs"]
mod chart;

mod examples_admin;
mod examples_http;
mod examples_llm_gateway;
mod readme;
mod readme_testing;
mod simulate;
mod simulate_tokens;
mod testing_limits;
