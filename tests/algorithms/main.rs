//! The algorithms against oracles written apart from the code, and their properties.

#[path = "../support/mod.rs"]
mod support;

mod bucket_oracle;
mod calendar_windows;
mod clock_jitter;
mod clock_read_late;
mod count_if_props;
mod gcra_oracle;
mod jitter_refunds;
mod reaction_time;
mod settle_bound;
mod settle_debt;
mod sliding_log_refunds;
mod state_lifetime;
mod tiered;
mod window_oracle;
