//! One chunk: its allocation and boundary bitmaps, its metadata blocks and
//! the kernel's hint maintenance (`pcpu_alloc_area`, `pcpu_free_area`,
//! `pcpu_find_block_fit`, `pcpu_block_update_hint_{alloc,free}`,
//! `pcpu_{block,chunk}_refresh_hint`).
//!
//! A chunk's metadata lives in one allocation from the page source:
//!
//! ```text
//! +-------------+-----------+-----------+-----------+-----------+---------+---------+
//! | Chunk       | alloc_map | bound_map | md_blocks | populated | free_blk| full_blk|
//! | (header)    | map_bits  | map_bits+1| nr_blocks | nr_pages  | nr_blks | nr_blks |
//! +-------------+-----------+-----------+-----------+-----------+---------+---------+
//! ```
//!
//! The algorithms work on a `ChunkCtx`: the header's mutable state plus
//! slices of the maps, built under `pcpu_lock` (or from plain vectors in unit
//! tests).
//!
//! Invariants (equations; the block-level ones are in the `block` module):
//!
//! ```text
//! free_bytes          = 4 * |{b < map_bits : alloc_map[b] = 0}|
//! allocations         = { [s, e) : alloc_map[s] = 1, bound_map[s] = 1,
//!                                  e = next set bound bit after s }
//!                       and they partition the set bits of alloc_map
//! chunk_md.contig     <= largest free run             (never larger)
//! largest free run    <  chunk_md.contig + 2 * BLOCK_BITS
//! chunk_md.contig     =  largest free run right after a full rescan
//! chunk_md.first_free =  first clear bit (exact)
//! nr_populated        = |populated|
//! nr_empty_pop_pages  = |{i : block i wholly free and page i populated}|
//! free_blk[i]         = (md_blocks[i].left_free  = BLOCK_BITS)
//! full_blk[i]         = (md_blocks[i].contig_hint = 0)
//! ```
//!
//! `free_blk`/`full_blk` are not in the kernel: they mirror two hint values
//! so that the metadata walks (`pcpu_next_md_free_region`,
//! `pcpu_next_fit_region`) can jump over runs of wholly free or wholly full
//! blocks with one word scan instead of one step per block. The walks visit
//! the same regions in the same order as the kernel's, so every hint comes
//! out identical; only partially used blocks cost a step.

use core::ptr::NonNull;

use crate::bitmap::{
    clear_range, find_last_bit, find_next_bit, find_next_zero_bit, next_clear_region, set_bit,
    set_range, test_bit, words_for, WORD_BITS,
};
use crate::block::{align_up, region_overlap, BlockMd};
use crate::source::PageSource;
use crate::types::{BLOCK_BITS, MIN_ALLOC_SIZE, PAGE_SIZE};

/// Words of `alloc_map` per block.
const BLOCK_WORDS: usize = BLOCK_BITS / WORD_BITS;
/// Bitmap bits per page.
const PAGE_BITS: usize = PAGE_SIZE / MIN_ALLOC_SIZE;

/// The mutable, non-bitmap state of a chunk (`struct pcpu_chunk` minus the
/// list link and the maps). Protected by `pcpu_lock`.
#[derive(Debug, Clone)]
pub(crate) struct ChunkState {
    /// Chunk-level hints (`chunk_md`); `left_free`/`right_free` unused.
    pub md: BlockMd,
    /// Free bytes in the served region.
    pub free_bytes: usize,
    /// Pages per unit = metadata blocks.
    pub nr_pages: usize,
    /// Bytes hidden (pre-allocated) at the start (first chunk only).
    pub start_offset: usize,
    /// Bytes hidden at the end (first chunk only).
    pub end_offset: usize,
    /// Populated pages.
    pub nr_populated: usize,
    /// Wholly free populated pages. Signed: a non-atomic allocation on
    /// unpopulated pages counts them as used before `pcpu_chunk_populated`
    /// adds them back (both under the alloc mutex).
    pub nr_empty_pop_pages: isize,
    /// The first chunk: never depopulated or destroyed.
    pub immutable: bool,
    /// On the to-depopulate or sidelined list, excluded from the global
    /// empty-page count.
    pub isolated: bool,
}

