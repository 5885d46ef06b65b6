//! Limits on requests in flight, in memory.

#[path = "../support/mod.rs"]
mod support;

mod in_flight;
mod in_flight_combos;
mod in_flight_http;
mod in_flight_upgrade;
