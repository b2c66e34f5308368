//! Bad input and faults (issue #14): every misuse of SLUB ends in a
//! returned error or a panic/abort naming the allocator, the address and
//! what was wrong; never a second hand-out of live memory, a hang or a
//! SIGSEGV. One test per case, the expected outcome in its name.
//!
//! Caches run over a buddy on heap memory (the harness below); the
//! `GlobalSlub` cases that must abort run in a child process (this test
//! binary again, with `SLUB_BAD_INPUT_CHILD` naming the scenario).
#![cfg(not(loom))]

use std::alloc::{alloc_zeroed, dealloc, GlobalAlloc, Layout};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use buddy::{Buddy, Config, Tunables};
use local_lock::test_platform::TestPlatform;
use slub::FreeErrorKind;
use slub::{FreeError, Geometry, GlobalSlub, Kmalloc, KmemCache, SlabFlags};

const PAGE: usize = 4096;
const MAX_ORDER: u8 = if cfg!(miri) { 4 } else { 10 };
const CPUS: usize = 4;

/// A buddy over heap memory.
struct Mem {
    buddy: Box<Buddy<TestPlatform>>,
    ptr: *mut u8,
    layout: Layout,
}

impl Mem {
    fn new() -> Mem {
        let bytes = if cfg!(miri) { 1 << 20 } else { 8 << 20 };
        let layout = Layout::from_size_align(bytes, PAGE << MAX_ORDER).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        let cfg = Config::new(PAGE, MAX_ORDER).with_tunables(Tunables::NO_MIN);
        let buddy = Box::new(Buddy::new(TestPlatform::pinned(CPUS), cfg));
        // SAFETY: the memory lives as long as `Mem` and nothing else uses it.
        unsafe { buddy.add_region(ptr, bytes, true).unwrap() };
        Mem { buddy, ptr, layout }
    }

    /// The allocated blocks whose owner tag is `tag` (their first bytes).
    fn blocks_tagged(&self, tag: u32) -> Vec<usize> {
        let mut v = Vec::new();
        for off in (0..self.layout.size()).step_by(PAGE) {
            let a = self.ptr.wrapping_add(off);
            if let Some(b) = self.buddy.owner_of(a) {
                if b.head.as_ptr() == a
                    && b.owner.tag().load(std::sync::atomic::Ordering::Relaxed) == tag
                {
                    v.push(a as usize);
                }
            }
        }
        v
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

type Cache<'a> = KmemCache<&'a Buddy<TestPlatform>, TestPlatform, CPUS>;
type K<'a> = Kmalloc<&'a Buddy<TestPlatform>, TestPlatform, CPUS>;

fn cache(m: &Mem, p: TestPlatform, flags: SlabFlags, sheaves: usize) -> Cache<'_> {
    let c = KmemCache::create("bad-input", 64, 8, flags, &*m.buddy, p).unwrap();
    c.with_sheaves(sheaves)
}

fn kmalloc(m: &Mem, p: TestPlatform, flags: SlabFlags, sheaves: usize) -> K<'_> {
    Kmalloc::with_config(&*m.buddy, p, Geometry::new(CPUS), flags, sheaves)
}

/// Every platform and sheaf configuration of the free paths.
fn configs() -> [(TestPlatform, usize); 4] {
    [
        (TestPlatform::pinned(CPUS), 0),
        (TestPlatform::locked(CPUS), 0),
        (TestPlatform::pinned(CPUS), 8),
        (TestPlatform::locked(CPUS), 8),
    ]
}

/// The panic message of `f`, which must panic.
fn panic_message(f: impl FnOnce()) -> String {
    let e = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    if let Some(s) = e.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = e.downcast_ref::<&str>() {
        s.to_string()
    } else {
        String::from("(no message)")
    }
}

fn addr(p: NonNull<u8>) -> usize {
    p.as_ptr() as usize
}

// ------------------------------------------------------- ABA double frees

