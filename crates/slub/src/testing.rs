//! The reference harness of this crate's tests and of the cargo-fuzz
//! target: a buddy on heap memory, an operation set, and [`run_machine`],
//! which applies operations across simulated CPUs (and interrupt contexts)
//! to three caches and a kmalloc, checking after every one: no overlap,
//! alignment, contents preserved, `ksize` covers the request, and every
//! cache's invariants ([`KmemCache::validate`]: lists, counts, the frozen
//! rule); at the end every cache is destroyed without complaint and every
//! page is back in the buddy.

#[cfg(feature = "arbitrary")]
pub mod fuzz;

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::boxed::Box;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::vec::Vec;

use buddy::{Buddy, Config, PurgePolicy, Tunables};
use local_lock::test_platform::TestPlatform;

use crate::cache::KmemCache;
use crate::kmalloc::Kmalloc;
use crate::layout::{Geometry, SlabFlags};

/// Page size of the harness.
pub const PAGE: usize = 4096;
/// Largest order of the harness's buddy.
pub const MAX_ORDER: u8 = if cfg!(miri) { 4 } else { 10 };
/// The purge order of the harness's buddy (trim only): 1, so purges split
/// and merge at every order; under miri the largest order, as before
/// purging reached the state machines (each purge batch re-checks the
/// purged memory byte by byte under `invariants`, and order-1 batches made
/// one test run for more than 15 minutes).
pub const PURGE_ORDER: u8 = if cfg!(miri) { MAX_ORDER } else { 1 };
/// Simulated CPUs.
pub const CPUS: usize = 4;

/// A buddy over heap memory.
pub struct Mem {
    /// The buddy.
    pub buddy: Box<Buddy<TestPlatform>>,
    ptr: *mut u8,
    layout: Layout,
}

impl Mem {
    /// `mib` MiB of zeroed heap memory (1 MiB under miri).
    pub fn new(mib: usize) -> Mem {
        let bytes = if cfg!(miri) { 1 << 20 } else { mib << 20 };
        let layout = Layout::from_size_align(bytes, PAGE << MAX_ORDER).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        // Purges (`Op::Shrink`'s trim) from `PURGE_ORDER`.
        let cfg = Config::new(PAGE, MAX_ORDER)
            .with_tunables(Tunables::NO_MIN)
            .with_purge(PurgePolicy::trim_only(PURGE_ORDER));
        let buddy = Box::new(Buddy::new(TestPlatform::pinned(CPUS), cfg));
        // SAFETY: the memory lives as long as `Mem` and nothing else uses it.
        unsafe { buddy.add_region(ptr, bytes, true).unwrap() };
        Mem { buddy, ptr, layout }
    }

