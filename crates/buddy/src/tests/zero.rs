//! Known-zero pages (PG_zero): marking, splitting, merging, zeroed
//! requests, only-zero requests, statistics.

use super::{fill, o, reads, Fx};
use crate::{AllocFlags, Config, Stat, Tunables, ZoneId};

fn zi(fx: &Fx) -> crate::ZoneInfo {
    fx.zone_info(ZoneId::new(0))
}

#[test]
fn fresh_zeroed_memory_serves_zeroed_requests_without_clearing() {
    let fx = Fx::small(1);
    assert_eq!(zi(&fx).zero_blocks[4], 1, "zeroed region marked PG_zero");
    let p = fx.alloc_pages(o(2), AllocFlags::ZEROED).unwrap();
    assert!(p.zero);
    assert!(reads(&p, 256, 0));
    assert_eq!(fx.stat(Stat::ZEROED_REQUEST), 1);
    assert_eq!(fx.stat(Stat::ZEROED_NO_CLEAR), 1);
    assert_eq!(fx.stat(Stat::BYTES_CLEARED), 0);
    // The split halves kept PG_zero.
    let i = zi(&fx);
    assert_eq!(&i.zero_blocks[..5], &[0, 0, 1, 1, 0]);
    assert_eq!(&i.free_blocks[..5], &[0, 0, 1, 1, 0]);
}

#[test]
fn dirty_memory_is_cleared_for_zeroed_requests() {
    let fx = Fx::with(Config::new(64, 4).with_tunables(Tunables::NO_MIN), 1, true);
    assert_eq!(zi(&fx).zero_blocks[4], 0, "dirty region not marked zero");
    let p = fx.alloc_pages(o(3), AllocFlags::NONE).unwrap();
    assert!(!p.zero);
    assert!(reads(&p, 512, 0xAA), "a plain request is not cleared");
    let q = fx.alloc_pages(o(3), AllocFlags::ZEROED).unwrap();
    assert!(q.zero && reads(&q, 512, 0));
    assert_eq!(fx.stat(Stat::ZEROED_CLEARED), 1);
    assert_eq!(fx.stat(Stat::BYTES_CLEARED), 512);
    // Returned still zero: the next zeroed request skips the clearing.
    // SAFETY: ours, and it reads as zero.
    unsafe { fx.free_pages_zeroed(q.ptr, o(3)) };
    assert_eq!(zi(&fx).zero_blocks[3], 1);
    let r = fx.alloc_pages(o(3), AllocFlags::ZEROED).unwrap();
    assert_eq!(r.ptr, q.ptr);
    assert_eq!(fx.stat(Stat::ZEROED_NO_CLEAR), 1);
    assert_eq!(fx.stat(Stat::BYTES_CLEARED), 512);
    assert_eq!(fx.stat(Stat::FREE_ZERO), 1);
    // A plain free of a written block loses PG_zero.
    fill(&r, 512, 1);
    // SAFETY: ours.
    unsafe {
        fx.free_pages(r.ptr, o(3));
        fx.free_pages(p.ptr, o(3));
    }
    assert_eq!(zi(&fx).zero_blocks[4], 0);
    fx.check_invariants();
}

/// A merge is zero only when both halves are; a half-zero block clears
/// only its other half; a half-zero block split for a smaller request
/// serves the zero half without clearing.
#[test]
fn merge_keeps_zero_only_when_both_halves_are() {
    let fx = Fx::with(Config::new(64, 1).with_tunables(Tunables::NO_MIN), 1, false);
    let a = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    let b = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    assert!(a.zero && b.zero, "both halves of a zero block are zero");
    assert_eq!(fx.stat(Stat::ZERO_SPENT), 2);
    fill(&a, 64, 7);
    // SAFETY: ours; `b` was never written.
    unsafe {
        fx.free_pages(a.ptr, o(0));
        fx.free_pages_zeroed(b.ptr, o(0));
    }
    let i = zi(&fx);
    assert_eq!(
        (i.free_blocks[1], i.zero_blocks[1]),
        (1, 0),
        "lower half dirty: not zero"
    );
    fx.check_invariants();
    let c = fx.alloc_pages(o(1), AllocFlags::ZEROED).unwrap();
    assert!(reads(&c, 128, 0));
    assert_eq!(
        fx.stat(Stat::BYTES_CLEARED),
        64,
        "only the dirty half was cleared"
    );
    // A plain free of a written block carries no zero information: the
    // next zeroed request clears what it takes.
    // SAFETY: ours.
    unsafe { c.ptr.as_ptr().add(64).write_bytes(9, 64) };
    // SAFETY: ours.
    unsafe { fx.free_pages(c.ptr, o(1)) };
    let d = fx.alloc_pages(o(0), AllocFlags::ZEROED).unwrap();
    assert_eq!(
        fx.stat(Stat::BYTES_CLEARED),
        128,
        "plain free: nothing known zero"
    );
    // SAFETY: ours.
    unsafe { fx.free_pages(d.ptr, o(0)) };

    // Build lower-zero/upper-dirty through a merge, then split it.
    let x = fx.alloc_pages(o(0), AllocFlags::ZEROED).unwrap();
    let y = fx.alloc_pages(o(0), AllocFlags::ZEROED).unwrap();
    assert_eq!((fx.idx(&x), fx.idx(&y)), (0, 1));
    fill(&y, 64, 3);
    let before = fx.stat(Stat::BYTES_CLEARED);
    // SAFETY: ours; `x` reads as zero.
    unsafe {
        fx.free_pages_zeroed(x.ptr, o(0));
        fx.free_pages(y.ptr, o(0));
    }
    let z = fx.alloc_pages(o(0), AllocFlags::ZEROED).unwrap();
    assert_eq!(fx.idx(&z), 0);
    assert_eq!(
        fx.stat(Stat::BYTES_CLEARED),
        before,
        "lower half known zero: no clearing"
    );
    // The upper half went back without PG_zero.
    assert_eq!(zi(&fx).zero_blocks[0], 0);
    // SAFETY: ours.
    unsafe { fx.free_pages(z.ptr, o(0)) };
    fx.check_invariants();
}

