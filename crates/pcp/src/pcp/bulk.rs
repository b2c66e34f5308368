//! The bulk paths (`alloc_pages_bulk` and its free counterpart): many
//! order-0 pages under one hold of this CPU's lists.

use core::ptr::NonNull;

use buddy::{AllocFlags, FreeFlags, Order};
use local_lock::Platform;

use super::{PageSource, Pcp};
use crate::stats::PcpStat;

impl<S: PageSource, L: Platform, const N: usize> Pcp<S, L, N> {
    /// `alloc_pages_bulk`: fills the `None` slots of `out` with order-0
    /// pages under one hold of this CPU's lists (refilling as needed);
    /// returns how many slots are populated in total (may be fewer than
    /// `out.len()` if memory runs out; callers loop). `ZEROED` pages are
    /// cleared under the hold, as the kernel's `prep_new_page` there does.
    pub fn alloc_bulk(&self, flags: AllocFlags, out: &mut [Option<NonNull<u8>>]) -> usize {
        let order = Order::ZERO;
        let mut populated = out.iter().filter(|s| s.is_some()).count();
        let missing = out.len() - populated;
        if missing == 0 {
            return populated;
        }
        let single = missing == 1;
        let g = if single || !self.uses_lists(order, flags) {
            None
        } else {
            self.lock()
        };
        let Some(mut g) = g else {
            // One page, or no lists: the single-page path.
            for slot in out.iter_mut().filter(|s| s.is_none()) {
                match self.alloc(order, flags) {
                    Some(p) => {
                        *slot = Some(p.ptr);
                        populated += 1;
                    }
                    None => break,
                }
            }
            return populated;
        };
        let cpu = g.cpu();
        let mut got = 0u64;
        for slot in out.iter_mut().filter(|s| s.is_none()) {
            match self.rmqueue_pcplist(&mut g, order, flags) {
                Some((ptr, known_zero, _)) => {
                    self.prep_new_page(ptr, order, flags, known_zero);
                    *slot = Some(ptr);
                    populated += 1;
                    got += 1;
                }
                None => break,
            }
        }
        self.stat(cpu, PcpStat::BULK_ALLOC, 1);
        self.stat(cpu, PcpStat::BULK_ALLOC_PAGES, got);
        populated
    }

    /// Frees many order-0 pages under one hold of this CPU's lists.
    ///
    /// # Panics
    ///
    /// As [`free`](Self::free), on the first bad page (the pages before it
    /// are freed).
    ///
    /// # Safety
    ///
    /// As [`free`](Self::free) for every page (order 0, not zero-flagged).
    pub unsafe fn free_bulk(&self, pages: &[NonNull<u8>]) {
        let order = Order::ZERO;
        let Some(mut g) = self.lock() else {
            for &p in pages {
                // SAFETY: forwarded contract.
                unsafe { self.free(p, order, FreeFlags::NONE) };
            }
            return;
        };
        let mut batched = false;
        for &p in pages {
            let (o, z) = self.check_free(p, order);
            if z != self.zone {
                // SAFETY: forwarded contract.
                unsafe { self.buddy().free_pages(p, order) };
                continue;
            }
            batched |= self.free_locked(&mut g, p, order, FreeFlags::NONE, o);
        }
        drop(g);
        if batched {
            self.after_batch();
        }
    }
}
