//! The balance work (`pcpu_balance_workfn`): release surplus free chunks,
//! depopulate isolated chunks, keep empty populated pages for atomic
//! requests; and the std worker thread that runs it.

use core::ptr::{null_mut, NonNull};

use local_lock::Platform;

use super::{DataGuard, PcpuAllocator};
use crate::chunk::Chunk;
use crate::source::ChunkSource;
use crate::types::{EMPTY_POP_PAGES_HIGH, PAGE_SIZE};
use local_lock::sync::atomic::Ordering;

impl<P: Platform, S: ChunkSource> PcpuAllocator<P, S> {
    /// `pcpu_balance_workfn`: release fully free chunks beyond one,
    /// depopulate the empty pages of isolated chunks, keep
    /// `EMPTY_POP_PAGES_LOW..=HIGH` (2..4) empty populated pages for atomic
    /// requests, and release free chunks left without populated pages.
    /// A kernel calls it from a work item; std programs from a helper
    /// thread ([`run_balance_worker`](Self::run_balance_worker)) or inline.
    ///
    /// # Panics
    ///
    /// In debug builds, if called in interrupt context (it takes the slow
    /// lock and calls the chunk source).
    pub fn balance(&self) {
        debug_assert!(
            !self.platform.in_interrupt(),
            "percpu: balance() in interrupt context"
        );
        let _slow = self.lock_slow();
        self.balance_requested.store(false, Ordering::Relaxed);
        let mut g = self.lock_data();
        g.stats.balance_runs += 1;
        let g = self.balance_free(g, false);
        let g = self.reclaim_populated(g);
        let g = self.balance_populated(g);
        let g = self.balance_free(g, true);
        drop(g);
    }

    /// `pcpu_balance_free`: destroys every fully free chunk but the first of
    /// the free slot (with `empty_only`, only those without populated
    /// pages). Drops the lock while depopulating and destroying.
    fn balance_free<'a>(&'a self, mut g: DataGuard<'a, P>, empty_only: bool) -> DataGuard<'a, P> {
        let free_slot = self.geo.free_slot;
        let mut to_free: *mut Chunk = null_mut();
        let first = g.slots[free_slot].head;
        let mut c = first;
        while !c.is_null() {
            // SAFETY: lock held; chunks on the list are live.
            unsafe {
                let next = (*c).next;
                debug_assert!(!(*c).st.immutable);
                if c != first && (!empty_only || (*c).st.nr_empty_pop_pages == 0) {
                    g.unlink(c);
                    let key = (*c).base.as_ptr() as usize >> self.geo.key_shift;
                    let removed = g.map.remove(key);
                    debug_assert!(removed);
                    g.stats.chunks_destroyed += 1;
                    // A private singly linked list through `next`.
                    (*c).next = to_free;
                    to_free = c;
                }
                c = next;
            }
        }
        while let Some(c) = NonNull::new(to_free) {
            // SAFETY: the chunk is unreachable by anyone else now (off the
            // lists and the lookup table, fully free); we own it.
            unsafe {
                to_free = (*c.as_ptr()).next;
                let mut rs = 0;
                while let Some((s, e)) = Chunk::ctx(c).next_populated(rs) {
                    drop(g);
                    self.depopulate_chunk(c, s, e);
                    g = self.lock_data();
                    self.chunk_depopulated(&mut g, c, s, e);
                    rs = e;
                }
                drop(g);
                self.destroy_chunk(c);
                g = self.lock_data();
            }
        }
        g
    }

    /// `pcpu_reclaim_populated`: depopulates the empty pages of isolated
    /// chunks, scanning each from its end so populated pages stay near the
    /// start; then sidelines the chunk, or reintegrates it if it is fully
    /// free or atomic requests are short of empty pages.
    fn reclaim_populated<'a>(&'a self, mut g: DataGuard<'a, P>) -> DataGuard<'a, P> {
        let slot = self.geo.to_depopulate_slot;
        while let Some(c) = NonNull::new(g.slots[slot].head) {
            // SAFETY: lock held whenever chunk state is touched; `c` stays
            // live (destruction needs the alloc mutex, which we hold).
            unsafe {
                debug_assert!(!(*c.as_ptr()).st.immutable);
                let nr_pages = (*c.as_ptr()).st.nr_pages as isize;
                let mut reintegrate = false;
                let mut i = nr_pages - 1;
                let mut end: isize = -1;
                while i >= 0 {
                    if (*c.as_ptr()).st.nr_empty_pop_pages == 0 {
                        break;
                    }
                    // Reintegrate the chunk to prevent atomic failures.
                    if g.nr_empty_pop_pages < EMPTY_POP_PAGES_HIGH {
                        reintegrate = true;
                        break;
                    }
                    // Start or extend the range (i, end] of empty populated
                    // pages; at page 0 fall through to depopulate it.
                    if Chunk::ctx(c).page_empty_populated(i as usize) {
                        if end == -1 {
                            end = i;
                        }
                        if i > 0 {
                            i -= 1;
                            continue;
                        }
                        i -= 1;
                    }
                    if end != -1 {
                        let (s, e) = ((i + 1) as usize, (end + 1) as usize);
                        drop(g);
                        self.depopulate_chunk(c, s, e);
                        g = self.lock_data();
                        self.chunk_depopulated(&mut g, c, s, e);
                        end = -1;
                    }
                    i -= 1;
                }
                let st = &(*c.as_ptr()).st;
                if reintegrate || st.free_bytes == self.geo.unit_size {
                    self.reintegrate(&mut g, c);
                } else {
                    g.list_move(c.as_ptr(), self.geo.sidelined_slot, false);
                }
            }
        }
        g
    }

