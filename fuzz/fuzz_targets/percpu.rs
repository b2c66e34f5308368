//! Differential fuzzing of the percpu bitmap allocator against a model (the
//! map of live areas), with the brute-force invariant checker (feature
//! `invariants`) after every operation: random geometries (units, unit
//! size, first chunk with static/reserved/dynamic regions or none), blocking
//! / atomic / reserved / interrupt-context requests of any size and
//! alignment (including invalid ones, which must be refused with the right
//! error), frees, interior / misaligned / double frees (which must be
//! refused with the right reason), balance runs, and a page budget so the
//! exhaustion paths run too. Checked: no overlap, alignment, zeroed in every
//! unit, contents preserved until free, sizes found from the boundary map,
//! counters, and every page returned when the allocator drops.
//!
//! Bad input (issue #14): ABA frees of any earlier area (`FreeStale`),
//! foreign pointers (stack, host heap, another allocator's area), frees of
//! the static area, and requests of huge sizes or of alignments that are
//! zero, not powers of two or above a page (`AllocBad`): each must be
//! refused with the right error and change nothing (the invariant checker
//! and the counters after every operation).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use percpu_bitmap::local_lock::test_platform::TestPlatform;
use percpu_bitmap::{
    AllocFlags, Config, FreeErrorKind, HeapSource, PcpuAllocator, PcpuError, PcpuPtr,
    MAX_ALLOC_SIZE, PAGE_SIZE,
};

#[derive(Arbitrary, Debug)]
struct Input {
    units: u8,
    big_units: bool,
    first: Option<(u16, u16, u16)>,
    page_budget: u16,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Alloc {
        size: u16,
        align_shift: u8,
        atomic: bool,
        reserved: bool,
    },
    Free {
        idx: u16,
    },
    FreeInside {
        idx: u16,
        delta: u16,
    },
    FreeAgain,
    FreeStale {
        idx: u16,
    },
    FreeForeign {
        kind: u8,
    },
    FreeStatic,
    AllocBad {
        size: u64,
        align: u64,
        huge: bool,
    },
    Balance,
    Interrupt {
        size: u8,
    },
}

struct Live {
    p: PcpuPtr,
    size: usize,
    tag: u8,
}

fn fill(a: &PcpuAllocator<TestPlatform, &HeapSource>, l: &Live) {
    for cpu in 0..a.nr_units() {
        let q = a.per_cpu_ptr(l.p, cpu).as_ptr();
        // SAFETY: a live area of `size` bytes in every unit.
        unsafe { core::ptr::write_bytes(q, l.tag ^ cpu as u8, l.size) };
    }
}

fn holds(a: &PcpuAllocator<TestPlatform, &HeapSource>, l: &Live, zero: bool) -> bool {
    (0..a.nr_units()).all(|cpu| {
        let q = a.per_cpu_ptr(l.p, cpu).as_ptr();
        let want = if zero { 0 } else { l.tag ^ cpu as u8 };
        // SAFETY: as in `fill`.
        (0..l.size).all(|i| unsafe { *q.add(i) } == want)
    })
}

/// A free of `p`, freed earlier (and not handed out again since), is
/// refused: as interior if a newer area covers it, else as not allocated
/// (or foreign, if `balance()` released its chunk); nothing changes.
fn stale_free_refused(a: &PcpuAllocator<TestPlatform, &HeapSource>, live: &[Live], p: PcpuPtr) {
    let inside = live
        .iter()
        .any(|l| l.p.addr() < p.addr() && p.addr() < l.p.addr() + l.size.next_multiple_of(4));
    let before = a.stats().nr_dealloc;
    let got = a.try_free(p).unwrap_err().kind;
    if inside {
        assert_eq!(got, FreeErrorKind::Interior);
    } else {
        assert!(
            got == FreeErrorKind::NotAllocated || got == FreeErrorKind::NotPercpu,
            "double free reported as {got:?}"
        );
    }
    assert_eq!(a.stats().nr_dealloc, before);
}

