//! The page map (`GlobalBuddy`'s byte per heap page, `PageAlloc::page_tag`):
//! slabs of caches over `GlobalPages` carry their cache's tag and order
//! while they exist, frees outside a CPU's validated ranges find their slab
//! by it, and bad pointers are still reported precisely.
#![cfg(not(miri))] // the heap's reservations need mmap

use core::ptr::NonNull;

use local_lock::std_platform::{PerThread, RseqCpu};
use slub::{FreeErrorKind, GlobalPages, KmemCache, SlabFlags, SlabSource};

/// A slab's pages are tagged (cache tag in the high 5 bits, the slab's
/// order in the low 3) from its making to its discard, and untagged after.
#[test]
fn slab_pages_are_tagged_while_the_slab_lives() {
    let c = KmemCache::<GlobalPages, PerThread>::create(
        "pagemap_tagged",
        192,
        8,
        SlabFlags::NONE,
        GlobalPages,
        PerThread,
    )
    .unwrap();
    let p = c.alloc().unwrap();
    let t = GlobalPages.page_tag(p.as_ptr());
    assert_ne!(t, 0, "a live slab's page is tagged");
    assert!(t >> 3 != 0, "the tag names a cache: {t:#x}");
    let b = GlobalPages.block_of(p.as_ptr()).unwrap();
    assert_eq!(
        u32::from(t & 7),
        b.order.get() as u32,
        "the low bits are the slab's order"
    );
    // Every page of the slab, not only the head.
    let last = b.head.as_ptr().wrapping_add(b.order.pages() * 4096 - 1);
    assert_eq!(GlobalPages.page_tag(last), t);
    // SAFETY: ours, freed once.
    unsafe { c.free(p) };
    c.shrink();
    assert_eq!(
        GlobalPages.page_tag(p.as_ptr()),
        0,
        "a discarded slab is untagged"
    );
}

/// Two caches get different tags: one cache's tag never vouches for
/// another's objects.
#[test]
fn each_cache_has_its_own_tag() {
    let mk = |name| {
        KmemCache::<GlobalPages, PerThread>::create(
            name,
            96,
            8,
            SlabFlags::NONE,
            GlobalPages,
            PerThread,
        )
        .unwrap()
    };
    let (a, b) = (mk("pagemap_a"), mk("pagemap_b"));
    let (pa, pb) = (a.alloc().unwrap(), b.alloc().unwrap());
    let (ta, tb) = (
        GlobalPages.page_tag(pa.as_ptr()),
        GlobalPages.page_tag(pb.as_ptr()),
    );
    assert!(ta != 0 && tb != 0);
    assert_ne!(ta >> 3, tb >> 3, "one tag per cache");
    // SAFETY: `pb` is not an object of `a`: refused before any change.
    let e = unsafe { a.try_free(pb) }.unwrap_err();
    assert!(matches!(e.kind, FreeErrorKind::WrongCache(_)), "{e}");
    // SAFETY: ours, freed once each.
    unsafe {
        a.free(pa);
        b.free(pb);
    }
}

/// Frees that miss the CPU's validated ranges go through the map: objects
/// of many slabs freed in an order that defeats the ranges are all taken,
/// and an interior pointer of a tagged slab is still reported as one. On
/// the locked sheaves and on the restartable ones.
#[test]
fn frees_found_by_the_map_keep_every_check() {
    let locked = KmemCache::<GlobalPages, PerThread>::create(
        "pagemap_locked",
        256,
        8,
        SlabFlags::NONE,
        GlobalPages,
        PerThread,
    )
    .unwrap();
    let objs: Vec<_> = (0..2000).map(|_| locked.alloc().unwrap()).collect();
    // SAFETY: objects of `locked`, each freed once (the interior pointer is
    // refused before any change).
    strided_frees(&objs, |p| unsafe { locked.try_free(p) });
    let rseq = KmemCache::<GlobalPages, RseqCpu>::create(
        "pagemap_rseq",
        256,
        8,
        SlabFlags::NONE,
        GlobalPages,
        RseqCpu::new(),
    )
    .unwrap();
    let objs: Vec<_> = (0..2000).map(|_| rseq.alloc().unwrap()).collect();
    // SAFETY: as above.
    strided_frees(&objs, |p| unsafe { rseq.try_free(p) });
}

