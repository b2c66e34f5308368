//! Instruction counts of `GlobalSlub`'s paths, for callgrind:
//!
//! ```sh
//! cargo build --release -p mm-bench --example pair_count
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/pair_count default 64 pair 100000
//! ```
//!
//! Run it twice with different counts: the difference of the totals over
//! the difference of the counts is the cost of one operation, without the
//! start-up. Configs: `default` (`GlobalSlub::new()`: sheaves, hardened),
//! `plain` (sheaves, no hardening), `nosheaves` (neither),
//! `nosheaves-hardened`; and the peers `mimalloc`, `jemalloc`, `snmalloc` and `glibc`
//! (their `GlobalAlloc` through the same loops: `pair`, `pairdyn`,
//! `batchK`, `churn`, `larsonK`), for the counts CI compares with them
//! (snmalloc fails to initialise under valgrind: timing only, e.g.
//! `taskset -c 1 pair_count snmalloc 64 churn 50000000`). Shapes: `pair` (alloc + free), `pairdyn` (the same
//! with the layout through `black_box` at each call, so its class cannot be
//! computed once for the loop: what a call through `__rust_alloc` or
//! `malloc` pays), `global` (`std::alloc::alloc` and `dealloc` through
//! this program's `#[global_allocator]`, a `GlobalSlub::new()`: the
//! `__rust_alloc` shim and the `GlobalAlloc` methods as a Rust program
//! calls them, not inlined into the loop), `batchK` (K
//! allocs then K frees, per object; `batch64` in CI), `bulkK` (the bulk
//! API: K objects allocated in one call, freed in one, per object),
//! `churn` (a ring of 64 live objects
//! of random sizes 16..=1024 B, one replaced per operation).
//! `PAIR_COUNT_PURGE=off` pauses the pages' automatic purging (issue #17's
//! on/off cost: sizes above 8 KiB are page blocks, 4 MiB ones freed
//! straight to the buddy, where the decay and the resident cap run).

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;

use slub::{GlobalSlub, SlabFlags};

static DEFAULT: GlobalSlub = GlobalSlub::new();
/// This program's global allocator (the `global` shape): a default heap.
#[global_allocator]
static GLOBAL: GlobalSlub = GlobalSlub::new();
static PLAIN: GlobalSlub = GlobalSlub::with_flags(SlabFlags::NONE);
static NOSHEAVES: GlobalSlub = GlobalSlub::with_config(SlabFlags::NONE, 0);
static NOSHEAVES_HARDENED: GlobalSlub = GlobalSlub::with_config(SlabFlags::HARDENED, 0);

/// The next of a xorshift sequence `x`, and a layout of 16..=1024 B from it.
fn random_layout(x: &mut u64) -> Layout {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    Layout::from_size_align(16 + (*x as usize % 1009), 8).expect("layout")
}

/// The shapes of any `GlobalAlloc` (the peers' too); `bulkK` needs
/// `slub` (a `GlobalSlub`'s kmalloc caches).
fn run<A: GlobalAlloc>(h: &A, slub: Option<&GlobalSlub>, l: Layout, shape: &str, n: usize) {
    match shape {
        "pair" => {
            for _ in 0..n {
                // SAFETY: a non-zero layout; freed with the same layout.
                unsafe {
                    let p = black_box(h.alloc(l));
                    h.dealloc(p, l);
                }
            }
        }
        "pairdyn" => {
            for _ in 0..n {
                // SAFETY: as above.
                unsafe {
                    let p = black_box(h.alloc(black_box(l)));
                    h.dealloc(p, black_box(l));
                }
            }
        }
        b if b.starts_with("bulk") => {
            // `bulkK`: kmem_cache_alloc_bulk of K objects of the layout's
            // kmalloc cache, then kmem_cache_free_bulk of them (per
            // object): slub-prodcons's x64 rows on one thread.
            let k: usize = b["bulk".len()..].parse().expect("bulk size");
            let h = slub.expect("bulkK counts a GlobalSlub config");
            let class = slub::kmalloc_class(l.size(), l.align()).expect("a kmalloc class");
            let c = &h.kmalloc().caches()[class];
            let mut v = vec![None; k];
            let mut objs = Vec::with_capacity(k);
            for _ in 0..n / k {
                assert_eq!(c.alloc_bulk(black_box(&mut v)), k);
                objs.clear();
                objs.extend(v.iter().map(|o| o.expect("filled")));
                // SAFETY: just allocated, each freed once.
                unsafe { c.free_bulk(black_box(&objs)) };
            }
        }
        b if b.starts_with("batch") => {
            // `batchK`: K allocs then K frees (per object).
            let k: usize = b["batch".len()..].parse().expect("batch size");
            let mut v = vec![core::ptr::null_mut::<u8>(); k];
            for _ in 0..n / k {
                for s in v.iter_mut() {
                    // SAFETY: as above.
                    *s = black_box(unsafe { h.alloc(l) });
                }
                for s in v.iter() {
                    // SAFETY: as above.
                    unsafe { h.dealloc(*s, l) };
                }
            }
        }
        "churn" => {
            // slub-threads' shape on one thread: a ring of 64 live objects
            // of random sizes 16..=1024 B (l.size() ignored), one replaced
            // per operation.
            let mut ring = [(core::ptr::null_mut::<u8>(), l); 64];
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for i in 0..n {
                let nl = random_layout(&mut x);
                let slot = &mut ring[i % 64];
                if !slot.0.is_null() {
                    // SAFETY: allocated below with its layout, freed once.
                    unsafe { h.dealloc(slot.0, slot.1) };
                }
                // SAFETY: as above.
                *slot = (black_box(unsafe { h.alloc(nl) }), nl);
            }
            for s in ring {
                if !s.0.is_null() {
                    // SAFETY: as above.
                    unsafe { h.dealloc(s.0, s.1) };
                }
            }
        }
        b if b.starts_with("larson") => {
            // slub-larson's shape on one thread: K live objects of random
            // sizes 16..=1024 B (l.size() ignored), a random one replaced
            // per operation (so most frees are far from the last ones).
            let k: usize = b["larson".len()..].parse().unwrap_or(8192);
            let mut ring = vec![(core::ptr::null_mut::<u8>(), l); k];
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for _ in 0..n {
                let nl = random_layout(&mut x);
                let slot = &mut ring[(x >> 10) as usize % k];
                if !slot.0.is_null() {
                    // SAFETY: allocated below with its layout, freed once.
                    unsafe { h.dealloc(slot.0, slot.1) };
                }
                // SAFETY: as above.
                *slot = (black_box(unsafe { h.alloc(nl) }), nl);
            }
            for s in ring {
                if !s.0.is_null() {
                    // SAFETY: as above.
                    unsafe { h.dealloc(s.0, s.1) };
                }
            }
        }
        "global" => {
            // What a Rust program runs: `std::alloc::alloc`/`dealloc`
            // (`__rust_alloc`/`__rust_dealloc`, then `GlobalSlub`'s
            // `GlobalAlloc`, this program's `#[global_allocator]`), the
            // layout opaque as a call through the shim sees it. (`h` is
            // not used: the global allocator is `GLOBAL`, a default heap.)
            for _ in 0..n {
                // SAFETY: a non-zero layout; freed with the same layout.
                unsafe {
                    let p = black_box(std::alloc::alloc(black_box(l)));
                    std::alloc::dealloc(p, black_box(l));
                }
            }
        }
        _ => panic!("unknown shape {shape:?} (pair, pairdyn, global, batchK, churn, larsonK)"),
    }
}

