//! A global allocator that counts, per thread: the allocations (and reallocations) a thread
//! makes while it has switched counting on, and the bytes and blocks it has allocated and not
//! yet freed (sizes as requested, without the allocator's own overhead). Counts are per thread,
//! so the tests of one binary may run in parallel; the test harness's own threads add nothing.
//!
//! The `alloc` binary installs it, once, in its `main.rs`:
//! `#[global_allocator] static GLOBAL: support::counting_alloc::Counting = ...;`.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The counting allocator; every call goes to the system allocator.
pub struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    /// Bytes and blocks allocated on this thread and not yet freed (frees on this thread of
    /// blocks from others count against it; the tests free nothing across threads).
    static LIVE: Cell<(i64, i64)> = const { Cell::new((0, 0)) };
}

fn note(bytes: i64, blocks: i64, call: bool) {
    // `try_with`: the thread-locals may already be gone while a thread shuts down.
    if call && COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    }
    let _ = LIVE.try_with(|live| {
        let (b, n) = live.get();
        live.set((b + bytes, n + blocks));
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting touches only
// const-initialised thread-locals without destructors, which do not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            note(layout.size() as i64, 1, true);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            note(layout.size() as i64, 1, true);
        }
        ptr
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            note(new_size as i64 - layout.size() as i64, 0, true);
        }
        new
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as i64), -1, false);
    }
}

/// The allocations this thread has made while counting, so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Heap allocations made on this thread while `f` runs.
pub fn allocations_in<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let before = allocations();
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    (allocations() - before, out)
}

/// The bytes and blocks this thread has allocated and not yet freed.
pub fn live() -> (i64, i64) {
    LIVE.with(Cell::get)
}