/// Smallest fit comes first: a plain request takes a zero block of the
/// smallest order rather than split a larger dirty one; a zeroed request
/// with no zero block of its order or above clears a dirty one.
#[test]
fn smallest_fit_before_zero_preference() {
    let fx = Fx::with(Config::new(64, 1).with_tunables(Tunables::NO_MIN), 2, false);
    // Two zero order-1 blocks B0 (pages 0,1) and B1 (pages 2,3).
    let a = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap(); // page 0
    let b = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap(); // page 1
    let c = fx.alloc_pages(o(1), AllocFlags::NONE).unwrap(); // B1
    assert_eq!((fx.idx(&a), fx.idx(&b), fx.idx(&c)), (0, 1, 2));
    // SAFETY: ours; `b` and `c` never written (but `c` freed plain).
    unsafe {
        fx.free_pages_zeroed(b.ptr, o(0)); // zero page 1, its buddy 0 held
        fx.free_pages(c.ptr, o(1)); // B1 back without PG_zero
    }
    let i = zi(&fx);
    assert_eq!((i.free_blocks[0], i.zero_blocks[0]), (1, 1));
    assert_eq!((i.free_blocks[1], i.zero_blocks[1]), (1, 0));
    let r = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    assert_eq!(r.ptr, b.ptr, "order 0 has only the zero page: taken");
    assert!(r.zero);
    assert_eq!(fx.stat(Stat::ZERO_SPENT), 4);
    // SAFETY: ours, still zero.
    unsafe { fx.free_pages_zeroed(r.ptr, o(0)) };
    let z = fx.alloc_pages(o(1), AllocFlags::ZEROED).unwrap();
    assert_eq!(z.ptr, c.ptr, "no zero block of order >= 1: the dirty one");
    assert_eq!(fx.stat(Stat::BYTES_CLEARED), 128);
    // SAFETY: ours.
    unsafe {
        fx.free_pages(a.ptr, o(0)); // merges with the zero page 1: half zero
        fx.free_pages(z.ptr, o(1));
    }
    let i = zi(&fx);
    assert_eq!((i.free_blocks[1], i.zero_blocks[1]), (2, 0));
    fx.check_invariants();
}

#[test]
fn plain_request_leaves_zero_block_of_same_order() {
    let fx = Fx::with(Config::new(64, 2).with_tunables(Tunables::NO_MIN), 1, false);
    // Four pages: 0,1 dirty-free later, 2,3 zero-free later.
    let p: std::vec::Vec<_> = (0..4)
        .map(|_| fx.alloc_pages(o(0), AllocFlags::NONE).unwrap())
        .collect();
    fill(&p[0], 64, 1);
    // SAFETY: ours; p[3] never written.
    unsafe {
        fx.free_pages(p[0].ptr, o(0)); // dirty, buddy 1 held
        fx.free_pages_zeroed(p[3].ptr, o(0)); // zero, buddy 2 held
    }
    let i = zi(&fx);
    assert_eq!((i.free_blocks[0], i.zero_blocks[0]), (2, 1));
    let plain = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    assert_eq!(plain.ptr, p[0].ptr, "plain request prefers the dirty block");
    assert!(!plain.zero);
    // SAFETY: ours.
    unsafe { fx.free_pages(plain.ptr, o(0)) };
    let zeroed = fx.alloc_pages(o(0), AllocFlags::ZEROED).unwrap();
    assert_eq!(
        zeroed.ptr, p[3].ptr,
        "zeroed request prefers the zero block"
    );
    assert_eq!(fx.stat(Stat::BYTES_CLEARED), 0);
    // SAFETY: ours.
    unsafe {
        fx.free_pages(zeroed.ptr, o(0));
        fx.free_pages(p[1].ptr, o(0));
        fx.free_pages(p[2].ptr, o(0));
    }
    assert_eq!(zi(&fx).free_blocks[2], 1);
    fx.check_invariants();
}

#[test]
fn only_zero_never_clears() {
    let fx = Fx::with(Config::new(64, 4).with_tunables(Tunables::NO_MIN), 1, true);
    assert!(fx.alloc_pages(o(0), AllocFlags::ONLY_ZERO).is_none());
    assert_eq!(fx.stat(Stat::ONLY_ZERO_FAIL), 1);
    let p = fx.alloc_pages(o(0), AllocFlags::ZEROED).unwrap();
    assert_eq!(fx.stat(Stat::BYTES_CLEARED), 64);
    let hold = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap(); // p's buddy
                                                                // SAFETY: ours, zero.
    unsafe { fx.free_pages_zeroed(p.ptr, o(0)) };
    let q = fx.alloc_pages(o(0), AllocFlags::ONLY_ZERO).unwrap();
    assert_eq!(q.ptr, p.ptr);
    assert!(q.zero && reads(&q, 64, 0));
    assert_eq!(fx.stat(Stat::BYTES_CLEARED), 64, "ONLY_ZERO did not clear");
    assert!(fx.alloc_pages(o(1), AllocFlags::ONLY_ZERO).is_none());
    // SAFETY: ours.
    unsafe {
        fx.free_pages(q.ptr, o(0));
        fx.free_pages(hold.ptr, o(0));
    }
    assert_eq!(zi(&fx).free_blocks[4], 1);
    fx.check_invariants();
}