    /// Whether every page is free in the buddy.
    pub fn all_free(&self) -> bool {
        self.buddy.total_free_pages() == self.buddy.total_managed_pages()
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

/// A cache of the harness.
pub type Cache<'a> = KmemCache<&'a Buddy<TestPlatform>, TestPlatform, CPUS>;

/// Fills `n` bytes of a live object with `v`.
pub fn fill(p: NonNull<u8>, n: usize, v: u8) {
    // SAFETY: the caller's live object of at least `n` bytes.
    unsafe { p.as_ptr().write_bytes(v, n) }
}

/// Flushes every CPU, shrinks (the barn empties), checks and destroys the
/// cache, and checks that its slabs and sheaves are all back in `m`'s buddy.
pub fn destroy_all_back(mut c: Cache<'_>, p: TestPlatform, m: &Mem) {
    for cpu in 0..CPUS {
        p.set_cpu(cpu);
        c.flush_local();
    }
    p.set_cpu(0);
    c.shrink();
    assert_eq!(c.barn_sheaves(), (0, 0));
    // Found by the riscv kernel: shrink used to flush the CPUs before the
    // barn, leaving slabs the barn's objects froze onto a CPU partial list.
    assert_eq!(c.nr_slabs(), 0, "{}", c.slabinfo());
    c.validate_exclusive();
    assert_eq!(c.destroy_exclusive(), Ok(()));
    drop(c);
    assert!(m.all_free(), "slabs and sheaves all back in the buddy");
}

/// Whether `n` bytes of a live object all read `v`.
pub fn holds(p: NonNull<u8>, n: usize, v: u8) -> bool {
    // SAFETY: as in `fill`.
    unsafe { std::slice::from_raw_parts(p.as_ptr(), n) }
        .iter()
        .all(|&b| b == v)
}

/// One step of the machine (fields are described on each variant).
#[derive(Clone, Debug)]
#[allow(missing_docs)]
pub enum Op {
    /// Allocate from cache `c` (index, mod 3) on CPU `cpu` (mod CPUS), in an
    /// interrupt handler if `irq`.
    Alloc { c: usize, cpu: usize, irq: bool },
    /// kmalloc of `size` (1..=20000 after clamping) on `cpu`.
    Kmalloc { size: usize, cpu: usize, irq: bool },
    /// Free live object `i` (mod live count) on `cpu` (kfree for kmalloc
    /// objects: without the size).
    Free { i: usize, cpu: usize, irq: bool },
    /// Flush the slabs of CPU `cpu` from that CPU.
    Flush { cpu: usize },
    /// Flush CPU `cpu` from CPU `from` (only the locked platform allows it;
    /// elsewhere it is refused and nothing happens).
    FlushRemote { cpu: usize, from: usize },
    /// Bulk-allocate `n` (1..=100 after clamping) objects from cache `c`.
    AllocBulk { c: usize, n: usize, cpu: usize },
    /// Bulk-free up to `n` live objects of cache `c` (the most recent
    /// ones first, interleaved with older ones: several slabs per call).
    FreeBulk { c: usize, n: usize, cpu: usize },
    /// Shrink cache `c`; then the idle shrink of every cache, and a purge
    /// of the buddy's free blocks (zeroed, as `MADV_DONTNEED` leaves them).
    Shrink { c: usize },
    /// Bad input (`kind` mod [`BAD_KINDS`]) around live object `i` (mod the
    /// live count), on `cpu`: a double free, an ABA double free (with the
    /// next live object of the same cache), a foreign pointer, an interior
    /// pointer, a free into the wrong cache, a bulk free with a duplicate,
    /// a bulk free with a bad pointer in the middle. Each must be refused
    /// with an error, change nothing (the model keeps the objects, their
    /// contents are checked at their real free) and leave every cache
    /// valid.
    Bad { kind: usize, i: usize, cpu: usize },
    /// kmalloc/kzalloc of an impossible request (`which` mod
    /// [`BAD_KMALLOC`].len(): sizes and alignments above 2^63 or beyond the
    /// largest block, alignments that are not powers of two) on `cpu`:
    /// each must return `None` and change nothing.
    KmallocBad {
        which: usize,
        zero: bool,
        cpu: usize,
    },
}

/// The requests of [`Op::KmallocBad`]: (size, align).
pub const BAD_KMALLOC: [(usize, usize); 9] = [
    (usize::MAX, 8),
    ((1 << 63) + 1, 8),
    (1 << 40, 8),
    (1, 3 << 62),
    (64, 1 << 63),
    (5, 48),
    (1, 3),
    (100, 0),
    (8192, 3 << 12),
];

/// The kinds of [`Op::Bad`].
pub const BAD_KINDS: usize = 7;

struct Live {
    ptr: NonNull<u8>,
    size: usize,
    /// `None` for kmalloc, else the cache index.
    cache: Option<usize>,
    tag: u8,
}

/// Runs `ops` on platform `p` (pinned: lockless fast paths; locked: the
/// RT path), checking everything after every step.
pub fn run_machine(ops: &[Op], p: TestPlatform) {
    let m = Mem::new(8);
    let sizes = [24usize, 200, 3000, 40];
    // One cache per feature: sheaves of 4 objects (swaps, barn trades,
    // refills and flushes come often), hardened free pointers, randomised
    // freelists (hardened too), every debug flag.
    let flags = [
        SlabFlags::NONE,
        SlabFlags::HARDENED,
        SlabFlags::RANDOM_FREELIST.union(SlabFlags::HARDENED),
        SlabFlags::DEBUG_ALL,
    ];
    let mut caches: Vec<Cache<'_>> = sizes
        .iter()
        .zip(flags)
        .enumerate()
        .map(|(i, (&s, f))| {
            let c = KmemCache::create("prop", s, 8, f, &*m.buddy, p).unwrap();
            if i == 0 {
                c.with_sheaves(4)
            } else {
                c
            }
        })
        .collect();
    // kmalloc as GlobalSlub configures it: sheaves, hardened.
    let k = Kmalloc::<_, _, CPUS>::with_config(
        &*m.buddy,
        p,
        Geometry::new(CPUS),
        SlabFlags::HARDENED,
        8,
    );
    let mut live: Vec<Live> = Vec::new();
    let mut ranges: BTreeMap<usize, usize> = BTreeMap::new();
    let mut tag = 0u8;
    let ctx = |irq: bool, f: &mut dyn FnMut()| {
        if irq {
            p.interrupt(f)
                .expect("interrupts are enabled between operations");
        } else {
            f()
        }
    };
    for op in ops {
        match *op {
            Op::Alloc { c, cpu, irq } => {
                let c = c % caches.len();
                p.set_cpu(cpu % CPUS);
                let mut got = None;
                ctx(irq, &mut || got = caches[c].alloc());
                let Some(o) = got else { continue };
                tag = tag.wrapping_add(1);
                add(&mut ranges, o, sizes[c]);
                fill(o, sizes[c], tag);
                live.push(Live {
                    ptr: o,
                    size: sizes[c],
                    cache: Some(c),
                    tag,
                });
            }
            Op::Kmalloc { size, cpu, irq } => {
                let size = size.clamp(1, 20_000);
                p.set_cpu(cpu % CPUS);
                let mut got = None;
                ctx(irq, &mut || got = k.kmalloc(size, 8));
                let Some(o) = got else { continue };
                tag = tag.wrapping_add(1);
                assert!(k.ksize(o.as_ptr()) >= size);
                add(&mut ranges, o, size);
                fill(o, size, tag);
                live.push(Live {
                    ptr: o,
                    size,
                    cache: None,
                    tag,
                });
            }
            Op::Free { i, cpu, irq } => {
                if live.is_empty() {
                    continue;
                }
                p.set_cpu(cpu % CPUS);
                let l = live.swap_remove(i % live.len());
                assert!(
                    holds(l.ptr, l.size, l.tag),
                    "contents of {:p} changed",
                    l.ptr
                );
                ranges.remove(&(l.ptr.as_ptr() as usize));
                // SAFETY: live, allocated from there.
                ctx(irq, &mut || unsafe {
                    match l.cache {
                        Some(c) => caches[c].free(l.ptr),
                        None => k.kfree(l.ptr.as_ptr()),
                    }
                });
            }
            Op::Flush { cpu } => {
                p.set_cpu(cpu % CPUS);
                for c in &caches {
                    c.flush_local();
                }
                k.flush_local();
            }
            Op::FlushRemote { cpu, from } => {
                p.set_cpu(from % CPUS);
                for c in &caches {
                    c.flush_cpu(cpu % CPUS);
                }
            }
            Op::AllocBulk { c, n, cpu } => {
                let c = c % caches.len();
                let n = n.clamp(1, 100);
                p.set_cpu(cpu % CPUS);
                let mut out = std::vec![None; n];
                if caches[c].alloc_bulk(&mut out) == 0 {
                    continue;
                }
                for o in out {
                    let o = o.expect("alloc_bulk filled every slot");
                    tag = tag.wrapping_add(1);
                    add(&mut ranges, o, sizes[c]);
                    fill(o, sizes[c], tag);
                    live.push(Live {
                        ptr: o,
                        size: sizes[c],
                        cache: Some(c),
                        tag,
                    });
                }
            }
            Op::FreeBulk { c, n, cpu } => {
                let c = c % caches.len();
                p.set_cpu(cpu % CPUS);
                let mut batch = Vec::new();
                let mut k = live.len();
                while k > 0 && batch.len() < n.clamp(1, 150) {
                    k -= 1;
                    if live[k].cache == Some(c) && (k % 3 != 1 || batch.len() % 2 == 0) {
                        let l = live.swap_remove(k);
                        assert!(
                            holds(l.ptr, l.size, l.tag),
                            "contents of {:p} changed",
                            l.ptr
                        );
                        ranges.remove(&(l.ptr.as_ptr() as usize));
                        batch.push(l.ptr);
                    }
                }
                // SAFETY: live objects of cache `c`, each once.
                unsafe { caches[c].free_bulk(&batch) };
            }
            Op::Shrink { c } => {
                caches[c % caches.len()].shrink();
                // The idle shrink of every cache (each is shrunk once it
                // saw no slab activity for a call), then a purge of the
                // buddy's free blocks (order 1 and up) with a page source
                // that zeroes them, as `MADV_DONTNEED` does: slabs built
                // later from those known-zero pages must still hold what
                // is written into them.
                // Not under miri: there these passes made `machine_smoke`
                // run past 15 minutes (every purge batch re-checks the
                // purged memory byte by byte under `invariants`); the
                // native runs, proptest and fuzz cover them.
                if !cfg!(miri) {
                    for c in &caches {
                        c.shrink_if_idle();
                    }
                    k.shrink_idle();
                    m.buddy.trim_with(|p, n| {
                        // SAFETY: a free block the purge pass isolated:
                        // nobody holds it, `n` bytes of the arena.
                        unsafe { p.as_ptr().write_bytes(0, n) };
                        true
                    });
                }
            }
            Op::KmallocBad { which, zero, cpu } => {
                let (size, align) = BAD_KMALLOC[which % BAD_KMALLOC.len()];
                p.set_cpu(cpu % CPUS);
                let got = if zero {
                    k.kzalloc(size, align)
                } else {
                    k.kmalloc(size, align)
                };
                assert_eq!(got, None, "kmalloc({size:#x}, {align:#x}) must refuse");
            }
            Op::Bad { kind, i, cpu } => {
                if live.is_empty() {
                    continue;
                }
                p.set_cpu(cpu % CPUS);
                bad_input(&caches, &k, &mut live, &mut ranges, kind % BAD_KINDS, i);
            }
        }
        for c in &mut caches {
            c.validate_exclusive();
        }
    }
    for l in live.drain(..) {
        assert!(holds(l.ptr, l.size, l.tag));
        // SAFETY: live.
        unsafe {
            match l.cache {
                Some(c) => caches[c].free(l.ptr),
                None => k.kfree(l.ptr.as_ptr()),
            }
        }
    }
    for c in &mut caches {
        c.validate_exclusive();
        assert_eq!(c.destroy_exclusive(), Ok(()));
    }
    drop(caches);
    drop(k);
    assert!(m.all_free(), "everything back in the buddy");
}

/// One [`Op::Bad`]: `kind` around `live[i % live.len()]`.
fn bad_input(
    caches: &[Cache<'_>],
    k: &Kmalloc<&Buddy<TestPlatform>, TestPlatform, CPUS>,
    live: &mut Vec<Live>,
    ranges: &mut BTreeMap<usize, usize>,
    kind: usize,
    i: usize,
) {
    // Caches that recognise an object freed earlier (hardened: their free
    // pointer words; kmalloc's caches are hardened and kfree takes the
    // slab path); cache 0 has only the naive check, cache 3 (debug)
    // panics on a double free by design.
    let detects_aba = |c: Option<usize>| matches!(c, None | Some(1) | Some(2));
    let try_free = |c: Option<usize>, p: NonNull<u8>| -> Result<(), crate::error::FreeError> {
        // SAFETY: refused before any change (the cases below only pass
        // pointers that must be refused), or a live object of `c`.
        unsafe {
            match c {
                Some(c) => caches[c].try_free(p),
                None => k.try_kfree(p.as_ptr()),
            }
        }
    };
    let i = i % live.len();
    let mut local = 0u64;
    let foreign = NonNull::from(&mut local).cast::<u8>();
    match kind {
        // Double free: once (legitimately), then again.
        0 => {
            let l = live.swap_remove(i);
            if l.cache == Some(3) {
                live.push(l);
                return;
            }
            assert!(
                holds(l.ptr, l.size, l.tag),
                "contents of {:p} changed",
                l.ptr
            );
            ranges.remove(&(l.ptr.as_ptr() as usize));
            try_free(l.cache, l.ptr).expect("a live object frees");
            let e = try_free(l.cache, l.ptr);
            assert!(e.is_err(), "double free of {:p} accepted", l.ptr);
        }
        // ABA: a, b, then a again.
        1 => {
            let c = live[i].cache;
            if !detects_aba(c) {
                return;
            }
            let Some(j) = (0..live.len()).find(|&j| j != i && live[j].cache == c) else {
                return;
            };
            let (a, b) = (live[i].ptr, live[j].ptr);
            for x in [a, b] {
                let at = live.iter().position(|l| l.ptr == x).unwrap();
                let l = live.swap_remove(at);
                assert!(
                    holds(l.ptr, l.size, l.tag),
                    "contents of {:p} changed",
                    l.ptr
                );
                ranges.remove(&(l.ptr.as_ptr() as usize));
                try_free(c, x).expect("a live object frees");
            }
            let e = try_free(c, a);
            assert!(e.is_err(), "ABA double free of {a:p} accepted");
        }
        // A foreign pointer, to every cache and to kfree.
        2 => {
            for c in 0..caches.len() {
                assert!(try_free(Some(c), foreign).is_err());
            }
            assert!(try_free(None, foreign).is_err());
        }
        // An interior pointer.
        3 => {
            let l = &live[i];
            let inner = NonNull::new(l.ptr.as_ptr().wrapping_add(8)).unwrap();
            assert!(try_free(l.cache, inner).is_err(), "interior free accepted");
        }
        // The wrong cache (and a cache object to kfree).
        4 => {
            let l = &live[i];
            let other = match l.cache {
                Some(c) => {
                    assert!(try_free(None, l.ptr).is_err(), "kfree of a cache object");
                    (c + 1) % caches.len()
                }
                None => 0,
            };
            assert!(
                try_free(Some(other), l.ptr).is_err(),
                "free into the wrong cache"
            );
        }
        // Bulk: a duplicate, or a foreign pointer in the middle.
        _ => {
            let Some(c) = live[i].cache else { return };
            let mut batch: Vec<NonNull<u8>> = live
                .iter()
                .filter(|l| l.cache == Some(c))
                .map(|l| l.ptr)
                .take(40)
                .collect();
            let mid = batch.len() / 2;
            if kind == 5 {
                let d = batch[0];
                batch.insert(mid, d);
            } else {
                batch.insert(mid, foreign);
            }
            // SAFETY: refused before any change (a duplicate, or a foreign
            // pointer).
            let e = unsafe { caches[c].try_free_bulk(&batch) };
            assert!(e.is_err(), "bad bulk free accepted");
            // Nothing was freed: the model keeps them, and their contents
            // are checked when they are freed for real.
        }
    }
}

fn add(ranges: &mut BTreeMap<usize, usize>, o: NonNull<u8>, size: usize) {
    let a = o.as_ptr() as usize;
    assert_eq!(a % 8, 0, "misaligned");
    if let Some((&s, &n)) = ranges.range(..=a).next_back() {
        assert!(s + n <= a, "{a:#x} overlaps {s:#x}+{n}");
    }
    if let Some((&s, _)) = ranges.range(a..).next() {
        assert!(a + size <= s, "{a:#x}+{size} overlaps {s:#x}");
    }
    ranges.insert(a, size);
}
