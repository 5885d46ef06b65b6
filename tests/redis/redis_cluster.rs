//! The Redis store on a three-master Redis Cluster: keys spread over the masters, a key's tiers
//! share one slot (one script updates them together), and one limit holds across connections.

use crate::support::hammer;
use crate::support::redis as server;

use std::time::Duration;

use tollgate::store::{OnFailure, RedisStore};
use tollgate::{Quota, RateLimiter};

fn a_cluster_holds_every_limit_exactly() {
    let Some(cluster) = server::RedisCluster::start() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let connect = || async {
            RedisStore::cluster(cluster.urls())
                .await
                .unwrap()
                .on_failure(OnFailure::Closed)
                .timeout(Duration::from_secs(5))
        };
        // Tiers: 3 at once, 5 an hour. Keys hash to every master.
        let tiered = RateLimiter::gcra([
            Quota::per_second(1).with_burst(3).named("short"),
            Quota::per_hour(5).named("long"),
        ])
        .with_store(connect().await);
        for user in 0..60u64 {
            for _ in 0..3 {
                let d = tiered.check(user).await.unwrap();
                assert!(d.allowed);
                assert_eq!(d.tiers().len(), 2);
            }
            let d = tiered.check(user).await.unwrap();
            assert!(!d.allowed, "the short tier is spent");
        }
        let mut masters_used = 0;
        for node in &cluster.nodes {
            let keys = server::command(node.port, "DBSIZE").unwrap_or_default();
            let keys: u64 = keys.trim_start_matches(':').trim().parse().unwrap_or(0);
            if keys > 0 {
                masters_used += 1;
            }
        }
        assert_eq!(masters_used, 3, "60 users' keys land on every master");

        // Eight connections, one key: exactly the quota.
        let quota = Quota::per_hour(40).named("hammer");
        let mut limiters = Vec::new();
        for _ in 0..8 {
            limiters.push(RateLimiter::gcra(quota.clone()).with_store(connect().await));
        }
        let admitted = hammer::admitted_together(limiters, "one-key", 20).await;
        assert_eq!(admitted, 40);

        // Keys a client starts (or fills) with `}` cannot shorten the hash tag: they spread
        // over the masters like any others, and each lands in its own tag's slot.
        let braces = RateLimiter::gcra(Quota::per_hour(5).named("b"))
            .with_store(connect().await.prefix("brace"));
        let mut slots = std::collections::HashSet::new();
        for n in 0..60u64 {
            let key = match n % 3 {
                0 => format!("}}{n}"),
                1 => format!("}}}}{{{n}}}"),
                _ => format!("x}}{n}"),
            };
            assert!(braces.check(key.as_str()).await.unwrap().allowed);
            let name = braces.table().redis_keys(&key.as_str().into()).remove(0);
            let name = String::from_utf8(name).unwrap();
            let tag = &name[name.find('{').unwrap() + 1..name.find('}').unwrap()];
            let port = cluster.nodes[0].port;
            let slot =
                |k: &str| server::command(port, &format!("CLUSTER KEYSLOT \"{k}\"")).unwrap();
            assert_eq!(slot(&name), slot(tag), "{name}");
            slots.insert(slot(&name));
        }
        assert!(slots.len() > 50, "60 keys in {} slots", slots.len());
        let count = "EVAL \"return #redis.call('KEYS', 'brace:*')\" 0";
        let per_master: Vec<u64> = cluster
            .nodes
            .iter()
            .map(|node| {
                let reply = server::command(node.port, count).unwrap_or_default();
                reply.trim().trim_start_matches(':').parse().unwrap_or(0)
            })
            .collect();
        assert_eq!(per_master.iter().sum::<u64>(), 60, "{per_master:?}");
        assert!(
            per_master.iter().all(|&n| n >= 5),
            "`}}`-keys spread over every master: {per_master:?}"
        );
    });
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![server::needs_redis(
        "a_cluster_holds_every_limit_exactly",
        a_cluster_holds_every_limit_exactly,
    )]
}
