//! Purging (free blocks given back to the OS): which blocks a trim takes,
//! the `PURGED` flag through splits, merges and hand-outs, known zero after
//! a purge, the decay scan and its retained pages. The page source is a
//! test double that records each purge and zeroes the block itself (as the
//! OS would), so these run without an OS (and under miri).

use std::sync::Mutex;
use std::vec::Vec;

use super::{fill, o, reads, Fx};
use crate::{AllocFlags, Buddy, BuddySource, Config, PurgePolicy, Stat, Tunables, ZoneId};
use core::ptr::NonNull;
use local_lock::test_platform::TestPlatform;

/// A page source that "purges" by zeroing and recording `(offset, bytes)`
/// from the arena start (or refuses, if `refuse`).
struct Recorder<'a> {
    b: &'a Buddy<TestPlatform>,
    base: usize,
    log: Mutex<Vec<(usize, usize)>>,
}

impl<'a> Recorder<'a> {
    fn new(fx: &'a Fx) -> Self {
        Recorder {
            b: &fx.b,
            base: fx.arena.addr(),
            log: Mutex::new(Vec::new()),
        }
    }
    fn log(&self) -> Vec<(usize, usize)> {
        let mut l = self.log.lock().unwrap().clone();
        l.sort();
        l
    }
}

impl BuddySource for Recorder<'_> {
    type P = TestPlatform;
    fn buddy(&self) -> &Buddy<TestPlatform> {
        self.b
    }
    fn purge(&self, block: NonNull<u8>, bytes: usize) -> bool {
        // SAFETY: a free block the purge pass took off the lists.
        unsafe { block.as_ptr().write_bytes(0, bytes) };
        let off = block.as_ptr() as usize - self.base;
        self.log.lock().unwrap().push((off, bytes));
        true
    }
}

/// 64 B pages, max order 4 (1 KiB blocks), purge order 3, dirty memory.
fn fx(blocks: usize, policy: PurgePolicy) -> Fx {
    Fx::with(
        Config::new(64, 4)
            .with_tunables(Tunables::NO_MIN)
            .with_purge(policy),
        blocks,
        true,
    )
}

const P3: PurgePolicy = PurgePolicy {
    order: 3,
    decay_ms: Some(100),
    retain_pages: Some(0),
    release_order: None,
    max_resident_pages: None,
    resident_shift: None,
};

fn purged(fx: &Fx) -> usize {
    fx.nr_purged_pages(ZoneId::new(0))
}

#[test]
fn trim_purges_whole_free_blocks_at_or_above_the_order() {
    let fx = fx(4, P3);
    let src = Recorder::new(&fx);
    // One page taken: block 0 splits into free 512 B, 256, 128, 64 B blocks.
    let p = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    assert_eq!(fx.idx(&p), 0);
    assert_eq!(src.trim(), 3 * 1024 + 512);
    fx.check_invariants();
    assert_eq!(
        src.log(),
        [(512, 512), (1024, 1024), (2048, 1024), (3072, 1024)],
        "whole blocks of order >= 3 only"
    );
    assert_eq!(purged(&fx), 3 * 16 + 8);
    let zi = fx.zone_info(ZoneId::new(0));
    assert_eq!(zi.purged, 56);
    assert_eq!(
        &zi.zero_blocks[..5],
        &[0, 0, 0, 1, 3],
        "purged = known zero"
    );
    assert_eq!(fx.stat(Stat::PURGE), 4);
    assert_eq!(fx.stat(Stat::PURGED_BYTES), 3 * 1024 + 512);
    let zi = std::format!("{}", fx.zoneinfo());
    assert!(zi.contains("purged   56"));
    let page = fx.config().page_size();
    assert!(
        zi.contains(&std::format!(" purged {}\n", 56 * page)),
        "{zi}"
    );
    for (name, n) in [("purge", 4), ("purged_bytes", 3 * 1024 + 512)] {
        assert!(
            zi.lines()
                .any(|l| l.split_whitespace().eq([name, &std::format!("{n}")])),
            "{name} {n} not in\n{zi}"
        );
    }
    // Nothing resident left at or above the order: a second trim purges
    // nothing.
    assert_eq!(src.trim(), 0);
    assert_eq!(src.log().len(), 4);
    // SAFETY: ours.
    unsafe { fx.free_pages(p.ptr, o(0)) };
    fx.check_invariants();
}

