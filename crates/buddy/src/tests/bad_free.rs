//! Bad frees: each is caught by the descriptor check, reported with the
//! address and the problem, and leaves the allocator intact.

use std::format;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::string::String;
use std::vec::Vec;

use local_lock::Platform;

use super::{fill, o, Fx};
use crate::{AllocFlags, FreeErrorKind, FreeFlags, Order, Page, ZoneId};

/// Runs a bad free, checks the panic message names the address and the
/// problem, and that nothing changed.
fn rejected(fx: &Fx, addr: usize, what: &str, f: impl FnOnce()) {
    let before = format!("{}{}", **fx, fx.zoneinfo());
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("bad free accepted");
    let msg = err
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| String::from(*s)))
        .unwrap();
    assert!(
        msg.contains(&format!("buddy: bad free of {addr:#x}")),
        "message {msg:?} does not name {addr:#x}"
    );
    assert!(msg.contains(what), "message {msg:?} does not say {what:?}");
    assert_eq!(
        format!("{}{}", **fx, fx.zoneinfo()),
        before,
        "state changed"
    );
    fx.check_invariants();
}

fn ptr(a: usize) -> NonNull<u8> {
    // An address only: the allocator never dereferences a rejected pointer.
    NonNull::new(std::ptr::without_provenance_mut(a)).unwrap()
}

#[test]
fn every_bad_free_is_caught_and_changes_nothing() {
    let fx = Fx::small(2);
    let big = fx.alloc_pages(o(3), AllocFlags::NONE).unwrap(); // pages 0..8
    let one = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap(); // page 8
    fill(&big, 512, 0x77);
    let b = big.addr();
    // SAFETY: each free below is rejected before it changes anything, except
    // the two real frees of blocks we hold.
    unsafe {
        // Not owned: an address of no span.
        let stack = 0u64;
        let a = &stack as *const u64 as usize & !63;
        rejected(&fx, a, "address not owned by this allocator", || {
            fx.free_pages(ptr(a), o(0))
        });
        // Misaligned: inside a page; and a page that cannot start an
        // order-3 block.
        rejected(&fx, b + 8, "misaligned", || fx.free_pages(ptr(b + 8), o(0)));
        rejected(&fx, b + 64, "misaligned", || {
            fx.free_pages(ptr(b + 64), o(3))
        });
        // Not a head: page 2 of the order-3 block.
        rejected(
            &fx,
            b + 128,
            &format!("not a block head: inside the allocated block at {b:#x} (order 3)"),
            || fx.free_pages(ptr(b + 128), o(0)),
        );
        // Wrong order.
        rejected(
            &fx,
            b,
            "wrong order: the block at this address is order 3",
            || fx.free_pages(big.ptr, o(2)),
        );
        // Order above max.
        rejected(&fx, b, "order above max_order", || {
            fx.free_pages(big.ptr, Order::new(9).unwrap())
        });
        // Double free: free `one`, then again (its buddy page 9 is free, so
        // it merged: the second free finds it inside a free block).
        fx.free_pages(one.ptr, o(0));
        let a1 = one.addr();
        rejected(&fx, a1, "double free: already in the free block at", || {
            fx.free_pages(one.ptr, o(0))
        });
        // A never-allocated page inside a free block.
        let a2 = b + 64 * 20;
        rejected(&fx, a2, "double free", || fx.free_pages(ptr(a2), o(0)));
        // Freed "still zero" but written: caught in checked builds.
        rejected(&fx, b, "freed as zero but does not read as zero", || {
            fx.free_pages_zeroed(big.ptr, o(3))
        });
        // The real free still works.
        fx.free_pages(big.ptr, o(3));
    }
    fx.check_invariants();
    assert_eq!(fx.info(), [0, 0, 0, 0, 2]);
}

#[test]
fn double_free_of_an_unmerged_head() {
    let fx = Fx::small(1);
    let a = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    let b = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    // SAFETY: ours; the second free is rejected.
    unsafe {
        fx.free_pages(a.ptr, o(0)); // buddy b busy: stays a FREE head
        let e = fx.try_free_pages(a.ptr, o(0), FreeFlags::NONE).unwrap_err();
        assert_eq!(
            e.kind,
            FreeErrorKind::DoubleFree {
                block: a.addr(),
                order: o(0)
            }
        );
        fx.free_pages(b.ptr, o(0));
    }
    fx.check_invariants();
}

#[test]
fn not_allocated_memmap_and_hole_pages() {
    // A carved memmap: its pages are managed by no one.
    let cfg = crate::Config::new(256, 3).with_tunables(crate::Tunables::NO_MIN);
    let arena = super::Arena::new(4 * 2048, 2048, true);
    let b = crate::Buddy::new(local_lock::test_platform::TestPlatform::pinned(1), cfg);
    // SAFETY: the arena outlives `b`.
    unsafe { b.add_region(arena.ptr, arena.len(), true) }.unwrap();
    // SAFETY: rejected.
    let e = unsafe { b.try_free_pages(NonNull::new(arena.ptr).unwrap(), o(0), FreeFlags::NONE) }
        .unwrap_err();
    assert_eq!(e.kind, FreeErrorKind::NotAllocated);
    assert!(format!("{e}").contains("not allocated: no allocated block contains this address"));
    b.check_invariants();
}

