//! SLUB's sheaves over restartable sequences (`RseqCpu`, issue #16):
//! memory cached per CPU rather than per thread, any number of threads,
//! and every object handed out once.
#![cfg(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom)))]

use std::ptr::NonNull;
use std::sync::{Barrier, Mutex};

use local_lock::std_platform::{PerThread, RseqCpu};
use local_lock::Platform;
use slub::{GlobalPages, GlobalSlub, KmemCache, SlabFlags};

/// Objects cached after `threads` live threads each allocated and freed
/// `per` objects (all threads still alive when counted): the objects the
/// cache's slabs hold, in use or cached, minus none in use. The threads
/// take turns (one allocates and frees at a time), so how many objects are
/// ever live at once does not depend on how the scheduler interleaves them
/// (on a loaded machine, threads preempted with their objects in hand made
/// the per-CPU figure grow to the per-thread one).
fn cached_objects<P: Platform + Copy + Send + Sync>(p: P, threads: usize, per: usize) -> usize {
    let c =
        KmemCache::<GlobalPages, P>::create("cached", 64, 8, SlabFlags::HARDENED, GlobalPages, p)
            .unwrap()
            .with_sheaves(128);
    let done = Barrier::new(threads + 1);
    let counted = Barrier::new(threads + 1);
    let turn = Mutex::new(());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let _turn = turn.lock().unwrap();
                let v: Vec<NonNull<u8>> = (0..per).map(|_| c.alloc().unwrap()).collect();
                for o in v {
                    // SAFETY: ours, freed once.
                    unsafe { c.free(o) };
                }
                drop(_turn);
                done.wait();
                counted.wait();
            });
        }
        done.wait();
        let n = c.slabinfo().num_objs;
        counted.wait();
        n
    })
}

#[test]
fn cached_memory_is_bounded_by_cpus_not_threads() {
    if !RseqCpu.restartable() {
        eprintln!("no rseq here: nothing to test");
        return;
    }
    let (threads, per) = (48, 128);
    let per_cpu = cached_objects(RseqCpu, threads, per);
    let per_thread = cached_objects(PerThread, threads, per);
    eprintln!("objects cached by {threads} threads: per CPU {per_cpu}, per thread {per_thread}");
    // Per-thread sheaves keep each thread's 128 objects; per-CPU sheaves
    // keep at most main + spare per CPU, the barn's full sheaves and the
    // slabs' partially used remainder.
    assert!(
        per_cpu * 2 < per_thread,
        "per-CPU sheaves should cache far less: {per_cpu} vs {per_thread}"
    );
    assert!(
        per_cpu < (RseqCpu.nr_cpus() * 2 + 10) * 128 + 64 * 64,
        "{per_cpu}"
    );
}

static HEAP: GlobalSlub = GlobalSlub::new();

#[test]
fn hundreds_of_threads_each_object_handed_out_once() {
    use std::alloc::{GlobalAlloc, Layout};
    let threads = 256;
    // A quarter of each thread's objects are freed by its neighbour.
    let mailboxes: Vec<Mutex<Vec<usize>>> = (0..threads).map(|_| Mutex::new(Vec::new())).collect();
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (mailboxes, start) = (&mailboxes, &start);
            s.spawn(move || {
                start.wait();
                let mut rng = 0x2545_f491_4f6c_dd1du64 ^ (t as u64 + 1);
                let mut live: Vec<(usize, usize)> = Vec::new();
                for i in 0..2000usize {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let size = 16 + (rng as usize % 1009);
                    let l = Layout::from_size_align(size, 8).unwrap();
                    // SAFETY: a non-zero layout.
                    let p = unsafe { HEAP.alloc(l) };
                    assert!(!p.is_null());
                    // SAFETY: `size` fresh bytes: stamp them with who owns them.
                    unsafe {
                        p.cast::<u64>().write((t as u64) << 32 | i as u64);
                        p.add(size - 1).write(t as u8);
                    }
                    live.push((p as usize, size));
                    if live.len() > 32 {
                        let (q, sz) = live.swap_remove(rng as usize % live.len());
                        // SAFETY: ours, live: the stamp must be intact.
                        unsafe {
                            assert_eq!(
                                *(q as *const u64) >> 32,
                                t as u64,
                                "object handed out twice"
                            );
                            assert_eq!(
                                *((q + sz - 1) as *const u8),
                                t as u8,
                                "object handed out twice"
                            );
                        }
                        if i % 4 == 0 {
                            mailboxes[(t + 1) % threads]
                                .lock()
                                .unwrap()
                                .push(q | (sz << 48));
                        } else {
                            // SAFETY: ours, freed once with its layout.
                            unsafe {
                                HEAP.dealloc(q as *mut u8, Layout::from_size_align(sz, 8).unwrap())
                            };
                        }
                    }
                    if i % 64 == 0 {
                        let mine = std::mem::take(&mut *mailboxes[t].lock().unwrap());
                        for e in mine {
                            let (q, sz) = (e & ((1 << 48) - 1), e >> 48);
                            // SAFETY: handed over by its owner, freed once.
                            unsafe {
                                HEAP.dealloc(q as *mut u8, Layout::from_size_align(sz, 8).unwrap())
                            };
                        }
                    }
                }
                for (q, sz) in live {
                    // SAFETY: ours, freed once.
                    unsafe { HEAP.dealloc(q as *mut u8, Layout::from_size_align(sz, 8).unwrap()) };
                }
            });
        }
    });
    for m in &mailboxes {
        for e in m.lock().unwrap().drain(..) {
            let (q, sz) = (e & ((1 << 48) - 1), e >> 48);
            // SAFETY: handed over, freed once.
            unsafe {
                HEAP.dealloc(
                    q as *mut u8,
                    std::alloc::Layout::from_size_align(sz, 8).unwrap(),
                )
            };
        }
    }
    if RseqCpu.restartable() {
        assert!(
            HEAP.kmalloc().caches()[3].restartable(),
            "GlobalSlub's caches use rseq"
        );
    }
    HEAP.kmalloc().validate();
}

