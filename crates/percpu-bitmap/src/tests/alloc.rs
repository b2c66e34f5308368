//! The allocator: regions of the first chunk, requests and errors,
//! population, balancing, isolation, bad frees, groups, interrupt context.

use std::vec::Vec;

use local_lock::test_platform::TestPlatform;

use super::Rng;
use crate::chunk::{Chunk, ChunkKind};
use crate::pcpu::size_to_slot_raw;
use crate::{
    AllocFlags, Config, FreeErrorKind, HeapSource, PcpuAllocator, PcpuError, PcpuPtr,
    DEPOPULATE_POISON, MAX_ALLOC_SIZE, PAGE_SIZE,
};

type A<'s> = PcpuAllocator<TestPlatform, &'s HeapSource>;

const UNIT: usize = 32 << 10;

/// 4 units of 32 KiB; first chunk: 1 KiB static, 2 KiB reserved, 8 KiB dynamic.
fn with_first(src: &HeapSource) -> A<'_> {
    PcpuAllocator::new(
        TestPlatform::pinned(4),
        src,
        Config::new(UNIT).units(4).first_chunk(1000, 2048, 8192),
    )
    .unwrap()
}

/// 2 units of 32 KiB, no first chunk.
fn dynamic_only(src: &HeapSource) -> A<'_> {
    PcpuAllocator::new(TestPlatform::pinned(2), src, Config::new(UNIT).units(2)).unwrap()
}

fn fill(a: &A<'_>, p: PcpuPtr, size: usize, seed: u8) {
    let size = if cfg!(miri) { size.min(256) } else { size };
    for cpu in 0..a.nr_units() {
        let q = a.per_cpu_ptr(p, cpu).as_ptr();
        for i in 0..size {
            // SAFETY: the area is `size` bytes in every unit and live.
            unsafe { q.add(i).write(seed ^ cpu as u8 ^ i as u8) };
        }
    }
}

fn verify(a: &A<'_>, p: PcpuPtr, size: usize, seed: Option<u8>) {
    let size = if cfg!(miri) { size.min(256) } else { size };
    for cpu in 0..a.nr_units() {
        let q = a.per_cpu_ptr(p, cpu).as_ptr();
        for i in 0..size {
            // SAFETY: as in `fill`.
            let v = unsafe { q.add(i).read() };
            let want = seed.map_or(0, |s| s ^ cpu as u8 ^ i as u8);
            assert_eq!(v, want, "cpu {cpu} byte {i}");
        }
    }
}

/// Kinds and list slots of every listed chunk.
fn listed(a: &A<'_>) -> Vec<(usize, ChunkKind)> {
    let g = a.lock_data();
    let mut v = Vec::new();
    for (slot, l) in g.slots.iter().enumerate() {
        let mut c = l.head;
        while !c.is_null() {
            // SAFETY: lock held; list chunks are live.
            unsafe {
                v.push((slot, (*c).kind));
                c = (*c).next;
            }
        }
    }
    v
}

#[test]
fn first_chunk_regions() {
    let src = HeapSource::new();
    let a = with_first(&src);
    a.check_invariants();
    let (stat, ssize) = a.static_area().unwrap();
    assert_eq!(ssize, 1000);

    // Reserved requests come from [static, static + reserved).
    let r = a.alloc_reserved(100, 4).unwrap();
    let off = r.addr() - stat.addr();
    assert!((1000..1000 + 2048).contains(&off), "reserved at {off}");
    // Normal requests come from the dynamic region first.
    let d = a.alloc(100, 4).unwrap();
    let off = d.addr() - stat.addr();
    assert!((3048..3048 + 8192).contains(&off), "dynamic at {off}");
    a.check_invariants();

    // The reserved chunk is exhausted without touching the others.
    let mut rs = Vec::new();
    loop {
        match a.alloc_reserved(256, 4) {
            Ok(p) => rs.push(p),
            Err(e) => {
                assert_eq!(e, PcpuError::ReservedExhausted);
                break;
            }
        }
    }
    assert!(
        rs.len() >= 6 && rs.len() <= 8,
        "{} reserved blocks",
        rs.len()
    );
    a.check_invariants();
    for p in rs {
        a.free(p);
    }
    a.free(r);
    a.free(d);
    a.check_invariants();
    assert_eq!(a.stats().nr_chunks, 0, "the first chunk sufficed");

    // The static area is never a live allocation.
    let e = a.try_free(stat).unwrap_err();
    assert_eq!(e.kind, FreeErrorKind::Static);
}

