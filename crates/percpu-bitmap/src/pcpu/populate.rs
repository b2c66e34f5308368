//! Chunk creation and destruction and page (de)population (the kernel's
//! `mm/percpu-vm.c`: `pcpu_create_chunk`, `pcpu_destroy_chunk`,
//! `pcpu_populate_chunk`, `pcpu_depopulate_chunk`), with the bookkeeping
//! of `pcpu_chunk_populated`/`pcpu_chunk_depopulated`. The chunk-source
//! calls run with `pcpu_alloc_mutex` held and `pcpu_lock` released.

use core::ptr::NonNull;

use local_lock::Platform;

use super::{relocate, Inner, PcpuAllocator};
use crate::chunk::{Chunk, ChunkKind};
use crate::chunk_map::ChunkMap;
use crate::source::ChunkSource;
use crate::types::PAGE_SIZE;

impl<P: Platform, S: ChunkSource> PcpuAllocator<P, S> {
    /// `pcpu_chunk_populated` plus the global counts.
    ///
    /// # Safety
    ///
    /// Lock held; `c` live; pages `[rs, re)` were just populated.
    pub(super) unsafe fn chunk_populated(
        &self,
        g: &mut Inner,
        c: NonNull<Chunk>,
        rs: usize,
        re: usize,
    ) {
        // SAFETY: caller.
        unsafe {
            let mut ctx = Chunk::ctx(c);
            ctx.chunk_populated(rs, re);
            if self.source.populates_zeroed() {
                ctx.pages_zeroed(rs, re);
            }
            let (delta, counted) = (ctx.empty_delta, !ctx.st.isolated);
            g.nr_populated += re - rs;
            if counted && (*c.as_ptr()).kind != ChunkKind::Reserved {
                g.nr_empty_pop_pages += delta;
            }
        }
    }

    /// `pcpu_chunk_depopulated` plus the global counts.
    ///
    /// # Safety
    ///
    /// Lock held (or the chunk owned outright with `g` the locked data);
    /// pages `[rs, re)` were just depopulated.
    pub(super) unsafe fn chunk_depopulated(
        &self,
        g: &mut Inner,
        c: NonNull<Chunk>,
        rs: usize,
        re: usize,
    ) {
        // SAFETY: caller.
        unsafe {
            let mut ctx = Chunk::ctx(c);
            ctx.chunk_depopulated(rs, re);
            let (delta, counted) = (ctx.empty_delta, !ctx.st.isolated);
            g.nr_populated -= re - rs;
            if counted && (*c.as_ptr()).kind != ChunkKind::Reserved {
                g.nr_empty_pop_pages += delta;
            }
        }
    }

    /// `pcpu_create_chunk`: a new dynamic chunk, nothing populated, not yet
    /// registered. Makes room in the lookup table first.
    pub(super) fn create_chunk(&self) -> Option<NonNull<Chunk>> {
        self.assert_slow_held();
        let (need, cap) = {
            let g = self.lock_data();
            (g.map.needs_grow(), g.map.grown_cap())
        };
        if need {
            let pages = ChunkMap::table_pages(cap);
            let table = self.source.alloc_pages(pages, PAGE_SIZE)?;
            let (old, old_cap) = {
                let mut g = self.lock_data();
                // SAFETY: `table` is `pages` fresh pages.
                unsafe { g.map.rehash_into(table, cap) }
            };
            if let Some(old) = NonNull::new(old) {
                // SAFETY: the old table is unreachable now (swapped under
                // the lock) and was allocated with these parameters.
                unsafe {
                    self.source
                        .free_pages(old.cast(), ChunkMap::table_pages(old_cap), PAGE_SIZE)
                };
            }
        }
        let geo = &self.geo;
        let mem = self.source.alloc_pages(geo.span_pages(), geo.chunk_align)?;
        let Some(c) = Chunk::create(&self.source, geo.unit_pages, ChunkKind::Dynamic, mem) else {
            // SAFETY: `mem` is unused.
            unsafe {
                self.source
                    .free_pages(mem, geo.span_pages(), geo.chunk_align)
            };
            return None;
        };
        // SAFETY: `c` is ours alone.
        unsafe { (*c.as_ptr()).mem = Some((mem, geo.span_pages(), geo.chunk_align)) };
        Some(c)
    }

