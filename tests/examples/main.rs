//! The examples, and the code of the README and the guide, run as users would run them.

#[path = "../support/mod.rs"]
mod support;

/// The simulator of `examples/simulate`, at the root as its `chart.rs` expects (`crate::sim`).
#[allow(dead_code)]
#[path = "../../examples/simulate/sim.rs"]
mod sim;

mod examples_admin;
mod examples_http;
mod readme;
mod readme_testing;
mod simulate;
mod testing_limits;
