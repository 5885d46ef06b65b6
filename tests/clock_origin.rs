//! `SystemClock` and `OsClock` read the same time, whichever the process read first and
//! however long before: limiters on either clock may share a policy's state in one store. (A
//! file of its own: the property is about the process's first readings.)

use std::hint::black_box;

use tollgate::clock::{Clock, OsClock, SystemClock};

#[test]
fn the_system_and_os_clocks_read_the_same_time() {
    // The OS clock first, then 20 ms of work, then the system clock's first reading (and its
    // calibration): were they counted from their own first readings, they would be 20 ms apart.
    let start = OsClock.now_nanos();
    let mut spin = 0u64;
    while OsClock.now_nanos() - start < 20_000_000 {
        spin = black_box(spin + 1);
    }
    SystemClock::calibrate();
    for _ in 0..1000 {
        let before = OsClock.now_nanos();
        let system = SystemClock.now_nanos();
        let after = OsClock.now_nanos();
        // The calibration's error over this process's short life: well under a millisecond.
        assert!(
            before.saturating_sub(1_000_000) <= system && system <= after + 1_000_000,
            "{before} <= {system} <= {after}"
        );
    }
}
