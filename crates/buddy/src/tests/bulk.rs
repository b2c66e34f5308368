//! rmqueue_bulk / free_pcppages_bulk: one zone-lock acquisition each.

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::vec::Vec;

use local_lock::test_platform::TestPlatform;
use local_lock::{IrqFlags, Platform, Strategy};

use super::{fill, o, Arena};
use crate::{AllocFlags, Buddy, Config, Page, Tunables, ZoneId};

/// The test platform, counting `irq_save` calls (one per zone-lock
/// acquisition).
struct Counting {
    inner: TestPlatform,
    saves: AtomicUsize,
}

// SAFETY: forwards to `TestPlatform`.
unsafe impl Platform for Counting {
    const HAS_IRQS: bool = true;
    fn nr_cpus(&self) -> usize {
        self.inner.nr_cpus()
    }
    fn current_cpu(&self) -> usize {
        self.inner.current_cpu()
    }
    fn in_interrupt(&self) -> bool {
        self.inner.in_interrupt()
    }
    fn irqs_disabled(&self) -> bool {
        self.inner.irqs_disabled()
    }
    fn irq_save(&self) -> IrqFlags {
        self.saves.fetch_add(1, Relaxed);
        self.inner.irq_save()
    }
    unsafe fn irq_restore(&self, flags: IrqFlags) {
        // SAFETY: forwarded.
        unsafe { self.inner.irq_restore(flags) }
    }
    fn irq_disable(&self) {
        self.inner.irq_disable()
    }
    unsafe fn irq_enable(&self) {
        // SAFETY: forwarded.
        unsafe { self.inner.irq_enable() }
    }
    fn preempt_disable(&self) {
        self.inner.preempt_disable()
    }
    unsafe fn preempt_enable(&self) {
        // SAFETY: forwarded.
        unsafe { self.inner.preempt_enable() }
    }
    fn default_strategy(&self) -> Strategy {
        self.inner.default_strategy()
    }
}

struct Setup {
    b: Buddy<Counting>,
    arena: Arena,
    _mm: Arena,
}

fn setup(blocks: usize, t: Tunables) -> Setup {
    let cfg = Config::new(64, 4).with_tunables(t);
    let block = cfg.max_block_size();
    let arena = Arena::new(blocks * block, block, true);
    let b = Buddy::new(
        Counting {
            inner: TestPlatform::pinned(1),
            saves: AtomicUsize::new(0),
        },
        cfg,
    );
    let mm = Arena::new(b.memmap_bytes(arena.len()), 64, true);
    // SAFETY: both arenas outlive `b`.
    unsafe {
        b.add_span(arena.ptr, arena.len(), mm.ptr, true).unwrap();
        b.add_region(arena.ptr, arena.len(), true).unwrap();
    }
    Setup { b, arena, _mm: mm }
}

fn saves(s: &Setup) -> usize {
    s.b.platform().saves.load(Relaxed)
}

#[test]
fn bulk_alloc_and_free_take_the_lock_once() {
    let s = setup(2, Tunables::NO_MIN);
    let z = ZoneId::new(0);
    let before = saves(&s);
    let mut got = Vec::new();
    let n = s.b.alloc_bulk(z, o(0), AllocFlags::NONE, 20, |p| {
        assert!(
            s.b.platform().irqs_disabled(),
            "sink runs under the zone lock, IRQs off"
        );
        got.push(p)
    });
    assert_eq!(
        saves(&s) - before,
        1,
        "one zone-lock acquisition for 20 blocks"
    );
    assert_eq!(n, 20);
    for (i, p) in got.iter().enumerate() {
        assert_eq!((p.addr() - s.arena.addr()) / 64, i, "address order");
        assert!(p.zero, "fresh memory: known zero");
    }
    // Dirty half of them, return all in one bulk free.
    for p in &got[..10] {
        fill(p, 64, 0x11);
    }
    let back: Vec<Page> = got
        .iter()
        .enumerate()
        .map(|(i, p)| Page {
            zero: i >= 10,
            ..*p
        })
        .collect();
    let before = saves(&s);
    // SAFETY: ours; the zero ones never written.
    let freed = unsafe { s.b.free_bulk_keep_zero(z, back) };
    assert_eq!(freed, 20);
    assert_eq!(
        saves(&s) - before,
        1,
        "one zone-lock acquisition for 20 frees"
    );
    s.b.check_invariants();
    let i = s.b.zone_info(z);
    assert_eq!(i.free_blocks[4], 2);
    assert_eq!(
        i.zero_blocks[4], 1,
        "the block with dirty pages lost PG_zero"
    );
}