impl ChunkState {
    /// A fresh state for `nr_pages` pages with nothing populated.
    pub fn new(nr_pages: usize) -> Self {
        ChunkState {
            md: BlockMd::new((nr_pages * BLOCK_BITS) as u32),
            free_bytes: nr_pages * PAGE_SIZE,
            nr_pages,
            start_offset: 0,
            end_offset: 0,
            nr_populated: 0,
            nr_empty_pop_pages: 0,
            immutable: false,
            isolated: false,
        }
    }

    /// Bits of the allocation map.
    #[inline(always)]
    pub fn map_bits(&self) -> usize {
        self.nr_pages * BLOCK_BITS
    }
}

/// Borrowed bitmaps and blocks of one chunk.
pub(crate) struct Maps<'a> {
    /// 1 = allocated; `map_bits` bits.
    pub alloc: &'a mut [u64],
    /// Allocation starts and one-past-ends; `map_bits + 1` bits.
    pub bound: &'a mut [u64],
    /// One metadata block per page.
    pub md: &'a mut [BlockMd],
    /// Populated pages; `nr_pages` bits.
    pub populated: &'a mut [u64],
    /// Blocks whose `left_free == BLOCK_BITS` (wholly free).
    pub free_blk: &'a mut [u64],
    /// Blocks whose `contig_hint == 0` (wholly allocated).
    pub full_blk: &'a mut [u64],
    /// Per page: bytes `[clean[p], PAGE_SIZE)` of page `p` are known zero in
    /// every unit (populated zeroed and not handed out since);
    /// `PAGE_SIZE` = nothing known. Not in the kernel (which clears every
    /// area); lets `alloc` skip clearing fresh memory.
    pub clean: &'a mut [u16],
}

/// A chunk being operated on: state + maps, plus the change of
/// `nr_empty_pop_pages` made by the operation, which the caller adds to the
/// global count when the chunk counts there (not reserved, not isolated).
pub(crate) struct ChunkCtx<'a> {
    pub st: &'a mut ChunkState,
    pub m: Maps<'a>,
    pub empty_delta: isize,
}

