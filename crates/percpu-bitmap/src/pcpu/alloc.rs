//! Allocation: `pcpu_alloc` and its helpers (request validation, the slot
//! search, `pcpu_alloc_area` with the global bookkeeping), and the public
//! entry points built on it.

use core::ptr::NonNull;

use local_lock::Platform;

use super::{chunk_slot, relocate, Inner, PcpuAllocator};
use crate::chunk::{Chunk, ChunkKind};
use crate::error::PcpuError;
use crate::source::ChunkSource;
use crate::types::{
    AllocFlags, PcpuPtr, EMPTY_POP_PAGES_LOW, MAX_ALLOC_SIZE, MIN_ALLOC_SIZE, PAGE_SIZE,
    SLOT_FAIL_THRESHOLD,
};
use local_lock::sync::atomic::Ordering;

/// Validated request: bits, alignment in bits, size in bytes.
#[inline]
fn validate(size: usize, align: usize) -> Result<(usize, usize, usize), PcpuError> {
    if size == 0 {
        return Err(PcpuError::ZeroSize);
    }
    if size > MAX_ALLOC_SIZE {
        return Err(PcpuError::TooLarge { size });
    }
    if !align.is_power_of_two() || align > PAGE_SIZE {
        return Err(PcpuError::BadAlign { align });
    }
    let align = align.max(MIN_ALLOC_SIZE);
    let size = size.next_multiple_of(MIN_ALLOC_SIZE);
    Ok((size / MIN_ALLOC_SIZE, align / MIN_ALLOC_SIZE, size))
}

impl<P: Platform, S: ChunkSource> PcpuAllocator<P, S> {
    /// `alloc_percpu`/`__alloc_percpu(size, align)` with `GFP_KERNEL`: may
    /// create a chunk and populate pages; the area is zeroed in every unit.
    pub fn alloc(&self, size: usize, align: usize) -> Result<PcpuPtr, PcpuError> {
        self.alloc_with(size, align, AllocFlags::KERNEL)
    }

    /// `alloc_percpu_gfp(.., GFP_ATOMIC)`: never blocks, populates or
    /// creates chunks; only populated pages are used.
    pub fn alloc_atomic(&self, size: usize, align: usize) -> Result<PcpuPtr, PcpuError> {
        self.alloc_with(size, align, AllocFlags::ATOMIC)
    }

    /// `__alloc_reserved_percpu`: from the reserved chunk.
    pub fn alloc_reserved(&self, size: usize, align: usize) -> Result<PcpuPtr, PcpuError> {
        self.alloc_with(size, align, AllocFlags::RESERVED)
    }

    /// `pcpu_alloc(size, align, reserved, gfp)`: the area is zeroed in
    /// every unit. Bad sizes and alignments are refused with an error.
    pub fn alloc_with(
        &self,
        size: usize,
        align: usize,
        flags: AllocFlags,
    ) -> Result<PcpuPtr, PcpuError> {
        let (p, _, dirty) = self.pcpu_alloc(size, align, flags)?;
        // Only the first `dirty` bytes may hold old data; the rest is known
        // zero (see `ChunkSource::populates_zeroed`).
        if dirty != 0 {
            for cpu in 0..self.geo.nr_units {
                // SAFETY: the area is at least `dirty` bytes in every unit,
                // populated, and ours until we return it.
                unsafe {
                    core::ptr::write_bytes(p.as_ptr().add(self.geo.unit_offset(cpu)), 0, dirty)
                };
            }
        }
        Ok(PcpuPtr(p))
    }

    /// The byte-heap entry for `GlobalBitmap` (one unit): an atomic
    /// attempt first (no slow lock, populated pages only), then a blocking
    /// one. Not zeroed.
    #[cfg(all(feature = "std", not(loom)))]
    pub(crate) fn alloc_heap(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        match self.pcpu_alloc(size, align, AllocFlags::ATOMIC | AllocFlags::QUIET) {
            Ok((p, _, _)) => Some(p),
            Err(PcpuError::NoMemory) => self
                .pcpu_alloc(size, align, AllocFlags::QUIET)
                .ok()
                .map(|(p, _, _)| p),
            Err(_) => None,
        }
    }

