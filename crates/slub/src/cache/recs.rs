//! [`CpuRecs`]: the per-CPU records of a cache (each CPU's sheaf words and
//! fast record in one [`SheafRecord`], CPU 0's first), placed right after
//! the cache's header and node 0, after the lock whose slots are stored
//! last CPU first: the first CPUs' lock slots, the header, node 0 and the
//! first CPUs' records (the ones every process touches) are then on one
//! page (see `KmemCache`'s field order).

use core::ops::Index;

use local_lock::this_cpu::{CpuSheaves, SheafRecord, SHEAF_RECORD_STRIDE};

use super::CpuFast;

/// `N` CPUs' records: CPU `i`'s sheaf words (the restartable sections'
/// records, [`SHEAF_RECORD_STRIDE`] apart) and its [`CpuFast`].
#[repr(transparent)]
pub(crate) struct CpuRecs<const N: usize>(pub(crate) [SheafRecord<CpuFast>; N]);

// The fast record fits a record with the sheaf words.
const _: () = assert!(
    core::mem::size_of::<CpuSheaves>() + core::mem::size_of::<CpuFast>() <= SHEAF_RECORD_STRIDE
);

impl<const N: usize> CpuRecs<N> {
    /// Every CPU's records, empty.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        CpuRecs([const { SheafRecord::new(CpuFast::new()) }; N])
    }

    /// [`new`](Self::new) at run time (loom's atomics are not `const`).
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        CpuRecs(core::array::from_fn(|_| SheafRecord::new(CpuFast::new())))
    }

    /// The fast records in CPU order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &CpuFast> {
        self.into_iter()
    }

    /// CPU `i`'s sheaf words.
    #[inline(always)]
    pub(crate) fn sheaves(&self, i: usize) -> &CpuSheaves {
        &self.0[i].sheaves
    }

    /// CPU 0's sheaf words, from which every CPU's is reached
    /// ([`SheafSlots::new`](local_lock::this_cpu::SheafSlots::new)'s base).
    #[inline(always)]
    pub(crate) fn sheaves_base(&self) -> *const CpuSheaves {
        self.0.as_ptr().cast()
    }
}

impl<const N: usize> Index<usize> for CpuRecs<N> {
    type Output = CpuFast;
    #[inline(always)]
    fn index(&self, i: usize) -> &CpuFast {
        &self.0[i].data
    }
}

impl<'a, const N: usize> IntoIterator for &'a CpuRecs<N> {
    type Item = &'a CpuFast;
    type IntoIter = core::iter::Map<
        core::slice::Iter<'a, SheafRecord<CpuFast>>,
        fn(&'a SheafRecord<CpuFast>) -> &'a CpuFast,
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|r| &r.data)
    }
}
