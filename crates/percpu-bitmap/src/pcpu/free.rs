//! Free: `free_percpu` (pointer validation against the lookup table and the
//! maps, `pcpu_free_area` with the global bookkeeping, the reclaim
//! decision) and the size query.

use core::ptr::NonNull;

use local_lock::Platform;

use super::{chunk_slot, relocate, Inner, PcpuAllocator};
use crate::chunk::{Chunk, ChunkKind};
use crate::error::{FreeError, FreeErrorKind};
use crate::source::ChunkSource;
use crate::types::{PcpuPtr, EMPTY_POP_PAGES_HIGH, MIN_ALLOC_SIZE, PAGE_SIZE};

impl<P: Platform, S: ChunkSource> PcpuAllocator<P, S> {
    /// `free_percpu`.
    ///
    /// # Panics
    ///
    /// If `p` is not the start of a live allocation of this allocator
    /// (interior, already free, foreign, static): detected from the lookup
    /// table, the boundary map and the allocation map.
    #[track_caller]
    pub fn free(&self, p: PcpuPtr) {
        if let Err(e) = self.try_free(p) {
            free_failed(e);
        }
    }

    /// `free_percpu` that reports a bad pointer instead of panicking.
    /// Returns the bytes freed (the size found from the boundary map).
    pub fn try_free(&self, p: PcpuPtr) -> Result<usize, FreeError> {
        let (bytes, need_balance) = self.free_raw(p.as_ptr())?;
        if need_balance {
            self.schedule_balance();
        }
        Ok(bytes)
    }

    /// The size in bytes of the live allocation at `p` (from the boundary
    /// map), or why `p` is not one.
    pub fn size_of(&self, p: PcpuPtr) -> Result<usize, FreeError> {
        let addr = p.as_ptr().as_ptr() as usize;
        let g = self.lock_data();
        let (c, bit_off) = self.validate_live(&g, addr)?;
        // SAFETY: lock held; `c` live.
        Ok(unsafe { Chunk::ctx(c).alloc_bits_at(bit_off) } * MIN_ALLOC_SIZE)
    }

    /// Finds the chunk of `addr` and checks it is a live allocation start.
    fn validate_live(&self, g: &Inner, addr: usize) -> Result<(NonNull<Chunk>, usize), FreeError> {
        let err = |kind| FreeError { addr, kind };
        let c = self.chunk_search(g, addr).ok_or_else(|| {
            let in_static = self.static_area.is_some_and(|(b, n)| {
                addr >= b.as_ptr() as usize && addr < b.as_ptr() as usize + n
            });
            err(if in_static {
                FreeErrorKind::Static
            } else {
                FreeErrorKind::NotPercpu
            })
        })?;
        // SAFETY: `c` is live and the lock is held; `base` is immutable.
        let ctx = unsafe { Chunk::ctx(c) };
        // SAFETY: as above.
        let base = unsafe { (*c.as_ptr()).base.as_ptr() as usize };
        let off = addr - base;
        if !off.is_multiple_of(MIN_ALLOC_SIZE) {
            return Err(err(FreeErrorKind::Misaligned));
        }
        if off < ctx.st.start_offset || off >= ctx.st.nr_pages * PAGE_SIZE - ctx.st.end_offset {
            return Err(err(FreeErrorKind::OutOfRange));
        }
        let bit_off = off / MIN_ALLOC_SIZE;
        ctx.is_alloc_start(bit_off).map_err(err)?;
        Ok((c, bit_off))
    }

    /// `pcpu_chunk_addr_search`: first chunk and reserved chunk by range,
    /// dynamic chunks by the lookup table.
    #[inline]
    fn chunk_search(&self, g: &Inner, addr: usize) -> Option<NonNull<Chunk>> {
        for c in [g.first, g.reserved] {
            if let Some(c) = NonNull::new(c) {
                // SAFETY: live chunk, lock held, no context of it exists.
                let (base, st) =
                    unsafe { ((*c.as_ptr()).base.as_ptr() as usize, &(*c.as_ptr()).st) };
                if addr >= base + st.start_offset
                    && addr < base + st.nr_pages * PAGE_SIZE - st.end_offset
                {
                    return Some(c);
                }
            }
        }
        g.map.lookup(addr >> self.geo.key_shift)
    }

    /// The body of `free_percpu`: returns the bytes freed and whether the
    /// balance work should run.
    pub(crate) fn free_raw(&self, p: NonNull<u8>) -> Result<(usize, bool), FreeError> {
        let addr = p.as_ptr() as usize;
        let mut g = self.lock_data();
        let (c, bit_off) = self.validate_live(&g, addr)?;
        // SAFETY: lock held; `c` live; `bit_off` validated as a live start.
        let bits = unsafe { self.free_area_locked(&mut g, c, bit_off) };
        g.stats.nr_dealloc += 1;
        g.stats.nr_cur_alloc -= 1;

        // More than one fully free chunk: wake the reaper. An isolated
        // chunk may be being reclaimed: leave it to the reclaim.
        let mut need_balance = false;
        // SAFETY: lock held; `c` live; no context of it exists.
        unsafe {
            let st = &(*c.as_ptr()).st;
            if !st.isolated && st.free_bytes == self.geo.unit_size {
                let mut pos = g.slots[self.geo.free_slot].head;
                while !pos.is_null() {
                    if pos != c.as_ptr() {
                        need_balance = true;
                        break;
                    }
                    pos = (*pos).next;
                }
            } else if self.should_reclaim(&g, c) {
                self.isolate(&mut g, c);
                need_balance = true;
            }
        }
        Ok((bits * MIN_ALLOC_SIZE, need_balance))
    }

    /// `pcpu_should_reclaim_chunk`.
    ///
    /// # Safety
    ///
    /// Lock held; `c` live.
    unsafe fn should_reclaim(&self, g: &Inner, c: NonNull<Chunk>) -> bool {
        // SAFETY: caller.
        let (kind, st) = unsafe { ((*c.as_ptr()).kind, &(*c.as_ptr()).st) };
        if kind != ChunkKind::Dynamic {
            return false;
        }
        (st.isolated && st.nr_empty_pop_pages > 0)
            || (g.nr_empty_pop_pages > EMPTY_POP_PAGES_HIGH + st.nr_empty_pop_pages
                && st.nr_empty_pop_pages >= (st.nr_pages / 4) as isize)
    }

    /// `pcpu_free_area` plus the global bookkeeping and relocation.
    ///
    /// # Safety
    ///
    /// As for [`alloc_area_locked`](Self::alloc_area_locked); `bit_off` is
    /// the start of a live allocation.
    pub(super) unsafe fn free_area_locked(
        &self,
        g: &mut Inner,
        c: NonNull<Chunk>,
        bit_off: usize,
    ) -> usize {
        // SAFETY: caller.
        unsafe {
            let mut ctx = Chunk::ctx(c);
            let oslot = chunk_slot(&self.geo, ctx.st);
            let bits = ctx.free_area(bit_off);
            let (delta, counted) = (ctx.empty_delta, !ctx.st.isolated);
            if counted && (*c.as_ptr()).kind != ChunkKind::Reserved {
                g.nr_empty_pop_pages += delta;
            }
            relocate(&self.geo, g, c, oslot as isize);
            bits
        }
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn free_failed(e: FreeError) -> ! {
    panic!("{e}")
}
