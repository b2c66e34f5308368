//! Loom models of the SLUB protocols: the lockless `(freelist, tid)` fast
//! path against remote frees into the same (frozen) slab; remote frees
//! racing with deactivation; node partial-list moves against concurrent
//! frees; a full slab frozen onto a CPU partial list while other CPUs free
//! into it; and, with the locked (PREEMPT_RT) strategy, two contexts on one
//! CPU whose slow paths drop and re-take the local lock (the installed-
//! meanwhile flush).
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p slub
//! --release --test loom`.
//!
//! Not modelled here: the lockless fast path against an interrupt on the
//! *same* CPU. A loom "interrupt" is a concurrent thread, while a real one
//! freezes the task it interrupts; the slow path relies on that freezing
//! (it runs with interrupts masked, and the task cannot run meanwhile). The
//! deterministic test platform covers it instead: interrupts fired at every
//! hook point of the fast path (`interrupts_inside_the_lockless_fast_path`)
//! and interrupt-context operations in the state machine and fuzz target.
//!
//! Memory: the shared fixture `buddy::loom_support::Heap`, a buddy of
//! 64-byte pages, 8 pages, 16-byte objects, slabs of order 0 (4 objects
//! each); descriptors placed with `add_span`. Every context, the model's
//! body included, is a 1 MiB loom thread (`loom_support::{run, spawn}`),
//! where a buddy and a cache fit.
#![cfg(loom)]

/// The per-node list locks (issue #20): two CPUs on two nodes.
#[path = "loom_numa/mod.rs"]
mod numa;

use std::ptr::NonNull;

use buddy::loom_support::{run, spawn, Heap};
use local_lock::loom_platform::LoomPlatform;
use local_lock::Strategy;
use loom::sync::Arc;
use slub::{Geometry, KmemCache, SlabFlags, SlubStat};

const PAGE: usize = 64;
const PAGES: usize = 8;
const OBJ: usize = 16;
type Cache = KmemCache<Heap, LoomPlatform, 3>;

fn setup(cpus: usize, strategy: Strategy, flags: SlabFlags) -> (LoomPlatform, Arc<Cache>) {
    let p = LoomPlatform::new(cpus, strategy);
    let g = Geometry {
        page_size: PAGE,
        nr_cpus: 1,
        max_order: 0,
        page_max_order: 3,
    };
    let c = KmemCache::create_with("loom", OBJ, 8, flags, g, Heap::new(&p, PAGE, 3), p.clone())
        .unwrap();
    assert_eq!(c.layout().oo.objects, 4);
    (p, Arc::new(c))
}

/// Allocates, writes a pattern and checks it: an object handed out twice
/// would be overwritten by the other owner.
fn take(c: &Cache, v: u8) -> usize {
    let o = c.alloc().expect("the heap has room");
    // SAFETY: ours.
    unsafe { o.as_ptr().write_bytes(v, OBJ) };
    o.as_ptr() as usize
}

fn give(c: &Cache, o: usize, v: u8) {
    let p = o as *mut u8;
    // SAFETY: ours until the free.
    let s = unsafe { std::slice::from_raw_parts(p, OBJ) };
    assert!(s.iter().all(|&b| b == v), "object {o:#x} handed out twice");
    // SAFETY: allocated from `c`, freed once.
    unsafe { c.free(NonNull::new(p).unwrap()) };
}

/// Flushes every CPU from the CPU itself, checks the invariants and that
/// destroy finds nothing allocated, and that every page went back.
fn finish(p: &LoomPlatform, c: Arc<Cache>, cpus: usize) {
    for cpu in 0..cpus {
        p.set_cpu(cpu);
        c.flush_local();
    }
    p.set_cpu(0);
    let mut c = Arc::try_unwrap(c).ok().expect("all threads joined");
    c.validate_exclusive();
    assert_eq!(c.destroy_exclusive(), Ok(()));
    assert_eq!(c.nr_slabs(), 0);
    let b = &c.source().b;
    assert_eq!(b.total_free_pages(), PAGES, "every slab back in the buddy");
}

/// CPU 0 allocates through the lockless fast path and then the slow path's
/// refill from its slab's freelist, while CPU 1 frees an object of that
/// slab (a remote free into a frozen slab).
#[test]
fn fast_path_vs_remote_free() {
    run("fast_path_vs_remote_free", || {
        let (p, c) = setup(2, Strategy::Pinned, SlabFlags::NONE);
        p.set_cpu(0);
        let a = take(&c, 0xa1);
        assert!(c.lockless());
        let t = {
            let (p, c) = (p.clone(), c.clone());
            spawn(move || {
                p.set_cpu(1);
                give(&c, a, 0xa1);
            })
        };
        // Three from the CPU freelist, the fourth through the slow path:
        // the refill takes the slab's freelist (with `a`, if its remote
        // free came first) or, if it is empty, a new slab.
        let got: Vec<usize> = (0..4).map(|i| take(&c, 0x10 + i as u8)).collect();
        for (i, o) in got.iter().enumerate() {
            give(&c, *o, 0x10 + i as u8);
        }
        t.join().unwrap();
        assert!(c.stats().get(SlubStat::FREE_FASTPATH) >= 1);
        finish(&p, c, 2);
    });
}

