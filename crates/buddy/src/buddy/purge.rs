//! Purging: free blocks given back to the OS (the page source's
//! [`purge`](crate::BuddySource::purge) hook, `madvise(MADV_DONTNEED)` on
//! std) while keeping their address space, as the kernel's free page
//! reporting does for a hypervisor: blocks are taken off the free lists
//! under the zone lock (a batch at a time), purged outside it, and put
//! back at the cold end flagged `PURGED` and known zero (PG_zero: the OS
//! zeroes them), so a zeroed request served from them clears nothing.
//!
//! Rules (see `crate::desc::PURGED`): only whole free blocks at or above
//! the policy's order are purged; splitting a purged block gives purged
//! halves; merging a purged block with a resident buddy gives a resident
//! block (purged again by a later pass); handing a block out clears the
//! flag.

use core::ptr::NonNull;

use local_lock::Platform;

use super::Buddy;
use crate::desc::{PURGED, ZERO_FULL};
use crate::types::{Stat, ZoneId};
use crate::zone::{Isolated, PurgeScan};

/// Blocks a pass takes off the lists at a time (at most this many blocks
/// are away from the free lists while they are purged: an allocation
/// meanwhile sees that much less free memory, and a growing heap may grow
/// instead).
const PURGE_BATCH: usize = 8;

impl<P: Platform> Buddy<P> {
    /// Purges every resident free block at or above the purge order
    /// ([`Config::purge_order`](crate::Config::purge_order)) now, with
    /// `purge(block, bytes)` (which gives the memory back to the OS and
    /// returns true if it then reads as zero; false stops the pass and
    /// leaves the block as it was). Returns the bytes purged. The
    /// `malloc_trim` of a page source: see
    /// [`BuddySource::trim`](crate::BuddySource::trim).
    pub fn trim_with(&self, purge: impl FnMut(NonNull<u8>, usize) -> bool) -> usize {
        self.purge_pass(PurgeScan::All, purge)
    }

    /// One decay scan at time `now_ms` (the caller's monotonic clock): a
    /// free block at or above the purge order that an earlier scan saw
    /// free at least `decay_ms` before is purged with `purge` (as in
    /// [`trim_with`](Self::trim_with)), while its zone keeps more resident
    /// free pages than the policy's `retain_pages` (default: the high
    /// watermark); the blocks seen for the first time are stamped. Does
    /// nothing if the policy has no decay. Returns the bytes purged.
    pub fn decay_with(&self, now_ms: u64, purge: impl FnMut(NonNull<u8>, usize) -> bool) -> usize {
        let Some(decay) = self.cfg.purge().decay_ms else {
            return 0;
        };
        self.purge_pass(
            PurgeScan::Decay {
                now: now_ms,
                decay,
                retain: 0,
            },
            purge,
        )
    }

    /// Purges resident free blocks at or above the purge order, largest
    /// first, until each zone keeps at most `retain` resident free pages
    /// (as [`trim_with`](Self::trim_with), with a floor): the enforcement
    /// of [`PurgePolicy::max_resident_pages`](crate::PurgePolicy::max_resident_pages).
    /// Returns the bytes purged.
    pub fn purge_to_with(
        &self,
        retain: usize,
        purge: impl FnMut(NonNull<u8>, usize) -> bool,
    ) -> usize {
        self.purge_pass(PurgeScan::Cap { retain }, purge)
    }

    /// Whether `zone` keeps more resident free pages than a cap of `cap`
    /// allows ([`PurgePolicy::resident_shift`](crate::PurgePolicy::resident_shift)
    /// raises it with the pages in use). Takes the zone lock.
    pub fn over_resident_cap(&self, zone: ZoneId, cap: usize) -> bool {
        let g = self.lock_zone(zone.index());
        g.free - g.purged > self.resident_cap(g.managed, g.free, cap)
    }

    /// The resident free pages a zone with `managed` pages, `free` of them
    /// free, may keep under a cap of `cap`: `cap`, or its pages in use
    /// shifted right by the policy's `resident_shift` if that is more.
    fn resident_cap(&self, managed: usize, free: usize, cap: usize) -> usize {
        match self.cfg.purge().resident_shift {
            Some(s) => cap.max(managed.saturating_sub(free) >> s.min(63)),
            None => cap,
        }
    }

