//! Plans: what a [`quota_for`](crate::layer::RateLimitLayer::quota_for) selector returns
//! ([`Plan`]), and the selector as a layer keeps it ([`Select`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::key::RequestHead;
use crate::{Key, Quota};

/// What a [`quota_for`](crate::layer::RateLimitLayer::quota_for) selector returns: the quotas
/// of the request's plan.
///
/// - A [`Quota`]: one quota.
/// - Several quotas that must all allow a request (tiers, such as 10 a second and 1000 a day):
///   a `Vec<Quota>`, an array `[Quota; N]` or an `Arc<[Quota]>` (cloned without allocating).
///
/// Each quota of a plan is decided by the layer's algorithm with the layer's options (shaping,
/// sub-windows); a plan of several quotas, or any plan of a layer built with tiers, is decided
/// as tiers. A plan with no quota gets the layer's own quotas.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a plan",
    label = "the selector returns this",
    note = "a plan is a `Quota`, or several quotas (tiers) as a `Vec<Quota>`, an array or an \
            `Arc<[Quota]>`"
)]
pub trait Plan: sealed::Sealed {}

pub(crate) mod sealed {
    use crate::Quota;

    /// How a plan is read: not for implementing outside the crate.
    #[allow(unreachable_pub)]
    pub trait Sealed {
        /// The plan's quotas, in order.
        fn quotas(&self) -> &[Quota];
    }
}

impl Plan for Quota {}

impl sealed::Sealed for Quota {
    fn quotas(&self) -> &[Quota] {
        std::slice::from_ref(self)
    }
}

macro_rules! tiered_plan {
    ($([$($param:tt)*] $ty:ty;)*) => {$(
        impl<$($param)*> Plan for $ty {}

        impl<$($param)*> sealed::Sealed for $ty {
            fn quotas(&self) -> &[Quota] {
                self
            }
        }
    )*};
}

tiered_plan! {
    [] Vec<Quota>;
    [] Arc<[Quota]>;
    [const N: usize] [Quota; N];
}

/// The selector, with its plan handed to `found` as quotas.
pub(crate) type Select = dyn Fn(&Key, RequestHead<'_>, &mut dyn FnMut(&[Quota])) + Send + Sync;

/// `select` as the layer keeps it.
pub(crate) fn select<F, P>(select: F) -> Arc<Select>
where
    F: Fn(&Key, RequestHead<'_>) -> P + Send + Sync + 'static,
    P: Plan,
{
    Arc::new(move |key, head, found| {
        let plan = select(key, head);
        found(sealed::Sealed::quotas(&plan));
    })
}

/// The plans whose quotas were changed live: each plan, as the layer's `quota_for` selector
/// returns it, and the quotas in force for it.
pub(crate) type PlanBook = Mutex<HashMap<Box<[Quota]>, Arc<[Quota]>>>;