#[test]
fn a_page_source_without_the_hook_purges_nothing() {
    let fx = fx(2, P3);
    // `Buddy` itself is a `BuddySource` with the default (no) purge hook.
    assert_eq!(BuddySource::trim(&fx.b), 0);
    assert_eq!(purged(&fx), 0);
    assert_eq!(fx.stat(Stat::PURGE), 0);
    assert_eq!(
        fx.zone_info(ZoneId::new(0)).zero_blocks[4],
        0,
        "still dirty"
    );
    fx.check_invariants();
}

#[test]
fn purged_blocks_serve_zeroed_requests_without_clearing() {
    let fx = fx(2, P3);
    let src = Recorder::new(&fx);
    assert_eq!(src.trim(), 2048);
    // A zeroed request: known zero (the checked build verifies it reads
    // zero), no clearing.
    let p = fx.alloc_pages(o(4), AllocFlags::ZEROED).unwrap();
    assert!(p.zero && reads(&p, 1024, 0));
    assert_eq!(fx.stat(Stat::ZEROED_NO_CLEAR), 1);
    assert_eq!(fx.stat(Stat::BYTES_CLEARED), 0);
    assert_eq!(purged(&fx), 16, "handing out clears the flag");
    // A plain request from a purged block is known zero too.
    let q = fx.alloc_pages(o(1), AllocFlags::NONE).unwrap();
    assert!(q.zero && reads(&q, 128, 0));
    fx.check_invariants();
    // SAFETY: ours.
    unsafe {
        fx.free_pages(p.ptr, o(4));
        fx.free_pages(q.ptr, o(1));
    }
    fx.check_invariants();
}

#[test]
fn splitting_a_purged_block_keeps_the_halves_purged() {
    let fx = fx(1, P3);
    let src = Recorder::new(&fx);
    src.trim();
    assert_eq!(purged(&fx), 16);
    let p = fx.alloc_pages(o(1), AllocFlags::NONE).unwrap();
    // Free halves of 512, 256, 128 B stay purged; only the block taken
    // left the count.
    assert_eq!(purged(&fx), 14);
    let zi = fx.zone_info(ZoneId::new(0));
    assert_eq!(&zi.zero_blocks[..5], &[0, 1, 1, 1, 0]);
    fx.check_invariants();
    // Freed dirty: it merges with the purged halves into a resident (not
    // purged, half-zero) block, which the next trim purges again whole.
    fill(&p, 128, 0x5a);
    // SAFETY: ours.
    unsafe { fx.free_pages(p.ptr, o(1)) };
    fx.check_invariants();
    assert_eq!(purged(&fx), 0, "a merge with a resident block is resident");
    assert_eq!(fx.zone_info(ZoneId::new(0)).zero_blocks[4], 0);
    assert_eq!(src.trim(), 1024);
    assert_eq!(purged(&fx), 16);
    fx.check_invariants();
}

#[test]
fn freeing_into_a_purged_buddy_gives_a_resident_block() {
    let fx = fx(1, P3);
    let src = Recorder::new(&fx);
    // Two order-3 buddies: the free one is purged; freeing the other
    // merges purged + resident = resident (trimmed again whole). (Two
    // purged buddies meet only when one is freed while a purge pass holds
    // the other: free buddies of one order are always merged.)
    let a = fx.alloc_pages(o(3), AllocFlags::NONE).unwrap();
    assert_eq!(src.trim(), 512);
    assert_eq!(purged(&fx), 8);
    // SAFETY: ours.
    unsafe { fx.free_pages(a.ptr, o(3)) };
    assert_eq!(purged(&fx), 0);
    assert_eq!(src.trim(), 1024);
    assert_eq!(purged(&fx), 16);
    // Split a purged block and put the piece back zeroed but resident:
    // the merge is resident again.
    let b = fx.alloc_pages(o(3), AllocFlags::ZEROED).unwrap();
    assert_eq!(purged(&fx), 8);
    // SAFETY: ours, still zero.
    unsafe { fx.free_pages_zeroed(b.ptr, o(3)) };
    assert_eq!(purged(&fx), 0);
    assert_eq!(fx.zone_info(ZoneId::new(0)).zero_blocks[4], 1, "still zero");
    fx.check_invariants();
}

