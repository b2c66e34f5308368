//! The Rust-native API: `allocator_api2::Allocator` for the caches
//! (feature `allocator-api2`) and typed caches with owning boxes.
#![cfg(not(loom))]

use std::alloc::Layout;
use std::sync::atomic::{AtomicUsize, Ordering};

use buddy::{Buddy, Config, Tunables};
use local_lock::std_platform::PerThread;
use local_lock::test_platform::TestPlatform;
use slub::{GlobalPages, SlabFlags, TypedCache};

const PAGE: usize = 4096;

/// A buddy over `pages` pages of heap memory (tests that must run out);
/// the memory is freed when it drops.
struct Small {
    buddy: Box<Buddy<TestPlatform>>,
    ptr: *mut u8,
    layout: Layout,
}

impl Small {
    fn new(pages: usize) -> Small {
        let layout = Layout::from_size_align(pages * PAGE, PAGE).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        let buddy = Box::new(Buddy::new(
            TestPlatform::locked(2),
            Config::new(PAGE, 4).with_tunables(Tunables::NO_MIN),
        ));
        // SAFETY: the memory lives as long as `Small` and only the buddy
        // uses it.
        unsafe { buddy.add_region(ptr, pages * PAGE, true).unwrap() };
        Small { buddy, ptr, layout }
    }
}

impl Drop for Small {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the caches over the
        // buddy are gone (they borrow `self`).
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

#[cfg(feature = "allocator-api2")]
mod api2 {
    use allocator_api2::alloc::Allocator;
    use allocator_api2::boxed::Box as ABox;
    use allocator_api2::vec::Vec as AVec;

    use super::*;
    use slub::KmemCache;

    static HEAP: slub::GlobalSlub = slub::GlobalSlub::new();

    #[test]
    #[cfg_attr(miri, ignore = "GlobalPages maps memory with mmap")]
    fn a_vec_of_u64_lives_in_an_8_byte_cache() {
        let cache =
            KmemCache::<_, _>::create("u64", 8, 8, SlabFlags::HARDENED, GlobalPages, PerThread)
                .unwrap();
        let empty: AVec<u64, _> = AVec::new_in(&cache);
        assert!(empty.is_empty());
        // One object holds one u64 (a push on an empty Vec asks for four).
        let mut v: AVec<u64, _> = AVec::with_capacity_in(1, &cache);
        v.push(42);
        assert_eq!(v[0], 42);
        // A second element does not fit the object: refused, not served
        // elsewhere.
        assert!(v.try_reserve(1).is_err());
        let b = ABox::new_in(7u64, &cache);
        assert_eq!(*b, 7);
        // Layouts the objects cannot hold.
        assert!((&cache).allocate(Layout::new::<[u64; 2]>()).is_err());
        assert!((&cache)
            .allocate(Layout::from_size_align(8, 16).unwrap())
            .is_err());
        drop((v, b));
        cache.validate();
    }

    #[test]
    #[cfg_attr(miri, ignore = "GlobalPages maps memory with mmap")]
    fn kmalloc_vectors_grow_in_place_within_a_class() {
        let km = HEAP.kmalloc();
        let mut v: AVec<u8, _> = AVec::with_capacity_in(9, km);
        let p = v.as_ptr();
        // kmalloc-16 holds 9..=16 bytes: growing to 16 stays in place.
        v.extend_from_slice(&[1; 9]);
        v.reserve_exact(7);
        assert_eq!(v.as_ptr(), p, "krealloc within the class");
        v.extend_from_slice(&[2; 7]);
        // Past the class: moved, contents kept.
        v.reserve_exact(100);
        v.extend_from_slice(&[3; 100]);
        assert_eq!(&v[..9], &[1; 9]);
        assert_eq!(&v[9..16], &[2; 7]);
        assert!(v[16..].iter().all(|&x| x == 3));
        // Large blocks (beyond kmalloc-8k) too.
        let big: AVec<u64, _> = {
            let mut b = AVec::with_capacity_in(100_000, km);
            b.resize(100_000, 5);
            b
        };
        assert!(big.iter().all(|&x| x == 5));
    }

