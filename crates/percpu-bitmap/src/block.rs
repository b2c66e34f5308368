//! `pcpu_block_md`: the contiguity hints of one metadata block (one page of
//! bits) or, with `nr_bits = map_bits`, of a whole chunk.
//!
//! All values are in bits (one bit = [`MIN_ALLOC_SIZE`](crate::MIN_ALLOC_SIZE)
//! bytes) relative to the start of the block.
//!
//! Invariants at the block level (checked by the invariant checker), with
//! `runs` the maximal runs of clear bits of the block's part of `alloc_map`:
//!
//! ```text
//! contig_hint      = max |r| over runs           (exact)
//! [contig_hint_start, +contig_hint)  is a run    (exact)
//! left_free        = |run starting at 0|         (exact)
//! right_free       = |run ending at nr_bits|     (exact)
//! first_free      <= first clear bit             (lower bound; exact unless the
//!                                                 block was wholly covered by an
//!                                                 allocation and later freed into)
//! scan_hint > 0   => [scan_hint_start, +scan_hint) is clear,
//!                    scan_hint <= contig_hint,
//!                    scan_hint_start > contig_hint_start => scan_hint == contig_hint,
//!                    every run before scan_hint_start is <= scan_hint
//! ```
//!
//! The last line is what makes promoting the scan hint (refresh scans only
//! after it) exact; the kernel's rule can break it (see `update`).
//!
//! The scan hint is the largest *known* free run before the contig hint, not
//! necessarily the true second largest: it lets a refresh start after it.
//! At the chunk level the contig hint may be smaller than the truth (see
//! [`crate::chunk`]), never larger.

use local_lock::bits::align_up;

/// Hints of one block (or of a chunk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct BlockMd {
    /// Largest known free run before the contig hint (0 = none).
    pub scan_hint: u32,
    /// Start of the scan hint.
    pub scan_hint_start: u32,
    /// Largest free run.
    pub contig_hint: u32,
    /// Start of the contig hint (the best-aligned among equal runs).
    pub contig_hint_start: u32,
    /// Free bits touching the start of the block.
    pub left_free: u32,
    /// Free bits touching the end of the block.
    pub right_free: u32,
    /// First free bit (lower bound; a search start).
    pub first_free: u32,
    /// Bits covered by this block.
    pub nr_bits: u32,
}

/// `__ffs`: index of the lowest set bit (caller guarantees `x != 0`).
#[inline(always)]
fn ffs(x: u32) -> u32 {
    x.trailing_zeros()
}

/// `pcpu_region_overlap`: whether `[a, b)` and `[x, y)` overlap.
#[inline(always)]
pub(crate) fn region_overlap(a: usize, b: usize, x: usize, y: usize) -> bool {
    a < y && x < b
}

impl BlockMd {
    /// `pcpu_init_md_block`: a wholly free block of `nr_bits` bits.
    pub const fn new(nr_bits: u32) -> Self {
        BlockMd {
            scan_hint: 0,
            scan_hint_start: 0,
            contig_hint: nr_bits,
            contig_hint_start: 0,
            left_free: nr_bits,
            right_free: nr_bits,
            first_free: 0,
            nr_bits,
        }
    }

