//! Where a chunk lives: the header (`struct pcpu_chunk`) at the start of
//! one metadata allocation from the chunk source, followed by the maps (see
//! the layout in the parent module); and, for unit tests of the
//! algorithms, a chunk over plain vectors.

use core::ptr::NonNull;

use super::state::{ChunkCtx, ChunkState, Maps};
use crate::bitmap::words_for;
use crate::block::BlockMd;
use crate::source::ChunkSource;
use crate::types::{BLOCK_BITS, PAGE_SIZE};

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
    /// Created on demand from the chunk source.
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
    pub fn create<S: ChunkSource>(
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

    /// `pcpu_free_chunk`: returns the metadata to the chunk source.
    ///
    /// # Safety
    ///
    /// `c` came from [`create`](Self::create) with the same source, is on
    /// no list and in no lookup table, and is not used afterwards.
    pub unsafe fn destroy_meta<S: ChunkSource>(source: &S, c: NonNull<Chunk>) {
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
