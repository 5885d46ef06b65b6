//! Division by a number fixed when an algorithm is built, done by a multiplication.

/// Divides `u64`s by one divisor with a multiply-high, two shifts and two additions instead of
/// a hardware division, which takes up to 40-odd cycles for 64-bit operands. Exact for every
/// divisor and dividend: this is the unsigned division of Granlund and Montgomery, "Division
/// by Invariant Integers using Multiplication" (PLDI 1994), figure 4.1, with `N = 64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Divisor {
    /// `⌊2^64 · (2^l − d) / d⌋ + 1`, where `l = ⌈log2 d⌉`.
    magic: u64,
    /// `min(l, 1)`.
    shift1: u32,
    /// `max(l − 1, 0)`.
    shift2: u32,
}

impl Divisor {
    /// Division by `d`.
    ///
    /// # Panics
    ///
    /// If `d` is zero.
    pub(crate) fn new(d: u64) -> Self {
        assert!(d > 0, "division by zero");
        let l = u64::BITS - (d - 1).leading_zeros();
        let d = u128::from(d);
        // 2^(l-1) < d <= 2^l, so `2^l - d < d` and the quotient is below 2^64.
        let magic = (((1u128 << l) - d) << 64) / d + 1;
        Self {
            magic: magic as u64,
            shift1: l.min(1),
            shift2: l.saturating_sub(1),
        }
    }

    /// `n / d`, rounded down.
    #[inline]
    pub(crate) fn divide(self, n: u64) -> u64 {
        let t = ((u128::from(self.magic) * u128::from(n)) >> 64) as u64;
        // `t <= n`, and the sum is at most `n`: neither step overflows.
        (t + ((n - t) >> self.shift1)) >> self.shift2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(d: u64, n: u64) {
        assert_eq!(Divisor::new(d).divide(n), n / d, "{n} / {d}");
    }

    #[test]
    fn edges() {
        let special = [
            1,
            2,
            3,
            5,
            7,
            10,
            1_000_000_000,
            (1 << 32) - 1,
            1 << 32,
            (1 << 32) + 1,
            (1 << 63) - 1,
            1 << 63,
            (1 << 63) + 1,
            u64::MAX - 1,
            u64::MAX,
        ];
        for &d in &special {
            for &n in &special {
                for n in [n - 1, n, n.saturating_add(1), 0, u64::MAX] {
                    check(d, n);
                    check(d, n.wrapping_mul(d));
                    check(d, n.wrapping_mul(d).wrapping_sub(1));
                }
            }
        }
        for k in 0..64 {
            for d in [(1u64 << k) - 1, 1 << k, (1 << k) + 1] {
                if d > 0 {
                    for n in [0, 1, d - 1, d, d + 1, u64::MAX / 3, u64::MAX - 1, u64::MAX] {
                        check(d, n);
                    }
                }
            }
        }
    }

    #[test]
    fn random() {
        // xorshift64*: a fixed sequence, so a failure reproduces.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        for _ in 0..200_000 {
            let (a, b) = (next(), next());
            // Divisors of every magnitude, dividends near multiples of them.
            let d = (a >> (a % 64)).max(1);
            check(d, b);
            check(d, (b / d).wrapping_mul(d));
            check(d, (b / d).wrapping_mul(d).wrapping_sub(1));
        }
    }
}