/// Frees `objs` strided over their slabs (consecutive frees land in
/// different slabs), after an interior pointer that must be refused.
fn strided_frees(objs: &[NonNull<u8>], free: impl Fn(NonNull<u8>) -> Result<(), slub::FreeError>) {
    let t = GlobalPages.page_tag(objs[7].as_ptr());
    assert_ne!(t, 0, "tagged");
    let inner = NonNull::new(objs[7].as_ptr().wrapping_add(8)).unwrap();
    let e = free(inner).unwrap_err();
    assert!(matches!(e.kind, FreeErrorKind::NotObjectStart(_)), "{e}");
    for k in 0..16 {
        for p in objs.iter().skip(k).step_by(16) {
            free(*p).unwrap();
        }
    }
}

/// A hardened cache of `size` B objects on the restartable sheaves with
/// its map tag, or `None` without rseq or with every tag taken.
fn tagged_rseq_cache(name: &'static str, size: usize) -> Option<KmemCache<GlobalPages, RseqCpu>> {
    use local_lock::Platform;
    let c = KmemCache::<GlobalPages, RseqCpu>::create(
        name,
        size,
        8,
        SlabFlags::HARDENED,
        GlobalPages,
        RseqCpu::new(),
    )
    .unwrap()
    .with_sheaves(32);
    (RseqCpu::new().restartable() && c.claim_map_tag().is_some()).then_some(c)
}

/// The inline fast free of a cache the map names (`try_free_fast`:
/// `GlobalSlub`'s `dealloc`, mm-malloc's `free`) validates by the map,
/// not by the CPU's validated ranges: frees strided over many slabs are
/// all taken there, an interior pointer is still refused as one, and,
/// hardened, a double free with frees between (`free a, free b, free a`)
/// is refused by the free itself, the object's free marker being read
/// (before, the range section stored the marker without reading it and
/// took the second `a`, found only when it left the sheaf).
#[test]
fn fast_frees_are_validated_by_the_map() {
    let Some(c) = tagged_rseq_cache("pagemap_fast", 256) else {
        eprintln!("no rseq or no tag left here: nothing to test");
        return;
    };
    let objs: Vec<_> = (0..2000).map(|_| c.alloc().unwrap()).collect();
    // SAFETY: objects of `c`, each freed once (the interior pointer is
    // refused before any change).
    strided_frees(&objs, |p| match unsafe { c.try_free_fast::<true>(p) } {
        Ok(true) => Ok(()),
        Ok(false) => panic!("{p:p} sent to the slow path"),
        Err(e) => Err(e),
    });
    let (a, b) = (c.alloc().unwrap(), c.alloc().unwrap());
    // SAFETY: the double free under test, refused before any change.
    unsafe {
        assert_eq!(c.try_free_fast::<true>(a), Ok(true));
        assert_eq!(c.try_free_fast::<true>(b), Ok(true));
        let e = c.try_free_fast::<true>(a).unwrap_err();
        assert!(matches!(e.kind, FreeErrorKind::DoubleFree), "{e}");
    }
    // Every object is handed out once.
    let (x, y) = (c.alloc().unwrap(), c.alloc().unwrap());
    assert_ne!(x, y);
}

