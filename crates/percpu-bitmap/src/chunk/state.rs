//! A chunk's state and the view the algorithms work on: `ChunkState` (the
//! header's mutable part), `Maps` (its bitmaps and blocks) and `ChunkCtx`
//! (both, for one operation), with the small helpers every layer uses.

use crate::bitmap::{set_range, WORD_BITS};
use crate::block::BlockMd;
use crate::types::{BLOCK_BITS, MIN_ALLOC_SIZE, PAGE_SIZE};

/// Words of `alloc_map` per block.
pub(super) const BLOCK_WORDS: usize = BLOCK_BITS / WORD_BITS;
/// Bitmap bits per page.
pub(super) const PAGE_BITS: usize = PAGE_SIZE / MIN_ALLOC_SIZE;

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
    pub(super) fn map_bits(&self) -> usize {
        self.st.map_bits()
    }

    #[inline(always)]
    pub(super) fn nr_blocks(&self) -> usize {
        self.st.nr_pages
    }

    /// `pcpu_index_alloc_map`: the alloc-map words of block `i`.
    #[inline(always)]
    pub(super) fn block_map(&self, i: usize) -> &[u64] {
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
    pub(super) fn update_empty_pages(&mut self, nr: isize) {
        self.st.nr_empty_pop_pages += nr;
        self.empty_delta += nr;
    }

    /// Mirrors blocks `lo..=hi` into the free/full summary maps.
    #[inline]
    pub(super) fn sync_summary(&mut self, lo: usize, hi: usize) {
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
