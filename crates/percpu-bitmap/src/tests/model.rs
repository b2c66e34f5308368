//! A proptest state machine: random operation sequences against a model
//! (the map of live allocations), with the invariant checker after every
//! step. Properties: no overlap, alignment honoured, zeroed in every unit,
//! contents preserved until free, sizes found from the boundary map, bad
//! frees refused, counters consistent, everything returned after draining.
//!
//! Bad-input mode (`state_machine_bad_input`, issue #14): the same machine
//! fed mostly misuse: double and ABA frees of any earlier area, interior,
//! misaligned, foreign (stack, host heap, another allocator's area) and
//! static-area frees, and requests of huge sizes and of alignments that are
//! zero, not powers of two or above a page. Each must be refused with the
//! right error, and leave the allocator intact (invariant checker, counters,
//! the model's live areas unchanged and their contents preserved).

use std::vec::Vec;

use local_lock::test_platform::TestPlatform;
use proptest::prelude::*;

use crate::{
    AllocFlags, Config, FreeErrorKind, HeapSource, PcpuAllocator, PcpuError, PcpuPtr,
    MAX_ALLOC_SIZE,
};

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        size: usize,
        align_shift: u32,
        atomic: bool,
        reserved: bool,
    },
    Free(usize),
    FreeInterior(usize, usize),
    DoubleFree,
    /// Frees an earlier freed area again (any of them: ABA).
    FreeStale(usize),
    /// Frees a pointer that is not this allocator's.
    FreeForeign(u8),
    /// Frees the static area.
    FreeStatic,
    /// A request with a size or alignment no allocation can have.
    AllocBad {
        size: usize,
        align: usize,
    },
    Balance,
    Interrupt {
        size: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        4 => 1usize..=16,
        3 => 1usize..=512,
        2 => 1usize..=4096,
        1 => 1usize..=MAX_ALLOC_SIZE,
        1 => prop_oneof![Just(0usize), Just(MAX_ALLOC_SIZE + 1)],
    ];
    prop_oneof![
        8 => (size, 0u32..14, any::<bool>(), prop::bool::weighted(0.15)).prop_map(|(size, align_shift, atomic, reserved)| Op::Alloc {
            size,
            align_shift,
            atomic: atomic && align_shift % 2 == 0,
            reserved
        }),
        6 => any::<usize>().prop_map(Op::Free),
        1 => (any::<usize>(), 1usize..64).prop_map(|(i, d)| Op::FreeInterior(i, d)),
        1 => Just(Op::DoubleFree),
        1 => Just(Op::Balance),
        1 => (1usize..256).prop_map(|size| Op::Interrupt { size }),
    ]
}

/// The bad-input mode's operations: mostly misuse, with enough valid
/// allocations and frees to give the misuse something to hit.
fn bad_op() -> impl Strategy<Value = Op> {
    let bad_size = prop_oneof![
        Just(usize::MAX),
        Just(usize::MAX / 2 + 1),
        Just(MAX_ALLOC_SIZE + 1),
        Just(1usize << 40),
        (MAX_ALLOC_SIZE + 1)..usize::MAX,
        Just(0usize),
    ];
    let bad_align = prop_oneof![
        Just(0usize),
        Just(3usize),
        Just(48usize),
        Just(4097usize),
        Just(8192usize),
        Just(usize::MAX),
        (1usize..100_000).prop_filter("not a power of two", |a| !a.is_power_of_two()),
    ];
    prop_oneof![
        4 => (1usize..=512, 0u32..8).prop_map(|(size, align_shift)| Op::Alloc {
            size,
            align_shift,
            atomic: false,
            reserved: false
        }),
        2 => any::<usize>().prop_map(Op::Free),
        2 => (any::<usize>(), 1usize..64).prop_map(|(i, d)| Op::FreeInterior(i, d)),
        2 => Just(Op::DoubleFree),
        3 => any::<usize>().prop_map(Op::FreeStale),
        2 => any::<u8>().prop_map(Op::FreeForeign),
        1 => Just(Op::FreeStatic),
        2 => (bad_size, 1usize..=4096).prop_map(|(size, align)| Op::AllocBad { size, align: align.next_power_of_two() }),
        2 => (1usize..=4096, bad_align).prop_map(|(size, align)| Op::AllocBad { size, align }),
        1 => Just(Op::Balance),
    ]
}

struct Live {
    p: PcpuPtr,
    size: usize,
    seed: u8,
}

const UNITS: usize = 3;

/// Bytes of each area written and checked (all of it, but bounded under
/// miri to keep its run short).
fn span(l: &Live) -> usize {
    if cfg!(miri) {
        l.size.min(64)
    } else {
        l.size
    }
}