impl ChunkCtx<'_> {
    #[inline(always)]
    fn map_bits(&self) -> usize {
        self.st.map_bits()
    }

    #[inline(always)]
    fn nr_blocks(&self) -> usize {
        self.st.nr_pages
    }

    /// `pcpu_index_alloc_map`: the alloc-map words of block `i`.
    #[inline(always)]
    fn block_map(&self, i: usize) -> &[u64] {
        &self.m.alloc[i * BLOCK_WORDS..(i + 1) * BLOCK_WORDS]
    }

    /// `pcpu_init_md_blocks`: every block and the chunk wholly free.
    pub fn init_md(&mut self) {
        self.st.md = BlockMd::new(self.map_bits() as u32);
        for b in self.m.md.iter_mut() {
            *b = BlockMd::new(BLOCK_BITS as u32);
        }
        let n = self.nr_blocks();
        self.m.free_blk.fill(0);
        set_range(self.m.free_blk, 0, n);
        self.m.full_blk.fill(0);
        self.m.clean.fill(PAGE_SIZE as u16);
    }

    /// `pcpu_update_empty_pages`.
    #[inline]
    fn update_empty_pages(&mut self, nr: isize) {
        self.st.nr_empty_pop_pages += nr;
        self.empty_delta += nr;
    }

    /// Mirrors blocks `lo..=hi` into the free/full summary maps.
    #[inline]
    fn sync_summary(&mut self, lo: usize, hi: usize) {
        for i in lo..=hi {
            let b = self.m.md[i];
            let w = i / WORD_BITS;
            let bit = 1u64 << (i % WORD_BITS);
            if b.left_free as usize == BLOCK_BITS {
                self.m.free_blk[w] |= bit;
            } else {
                self.m.free_blk[w] &= !bit;
            }
            if b.contig_hint == 0 {
                self.m.full_blk[w] |= bit;
            } else {
                self.m.full_blk[w] &= !bit;
            }
        }
    }

    // -----------------------------------------------------------------
    // Metadata walks
    // -----------------------------------------------------------------

    /// `pcpu_next_md_free_region`: the next free region known from the
    /// block hints at or after `bit_off`, merged across block edges.
    /// Sets `bit_off = map_bits` when there is none.
    fn next_md_free_region(&self, bit_off: &mut usize, bits: &mut usize) {
        let nr_blocks = self.nr_blocks();
        let mut i = *bit_off / BLOCK_BITS;
        let mut block_off = *bit_off % BLOCK_BITS;
        *bits = 0;
        while i < nr_blocks {
            let block = &self.m.md[i];
            // Handles a contig area across blocks.
            if *bits != 0 {
                if block.left_free as usize == BLOCK_BITS {
                    // A run of wholly free blocks extends the area.
                    let j = find_next_zero_bit(self.m.free_blk, nr_blocks, i);
                    *bits += (j - i) * BLOCK_BITS;
                    i = j;
                    continue;
                }
                *bits += block.left_free as usize;
                return;
            }
            if block.contig_hint == 0 {
                // A run of full blocks reports nothing: skip it.
                debug_assert_eq!(block.right_free, 0);
                let j = find_next_zero_bit(self.m.full_blk, nr_blocks, i);
                *bit_off = j * BLOCK_BITS;
                block_off = 0;
                i = j;
                continue;
            }
            // A contig hint not seen before (at or after block_off) that
            // does not spill into the next block is its own region.
            *bits = block.contig_hint as usize;
            let start = block.contig_hint_start as usize;
            if start >= block_off && *bits + start < BLOCK_BITS {
                *bit_off = i * BLOCK_BITS + start;
                return;
            }
            block_off = 0;
            *bits = block.right_free as usize;
            *bit_off = (i + 1) * BLOCK_BITS - *bits;
            i += 1;
        }
    }

    /// `pcpu_next_fit_region`: the next region from the block hints that
    /// can hold `alloc_bits` bits aligned to `align` bits. Sets
    /// `bit_off = map_bits` when there is none.
    fn next_fit_region(
        &self,
        alloc_bits: usize,
        align: usize,
        bit_off: &mut usize,
        bits: &mut usize,
    ) {
        let nr_blocks = self.nr_blocks();
        let mut i = *bit_off / BLOCK_BITS;
        let mut block_off = *bit_off % BLOCK_BITS;
        *bits = 0;
        while i < nr_blocks {
            let block = &self.m.md[i];
            // Handles a contig area across blocks.
            if *bits != 0 {
                if block.left_free as usize == BLOCK_BITS {
                    // Wholly free blocks: take as many as the request needs.
                    let j = find_next_zero_bit(self.m.free_blk, nr_blocks, i);
                    let need = (alloc_bits - *bits).div_ceil(BLOCK_BITS);
                    if need <= j - i {
                        *bits += need * BLOCK_BITS;
                        return;
                    }
                    *bits += (j - i) * BLOCK_BITS;
                    i = j;
                    continue;
                }
                *bits += block.left_free as usize;
                if *bits >= alloc_bits {
                    return;
                }
            } else if block.contig_hint == 0 {
                // Full blocks cannot start a fit: skip the run.
                debug_assert_eq!(block.right_free, 0);
                let j = find_next_zero_bit(self.m.full_blk, nr_blocks, i);
                *bit_off = j * BLOCK_BITS;
                block_off = 0;
                i = j;
                continue;
            }

            // Check the block's contig hint (once: block_off tells whether
            // it was looked at already).
            let start = block.contig_hint_start as usize;
            let pad = align_up(start, align) - start;
            if block.contig_hint != 0
                && start >= block_off
                && block.contig_hint as usize >= pad + alloc_bits
            {
                let hint = block.next_hint(alloc_bits);
                *bits = pad + alloc_bits + start - hint;
                *bit_off = i * BLOCK_BITS + hint;
                return;
            }
            block_off = 0;

            let off = align_up(BLOCK_BITS - block.right_free as usize, align);
            *bits = BLOCK_BITS.saturating_sub(off);
            *bit_off = i * BLOCK_BITS + off;
            if *bits >= alloc_bits {
                return;
            }
            i += 1;
        }
        // No valid offset: fail.
        *bit_off = self.map_bits();
    }

    // -----------------------------------------------------------------
    // Hint refresh
    // -----------------------------------------------------------------

    /// `pcpu_chunk_refresh_hint`: rebuilds the chunk contig hint from the
    /// block hints. On the allocation path (`full_scan == false`) the scan
    /// hint is promoted and the walk starts after it.
    fn chunk_refresh_hint(&mut self, full_scan: bool) {
        let md = &mut self.st.md;
        let mut bit_off;
        if !full_scan && md.scan_hint != 0 {
            bit_off = (md.scan_hint_start + md.scan_hint) as usize;
            md.contig_hint_start = md.scan_hint_start;
            md.contig_hint = md.scan_hint;
            md.scan_hint = 0;
        } else {
            bit_off = md.first_free as usize;
            md.contig_hint = 0;
        }
        let map_bits = self.map_bits();
        let mut bits = 0;
        self.next_md_free_region(&mut bit_off, &mut bits);
        while bit_off < map_bits {
            self.st.md.update(bit_off, bit_off + bits);
            bit_off += bits + 1;
            self.next_md_free_region(&mut bit_off, &mut bits);
        }
    }

    /// `pcpu_block_refresh_hint`: rescans block `index` from its scan hint
    /// (promoted to contig hint) or from its first free bit.
    fn block_refresh_hint(&mut self, index: usize) {
        let block = &mut self.m.md[index];
        let mut start;
        let promoted = block.scan_hint != 0;
        if promoted {
            start = (block.scan_hint_start + block.scan_hint) as usize;
            block.contig_hint_start = block.scan_hint_start;
            block.contig_hint = block.scan_hint;
            block.scan_hint = 0;
        } else {
            start = block.first_free as usize;
            block.contig_hint = 0;
        }
        block.right_free = 0;
        let map = &self.m.alloc[index * BLOCK_WORDS..(index + 1) * BLOCK_WORDS];
        while let Some((rs, re)) = next_clear_region(map, BLOCK_BITS, start) {
            self.m.md[index].update(rs, re);
            start = re;
        }
        // Divergence: when the promoted scan hint is the run at the end of
        // the block nothing after it is scanned, and the kernel leaves
        // right_free at 0 (too small). Recount the trailing free bits.
        if promoted && self.m.md[index].right_free == 0 {
            let last = find_last_bit(map, BLOCK_BITS);
            if last < BLOCK_BITS - 1 {
                self.m.md[index].right_free = (BLOCK_BITS - 1 - last) as u32;
            }
        }
    }

    /// `pcpu_block_update_scan`: feeds a free area skipped by the allocation
    /// search (alignment) into its block's scan hint, extending it backwards
    /// over bits lost to alignment.
    fn block_update_scan(&mut self, bit_off: usize, bits: usize) {
        let s_off = bit_off % BLOCK_BITS;
        let e_off = s_off + bits;
        if e_off > BLOCK_BITS {
            return;
        }
        let s_index = bit_off / BLOCK_BITS;
        let l_bit = find_last_bit(self.block_map(s_index), s_off);
        let s_off = if s_off == l_bit { 0 } else { l_bit + 1 };
        self.m.md[s_index].update(s_off, e_off);
        self.sync_summary(s_index, s_index);
    }

    /// `pcpu_block_update_hint_alloc`: hints after allocating
    /// `[bit_off, bit_off + bits)`. Blocks are rescanned only where their
    /// contig hint was broken; the chunk hint only if the allocation
    /// overlaps it. `chunk_first`: the allocation started at the chunk's
    /// `first_free` (before `alloc_area` moved it).
    fn block_update_hint_alloc(&mut self, bit_off: usize, bits: usize, chunk_first: bool) {
        let s_index = bit_off / BLOCK_BITS;
        let e_index = (bit_off + bits - 1) / BLOCK_BITS;
        let s_off = bit_off % BLOCK_BITS;
        let e_off = (bit_off + bits - 1) % BLOCK_BITS + 1;
        let mut nr_empty_pages = 0isize;

        // Update s_block.
        if self.m.md[s_index].contig_hint as usize == BLOCK_BITS {
            nr_empty_pages += 1;
        }
        // first_free moves if the allocation takes its place.
        let block_first = s_off == self.m.md[s_index].first_free as usize;
        if block_first {
            let ff = find_next_zero_bit(self.block_map(s_index), BLOCK_BITS, s_off + bits);
            self.m.md[s_index].first_free = ff as u32;
        }
        let sb = &mut self.m.md[s_index];
        if region_overlap(
            sb.scan_hint_start as usize,
            (sb.scan_hint_start + sb.scan_hint) as usize,
            s_off,
            s_off + bits,
        ) {
            sb.scan_hint = 0;
        }
        if region_overlap(
            sb.contig_hint_start as usize,
            (sb.contig_hint_start + sb.contig_hint) as usize,
            s_off,
            s_off + bits,
        ) {
            // The block contig hint is broken: scan to fix it.
            if s_off == 0 {
                sb.left_free = 0;
            }
            if block_first
                && sb.scan_hint == 0
                && sb.contig_hint_start as usize == s_off
                && (sb.contig_hint_start + sb.contig_hint) as usize == BLOCK_BITS
            {
                // Fast path, same result: the block was allocated up to
                // s_off and free from there (first_free is exact when it is
                // a free bit), so the rescan would find exactly the rest.
                self.block_refresh_tail(s_index, s_off + bits);
            } else {
                self.block_refresh_hint(s_index);
            }
        } else {
            // Update left and right free manually.
            sb.left_free = sb.left_free.min(s_off as u32);
            if s_index == e_index {
                sb.right_free = sb.right_free.min((BLOCK_BITS - e_off) as u32);
            } else {
                sb.right_free = 0;
            }
        }

        // Update e_block.
        if s_index != e_index {
            if self.m.md[e_index].contig_hint as usize == BLOCK_BITS {
                nr_empty_pages += 1;
            }
            // The allocation ends in the left part of e_block.
            let ff = find_next_zero_bit(self.block_map(e_index), BLOCK_BITS, e_off);
            self.m.md[e_index].first_free = ff as u32;
            let mut mid_end = e_index;
            if e_off == BLOCK_BITS {
                // Reset e_block too: it is wholly allocated.
                mid_end = e_index + 1;
            } else {
                let eb = &mut self.m.md[e_index];
                if e_off > eb.scan_hint_start as usize {
                    eb.scan_hint = 0;
                }
                eb.left_free = 0;
                if e_off > eb.contig_hint_start as usize {
                    // The contig hint is broken: scan to fix it.
                    self.block_refresh_hint(e_index);
                } else {
                    eb.right_free = eb.right_free.min((BLOCK_BITS - e_off) as u32);
                }
            }
            // Blocks in between are now wholly allocated.
            nr_empty_pages += (e_index - s_index - 1) as isize;
            for b in &mut self.m.md[s_index + 1..mid_end] {
                b.scan_hint = 0;
                b.contig_hint = 0;
                b.left_free = 0;
                b.right_free = 0;
            }
        }
        if nr_empty_pages != 0 {
            self.update_empty_pages(-nr_empty_pages);
        }
        self.sync_summary(s_index, e_index);

        let cm = &mut self.st.md;
        if region_overlap(
            cm.scan_hint_start as usize,
            (cm.scan_hint_start + cm.scan_hint) as usize,
            bit_off,
            bit_off + bits,
        ) {
            cm.scan_hint = 0;
        }
        // The chunk contig hint needs a scan only if it was broken;
        // otherwise a smaller area was used and it is still right.
        if region_overlap(
            cm.contig_hint_start as usize,
            (cm.contig_hint_start + cm.contig_hint) as usize,
            bit_off,
            bit_off + bits,
        ) {
            if chunk_first
                && cm.scan_hint == 0
                && cm.contig_hint_start as usize == bit_off
                && (cm.contig_hint_start + cm.contig_hint) as usize == self.map_bits()
            {
                // Fast path, same result: allocated up to bit_off (the
                // chunk's first_free is exact), free from there to the end.
                self.chunk_refresh_tail(bit_off + bits);
            } else {
                self.chunk_refresh_hint(false);
            }
        }
    }

    /// `pcpu_block_refresh_hint` of block `index` when it is allocated
    /// before `from` (block-relative, may exceed the block) and free from
    /// there: the rescan's only region is `[from, BLOCK_BITS)`. Debug builds
    /// check the result against the full rescan.
    fn block_refresh_tail(&mut self, index: usize, from: usize) {
        #[cfg(debug_assertions)]
        let before = self.m.md[index];
        let b = &mut self.m.md[index];
        debug_assert_eq!(b.scan_hint, 0);
        b.contig_hint = 0;
        b.right_free = 0;
        if from < BLOCK_BITS {
            b.update(from, BLOCK_BITS);
        }
        #[cfg(debug_assertions)]
        {
            let fast = self.m.md[index];
            self.m.md[index] = before;
            self.block_refresh_hint(index);
            debug_assert_eq!(fast, self.m.md[index], "block tail fast path");
        }
    }

    /// `pcpu_chunk_refresh_hint(chunk, false)` when the chunk is allocated
    /// before `from` and free from there to its end (scan hint 0): the walk's
    /// only region is `[from, map_bits)`. Debug builds check the result
    /// against the full walk.
    fn chunk_refresh_tail(&mut self, from: usize) {
        #[cfg(debug_assertions)]
        let before = self.st.md;
        let map_bits = self.map_bits();
        let md = &mut self.st.md;
        debug_assert_eq!(md.scan_hint, 0);
        md.contig_hint = 0;
        if from < map_bits {
            md.update(from, map_bits);
        }
        #[cfg(debug_assertions)]
        {
            let fast = self.st.md;
            self.st.md = before;
            self.chunk_refresh_hint(false);
            debug_assert_eq!(fast, self.st.md, "chunk tail fast path");
        }
    }

    /// `pcpu_block_update_hint_free`: hints after freeing
    /// `[bit_off, bit_off + bits)`. The freed range is grown to its whole
    /// free extent inside its first and last block (from the block contig
    /// hints when they touch it, else by a bit search). The chunk hint is
    /// rescanned only if the extent is a whole block or crosses blocks,
    /// otherwise the extent is merged into it locally: so it may be up to a
    /// block (per side) too small, never too large.
    fn block_update_hint_free(&mut self, bit_off: usize, bits: usize) {
        let s_index = bit_off / BLOCK_BITS;
        let e_index = (bit_off + bits - 1) / BLOCK_BITS;
        let s_off = bit_off % BLOCK_BITS;
        let e_off = (bit_off + bits - 1) % BLOCK_BITS + 1;
        let mut nr_empty_pages = 0isize;

        // start/end of the free area inside s_block/e_block.
        let sb = self.m.md[s_index];
        let start = if s_off == (sb.contig_hint + sb.contig_hint_start) as usize {
            sb.contig_hint_start as usize
        } else {
            // find_last_bit returns its size argument when nothing is set
            // before s_off: the free area reaches the block start.
            let l_bit = find_last_bit(self.block_map(s_index), s_off);
            if l_bit == s_off {
                0
            } else {
                l_bit + 1
            }
        };
        let eb = self.m.md[e_index];
        let end = if e_off == eb.contig_hint_start as usize {
            (eb.contig_hint_start + eb.contig_hint) as usize
        } else {
            find_next_bit(self.block_map(e_index), BLOCK_BITS, e_off)
        };

        // Update s_block.
        let s_end = if s_index == e_index { end } else { BLOCK_BITS };
        if start == 0 && s_end == BLOCK_BITS {
            nr_empty_pages += 1;
        }
        self.m.md[s_index].update(start, s_end);

        if s_index != e_index {
            // Update e_block.
            if end == BLOCK_BITS {
                nr_empty_pages += 1;
            }
            self.m.md[e_index].update(0, end);
            // Reset the blocks in between: wholly free.
            nr_empty_pages += (e_index - s_index - 1) as isize;
            for b in &mut self.m.md[s_index + 1..e_index] {
                b.first_free = 0;
                b.scan_hint = 0;
                b.contig_hint_start = 0;
                b.contig_hint = BLOCK_BITS as u32;
                b.left_free = BLOCK_BITS as u32;
                b.right_free = BLOCK_BITS as u32;
            }
        }
        if nr_empty_pages != 0 {
            self.update_empty_pages(nr_empty_pages);
        }
        self.sync_summary(s_index, e_index);

        if s_index != e_index || end - start >= BLOCK_BITS {
            self.chunk_refresh_hint(true);
        } else {
            // Divergence: the kernel passes the block-relative `end` here
            // (a negative-size region unless s_index == 0, so its local
            // merge is a no-op); the intended chunk-relative end is used.
            let base = s_index * BLOCK_BITS;
            self.st.md.update(base + start, base + end);
        }
    }

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
    pub fn is_alloc_start(&self, bit_off: usize) -> Result<(), crate::error::FreeErrorKind> {
        if !test_bit(self.m.alloc, bit_off) {
            return Err(crate::error::FreeErrorKind::NotAllocated);
        }
        if !test_bit(self.m.bound, bit_off) {
            return Err(crate::error::FreeErrorKind::Interior);
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

// ---------------------------------------------------------------------
// The chunk header and its metadata allocation
// ---------------------------------------------------------------------

/// Which role a chunk plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChunkKind {
    /// The dynamic region of the first chunk (`pcpu_first_chunk`).
    First,
    /// The reserved region of the first chunk (`pcpu_reserved_chunk`).
    Reserved,
    /// Created on demand from the page source.
    Dynamic,
}

/// Not on any slot list.
pub(crate) const LIST_NONE: u16 = u16::MAX;

/// Offsets of the maps inside a chunk's metadata allocation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MetaLayout {
    alloc_off: usize,
    alloc_words: usize,
    bound_off: usize,
    bound_words: usize,
    md_off: usize,
    nr_blocks: usize,
    pop_off: usize,
    pop_words: usize,
    free_off: usize,
    full_off: usize,
    clean_off: usize,
    blk_words: usize,
    /// Whole allocation, in pages.
    pub pages: usize,
}