    #[test]
    #[cfg_attr(miri, ignore = "GlobalPages maps memory with mmap")]
    fn allocate_zeroed_is_zero_at_every_size() {
        let km = HEAP.kmalloc();
        for size in [1usize, 8, 100, 4096, 3 << 20] {
            let l = Layout::from_size_align(size, 8).unwrap();
            let p = km.allocate(l).unwrap();
            // Dirty the block, free it, and ask for zeroed memory again.
            // SAFETY: `size` bytes of ours.
            unsafe {
                p.cast::<u8>().as_ptr().write_bytes(0xa5, size);
                km.deallocate(p.cast(), l);
            }
            let z = km.allocate_zeroed(l).unwrap();
            // SAFETY: `size` bytes of ours.
            let s = unsafe { std::slice::from_raw_parts(z.cast::<u8>().as_ptr(), size) };
            assert!(s.iter().all(|&b| b == 0), "size {size}");
            // SAFETY: allocated above with `l`.
            unsafe { km.deallocate(z.cast(), l) };
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "GlobalPages maps memory with mmap")]
    fn the_global_heap_backs_vectors_across_threads() {
        let mut v: AVec<u32, &'static slub::GlobalSlub> = AVec::new_in(&HEAP);
        v.extend(0..50_000);
        let t = std::thread::spawn(move || v.iter().map(|&x| u64::from(x)).sum::<u64>());
        assert_eq!(t.join().unwrap(), 49_999 * 50_000 / 2);
        // Shrinking, zero-sized and over-aligned layouts.
        let mut w: AVec<u8, _> = AVec::with_capacity_in(10_000, &HEAP);
        w.push(1);
        w.shrink_to_fit();
        assert_eq!(w[0], 1);
        let l = Layout::from_size_align(0, 64).unwrap();
        let z = (&HEAP).allocate(l).unwrap();
        assert_eq!(z.cast::<u8>().as_ptr() as usize % 64, 0);
        // SAFETY: from `allocate` with `l`.
        unsafe { (&HEAP).deallocate(z.cast(), l) };
        let l = Layout::from_size_align(100, 4096).unwrap();
        let a = (&HEAP).allocate(l).unwrap();
        assert_eq!(a.cast::<u8>().as_ptr() as usize % 4096, 0);
        // SAFETY: as above.
        unsafe { (&HEAP).deallocate(a.cast(), l) };
    }