fn fill(a: &PcpuAllocator<TestPlatform, &HeapSource>, l: &Live) {
    for cpu in 0..UNITS {
        let q = a.per_cpu_ptr(l.p, cpu).as_ptr();
        for i in 0..span(l) {
            // SAFETY: live area of `size` bytes in every unit.
            unsafe {
                q.add(i)
                    .write(l.seed ^ (cpu as u8).wrapping_mul(31) ^ i as u8)
            };
        }
    }
}

fn holds(a: &PcpuAllocator<TestPlatform, &HeapSource>, l: &Live, zero: bool) -> bool {
    (0..UNITS).all(|cpu| {
        let q = a.per_cpu_ptr(l.p, cpu).as_ptr();
        (0..span(l)).all(|i| {
            // SAFETY: as in `fill`.
            let v = unsafe { q.add(i).read() };
            v == if zero {
                0
            } else {
                l.seed ^ (cpu as u8).wrapping_mul(31) ^ i as u8
            }
        })
    })
}

/// A free of `p`, freed earlier (and not handed out again since), is
/// refused: as interior if a newer area covers it, else as not allocated
/// (or foreign, if `balance()` released its chunk); nothing changes.
fn stale_free_refused(
    a: &PcpuAllocator<TestPlatform, &HeapSource>,
    live: &[Live],
    p: PcpuPtr,
) -> Result<(), TestCaseError> {
    let inside = live
        .iter()
        .any(|l| l.p.addr() < p.addr() && p.addr() < l.p.addr() + l.size.next_multiple_of(4));
    let before = a.stats();
    let got = a.try_free(p).unwrap_err().kind;
    if inside {
        prop_assert_eq!(got, FreeErrorKind::Interior);
    } else {
        prop_assert!(
            got == FreeErrorKind::NotAllocated || got == FreeErrorKind::NotPercpu,
            "double free reported as {:?}",
            got
        );
    }
    prop_assert_eq!(a.stats().nr_dealloc, before.nr_dealloc);
    Ok(())
}