/// A hardened cache of 64 B objects on `RseqCpu` with sheaves of 32.
fn rseq_cache(name: &'static str) -> KmemCache<GlobalPages, RseqCpu> {
    KmemCache::create(name, 64, 8, SlabFlags::HARDENED, GlobalPages, RseqCpu)
        .unwrap()
        .with_sheaves(32)
}

/// `CONFIG_SLUB_STATS` (feature `stats`): the restartable fast paths
/// count; without it they count nothing (nothing but the pop and push).
#[test]
fn restartable_fast_paths_count_only_with_the_stats_feature() {
    use slub::SlubStat;
    if !RseqCpu.restartable() {
        return;
    }
    let c = rseq_cache("st");
    // Warm up: a sheaf installed, the range recorded.
    // SAFETY: ours, freed once.
    unsafe { c.free(c.alloc().unwrap()) };
    let before = c.stats();
    for _ in 0..100 {
        let o = c.alloc().unwrap();
        // SAFETY: ours, freed once.
        unsafe { c.free(o) };
    }
    let after = c.stats();
    let d = |s| after.get(s) - before.get(s);
    let expect = if cfg!(feature = "stats") { 100 } else { 0 };
    assert_eq!(
        (d(SlubStat::ALLOC_PCS), d(SlubStat::FREE_PCS)),
        (expect, expect)
    );
}

/// Bulk allocation and free go through the restartable sheaves (one pop
/// or push per object), as the locked platforms' bulk paths go through
/// theirs (`alloc_from_pcs_bulk`): counted as ALLOC_PCS / FREE_PCS.
#[cfg(feature = "stats")]
#[test]
fn bulk_goes_through_the_restartable_sheaves() {
    use slub::SlubStat;
    if !RseqCpu.restartable() {
        return;
    }
    let c = rseq_cache("bulk");
    let before = c.stats();
    let mut out = [None; 64];
    assert_eq!(c.alloc_bulk(&mut out), 64);
    let objs: Vec<NonNull<u8>> = out.iter().map(|o| o.unwrap()).collect();
    // SAFETY: ours, each freed once.
    unsafe { c.free_bulk(&objs) };
    let after = c.stats();
    let d = |s| after.get(s) - before.get(s);
    assert_eq!((d(SlubStat::ALLOC_PCS), d(SlubStat::FREE_PCS)), (64, 64));
}

/// Pins the calling thread to the CPU it runs on (so a test's frees and
/// allocations meet one CPU's sheaves).
fn pin_here() {
    // SAFETY: plain libc calls on this thread's affinity mask.
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(cpu >= 0);
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
            0
        );
    }
}

