//! One chunk: its allocation and boundary bitmaps, its metadata blocks and
//! the kernel's hint maintenance (`pcpu_alloc_area`, `pcpu_free_area`,
//! `pcpu_find_block_fit`, `pcpu_block_update_hint_{alloc,free}`,
//! `pcpu_{block,chunk}_refresh_hint`).
//!
//! This module holds the state and the view the algorithms work on
//! (`ChunkState`, `Maps`, `ChunkCtx`); the algorithms are in layers below
//! it, none calling into a later one:
//!
//! * `hints`: the metadata walks and the block and chunk hint updates;
//! * `area`: fit and zero-area search, `pcpu_alloc_area`, `pcpu_free_area`,
//!   population bookkeeping, the first chunk's setup (uses `hints`);
//! * `meta`: the chunk header (`struct pcpu_chunk`) and its metadata
//!   allocation, and a chunk over vectors for unit tests.
//!
//! A chunk's metadata lives in one allocation from the chunk source:
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

use crate::bitmap::{set_range, WORD_BITS};
use crate::block::BlockMd;
use crate::types::{BLOCK_BITS, MIN_ALLOC_SIZE, PAGE_SIZE};

mod area;
mod hints;
mod meta;

#[cfg(test)]
pub(crate) use meta::VecChunk;
pub(crate) use meta::{Chunk, ChunkKind, LIST_NONE};

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
}