impl MetaLayout {
    fn new(nr_pages: usize) -> Self {
        let map_bits = nr_pages * BLOCK_BITS;
        let alloc_off = core::mem::size_of::<Chunk>().next_multiple_of(64);
        let alloc_words = words_for(map_bits);
        let bound_off = alloc_off + alloc_words * 8;
        let bound_words = words_for(map_bits + 1);
        let md_off = (bound_off + bound_words * 8).next_multiple_of(64);
        let nr_blocks = nr_pages;
        let pop_off = md_off + nr_blocks * core::mem::size_of::<BlockMd>();
        let pop_words = words_for(nr_pages);
        let blk_words = words_for(nr_blocks);
        let free_off = pop_off + pop_words * 8;
        let full_off = free_off + blk_words * 8;
        let clean_off = full_off + blk_words * 8;
        let total = clean_off + nr_pages * 2;
        MetaLayout {
            alloc_off,
            alloc_words,
            bound_off,
            bound_words,
            md_off,
            nr_blocks,
            pop_off,
            pop_words,
            free_off,
            full_off,
            clean_off,
            blk_words,
            pages: total.div_ceil(PAGE_SIZE),
        }
    }
}

/// `struct pcpu_chunk`: list link, role, base address, state and the
/// location of its maps. Lives at the start of its metadata allocation.
pub(crate) struct Chunk {
    /// Next chunk on its slot list (`pcpu_lock`).
    pub next: *mut Chunk,
    /// Previous chunk on its slot list (`pcpu_lock`).
    pub prev: *mut Chunk,
    /// The slot list it is on, or [`LIST_NONE`] (`pcpu_lock`).
    pub list: u16,
    /// Role (immutable).
    pub kind: ChunkKind,
    /// `base_addr`: unit 0's address of page 0 (immutable). Unit `u`'s copy
    /// of offset `off` is at `base + unit_offset(u) + off`.
    pub base: NonNull<u8>,
    /// State (`pcpu_lock`).
    pub st: ChunkState,
    /// Where the maps are (immutable).
    layout: MetaLayout,
    /// The chunk's memory reservation if it owns one: (start, pages, align).
    pub mem: Option<(NonNull<u8>, usize, usize)>,
}