#[test]
fn areas_are_zeroed_in_every_unit_and_distinct_per_cpu() {
    let src = HeapSource::new();
    let a = with_first(&src);
    let p = a.alloc(64, 8).unwrap();
    verify(&a, p, 64, None);
    fill(&a, p, 64, 0x5a);
    verify(&a, p, 64, Some(0x5a));
    // Each unit is its own copy.
    let addrs: Vec<usize> = (0..4)
        .map(|c| a.per_cpu_ptr(p, c).as_ptr() as usize)
        .collect();
    for w in addrs.windows(2) {
        assert_eq!(w[1] - w[0], UNIT);
    }
    a.free(p);
    // Reuse of the same area comes back zeroed.
    let q = a.alloc(64, 8).unwrap();
    assert_eq!(q, p);
    verify(&a, q, 64, None);
    a.free(q);
    a.check_invariants();
}

#[test]
fn bad_requests_are_errors() {
    let src = HeapSource::new();
    let a = with_first(&src);
    assert_eq!(a.alloc(0, 4), Err(PcpuError::ZeroSize));
    assert_eq!(
        a.alloc(MAX_ALLOC_SIZE + 1, 4),
        Err(PcpuError::TooLarge {
            size: MAX_ALLOC_SIZE + 1
        })
    );
    assert_eq!(
        a.alloc(usize::MAX, 4),
        Err(PcpuError::TooLarge { size: usize::MAX })
    );
    assert_eq!(a.alloc(8, 3), Err(PcpuError::BadAlign { align: 3 }));
    assert_eq!(a.alloc(8, 0), Err(PcpuError::BadAlign { align: 0 }));
    assert_eq!(
        a.alloc(8, 2 * PAGE_SIZE),
        Err(PcpuError::BadAlign {
            align: 2 * PAGE_SIZE
        })
    );
    // Small alignments are raised to 4, sizes rounded to 4.
    let p = a.alloc(1, 1).unwrap();
    assert_eq!(a.size_of(p), Ok(4));
    let q = a.alloc(MAX_ALLOC_SIZE, PAGE_SIZE).unwrap();
    assert_eq!(q.addr() % PAGE_SIZE, 0);
    assert_eq!(a.size_of(q), Ok(MAX_ALLOC_SIZE));
    a.free(p);
    a.free(q);
    a.check_invariants();
    // Bad configurations are errors too.
    let bad = |c: Config| PcpuAllocator::new(TestPlatform::pinned(1), &src, c).err();
    assert!(matches!(
        bad(Config::new(UNIT + 1)),
        Some(PcpuError::BadConfig(_))
    ));
    assert!(matches!(
        bad(Config::new(16 << 10)),
        Some(PcpuError::BadConfig(_))
    ));
    assert!(matches!(
        bad(Config::new(UNIT).first_chunk(4, 4, 0)),
        Some(PcpuError::BadConfig(_))
    ));
    assert!(matches!(
        bad(Config::new(UNIT).first_chunk(UNIT, 0, 4)),
        Some(PcpuError::BadConfig(_))
    ));
    assert!(matches!(
        bad(Config::new(UNIT).groups(1, 3 * PAGE_SIZE)),
        Some(PcpuError::BadConfig(_))
    ));
}