fuzz_target!(|input: Input| {
    let units = 1 + (input.units % 4) as usize;
    let unit = if input.big_units { 64 << 10 } else { 32 << 10 };
    let mut cfg = Config::new(unit).units(units);
    if let Some((s, r, d)) = input.first {
        let (s, r, d) = (s as usize % 4096, r as usize % 8192, 4 + d as usize % 8192);
        cfg = cfg.first_chunk(s, r, d);
    }
    let src = HeapSource::with_limit(64 + input.page_budget as usize % 512);
    let Ok(a) = PcpuAllocator::new(TestPlatform::pinned(units), &src, cfg) else {
        return;
    };
    let tp = *a.platform();
    let mut live: Vec<Live> = Vec::new();
    let mut freed: Vec<PcpuPtr> = Vec::new();
    let mut tag = 0u8;
    let rounded = |s: usize| s.next_multiple_of(4);

    for op in input.ops.iter().take(300).copied() {
        match op {
            Op::Alloc {
                size,
                align_shift,
                atomic,
                reserved,
            } => {
                let size = size as usize;
                let align = 1usize << (align_shift % 16);
                let mut flags = AllocFlags::KERNEL;
                flags.set(AllocFlags::ATOMIC, atomic);
                flags.set(AllocFlags::RESERVED, reserved);
                let r = a.alloc_with(size, align, flags);
                match r {
                    Ok(p) => {
                        assert!(size > 0 && size <= MAX_ALLOC_SIZE && align <= PAGE_SIZE);
                        assert_eq!(p.addr() % align, 0);
                        assert_eq!(a.size_of(p), Ok(rounded(size)));
                        for l in &live {
                            assert!(
                                p.addr() + rounded(size) <= l.p.addr()
                                    || l.p.addr() + rounded(l.size) <= p.addr(),
                                "overlap"
                            );
                        }
                        tag = tag.wrapping_add(1);
                        let l = Live { p, size, tag };
                        assert!(holds(&a, &l, true), "not zeroed");
                        fill(&a, &l);
                        live.push(l);
                        freed.retain(|f| *f != p);
                    }
                    Err(PcpuError::ZeroSize) => assert_eq!(size, 0),
                    Err(PcpuError::TooLarge { .. }) => assert!(size > MAX_ALLOC_SIZE),
                    Err(PcpuError::BadAlign { .. }) => assert!(align > PAGE_SIZE),
                    Err(PcpuError::ReservedExhausted) => assert!(reserved),
                    // Atomic misses, or the page budget is spent.
                    Err(PcpuError::NoMemory) => {}
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }
            Op::Free { idx } if !live.is_empty() => {
                let l = live.swap_remove(idx as usize % live.len());
                assert!(holds(&a, &l, false), "contents changed");
                assert_eq!(a.try_free(l.p), Ok(rounded(l.size)));
                freed.push(l.p);
            }
            Op::FreeInside { idx, delta } if !live.is_empty() => {
                let l = &live[idx as usize % live.len()];
                let d = 1 + delta as usize % rounded(l.size);
                if d < rounded(l.size) {
                    let q = PcpuPtr::from_raw(
                        core::ptr::NonNull::new(l.p.as_ptr().as_ptr().wrapping_add(d)).unwrap(),
                    );
                    let want = if d % 4 == 0 {
                        FreeErrorKind::Interior
                    } else {
                        FreeErrorKind::Misaligned
                    };
                    assert_eq!(a.try_free(q).unwrap_err().kind, want);
                }
            }
            Op::FreeAgain => {
                if let Some(&p) = freed.last() {
                    stale_free_refused(&a, &live, p);
                }
            }
            Op::FreeStale { idx } if !freed.is_empty() => {
                stale_free_refused(&a, &live, freed[idx as usize % freed.len()]);
            }
            Op::FreeForeign { kind } => {
                let mut local = [0u32; 4];
                let boxed = Box::new([0u32; 4]);
                let other_src = HeapSource::new();
                let other =
                    PcpuAllocator::new(TestPlatform::pinned(1), &other_src, Config::new(32 << 10))
                        .unwrap();
                let op = other.alloc(16, 4).unwrap();
                let q = match kind % 3 {
                    0 => core::ptr::NonNull::from(&mut local[(kind as usize / 3) % 4]).cast(),
                    1 => core::ptr::NonNull::from(&*boxed).cast(),
                    _ => op.as_ptr(),
                };
                let before = a.stats().nr_dealloc;
                let e = a.try_free(PcpuPtr::from_raw(q)).unwrap_err();
                assert_eq!(e.kind, FreeErrorKind::NotPercpu, "{e}");
                assert_eq!(a.stats().nr_dealloc, before);
                other.free(op);
            }
            Op::FreeStatic => {
                if let Some((s, _)) = a.static_area() {
                    assert_eq!(a.try_free(s).unwrap_err().kind, FreeErrorKind::Static);
                }
            }
            Op::AllocBad { size, align, huge } => {
                // Huge sizes (beyond the largest request) or alignments no
                // area can have (0, not a power of two, above a page).
                let (size, align) = if huge {
                    (
                        MAX_ALLOC_SIZE + 1 + (size as usize % (usize::MAX - MAX_ALLOC_SIZE)),
                        1usize << (align % 13),
                    )
                } else {
                    let a = align as usize;
                    let a = if a.is_power_of_two() && a <= PAGE_SIZE {
                        a.wrapping_mul(3)
                    } else {
                        a
                    };
                    (1 + size as usize % MAX_ALLOC_SIZE, a)
                };
                let before = a.stats().nr_alloc;
                let want = if size > MAX_ALLOC_SIZE {
                    PcpuError::TooLarge { size }
                } else {
                    PcpuError::BadAlign { align }
                };
                assert_eq!(a.alloc(size, align), Err(want), "size {size} align {align}");
                assert_eq!(a.stats().nr_alloc, before);
            }
            Op::Balance => a.balance(),
            Op::Interrupt { size } => {
                let chunks = a.stats().nr_chunks;
                let r = tp.interrupt(|| a.alloc(1 + size as usize, 4)).unwrap();
                assert_eq!(a.stats().nr_chunks, chunks, "chunk created in an interrupt");
                if let Ok(p) = r {
                    tag = tag.wrapping_add(1);
                    let l = Live {
                        p,
                        size: 1 + size as usize,
                        tag,
                    };
                    assert!(holds(&a, &l, true));
                    fill(&a, &l);
                    live.push(l);
                    freed.retain(|f| *f != p);
                }
            }
            _ => {}
        }
        a.check_invariants();
        let s = a.stats();
        assert_eq!(s.nr_cur_alloc as usize, live.len());
    }

    for l in live.drain(..) {
        assert!(holds(&a, &l, false));
        a.free(l.p);
    }
    a.balance();
    a.balance();
    a.check_invariants();
    assert_eq!(a.stats().nr_cur_alloc, 0);
    drop(a);
    assert_eq!(src.pages_in_use(), 0, "pages leaked");
});
