//! The Redis store against real redis-server processes (libtest-mimic harness).

//! Each module lists its trials; a module's tests are named `module::test`, as in the
//! other binaries. Without `redis-server` on PATH the Redis tests are reported as ignored
//! (tests/support/redis.rs).

#[path = "../support/mod.rs"]
mod support;

mod attack_costs;
mod attack_plans;
mod attack_redis;
mod cost;
mod redis_blocks;
mod redis_bounds;
mod redis_cluster;
mod redis_cluster_failover;
mod redis_cluster_outage;
mod redis_deny_cache;
mod redis_error_kinds;
mod redis_eviction;
mod redis_failure_policy;
mod redis_fleet_ops;
mod redis_in_flight;
mod redis_keys;
mod redis_layer;
mod redis_leases;
mod redis_live_fleet;
mod redis_live_quotas;
mod redis_live_races;
mod redis_outage;
mod redis_policies;
mod redis_readiness;
mod redis_sentinel;
mod redis_settle;
mod redis_settle_layer;
mod redis_store;
mod redis_vectors_buckets;
mod redis_vectors_gcra;
mod redis_vectors_settle;
mod redis_vectors_windows;
mod redis_version;

fn main() -> std::process::ExitCode {
    use support::redis::{alone, harness, module};

    harness(
        [
            module("attack_costs", attack_costs::trials),
            module("attack_plans", attack_plans::trials),
            module("attack_redis", attack_redis::trials),
            module("cost", cost::trials),
            module("redis_blocks", redis_blocks::trials),
            module("redis_bounds", redis_bounds::trials),
            module("redis_cluster", redis_cluster::trials),
            alone("redis_cluster_failover", redis_cluster_failover::trials),
            alone("redis_cluster_outage", redis_cluster_outage::trials),
            module("redis_deny_cache", redis_deny_cache::trials),
            module("redis_error_kinds", redis_error_kinds::trials),
            alone("redis_eviction", redis_eviction::trials),
            module("redis_failure_policy", redis_failure_policy::trials),
            module("redis_fleet_ops", redis_fleet_ops::trials),
            module("redis_in_flight", redis_in_flight::trials),
            module("redis_keys", redis_keys::trials),
            module("redis_layer", redis_layer::trials),
            module("redis_leases", redis_leases::trials),
            module("redis_live_fleet", redis_live_fleet::trials),
            module("redis_live_quotas", redis_live_quotas::trials),
            module("redis_live_races", redis_live_races::trials),
            alone("redis_outage", redis_outage::trials),
            module("redis_policies", redis_policies::trials),
            module("redis_readiness", redis_readiness::trials),
            module("redis_sentinel", redis_sentinel::trials),
            module("redis_settle", redis_settle::trials),
            module("redis_settle_layer", redis_settle_layer::trials),
            module("redis_store", redis_store::trials),
            module("redis_vectors_buckets", redis_vectors_buckets::trials),
            module("redis_vectors_gcra", redis_vectors_gcra::trials),
            module("redis_vectors_settle", redis_vectors_settle::trials),
            module("redis_vectors_windows", redis_vectors_windows::trials),
            module("redis_version", redis_version::trials),
        ]
        .into_iter()
        .flatten()
        .collect(),
    )
}