impl Chunk {
    /// `pcpu_alloc_chunk`: allocates and initialises the metadata of a
    /// chunk of `nr_pages` pages per unit at `base` (nothing populated).
    pub fn create<S: PageSource>(
        source: &S,
        nr_pages: usize,
        kind: ChunkKind,
        base: NonNull<u8>,
    ) -> Option<NonNull<Chunk>> {
        let layout = MetaLayout::new(nr_pages);
        let meta = source.alloc_pages(layout.pages, PAGE_SIZE)?;
        // SAFETY: `meta` is `layout.pages` writable pages owned by us; the
        // header fits at its start (MetaLayout puts the maps after it) and
        // the page alignment satisfies `Chunk`'s alignment.
        unsafe {
            core::ptr::write_bytes(meta.as_ptr(), 0, layout.pages * PAGE_SIZE);
            let c = meta.cast::<Chunk>();
            c.as_ptr().write(Chunk {
                next: core::ptr::null_mut(),
                prev: core::ptr::null_mut(),
                list: LIST_NONE,
                kind,
                base,
                st: ChunkState::new(nr_pages),
                layout,
                mem: None,
            });
            Chunk::ctx(c).init_md();
            Some(c)
        }
    }

    /// `pcpu_free_chunk`: returns the metadata to the page source.
    ///
    /// # Safety
    ///
    /// `c` came from [`create`](Self::create) with the same source, is on
    /// no list and in no lookup table, and is not used afterwards.
    pub unsafe fn destroy_meta<S: PageSource>(source: &S, c: NonNull<Chunk>) {
        // SAFETY: the header is valid (caller), and the metadata allocation
        // is `layout.pages` pages at `c`.
        unsafe {
            let pages = (*c.as_ptr()).layout.pages;
            source.free_pages(c.cast(), pages, PAGE_SIZE);
        }
    }