    /// `pcpu_alloc`. Returns unit 0's address, the rounded size and how
    /// many bytes from the start of the area may hold old data (the rest is
    /// known zero in every unit).
    /// [`AllocFlags::QUIET`] atomic failures do not ask the balance work
    /// for more pages (the heap's first, opportunistic attempt).
    fn pcpu_alloc(
        &self,
        size: usize,
        align: usize,
        flags: AllocFlags,
    ) -> Result<(NonNull<u8>, usize, usize), PcpuError> {
        let (bits, bit_align, size) = validate(size, align)?;
        let reserved = flags.contains(AllocFlags::RESERVED);
        let quiet = flags.contains(AllocFlags::QUIET);
        let is_atomic = flags.contains(AllocFlags::ATOMIC) || self.platform.in_interrupt();
        let slow = if is_atomic {
            None
        } else {
            Some(self.lock_slow())
        };
        let mut g = self.lock_data();

        let (c, bit_off) = if reserved && !g.reserved.is_null() {
            // SAFETY: non-null reserved chunk, lock held.
            let rc = unsafe { NonNull::new_unchecked(g.reserved) };
            // SAFETY: lock held; `rc` is live.
            let fit = unsafe { Chunk::ctx(rc).find_block_fit(bits, bit_align, is_atomic) };
            // SAFETY: lock held; `rc` is live.
            match fit.and_then(|start| unsafe {
                self.alloc_area_locked(&mut g, rc, bits, bit_align, start)
            }) {
                Some(off) => (rc, off),
                None => return Err(PcpuError::ReservedExhausted),
            }
        } else {
            loop {
                // SAFETY: `g` is this allocator's locked data.
                let found = unsafe { self.search_slots(&mut g, size, bits, bit_align, is_atomic) };
                if let Some(found) = found {
                    break found;
                }
                let free_empty = g.slots[self.geo.free_slot].is_empty();
                drop(g);
                if is_atomic {
                    if !quiet {
                        self.atomic_failures.fetch_add(1, Ordering::Relaxed);
                        self.atomic_alloc_failed.store(true, Ordering::Relaxed);
                        self.schedule_balance();
                    }
                    return Err(PcpuError::NoMemory);
                }
                // No space left: create a new chunk (pcpu_alloc_mutex held).
                if free_empty {
                    let c = self.create_chunk().ok_or(PcpuError::NoMemory)?;
                    g = self.lock_data();
                    // SAFETY: `c` is new and ours; lock held.
                    unsafe { self.register_chunk(&mut g, c) };
                } else {
                    g = self.lock_data();
                }
            }
        };

        let off = bit_off * MIN_ALLOC_SIZE;
        let st = &mut g.stats;
        st.nr_alloc += 1;
        st.nr_cur_alloc += 1;
        st.nr_max_alloc = st.nr_max_alloc.max(st.nr_cur_alloc);
        st.min_alloc_size = if st.min_alloc_size == 0 {
            size
        } else {
            st.min_alloc_size.min(size)
        };
        st.max_alloc_size = st.max_alloc_size.max(size);
        let need_balance = g.nr_empty_pop_pages < EMPTY_POP_PAGES_LOW;

        // Populate the pages under the area if they are not all there.
        if !is_atomic {
            let page_start = off / PAGE_SIZE;
            let page_end = (off + size).div_ceil(PAGE_SIZE);
            let mut rs = page_start;
            loop {
                // SAFETY: lock held; `c` is live.
                let next = unsafe { Chunk::ctx(c).next_unpopulated(rs, page_end) };
                let Some((s, e)) = next else { break };
                // SAFETY: `c` is live; reading an immutable field.
                debug_assert!(unsafe { !(*c.as_ptr()).st.immutable });
                drop(g);
                // SAFETY: pcpu_alloc_mutex held; the pages are ours to populate.
                let ok = unsafe { self.populate_chunk(c, s, e) };
                g = self.lock_data();
                if !ok {
                    // SAFETY: lock held; `bit_off` is the live area just made.
                    unsafe { self.free_area_locked(&mut g, c, bit_off) };
                    g.stats.nr_alloc -= 1;
                    g.stats.nr_cur_alloc -= 1;
                    return Err(PcpuError::NoMemory);
                }
                // SAFETY: lock held.
                unsafe { self.chunk_populated(&mut g, c, s, e) };
                rs = e;
            }
        }
        // SAFETY: lock held; `c` live; the area is ours and populated.
        let dirty = unsafe { Chunk::ctx(c).hand_out(off, size) } - off;
        drop(g);
        drop(slow);
        if need_balance {
            self.schedule_balance();
        }
        // SAFETY: `c` is live; its base is immutable; `off` lies in unit 0.
        let p = unsafe { NonNull::new_unchecked((*c.as_ptr()).base.as_ptr().add(off)) };
        Ok((p, size, dirty))
    }