    #[test]
    fn exhaustion_is_an_alloc_error() {
        let m = Small::new(16);
        let cache = KmemCache::<_, _, 2>::create(
            "tiny",
            512,
            8,
            SlabFlags::NONE,
            &*m.buddy,
            TestPlatform::locked(2),
        )
        .unwrap();
        let mut held = Vec::new();
        let l = Layout::new::<[u8; 512]>();
        while let Ok(p) = (&cache).allocate(l) {
            held.push(p);
            assert!(held.len() < 1000, "16 pages hold fewer objects");
        }
        for p in held {
            // SAFETY: allocated above with `l`.
            unsafe { (&cache).deallocate(p.cast(), l) };
        }
    }
}

#[derive(Debug)]
struct Counted(u64);

static DROPS: AtomicUsize = AtomicUsize::new(0);

impl Drop for Counted {
    fn drop(&mut self) {
        DROPS.fetch_add(1, Ordering::Relaxed);
    }
}

static COUNTED: TypedCache<Counted, GlobalPages, PerThread> = TypedCache::new(
    "counted",
    SlabFlags::HARDENED,
    slub::Geometry::new(PerThread::OWNED_SLOTS + 1),
    GlobalPages,
    PerThread,
);

#[test]
#[cfg_attr(miri, ignore = "GlobalPages maps memory with mmap")]
fn typed_boxes_drop_their_value_and_free_from_any_thread() {
    let before = DROPS.load(Ordering::Relaxed);
    let boxes: Vec<_> = (0..1000).map(|i| COUNTED.new_box(Counted(i))).collect();
    assert_eq!(boxes[999].0, 999);
    let t = std::thread::spawn(move || {
        let sum: u64 = boxes.iter().map(|b| b.0).sum();
        drop(boxes);
        sum
    });
    assert_eq!(t.join().unwrap(), 999 * 1000 / 2);
    assert_eq!(DROPS.load(Ordering::Relaxed) - before, 1000);
    // into_inner hands the value back (dropped here, once).
    let b = COUNTED.new_box(Counted(5));
    let v = slub::CacheBox::into_inner(b);
    assert_eq!(v.0, 5);
    drop(v);
    assert_eq!(DROPS.load(Ordering::Relaxed) - before, 1001);
    COUNTED.cache().flush_all();
    COUNTED.cache().validate();
}

#[test]
fn try_new_hands_the_value_back_when_memory_runs_out() {
    let m = Small::new(8);
    let c = TypedCache::<[u64; 64], _, _, 2>::create(
        "big",
        SlabFlags::NONE,
        &*m.buddy,
        TestPlatform::locked(2),
    )
    .unwrap();
    let mut held = Vec::new();
    let err = loop {
        match c.try_new([7; 64]) {
            Ok(x) => held.push(x),
            Err(e) => break e,
        }
        assert!(held.len() < 100, "8 pages hold fewer objects");
    };
    assert_eq!(err.value, [7; 64]);
    let msg = err.to_string();
    assert!(
        msg.contains("slub big") && msg.contains("out of memory"),
        "{msg}"
    );
    // Freed boxes make room again.
    held.pop();
    assert!(c.try_new([1; 64]).is_ok());
}

#[test]
#[cfg_attr(miri, ignore = "GlobalPages maps memory with mmap")]
fn zero_sized_types_get_distinct_objects() {
    let c =
        TypedCache::<(), _, _>::create("unit", SlabFlags::NONE, GlobalPages, PerThread).unwrap();
    let a = c.new_box(());
    let b = c.new_box(());
    assert_ne!(
        slub::CacheBox::into_raw(a).as_ptr(),
        slub::CacheBox::into_raw(b).as_ptr()
    );
}

/// Every error type of the crate is a `core::error::Error` (and can be
/// boxed as `Box<dyn Error + Send + Sync>`).
#[test]
fn every_error_type_is_a_core_error() {
    fn is_error<E: core::error::Error + Send + Sync + 'static>() {}
    is_error::<slub::CacheError>();
    is_error::<slub::FreeError>();
    is_error::<slub::CacheBusy>();
    is_error::<slub::OutOfMemory<u64>>();
    let e: Box<dyn core::error::Error + Send + Sync> = Box::new(slub::CacheError::ZeroSize);
    assert_eq!(e.to_string(), "slub: object size 0");
}

#[test]
fn krealloc_follows_the_kernel() {
    let m = Small::new(16);
    let k = slub::Kmalloc::<_, _, 2>::with_config(
        &*m.buddy,
        TestPlatform::locked(2),
        slub::Geometry::new(2),
        SlabFlags::HARDENED,
        0,
    );
    // SAFETY: every pointer is this kmalloc's, each freed once.
    unsafe {
        // NULL: a kmalloc.
        let p = k.krealloc(std::ptr::null_mut(), 24, 8).unwrap();
        assert_eq!(k.ksize(p.as_ptr()), 32);
        p.as_ptr().write_bytes(9, 24);
        // Within ksize: in place; beyond it: moved, contents kept.
        assert_eq!(k.krealloc(p.as_ptr(), 32, 8), Some(p));
        let q = k.krealloc(p.as_ptr(), 100, 8).unwrap();
        assert_ne!(q, p);
        assert_eq!(std::slice::from_raw_parts(q.as_ptr(), 24), &[9; 24]);
        // Out of memory: None, and the old block is intact and live.
        assert_eq!(k.krealloc(q.as_ptr(), 1 << 30, 8), None);
        assert_eq!(*q.as_ptr().add(23), 9);
        assert_eq!(k.ksize(q.as_ptr()), 128);
        // Size 0: freed, ZERO_SIZE_PTR back (and ksize of it is 0).
        let z = k.krealloc(q.as_ptr(), 0, 8).unwrap();
        assert_eq!(z, slub::ZERO_SIZE_PTR);
        assert_eq!(k.ksize(z.as_ptr()), 0);
        assert_eq!(k.ksize(std::ptr::null_mut()), 0);
        // ZERO_SIZE_PTR is like NULL.
        let r = k.krealloc(z.as_ptr(), 8, 8).unwrap();
        k.kfree(r.as_ptr());
    }
    k.validate();
}

/// Constructors (`kmem_cache_create(..., ctor)`): an object of 40 pattern
/// bytes and a state word, which every user restores before freeing.
mod ctor {
    use super::*;
    use std::cell::Cell;
    use std::mem::MaybeUninit;
    use std::ptr::NonNull;