    /// Makes a new chunk findable: lookup table, counts, slot.
    ///
    /// # Safety
    ///
    /// Lock and alloc mutex held; `c` from `create_chunk`, unregistered.
    pub(super) unsafe fn register_chunk(&self, g: &mut Inner, c: NonNull<Chunk>) {
        // SAFETY: caller.
        unsafe {
            let key = (*c.as_ptr()).base.as_ptr() as usize >> self.geo.key_shift;
            g.map.insert(key, c.as_ptr());
            g.stats.chunks_created += 1;
            g.stats.nr_max_chunks = g.stats.nr_max_chunks.max(g.map.len());
            relocate(&self.geo, g, c, -1);
        }
    }

    /// `pcpu_destroy_chunk`: returns memory and metadata.
    ///
    /// # Safety
    ///
    /// `c` is a dynamic chunk on no list and not in the lookup table,
    /// depopulated, with no live allocation.
    pub(super) unsafe fn destroy_chunk(&self, c: NonNull<Chunk>) {
        self.assert_slow_held();
        // SAFETY: caller.
        unsafe {
            if let Some((mem, pages, align)) = (*c.as_ptr()).mem {
                self.source.free_pages(mem, pages, align);
            }
            Chunk::destroy_meta(&self.source, c);
        }
    }

    /// Pointer to page `page` of `cpu`'s unit of chunk `c`.
    ///
    /// # Safety
    ///
    /// `c` live, `cpu < nr_units`, `page <= unit_pages`.
    #[inline]
    unsafe fn unit_page(&self, c: NonNull<Chunk>, cpu: usize, page: usize) -> NonNull<u8> {
        // SAFETY: caller; the result lies in the chunk's reservation.
        unsafe {
            NonNull::new_unchecked(
                (*c.as_ptr())
                    .base
                    .as_ptr()
                    .add(self.geo.unit_offset(cpu) + page * PAGE_SIZE),
            )
        }
    }

    /// `pcpu_populate_chunk`: pages `[rs, re)` of every unit, each from its
    /// CPU's node (`populate_node`). On failure the units done so far are
    /// depopulated again.
    ///
    /// # Safety
    ///
    /// Alloc mutex held (not the lock); `c` live; pages unpopulated.
    pub(super) unsafe fn populate_chunk(&self, c: NonNull<Chunk>, rs: usize, re: usize) -> bool {
        self.assert_slow_held();
        for cpu in 0..self.geo.nr_units {
            // SAFETY: caller; the range is inside the chunk's reservation.
            let ok = unsafe {
                self.source.populate_node(
                    self.unit_page(c, cpu, rs),
                    re - rs,
                    self.platform.cpu_to_node(cpu),
                )
            };
            if !ok {
                for done in 0..cpu {
                    // SAFETY: just populated, holds no data.
                    unsafe { self.source.depopulate(self.unit_page(c, done, rs), re - rs) };
                }
                return false;
            }
        }
        true
    }

    /// `pcpu_depopulate_chunk`: pages `[rs, re)` of every unit.
    ///
    /// # Safety
    ///
    /// Alloc mutex held (not the lock); `c` live; the pages hold no live
    /// allocation.
    pub(super) unsafe fn depopulate_chunk(&self, c: NonNull<Chunk>, rs: usize, re: usize) {
        self.assert_slow_held();
        for cpu in 0..self.geo.nr_units {
            // SAFETY: caller.
            unsafe { self.source.depopulate(self.unit_page(c, cpu, rs), re - rs) };
        }
    }
}