    /// The slot search of `pcpu_alloc`: from the request's slot up to the
    /// free slot, skipping chunks whose hints cannot fit it; chunks that
    /// fail in a low slot are demoted to slot 0.
    ///
    /// # Safety
    ///
    /// `g` is the locked data of this allocator.
    #[inline]
    unsafe fn search_slots(
        &self,
        g: &mut Inner,
        size: usize,
        bits: usize,
        bit_align: usize,
        is_atomic: bool,
    ) -> Option<(NonNull<Chunk>, usize)> {
        let upto = (1u64 << (self.geo.free_slot + 1)) - 1;
        let mut from = self.size_to_slot(size);
        loop {
            // The next non-empty slot (chunks only move down, to slot 0, or
            // away on success while a slot is being walked).
            let m = g.nonempty & upto & (!0u64 << from);
            if m == 0 {
                return None;
            }
            let slot = m.trailing_zeros() as usize;
            from = slot + 1;
            let mut c = g.slots[slot].head;
            while let Some(cn) = NonNull::new(c) {
                // SAFETY: chunks on the lists are live; lock held.
                unsafe {
                    let next = (*c).next;
                    let fit = Chunk::ctx(cn).find_block_fit(bits, bit_align, is_atomic);
                    match fit {
                        None => {
                            if slot < SLOT_FAIL_THRESHOLD {
                                g.list_move(c, 0, true);
                            }
                        }
                        Some(start) => {
                            if let Some(off) = self.alloc_area_locked(g, cn, bits, bit_align, start)
                            {
                                self.reintegrate(g, cn);
                                return Some((cn, off));
                            }
                        }
                    }
                    c = next;
                }
            }
        }
    }

    /// `pcpu_alloc_area` plus the global bookkeeping and relocation.
    ///
    /// # Safety
    ///
    /// `g` is this allocator's locked data; `c` is one of its live chunks.
    unsafe fn alloc_area_locked(
        &self,
        g: &mut Inner,
        c: NonNull<Chunk>,
        bits: usize,
        bit_align: usize,
        start: usize,
    ) -> Option<usize> {
        // SAFETY: caller.
        unsafe {
            let mut ctx = Chunk::ctx(c);
            let oslot = chunk_slot(&self.geo, ctx.st);
            let off = ctx.alloc_area(bits, bit_align, start)?;
            let (delta, counted) = (ctx.empty_delta, !ctx.st.isolated);
            if counted && (*c.as_ptr()).kind != ChunkKind::Reserved {
                g.nr_empty_pop_pages += delta;
            }
            relocate(&self.geo, g, c, oslot as isize);
            Some(off)
        }
    }
}