#[test]
fn aba_double_free_via_kmem_cache_try_free_is_refused() {
    for (p, sheaves) in configs() {
        let m = Mem::new();
        let mut c = cache(&m, p, SlabFlags::HARDENED, sheaves);
        let a = c.alloc().unwrap();
        let b = c.alloc().unwrap();
        // SAFETY: live objects of `c`, freed once each.
        unsafe {
            c.try_free(a).unwrap();
            c.try_free(b).unwrap();
            assert_eq!(
                c.try_free(a),
                Err(FreeError::new(addr(a), FreeErrorKind::DoubleFree)),
                "sheaves {sheaves}"
            );
        }
        // `a` is handed out once only.
        let x = c.alloc().unwrap();
        let y = c.alloc().unwrap();
        assert_ne!(x, y);
        c.validate_exclusive();
        // SAFETY: live.
        unsafe {
            c.free(x);
            c.free(y);
        }
        c.validate_exclusive();
        assert_eq!(c.destroy_exclusive(), Ok(()));
    }
}

#[test]
fn aba_double_free_after_a_flush_is_refused_or_reported_never_handed_out_twice() {
    // The first free went to a slab's freelist (the sheaf was flushed):
    // the object's free pointer then decodes into its slab. The slab paths
    // refuse the second free; the sheaf fast free (which only recognises
    // the sheaf marker) may take it, but its marker then breaks the slab
    // freelist through the object, and the allocation that would hand the
    // object out again reports the corrupted freelist instead.
    for (p, sheaves) in configs() {
        let m = Mem::new();
        p.set_cpu(0);
        let c = cache(&m, p, SlabFlags::HARDENED, sheaves);
        let a = c.alloc().unwrap();
        let b = c.alloc().unwrap();
        // Keeps the slab allocated.
        let _keep = c.alloc().unwrap();
        // SAFETY: live objects, freed once.
        unsafe {
            c.free(a);
            c.free(b);
        }
        c.shrink();
        // SAFETY: `a` is free: refused, or taken by a sheaf.
        match unsafe { c.try_free(a) } {
            Err(e) => {
                assert_eq!(e, FreeError::new(addr(a), FreeErrorKind::DoubleFree));
                assert_eq!(sheaves, 0, "the slab paths refuse it");
                continue;
            }
            Ok(()) => assert_ne!(sheaves, 0, "only the sheaf fast free takes it"),
        }
        let msg = panic_message(|| {
            let mut seen = std::collections::HashSet::new();
            for _ in 0..1000 {
                let x = c.alloc().unwrap();
                assert!(seen.insert(x), "{x:p} handed out twice");
            }
        });
        assert!(msg.contains("corrupted freelist"), "{msg}");
        assert!(msg.contains(&format!("{:#x}", addr(a))), "{msg}");
        std::mem::forget(c);
    }
}

#[test]
fn aba_double_free_via_try_kfree_is_refused() {
    for (p, sheaves) in configs() {
        let m = Mem::new();
        let k = kmalloc(&m, p, SlabFlags::HARDENED, sheaves);
        let a = k.kmalloc(64, 8).unwrap();
        let b = k.kmalloc(64, 8).unwrap();
        // SAFETY: live kmalloc objects, freed once each.
        unsafe {
            k.try_kfree(a.as_ptr()).unwrap();
            k.try_kfree(b.as_ptr()).unwrap();
            assert_eq!(
                k.try_kfree(a.as_ptr()),
                Err(FreeError::new(addr(a), FreeErrorKind::DoubleFree))
            );
        }
        let x = k.kmalloc(64, 8).unwrap();
        let y = k.kmalloc(64, 8).unwrap();
        assert_ne!(x, y);
        k.validate();
    }
}

#[test]
fn aba_double_free_via_kfree_panics_naming_the_address() {
    let m = Mem::new();
    let k = kmalloc(&m, TestPlatform::locked(CPUS), SlabFlags::HARDENED, 8);
    let a = k.kmalloc(64, 8).unwrap();
    let b = k.kmalloc(64, 8).unwrap();
    // SAFETY: live, freed once each.
    unsafe {
        k.kfree(a.as_ptr());
        k.kfree(b.as_ptr());
    }
    // SAFETY: refused before any change.
    let msg = panic_message(|| unsafe { k.kfree(a.as_ptr()) });
    assert!(msg.contains("double free"), "{msg}");
    assert!(msg.contains(&format!("{:#x}", addr(a))), "{msg}");
}

/// Child scenarios: each must abort.
fn child_scenario() -> Option<String> {
    std::env::var("SLUB_BAD_INPUT_CHILD").ok()
}

/// Runs test `name` of this binary in a child with the scenario set and
/// returns its stderr after checking that it died of SIGABRT within a
/// minute (a hang, e.g. at exit in a freelist cycle, fails).
fn run_child(name: &str) -> String {
    local_lock::child::expect_abort(name, "SLUB_BAD_INPUT_CHILD", name)
}

