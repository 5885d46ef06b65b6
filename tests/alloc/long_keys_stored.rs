//! The memory store keeps a long key's digest, never its bytes: a key longer than
//! `Key::MAX_LEN` costs the store what any other key costs, however long the value the client
//! sent, while the key itself (what callbacks see) keeps the whole value.
//!
//! A global allocator counts the bytes each thread holds, so the test measures what the store
//! keeps once the requests' own keys are gone.

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Key, Quota, RateLimiter};

fn live() -> isize {
    crate::support::counting_alloc::live().0 as isize
}

/// The bytes the store holds after `n` checks on distinct keys of `len` bytes each.
fn held_per_key(len: usize, n: usize) -> isize {
    let limiter =
        RateLimiter::gcra(Quota::new(1_000, Duration::from_secs(1))).with_clock(ManualClock::new());
    // One key first, so that the table's first growth is not counted.
    assert!(
        limiter
            .check_now(Key::from(vec![b'-'; len].as_slice()))
            .allowed
    );
    let before = live();
    for i in 0..n {
        let mut value = vec![b'k'; len];
        value[..8].copy_from_slice(&(i as u64).to_be_bytes());
        let key = Key::from(value.as_slice());
        assert_eq!(key.as_bytes().map(<[u8]>::len), Some(len));
        assert!(limiter.check_now(key).allowed);
    }
    assert_eq!(limiter.table().len(), n + 1);
    let held = live() - before;
    drop(limiter);
    held / n as isize
}

#[test]
fn long_keys_cost_the_store_a_digest_not_their_bytes() {
    let long = 16 * 1024;
    let n = 200;
    let per_long_key = held_per_key(long, n);
    let per_short_key = held_per_key(Key::MAX_LEN, n);
    // A 16 KiB key costs the store no more than a 64-byte one: its 32-byte digest, shared.
    assert!(
        per_long_key <= per_short_key,
        "{per_long_key} bytes per {long}-byte key, {per_short_key} per {}-byte key",
        Key::MAX_LEN
    );
}