#[test]
fn bad_frees_are_detected() {
    let src = HeapSource::new();
    let a = with_first(&src);
    let p = a.alloc(64, 4).unwrap();
    let q = a.alloc(64, 4).unwrap();
    let raw = |p: PcpuPtr, add: usize| {
        PcpuPtr::from_raw(core::ptr::NonNull::new(p.as_ptr().as_ptr().wrapping_add(add)).unwrap())
    };
    assert_eq!(
        a.try_free(raw(p, 8)).unwrap_err().kind,
        FreeErrorKind::Interior
    );
    assert_eq!(
        a.try_free(raw(p, 2)).unwrap_err().kind,
        FreeErrorKind::Misaligned
    );
    // Free space inside the dynamic region.
    assert_eq!(
        a.try_free(raw(q, 64 + 1024)).unwrap_err().kind,
        FreeErrorKind::NotAllocated
    );
    let mut local = 0u64;
    let foreign = PcpuPtr::from_raw(core::ptr::NonNull::from(&mut local).cast());
    assert_eq!(
        a.try_free(foreign).unwrap_err().kind,
        FreeErrorKind::NotPercpu
    );
    // Another unit's copy is not the handle.
    assert_eq!(
        a.try_free(PcpuPtr::from_raw(a.per_cpu_ptr(p, 1)))
            .unwrap_err()
            .kind,
        FreeErrorKind::NotPercpu
    );
    assert_eq!(a.try_free(p), Ok(64));
    assert_eq!(a.try_free(p).unwrap_err().kind, FreeErrorKind::NotAllocated);
    a.check_invariants();
    a.free(q);

    // Dynamic chunks too, including past their unit.
    let src2 = HeapSource::new();
    let d = dynamic_only(&src2);
    let p = d.alloc(16, 4).unwrap();
    assert_eq!(
        d.try_free(raw(p, 4)).unwrap_err().kind,
        FreeErrorKind::Interior
    );
    assert_eq!(
        d.try_free(raw(p, 1 << 20)).unwrap_err().kind,
        FreeErrorKind::NotPercpu
    );
    d.free(p);
    assert_eq!(d.try_free(p).unwrap_err().kind, FreeErrorKind::NotAllocated);
    d.check_invariants();
}

#[test]
#[should_panic(expected = "not allocated (double free")]
fn double_free_panics_with_a_clear_message() {
    let src = HeapSource::new();
    let a = with_first(&src);
    let p = a.alloc(8, 4).unwrap();
    a.free(p);
    a.free(p);
}

#[test]
#[should_panic(expected = "points inside a live allocation")]
fn interior_free_panics_with_a_clear_message() {
    let src = HeapSource::new();
    let a = with_first(&src);
    let p = a.alloc(8, 4).unwrap();
    a.free(PcpuPtr::from_raw(
        core::ptr::NonNull::new(p.as_ptr().as_ptr().wrapping_add(4)).unwrap(),
    ));
}

#[test]
fn atomic_requests_never_create_or_populate() {
    let src = HeapSource::new();
    let a = dynamic_only(&src);
    assert_eq!(a.alloc_atomic(16, 4), Err(PcpuError::NoMemory));
    assert_eq!(a.stats().nr_chunks, 0);
    assert_eq!(src.populate_calls(), 0);
    assert!(
        a.balance_requested(),
        "an atomic failure schedules the balance work"
    );
    assert_eq!(a.stats().atomic_failures, 1);
    a.check_invariants();

    // The balance work creates a chunk and populates 4 pages for atomics.
    a.balance();
    assert!(!a.balance_requested());
    let s = a.stats();
    assert_eq!(
        (s.nr_chunks, s.nr_populated, s.nr_empty_pop_pages),
        (1, 4, 4)
    );
    a.check_invariants();
    let p = a.alloc_atomic(16, 4).unwrap();
    verify(&a, p, 16, None);
    // Atomic requests only land on populated pages: 4 pages = 16 KiB.
    let mut v = Vec::new();
    while let Ok(q) = a.alloc_atomic(4096, 4096) {
        v.push(q);
    }
    assert_eq!(
        v.len(),
        3,
        "pages 1..4 are populated, page 0 is partly used"
    );
    assert_eq!(a.stats().nr_populated, 4, "atomic requests never populate");
    a.check_invariants();
    // A blocking request populates what it needs.
    let calls = src.populate_calls();
    let big = a.alloc(3 * 4096, 4096).unwrap();
    assert!(src.populate_calls() > calls);
    assert_eq!(a.stats().nr_populated, 7);
    verify(&a, big, 3 * 4096, None);
    a.check_invariants();
    for q in v {
        a.free(q);
    }
    a.free(big);
    a.free(p);
    a.check_invariants();
}

#[test]
fn interrupt_context_requests_are_atomic() {
    let src = HeapSource::new();
    let a = dynamic_only(&src);
    let tp = *a.platform();
    let r = tp.interrupt(|| a.alloc(16, 4)).unwrap();
    assert_eq!(
        r,
        Err(PcpuError::NoMemory),
        "no chunk may be created from an interrupt"
    );
    assert_eq!(a.stats().nr_chunks, 0);
    let p = a.alloc(16, 4).unwrap();
    let q = tp.interrupt(|| a.alloc(16, 4)).unwrap().unwrap();
    tp.interrupt(|| a.free(q)).unwrap();
    a.free(p);
    a.check_invariants();
}

