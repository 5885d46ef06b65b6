//! The limiter: [`RateLimiter`] (an algorithm, its quotas, a store and a clock, usable without
//! HTTP), the object-safe [`Limiter`] a layer runs, and what wraps a limiter there: the blocks
//! of a layer's handle, bans, per-key plans, quotas changed live, the limit on requests in
//! flight, and the registry of algorithms ([`Spec`]) that layers and configuration build
//! limiters from.

mod ban;
mod bind;
mod constructors;
mod held;
pub(crate) mod in_flight;
mod live;
mod object;
mod per_key;
pub(crate) mod plan;
mod plan_change;
mod spec;
mod typed;

pub use self::ban::Ban;
pub(crate) use self::ban::Bans;
pub use self::bind::LayerStore;
pub(crate) use self::bind::{Bind, Binder, Recipe};
pub(crate) use self::held::guarded;
pub(crate) use self::in_flight::Hold;
pub(crate) use self::live::{Live, LivePlans, Serve};
pub(crate) use self::object::{BoxedDecision, DecisionFuture, Limiter};
pub(crate) use self::per_key::{Maker, PerKey};
pub use self::plan::Plan;
pub(crate) use self::plan::{sealed, Select};
pub(crate) use self::spec::{AlgorithmKind, LayerClock, Spec};
pub use self::typed::RateLimiter;