    /// The chunk's state and maps.
    ///
    /// # Safety
    ///
    /// `c` is a live chunk and the caller has exclusive access to its state
    /// and maps for `'a` (holds `pcpu_lock`, or owns the chunk outright), and
    /// builds no other `ChunkCtx` of it meanwhile.
    #[inline]
    pub unsafe fn ctx<'a>(c: NonNull<Chunk>) -> ChunkCtx<'a> {
        let p = c.as_ptr();
        // SAFETY: the maps lie in the metadata allocation at the offsets of
        // `layout`, after the header and disjoint from each other and from
        // `st`; the caller guarantees exclusive access.
        unsafe {
            let lay = (*p).layout;
            let b = p.cast::<u8>();
            let words = |off: usize, n: usize| -> &'a mut [u64] {
                core::slice::from_raw_parts_mut(b.add(off).cast::<u64>(), n)
            };
            ChunkCtx {
                st: &mut (*p).st,
                m: Maps {
                    alloc: words(lay.alloc_off, lay.alloc_words),
                    bound: words(lay.bound_off, lay.bound_words),
                    md: core::slice::from_raw_parts_mut(
                        b.add(lay.md_off).cast::<BlockMd>(),
                        lay.nr_blocks,
                    ),
                    populated: words(lay.pop_off, lay.pop_words),
                    free_blk: words(lay.free_off, lay.blk_words),
                    full_blk: words(lay.full_off, lay.blk_words),
                    clean: core::slice::from_raw_parts_mut(
                        b.add(lay.clean_off).cast::<u16>(),
                        lay.nr_blocks,
                    ),
                },
                empty_delta: 0,
            }
        }
    }
}