#[test]
fn decay_purges_blocks_seen_free_for_the_decay_time() {
    let fx = fx(4, P3);
    let src = Recorder::new(&fx);
    let b = &fx.b;
    let purge = |p, n| src.purge(p, n);
    // First sighting: stamped, nothing purged.
    assert_eq!(b.decay_with(1000, purge), 0);
    assert_eq!(b.decay_with(1099, purge), 0, "not yet 100 ms");
    assert_eq!(b.decay_with(1100, purge), 4096);
    assert_eq!(purged(&fx), 64);
    fx.check_invariants();
    // A block freed (merged) anew is stamped anew.
    let p = fx.alloc_pages(o(4), AllocFlags::NONE).unwrap();
    fill(&p, 1024, 1);
    // SAFETY: ours.
    unsafe { fx.free_pages(p.ptr, o(4)) };
    assert_eq!(b.decay_with(5000, purge), 0);
    assert_eq!(b.decay_with(5050, purge), 0);
    assert_eq!(b.decay_with(5100, purge), 1024);
    fx.check_invariants();
}

#[test]
fn decay_keeps_the_retained_resident_pages() {
    let fx = fx(
        4,
        PurgePolicy {
            retain_pages: Some(16),
            ..P3
        },
    );
    let src = Recorder::new(&fx);
    let purge = |p, n| src.purge(p, n);
    assert_eq!(fx.decay_with(0, purge), 0);
    assert_eq!(fx.decay_with(200, purge), 3 * 1024, "one block kept");
    assert_eq!(purged(&fx), 48);
    // trim ignores the retained pages.
    assert_eq!(src.trim(), 1024);
    // No decay: decay_with does nothing.
    let fx = fx_no_decay();
    let src = Recorder::new(&fx);
    let purge = |p, n| src.purge(p, n);
    assert_eq!(fx.decay_with(0, purge), 0);
    assert_eq!(fx.decay_with(1 << 40, purge), 0);
    fx.check_invariants();
}

fn fx_no_decay() -> Fx {
    fx(
        2,
        PurgePolicy {
            decay_ms: None,
            ..P3
        },
    )
}

#[test]
fn a_refused_purge_stops_the_pass_and_changes_nothing() {
    let fx = fx(3, P3);
    let mut calls = 0;
    let n = fx.trim_with(|p, n| {
        calls += 1;
        // SAFETY: a free block the pass took off the lists.
        unsafe { p.as_ptr().write_bytes(0, n) };
        calls == 1
    });
    assert_eq!(n, 1024);
    assert_eq!(calls, 2);
    assert_eq!(purged(&fx), 16);
    assert_eq!(fx.zone_info(ZoneId::new(0)).zero_blocks[4], 1);
    assert_eq!(fx.zone_info(ZoneId::new(0)).free_blocks[4], 3);
    fx.check_invariants();
}

/// A block at or above the release order goes back at once when freed
/// through `free_or_release` (glibc's mmap threshold); smaller ones and
/// sources without a release order free as before; a bad free purges
/// nothing.
#[test]
fn free_or_release_purges_large_blocks_before_freeing_them() {
    use crate::FreeFlags;

    let fx = fx(
        2,
        PurgePolicy {
            release_order: Some(4),
            ..P3
        },
    );
    let src = Recorder::new(&fx);
    let big = fx.alloc_pages(o(4), AllocFlags::NONE).unwrap();
    let small = fx.alloc_pages(o(3), AllocFlags::NONE).unwrap();
    fill(&big, 1024, 0x5a);
    fill(&small, 512, 0x5a);
    let off = big.ptr.as_ptr() as usize - fx.arena.addr();
    // SAFETY: ours, order 4.
    unsafe { src.free_or_release(big.ptr, o(4), FreeFlags::NONE) }.unwrap();
    assert_eq!(src.log(), [(off, 1024)], "purged before it was freed");
    assert_eq!(fx.stat(Stat::PURGE), 1);
    assert_eq!(fx.stat(Stat::PURGED_BYTES), 1024);
    assert_eq!(purged(&fx), 16, "freed as purged");
    assert_eq!(fx.zone_info(ZoneId::new(0)).zero_blocks[4], 1, "and zero");
    fx.check_invariants();
    // Below the release order: freed as before.
    // SAFETY: ours, order 3.
    unsafe { src.free_or_release(small.ptr, o(3), FreeFlags::NONE) }.unwrap();
    assert_eq!(src.log().len(), 1);
    // A double free is refused before anything is purged.
    // SAFETY: a rejected free changes nothing.
    let e = unsafe { src.free_or_release(big.ptr, o(4), FreeFlags::NONE) };
    assert!(e.is_err());
    assert_eq!(src.log().len(), 1);
    fx.check_invariants();
    // Served again as known zero without clearing.
    let z = fx.alloc_pages(o(4), AllocFlags::ZEROED).unwrap();
    assert!(z.zero && reads(&z, 1024, 0));
    assert_eq!(fx.stat(Stat::BYTES_CLEARED), 0);
    // SAFETY: ours.
    unsafe { fx.free_pages(z.ptr, o(4)) };
    // No release order (the default): never purged at free.
    let fx = fx_no_decay();
    let src = Recorder::new(&fx);
    let big = fx.alloc_pages(o(4), AllocFlags::NONE).unwrap();
    // SAFETY: ours.
    unsafe { src.free_or_release(big.ptr, o(4), FreeFlags::NONE) }.unwrap();
    assert!(src.log().is_empty());
    assert_eq!(purged(&fx), 0);
    fx.check_invariants();
}