/// A tag given by the caller (`set_map_tag`, mm-malloc's: cache `i`
/// gets `i + 1`) is the one its slabs carry, before the first slab only,
/// in `1..=31` only. (Tag 31: this binary's other caches take theirs from
/// the shared counter, from 1, and are far fewer.)
#[test]
fn a_tag_set_by_the_caller_is_the_slabs_tag() {
    let mk = |name| {
        KmemCache::<GlobalPages, PerThread>::create(
            name,
            80,
            8,
            SlabFlags::NONE,
            GlobalPages,
            PerThread,
        )
        .unwrap()
    };
    let c = mk("pagemap_set_tag");
    // SAFETY: no other cache on `GlobalPages` in this binary has tag 31
    // (see above); the refused calls change nothing.
    unsafe {
        assert!(!c.set_map_tag(0), "tag 0 is no cache's");
        assert!(!c.set_map_tag(32), "tags are 5 bits");
        assert!(c.set_map_tag(31));
        assert!(!c.set_map_tag(30), "a cache keeps its tag");
    }
    assert_eq!(c.claim_map_tag(), Some(31));
    let p = c.alloc().unwrap();
    assert_eq!(GlobalPages.page_tag(p.as_ptr()) >> 3, 31);
    // SAFETY: ours, freed once.
    unsafe { c.free(p) };
}

/// The inline free from the caller's own map byte (`free_fast_byte`:
/// mm-malloc's `free`, which reads the byte to find the cache) takes
/// what `try_free_fast` takes and changes nothing otherwise, and the full
/// free it hands the rest to still decides: strided frees over many
/// slabs all freed inline (pushed, or marked and finished by
/// `free_unpushed` when the sheaf is full), an interior pointer declined
/// and then refused as one, a double free with frees between declined
/// (its marker read) and then refused by `try_free`, and every object
/// handed out once afterwards.
#[test]
fn inline_frees_from_the_callers_map_byte() {
    use slub::FastFree;
    let Some(c) = tagged_rseq_cache("pagemap_byte", 192) else {
        eprintln!("no rseq or no tag left here: nothing to test");
        return;
    };
    let inline = |p: NonNull<u8>| {
        // SAFETY: objects of `c` (or an interior pointer, declined before
        // any change), the byte read from `c`'s source's map after the
        // allocation.
        unsafe { c.free_fast_byte(p, GlobalPages.page_tag(p.as_ptr())) }
    };
    // mm-malloc's composition of the outcomes.
    let free = |p: NonNull<u8>| -> Result<(), slub::FreeError> {
        // SAFETY: as above; `Unpushed` is finished once; the slow path
        // refuses bad input before any change.
        unsafe {
            match inline(p) {
                FastFree::Freed => Ok(()),
                FastFree::Unpushed => c.free_unpushed(p),
                FastFree::Slow => c.try_free(p),
            }
        }
    };
    let objs: Vec<_> = (0..2000).map(|_| c.alloc().unwrap()).collect();
    let inner = NonNull::new(objs[7].as_ptr().wrapping_add(8)).unwrap();
    assert_eq!(inline(inner), FastFree::Slow, "an interior pointer");
    strided_frees(&objs, |p| {
        if p == inner {
            return free(p);
        }
        match inline(p) {
            FastFree::Freed => Ok(()),
            // SAFETY: the object just marked.
            FastFree::Unpushed => unsafe { c.free_unpushed(p) },
            FastFree::Slow => panic!("{p:p} sent to the slow path"),
        }
    });
    let (a, b) = (c.alloc().unwrap(), c.alloc().unwrap());
    free(a).unwrap();
    free(b).unwrap();
    assert_eq!(inline(a), FastFree::Slow, "a double free is declined");
    let e = free(a).unwrap_err();
    assert!(matches!(e.kind, FreeErrorKind::DoubleFree), "{e}");
    let (x, y) = (c.alloc().unwrap(), c.alloc().unwrap());
    assert_ne!(x, y);
}

