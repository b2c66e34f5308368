//! Sheaves in memory no user can reach (`PageAlloc::PRIVATE_META`, issue
//! #14 item 12): a source that keeps its metadata private gets its sheaves
//! from `alloc_private`, never from its page blocks, and the hardened
//! caches store the entries plain (no XOR on the allocation's path) while
//! every double free is still found.

use std::alloc::{alloc, dealloc, Layout};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Mutex;

use buddy::{AllocFlags, Block, BlockRef, Buddy, Config, Order, PageAlloc, Tunables};
use local_lock::test_platform::TestPlatform;
use slub::{FreeErrorKind, KmemCache, SlabFlags};

const PAGE: usize = 4096;
const MAX_ORDER: u8 = 4;
const CPUS: usize = 2;

/// A buddy over heap memory whose metadata blocks come from elsewhere.
struct Private {
    buddy: Buddy<TestPlatform>,
    mem: *mut u8,
    bytes: usize,
    /// The private blocks handed out (address, bytes).
    private: Mutex<Vec<(usize, usize)>>,
}

// SAFETY: the raw pointer names memory owned by `Private`.
unsafe impl Sync for Private {}

impl Private {
    fn new() -> Private {
        let bytes = 1 << 20;
        // SAFETY: non-zero size.
        let mem = unsafe { alloc(Layout::from_size_align(bytes, PAGE << MAX_ORDER).unwrap()) };
        assert!(!mem.is_null());
        let cfg = Config::new(PAGE, MAX_ORDER).with_tunables(Tunables::NO_MIN);
        let buddy = Buddy::new(TestPlatform::pinned(CPUS), cfg);
        // SAFETY: the memory lives as long as `Private`; nothing else uses it.
        unsafe { buddy.add_region(mem, bytes, false).unwrap() };
        Private {
            buddy,
            mem,
            bytes,
            private: Mutex::new(Vec::new()),
        }
    }

    fn in_heap(&self, a: usize) -> bool {
        a.wrapping_sub(self.mem as usize) < self.bytes
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        // Private blocks still out (sheaves of a cache that was forgotten
        // or kept them) go with the source, as the heap does.
        for &(a, bytes) in self.private.lock().unwrap().iter() {
            let l = Layout::from_size_align(bytes, 64).unwrap();
            // SAFETY: allocated by `alloc_private` with this layout, and
            // nothing uses it once the source goes.
            unsafe { dealloc(a as *mut u8, l) };
        }
        let l = Layout::from_size_align(self.bytes, PAGE << MAX_ORDER).unwrap();
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.mem, l) };
    }
}

// SAFETY: forwarded to the buddy; private blocks are separate heap
// allocations the buddy never hands out.
unsafe impl PageAlloc for Private {
    const PRIVATE_META: bool = true;
    fn page_size(&self) -> usize {
        PAGE
    }
    fn max_order(&self) -> Order {
        Order::new(MAX_ORDER).unwrap()
    }
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        self.buddy.alloc_block(order, flags)
    }
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: forwarded.
        unsafe { self.buddy.free_pages(ptr, order) }
    }
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        self.buddy.owner_of(addr)
    }
    fn alloc_private(&self, bytes: usize) -> Option<NonNull<u8>> {
        let l = Layout::from_size_align(bytes, 64).ok()?;
        // SAFETY: non-zero size (a sheaf has a header).
        let p = NonNull::new(unsafe { alloc(l) })?;
        self.private
            .lock()
            .unwrap()
            .push((p.as_ptr() as usize, bytes));
        Some(p)
    }
    unsafe fn free_private(&self, ptr: NonNull<u8>, bytes: usize) {
        let mut v = self.private.lock().unwrap();
        let i = v
            .iter()
            .position(|&(a, _)| a == ptr.as_ptr() as usize)
            .expect("ours");
        assert_eq!(v.swap_remove(i).1, bytes, "freed with its size");
        let l = Layout::from_size_align(bytes, 64).unwrap();
        // SAFETY: allocated by `alloc_private` with this layout.
        unsafe { dealloc(ptr.as_ptr(), l) };
    }
}

type Cache<'a> = KmemCache<&'a Private, TestPlatform, CPUS>;

fn cache(m: &Private, p: TestPlatform) -> Cache<'_> {
    p.set_cpu(0);
    KmemCache::create("private", 64, 8, SlabFlags::HARDENED, m, p)
        .unwrap()
        .with_sheaves(8)
}