/// Two remote frees into CPU 0's slab race with CPU 0 deactivating it
/// (flush): none may be lost, the slab ends on the right list.
#[test]
fn remote_frees_vs_deactivation() {
    run("remote_frees_vs_deactivation", || {
        let (p, c) = setup(3, Strategy::Pinned, SlabFlags::NONE);
        p.set_cpu(0);
        let a = take(&c, 1);
        let b = take(&c, 2);
        let ts: Vec<_> = [(1, a, 1u8), (2, b, 2u8)]
            .into_iter()
            .map(|(cpu, o, v)| {
                let (p, c) = (p.clone(), c.clone());
                spawn(move || {
                    p.set_cpu(cpu);
                    give(&c, o, v);
                })
            })
            .collect();
        c.flush_local();
        for t in ts {
            t.join().unwrap();
        }
        finish(&p, c, 3);
    });
}

/// A remote free turns a full slab into a partial one (no CPU partial
/// lists: straight onto the node list under `list_lock`) while CPU 0
/// deactivates its slab onto the node list and then takes a slab from it.
#[test]
fn partial_list_moves_vs_concurrent_free() {
    run("partial_list_moves_vs_concurrent_free", || {
        let (p, c) = setup(2, Strategy::Pinned, SlabFlags::NO_CPU_PARTIAL);
        p.set_cpu(0);
        // Slab 1 full (4 objects), slab 2 installed with one object taken.
        let objs: Vec<usize> = (0..5).map(|i| take(&c, i as u8)).collect();
        let t = {
            let (p, c) = (p.clone(), c.clone());
            let o = objs[0];
            spawn(move || {
                p.set_cpu(1);
                give(&c, o, 0);
            })
        };
        c.flush_local();
        let z = take(&c, 0x77);
        t.join().unwrap();
        give(&c, z, 0x77);
        for (i, o) in objs.iter().enumerate().skip(1) {
            give(&c, *o, i as u8);
        }
        finish(&p, c, 2);
    });
}

/// CPU 1 frees into a full slab, freezing it onto its CPU partial list
/// (`put_cpu_partial`), then allocates from it, while CPU 0 frees another
/// object of the same slab (into a slab that is frozen, or not yet).
#[test]
fn freeze_onto_cpu_partial_vs_remote_free() {
    run("freeze_onto_cpu_partial_vs_remote_free", || {
        let (p, c) = setup(2, Strategy::Pinned, SlabFlags::NONE);
        p.set_cpu(0);
        let objs: Vec<usize> = (0..5).map(|i| take(&c, i as u8)).collect();
        let t = {
            let (p, c) = (p.clone(), c.clone());
            let o = objs[0];
            spawn(move || {
                p.set_cpu(1);
                give(&c, o, 0);
                let n = take(&c, 0x55);
                give(&c, n, 0x55);
            })
        };
        give(&c, objs[1], 1);
        t.join().unwrap();
        for (i, o) in objs.iter().enumerate().skip(2) {
            give(&c, *o, i as u8);
        }
        finish(&p, c, 2);
    });
}

/// Locked strategy (PREEMPT_RT): two contexts on the same CPU allocate into
/// an empty cache. Each drops the local lock to get a slab; the second to
/// re-take it finds a slab installed meanwhile and flushes it
/// (`CPUSLAB_FLUSH`), or uses the first one's.
#[test]
fn rt_slow_paths_on_one_cpu() {
    run("rt_slow_paths_on_one_cpu", || {
        let (p, c) = setup(2, Strategy::Locked, SlabFlags::NONE);
        assert!(!c.lockless());
        let t = {
            let (p, c) = (p.clone(), c.clone());
            spawn(move || {
                p.set_cpu(0);
                let o = take(&c, 0x31);
                give(&c, o, 0x31);
            })
        };
        p.set_cpu(0);
        let o = take(&c, 0x42);
        give(&c, o, 0x42);
        t.join().unwrap();
        finish(&p, c, 2);
    });
}

/// Sheaves (capacity 2) on the locked strategy: CPU 0 allocates and frees
/// through its sheaves (swaps, barn trades, refills) while CPU 1 frees into
/// its own sheaves (trading full ones at the barn) and then flushes CPU 0
/// remotely, sheaves included.
#[test]
fn sheaf_swap_vs_barn_trade_and_remote_flush() {
    check_long("sheaf_swap_vs_barn_trade_and_remote_flush", sheaf_model);
}