#[test]
fn chunks_are_created_on_demand_and_released_by_balance() {
    let src = HeapSource::new();
    let a = dynamic_only(&src);
    let mut v = Vec::new();
    for i in 0..40 {
        let p = a.alloc(4096, 4).unwrap();
        fill(&a, p, 4096, i as u8);
        v.push(p);
    }
    a.check_invariants();
    let s = a.stats();
    assert_eq!(s.nr_chunks, 5, "8 pages per chunk");
    assert_eq!(s.nr_cur_alloc, 40);
    for (i, p) in v.iter().enumerate() {
        verify(&a, *p, 4096, Some(i as u8));
    }
    for p in v.drain(..) {
        a.free(p);
        a.check_invariants();
    }
    assert!(
        a.balance_requested(),
        "a second fully free chunk schedules the reaper"
    );
    a.balance();
    a.check_invariants();
    // Chunks isolated while their pages emptied are reintegrated by the
    // first run and released by the next.
    a.balance();
    a.check_invariants();
    let s = a.stats();
    assert_eq!(s.nr_chunks, 1, "one free chunk is kept");
    assert_eq!(s.chunks_destroyed, 4);
    assert!(
        s.nr_empty_pop_pages >= 4,
        "empty populated pages kept for atomics: {s:?}"
    );
    // Everything but the spare chunk (and the lookup table) went back.
    let meta_and_mem = src.pages_in_use();
    drop(a);
    assert_eq!(
        src.pages_in_use(),
        0,
        "drop returns every page ({meta_and_mem} before)"
    );
}

#[test]
fn isolated_chunks_are_depopulated_then_reintegrated() {
    let src = HeapSource::new();
    let a = dynamic_only(&src);
    // Two chunks, all pages populated.
    let mut v: Vec<PcpuPtr> = (0..16).map(|_| a.alloc(4096, 4096).unwrap()).collect();
    assert_eq!(a.stats().nr_chunks, 2);
    let keep_a = a.alloc(16, 4).unwrap();
    // Free most of the second chunk's pages but keep one allocation in it,
    // and leave the first chunk's pages empty too: plenty of empty pages.
    let second: Vec<PcpuPtr> = v.split_off(8);
    for p in v.drain(..) {
        a.free(p);
    }
    let mut isolated = false;
    for p in second.iter().skip(1) {
        a.free(*p);
        isolated |= listed(&a)
            .iter()
            .any(|&(s, _)| s == a.geo_to_depopulate_slot());
        a.check_invariants();
    }
    assert!(
        isolated,
        "a chunk with many empty pages was isolated: {:?}",
        listed(&a)
    );
    let before = src.depopulated_pages();
    a.balance();
    a.check_invariants();
    assert!(
        src.depopulated_pages() > before,
        "isolated chunk depopulated"
    );
    let s = a.stats();
    assert!(s.nr_empty_pop_pages >= 2, "{s:?}");
    // Depopulated pages were poisoned by the source; new areas there are
    // populated again and zeroed.
    let mut again = Vec::new();
    for _ in 0..14 {
        let p = a.alloc(4096, 4096).unwrap();
        verify(&a, p, 4096, None);
        again.push(p);
    }
    a.check_invariants();
    for p in again {
        a.free(p);
    }
    a.free(second[0]);
    a.free(keep_a);
    a.balance();
    a.balance();
    a.check_invariants();
    assert!(a.stats().nr_chunks <= 1);
    // Poison really was written somewhere (the source does it on depopulate).
    assert_eq!(DEPOPULATE_POISON, 0x6b);
}

#[test]
fn failing_population_and_exhaustion_are_errors() {
    let src = HeapSource::new();
    let a = dynamic_only(&src);
    let p = a.alloc(16, 4).unwrap();
    src.fail_next_populates(1);
    // The next page is unpopulated: population fails, the area is undone.
    let r = a.alloc(4096, 4096);
    assert_eq!(r, Err(PcpuError::NoMemory));
    a.check_invariants();
    assert_eq!(a.stats().nr_cur_alloc, 1);
    let q = a.alloc(4096, 4096).unwrap();
    a.free(q);
    a.free(p);

    // A page budget too small for a second chunk.
    let small = HeapSource::with_limit(30);
    let b = dynamic_only(&small);
    let mut v = Vec::new();
    let err = loop {
        match b.alloc(4096, 4) {
            Ok(p) => v.push(p),
            Err(e) => break e,
        }
    };
    assert_eq!(err, PcpuError::NoMemory);
    assert!(!v.is_empty());
    b.check_invariants();
    for p in v {
        b.free(p);
    }
    b.check_invariants();
}

