//! The hint maintenance of a chunk: the metadata walks
//! (`pcpu_next_md_free_region`, `pcpu_next_fit_region`) and the block and
//! chunk hint updates (`pcpu_block_update_hint_{alloc,free}`,
//! `pcpu_{block,chunk}_refresh_hint`, `pcpu_block_update_scan`). See the
//! parent module for the equations they keep.

use super::state::{ChunkCtx, BLOCK_WORDS};
use crate::bitmap::{find_last_bit, find_next_bit, find_next_zero_bit, next_clear_region};
use crate::block::region_overlap;
use crate::types::BLOCK_BITS;
use local_lock::bits::align_up;

impl ChunkCtx<'_> {
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
    pub(super) fn next_fit_region(
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
    pub(super) fn block_update_scan(&mut self, bit_off: usize, bits: usize) {
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
    pub(super) fn block_update_hint_alloc(
        &mut self,
        bit_off: usize,
        bits: usize,
        chunk_first: bool,
    ) {
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
    pub(super) fn block_update_hint_free(&mut self, bit_off: usize, bits: usize) {
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
}