/// On this thread, pinned: a cache `name` and `free a, free b, free a`;
/// returns the cache, `a`, and whether the second free of `a` was refused
/// at the free (a cache the page map names reads the marker at every
/// free) rather than taken by the sheaf (found when it leaves).
fn aba(name: &'static str) -> (KmemCache<GlobalPages, RseqCpu>, NonNull<u8>, bool) {
    pin_here();
    let c = rseq_cache(name);
    let (a, b) = (c.alloc().unwrap(), c.alloc().unwrap());
    // SAFETY: the double free under test.
    let refused = unsafe {
        c.free(a);
        c.free(b);
        c.try_free(a)
    };
    if let Err(e) = refused {
        assert_eq!(e.kind, slub::FreeErrorKind::DoubleFree, "{e}");
    }
    (c, a, refused.is_err())
}

/// `free a, free b, free a` on the restartable sheaves of a cache the
/// page map names (`GlobalPages` caches are): the free reads the marker
/// and refuses the second free before changing anything; nothing is ever
/// handed out twice.
#[test]
fn double_free_with_frees_between_is_refused_at_the_free() {
    if !RseqCpu.restartable() {
        return;
    }
    std::thread::spawn(|| {
        let (c, a, refused) = aba("aba-free");
        assert!(refused, "the free read {a:p}'s marker");
        let mut seen = Vec::new();
        for _ in 0..4 {
            let x = c.alloc().unwrap();
            assert!(!seen.contains(&x), "{x:p} handed out twice");
            seen.push(x);
        }
        for x in seen {
            // SAFETY: ours, freed once.
            unsafe { c.free(x) };
        }
        c.shrink();
    })
    .join()
    .unwrap();
}

/// As above, then the sheaves are flushed to the slabs: every object left
/// them once (the refused free changed nothing).
#[test]
fn double_free_with_frees_between_leaves_the_sheaves_intact() {
    if !RseqCpu.restartable() {
        return;
    }
    std::thread::spawn(|| {
        let (c, _, refused) = aba("aba-flush");
        assert!(refused);
        c.flush_local();
        c.shrink();
        c.validate();
    })
    .join()
    .unwrap();
}

/// An immediate double free (`free a, free a`) is still refused by the
/// free itself: `a` is the sheaf's top entry.
#[test]
fn immediate_double_free_is_refused_by_the_free() {
    if !RseqCpu.restartable() {
        return;
    }
    let c = rseq_cache("aa");
    let a = c.alloc().unwrap();
    // SAFETY: the double free under test; refused before any change.
    unsafe {
        c.free(a);
        assert!(c.try_free(a).is_err());
    }
    let (x, y) = (c.alloc().unwrap(), c.alloc().unwrap());
    assert_ne!(x, y);
}

/// `__pcs_replace_full_main`: a free that finds the main sheaf full and no
/// spare keeps the full main as the spare and continues on an empty sheaf
/// (from the barn, or new), as the kernel and the locked sheaves do; the
/// two sheaves then absorb a swing of up to two sheaves without the barn.
/// Before, the restartable free traded the full main at the barn and left
/// the spare missing, so every crossing of one sheaf's boundary took the
/// barn lock (`slub-threads` at one thread: one barn trade per ~66
/// allocations).
#[test]
fn a_full_main_without_spare_becomes_the_spare() {
    use slub::SlubStat;
    if !RseqCpu.restartable() {
        return;
    }
    std::thread::spawn(|| {
        pin_here();
        let c = rseq_cache("spare");
        // A swing of 40 objects: more than one sheaf of 32, less than two.
        let swing = |c: &KmemCache<GlobalPages, RseqCpu>| {
            let v: Vec<NonNull<u8>> = (0..40).map(|_| c.alloc().unwrap()).collect();
            for o in v {
                // SAFETY: ours, freed once.
                unsafe { c.free(o) };
            }
        };
        // Warm up: the sheaves made and filled.
        swing(&c);
        swing(&c);
        let before = c.stats();
        for _ in 0..100 {
            swing(&c);
        }
        let after = c.stats();
        let d = |s| after.get(s) - before.get(s);
        let traded = d(SlubStat::BARN_GET)
            + d(SlubStat::BARN_PUT)
            + d(SlubStat::SHEAF_REFILL)
            + d(SlubStat::SHEAF_FLUSH);
        assert!(
            traded <= 2,
            "100 swings of 40 objects over sheaves of 32 went to the barn or slabs {traded} times \
             (barn get {}, put {}, refill {}, flush {}; swaps {})",
            d(SlubStat::BARN_GET),
            d(SlubStat::BARN_PUT),
            d(SlubStat::SHEAF_REFILL),
            d(SlubStat::SHEAF_FLUSH),
            d(SlubStat::SHEAF_SWAP)
        );
    })
    .join()
    .unwrap();
}

