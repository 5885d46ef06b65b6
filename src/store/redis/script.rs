//! The Lua script of each algorithm: the shared prelude, the algorithm's module, the driver.

use super::algorithms::RedisAlgorithm;

const PRELUDE: &str = include_str!("lua/prelude.lua");
const DRIVER: &str = include_str!("lua/driver.lua");

/// The full script of an algorithm: the prelude, its module, the driver.
pub(crate) fn source<A: RedisAlgorithm>() -> String {
    format!("{PRELUDE}\n{}\n{DRIVER}", A::LUA)
}