// ---------------------------------------------------------------------
// Test support: a chunk over vectors
// ---------------------------------------------------------------------

/// A chunk whose maps are plain vectors (unit tests of the algorithms).
#[cfg(test)]
#[derive(Clone)]
pub(crate) struct VecChunk {
    pub st: ChunkState,
    alloc: std::vec::Vec<u64>,
    bound: std::vec::Vec<u64>,
    md: std::vec::Vec<BlockMd>,
    populated: std::vec::Vec<u64>,
    free_blk: std::vec::Vec<u64>,
    full_blk: std::vec::Vec<u64>,
    clean: std::vec::Vec<u16>,
}

#[cfg(test)]
impl VecChunk {
    /// A free, fully populated chunk of `nr_pages` pages.
    pub fn new(nr_pages: usize) -> Self {
        use std::vec;
        let map_bits = nr_pages * BLOCK_BITS;
        let mut c = VecChunk {
            st: ChunkState::new(nr_pages),
            alloc: vec![0; words_for(map_bits)],
            bound: vec![0; words_for(map_bits + 1)],
            md: vec![BlockMd::new(BLOCK_BITS as u32); nr_pages],
            populated: vec![0; words_for(nr_pages)],
            free_blk: vec![0; words_for(nr_pages)],
            full_blk: vec![0; words_for(nr_pages)],
            clean: vec![PAGE_SIZE as u16; nr_pages],
        };
        let mut ctx = c.ctx();
        ctx.init_md();
        ctx.chunk_populated(0, nr_pages);
        c
    }

    /// The context over the vectors.
    pub fn ctx(&mut self) -> ChunkCtx<'_> {
        ChunkCtx {
            st: &mut self.st,
            m: Maps {
                alloc: &mut self.alloc,
                bound: &mut self.bound,
                md: &mut self.md,
                populated: &mut self.populated,
                free_blk: &mut self.free_blk,
                full_blk: &mut self.full_blk,
                clean: &mut self.clean,
            },
            empty_delta: 0,
        }
    }
}