    /// Resident free pages of `zone` (free pages not purged): what
    /// [`PurgePolicy::max_resident_pages`](crate::PurgePolicy::max_resident_pages)
    /// bounds. Takes the zone lock.
    pub fn nr_resident_free_pages(&self, zone: ZoneId) -> usize {
        let g = self.lock_zone(zone.index());
        g.free - g.purged
    }

    fn purge_pass(
        &self,
        scan: PurgeScan,
        mut purge: impl FnMut(NonNull<u8>, usize) -> bool,
    ) -> usize {
        let min = self.cfg.purge_order();
        let max = self.cfg.max_order();
        let mut bytes = 0;
        for z in 0..self.nr_zone_ids() {
            loop {
                let mut batch = [Isolated::NONE; PURGE_BATCH];
                let mut g = self.lock_zone(z);
                let scan = match scan {
                    PurgeScan::Decay { now, decay, .. } => PurgeScan::Decay {
                        now,
                        decay,
                        retain: self.cfg.purge().retain_pages.unwrap_or(g.wmark.high),
                    },
                    PurgeScan::Cap { retain } => PurgeScan::Cap {
                        retain: self.resident_cap(g.managed, g.free, retain),
                    },
                    s => s,
                };
                // SAFETY: zone lock held.
                let n = unsafe { g.isolate_for_purge(min, max, scan, &mut batch) };
                drop(g);
                if n == 0 {
                    break;
                }
                let (b, stop) = self.purge_isolated(z, &batch[..n], &mut purge);
                bytes += b;
                if stop || n < PURGE_BATCH {
                    break;
                }
            }
        }
        bytes
    }

    /// The second half of a purge pass's round: `purge` each block
    /// `isolate_for_purge` took off `zone`'s lists (until one fails), then
    /// free them all back, purged or as they were. Returns the bytes
    /// purged and whether a purge failed. Out of line: a pass that finds
    /// nothing to purge (most decay ticks of a small process) runs only
    /// the isolation, and mm-malloc keeps that part in the code every
    /// process maps (issue #18: its text in one 64 KiB window).
    #[inline(never)]
    fn purge_isolated(
        &self,
        z: usize,
        batch: &[Isolated],
        purge: &mut impl FnMut(NonNull<u8>, usize) -> bool,
    ) -> (usize, bool) {
        let shift = self.cfg.page_shift();
        let mut bytes = 0;
        let mut done = [false; PURGE_BATCH];
        let mut stop = false;
        for (i, b) in batch.iter().enumerate() {
            if stop {
                break;
            }
            let len = self.cfg.block_size(b.order);
            // SAFETY: span memory is never null.
            done[i] = purge(unsafe { NonNull::new_unchecked(b.ptr) }, len);
            stop = !done[i];
        }
        let mut g = self.lock_zone(z);
        for (b, ok) in batch.iter().zip(done) {
            let found = self.spans.find(b.ptr as usize, shift);
            let Some(found) = found else {
                unreachable!("buddy: isolated block outside every span")
            };
            let zero = if ok {
                g.count(Stat::PURGE, 1);
                g.count(Stat::PURGED_BYTES, self.cfg.block_size(b.order) as u64);
                bytes += self.cfg.block_size(b.order);
                ZERO_FULL | PURGED
            } else {
                b.zero
            };
            #[cfg(any(test, feature = "invariants"))]
            if ok {
                self.verify_known_zero(b.ptr, ZERO_FULL, b.order);
            }
            // SAFETY: the block was a free block of this zone and
            // span, taken off the lists by `isolate_for_purge` and
            // held by nobody since.
            // The decay scan's stamp goes with its `AGED` bit.
            unsafe {
                (*b.desc).clear_owner_for_free();
                g.free_one(
                    &self.cfg,
                    &found,
                    b.desc,
                    b.ptr as usize >> shift,
                    b.order,
                    zero,
                    true,
                )
            };
        }
        drop(g);
        (bytes, stop)
    }

    /// Pages of `zone` given back to the OS and still free (blocks flagged
    /// purged); the zone's resident free pages are
    /// [`nr_free_pages`](Self::nr_free_pages) minus these.
    pub fn nr_purged_pages(&self, zone: ZoneId) -> usize {
        self.lock_zone(zone.index()).purged
    }
}