/// The decay scan's stamp (the free head's `data` word) does not reach the
/// next holder, whether its block is handed out whole, split, or merged
/// into a larger one first.
#[test]
fn decay_stamps_are_not_handed_out() {
    let fx = fx(4, P3);
    let src = Recorder::new(&fx);
    let purge = |p, n| src.purge(p, n);
    let data = |p: &crate::Page| {
        fx.owner_of(p.ptr.as_ptr())
            .unwrap()
            .owner
            .data()
            .load(core::sync::atomic::Ordering::Relaxed)
    };
    // Order-3 blocks (at the purge order) free and stamped; their buddies
    // held, so the stamped blocks stay apart.
    let p: Vec<crate::Page> = (0..8)
        .map(|_| fx.alloc_pages(o(3), AllocFlags::NONE).unwrap())
        .collect();
    // SAFETY: ours, freed once.
    unsafe {
        for q in p.iter().step_by(2) {
            fx.free_pages(q.ptr, o(3));
        }
    }
    assert_eq!(fx.decay_with(1000, purge), 0, "first sighting: stamped");
    fx.check_invariants();
    // Handed out whole, and split.
    let a = fx.alloc_pages(o(3), AllocFlags::NONE).unwrap();
    let b = fx.alloc_pages(o(2), AllocFlags::NONE).unwrap();
    assert_eq!((data(&a), data(&b)), (0, 0));
    // Merged: the held buddies come back, each stamped block merges into an
    // order-4 block, handed out whole.
    // SAFETY: ours, freed once.
    unsafe {
        for q in p.iter().skip(1).step_by(2) {
            fx.free_pages(q.ptr, o(3));
        }
    }
    fx.check_invariants();
    let c = fx.alloc_pages(o(4), AllocFlags::NONE).unwrap();
    assert_eq!(data(&c), 0);
    fx.check_invariants();
}

/// `resident_shift` raises the resident cap with the pages in use: with
/// 32 of 64 pages in use and 32 free ones resident, a fixed cap of 8
/// purges both free blocks, a cap raised to the pages in use (shift 0)
/// none, and one raised to half of them (shift 1) one of the two.
#[test]
fn the_resident_cap_grows_with_the_pages_in_use() {
    for (shift, left) in [(None, 0), (Some(0), 32), (Some(1), 16)] {
        let fx = fx(
            4,
            PurgePolicy {
                resident_shift: shift,
                ..P3
            },
        );
        let src = Recorder::new(&fx);
        let a = fx.alloc_pages(o(4), AllocFlags::NONE).unwrap();
        let b = fx.alloc_pages(o(4), AllocFlags::NONE).unwrap();
        let z = ZoneId::new(0);
        assert_eq!(fx.nr_resident_free_pages(z), 32);
        assert_eq!(fx.over_resident_cap(z, 8), left < 32, "{shift:?}");
        let bytes = fx.purge_to_with(8, |p, n| src.purge(p, n));
        assert_eq!(fx.nr_resident_free_pages(z), left, "{shift:?}");
        assert_eq!(bytes, (32 - left) * 64, "{shift:?}");
        assert!(!fx.over_resident_cap(z, 8));
        fx.check_invariants();
        // SAFETY: ours, order 4.
        unsafe {
            fx.free_pages(a.ptr, o(4));
            fx.free_pages(b.ptr, o(4));
        }
    }
}
