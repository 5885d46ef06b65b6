//! A few values of one key's state, oldest first: two inline, any other number in one heap
//! block, so that the common case (two sub-window counters, two tiers) costs no second memory
//! access. Empty in the fresh state, which holds no heap memory.

use std::ops::{Deref, DerefMut};

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub(crate) enum Few<T> {
    #[default]
    Empty,
    Two([T; 2]),
    Heap(Box<[T]>),
}

impl<T: Clone> Few<T> {
    /// `len` copies of `value`, without a heap block for two.
    pub(crate) fn filled(len: usize, value: T) -> Self {
        match len {
            0 => Self::Empty,
            2 => Self::Two([value.clone(), value]),
            _ => Self::Heap(vec![value; len].into_boxed_slice()),
        }
    }
}

impl<T> Few<T> {
    /// `len` values, the ones there kept in place and `fill` made for the rest (or dropped).
    pub(crate) fn resize_with(&mut self, len: usize, fill: impl FnMut() -> T) {
        if self.len() != len {
            let mut values: Vec<T> = match std::mem::take(self) {
                Self::Empty => Vec::new(),
                Self::Two(two) => two.into(),
                Self::Heap(heap) => heap.into_vec(),
            };
            values.resize_with(len, fill);
            *self = Self::from(values);
        }
    }
}

impl<T> From<Vec<T>> for Few<T> {
    fn from(values: Vec<T>) -> Self {
        if values.is_empty() {
            return Self::Empty;
        }
        match <[T; 2]>::try_from(values) {
            Ok(two) => Self::Two(two),
            Err(values) => Self::Heap(values.into_boxed_slice()),
        }
    }
}

#[cfg(test)]
impl<T: Clone> From<&[T]> for Few<T> {
    fn from(values: &[T]) -> Self {
        Self::from(values.to_vec())
    }
}

impl<T> Deref for Few<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        match self {
            Self::Empty => &[],
            Self::Two(values) => values,
            Self::Heap(values) => values,
        }
    }
}

impl<T> DerefMut for Few<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Self::Empty => &mut [],
            Self::Two(values) => values,
            Self::Heap(values) => values,
        }
    }
}
