//! The invariant checker: recomputes every hint and count from the bitmaps
//! by brute force and compares (compiled under `cfg(test)` or feature
//! `invariants`; run after every operation in tests and fuzzing).
//!
//! What is checked, per chunk (see [`crate::chunk`] and [`crate::block`]):
//!
//! * the boundary map partitions the allocated bits into allocations
//!   (every allocated run starts on a boundary bit; no allocation has a
//!   hole; the trailing bit exists);
//! * `free_bytes` = 4 x clear bits;
//! * block hints exact: `contig_hint` (and that its region is a maximal free
//!   run), `left_free`, `right_free`; `first_free` a lower bound; scan hint
//!   region free, `scan <= contig`, `scan_start > contig_start => scan ==
//!   contig`; the free/full summary maps mirror the blocks;
//! * chunk hints: contig region free; `contig <= true largest run` (never
//!   too large) and short of it by less than two blocks; `first_free`
//!   exact; scan region free (exactness right after a rescan is covered by
//!   the scenario tests: the chunk hint legitimately lags behind frees
//!   inside one block and behind splits of runs it under-reported);
//! * populated count and empty populated pages recomputed;
//!
//! and globally: the empty-page and populated-page totals, slot placement
//! (`slot(chunk)`, or 0 after demotion, or sidelined/to-depopulate iff
//! isolated), list links, the lookup table, the reserved chunk on no list.

use core::ptr::NonNull;

use local_lock::Platform;

use crate::bitmap::{find_next_bit, find_next_zero_bit, test_bit, weight};
use crate::chunk::{Chunk, ChunkCtx, ChunkKind, LIST_NONE};
use crate::pcpu::PcpuAllocator;
use crate::pcpu::{chunk_slot, Geometry, MAX_SLOTS};
use crate::source::ChunkSource;
use crate::types::{BLOCK_BITS, MIN_ALLOC_SIZE};

/// Facts about one chunk, for the global checks.
pub(crate) struct ChunkFacts {
    pub nr_populated: usize,
    pub nr_empty_pop_pages: isize,
}

/// The largest clear run in `[lo, hi)` and whether some largest run lies
/// inside one block.
fn runs(alloc: &[u64], lo: usize, hi: usize) -> (usize, bool) {
    let mut best = 0usize;
    let mut best_in_block = false;
    let mut b = lo;
    while b < hi {
        let s = find_next_zero_bit(alloc, hi, b);
        if s >= hi {
            break;
        }
        let e = find_next_bit(alloc, hi, s);
        let len = e - s;
        let in_block = s / BLOCK_BITS == (e - 1) / BLOCK_BITS;
        if len > best {
            best = len;
            best_in_block = in_block;
        } else if len == best {
            best_in_block |= in_block;
        }
        b = e;
    }
    (best, best_in_block)
}

/// Whether `[s, s + n)` is clear.
fn clear(alloc: &[u64], s: usize, n: usize) -> bool {
    find_next_bit(alloc, s + n, s) >= s + n
}