/// The restartable slow paths leave the main sheaf half full (a half
/// sheaf moves between main and spare) instead of swapping whole sheaves,
/// which leaves the new main at the edge the program swings around: a
/// random walk of allocations and frees (as `slub-threads`'s mixed sizes
/// make per class) takes a slow path rarely.
#[test]
fn a_random_walk_rarely_leaves_the_sheaves() {
    use slub::SlubStat;
    if !RseqCpu.restartable() {
        return;
    }
    std::thread::spawn(|| {
        pin_here();
        let c = rseq_cache("walk");
        let mut live: Vec<NonNull<u8>> = Vec::new();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut step = |c: &KmemCache<GlobalPages, RseqCpu>, live: &mut Vec<NonNull<u8>>| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if (rng & 1 == 0 && live.len() < 256) || live.is_empty() {
                live.push(c.alloc().unwrap());
            } else {
                // SAFETY: ours, freed once.
                unsafe { c.free(live.pop().unwrap()) };
            }
        };
        for _ in 0..1000 {
            step(&c, &mut live);
        }
        let before = c.stats();
        for _ in 0..20_000 {
            step(&c, &mut live);
        }
        let after = c.stats();
        let d = |s| after.get(s) - before.get(s);
        let slow = d(SlubStat::SHEAF_SWAP) + d(SlubStat::BARN_GET) + d(SlubStat::BARN_PUT);
        eprintln!(
            "slow paths in 20000 steps: {slow} (swaps {}, barn get {}, put {})",
            d(SlubStat::SHEAF_SWAP),
            d(SlubStat::BARN_GET),
            d(SlubStat::BARN_PUT)
        );
        assert!(slow <= 200, "{slow} slow paths in 20000 steps");
        for o in live {
            // SAFETY: ours, freed once.
            unsafe { c.free(o) };
        }
    })
    .join()
    .unwrap();
}

/// A young cache's sheaf refill takes one slab's worth of objects, not a
/// whole sheaf's: a process that uses a few objects of a class starts with
/// one slab of it (128-byte objects, 32 to a page, sheaves of 128: one
/// page, not four), and the cache grows a slab per refill until its slabs
/// hold a sheaf's worth; then refills fill the sheaf.
#[test]
fn young_cache_refills_one_slab_at_a_time() {
    fn check<P: Platform + Copy + Send + Sync>(p: P) {
        let c = KmemCache::<GlobalPages, P>::create(
            "young",
            128,
            8,
            SlabFlags::HARDENED,
            GlobalPages,
            p,
        )
        .unwrap()
        .with_sheaves(128);
        let per_slab = c.slabinfo().objperslab;
        assert!(per_slab < 128, "{per_slab} objects per slab");
        let first = c.alloc().unwrap();
        assert_eq!(c.nr_slabs(), 1, "the first refill made one slab");
        // Take every object the cache has: each refill adds one slab
        // until the slabs hold a sheaf's worth.
        let mut v = vec![first];
        while c.nr_slabs() * per_slab < 128 {
            let before = c.nr_slabs();
            for _ in 0..per_slab {
                v.push(c.alloc().unwrap());
            }
            assert!(c.nr_slabs() <= before + 1, "one slab per refill");
        }
        for o in v {
            // SAFETY: ours, freed once.
            unsafe { c.free(o) };
        }
    }
    check(PerThread);
    if RseqCpu.restartable() {
        check(RseqCpu);
    }
}

