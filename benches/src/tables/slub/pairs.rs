//! `slub-pairs`: one alloc + free pair of 16..4096 B per operation (seed
//! 001's fast paths); also the pair loop the other tables' workers warm up
//! with.

use std::alloc::Layout;
use std::sync::Arc;

use super::heaps::GLOBAL_SLUB_ROW;
use super::heaps::{
    kernel_kmem_cache, layout, measure_rows, ratio_notes, Caches, Competitors, FastPath, Kind,
    ObjHeap, Visit, ALIGN, ARENA_BYTES, LOCKED_ROW, LOCKLESS_ROW,
};
use crate::measure::Verdict;
use crate::measure::{black_box, fmt_num, Case, Ctx, Report, Stopwatch};
use crate::tables::pages::{median_of, verdict};
use crate::tables::Table;

// ---------------------------------------------------------------------------
// The case body
// ---------------------------------------------------------------------------

/// `n` alloc + free pairs of `l`, the layout through `black_box` at each
/// call: a program's allocation reaches the allocator through
/// `__rust_alloc` (or `malloc`), whose size the allocator cannot see at
/// compile time, so nothing of the size-class lookup may be computed once
/// for the loop (an inline allocator could, the peers behind their FFI
/// calls cannot).
#[inline(always)]
pub(super) fn pairs<A: ObjHeap>(a: &A, l: Layout, n: u64) {
    for _ in 0..n {
        let p = black_box(a.alloc(black_box(l)));
        // SAFETY: allocated just above with `l`, freed once.
        unsafe { a.free(p, black_box(l)) };
    }
}

/// Untimed pairs a worker does first: a fresh thread's first allocation
/// sets up its thread cache, heap or slot (jemalloc's tcache, rpmalloc's
/// heap, GlobalSlub's virtual CPU and CPU slab), a one-time cost per thread
/// that the runner's per-sample threads would otherwise pay in every batch.
pub const WARM_PAIRS: u64 = 256;

/// A case doing `iters` alloc + free pairs of `l` on `threads` threads
/// (each thread's set-up, [`WARM_PAIRS`], untimed).
pub fn pair_case<A: ObjHeap>(name: &str, a: &Arc<A>, l: Layout, threads: usize) -> Case {
    let a = a.clone();
    Case::custom(name, move |t, iters| {
        if threads > 1 {
            a.enter_thread(t);
        }
        pairs(&*a, l, WARM_PAIRS);
        let sw = Stopwatch::start();
        pairs(&*a, l, iters);
        sw.stop()
    })
    .threads(threads)
}

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

/// Object sizes of `slub-pairs`.
pub const PAIR_SIZES: [usize; 5] = [16, 64, 256, 1024, 4096];

struct PairCases {
    l: Layout,
    threads: usize,
    cases: Vec<Case>,
}

impl Visit for PairCases {
    fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, a: &Arc<A>) {
        self.cases.push(pair_case(name, a, self.l, self.threads));
    }
}

/// The `slub-pairs` table (see the [SLUB tables](super)).
pub struct SlubPairs;

impl Table for SlubPairs {
    fn name(&self) -> &'static str {
        "slub-pairs"
    }

    fn about(&self) -> &'static str {
        "SLUB fast paths (seed 001): one alloc + free of 16..4096 B: GlobalSlub, KmemCache (lockless / local_lock / per-thread), glibc, mimalloc, jemalloc, snmalloc, rpmalloc, talc, linked_list_allocator, buddy_system_allocator"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let comp = Competitors::new();
        let mut rows = Vec::new();
        let mut summary = Vec::new();
        let mut verdicts = Vec::new();
        for size in PAIR_SIZES {
            let section = format!("{size} B (Layout align {ALIGN}): one alloc + free");
            let mut v = PairCases {
                l: layout(size),
                threads: 1,
                cases: Vec::new(),
            };
            comp.visit(size, Caches::WithLocked, &mut v);
            let mut these = measure_rows(cx, v.cases, &section);
            if let Some((s, best)) = ratio_notes(&mut these) {
                verdicts.push(
                    Verdict::at_most(
                        format!("{size} B pair: GlobalSlub <= fastest peer"),
                        s,
                        best.1,
                        "ns/pair",
                    )
                    .vs_peer(best.1 / s)
                    .on(&these, &[GLOBAL_SLUB_ROW, best.0]),
                );
                let lockless = median_of(&these, LOCKLESS_ROW).unwrap_or(f64::NAN);
                let locked = median_of(&these, LOCKED_ROW).unwrap_or(f64::NAN);
                summary.push(format!(
                    "  {size:>5}  {:>10}  {:>8} {:<20}  {:>5.2}x {:<6}  {:>9}  {:>9}  {:>+6.1}%",
                    fmt_num(s),
                    fmt_num(best.1),
                    best.0,
                    s / best.1,
                    verdict(s <= best.1),
                    fmt_num(lockless),
                    fmt_num(locked),
                    (locked / lockless - 1.0) * 100.0,
                ));
            }
            rows.extend(these);
        }
        let lockless = kernel_kmem_cache(64, FastPath::Lockless).cache.lockless();
        let mut notes = vec![
            format!(
                "ns/op: one alloc + free pair through GlobalAlloc-style calls, the pointer and the layout through black_box (no size-class work hoisted out of the loop), nothing written. \
                 GlobalSlub = slub::GlobalSlub (kmalloc classes with per-CPU sheaves reached by rseq restartable sections \
                 on RseqCpu: a pop, or a validated push, on the running CPU with no lock and no atomic instruction; \
                 pages from per-thread pcp lists). \
                 KmemCache = kmem_cache_create of the exact size over the same pages (no size-class lookup): on PerThread, \
                 and on the kernel platform Kernel<UserHooks> (preempt count + soft IRQ mask in TLS) with the !RT lockless \
                 (freelist, tid) cmpxchg16b fast path (lockless() = {lockless}) and with SLAB_LOCKED_FASTPATH (the local \
                 lock on the fast path: what PREEMPT_RT does after seed 001)."
            ),
            format!(
                "talc, linked_list_allocator, buddy_system_allocator: each over its own {} MiB MAP_NORESERVE arena behind a spin \
                 lock (TalcLock<spin::SpinMutex>, their LockedHeaps), as they would run as a global allocator.",
                ARENA_BYTES >> 20
            ),
            "seed 001 (SLUB local_lock series, v3) publishes no per-operation figures: its only benchmark is Mike Galbraith's \
             hackbench on !RT, 0.939-0.946 s before vs 0.938-0.948 s after (negligible, 'the fast paths are not affected'); \
             RT 'takes the local lock also in the fast paths': the local_lock row minus the lockless row is that price here."
                .into(),
            "summary (ns per pair; target: GlobalSlub <= the fastest peer, about 3.3 ns at 64 B on this machine; last columns: \
             seed 001's two fast paths):"
                .into(),
            format!(
                "  {:>5}  {:>10}  {:<29}  {:<13}  {:>9}  {:>9}  {:>7}",
                "size", "GlobalSlub", "fastest peer", "ratio", "lockless", "local_lock", "RT cost"
            ),
        ];
        notes.extend(summary);
        Report {
            table: "slub-pairs",
            title: "SLUB alloc + free pairs, 16..4096 B, against the peers (seed 001: fast paths)"
                .into(),
            notes,
            rows,
            verdicts,
            ..Report::default()
        }
    }
}