/// Checks one chunk; panics with `who` and a description on a violation.
pub(crate) fn check_chunk(ctx: &ChunkCtx<'_>, who: &str) -> ChunkFacts {
    let st = &*ctx.st;
    let m = &ctx.m;
    let map_bits = st.map_bits();
    let nr_blocks = st.nr_pages;
    assert_eq!(m.md.len(), nr_blocks, "{who}: md_blocks length");

    // Boundary map partitions the allocated bits.
    let mut b = 0;
    while b < map_bits {
        if !test_bit(m.alloc, b) {
            b = find_next_bit(m.alloc, map_bits, b);
            continue;
        }
        assert!(
            test_bit(m.bound, b),
            "{who}: allocated bit {b} starts a run/allocation without a boundary bit"
        );
        let e = find_next_bit(m.bound, map_bits + 1, b + 1);
        assert!(
            e <= map_bits,
            "{who}: allocation at {b} has no end boundary"
        );
        assert!(
            find_next_zero_bit(m.alloc, e, b) >= e,
            "{who}: allocation [{b}, {e}) has a clear bit inside"
        );
        b = e;
    }

    let free_bits = map_bits - weight(m.alloc, map_bits);
    assert_eq!(
        st.free_bytes,
        free_bits * MIN_ALLOC_SIZE,
        "{who}: free_bytes"
    );

    // Blocks.
    let mut empty_pop = 0isize;
    for (i, blk) in m.md.iter().enumerate() {
        let lo = i * BLOCK_BITS;
        let hi = lo + BLOCK_BITS;
        let (max, _) = runs(m.alloc, lo, hi);
        let first = find_next_zero_bit(m.alloc, hi, lo);
        let left = first_set_or(m.alloc, lo, hi) - lo;
        let right = hi - last_set_end(m.alloc, lo, hi);
        assert_eq!(blk.nr_bits as usize, BLOCK_BITS, "{who}: block {i} nr_bits");
        assert_eq!(
            blk.contig_hint as usize, max,
            "{who}: block {i} contig_hint {blk:?}"
        );
        assert_eq!(
            blk.left_free as usize, left,
            "{who}: block {i} left_free {blk:?}"
        );
        assert_eq!(
            blk.right_free as usize, right,
            "{who}: block {i} right_free {blk:?}"
        );
        if max > 0 {
            let cs = lo + blk.contig_hint_start as usize;
            assert!(
                clear(m.alloc, cs, max) && cs + max <= hi,
                "{who}: block {i} contig region not free {blk:?}"
            );
            assert!(
                (blk.first_free as usize) <= first - lo,
                "{who}: block {i} first_free {} above the first free bit {} {blk:?}",
                blk.first_free,
                first - lo
            );
        }
        if blk.scan_hint > 0 {
            let ss = lo + blk.scan_hint_start as usize;
            assert!(
                ss + blk.scan_hint as usize <= hi && clear(m.alloc, ss, blk.scan_hint as usize),
                "{who}: block {i} scan region not free {blk:?}"
            );
            assert!(
                blk.scan_hint <= blk.contig_hint,
                "{who}: block {i} scan > contig {blk:?}"
            );
            if blk.scan_hint < blk.contig_hint {
                let (cs, ce) = (
                    blk.contig_hint_start,
                    blk.contig_hint_start + blk.contig_hint,
                );
                assert!(
                    blk.scan_hint_start + blk.scan_hint <= cs || blk.scan_hint_start >= ce,
                    "{who}: block {i} scan hint inside the contig hint {blk:?}"
                );
            }
            if blk.scan_hint_start > blk.contig_hint_start {
                assert_eq!(
                    blk.scan_hint, blk.contig_hint,
                    "{who}: block {i} scan after contig but smaller {blk:?}"
                );
            }
            // A refresh promotes the scan hint and scans on from its end:
            // no run before it may be larger.
            let (before, _) = runs(m.alloc, lo, ss);
            assert!(
                before <= blk.scan_hint as usize,
                "{who}: block {i} has a run of {before} before its scan hint {blk:?}"
            );
        }
        assert_eq!(
            test_bit(m.free_blk, i),
            blk.left_free as usize == BLOCK_BITS,
            "{who}: free summary of block {i}"
        );
        assert_eq!(
            test_bit(m.full_blk, i),
            blk.contig_hint == 0,
            "{who}: full summary of block {i}"
        );
        if max == BLOCK_BITS && test_bit(m.populated, i) {
            empty_pop += 1;
        }
    }

    // Chunk hints.
    let md = &st.md;
    let (truth, _) = runs(m.alloc, 0, map_bits);
    let contig = md.contig_hint as usize;
    assert!(
        contig <= truth,
        "{who}: chunk contig_hint {contig} > largest free run {truth} {md:?}"
    );
    if contig > 0 {
        let cs = md.contig_hint_start as usize;
        assert!(
            cs + contig <= map_bits && clear(m.alloc, cs, contig),
            "{who}: chunk contig region [{cs}, +{contig}) not free"
        );
    }
    assert!(
        truth < contig + 2 * BLOCK_BITS,
        "{who}: chunk contig_hint {contig} short of {truth} by two blocks or more"
    );
    let first = find_next_zero_bit(m.alloc, map_bits, 0);
    assert_eq!(md.first_free as usize, first, "{who}: chunk first_free");
    if md.scan_hint > 0 {
        let ss = md.scan_hint_start as usize;
        let sn = md.scan_hint as usize;
        assert!(
            ss + sn <= map_bits && clear(m.alloc, ss, sn),
            "{who}: chunk scan region not free {md:?}"
        );
        if contig > 0 && md.scan_hint_start != md.contig_hint_start {
            let cs = md.contig_hint_start as usize;
            assert!(
                ss + sn <= cs || ss >= cs + contig,
                "{who}: chunk scan hint overlaps the contig hint {md:?}"
            );
        }
    }

    // Population.
    let pop = weight(m.populated, nr_blocks);
    assert_eq!(st.nr_populated, pop, "{who}: nr_populated");
    assert_eq!(
        st.nr_empty_pop_pages, empty_pop,
        "{who}: nr_empty_pop_pages"
    );
    if st.immutable {
        assert_eq!(pop, nr_blocks, "{who}: immutable chunk not fully populated");
    }
    ChunkFacts {
        nr_populated: pop,
        nr_empty_pop_pages: empty_pop,
    }
}