/// The sheaves are the source's private blocks, outside its heap, and
/// hold the objects' addresses themselves.
#[test]
fn sheaves_come_from_private_memory_and_hold_plain_entries() {
    for p in [TestPlatform::pinned(CPUS), TestPlatform::locked(CPUS)] {
        let m = Private::new();
        let c = cache(&m, p);
        let objs: Vec<NonNull<u8>> = (0..4).map(|_| c.alloc().unwrap()).collect();
        for &o in &objs {
            // SAFETY: ours, freed once.
            unsafe { c.free(o) };
        }
        let private = m.private.lock().unwrap().clone();
        assert!(!private.is_empty(), "a sheaf was made from private memory");
        assert!(
            private.iter().all(|&(a, _)| !m.in_heap(a)),
            "never a heap block"
        );
        // Some private sheaf holds the freed objects' addresses as they are.
        let found = private.iter().any(|&(a, _)| {
            // The sheaf starts 8 bytes into its block (its size word off
            // the addresses 16-byte-aligned objects take modulo 4 KiB).
            let w = (a + 8) as *const usize;
            // SAFETY: a live private block of a sheaf of 8 entries, 8
            // bytes in: the size word, the link word, then the entries.
            let word = |i: usize| unsafe { w.add(i).read() };
            let n = word(0);
            let k = objs.len();
            // The frees are the top entries (a refill may have left others
            // below them); every entry is an address in the heap.
            n >= k
                && n <= 8
                && (0..k).all(|i| word(2 + n - k + i) == objs[i].as_ptr() as usize)
                && (0..n).all(|i| m.in_heap(word(2 + i)))
        });
        assert!(found, "entries stored plain: {private:x?}");
        // They come back as they went (last in, first out).
        for &o in objs.iter().rev() {
            assert_eq!(c.alloc().unwrap(), o);
        }
        for &o in &objs {
            // SAFETY: ours, freed once.
            unsafe { c.free(o) };
        }
        c.shrink();
        drop(c);
    }
}

/// `free a, free b, free a` with plain entries: refused at the free (the
/// locked sheaves read the marker) or found before `a` is handed out twice.
#[test]
fn a_double_free_with_a_free_between_is_still_found() {
    for p in [TestPlatform::pinned(CPUS), TestPlatform::locked(CPUS)] {
        let m = Private::new();
        let c = cache(&m, p);
        let a = c.alloc().unwrap();
        let b = c.alloc().unwrap();
        // SAFETY: ours, freed once each.
        unsafe {
            c.free(a);
            c.free(b);
        }
        // SAFETY: the double free under test, refused before any change
        // or found later.
        match unsafe { c.try_free(a) } {
            Err(e) => assert_eq!(e.kind, FreeErrorKind::DoubleFree, "{e}"),
            Ok(()) => {
                let r = catch_unwind(AssertUnwindSafe(|| {
                    let x = c.alloc().unwrap();
                    let y = c.alloc().unwrap();
                    let z = c.alloc().unwrap();
                    assert!(x != z && x != y && y != z, "handed out twice");
                }));
                let e = r.expect_err("reported");
                let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
                assert!(msg.contains("double free"), "{msg}");
            }
        }
        std::mem::forget(c);
    }
}

/// The same on restartable sheaves (`RseqCpu`) of a source without a page
/// map: the free's section stores the marker blind (no map to validate by
/// outside a section), so the second free of `a` is taken and the
/// allocation that would hand `a` out twice reports it.
#[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom)))]
#[test]
fn a_double_free_with_a_free_between_is_found_on_restartable_sheaves_without_a_map() {
    use local_lock::std_platform::RseqCpu;
    use local_lock::Platform;
    if !RseqCpu.restartable() {
        return;
    }
    std::thread::spawn(|| {
        // Pinned: the frees and allocations meet on one CPU's sheaves.
        // SAFETY: plain libc calls on this thread's affinity mask.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(libc::sched_getcpu() as usize, &mut set);
            assert_eq!(libc::sched_setaffinity(0, size_of_val(&set), &set), 0);
        }
        let m = Private::new();
        let c = KmemCache::<&Private, RseqCpu, 64>::create(
            "private-rseq",
            64,
            8,
            SlabFlags::HARDENED,
            &m,
            RseqCpu,
        )
        .unwrap()
        .with_sheaves(8);
        let a = c.alloc().unwrap();
        let b = c.alloc().unwrap();
        // SAFETY: ours, freed once each; then the double free under test,
        // taken by the sheaf (found when `a` leaves it).
        unsafe {
            c.free(a);
            c.free(b);
            c.try_free(a).expect("taken: the section marks blind");
        }
        let e = catch_unwind(AssertUnwindSafe(|| {
            let v: Vec<_> = (0..3).map(|_| c.alloc().unwrap()).collect();
            assert!(
                v[0] != v[2] && v[0] != v[1] && v[1] != v[2],
                "handed out twice"
            );
        }))
        .expect_err("reported");
        let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains(&format!("double free of {a:p}")), "{msg}");
        std::mem::forget(c);
    })
    .join()
    .unwrap();
}
