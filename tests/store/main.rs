//! The memory store: eviction, blocks, bans, concurrency, shared names.

#[path = "../support/mod.rs"]
mod support;

mod bans;
mod blocks;
mod concurrency;
mod edges;
mod eviction;
mod shared_names;
mod stress;