/// First set bit in `[lo, hi)`, or `hi`.
fn first_set_or(alloc: &[u64], lo: usize, hi: usize) -> usize {
    find_next_bit(alloc, hi, lo)
}

/// One past the last set bit in `[lo, hi)` (word-aligned block), or `lo`.
fn last_set_end(alloc: &[u64], lo: usize, hi: usize) -> usize {
    let words = &alloc[lo / 64..hi.div_ceil(64)];
    let l = crate::bitmap::find_last_bit(words, hi - lo);
    if l == hi - lo {
        lo
    } else {
        lo + l + 1
    }
}

impl<P: Platform, S: ChunkSource> PcpuAllocator<P, S> {
    /// Checks every invariant by brute force (with both locks held, so the
    /// state is quiescent) and panics with a description of the first
    /// violation. Compiled under `cfg(test)` and feature `invariants`.
    pub fn check_invariants(&self) {
        let geo: Geometry = *self.geometry();
        let (_slow, g) = self.locks();
        let mut total_pop = 0usize;
        let mut total_empty = 0isize;
        let mut dynamic = 0usize;

        let mut check = |c: NonNull<Chunk>, who: &str, listed: Option<usize>| {
            // SAFETY: both locks held; `c` is live; nothing else builds a
            // context of it meanwhile.
            let ctx = unsafe { Chunk::ctx(c) };
            let f = check_chunk(&ctx, who);
            // SAFETY: as above (reading immutable and lock-protected fields).
            let (kind, list) = unsafe { ((*c.as_ptr()).kind, (*c.as_ptr()).list) };
            total_pop += f.nr_populated;
            if kind != ChunkKind::Reserved && !ctx.st.isolated {
                total_empty += f.nr_empty_pop_pages;
            }
            match kind {
                ChunkKind::Reserved => {
                    assert_eq!(list, LIST_NONE, "{who}: the reserved chunk is on a list");
                    assert!(!ctx.st.isolated, "{who}: reserved chunk isolated");
                }
                _ => {
                    let l = listed.expect("listed chunk");
                    assert_eq!(
                        list as usize, l,
                        "{who}: list field disagrees with its list"
                    );
                    if ctx.st.isolated {
                        assert!(
                            l == geo.sidelined_slot || l == geo.to_depopulate_slot,
                            "{who}: isolated chunk on slot {l}"
                        );
                    } else {
                        let want = chunk_slot(&geo, ctx.st);
                        assert!(
                            l == want || l == 0,
                            "{who}: on slot {l}, belongs on {want} (or demoted to 0)"
                        );
                    }
                    if kind == ChunkKind::Dynamic {
                        assert_eq!(ctx.st.nr_pages, geo.unit_pages, "{who}: nr_pages");
                    }
                }
            }
        };

        if let Some(r) = NonNull::new(g.reserved) {
            check(r, "reserved chunk", None);
        }
        let mut seen_first = g.first.is_null();
        for slot in 0..MAX_SLOTS {
            let mut prev: *mut Chunk = core::ptr::null_mut();
            let mut c = g.slots[slot].head;
            if slot >= geo.nr_slots {
                assert!(c.is_null(), "chunks on slot {slot} beyond nr_slots");
            }
            while let Some(cn) = NonNull::new(c) {
                // SAFETY: list chunks are live; links read under the lock.
                let (p, next, kind, base) = unsafe { ((*c).prev, (*c).next, (*c).kind, (*c).base) };
                assert_eq!(p, prev, "slot {slot}: broken prev link");
                match kind {
                    ChunkKind::First => {
                        seen_first = true;
                        check(cn, "first chunk", Some(slot));
                    }
                    ChunkKind::Dynamic => {
                        dynamic += 1;
                        check(cn, "dynamic chunk", Some(slot));
                        let key = base.as_ptr() as usize >> geo.key_shift;
                        assert_eq!(
                            g.map.lookup(key),
                            Some(cn),
                            "dynamic chunk missing from the lookup table"
                        );
                    }
                    ChunkKind::Reserved => panic!("reserved chunk on slot {slot}"),
                }
                prev = c;
                c = next;
            }
            assert_eq!(g.slots[slot].tail, prev, "slot {slot}: tail");
            assert_eq!(
                g.nonempty >> slot & 1 == 1,
                !prev.is_null(),
                "slot {slot}: non-empty mask"
            );
        }
        assert!(seen_first, "first chunk on no list");
        assert_eq!(g.map.len(), dynamic, "lookup table size vs dynamic chunks");
        assert_eq!(g.nr_populated, total_pop, "global nr_populated");
        assert_eq!(
            g.nr_empty_pop_pages, total_empty,
            "global nr_empty_pop_pages"
        );
    }
}
