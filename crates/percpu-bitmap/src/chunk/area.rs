//! Area operations on a chunk: the block-fit search and the zero-area
//! search (`pcpu_find_block_fit`, `pcpu_find_zero_area`), `pcpu_alloc_area`,
//! `pcpu_free_area`, live-allocation checks, population bookkeeping
//! (`pcpu_chunk_populated`, `pcpu_chunk_depopulated`, the known-zero marks)
//! and the first chunk's setup (`pcpu_alloc_first_chunk`). They call the
//! hint maintenance in `hints`.

use super::state::{ChunkCtx, PAGE_BITS};
use crate::bitmap::{
    clear_range, find_next_bit, find_next_zero_bit, next_clear_region, set_bit, set_range,
    test_bit, WORD_BITS,
};
use crate::error::FreeErrorKind;
use crate::types::{BLOCK_BITS, MIN_ALLOC_SIZE, PAGE_SIZE};

impl ChunkCtx<'_> {
    // -----------------------------------------------------------------
    // Search, allocate, free
    // -----------------------------------------------------------------

    /// `pcpu_is_populated`: `Ok` if the pages under `[bit_off, +bits)` are
    /// populated, else `Err(next_off)`: the bit after the first unpopulated
    /// run, where the search continues.
    fn is_populated(&self, bit_off: usize, bits: usize) -> Result<(), usize> {
        let page_start = bit_off / PAGE_BITS;
        let page_end = (bit_off + bits).div_ceil(PAGE_BITS);
        match next_clear_region(self.m.populated, page_end, page_start) {
            None => Ok(()),
            Some((_, re)) => Err(re * PAGE_BITS),
        }
    }

    /// `pcpu_find_block_fit`: the bit offset to start searching at for
    /// `alloc_bits` bits aligned to `align` bits, or `None` if the hints say
    /// it cannot fit (the chunk hint, alignment padding included, rejects
    /// it first). `pop_only` (atomic requests) accepts only populated pages.
    pub fn find_block_fit(&self, alloc_bits: usize, align: usize, pop_only: bool) -> Option<usize> {
        if !self.st.md.check_hint(alloc_bits, align) {
            return None;
        }
        let map_bits = self.map_bits();
        let mut bit_off = self.st.md.next_hint(alloc_bits);
        let mut bits = 0;
        self.next_fit_region(alloc_bits, align, &mut bit_off, &mut bits);
        while bit_off < map_bits {
            if !pop_only {
                break;
            }
            match self.is_populated(bit_off, bits) {
                Ok(()) => break,
                Err(next_off) => bit_off = next_off,
            }
            self.next_fit_region(alloc_bits, align, &mut bit_off, &mut bits);
        }
        if bit_off >= map_bits {
            return None;
        }
        Some(bit_off)
    }

    /// `pcpu_find_zero_area`: first `nr` clear bits aligned by `align_mask`
    /// in `[start, size)`; returns the index (`>= size` if none) and the
    /// largest (best aligned) clear area skipped on the way.
    ///
    /// The kernel loop aligns the next clear bit up and tests the window
    /// there; when the aligned index is an allocated bit that iteration
    /// records a zero-length area, which can never change the result. So
    /// this visits only aligned *clear* bits, found a word at a time
    /// (`!word & aligned_positions`), and returns what the kernel returns.
    fn find_zero_area(
        &self,
        size: usize,
        mut start: usize,
        nr: usize,
        align_mask: usize,
    ) -> (usize, usize, usize) {
        let map = &*self.m.alloc;
        let (mut largest_off, mut largest_bits) = (0usize, 0usize);
        // Bits at positions that are multiples of the alignment, in a word.
        let align = align_mask + 1;
        let lane = if align >= WORD_BITS {
            1u64
        } else {
            !0u64 / ((1u64 << align) - 1)
        };
        loop {
            // Next aligned clear bit at or after `start`.
            let mut index = (start + align_mask) & !align_mask;
            loop {
                if index >= size {
                    return (size + nr, largest_off, largest_bits);
                }
                let w = index / WORD_BITS;
                if align >= WORD_BITS {
                    if map[w] & 1 == 0 {
                        break;
                    }
                    index += align;
                    continue;
                }
                let cand = !map[w] & lane & (!0u64 << (index % WORD_BITS));
                if cand != 0 {
                    index = w * WORD_BITS + cand.trailing_zeros() as usize;
                    break;
                }
                index = (w + 1) * WORD_BITS;
            }
            let end = index + nr;
            if end > size {
                return (end, largest_off, largest_bits);
            }
            let i = find_next_bit(map, end, index);
            if i < end {
                let area_bits = i - index;
                // Remember the largest unused area with the best alignment.
                if area_bits > largest_bits
                    || (area_bits == largest_bits
                        && largest_off != 0
                        && (index == 0 || index.trailing_zeros() > largest_off.trailing_zeros()))
                {
                    largest_off = index;
                    largest_bits = area_bits;
                }
                start = i + 1;
                continue;
            }
            return (index, largest_off, largest_bits);
        }
    }

    /// The kernel's `pcpu_find_zero_area`, bit run by bit run (reference for
    /// the tests of the word-at-a-time version).
    #[cfg(test)]
    pub fn find_zero_area_reference(
        &self,
        size: usize,
        mut start: usize,
        nr: usize,
        align_mask: usize,
    ) -> (usize, usize, usize) {
        let map = &*self.m.alloc;
        let (mut largest_off, mut largest_bits) = (0usize, 0usize);
        loop {
            let mut index = find_next_zero_bit(map, size, start);
            index = (index + align_mask) & !align_mask;
            let area_off = index;
            let end = index + nr;
            if end > size {
                return (end, largest_off, largest_bits);
            }
            let i = find_next_bit(map, end, index);
            if i < end {
                let area_bits = i - area_off;
                if area_bits > largest_bits
                    || (area_bits == largest_bits
                        && largest_off != 0
                        && (area_off == 0
                            || area_off.trailing_zeros() > largest_off.trailing_zeros()))
                {
                    largest_off = area_off;
                    largest_bits = area_bits;
                }
                start = i + 1;
                continue;
            }
            return (index, largest_off, largest_bits);
        }
    }

    /// The word-at-a-time search (tests).
    #[cfg(test)]
    pub fn find_zero_area_fast(
        &self,
        size: usize,
        start: usize,
        nr: usize,
        align_mask: usize,
    ) -> (usize, usize, usize) {
        self.find_zero_area(size, start, nr, align_mask)
    }

    /// `pcpu_alloc_area`: allocates `alloc_bits` bits aligned to `align`
    /// bits, searching from `start` over at most `alloc_bits` plus one block.
    /// Returns the bit offset, or `None` if the hints were too optimistic.
    pub fn alloc_area(&mut self, alloc_bits: usize, align: usize, start: usize) -> Option<usize> {
        let map_bits = self.map_bits();
        let end = (start + alloc_bits + BLOCK_BITS).min(map_bits);
        let (bit_off, area_off, area_bits) = self.find_zero_area(end, start, alloc_bits, align - 1);
        if bit_off >= end {
            return None;
        }
        if area_bits != 0 {
            self.block_update_scan(area_off, area_bits);
        }

        set_range(self.m.alloc, bit_off, alloc_bits);
        set_bit(self.m.bound, bit_off);
        clear_range(self.m.bound, bit_off + 1, alloc_bits - 1);
        set_bit(self.m.bound, bit_off + alloc_bits);

        self.st.free_bytes -= alloc_bits * MIN_ALLOC_SIZE;
        let chunk_first = bit_off == self.st.md.first_free as usize;
        if chunk_first {
            let ff = find_next_zero_bit(self.m.alloc, map_bits, bit_off + alloc_bits);
            self.st.md.first_free = ff as u32;
        }
        self.block_update_hint_alloc(bit_off, alloc_bits, chunk_first);
        Some(bit_off)
    }

    /// `pcpu_free_area`: frees the allocation starting at `bit_off` (which
    /// the caller validated as a live start); its end is the next set bit of
    /// the boundary map, which is left in place. Returns the bits freed.
    pub fn free_area(&mut self, bit_off: usize) -> usize {
        let map_bits = self.map_bits();
        let end = find_next_bit(self.m.bound, map_bits, bit_off + 1);
        let bits = end - bit_off;
        clear_range(self.m.alloc, bit_off, bits);
        self.st.free_bytes += bits * MIN_ALLOC_SIZE;
        self.st.md.first_free = self.st.md.first_free.min(bit_off as u32);
        self.block_update_hint_free(bit_off, bits);
        bits
    }

    /// Whether `bit_off` is the start of a live allocation: allocated and
    /// marked in the boundary map. (An allocation clears the boundary bits
    /// inside itself and no other live allocation can set one there, so a
    /// set boundary bit on an allocated bit is exactly a start.)
    #[inline]
    pub fn is_alloc_start(&self, bit_off: usize) -> Result<(), FreeErrorKind> {
        if !test_bit(self.m.alloc, bit_off) {
            return Err(FreeErrorKind::NotAllocated);
        }
        if !test_bit(self.m.bound, bit_off) {
            return Err(FreeErrorKind::Interior);
        }
        Ok(())
    }

    /// Size in bits of the live allocation starting at `bit_off`.
    #[inline]
    pub fn alloc_bits_at(&self, bit_off: usize) -> usize {
        find_next_bit(self.m.bound, self.map_bits(), bit_off + 1) - bit_off
    }

    /// `pcpu_chunk_populated`: pages `[rs, re)` were populated.
    pub fn chunk_populated(&mut self, rs: usize, re: usize) {
        set_range(self.m.populated, rs, re - rs);
        self.st.nr_populated += re - rs;
        self.update_empty_pages((re - rs) as isize);
    }

    /// Pages `[rs, re)` were just populated by a source whose populated
    /// pages read as zero: they are known zero.
    pub fn pages_zeroed(&mut self, rs: usize, re: usize) {
        self.m.clean[rs..re].fill(0);
    }

    /// Records that `[off, off + size)` (bytes) is handed out and returns
    /// the end of the part of it that may hold old data, `off` if none:
    /// the caller clears `[off, end)` in every unit. Conservative: bytes
    /// between a page's old mark and `off` are forgotten.
    pub fn hand_out(&mut self, off: usize, size: usize) -> usize {
        let end = off + size;
        let mut dirty = off;
        let mut p = off / PAGE_SIZE;
        while p * PAGE_SIZE < end {
            let base = p * PAGE_SIZE;
            let lo = off.max(base) - base;
            let hi = end.min(base + PAGE_SIZE) - base;
            let mark = self.m.clean[p] as usize;
            if mark > lo {
                dirty = dirty.max(base + mark.min(hi));
            }
            if hi > mark {
                self.m.clean[p] = hi as u16;
            }
            p += 1;
        }
        dirty
    }

    /// `pcpu_chunk_depopulated`: pages `[rs, re)` were depopulated.
    pub fn chunk_depopulated(&mut self, rs: usize, re: usize) {
        self.m.clean[rs..re].fill(PAGE_SIZE as u16);
        clear_range(self.m.populated, rs, re - rs);
        self.st.nr_populated -= re - rs;
        self.update_empty_pages(-((re - rs) as isize));
    }

    /// The next run of unpopulated pages in `[start, end)`.
    pub fn next_unpopulated(&self, start: usize, end: usize) -> Option<(usize, usize)> {
        next_clear_region(self.m.populated, end, start)
    }

    /// The next run of populated pages at or after `start`.
    pub fn next_populated(&self, start: usize) -> Option<(usize, usize)> {
        crate::bitmap::next_set_region(self.m.populated, self.st.nr_pages, start)
    }

    /// Whether page `i` is wholly free (its block's contig hint is a whole
    /// block) and populated: a candidate for depopulation.
    pub fn page_empty_populated(&self, i: usize) -> bool {
        self.m.md[i].contig_hint as usize == BLOCK_BITS && test_bit(self.m.populated, i)
    }

    /// `pcpu_alloc_first_chunk`'s bitmap part: serve only
    /// `[start_offset, start_offset + map_size)`, hiding the rest as
    /// allocated; every page is populated; the chunk is immutable.
    pub fn init_first(&mut self, start_offset: usize, map_size: usize) {
        let nr_pages = self.st.nr_pages;
        let region_size = nr_pages * PAGE_SIZE;
        debug_assert!(start_offset + map_size <= region_size);
        self.init_md();
        self.st.start_offset = start_offset;
        self.st.end_offset = region_size - start_offset - map_size;
        self.st.immutable = true;
        set_range(self.m.populated, 0, nr_pages);
        self.st.nr_populated = nr_pages;
        self.st.nr_empty_pop_pages = nr_pages as isize;
        self.st.free_bytes = map_size;
        let map_bits = self.map_bits();
        if self.st.start_offset != 0 {
            // Hide the beginning of the bitmap.
            let offset_bits = self.st.start_offset / MIN_ALLOC_SIZE;
            set_range(self.m.alloc, 0, offset_bits);
            set_bit(self.m.bound, 0);
            set_bit(self.m.bound, offset_bits);
            self.st.md.first_free = offset_bits as u32;
            self.block_update_hint_alloc(0, offset_bits, false);
        }
        if self.st.end_offset != 0 {
            // Hide the end of the bitmap.
            let offset_bits = self.st.end_offset / MIN_ALLOC_SIZE;
            set_range(self.m.alloc, map_bits - offset_bits, offset_bits);
            set_bit(self.m.bound, (start_offset + map_size) / MIN_ALLOC_SIZE);
            set_bit(self.m.bound, map_bits);
            self.block_update_hint_alloc(map_bits - offset_bits, offset_bits, false);
        }
        // The first chunk's empty pages are accounted by its owner.
        self.empty_delta = 0;
    }
}