#[test]
fn bulk_stops_at_empty_watermark_and_constraint() {
    let s = setup(1, Tunables::NO_MIN);
    let z = ZoneId::new(0);
    let mut got = Vec::new();
    assert_eq!(
        s.b.alloc_bulk(z, o(2), AllocFlags::NONE, 10, |p| got.push(p)),
        4
    );
    assert_eq!(
        s.b.alloc_bulk(z, o(0), AllocFlags::NONE, 10, |p| got.push(p)),
        0
    );
    // SAFETY: ours.
    unsafe { s.b.free_bulk(z, got.drain(..)) };
    // Zone above the constraint: nothing. Bad order: nothing.
    assert_eq!(
        s.b.alloc_bulk(z, o(5), AllocFlags::NONE, 10, |p| got.push(p)),
        0
    );
    // min_free_kbytes 1 = 16 pages of 64 B: the whole zone is reserve.
    s.b.set_tunables(Tunables {
        min_free_kbytes: Some(1),
        ..Tunables::KERNEL
    });
    assert_eq!(s.b.watermarks(z).min, 16);
    assert_eq!(
        s.b.alloc_bulk(z, o(0), AllocFlags::NONE, 10, |p| got.push(p)),
        0
    );
    assert_eq!(
        s.b.alloc_bulk(z, o(0), AllocFlags::HIGH, 10, |p| got.push(p)),
        8
    );
    // SAFETY: ours.
    unsafe { s.b.free_bulk(z, got.drain(..)) };
    s.b.check_invariants();
}

#[test]
fn bulk_only_zero_and_zero_preference() {
    let s = setup(1, Tunables::NO_MIN);
    let z = ZoneId::new(0);
    // Make pages 0..8 dirty-free and 8..16 zero-free (order 3 blocks).
    let mut got = Vec::new();
    s.b.alloc_bulk(z, o(3), AllocFlags::NONE, 2, |p| got.push(p));
    fill(&got[0], 512, 5);
    // SAFETY: ours; got[1] never written.
    unsafe {
        s.b.free_bulk_keep_zero(
            z,
            [
                Page {
                    zero: false,
                    ..got[0]
                },
                Page {
                    zero: true,
                    ..got[1]
                },
            ],
        )
    };
    // They merged: order 4, half zero (upper). Split again by taking order
    // 3 with ZEROED preference: the dirty list gives the lower half first
    // (no zero block of order >= 3), the upper stays zero.
    let i = s.b.zone_info(z);
    assert_eq!((i.free_blocks[4], i.zero_blocks[4]), (1, 0));
    let mut only = Vec::new();
    assert_eq!(
        s.b.alloc_bulk(z, o(0), AllocFlags::ONLY_ZERO, 4, |p| only.push(p)),
        0
    );
    let mut lo = Vec::new();
    assert_eq!(
        s.b.alloc_bulk(z, o(3), AllocFlags::NONE, 1, |p| lo.push(p)),
        1
    );
    assert!(!lo[0].zero);
    assert_eq!(
        s.b.alloc_bulk(z, o(0), AllocFlags::ONLY_ZERO, 4, |p| only.push(p)),
        4
    );
    assert!(only.iter().all(|p| p.zero));
    // SAFETY: ours.
    unsafe {
        s.b.free_bulk(z, only.iter().copied());
        s.b.free_bulk(z, lo.iter().copied());
    }
    s.b.check_invariants();
    assert_eq!(s.b.zone_info(z).free_blocks[4], 1);
}