static HEAP: GlobalSlub = GlobalSlub::new();
static HEAP_NOSHEAVES: GlobalSlub = GlobalSlub::with_config(GlobalSlub::DEFAULT_FLAGS, 0);

/// Test `me`: in the child, an ABA double free on `h`, then allocations
/// (must abort, at the second free or before `a` is handed out twice); in
/// the parent, the child's message must name the allocator and the object.
fn global_aba_aborts(me: &str, h: &GlobalSlub) {
    if child_scenario().as_deref() == Some(me) {
        // A report found inside `alloc` panics; as the `#[global_allocator]`
        // the runtime's nounwind allocator shims turn that into an abort,
        // which this models for an instance used directly.
        if catch_unwind(AssertUnwindSafe(|| global_aba(h))).is_err() {
            std::process::abort();
        }
        unreachable!("the double free was accepted");
    }
    let err = run_child(me);
    let a = err
        .lines()
        .find_map(|l| l.strip_prefix("freeing "))
        .and_then(|l| l.strip_suffix(" again"))
        .expect("the child reached the second free");
    assert!(
        err.contains("GlobalSlub") || err.contains("slub kmalloc-"),
        "{err}"
    );
    assert!(err.contains(&format!("double free of {a}")), "{err}");
    assert!(!err.contains("handed out twice"), "{err}");
}

