//! A key's sliding-window counters: inline for the two-window estimate, on the heap for more
//! sub-windows.

use std::ops::{Deref, DerefMut};

/// The counters of one key, oldest first. The two-window estimate's two counters live in the
/// state itself, so reading them costs no second memory access; more sub-windows keep theirs in
/// one heap block. Empty in the fresh state.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub(super) enum Counts {
    #[default]
    Empty,
    Two([u64; 2]),
    Heap(Box<[u64]>),
}

impl Counts {
    /// `len` zeroed counters.
    pub(super) fn zeroed(len: usize) -> Self {
        match len {
            0 => Self::Empty,
            2 => Self::Two([0; 2]),
            _ => Self::Heap(vec![0; len].into_boxed_slice()),
        }
    }
}

impl From<&[u64]> for Counts {
    fn from(counts: &[u64]) -> Self {
        let mut c = Self::zeroed(counts.len());
        c.copy_from_slice(counts);
        c
    }
}

impl From<Vec<u64>> for Counts {
    fn from(counts: Vec<u64>) -> Self {
        Self::from(counts.as_slice())
    }
}

impl Deref for Counts {
    type Target = [u64];

    #[inline]
    fn deref(&self) -> &[u64] {
        match self {
            Self::Empty => &[],
            Self::Two(c) => c,
            Self::Heap(c) => c,
        }
    }
}

impl DerefMut for Counts {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u64] {
        match self {
            Self::Empty => &mut [],
            Self::Two(c) => c,
            Self::Heap(c) => c,
        }
    }
}
