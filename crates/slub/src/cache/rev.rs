//! [`RevArray`]: a per-CPU array stored last record first, so that record
//! 0 (the first CPUs' records, the ones every process touches) ends where
//! the cache's header begins (see `KmemCache`'s field order).

use core::ops::{Index, IndexMut};

/// `N` records, record `i` stored at position `N - 1 - i`.
#[repr(transparent)]
pub(crate) struct RevArray<T, const N: usize>(pub(crate) [T; N]);

impl<T, const N: usize> RevArray<T, N> {
    /// The records in index order (0 first).
    pub(crate) fn iter(&self) -> core::iter::Rev<core::slice::Iter<'_, T>> {
        self.0.iter().rev()
    }
}

impl<T, const N: usize> Index<usize> for RevArray<T, N> {
    type Output = T;
    #[inline(always)]
    fn index(&self, i: usize) -> &T {
        &self.0[N - 1 - i]
    }
}

impl<T, const N: usize> IndexMut<usize> for RevArray<T, N> {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.0[N - 1 - i]
    }
}

impl<'a, T, const N: usize> IntoIterator for &'a RevArray<T, N> {
    type Item = &'a T;
    type IntoIter = core::iter::Rev<core::slice::Iter<'a, T>>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::RevArray;

    #[test]
    fn record_zero_is_stored_last() {
        let a = RevArray([10, 11, 12]);
        assert_eq!((a[0], a[1], a[2]), (12, 11, 10));
        assert_eq!(
            a.iter().copied().collect::<std::vec::Vec<_>>(),
            [12, 11, 10]
        );
        let last = a.0.as_ptr_range().end as usize;
        assert_eq!(&a[0] as *const i32 as usize + 4, last);
    }
}