    use slub::{KmemCache, SlubStat};

    #[derive(Debug)]
    #[repr(C)]
    struct Obj {
        pattern: [u8; 40],
        state: u64,
    }

    std::thread_local! {
        /// Constructor calls on this thread (the single-threaded tests
        /// run every path on their own thread).
        static BUILT: Cell<usize> = const { Cell::new(0) };
    }

    fn obj_ctor(slot: &mut MaybeUninit<Obj>) -> &mut Obj {
        BUILT.with(|b| b.set(b.get() + 1));
        slot.write(Obj {
            pattern: [0xa5; 40],
            state: 0,
        })
    }

    fn raw_ctor(p: NonNull<u8>) {
        BUILT.with(|b| b.set(b.get() + 1));
        // SAFETY: an object of 48 bytes (the raw caches below), ours.
        unsafe {
            p.as_ptr().write_bytes(0xa5, 40);
            p.as_ptr().add(40).cast::<u64>().write(0);
        }
    }

    fn constructed(o: &Obj) -> bool {
        o.pattern == [0xa5; 40] && o.state == 0
    }

    /// Every object of every slab made so far was constructed once.
    /// (`extra`: constructor calls outside slab population, those of
    /// `CacheBox::into_inner`.)
    fn built_once<S: slub::SlabSource, P: local_lock::Platform, const N: usize>(
        c: &KmemCache<S, P, N>,
        extra: usize,
        what: &str,
    ) {
        let st = c.stats();
        assert_eq!(st.get(SlubStat::ORDER_FALLBACK), 0, "{what}");
        assert_eq!(
            BUILT.with(Cell::get),
            st.get(SlubStat::ALLOC_SLAB) as usize * c.layout().oo.objects as usize + extra,
            "{what}: one constructor call per object per slab"
        );
    }

    const CONFIGS: [(SlabFlags, &str); 6] = [
        (SlabFlags::NONE, "plain"),
        (SlabFlags::HARDENED, "hardened"),
        (
            SlabFlags::HARDENED.union(SlabFlags::RANDOM_FREELIST),
            "hardened random",
        ),
        (SlabFlags::DEBUG_ALL, "debug"),
        (
            SlabFlags::POISON.union(SlabFlags::RED_ZONE),
            "poison + red zone",
        ),
        (
            SlabFlags::HARDENED.union(SlabFlags::DEBUG_ALL),
            "hardened debug",
        ),
    ];

    /// Objects allocated, modified then restored, freed (locally, remotely,
    /// in bulk) and allocated again are still constructed, and the
    /// constructor ran once per object per slab: every flag set, with and
    /// without sheaves, on the lockless and the locked platforms.
    #[test]
    fn typed_objects_stay_constructed_across_every_path() {
        let n = if cfg!(miri) { 40 } else { 400 };
        for (fi, (flags, what)) in CONFIGS.into_iter().enumerate() {
            for (si, sheaves) in [0, 16].into_iter().enumerate() {
                for (pi, platform) in [TestPlatform::pinned(2), TestPlatform::locked(2)]
                    .into_iter()
                    .enumerate()
                {
                    // Under miri, each flag set once, the four
                    // sheaf/platform pairs in turn.
                    if cfg!(miri) && fi % 4 != si * 2 + pi {
                        continue;
                    }
                    let what = format!("{what}, sheaves {sheaves}, {platform:?}");
                    let m = Small::new(if cfg!(miri) { 64 } else { 256 });
                    BUILT.with(|b| b.set(0));
                    let c = TypedCache::<Obj, _, _, 2>::create("obj", flags, &*m.buddy, platform)
                        .unwrap()
                        .with_ctor(obj_ctor)
                        .with_sheaves(sheaves);
                    assert!(
                        c.cache().layout().offset >= 48,
                        "{what}: free pointer outside"
                    );
                    let mut boxes: Vec<_> = (0..n).map(|_| c.alloc().unwrap()).collect();
                    for b in &mut boxes {
                        assert!(constructed(b), "{what}: fresh {b:?}");
                        // Used, then restored before the free.
                        b.pattern[3] = 1;
                        b.state = 99;
                        b.pattern[3] = 0xa5;
                        b.state = 0;
                    }
                    built_once(c.cache(), 0, &what);
                    // Half freed here, half from the other CPU (remote frees).
                    let remote = boxes.split_off(n / 2);
                    drop(boxes);
                    let p = c.cache().platform();
                    p.on_cpu(1, || drop(remote));
                    // Bulk through the raw cache, then one at a time again.
                    let mut raw = vec![None; n / 3];
                    assert_eq!(c.cache().alloc_bulk(&mut raw), n / 3, "{what}");
                    let raw: Vec<NonNull<u8>> = raw.into_iter().map(Option::unwrap).collect();
                    for o in &raw {
                        // SAFETY: a live object of the cache, ours.
                        assert!(constructed(unsafe { o.cast::<Obj>().as_ref() }), "{what}");
                    }
                    // SAFETY: ours, each freed once, constructed.
                    unsafe { c.cache().free_bulk(&raw) };
                    let again: Vec<_> = (0..n).map(|_| c.alloc().unwrap()).collect();
                    assert!(again.iter().all(|b| constructed(b)), "{what}");
                    built_once(c.cache(), 0, &what);
                    // into_inner constructs the object again before the free.
                    let v = slub::CacheBox::into_inner(
                        c.try_new(Obj {
                            pattern: [1; 40],
                            state: 5,
                        })
                        .unwrap(),
                    );
                    assert_eq!((v.pattern[0], v.state), (1, 5));
                    drop(again);
                    let again: Vec<_> = (0..n).map(|_| c.alloc().unwrap()).collect();
                    assert!(
                        again.iter().all(|b| constructed(b)),
                        "{what}: after into_inner"
                    );
                    drop(again);
                    built_once(c.cache(), 1, &what);
                    c.cache().flush_all();
                    c.cache().validate();
                }
            }
        }
    }