#[test]
fn chunks_failing_in_low_slots_are_demoted() {
    let src = HeapSource::new();
    // Only a first chunk with a 1-page dynamic region, 1 unit.
    let a = PcpuAllocator::new(
        TestPlatform::pinned(1),
        &src,
        Config::new(UNIT).units(1).first_chunk(0, 0, 4096),
    )
    .unwrap();
    let v: Vec<PcpuPtr> = (0..1024).map(|_| a.alloc(4, 4).unwrap()).collect();
    assert_eq!(a.stats().nr_chunks, 0);
    // Free every odd 4-byte area: the largest run is 4 bytes at 4 mod 8.
    for p in v.iter().skip(1).step_by(2) {
        a.free(*p);
    }
    a.check_invariants();
    assert_eq!(listed(&a), [(size_to_slot_raw(4), ChunkKind::First)]);
    // 4 bytes aligned to 8 cannot fit: the first chunk fails in slot 1 and
    // is demoted to slot 0; a new chunk serves the request.
    let p = a.alloc(4, 8).unwrap();
    let l = listed(&a);
    assert!(l.contains(&(0, ChunkKind::First)), "{l:?}");
    assert_eq!(a.stats().nr_chunks, 1);
    a.check_invariants();
    // A demoted chunk stays on slot 0 until its own slot changes.
    a.free(v[0]);
    a.check_invariants();
    a.free(p);
}

#[test]
fn groups_lay_units_out_by_group() {
    let src = HeapSource::new();
    // 5 units, groups of 2, each group's span rounded to 128 KiB.
    let cfg = Config::new(UNIT)
        .units(5)
        .groups(2, 128 << 10)
        .first_chunk(64, 0, 4096);
    let a = PcpuAllocator::new(TestPlatform::pinned(5), &src, cfg).unwrap();
    let offs: Vec<usize> = (0..5).map(|c| a.unit_offset(c)).collect();
    assert_eq!(offs, [0, UNIT, 128 << 10, (128 << 10) + UNIT, 256 << 10]);
    let mut v = Vec::new();
    for i in 0..20u8 {
        let p = a.alloc(2000, 8).unwrap();
        fill(&a, p, 2000, i);
        v.push((p, i));
    }
    for (p, i) in &v {
        verify(&a, *p, 2000, Some(*i));
    }
    a.check_invariants();
    for (p, _) in v {
        a.free(p);
    }
    a.check_invariants();
}

#[test]
fn random_mixed_workload_keeps_invariants() {
    let src = HeapSource::new();
    let a = with_first(&src);
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let mut live: Vec<(PcpuPtr, usize, u8)> = Vec::new();
    let steps = if cfg!(miri) { 60 } else { 1500 };
    for step in 0..steps {
        match rng.below(20) {
            0..=10 => {
                let size = match rng.below(4) {
                    0 => 1 + rng.below(16),
                    1 => 1 + rng.below(256),
                    2 => 1 + rng.below(4096),
                    _ => 1 + rng.below(MAX_ALLOC_SIZE),
                };
                let align = 1 << rng.below(13);
                let mut flags = AllocFlags::KERNEL;
                flags.set(AllocFlags::ATOMIC, rng.below(4) == 0);
                flags.set(AllocFlags::RESERVED, rng.below(8) == 0);
                if let Ok(p) = a.alloc_with(size, align, flags) {
                    assert_eq!(p.addr() % align, 0);
                    verify(&a, p, size.min(64), None);
                    let seed = step as u8;
                    fill(&a, p, size.min(64), seed);
                    live.push((p, size, seed));
                }
            }
            11..=18 if !live.is_empty() => {
                let (p, size, seed) = live.swap_remove(rng.below(live.len()));
                verify(&a, p, size.min(64), Some(seed));
                assert_eq!(a.try_free(p), Ok(size.next_multiple_of(4)));
            }
            _ => a.balance(),
        }
        if step % 7 == 0 || cfg!(miri) {
            a.check_invariants();
        }
    }
    for (p, size, seed) in live {
        verify(&a, p, size.min(64), Some(seed));
        a.free(p);
    }
    a.balance();
    a.balance();
    a.check_invariants();
    assert!(a.stats().nr_chunks <= 1);
    assert_eq!(a.stats().nr_cur_alloc, 0);
}

