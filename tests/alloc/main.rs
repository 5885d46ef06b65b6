//! What the memory path allocates, counted by one per-thread counting allocator.

#[path = "../support/mod.rs"]
mod support;

/// One allocator for the binary; its counts are per thread, so the tests may run in parallel.
#[global_allocator]
static GLOBAL: support::counting_alloc::Counting = support::counting_alloc::Counting;

mod alloc;
mod alloc_responses;
mod bytes_per_key;
mod in_flight_alloc;
mod long_keys_stored;
mod window_alloc;