fn global_aba(h: &GlobalSlub) {
    let l = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: valid layout; `a` is freed twice on purpose (must abort).
    unsafe {
        let a = h.alloc(l);
        let b = h.alloc(l);
        h.dealloc(a, l);
        h.dealloc(b, l);
        eprintln!("freeing {a:p} again");
        h.dealloc(a, l);
        // The default (restartable) free stores its marker without
        // reading the object: the second copy of `a` is found when it
        // leaves the sheaf, before it is handed out again.
        let mut seen = Vec::new();
        for _ in 0..3 {
            let x = h.alloc(l);
            if seen.contains(&x) {
                eprintln!("{x:p} handed out twice");
            }
            seen.push(x);
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "spawns a child process")]
fn aba_double_free_via_global_slub_dealloc_aborts() {
    global_aba_aborts("aba_double_free_via_global_slub_dealloc_aborts", &HEAP);
}

#[test]
#[cfg_attr(miri, ignore = "spawns a child process")]
fn aba_double_free_via_global_slub_without_sheaves_aborts() {
    global_aba_aborts(
        "aba_double_free_via_global_slub_without_sheaves_aborts",
        &HEAP_NOSHEAVES,
    );
}

// --------------------------------------------------------------- bulk

/// `objs` were all still allocated: each frees alone.
fn all_still_allocated(c: &Cache<'_>, objs: &[NonNull<u8>]) {
    for &o in objs {
        // SAFETY: live objects of `c` (the refused bulk free freed none).
        unsafe { c.try_free(o) }.unwrap_or_else(|e| panic!("{o:p} was freed: {e}"));
    }
}

#[test]
fn bulk_free_of_the_same_object_twice_is_refused_and_frees_nothing() {
    for flags in [SlabFlags::HARDENED, SlabFlags::NONE] {
        for (p, sheaves) in configs() {
            let m = Mem::new();
            let mut c = cache(&m, p, flags, sheaves);
            let a = c.alloc().unwrap();
            // SAFETY: refused before any change.
            let r = unsafe { c.try_free_bulk(&[a, a]) };
            assert_eq!(
                r,
                Err(FreeError::new(addr(a), FreeErrorKind::DoubleFree)),
                "{flags:?} sheaves {sheaves}"
            );
            c.validate_exclusive();
            all_still_allocated(&c, &[a]);
            c.validate_exclusive();
            assert_eq!(c.destroy_exclusive(), Ok(()));
        }
    }
}

#[test]
fn bulk_free_of_a_b_a_is_refused_and_frees_nothing() {
    for flags in [SlabFlags::HARDENED, SlabFlags::NONE] {
        for (p, sheaves) in configs() {
            let m = Mem::new();
            let mut c = cache(&m, p, flags, sheaves);
            let a = c.alloc().unwrap();
            let b = c.alloc().unwrap();
            // SAFETY: refused before any change.
            let r = unsafe { c.try_free_bulk(&[a, b, a]) };
            assert_eq!(
                r,
                Err(FreeError::new(addr(a), FreeErrorKind::DoubleFree)),
                "{flags:?} sheaves {sheaves}"
            );
            c.validate_exclusive();
            all_still_allocated(&c, &[a, b]);
            c.validate_exclusive();
            assert_eq!(c.destroy_exclusive(), Ok(()));
        }
    }
}

#[test]
fn bulk_free_with_a_duplicate_far_apart_is_refused_frees_nothing_and_keeps_contents() {
    for flags in [SlabFlags::HARDENED, SlabFlags::NONE] {
        for (p, sheaves) in configs() {
            let m = Mem::new();
            let mut c = cache(&m, p, flags, sheaves);
            // Beyond one sorted run of 256 (fewer under miri, still two).
            let n = if cfg!(miri) { 300 } else { 600 };
            let mut objs: Vec<NonNull<u8>> = (0..n).map(|_| c.alloc().unwrap()).collect();
            for o in &objs {
                // SAFETY: live 64 B objects.
                unsafe { o.as_ptr().write_bytes(0x5c, 64) };
            }
            let dup = objs[5];
            objs.push(dup);
            // SAFETY: refused before any change.
            let r = unsafe { c.try_free_bulk(&objs) };
            assert_eq!(
                r,
                Err(FreeError::new(addr(dup), FreeErrorKind::DoubleFree)),
                "{flags:?} sheaves {sheaves}"
            );
            objs.pop();
            c.validate_exclusive();
            for o in &objs {
                // SAFETY: live (nothing was freed) 64 B objects.
                let v = unsafe { std::slice::from_raw_parts(o.as_ptr(), 64) };
                assert!(v.iter().all(|&b| b == 0x5c), "contents of {o:p} changed");
            }
            all_still_allocated(&c, &objs);
            c.validate_exclusive();
            assert_eq!(c.destroy_exclusive(), Ok(()));
        }
    }
}

#[test]
fn bulk_free_of_an_already_free_object_is_refused_and_frees_nothing() {
    for (p, sheaves) in configs() {
        let m = Mem::new();
        let mut c = cache(&m, p, SlabFlags::HARDENED, sheaves);
        let objs: Vec<NonNull<u8>> = (0..100).map(|_| c.alloc().unwrap()).collect();
        let x = c.alloc().unwrap();
        // SAFETY: live, freed once.
        unsafe { c.free(x) };
        let mut bad = objs.clone();
        bad.insert(50, x);
        // SAFETY: refused before any change.
        let r = unsafe { c.try_free_bulk(&bad) };
        assert_eq!(r, Err(FreeError::new(addr(x), FreeErrorKind::DoubleFree)));
        c.validate_exclusive();
        all_still_allocated(&c, &objs);
        assert_eq!(c.destroy_exclusive(), Ok(()));
    }
}

#[test]
fn bulk_free_with_a_bad_pointer_in_the_middle_frees_nothing() {
    for flags in [SlabFlags::HARDENED, SlabFlags::NONE] {
        for (p, sheaves) in configs() {
            let m = Mem::new();
            let mut c = cache(&m, p, flags, sheaves);
            let objs: Vec<NonNull<u8>> = (0..300).map(|_| c.alloc().unwrap()).collect();
            let mut local = 0u64;
            let foreign = NonNull::from(&mut local).cast::<u8>();
            let interior = NonNull::new(objs[7].as_ptr().wrapping_add(8)).unwrap();
            for (bad, want) in [
                (
                    foreign,
                    FreeError::new(addr(foreign), FreeErrorKind::NotAllocated),
                ),
                (
                    interior,
                    FreeError::new(addr(interior), FreeErrorKind::NotObjectStart(0)),
                ),
            ] {
                let mut arr = objs.clone();
                arr.insert(150, bad);
                // SAFETY: refused before any change.
                let e = unsafe { c.try_free_bulk(&arr) }.unwrap_err();
                match (e, want) {
                    (
                        FreeError {
                            addr: a,
                            kind: FreeErrorKind::NotObjectStart(_),
                        },
                        FreeError {
                            addr: w,
                            kind: FreeErrorKind::NotObjectStart(_),
                        },
                    ) => {
                        assert_eq!(a, w)
                    }
                    _ => assert_eq!(e, want),
                }
                c.validate_exclusive();
            }
            all_still_allocated(&c, &objs);
            c.validate_exclusive();
            assert_eq!(c.destroy_exclusive(), Ok(()));
        }
    }
}

// ------------------------------------------------------- wrong cache

#[test]
fn free_into_the_wrong_cache_is_refused() {
    for (p, sheaves) in configs() {
        let m = Mem::new();
        let c1 = cache(&m, p, SlabFlags::HARDENED, sheaves);
        let c2 = cache(&m, p, SlabFlags::HARDENED, sheaves);
        let a = c1.alloc().unwrap();
        let _ = c2.alloc().unwrap();
        // SAFETY: refused before any change.
        let e = unsafe { c2.try_free(a) }.unwrap_err();
        assert!(
            matches!(e, FreeError { addr: x, kind: FreeErrorKind::WrongCache(_) } if x == addr(a)),
            "{e:?}"
        );
        // SAFETY: refused before any change.
        let e = unsafe { c2.try_free_bulk(&[a]) }.unwrap_err();
        assert!(
            matches!(e, FreeError { addr: x, kind: FreeErrorKind::WrongCache(_) } if x == addr(a)),
            "{e:?}"
        );
        // SAFETY: its own cache.
        unsafe { c1.free(a) };
    }
}

// ------------------------------------------------- use after free writes

#[test]
fn write_after_free_into_a_free_pointer_is_reported_not_followed() {
    for p in [TestPlatform::locked(CPUS), TestPlatform::pinned(CPUS)] {
        let m = Mem::new();
        let c = cache(&m, p, SlabFlags::HARDENED, 0);
        let a = c.alloc().unwrap();
        let b = c.alloc().unwrap();
        // SAFETY: live, freed once.
        unsafe {
            c.free(b);
            c.free(a);
        }
        // The write after free: `a`'s free pointer becomes an address the
        // writer chose (unmapped: following it would crash).
        let fp = a.as_ptr().wrapping_add(c.layout().offset) as *mut usize;
        // SAFETY: `a` is slab memory that stays mapped (the bug under test).
        unsafe { fp.write(0xdead_0000) };
        let msg = panic_message(|| {
            let x = c.alloc();
            let _ = c.alloc();
            panic!("not reported: {x:?}");
        });
        assert!(msg.contains("slub bad-input"), "{msg}");
        assert!(msg.contains("corrupted freelist"), "{msg}");
        assert!(msg.contains(&format!("{:#x}", addr(a))), "{msg}");
        // The cache is corrupted on purpose: never flushed.
        std::mem::forget(c);
    }
}

#[test]
fn write_after_free_into_a_sheaf_entry_is_reported_never_returned() {
    for p in [TestPlatform::locked(CPUS), TestPlatform::pinned(CPUS)] {
        let m = Mem::new();
        p.set_cpu(0);
        let c = cache(&m, p, SlabFlags::HARDENED, 8);
        let objs: Vec<NonNull<u8>> = (0..4).map(|_| c.alloc().unwrap()).collect();
        for &o in &objs {
            // SAFETY: live, freed once.
            unsafe { c.free(o) };
        }
        // The sheaf holding them: a page block a dangling pointer may reach.
        let sheaves = m.blocks_tagged(slub::slab::TAG_SHEAF);
        assert!(!sheaves.is_empty());
        let chosen = 0x7000_1234_5000usize;
        for &sh in &sheaves {
            let w = sh as *mut usize;
            // SAFETY: the sheaf page (the write after free under test);
            // entries follow the size and link words.
            unsafe {
                for i in 2..10 {
                    w.add(i).write(chosen);
                }
            }
        }
        let msg = panic_message(|| {
            for _ in 0..8 {
                let x = c.alloc().unwrap();
                assert_ne!(addr(x), chosen, "kmalloc returned the written address");
            }
            panic!("not reported");
        });
        assert!(msg.contains("slub bad-input"), "{msg}");
        assert!(msg.contains("corrupted sheaf"), "{msg}");
        std::mem::forget(c);
    }
}

#[test]
fn write_after_free_into_a_sheaf_naming_a_live_object_is_reported_never_returned() {
    // A write after free into the sheaf page naming a live object of the
    // same cache (inside the slabs' window): entries are stored encoded,
    // so the written address decodes to garbage outside the window, and is
    // reported rather than handed out a second time.
    for p in [TestPlatform::locked(CPUS), TestPlatform::pinned(CPUS)] {
        let m = Mem::new();
        p.set_cpu(0);
        let c = cache(&m, p, SlabFlags::HARDENED, 8);
        let live = c.alloc().unwrap();
        let objs: Vec<NonNull<u8>> = (0..4).map(|_| c.alloc().unwrap()).collect();
        for &o in &objs {
            // SAFETY: live, freed once.
            unsafe { c.free(o) };
        }
        let sheaves = m.blocks_tagged(slub::slab::TAG_SHEAF);
        assert!(!sheaves.is_empty());
        for &sh in &sheaves {
            let w = sh as *mut usize;
            // SAFETY: the sheaf page (the write after free under test).
            unsafe {
                for i in 2..10 {
                    w.add(i).write(addr(live));
                }
            }
        }
        let msg = panic_message(|| {
            for _ in 0..8 {
                let x = c.alloc().unwrap();
                assert_ne!(x, live, "a live object was handed out again");
            }
            panic!("not reported");
        });
        assert!(msg.contains("corrupted sheaf"), "{msg}");
        std::mem::forget(c);
    }
}

#[test]
fn write_after_free_into_a_sheaf_size_is_reported() {
    let m = Mem::new();
    let p = TestPlatform::locked(CPUS);
    p.set_cpu(0);
    let c = cache(&m, p, SlabFlags::HARDENED, 8);
    let o = c.alloc().unwrap();
    // SAFETY: live, freed once.
    unsafe { c.free(o) };
    for sh in m.blocks_tagged(slub::slab::TAG_SHEAF) {
        // SAFETY: the size word of the sheaf page (the bug under test).
        unsafe { (sh as *mut usize).write(1 << 40) };
    }
    let msg = panic_message(|| {
        let _ = c.alloc();
        panic!("not reported");
    });
    assert!(msg.contains("corrupted sheaf"), "{msg}");
    std::mem::forget(c);
}

#[test]
fn freelist_cycle_is_reported_by_flush_not_a_hang() {
    // Unhardened caches accept `free a, free b, free a` (only the naive
    // check): the CPU freelist then has a cycle a -> b -> a.
    for p in [TestPlatform::locked(CPUS), TestPlatform::pinned(CPUS)] {
        let m = Mem::new();
        p.set_cpu(0);
        let mut c = cache(&m, p, SlabFlags::NONE, 0);
        let a = c.alloc().unwrap();
        let b = c.alloc().unwrap();
        // SAFETY: the double free under test.
        unsafe {
            c.free(a);
            c.free(b);
            c.free(a);
        }
        let msg = panic_message(|| c.validate_exclusive());
        assert!(msg.contains("cycle"), "{msg}");
        let msg = panic_message(|| c.flush_local());
        assert!(msg.contains("slub bad-input"), "{msg}");
        assert!(msg.contains("corrupted freelist"), "{msg}");
        assert!(msg.contains("cycle"), "{msg}");
        std::mem::forget(c);
    }
}

// ------------------------------------------------------- smaller ones

#[test]
fn ksize_of_a_freed_object_panics() {
    for flags in [SlabFlags::HARDENED, SlabFlags::DEBUG_ALL] {
        for sheaves in [0, 8] {
            let m = Mem::new();
            let k = kmalloc(&m, TestPlatform::locked(CPUS), flags, sheaves);
            let a = k.kmalloc(64, 8).unwrap();
            assert!(k.ksize(a.as_ptr()) >= 64);
            // SAFETY: live, freed once.
            unsafe { k.kfree(a.as_ptr()) };
            let msg = panic_message(|| {
                k.ksize(a.as_ptr());
            });
            assert!(msg.contains("is free"), "{flags:?}: {msg}");
            assert!(msg.contains(&format!("{:#x}", addr(a))), "{msg}");
        }
    }
}

#[test]
fn kmalloc_owner_record_names_the_caller() {
    let m = Mem::new();
    let k = kmalloc(&m, TestPlatform::locked(CPUS), SlabFlags::DEBUG_ALL, 0);
    let a = k.kmalloc(40, 8).unwrap();
    // SAFETY: live, freed once.
    unsafe { k.try_kfree(a.as_ptr()).unwrap() };
    // SAFETY: the double free is refused (debug caches walk the freelist).
    let msg = panic_message(|| unsafe { k.kfree(a.as_ptr()) });
    assert!(msg.contains("double free"), "{msg}");
    let alloc = msg.split("allocated").nth(1).unwrap_or_default();
    let freed = msg.split("freed").last().unwrap_or_default();
    assert!(alloc.contains("bad_input.rs"), "{msg}");
    assert!(freed.contains("bad_input.rs"), "{msg}");
}

fn validate_shared(k: &K<'_>) {
    k.validate();
}

#[test]
fn kmalloc_validate_works_through_a_shared_reference() {
    let m = Mem::new();
    let k = kmalloc(&m, TestPlatform::locked(CPUS), SlabFlags::HARDENED, 8);
    let a = k.kmalloc(100, 8).unwrap();
    validate_shared(&k);
    // SAFETY: live.
    unsafe { k.kfree(a.as_ptr()) };
    validate_shared(&k);
    HEAP.kmalloc().validate();
}

// --- kmalloc sizes and alignments (item 2) ----------------------------------

/// The heap of the kmalloc size/alignment cases.
static KM_HEAP: GlobalSlub = GlobalSlub::new();

/// Runs `f` on a thread and fails if it does not return within 10 s (the
/// cases below used to spin forever).
fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(10)) {
        Ok(v) => v,
        Err(e) => panic!("{what}: no answer within 10 s ({e})"),
    }
}