/// valgrind does not implement rseq, so glibc could not register it:
/// count the restartable paths as if on CPU 0 (this process has one
/// thread). Run before `main` (a constructor), so that the global
/// allocator, which the runtime uses before `main`, takes the
/// restartable paths from its first allocation, as it does outside
/// valgrind (decided once, at a heap's first use; counted from `main`,
/// its `global` pairs took the locked paths: 254 instructions).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
extern "C" fn count_as_cpu0() {
    if std::env::var_os("PAIR_COUNT_NO_RSEQ").is_none() && !local_lock::rseq::available() {
        // SAFETY: single-threaded, before any of the counted caches (and
        // the global allocator) is used.
        let ok = unsafe { local_lock::rseq::assume_cpu0_for_counting() };
        eprintln!("pair_count: rseq unavailable (valgrind?): counted as CPU 0: {ok}");
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[used]
#[unsafe(link_section = ".init_array")]
static COUNT_AS_CPU0: extern "C" fn() = count_as_cpu0;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let cfg = a.get(1).map_or("default", |s| s.as_str());
    let size: usize = a.get(2).map_or(64, |s| s.parse().expect("size"));
    let shape = a.get(3).map_or("pair", |s| s.as_str());
    let n: usize = a.get(4).map_or(100_000, |s| s.parse().expect("count"));
    let l = Layout::from_size_align(size, 8).expect("layout");
    // The peers, through the same loops (their `GlobalAlloc` calls are
    // not inlined into them: each crate's shim calls the C library).
    let peer = |h: &dyn Fn(usize)| {
        // Warm up: first use, thread caches, pages.
        h(4096);
        h(n);
    };
    match cfg {
        "mimalloc" => return peer(&|k| run(&mimalloc::MiMalloc, None, l, shape, k)),
        "jemalloc" => return peer(&|k| run(&tikv_jemallocator::Jemalloc, None, l, shape, k)),
        "glibc" => return peer(&|k| run(&std::alloc::System, None, l, shape, k)),
        "snmalloc" => return peer(&|k| run(&snmalloc_rs::SnMalloc, None, l, shape, k)),
        _ => {}
    }
    let h = match cfg {
        "default" => &DEFAULT,
        "plain" => &PLAIN,
        "nosheaves" => &NOSHEAVES,
        "nosheaves-hardened" => &NOSHEAVES_HARDENED,
        _ => panic!("unknown config {cfg:?}"),
    };
    // `PAIR_COUNT_PURGE=off`: the pages' automatic purging (decay, resident
    // cap, idle shrink) paused, for the on/off cost of issue #17.
    if std::env::var("PAIR_COUNT_PURGE").as_deref() == Ok("off") {
        h.pages().pcp().source().set_decay_paused(true);
    }
    // Warm up: first use, slabs, sheaves.
    run(h, Some(h), l, shape, 4096);
    run(h, Some(h), l, shape, n);
}