/// The inline free's map check (`mapped_object`: the page's byte, then the
/// offset in the slab by the stride's odd inverse and a rotate, folded
/// with the object count into one compare) takes every object of both
/// slab orders and nothing else: an interior pointer, the slot after a
/// slab's last object (its tail, a multiple of the stride past the count)
/// and the slab's last byte are refused, in the first slab (the minimum
/// order) and in later ones (the preferred order), with 1000-byte objects
/// whose slabs have a tail.
#[test]
fn the_inline_map_check_takes_objects_of_both_orders_and_nothing_else() {
    let Some(c) = tagged_rseq_cache("pagemap_tail", 1000) else {
        eprintln!("no rseq or no tag left here: nothing to test");
        return;
    };
    let lay = *c.layout();
    let objs: Vec<_> = (0..1500).map(|_| c.alloc().unwrap()).collect();
    let mut orders = std::collections::BTreeSet::new();
    let mut tails = 0;
    for &p in &objs {
        let b = GlobalPages.block_of(p.as_ptr()).unwrap();
        let o = b.order.get();
        orders.insert(o);
        let objects = if o == lay.oo.order {
            lay.oo.objects
        } else {
            lay.min.objects
        };
        let head = b.head.as_ptr();
        let bytes = b.order.pages() * 4096;
        let tail = head.wrapping_add(objects as usize * lay.size);
        let mut bad = vec![p.as_ptr().wrapping_add(8), head.wrapping_add(bytes - 1)];
        if tail < head.wrapping_add(bytes) {
            bad.push(tail);
            tails += 1;
        }
        for q in bad {
            let q = NonNull::new(q).unwrap();
            // SAFETY: not an object start: refused before any change.
            let r = unsafe { c.try_free_fast::<true>(q) };
            assert!(r.is_err(), "{q:p} (slab {head:p}, order {o}) taken: {r:?}");
        }
    }
    assert_eq!(
        orders.len(),
        2,
        "objects of both orders ({} and {}): {orders:?}",
        lay.min.order,
        lay.oo.order
    );
    assert!(tails > 0, "a slab with a tail");
    for p in objs {
        // SAFETY: ours, freed once.
        assert_eq!(unsafe { c.try_free_fast::<true>(p) }, Ok(true), "{p:p}");
    }
}

/// The inline map check validates slabs of orders 0..4 (its geometry
/// table, one cache line, is indexed by the map byte's order): a cache
/// whose slabs are of a higher order keeps its tag, and its frees are
/// taken another way (the CPU's validated ranges, or the descriptor path
/// when `try_free_fast` answers "not here", `Ok(false)`); none is refused
/// or lost.
#[test]
fn slabs_above_the_inline_orders_are_freed_by_the_descriptor_path() {
    let Some(c) = tagged_rseq_cache("pagemap_big", 40 << 10) else {
        eprintln!("no rseq or no tag left here: nothing to test");
        return;
    };
    let lay = *c.layout();
    assert!(lay.min.order >= 4, "a cache of order-4+ slabs: {lay:?}");
    let objs: Vec<_> = (0..40).map(|_| c.alloc().unwrap()).collect();
    for &p in &objs {
        // SAFETY: ours; `Ok(false)` changes nothing, then freed once.
        unsafe {
            match c.try_free_fast::<true>(p) {
                Ok(true) => {}
                Ok(false) => c.free(p),
                Err(e) => panic!("{p:p} refused: {e}"),
            }
        }
    }
    let again: std::collections::BTreeSet<_> = (0..40).map(|_| c.alloc().unwrap()).collect();
    assert_eq!(again.len(), 40, "every object handed out once");
}

