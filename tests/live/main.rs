//! Live layers: handles, new quotas, per-key plans, configuration.

#[path = "../support/mod.rs"]
mod support;

mod attack_live;
mod attack_review;
mod config;
mod handle_ops;
mod live_quotas;
mod per_key_plans;
mod plan_quotas;
mod settle_combos;