/// A young cache's slabs are of the minimum order: 1 KiB objects (order-3
/// slabs of 32 preferred, with `nr_cpus` of this machine or more) start
/// with pages of 4, one per refill, until they hold a preferred slab's
/// objects; the next slabs are of the preferred order.
#[test]
fn young_slabs_are_of_the_minimum_order() {
    fn check<P: Platform + Copy + Send + Sync>(p: P) {
        let c = KmemCache::<GlobalPages, P>::create(
            "first-slab",
            1024,
            8,
            SlabFlags::HARDENED,
            GlobalPages,
            p,
        )
        .unwrap()
        .with_sheaves(64);
        let info = c.slabinfo();
        assert!(
            info.pagesperslab > 1,
            "{} pages per slab",
            info.pagesperslab
        );
        let mut v = vec![c.alloc().unwrap()];
        assert_eq!(c.nr_slabs(), 1);
        assert_eq!(c.slabinfo().num_objs, 4, "one page of 1 KiB objects");
        // Every slab made while the slabs hold fewer than a preferred
        // slab's objects is a page of 4.
        while c.slabinfo().num_objs < info.objperslab {
            v.push(c.alloc().unwrap());
            let now = c.slabinfo();
            assert_eq!(
                now.num_objs,
                4 * now.num_slabs,
                "young slabs are single pages ({} live)",
                v.len()
            );
        }
        let young = c.nr_slabs();
        assert_eq!(young * 4, info.objperslab);
        while c.nr_slabs() == young {
            v.push(c.alloc().unwrap());
        }
        assert_eq!(
            c.slabinfo().num_objs,
            4 * young + info.objperslab,
            "then slabs of the preferred order"
        );
        for o in v {
            // SAFETY: ours, freed once.
            unsafe { c.free(o) };
        }
    }
    check(PerThread);
    if RseqCpu.restartable() {
        check(RseqCpu);
    }
}

/// A plain `GlobalSlub` (no hardening: its inline free pushes with no
/// marker and no check of the sheaf's top, as the kernel's unhardened
/// free) freeing an object twice in a row: both copies reach the sheaf,
/// and its flush finds the second as the head of the run's chain. Without
/// that check the object was linked to itself, and only a later walk of
/// the slab's freelist found the cycle (the freelist already corrupt).
#[test]
fn a_plain_flush_finds_an_object_freed_twice_in_a_row() {
    use std::alloc::{GlobalAlloc, Layout};
    if !RseqCpu.restartable() {
        return;
    }
    // (A 64 MiB stack: a `GlobalSlub` is over 400 KiB.)
    let r = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(|| {
            pin_here();
            let h = GlobalSlub::with_flags(SlabFlags::NONE);
            let l = Layout::from_size_align(64, 8).unwrap();
            // SAFETY: the bug under test: objs[3] freed twice, the others once.
            unsafe {
                let objs: Vec<*mut u8> = (0..8).map(|_| h.alloc(l)).collect();
                for &o in &objs[..4] {
                    h.dealloc(o, l);
                }
                h.dealloc(objs[3], l);
                for &o in &objs[4..] {
                    h.dealloc(o, l);
                }
            }
            h.trim();
            // Without the check: the object comes back twice.
            // SAFETY: a valid layout.
            let again: Vec<*mut u8> = (0..64).map(|_| unsafe { h.alloc(l) }).collect();
            let mut sorted = again.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), again.len(), "an object handed out twice");
        })
        .unwrap()
        .join();
    let e = r.expect_err("the flush must refuse the double free");
    let msg = e
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| e.downcast_ref::<&str>().copied())
        .unwrap_or("");
    assert!(
        msg.contains("corrupted sheaf") && msg.contains("double free"),
        "{msg}"
    );
}

/// The bulk paths of a checked hardened cache (one restartable section
/// per run of up to 64 entries, `this_cpu_sheaf_pop_many` /
/// `push_many`) across the sheaves' slow paths: arrays larger than a
/// sheaf (32 here), so runs stop at an empty or full main sheaf and
/// continue after a refill, a barn trade or a flush. Every object handed
/// out once; the bulk allocation clears the free marker (each object
/// then frees alone: a marker left behind reads as a double free); the
/// bulk free sets it (a second free of one of them is refused).
#[test]
fn bulk_sections_cross_the_sheaf_slow_paths() {
    if !RseqCpu.restartable() {
        return;
    }
    std::thread::spawn(|| {
        pin_here();
        let c = rseq_cache("bulkrun");
        for round in 0..6 {
            let n = [1, 31, 33, 64, 65, 300][round];
            let mut out = vec![None; n];
            assert_eq!(c.alloc_bulk(&mut out), n);
            let objs: Vec<NonNull<u8>> = out.iter().map(|o| o.unwrap()).collect();
            let mut addrs: Vec<usize> = objs.iter().map(|p| p.as_ptr() as usize).collect();
            addrs.sort_unstable();
            addrs.dedup();
            assert_eq!(addrs.len(), n, "an object handed out twice");
            for (i, o) in objs.iter().enumerate() {
                // SAFETY: live 64 B objects. (Not the first word: a
                // marker left there must stay to be found.)
                unsafe { o.as_ptr().add(8).write_bytes(i as u8, 56) };
            }
            if round % 2 == 0 {
                for &o in &objs {
                    // SAFETY: ours, freed once.
                    unsafe { c.try_free(o) }.expect("a bulk-allocated object frees alone");
                }
            } else {
                // SAFETY: ours, each freed once.
                unsafe { c.try_free_bulk(&objs) }.unwrap();
                // SAFETY: the double free under test, refused.
                let e = unsafe { c.try_free(objs[n / 2]) }.unwrap_err();
                assert_eq!(e.kind, slub::FreeErrorKind::DoubleFree);
            }
        }
        c.shrink();
        c.validate();
    })
    .join()
    .unwrap();
}

