//! A limit on requests in flight per key: [`InFlightLayer`]. The limiter it holds, and the hold
//! an admitted request keeps until its response ends, are in `crate::limiter::in_flight`.

mod layer;

pub use self::layer::InFlightLayer;

#[cfg(doctest)]
#[doc = include_str!("../../../tests/in_flight/compile_fail.md")]
struct CompileFail;