    /// The raw constructor of `KmemCache::with_ctor`, the same checks
    /// through pointers; a shrink gives the slabs back, and new slabs are
    /// constructed again.
    #[test]
    fn raw_ctor_runs_per_new_slab() {
        // Under miri (time): the hardened and the debug sets, fewer objects
        // (the typed test covers every set there).
        let n = if cfg!(miri) { 80 } else { 200 };
        for (fi, (flags, what)) in CONFIGS.into_iter().enumerate() {
            if cfg!(miri) && fi != 1 && fi != 3 {
                continue;
            }
            let m = Small::new(64);
            BUILT.with(|b| b.set(0));
            let c = KmemCache::<_, _, 2>::create(
                "raw",
                48,
                8,
                flags,
                &*m.buddy,
                TestPlatform::locked(2),
            )
            .unwrap()
            .with_ctor(raw_ctor)
            .with_sheaves(8);
            assert!(c.has_ctor());
            let objs: Vec<_> = (0..n).map(|_| c.alloc().unwrap()).collect();
            for o in &objs {
                // SAFETY: live objects of the cache, ours.
                assert!(constructed(unsafe { o.cast::<Obj>().as_ref() }), "{what}");
            }
            built_once(&c, 0, what);
            // SAFETY: ours, each freed once, constructed.
            unsafe { c.free_bulk(&objs) };
            c.flush_all();
            c.shrink();
            let slabs_before = c.stats().get(SlubStat::ALLOC_SLAB);
            let objs: Vec<_> = (0..n).map(|_| c.alloc().unwrap()).collect();
            for o in &objs {
                // SAFETY: as above.
                assert!(constructed(unsafe { o.cast::<Obj>().as_ref() }), "{what}");
            }
            assert!(
                c.stats().get(SlubStat::ALLOC_SLAB) > slabs_before,
                "{what}: slabs made again"
            );
            built_once(&c, 0, what);
            // SAFETY: as above.
            unsafe { c.free_bulk(&objs) };
            c.validate();
        }
    }

    /// A double free is still refused with the free pointer after the
    /// object (hardened: by its encoded free pointer; others: the naive
    /// check).
    #[test]
    fn double_frees_are_refused_with_a_ctor() {
        for flags in [SlabFlags::HARDENED, SlabFlags::NONE] {
            let m = Small::new(16);
            let c = KmemCache::<_, _, 2>::create(
                "df",
                48,
                8,
                flags,
                &*m.buddy,
                TestPlatform::locked(2),
            )
            .unwrap()
            .with_ctor(raw_ctor);
            let a = c.alloc().unwrap();
            let b = c.alloc().unwrap();
            // SAFETY: ours; the second free of `a` is refused, not done.
            unsafe {
                c.try_free(a).unwrap();
                if flags == SlabFlags::HARDENED {
                    c.try_free(b).unwrap();
                }
                assert!(c.try_free(a).is_err(), "{flags:?}");
            }
            // The object is still constructed.
            // SAFETY: a free object of a ctor cache: nothing of the cache's in it.
            assert!(constructed(unsafe { a.cast::<Obj>().as_ref() }));
        }
    }