/// A bulk free of a checked cache on `RseqCpu` with an object twice in
/// the array (found by the free markers as the array is marked, see
/// `mark_bulk`), an object already free (in a sheaf, in its slab), or an
/// interior or a foreign pointer: refused with
/// that pointer, nothing freed, and every object's contents as they were
/// (the words the marking overwrote put back). Then the same array
/// without it frees.
#[test]
fn bulk_free_of_an_array_with_a_copy_is_refused_whole_on_rseq() {
    if !RseqCpu.restartable() {
        return;
    }
    std::thread::spawn(|| {
        pin_here();
        let c = rseq_cache("bulkdup");
        for (n, dup_of, at) in [
            (2usize, 0usize, 2usize),
            (100, 40, 100),
            (100, 99, 0),
            (256, 7, 200),
        ] {
            let mut out = vec![None; n];
            assert_eq!(c.alloc_bulk(&mut out), n);
            let objs: Vec<NonNull<u8>> = out.iter().map(|o| o.unwrap()).collect();
            for (i, o) in objs.iter().enumerate() {
                // SAFETY: live 64 B objects.
                unsafe { o.as_ptr().write_bytes(0x40 ^ i as u8, 64) };
            }
            let mut bad = objs.clone();
            bad.insert(at, objs[dup_of]);
            // SAFETY: refused before anything is freed.
            let e = unsafe { c.try_free_bulk(&bad) }.unwrap_err();
            assert_eq!(e.kind, slub::FreeErrorKind::DoubleFree);
            assert_eq!(e.addr, objs[dup_of].as_ptr() as usize);
            for (i, o) in objs.iter().enumerate() {
                // SAFETY: still live (nothing was freed).
                let v = unsafe { std::slice::from_raw_parts(o.as_ptr(), 64) };
                assert!(
                    v.iter().all(|&b| b == 0x40 ^ i as u8),
                    "object {i} changed: {v:?}"
                );
            }
            // An interior pointer and a foreign one at the same place:
            // refused the same way, after the objects before them were
            // marked.
            let mut local = 0u64;
            let foreign = NonNull::from(&mut local).cast::<u8>();
            let interior = NonNull::new(objs[dup_of].as_ptr().wrapping_add(8)).unwrap();
            for p in [interior, foreign] {
                let mut bad = objs.clone();
                bad.insert(at, p);
                // SAFETY: refused before anything is freed.
                let e = unsafe { c.try_free_bulk(&bad) }.unwrap_err();
                assert_eq!(e.addr, p.as_ptr() as usize, "{e:?}");
                assert_ne!(e.kind, slub::FreeErrorKind::DoubleFree);
            }
            // An object already free: in a sheaf (its marker), then in its
            // slab (its word a link of the slab's freelist, after a
            // flush; the slab keeps the array's objects, so it stays).
            let x = c.alloc().unwrap();
            // SAFETY: ours, freed once here.
            unsafe { c.free(x) };
            for flushed in [false, true] {
                if flushed {
                    c.shrink();
                }
                let mut bad = objs.clone();
                bad.insert(at, x);
                // SAFETY: refused before anything is freed.
                let e = unsafe { c.try_free_bulk(&bad) }.unwrap_err();
                assert_eq!(
                    (e.addr, e.kind),
                    (x.as_ptr() as usize, slub::FreeErrorKind::DoubleFree),
                    "flushed {flushed}"
                );
            }
            for (i, o) in objs.iter().enumerate() {
                // SAFETY: still live (nothing was freed).
                let v = unsafe { std::slice::from_raw_parts(o.as_ptr(), 64) };
                assert!(
                    v.iter().all(|&b| b == 0x40 ^ i as u8),
                    "object {i} changed: {v:?}"
                );
            }
            // SAFETY: ours, each freed once.
            unsafe { c.try_free_bulk(&objs) }.unwrap();
        }
        c.shrink();
        c.validate();
    })
    .join()
    .unwrap();
}