    /// `pcpu_balance_populated`: populates pages of the most packed chunks
    /// until there are `EMPTY_POP_PAGES_HIGH` empty populated pages (all of
    /// them after an atomic failure), creating a chunk if none has
    /// unpopulated pages.
    fn balance_populated<'a>(&'a self, mut g: DataGuard<'a, P>) -> DataGuard<'a, P> {
        loop {
            let mut nr_to_pop = if self.atomic_alloc_failed.swap(false, Ordering::Relaxed) {
                EMPTY_POP_PAGES_HIGH
            } else {
                (EMPTY_POP_PAGES_HIGH - g.nr_empty_pop_pages).clamp(0, EMPTY_POP_PAGES_HIGH)
            } as usize;

            for slot in self.size_to_slot(PAGE_SIZE)..=self.geo.free_slot {
                if nr_to_pop == 0 {
                    break;
                }
                let mut c = g.slots[slot].head;
                // SAFETY: lock held; list chunks are live.
                unsafe {
                    while !c.is_null() && (*c).st.nr_pages == (*c).st.nr_populated {
                        c = (*c).next;
                    }
                }
                let Some(c) = NonNull::new(c) else { continue };
                // SAFETY: `c` can't go away while the alloc mutex is held;
                // chunk state is touched under the lock only.
                unsafe {
                    let nr_pages = (*c.as_ptr()).st.nr_pages;
                    let mut rs = 0;
                    while let Some((s, e)) = Chunk::ctx(c).next_unpopulated(rs, nr_pages) {
                        let nr = (e - s).min(nr_to_pop);
                        drop(g);
                        let ok = self.populate_chunk(c, s, s + nr);
                        g = self.lock_data();
                        if ok {
                            nr_to_pop -= nr;
                            self.chunk_populated(&mut g, c, s, s + nr);
                        } else {
                            nr_to_pop = 0;
                        }
                        if nr_to_pop == 0 {
                            break;
                        }
                        rs = e;
                    }
                }
            }
            if nr_to_pop == 0 {
                return g;
            }
            // Ran out of chunks to populate: create one and retry.
            drop(g);
            let c = self.create_chunk();
            g = self.lock_data();
            match c {
                // SAFETY: new chunk, lock and alloc mutex held.
                Some(c) => unsafe { self.register_chunk(&mut g, c) },
                None => return g,
            }
        }
    }

    /// Runs [`balance`](Self::balance) whenever it was requested, checking
    /// every `period`, until `stop` is set: the std stand-in for the
    /// kernel's balance work item. Spawn it on a helper thread:
    ///
    /// ```
    /// # use percpu_bitmap::{PcpuAllocator, Config, HeapSource};
    /// # use local_lock::std_platform::StdCpu;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), Config::new(64 << 10).units(2)).unwrap();
    /// let stop = AtomicBool::new(false);
    /// std::thread::scope(|s| {
    ///     s.spawn(|| a.run_balance_worker(&stop, std::time::Duration::from_millis(1)));
    ///     let p = a.alloc(64, 8).unwrap();
    ///     a.free(p);
    ///     stop.store(true, Ordering::Relaxed);
    /// });
    /// ```
    #[cfg(all(feature = "std", not(loom)))]
    pub fn run_balance_worker(
        &self,
        stop: &core::sync::atomic::AtomicBool,
        period: core::time::Duration,
    ) {
        extern crate std;
        while !stop.load(Ordering::Relaxed) {
            if self.balance_requested.load(Ordering::Relaxed) {
                self.balance();
            }
            std::thread::sleep(period);
        }
    }
}