    fn lying_ctor(_slot: &mut MaybeUninit<u64>) -> &mut u64 {
        Box::leak(Box::new(7))
    }

    /// A typed constructor must return the object it was given.
    #[test]
    #[should_panic(expected = "not the object")]
    #[cfg_attr(miri, ignore = "leaks by design")]
    fn a_ctor_that_does_not_initialise_the_object_is_refused() {
        let m = Small::new(16);
        let c = TypedCache::<u64, _, _, 2>::create(
            "lie",
            SlabFlags::NONE,
            &*m.buddy,
            TestPlatform::locked(2),
        )
        .unwrap()
        .with_ctor(lying_ctor);
        let _ = c.alloc();
    }

    static SHARED_BUILT: AtomicUsize = AtomicUsize::new(0);

    fn shared_ctor(slot: &mut MaybeUninit<Obj>) -> &mut Obj {
        SHARED_BUILT.fetch_add(1, Ordering::Relaxed);
        slot.write(Obj {
            pattern: [0xa5; 40],
            state: 0,
        })
    }

    static SHARED: TypedCache<Obj, GlobalPages, PerThread> = TypedCache::new(
        "shared-ctor",
        SlabFlags::HARDENED,
        slub::Geometry::new(PerThread::OWNED_SLOTS + 1),
        GlobalPages,
        PerThread,
    )
    .with_ctor(shared_ctor);

    /// Constructed boxes cross threads (remote frees of a `static` ctor
    /// cache), and come back constructed.
    #[test]
    #[cfg_attr(miri, ignore = "GlobalPages maps memory with mmap")]
    fn constructed_boxes_cross_threads() {
        let boxes: Vec<_> = (0..2000).map(|_| SHARED.alloc().unwrap()).collect();
        let t = std::thread::spawn(move || {
            assert!(boxes.iter().all(|b| constructed(b)));
            drop(boxes);
        });
        t.join().unwrap();
        let again: Vec<_> = (0..2000).map(|_| SHARED.alloc().unwrap()).collect();
        assert!(again.iter().all(|b| constructed(b)));
        let st = SHARED.cache().stats();
        assert_eq!(
            SHARED_BUILT.load(Ordering::Relaxed),
            st.get(SlubStat::ALLOC_SLAB) as usize * SHARED.cache().layout().oo.objects as usize
        );
    }

    /// The rseq sheaves (unhardened: they write nothing into objects) and
    /// the hardened cache on the same platform.
    #[test]
    #[cfg_attr(miri, ignore = "GlobalPages maps memory with mmap")]
    fn rseq_caches_keep_objects_constructed() {
        use local_lock::std_platform::RseqCpu;
        for flags in [SlabFlags::NONE, SlabFlags::HARDENED] {
            BUILT.with(|b| b.set(0));
            let c = TypedCache::<Obj, _, _>::create("rseq-ctor", flags, GlobalPages, RseqCpu)
                .unwrap()
                .with_ctor(obj_ctor)
                .with_sheaves(32);
            for round in 0..3 {
                let mut boxes: Vec<_> = (0..1000).map(|_| c.alloc().unwrap()).collect();
                for b in &mut boxes {
                    assert!(constructed(b), "{flags:?} round {round}");
                    b.state = 1;
                    b.state = 0;
                }
                drop(boxes);
            }
            if flags == SlabFlags::NONE {
                assert_eq!(
                    c.cache().restartable(),
                    local_lock::Platform::restartable(&RseqCpu)
                );
            } else {
                assert!(
                    !c.cache().restartable(),
                    "hardened ctor caches take the slab paths"
                );
                assert_eq!(c.cache().sheaf_capacity(), 0);
            }
            built_once(c.cache(), 0, &format!("{flags:?}"));
        }
    }
}