/// Many small allocations through one large chunk, freed in order,
/// alternately and in reverse (the seed benchmark's shapes, small).
#[test]
fn seed_shapes_small() {
    let n = if cfg!(miri) { 300 } else { 20_000 };
    let unit = if cfg!(miri) { 32 << 10 } else { 1 << 20 };
    for size in [4usize, 16, 64, 256, 1024] {
        for pattern in 0..3 {
            let src = HeapSource::new();
            let a = PcpuAllocator::new(TestPlatform::pinned(1), &src, Config::new(unit).units(1))
                .unwrap();
            let v: Vec<PcpuPtr> = (0..n).map(|_| a.alloc(size, 4).unwrap()).collect();
            // Allocation is first fit: areas are packed.
            if size == 4 {
                assert_eq!(v[1].addr() - v[0].addr(), 4);
            }
            match pattern {
                0 => v.iter().for_each(|p| a.free(*p)),
                1 => {
                    v.iter().step_by(2).for_each(|p| a.free(*p));
                    v.iter().skip(1).step_by(2).for_each(|p| a.free(*p));
                }
                _ => v.iter().rev().for_each(|p| a.free(*p)),
            }
            a.check_invariants();
            assert_eq!(a.stats().nr_cur_alloc, 0);
        }
    }
    // 4-byte objects with 8-byte alignment.
    let src = HeapSource::new();
    let a = PcpuAllocator::new(TestPlatform::pinned(1), &src, Config::new(unit).units(1)).unwrap();
    let v: Vec<PcpuPtr> = (0..n).map(|_| a.alloc(4, 8).unwrap()).collect();
    assert!(v.iter().all(|p| p.addr() % 8 == 0));
    a.check_invariants();
    v.iter().for_each(|p| a.free(*p));
    a.check_invariants();
}

impl<S: crate::ChunkSource> PcpuAllocator<TestPlatform, S> {
    fn geo_to_depopulate_slot(&self) -> usize {
        self.geometry().to_depopulate_slot
    }
}

#[test]
fn chunk_struct_is_small() {
    // The header plus maps of a 32 KiB-unit chunk fit in one page.
    assert!(core::mem::size_of::<Chunk>() < 512);
}

/// A heap source that promises zeroed populated pages (its depopulate
/// zeroes instead of poisoning), so the allocator skips clearing bytes it
/// knows are zero.
struct ZeroingHeap(HeapSource);

// SAFETY: forwards to HeapSource, whose promises hold; depopulated pages
// are zeroed, so populated pages read as zero (promise 4).
unsafe impl crate::ChunkSource for ZeroingHeap {
    fn alloc_pages(&self, pages: usize, align: usize) -> Option<core::ptr::NonNull<u8>> {
        self.0.alloc_pages(pages, align)
    }
    unsafe fn free_pages(&self, ptr: core::ptr::NonNull<u8>, pages: usize, align: usize) {
        // SAFETY: forwarded contract.
        unsafe { self.0.free_pages(ptr, pages, align) }
    }
    unsafe fn depopulate(&self, ptr: core::ptr::NonNull<u8>, pages: usize) {
        // SAFETY: the range is ours and holds no live data (caller).
        unsafe { core::ptr::write_bytes(ptr.as_ptr(), 0, pages * PAGE_SIZE) }
    }
    fn populates_zeroed(&self) -> bool {
        true
    }
}