#[test]
fn kmalloc_of_sizes_above_2_pow_63_returns_none() {
    for size in [(1usize << 63) + 1, usize::MAX - 4095, usize::MAX] {
        let got = within_10s("kmalloc", move || {
            KM_HEAP.kmalloc().kmalloc(size, 8).map(|p| p.addr())
        });
        assert_eq!(got, None, "kmalloc({size:#x}, 8)");
        let got = within_10s("kzalloc", move || {
            KM_HEAP.kmalloc().kzalloc(size, 8).map(|p| p.addr())
        });
        assert_eq!(got, None, "kzalloc({size:#x}, 8)");
    }
}

#[test]
fn kmalloc_with_alignment_of_2_pow_63_or_above_returns_none() {
    // Above 2^63 no alignment is a power of two; the old order loop spun on
    // `size.max(align)`.
    let got = within_10s("kmalloc", || {
        KM_HEAP.kmalloc().kmalloc(1, 3 << 62).map(|p| p.addr())
    });
    assert_eq!(got, None);
    let got = within_10s("kmalloc", || {
        KM_HEAP.kmalloc().kmalloc(1, 1 << 63).map(|p| p.addr())
    });
    assert_eq!(got, None);
    let got = within_10s("kzalloc", || {
        KM_HEAP.kmalloc().kzalloc(64, 1 << 63).map(|p| p.addr())
    });
    assert_eq!(got, None);
}

