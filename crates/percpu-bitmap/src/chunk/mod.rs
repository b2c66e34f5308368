//! One chunk: its allocation and boundary bitmaps, its metadata blocks and
//! the kernel's hint maintenance (`pcpu_alloc_area`, `pcpu_free_area`,
//! `pcpu_find_block_fit`, `pcpu_block_update_hint_{alloc,free}`,
//! `pcpu_{block,chunk}_refresh_hint`).
//!
//! This module only declares and re-exports; the code is in layers, each
//! using only those above it in this list:
//!
//! * `state`: `ChunkState`, `Maps` and `ChunkCtx` (the state and the view
//!   the algorithms work on);
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

mod area;
mod hints;
mod meta;
mod state;

#[cfg(test)]
pub(crate) use meta::VecChunk;
pub(crate) use meta::{Chunk, ChunkKind, LIST_NONE};
#[cfg(any(test, feature = "invariants"))]
pub(crate) use state::ChunkCtx;
pub(crate) use state::ChunkState;
