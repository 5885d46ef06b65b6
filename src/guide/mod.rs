//! The guide: how to use tollgate, chapter by chapter, with the rules behind each choice.
//!
//! The crate's items say what each does in a few lines; this guide holds the longer form: what
//! to pick and why, recipes for the common shapes of an app, and how to run the stores. Its
//! code is compiled and run as the crate's doctests.
//!
//! | chapter | holds |
//! | --- | --- |
//! | [`algorithms`] | quotas, the algorithm table, several quotas at once, waiting instead of refusing, requests in flight |
//! | [`keys`] | the key of each request: peer IP, client IP behind proxies, headers, tokens, routes, your own; one layer type |
//! | [`responses`] | what clients see: 429 and gRPC answers, the `RateLimit` headers, your own answers, `count_if`, stacked layers |
//! | [`costs`] | costs known after the response: reserve, settle, `Usage`, debt, the bound they keep |
//! | [`recipes`] | layers in a struct, limits per route group, plans, JSON answers, keys in the body |
//! | [`testing`] | a limiter without HTTP, `ManualClock`, a limited router tested without a server, the crate's own tests |
//! | [`operating`] | quotas changed live, one client peeked at, reset or blocked, bans, calendar windows, the memory store's bounds |
//! | [`redis`] | the Redis store across a fleet: failure policies, Sentinel, Cluster, running Redis, local leases |
//! | [`config`] | limits from a configuration file (feature `serde`) |

pub mod algorithms {
    #![doc = include_str!("algorithms.md")]
}

pub mod keys {
    #![doc = include_str!("keys.md")]
}

pub mod responses {
    #![doc = include_str!("responses.md")]
}

pub mod costs {
    #![doc = include_str!("costs.md")]
}

pub mod recipes {
    #![doc = include_str!("recipes.md")]
}

pub mod testing {
    #![doc = include_str!("testing.md")]
}

pub mod operating {
    #![doc = include_str!("operating.md")]
}

pub mod redis {
    #![doc = include_str!("redis.md")]
}

pub mod config {
    #![doc = include_str!("config.md")]
}