#[test]
fn kmalloc_beyond_the_largest_block_maps_directly_and_the_heap_still_works() {
    // 4 MiB is the largest block; beyond it GlobalPages serves a recorded
    // direct mapping (issue #18: a size-less free of any size), freed by
    // kfree; what the OS cannot map is refused.
    let big = KM_HEAP
        .kmalloc()
        .kmalloc((4 << 20) + 1, 8)
        .expect("a direct mapping");
    assert!(KM_HEAP.kmalloc().ksize(big.as_ptr()) > 4 << 20);
    // SAFETY: ours, freed once.
    unsafe { KM_HEAP.kmalloc().kfree(big.as_ptr()) };
    assert_eq!(KM_HEAP.kmalloc().kmalloc(1 << 62, 8), None);
    let p = KM_HEAP
        .kmalloc()
        .kmalloc(100, 8)
        .expect("a small object after the refusals");
    // SAFETY: ours, freed once.
    unsafe { KM_HEAP.kmalloc().kfree(p.as_ptr()) };
}

#[test]
fn kmalloc_with_alignment_not_a_power_of_two_returns_none() {
    let k = KM_HEAP.kmalloc();
    for (size, align) in [(5, 48), (1, 3), (64, 24), (100, 0), (8192, 3 << 12)] {
        assert_eq!(k.kmalloc(size, align), None, "kmalloc({size}, {align})");
        assert_eq!(k.kzalloc(size, align), None, "kzalloc({size}, {align})");
    }
    // Powers of two are honoured.
    for align in [1, 8, 64, 4096, 1 << 16] {
        let p = k.kmalloc(40, align).unwrap();
        assert_eq!(p.addr().get() % align, 0, "kmalloc(40, {align})");
        // SAFETY: ours, freed once.
        unsafe { k.kfree(p.as_ptr()) };
    }
}