#[test]
fn known_zero_areas_skip_clearing_but_reused_bytes_are_cleared() {
    let a = PcpuAllocator::new(
        TestPlatform::pinned(2),
        ZeroingHeap(HeapSource::new()),
        Config::new(UNIT).units(2),
    )
    .unwrap();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut live: Vec<(PcpuPtr, usize)> = Vec::new();
    let steps = if cfg!(miri) { 150 } else { 3000 };
    for step in 0..steps {
        if live.is_empty() || rng.below(3) != 0 {
            let size = 4 * (1 + rng.below(if cfg!(miri) { 16 } else { 300 }));
            let align = 4 << rng.below(4);
            let p = a.alloc(size, align).unwrap();
            // Every byte reads zero in every unit, whether cleared or known
            // zero; then dirty it all.
            for cpu in 0..a.nr_units() {
                let q = a.per_cpu_ptr(p, cpu).as_ptr();
                for i in 0..size {
                    // SAFETY: the area is `size` bytes in every unit, live.
                    unsafe {
                        assert_eq!(q.add(i).read(), 0, "step {step} cpu {cpu} byte {i}");
                        q.add(i).write(0xa5);
                    }
                }
            }
            live.push((p, size));
        } else {
            let (p, _) = live.swap_remove(rng.below(live.len()));
            a.free(p);
        }
        if step % 500 == 499 {
            a.balance();
        }
    }
    for (p, _) in live {
        a.free(p);
    }
    a.balance();
}

/// A source over `HeapSource` that records, for every populated page,
/// the node `populate_node` was given.
struct NodeSource {
    heap: HeapSource,
    calls: std::sync::Mutex<Vec<(usize, usize, usize)>>,
}

// SAFETY: forwards to `HeapSource`, which keeps the promises; only records.
unsafe impl crate::ChunkSource for NodeSource {
    fn alloc_pages(&self, pages: usize, align: usize) -> Option<core::ptr::NonNull<u8>> {
        self.heap.alloc_pages(pages, align)
    }
    unsafe fn free_pages(&self, ptr: core::ptr::NonNull<u8>, pages: usize, align: usize) {
        // SAFETY: forwarded contract.
        unsafe { self.heap.free_pages(ptr, pages, align) }
    }
    unsafe fn populate(&self, _: core::ptr::NonNull<u8>, _: usize) -> bool {
        panic!("the allocator must call populate_node")
    }
    unsafe fn populate_node(&self, ptr: core::ptr::NonNull<u8>, pages: usize, node: usize) -> bool {
        self.calls
            .lock()
            .unwrap()
            .push((ptr.as_ptr() as usize, pages, node));
        // SAFETY: forwarded contract.
        unsafe { self.heap.populate(ptr, pages) }
    }
    unsafe fn depopulate(&self, ptr: core::ptr::NonNull<u8>, pages: usize) {
        // SAFETY: forwarded contract.
        unsafe { self.heap.depopulate(ptr, pages) }
    }
}

/// Issue #20: on two NUMA nodes (CPUs 0-1 and 2-3) the units are grouped by
/// node (node 1's group starts on an atom boundary) and every unit's pages,
/// first chunk and dynamic chunks alike, are populated from its CPU's node.
#[test]
fn units_grouped_by_node_and_populated_node_locally() {
    static T: local_lock::topology::Topology = local_lock::topology::Topology::uniform(2, 2);
    let src = NodeSource {
        heap: HeapSource::new(),
        calls: std::sync::Mutex::new(Vec::new()),
    };
    let atom = 4 * UNIT;
    let config = Config::new(UNIT)
        .units(4)
        .groups_by_node(&T, atom)
        .unwrap()
        .first_chunk(1000, 0, 8192);
    let a = PcpuAllocator::new(TestPlatform::pinned(4).with_topology(&T), &src, config).unwrap();
    assert_eq!(a.unit_offset(1), UNIT);
    assert_eq!(a.unit_offset(2), atom, "node 1's units start a new group");
    // A dynamic chunk: beyond what the first chunk's 8 KiB serve.
    let ps: Vec<PcpuPtr> = (0..6).map(|_| a.alloc(4096, 8).unwrap()).collect();
    let calls = src.calls.lock().unwrap().clone();
    assert!(
        calls.len() >= 8,
        "first chunk and a dynamic chunk: {calls:?}"
    );
    let node_of_page = |page: usize| {
        calls
            .iter()
            .find(|&&(at, n, _)| page >= at && page < at + n * PAGE_SIZE)
            .map(|c| c.2)
    };
    // Every CPU's copy of every area lies in a page populated from the
    // CPU's own node.
    for &p in &ps {
        for cpu in 0..4 {
            let page = a.per_cpu_ptr(p, cpu).as_ptr() as usize & !(PAGE_SIZE - 1);
            assert_eq!(
                node_of_page(page),
                Some(T.cpu_to_node(cpu)),
                "CPU {cpu}'s copy at {page:#x}"
            );
        }
    }
    for p in ps {
        a.free(p);
    }
}