/// Another allocator with one live area (its pointer is foreign to ours).
fn other_allocator() -> (
    std::boxed::Box<PcpuAllocator<TestPlatform, HeapSource>>,
    PcpuPtr,
) {
    let o = std::boxed::Box::new(
        PcpuAllocator::new(
            TestPlatform::pinned(1),
            HeapSource::new(),
            Config::new(32 << 10),
        )
        .unwrap(),
    );
    let p = o.alloc(16, 4).unwrap();
    (o, p)
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let src = HeapSource::new();
    let a = PcpuAllocator::new(
        TestPlatform::pinned(UNITS),
        &src,
        Config::new(32 << 10)
            .units(UNITS)
            .first_chunk(256, 1024, 4096),
    )
    .unwrap();
    let tp = *a.platform();
    let mut live: Vec<Live> = Vec::new();
    let mut freed: Vec<PcpuPtr> = Vec::new();
    let mut seed = 0u8;

    for op in ops {
        match op {
            Op::Alloc {
                size,
                align_shift,
                atomic,
                reserved,
            } => {
                let align = 1usize << align_shift;
                let mut flags = AllocFlags::KERNEL;
                flags.set(AllocFlags::ATOMIC, atomic);
                flags.set(AllocFlags::RESERVED, reserved);
                let r = a.alloc_with(size, align, flags);
                match r {
                    Ok(p) => {
                        prop_assert!(size > 0 && size <= MAX_ALLOC_SIZE && align <= 4096);
                        prop_assert_eq!(p.addr() % align, 0, "alignment");
                        let rounded = size.next_multiple_of(4);
                        prop_assert_eq!(a.size_of(p), Ok(rounded));
                        for l in &live {
                            let disjoint = p.addr() + rounded <= l.p.addr()
                                || l.p.addr() + l.size.next_multiple_of(4) <= p.addr();
                            prop_assert!(disjoint, "overlap with a live area");
                        }
                        seed = seed.wrapping_add(1);
                        let l = Live { p, size, seed };
                        prop_assert!(holds(&a, &l, true), "not zeroed in every unit");
                        fill(&a, &l);
                        live.push(l);
                        freed.retain(|f| *f != p);
                    }
                    Err(PcpuError::ZeroSize) => prop_assert_eq!(size, 0),
                    Err(PcpuError::TooLarge { .. }) => prop_assert!(size > MAX_ALLOC_SIZE),
                    Err(PcpuError::BadAlign { .. }) => prop_assert!(align > 4096),
                    Err(PcpuError::ReservedExhausted) => prop_assert!(reserved),
                    Err(PcpuError::NoMemory) => {
                        prop_assert!(atomic, "blocking request failed with an unlimited source")
                    }
                    Err(e) => prop_assert!(false, "unexpected {:?}", e),
                }
            }
            Op::Free(i) if !live.is_empty() => {
                let l = live.swap_remove(i % live.len());
                prop_assert!(holds(&a, &l, false), "contents changed");
                prop_assert_eq!(a.try_free(l.p), Ok(l.size.next_multiple_of(4)));
                freed.push(l.p);
            }
            Op::FreeInterior(i, d) if !live.is_empty() => {
                let l = &live[i % live.len()];
                if d < l.size.next_multiple_of(4) {
                    let q = PcpuPtr::from_raw(
                        core::ptr::NonNull::new(l.p.as_ptr().as_ptr().wrapping_add(d)).unwrap(),
                    );
                    let e = a.try_free(q).unwrap_err();
                    let want = if d % 4 == 0 {
                        FreeErrorKind::Interior
                    } else {
                        FreeErrorKind::Misaligned
                    };
                    prop_assert_eq!(e.kind, want);
                }
            }
            Op::DoubleFree => {
                if let Some(&p) = freed.last() {
                    stale_free_refused(&a, &live, p)?;
                }
            }
            Op::FreeStale(i) if !freed.is_empty() => {
                stale_free_refused(&a, &live, freed[i % freed.len()])?;
            }
            Op::FreeForeign(k) => {
                let mut local = [0u32; 4];
                let boxed = std::boxed::Box::new([0u32; 4]);
                let other = other_allocator();
                let q = match k % 3 {
                    0 => core::ptr::NonNull::from(&mut local[(k as usize / 3) % 4]).cast(),
                    1 => core::ptr::NonNull::from(&*boxed).cast(),
                    _ => other.1.as_ptr(),
                };
                let before = a.stats();
                let e = a.try_free(PcpuPtr::from_raw(q)).unwrap_err();
                prop_assert_eq!(e.kind, FreeErrorKind::NotPercpu, "{}", e);
                prop_assert_eq!(a.stats().nr_dealloc, before.nr_dealloc);
                other.0.free(other.1);
            }
            Op::FreeStatic => {
                let (s, _) = a.static_area().unwrap();
                prop_assert_eq!(a.try_free(s).unwrap_err().kind, FreeErrorKind::Static);
            }
            Op::AllocBad { size, align } => {
                let before = a.stats();
                let r = a.alloc(size, align);
                let want = if size == 0 {
                    PcpuError::ZeroSize
                } else if size > MAX_ALLOC_SIZE {
                    PcpuError::TooLarge { size }
                } else {
                    PcpuError::BadAlign { align }
                };
                prop_assert_eq!(r, Err(want), "size {} align {}", size, align);
                prop_assert_eq!(a.stats().nr_alloc, before.nr_alloc);
            }
            Op::Balance => a.balance(),
            Op::Interrupt { size } => {
                // From interrupt context: atomic whatever the caller asked.
                let chunks = a.stats().nr_chunks;
                let r = tp.interrupt(|| a.alloc(size, 4)).unwrap();
                prop_assert_eq!(a.stats().nr_chunks, chunks, "chunk created in an interrupt");
                if let Ok(p) = r {
                    seed = seed.wrapping_add(1);
                    let l = Live { p, size, seed };
                    prop_assert!(holds(&a, &l, true));
                    fill(&a, &l);
                    live.push(l);
                    freed.retain(|f| *f != p);
                }
            }
            _ => {}
        }
        a.check_invariants();
        let s = a.stats();
        prop_assert_eq!(s.nr_cur_alloc as usize, live.len());
        prop_assert_eq!(s.nr_alloc - s.nr_dealloc, s.nr_cur_alloc);
    }

    // Drain: everything comes back.
    for l in live.drain(..) {
        prop_assert!(holds(&a, &l, false));
        a.free(l.p);
    }
    a.balance();
    a.balance();
    a.check_invariants();
    let s = a.stats();
    prop_assert_eq!(s.nr_cur_alloc, 0);
    prop_assert!(s.nr_chunks <= 1, "{} chunks left", s.nr_chunks);
    drop(a);
    prop_assert_eq!(src.pages_in_use(), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 3 } else { 48 },
        max_shrink_iters: if cfg!(miri) { 0 } else { 2000 },
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn state_machine(ops in prop::collection::vec(op(), 1..if cfg!(miri) { 30 } else { 160 })) {
        run(ops)?;
    }

    #[test]
    fn state_machine_bad_input(ops in prop::collection::vec(bad_op(), 1..if cfg!(miri) { 30 } else { 160 })) {
        run(ops)?;
    }
}
