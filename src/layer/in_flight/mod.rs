//! A limit on requests in flight per key: [`InFlightLayer`], the limiter it holds, and the
//! [`Hold`] an admitted request keeps until its response ends.

mod layer;
mod limit;

pub use self::layer::InFlightLayer;
pub(crate) use self::limit::Hold;
#[cfg(test)]
pub(crate) use self::limit::{InFlight, DEFAULT_LEASE_TTL};
#[cfg(feature = "serde")]
pub(crate) use self::limit::{MAX_LEASE_TTL, MIN_LEASE_TTL};

#[cfg(doctest)]
#[doc = include_str!("../../../tests/in_flight/compile_fail.md")]
struct CompileFail;
