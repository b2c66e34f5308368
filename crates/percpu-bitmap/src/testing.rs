//! The test harness of the allocator (feature `testing`, or this crate's
//! tests): operations ([`Op`]) applied to a [`PcpuAllocator`] and to a
//! model (the list of live areas with the byte pattern written into each),
//! checked after every one. The proptest state machines
//! (`src/tests/model.rs`) and the cargo-fuzz target
//! (`fuzz/fuzz_targets/percpu.rs`, through [`fuzz`]) both drive it.
//!
//! Checked: no overlap, alignment honoured, zeroed in every unit, contents
//! preserved until free, sizes found from the boundary map, the outcome of
//! each request (an error only for the reason it names; out of memory only
//! for atomic requests unless the source has a page budget), no chunk
//! created in interrupt context, the counters, the invariant checker after
//! every operation, and at the end everything returned (at most one chunk
//! left after balancing, every page back in the source).
//!
//! Bad input (issue #14): double and ABA frees of any earlier area,
//! interior, misaligned, foreign (stack, host heap, another allocator's
//! area) and static-area frees, and requests of huge sizes and of
//! alignments that are zero, not powers of two or above a page. Each must
//! be refused with the right error and leave the allocator intact (invariant
//! checker, counters, the live areas and their contents unchanged).

#[cfg(feature = "arbitrary")]
pub mod fuzz;

use core::ptr::NonNull;
use std::boxed::Box;
use std::vec::Vec;

use local_lock::test_platform::TestPlatform;

use crate::error::{FreeErrorKind, PcpuError};
use crate::pcpu::{Config, PcpuAllocator};
use crate::source::HeapSource;
use crate::types::{AllocFlags, PcpuPtr, MAX_ALLOC_SIZE, PAGE_SIZE};

/// The shape of a harness run.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// Units (CPUs).
    pub units: usize,
    /// Bytes per unit of a chunk ([`Config::new`]).
    pub unit_size: usize,
    /// The first chunk's static, reserved and dynamic sizes
    /// ([`Config::first_chunk`]), or none.
    pub first_chunk: Option<(usize, usize, usize)>,
    /// The source's page budget ([`HeapSource::with_limit`]), or unlimited.
    pub page_limit: Option<usize>,
}

impl Setup {
    /// The chunk source of this setup; the harness borrows it so that
    /// [`Harness::finish`] can check that every page came back.
    pub fn source(&self) -> HeapSource {
        match self.page_limit {
            Some(n) => HeapSource::with_limit(n),
            None => HeapSource::new(),
        }
    }
}

/// One operation. Indices pick among the live (or freed) areas modulo their
/// number; an operation that needs an area when there is none does
/// nothing.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// `alloc_with(size, 1 << align_shift, flags)`.
    Alloc {
        /// Bytes requested.
        size: usize,
        /// Log2 of the alignment.
        align_shift: u32,
        /// `AllocFlags::ATOMIC`.
        atomic: bool,
        /// `AllocFlags::RESERVED`.
        reserved: bool,
    },
    /// Frees a live area (checking its contents first).
    Free(usize),
    /// Frees the address `1 + delta % size` bytes into a live area of
    /// (rounded) `size` bytes, when that is inside it: refused as interior
    /// or misaligned.
    FreeInterior(usize, usize),
    /// Frees the area freed last again.
    DoubleFree,
    /// Frees an earlier freed area again (any of them: ABA).
    FreeStale(usize),
    /// Frees a pointer that is not this allocator's (`k % 3`: the stack,
    /// the host heap, another allocator's area).
    FreeForeign(u8),
    /// Frees the static area.
    FreeStatic,
    /// A request with a size or alignment no allocation can have.
    AllocBad {
        /// Bytes requested.
        size: usize,
        /// Alignment requested.
        align: usize,
    },
    /// `balance()`.
    Balance,
    /// `alloc(size, 4)` from interrupt context.
    Interrupt {
        /// Bytes requested.
        size: usize,
    },
}

/// A live area of the model.
struct Live {
    p: PcpuPtr,
    size: usize,
    seed: u8,
}

/// The allocator under test (over a borrowed [`HeapSource`]) and the model.
pub struct Harness<'a> {
    a: PcpuAllocator<TestPlatform, &'a HeapSource>,
    src: &'a HeapSource,
    tp: TestPlatform,
    limited: bool,
    static_size: usize,
    live: Vec<Live>,
    freed: Vec<PcpuPtr>,
    seed: u8,
}