    /// `pcpu_block_update`: records the free run `[start, end)`, which must
    /// be the entirety of a free area inside this block (or a real free run,
    /// for chunk metadata). Chooses the best-aligned start among equal
    /// contig hints and maintains the scan hint's invariant.
    pub fn update(&mut self, start: usize, end: usize) {
        debug_assert!(start < end && end <= self.nr_bits as usize);
        let start = start as u32;
        let end = end as u32;
        let contig = end - start;

        self.first_free = self.first_free.min(start);
        if start == 0 {
            self.left_free = contig;
        }
        if end == self.nr_bits {
            self.right_free = contig;
        }

        // Divergence (all `overlaps` tests): the scan hint and the contig
        // hint must be distinct regions, as the kernel's invariant says.
        // Block-level regions are whole runs, so they never overlap; but
        // chunk-level updates from the free path are runs cut at block
        // edges, and two pieces of one run may overlap. The kernel then
        // keeps the old piece as scan hint, and `next_hint` jumps into the
        // middle of the contig hint, missing it.
        let overlaps = |s: u32, n: u32| n != 0 && start < s + n && s < end;
        if contig > self.contig_hint {
            // Promote the old contig hint to be the new scan hint.
            if start > self.contig_hint_start {
                if self.contig_hint > self.scan_hint {
                    if overlaps(self.contig_hint_start, self.contig_hint) {
                        self.scan_hint = 0;
                    } else {
                        self.scan_hint_start = self.contig_hint_start;
                        self.scan_hint = self.contig_hint;
                    }
                } else if start <= self.scan_hint_start
                    || overlaps(self.scan_hint_start, self.scan_hint)
                {
                    // The old contig == scan, but the new contig is larger:
                    // keep scan_hint_start < contig_hint_start.
                    // Divergence: `<=` (the kernel has `<`): a new run that
                    // starts at the scan hint contains it, and keeping it
                    // would leave the scan hint inside the contig hint.
                    self.scan_hint = 0;
                }
            } else {
                self.scan_hint = 0;
            }
            self.contig_hint_start = start;
            self.contig_hint = contig;
        } else if contig == self.contig_hint {
            if self.contig_hint_start != 0
                && (start == 0 || ffs(start) > ffs(self.contig_hint_start))
            {
                // `start` has a better alignment, use it.
                self.contig_hint_start = start;
                // `<=` for the same reason as above (the kernel has `<`).
                if (start <= self.scan_hint_start && self.contig_hint > self.scan_hint)
                    || overlaps(self.scan_hint_start, self.scan_hint)
                {
                    self.scan_hint = 0;
                }
            } else if (start > self.scan_hint_start || self.contig_hint > self.scan_hint)
                && !overlaps(self.contig_hint_start, self.contig_hint)
            {
                // contig == contig_hint: remember it as the scan hint if it
                // is farther than or larger than the current one.
                self.scan_hint_start = start;
                self.scan_hint = contig;
            }
        } else if start < self.contig_hint_start
            && self.scan_hint != 0
            && start <= self.scan_hint_start
            && contig > self.scan_hint
            && !overlaps(self.contig_hint_start, self.contig_hint)
        {
            // Smaller than the contig hint: a larger run starting at or
            // before the scan hint (so it contains it or precedes it) becomes
            // the scan hint; everything before it lies before the old scan
            // hint, hence is smaller.
            //
            // Divergence: the kernel also takes a larger run after the scan
            // hint, an equal one farther on, or any run when the scan hint is
            // 0 (unknown). Runs between the old and the new position are not
            // known to be smaller then, and the refresh that promotes the scan
            // hint and scans only after it could miss a larger one, leaving
            // the contig hint too small (tests::chunk_hints::
            // scan_hint_promotion_stays_exact). With this rule every free run
            // before `scan_hint_start` is at most `scan_hint`.
            self.scan_hint_start = start;
            self.scan_hint = contig;
        }
    }

    /// `pcpu_check_block_hint`: whether `bits` bits aligned to `align` bits
    /// fit in the contig hint.
    #[inline]
    pub fn check_hint(&self, bits: usize, align: usize) -> bool {
        let start = self.contig_hint_start as usize;
        align_up(start, align) - start + bits <= self.contig_hint as usize
    }

    /// `pcpu_next_hint`: where a search for `alloc_bits` should begin: after
    /// the scan hint when it exists, lies before the contig hint and is too
    /// small for the request; otherwise at `first_free` (first fit).
    #[inline]
    pub fn next_hint(&self, alloc_bits: usize) -> usize {
        if self.scan_hint != 0
            && self.contig_hint_start > self.scan_hint_start
            && alloc_bits > self.scan_hint as usize
        {
            return (self.scan_hint_start + self.scan_hint) as usize;
        }
        self.first_free as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_block() {
        let b = BlockMd::new(1024);
        assert_eq!(b.contig_hint, 1024);
        assert_eq!(b.left_free, 1024);
        assert_eq!(b.right_free, 1024);
        assert!(b.check_hint(1024, 1));
        assert!(!b.check_hint(1025, 1));
        assert_eq!(b.next_hint(4), 0);
    }

    #[test]
    fn update_prefers_alignment_and_keeps_scan_invariant() {
        let mut b = BlockMd::new(1024);
        b.contig_hint = 0;
        b.left_free = 0;
        b.right_free = 0;
        b.first_free = 1024;
        b.update(100, 110); // 10 at 100
        assert_eq!((b.contig_hint, b.contig_hint_start), (10, 100));
        b.update(200, 210); // equal, start 200 (ffs 3) vs 100 (ffs 2): better aligned
        assert_eq!((b.contig_hint, b.contig_hint_start), (10, 200));
        b.update(300, 330); // larger, after: old contig becomes the scan hint
        assert_eq!((b.contig_hint, b.contig_hint_start), (30, 300));
        assert_eq!((b.scan_hint, b.scan_hint_start), (10, 200));
        assert_eq!(b.first_free, 100);
        // A smaller run after the contig hint is not a scan hint.
        b.update(400, 420);
        assert_eq!((b.scan_hint, b.scan_hint_start), (10, 200));
        // A larger run before the contig hint is.
        b.update(10, 30);
        assert_eq!((b.scan_hint, b.scan_hint_start), (20, 10));
        // Right edge.
        b.update(1000, 1024);
        assert_eq!(b.right_free, 24);
        b.update(0, 5);
        assert_eq!(b.left_free, 5);
        assert_eq!(b.first_free, 0);
        // next_hint skips the scan hint for a request larger than it.
        assert_eq!(b.next_hint(25), 30);
        assert_eq!(b.next_hint(5), 0);
    }

    #[test]
    fn overlap() {
        assert!(region_overlap(0, 10, 9, 12));
        assert!(!region_overlap(0, 10, 10, 12));
        assert!(!region_overlap(0, 10, 20, 30));
        assert_eq!(align_up(13, 8), 16);
        assert_eq!(align_up(16, 8), 16);
    }
}