#[test]
#[should_panic(expected = "address not owned by this allocator")]
fn panics_not_owned() {
    let fx = Fx::small(1);
    // SAFETY: rejected (a page-aligned address no heap arena contains).
    unsafe {
        fx.free_pages(
            NonNull::new(std::ptr::without_provenance_mut(0x10000)).unwrap(),
            o(0),
        )
    };
}

#[test]
#[should_panic(expected = "misaligned")]
fn panics_misaligned() {
    let fx = Fx::small(1);
    let p = fx.alloc_pages(o(1), AllocFlags::NONE).unwrap();
    // SAFETY: rejected.
    unsafe { fx.free_pages(NonNull::new(p.ptr.as_ptr().wrapping_add(1)).unwrap(), o(1)) };
}

#[test]
#[should_panic(expected = "not a block head")]
fn panics_not_head() {
    let fx = Fx::small(1);
    let p = fx.alloc_pages(o(1), AllocFlags::NONE).unwrap();
    // SAFETY: rejected.
    unsafe { fx.free_pages(NonNull::new(p.ptr.as_ptr().wrapping_add(64)).unwrap(), o(0)) };
}

#[test]
#[should_panic(expected = "wrong order")]
fn panics_wrong_order() {
    let fx = Fx::small(1);
    let p = fx.alloc_pages(o(1), AllocFlags::NONE).unwrap();
    // SAFETY: rejected.
    unsafe { fx.free_pages(p.ptr, o(0)) };
}

#[test]
#[should_panic(expected = "double free")]
fn panics_double_free() {
    let fx = Fx::small(1);
    let p = fx.alloc_pages(o(1), AllocFlags::NONE).unwrap();
    // SAFETY: the second free is rejected.
    unsafe {
        fx.free_pages(p.ptr, o(1));
        fx.free_pages(p.ptr, o(1));
    }
}

#[test]
fn bulk_free_stops_at_the_first_bad_block() {
    let fx = Fx::small(1);
    let z = ZoneId::new(0);
    let p: Vec<Page> = (0..3)
        .map(|_| fx.alloc_pages(o(0), AllocFlags::NONE).unwrap())
        .collect();
    let bad = Page {
        ptr: NonNull::new(p[2].ptr.as_ptr().wrapping_add(3)).unwrap(),
        ..p[2]
    };
    // SAFETY: p[0] is ours; `bad` is rejected, p[1] is not reached.
    let e = unsafe { fx.try_free_bulk(z, [p[0], bad, p[1]]) }.unwrap_err();
    assert_eq!(e.kind, FreeErrorKind::Misaligned);
    assert_eq!(e.addr, bad.addr());
    fx.check_invariants();
    // The panicking form releases the lock (and restores IRQs) first.
    let err = catch_unwind(AssertUnwindSafe(|| unsafe {
        // SAFETY: rejected at once.
        fx.free_bulk(z, [bad])
    }));
    assert!(err.is_err());
    assert!(
        !fx.platform().irqs_disabled(),
        "IRQs restored before the panic"
    );
    // p[0] was freed before the bad block, p[1] and p[2] are still ours.
    // SAFETY: ours.
    let e = unsafe { fx.try_free_bulk(z, [p[0]]) }.unwrap_err();
    assert!(matches!(e.kind, FreeErrorKind::DoubleFree { .. }));
    // SAFETY: ours.
    unsafe { fx.free_bulk(z, [p[1], p[2]]) };
    fx.check_invariants();
    assert_eq!(fx.info(), [0, 0, 0, 0, 1]);
}

#[test]
fn bulk_free_rejects_another_zone() {
    let block = 1024;
    let fx = Fx::build(block, 2, false, |base| {
        crate::Config::new(64, 4)
            .with_zones(&[
                crate::ZoneSpec {
                    name: "Low",
                    end: base + block,
                },
                crate::ZoneSpec {
                    name: "High",
                    end: 0,
                },
            ])
            .with_tunables(crate::Tunables::NO_MIN)
    });
    let hi = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    assert_eq!(fx.zone_of(hi.ptr.as_ptr()), Some(ZoneId::new(1)));
    rejected(
        &fx,
        hi.addr(),
        "wrong zone: block in zone 1 freed in bulk to zone 0",
        || unsafe {
            // SAFETY: rejected.
            let _ = fx.free_bulk(ZoneId::new(0), [hi]);
        },
    );
    // SAFETY: ours.
    unsafe { fx.free_bulk(ZoneId::new(1), [hi]) };
    fx.check_invariants();
}