/// Runs a model whose executions are long (sheaf pages, slabs and the final
/// destroy): more branches per execution than loom's default 1000; prints
/// the execution count.
fn check_long(name: &'static str, model: fn()) {
    let mut b = loom::model::Builder::new();
    b.max_branches = 20_000;
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r = runs.clone();
    let t0 = std::time::Instant::now();
    b.check(move || {
        r.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        spawn(model).join().unwrap()
    });
    println!(
        "loom {name}: {} executions (preemption bound {:?}) in {:.2?}",
        runs.load(std::sync::atomic::Ordering::Relaxed),
        b.preemption_bound,
        t0.elapsed()
    );
}

fn sheaf_model() {
    {
        let p = LoomPlatform::new(2, Strategy::Locked);
        let c = sheaf_cache(&p);
        p.set_cpu(1);
        let mine: Vec<usize> = (0..3).map(|i| take(&c, 0x60 + i as u8)).collect();
        let t = {
            let (p, c) = (p.clone(), c.clone());
            spawn(move || {
                p.set_cpu(0);
                let a = take(&c, 0x70);
                let b = take(&c, 0x71);
                give(&c, a, 0x70);
                give(&c, b, 0x71);
            })
        };
        for (i, o) in mine.iter().enumerate() {
            give(&c, *o, 0x60 + i as u8);
        }
        c.flush_cpu(0);
        t.join().unwrap();
        p.set_cpu(0);
        c.shrink();
        finish(&p, c, 2);
    }
}

/// The bulk calls through sheaves (capacity 2) on the locked strategy:
/// CPU 1 frees three objects in one `free_bulk` (a window validated by the
/// CPU's range, pushed onto its sheaves, a full sheaf traded at the barn)
/// while CPU 0 takes two objects with `alloc_bulk` (from its sheaves or a
/// full sheaf of the barn, else slabs) and gives them back with
/// `free_bulk`; then CPU 1 flushes CPU 0 remotely.
#[test]
fn sheaf_bulk_vs_barn_trade_and_remote_flush() {
    check_long(
        "sheaf_bulk_vs_barn_trade_and_remote_flush",
        sheaf_bulk_model,
    );
}

fn bulk_take(c: &Cache, out: &mut [*mut u8], v: u8) {
    let mut got = vec![None; out.len()];
    assert_eq!(c.alloc_bulk(&mut got), out.len(), "the heap has room");
    for (o, g) in out.iter_mut().zip(got) {
        *o = g.unwrap().as_ptr();
    }
    for p in out.iter() {
        // SAFETY: ours.
        unsafe { p.write_bytes(v, OBJ) };
    }
}

fn bulk_give(c: &Cache, objs: &[*mut u8], v: u8) {
    let nn: Vec<NonNull<u8>> = objs
        .iter()
        .map(|p| {
            // SAFETY: ours until the free.
            let s = unsafe { std::slice::from_raw_parts(*p, OBJ) };
            assert!(s.iter().all(|&b| b == v), "object {p:p} handed out twice");
            NonNull::new(*p).unwrap()
        })
        .collect();
    // SAFETY: allocated from `c`, each once, freed once.
    unsafe { c.free_bulk(&nn) };
}

/// A cache with sheaves of two objects on two CPUs of the locked strategy.
fn sheaf_cache(p: &LoomPlatform) -> Arc<Cache> {
    let g = Geometry {
        page_size: PAGE,
        nr_cpus: 1,
        max_order: 0,
        page_max_order: 3,
    };
    let c = KmemCache::create_with(
        "loom",
        OBJ,
        8,
        SlabFlags::NONE,
        g,
        Heap::new(p, PAGE, 3),
        p.clone(),
    )
    .unwrap()
    .with_sheaves(2);
    Arc::new(c)
}

fn sheaf_bulk_model() {
    let p = LoomPlatform::new(2, Strategy::Locked);
    let c = sheaf_cache(&p);
    p.set_cpu(1);
    let mut mine = [std::ptr::null_mut::<u8>(); 3];
    bulk_take(&c, &mut mine, 0x60);
    let t = {
        let (p, c) = (p.clone(), c.clone());
        spawn(move || {
            p.set_cpu(0);
            let mut two = [std::ptr::null_mut::<u8>(); 2];
            bulk_take(&c, &mut two, 0x70);
            bulk_give(&c, &two, 0x70);
        })
    };
    bulk_give(&c, &mine, 0x60);
    c.flush_cpu(0);
    t.join().unwrap();
    p.set_cpu(0);
    c.shrink();
    finish(&p, c, 2);
}