/// Bytes of each area written and checked (all of it, but bounded under
/// miri to keep its run short).
fn span(l: &Live) -> usize {
    if cfg!(miri) {
        l.size.min(64)
    } else {
        l.size
    }
}

fn rounded(size: usize) -> usize {
    size.next_multiple_of(4)
}

/// Another allocator with one live area (its pointer is foreign to ours).
fn other_allocator() -> (Box<PcpuAllocator<TestPlatform, HeapSource>>, PcpuPtr) {
    let o = Box::new(
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

impl<'a> Harness<'a> {
    /// An allocator of `setup` on `src` (from [`Setup::source`]), or `None`
    /// if the configuration is refused.
    pub fn new(src: &'a HeapSource, setup: Setup) -> Option<Harness<'a>> {
        let mut cfg = Config::new(setup.unit_size).units(setup.units);
        if let Some((s, r, d)) = setup.first_chunk {
            cfg = cfg.first_chunk(s, r, d);
        }
        let a = PcpuAllocator::new(TestPlatform::pinned(setup.units), src, cfg).ok()?;
        let tp = *a.platform();
        Some(Harness {
            a,
            src,
            tp,
            limited: setup.page_limit.is_some(),
            static_size: setup.first_chunk.map_or(0, |(s, _, _)| s),
            live: Vec::new(),
            freed: Vec::new(),
            seed: 0,
        })
    }

    /// The allocator under test.
    pub fn allocator(&self) -> &PcpuAllocator<TestPlatform, &'a HeapSource> {
        &self.a
    }

    fn fill(&self, l: &Live) {
        for cpu in 0..self.a.nr_units() {
            let q = self.a.per_cpu_ptr(l.p, cpu).as_ptr();
            for i in 0..span(l) {
                // SAFETY: live area of `size` bytes in every unit.
                unsafe {
                    q.add(i)
                        .write(l.seed ^ (cpu as u8).wrapping_mul(31) ^ i as u8)
                };
            }
        }
    }

    fn holds(&self, l: &Live, zero: bool) -> bool {
        (0..self.a.nr_units()).all(|cpu| {
            let q = self.a.per_cpu_ptr(l.p, cpu).as_ptr();
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

    /// A new area: zeroed in every unit, then filled with its pattern.
    fn took(&mut self, p: PcpuPtr, size: usize) {
        self.seed = self.seed.wrapping_add(1);
        let l = Live {
            p,
            size,
            seed: self.seed,
        };
        assert!(self.holds(&l, true), "not zeroed in every unit");
        self.fill(&l);
        self.live.push(l);
        self.freed.retain(|f| *f != p);
    }

    /// A free of `p`, freed earlier (and not handed out again since), is
    /// refused: as interior if a newer area covers it, else as not
    /// allocated (or foreign, if `balance()` released its chunk); nothing
    /// changes.
    fn stale_free_refused(&self, p: PcpuPtr) {
        let inside = self
            .live
            .iter()
            .any(|l| l.p.addr() < p.addr() && p.addr() < l.p.addr() + rounded(l.size));
        let before = self.a.stats();
        let got = self.a.try_free(p).unwrap_err().kind;
        if inside {
            assert_eq!(got, FreeErrorKind::Interior);
        } else {
            assert!(
                got == FreeErrorKind::NotAllocated || got == FreeErrorKind::NotPercpu,
                "double free reported as {got:?}"
            );
        }
        assert_eq!(self.a.stats().nr_dealloc, before.nr_dealloc);
    }

    /// Applies `op` to the allocator and the model, then checks both.
    pub fn apply(&mut self, op: &Op) {
        let a = &self.a;
        match *op {
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
                match a.alloc_with(size, align, flags) {
                    Ok(p) => {
                        assert!(size > 0 && size <= MAX_ALLOC_SIZE && align <= PAGE_SIZE);
                        assert_eq!(p.addr() % align, 0, "alignment");
                        assert_eq!(a.size_of(p), Ok(rounded(size)));
                        for l in &self.live {
                            let disjoint = p.addr() + rounded(size) <= l.p.addr()
                                || l.p.addr() + rounded(l.size) <= p.addr();
                            assert!(disjoint, "overlap with a live area");
                        }
                        self.took(p, size);
                    }
                    Err(PcpuError::ZeroSize) => assert_eq!(size, 0),
                    Err(PcpuError::TooLarge { .. }) => assert!(size > MAX_ALLOC_SIZE),
                    Err(PcpuError::BadAlign { .. }) => assert!(align > PAGE_SIZE),
                    Err(PcpuError::ReservedExhausted) => assert!(reserved),
                    // Atomic misses, or the page budget is spent.
                    Err(PcpuError::NoMemory) => assert!(
                        atomic || self.limited,
                        "blocking request failed with an unlimited source"
                    ),
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }
            Op::Free(i) if !self.live.is_empty() => {
                let n = self.live.len();
                let l = self.live.swap_remove(i % n);
                assert!(self.holds(&l, false), "contents changed");
                assert_eq!(self.a.try_free(l.p), Ok(rounded(l.size)));
                self.freed.push(l.p);
            }
            Op::FreeInterior(i, delta) if !self.live.is_empty() => {
                let l = &self.live[i % self.live.len()];
                let d = 1 + delta % rounded(l.size);
                if d < rounded(l.size) {
                    let q = PcpuPtr::from_raw(
                        NonNull::new(l.p.as_ptr().as_ptr().wrapping_add(d)).unwrap(),
                    );
                    let e = a.try_free(q).unwrap_err();
                    let want = if d.is_multiple_of(4) {
                        FreeErrorKind::Interior
                    } else {
                        FreeErrorKind::Misaligned
                    };
                    assert_eq!(e.kind, want);
                }
            }
            Op::DoubleFree => {
                if let Some(&p) = self.freed.last() {
                    self.stale_free_refused(p);
                }
            }
            Op::FreeStale(i) if !self.freed.is_empty() => {
                self.stale_free_refused(self.freed[i % self.freed.len()]);
            }
            Op::FreeForeign(k) => {
                let mut local = [0u32; 4];
                let boxed = Box::new([0u32; 4]);
                let other = other_allocator();
                let q = match k % 3 {
                    0 => NonNull::from(&mut local[(k as usize / 3) % 4]).cast(),
                    1 => NonNull::from(&*boxed).cast(),
                    _ => other.1.as_ptr(),
                };
                let before = a.stats();
                let e = a.try_free(PcpuPtr::from_raw(q)).unwrap_err();
                assert_eq!(e.kind, FreeErrorKind::NotPercpu, "{e}");
                assert_eq!(a.stats().nr_dealloc, before.nr_dealloc);
                other.0.free(other.1);
            }
            Op::FreeStatic => match a.static_area() {
                Some((s, _)) => {
                    assert_eq!(a.try_free(s).unwrap_err().kind, FreeErrorKind::Static)
                }
                None => assert_eq!(self.static_size, 0, "no static area"),
            },
            Op::AllocBad { size, align } => {
                let before = a.stats();
                let want = if size == 0 {
                    PcpuError::ZeroSize
                } else if size > MAX_ALLOC_SIZE {
                    PcpuError::TooLarge { size }
                } else {
                    PcpuError::BadAlign { align }
                };
                assert_eq!(a.alloc(size, align), Err(want), "size {size} align {align}");
                assert_eq!(a.stats().nr_alloc, before.nr_alloc);
            }
            Op::Balance => a.balance(),
            Op::Interrupt { size } => {
                // From interrupt context: atomic whatever the caller asked.
                let chunks = a.stats().nr_chunks;
                let r = self.tp.interrupt(|| a.alloc(size, 4)).unwrap();
                assert_eq!(a.stats().nr_chunks, chunks, "chunk created in an interrupt");
                if let Ok(p) = r {
                    self.took(p, size);
                }
            }
            _ => {}
        }
        self.a.check_invariants();
        let s = self.a.stats();
        assert_eq!(s.nr_cur_alloc as usize, self.live.len());
        assert_eq!(s.nr_alloc - s.nr_dealloc, s.nr_cur_alloc);
    }

    /// Frees every live area (checking its contents), balances, and checks
    /// that everything came back: no area counted, at most one chunk left,
    /// and once the allocator is dropped every page back in the source.
    pub fn finish(mut self) {
        for l in core::mem::take(&mut self.live) {
            assert!(self.holds(&l, false));
            self.a.free(l.p);
        }
        self.a.balance();
        self.a.balance();
        self.a.check_invariants();
        let s = self.a.stats();
        assert_eq!(s.nr_cur_alloc, 0);
        assert!(s.nr_chunks <= 1, "{} chunks left", s.nr_chunks);
        let src = self.src;
        drop(self);
        assert_eq!(src.pages_in_use(), 0, "pages leaked");
    }
}