/// The inline free from a slot the byte's tag names
/// (`free_fast_tag_in`: mm-malloc's `free`, whose caches sit at the slot
/// of their tag, reads no tag to compare) takes the cache's objects and
/// declines an interior pointer, a double free and storage with no cache
/// yet (all zero), each before any change.
#[test]
fn inline_frees_from_the_tags_slot() {
    use slub::FastFree;
    let Some(c) = tagged_rseq_cache("pagemap_slot", 192) else {
        eprintln!("no rseq or no tag left here: nothing to test");
        return;
    };
    let at: *const KmemCache<GlobalPages, RseqCpu> = &c;
    let inline = |p: NonNull<u8>| {
        // SAFETY: objects of `c` (or pointers declined before any change),
        // the byte read from `c`'s source's map after the allocation; the
        // byte of `c`'s slabs carries `c`'s tag.
        unsafe { KmemCache::free_fast_tag_in(at, p.as_ptr(), GlobalPages.page_tag(p.as_ptr())) }
    };
    let objs: Vec<_> = (0..500).map(|_| c.alloc().unwrap()).collect();
    let inner = NonNull::new(objs[3].as_ptr().wrapping_add(16)).unwrap();
    assert_eq!(inline(inner), FastFree::Slow, "an interior pointer");
    let zero =
        std::boxed::Box::new(core::mem::MaybeUninit::<KmemCache<GlobalPages, RseqCpu>>::zeroed());
    // SAFETY: all-zero storage (no cache): declined, nothing else read.
    let r = unsafe {
        KmemCache::free_fast_tag_in(
            zero.as_ptr(),
            objs[0].as_ptr(),
            GlobalPages.page_tag(objs[0].as_ptr()),
        )
    };
    assert_eq!(r, FastFree::Slow, "storage without a cache");
    for &p in &objs {
        match inline(p) {
            FastFree::Freed => {}
            // SAFETY: the object just marked.
            FastFree::Unpushed => unsafe { c.free_unpushed(p) }.unwrap(),
            FastFree::Slow => panic!("{p:p} sent to the slow path"),
        }
    }
    assert_eq!(inline(objs[1]), FastFree::Slow, "a double free is declined");
    let again: std::collections::BTreeSet<_> = (0..500).map(|_| c.alloc().unwrap()).collect();
    assert_eq!(again.len(), 500, "every object handed out once");
}

/// A cache whose slabs are of orders below and above the inline check's
/// four (the minimum order 0, the preferred one 4, with a
/// `slub_max_order` of 4) gets no inline check at all: otherwise a byte of
/// an order-4 slab, whose low two bits read 0, would be checked against
/// the order-0 geometry by the tag slot's free (which does not compare
/// the tag's order with 4), and the start of an inner page of the slab
/// (an object boundary in an order-0 slab of one object) would be taken
/// as an object.
#[test]
fn a_cache_with_orders_above_the_inline_ones_has_no_inline_check() {
    use slub::FastFree;
    let g = slub::Geometry {
        max_order: 4,
        ..slub::Geometry::new(64)
    };
    let c = KmemCache::<GlobalPages, RseqCpu>::create_with(
        "pagemap_mixed",
        3000,
        8,
        SlabFlags::HARDENED,
        g,
        GlobalPages,
        RseqCpu::new(),
    )
    .unwrap()
    .with_sheaves(32);
    use local_lock::Platform;
    if !RseqCpu::new().restartable() || c.claim_map_tag().is_none() {
        eprintln!("no rseq or no tag left here: nothing to test");
        return;
    }
    let lay = *c.layout();
    assert!(
        lay.min.order < 4 && lay.oo.order >= 4,
        "orders on both sides of 4: {lay:?}"
    );
    let objs: Vec<_> = (0..200).map(|_| c.alloc().unwrap()).collect();
    let at: *const KmemCache<GlobalPages, RseqCpu> = &c;
    let mut inner_pages = 0;
    for &p in &objs {
        let b = GlobalPages.block_of(p.as_ptr()).unwrap();
        if b.order.get() < 4 {
            continue;
        }
        let q = b.head.as_ptr().wrapping_add(4096);
        if (q.addr() - b.head.as_ptr().addr()) % lay.size == 0 {
            continue;
        }
        inner_pages += 1;
        let byte = GlobalPages.page_tag(q);
        // SAFETY: not an object start: declined before any change; the
        // byte is of `c`'s slab.
        let r = unsafe { KmemCache::free_fast_tag_in(at, q, byte) };
        assert_eq!(
            r,
            FastFree::Slow,
            "{q:p}, inside an order-{} slab",
            b.order.get()
        );
    }
    assert!(inner_pages > 0, "objects in order-4+ slabs");
    for p in objs {
        // SAFETY: ours, freed once.
        unsafe { c.free(p) };
    }
}
