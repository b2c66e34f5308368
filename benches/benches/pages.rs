//! criterion: order-0 page churn in seed 000's shape (allocate N pages,
//! then free them) on this family's buddy and pcp beside the peers, and
//! zeroed pages (seed 003).
//!
//! `cargo bench -p mm-bench --bench pages [-- --quick] [FILTER]`
//!
//! * `pages/alloc_free/NAME/N`: N = 1, 64, 4096 order-0 pages (4 KiB, 4 KiB
//!   aligned) allocated then freed; criterion's throughput is per page.
//!   NAME: `buddy` (`Buddy<Kernel<UserHooks>>` over a 1 GiB mapping),
//!   `pcp-irqsafe`, `pcp-taskonly`, `pcp-trylock` (`Pcp::new` over that
//!   buddy on the kernel platform), `buddy_system_allocator`
//!   (`LockedHeap<33>` over its own 1 GiB), `mimalloc`, `jemalloc`,
//!   `System` (glibc `posix_memalign`), the last three through `GlobalAlloc`
//!   with `Layout` 4096/4096.
//! * `pages/zeroed/NAME/64`: 64 zeroed pages allocated then freed; `-zero`
//!   rows free them still zero (pcp zero list, buddy PG_zero: no clearing),
//!   `-dirty` rows write them and free them dirty (cleared on the next
//!   allocation); peers' `alloc_zeroed`.
//!
//! The runner (`cargo run --release -p mm-bench -- --table pages`) gives
//! the same figures split into alloc and free, with the seed's numbers and
//! the whole N = 1..16384 range.

use std::alloc::System;
use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mm_bench::tables::pages::{
    kernel_pcp, Arena, BsaPages, BuddyPages, Global, PageAlloc, ARENA_BYTES,
};
use pcp::Policy;

/// `iters` rounds of: allocate `n` order-0 pages, free them.
fn churn<A: PageAlloc>(a: &A, n: usize, iters: u64) -> Duration {
    let mut slots = vec![core::ptr::null_mut::<u8>(); n];
    let t0 = Instant::now();
    for _ in 0..iters {
        for s in slots.iter_mut() {
            *s = a.alloc(0).as_ptr();
        }
        for &p in slots.iter() {
            // SAFETY: allocated just above with order 0, freed once.
            unsafe { a.free(NonNull::new_unchecked(p), 0) };
        }
    }
    black_box(&slots);
    t0.elapsed()
}

/// `iters` rounds of: allocate `n` zeroed order-0 pages, then free them
/// still zero (`still_zero`) or write and free them (untimed write).
fn zeroed<A: PageAlloc>(a: &A, n: usize, still_zero: bool, iters: u64) -> Duration {
    let mut slots = vec![core::ptr::null_mut::<u8>(); n];
    let mut spent = Duration::ZERO;
    for _ in 0..iters {
        let t0 = Instant::now();
        for s in slots.iter_mut() {
            *s = a.alloc_zeroed(0).as_ptr();
        }
        spent += t0.elapsed();
        if !still_zero {
            for &p in slots.iter() {
                // SAFETY: a page we hold.
                unsafe { p.add(64).write_volatile(0xa5) };
            }
        }
        let t1 = Instant::now();
        for &p in slots.iter() {
            // SAFETY: allocated above with order 0, freed once; if
            // `still_zero` it was never written.
            unsafe {
                let p = NonNull::new_unchecked(p);
                if still_zero {
                    a.free_zero(p, 0)
                } else {
                    a.free(p, 0)
                }
            }
        }
        spent += t1.elapsed();
    }
    spent
}

fn bench_churn<A: PageAlloc>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    a: &A,
) {
    for n in [1usize, 64, 4096] {
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new(name, n), &n, |b, &n| {
            b.iter_custom(|iters| churn(a, n, iters))
        });
    }
}

fn alloc_free(c: &mut Criterion) {
    let arena = Arena::new(ARENA_BYTES, true);
    let mut g = c.benchmark_group("pages/alloc_free");
    g.warm_up_time(Duration::from_millis(500));
    bench_churn(&mut g, "buddy", &BuddyPages(arena.clone()));
    bench_churn(&mut g, "pcp-irqsafe", &kernel_pcp(&arena, Policy::IrqSafe));
    bench_churn(
        &mut g,
        "pcp-taskonly",
        &kernel_pcp(&arena, Policy::TaskOnly),
    );
    bench_churn(&mut g, "pcp-trylock", &kernel_pcp(&arena, Policy::Trylock));
    bench_churn(
        &mut g,
        "buddy_system_allocator",
        &BsaPages::new(ARENA_BYTES),
    );
    bench_churn(&mut g, "mimalloc", &Global(mimalloc::MiMalloc));
    bench_churn(&mut g, "jemalloc", &Global(tikv_jemallocator::Jemalloc));
    bench_churn(&mut g, "System", &Global(System));
    g.finish();
}

fn zeroed_pages(c: &mut Criterion) {
    let zero_arena = Arena::new(ARENA_BYTES, true);
    let dirty_arena: Arc<Arena> = Arena::new(ARENA_BYTES, false);
    let n = 64usize;
    let mut g = c.benchmark_group("pages/zeroed");
    g.warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(n as u64));
    let mut one = |name: &str, a: &dyn Fn(u64) -> Duration| {
        g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| b.iter_custom(a));
    };
    let pz = kernel_pcp(&zero_arena, Policy::Trylock);
    let pd = kernel_pcp(&dirty_arena, Policy::Trylock);
    let bz = BuddyPages(zero_arena.clone());
    let bd = BuddyPages(dirty_arena.clone());
    let (mi, je, sys) = (
        Global(mimalloc::MiMalloc),
        Global(tikv_jemallocator::Jemalloc),
        Global(System),
    );
    one("pcp-trylock-zero", &|i| zeroed(&pz, n, true, i));
    one("pcp-trylock-dirty", &|i| zeroed(&pd, n, false, i));
    one("buddy-zero", &|i| zeroed(&bz, n, true, i));
    one("buddy-dirty", &|i| zeroed(&bd, n, false, i));
    one("mimalloc", &|i| zeroed(&mi, n, false, i));
    one("jemalloc", &|i| zeroed(&je, n, false, i));
    one("System", &|i| zeroed(&sys, n, false, i));
    g.finish();
}

criterion_group!(benches, alloc_free, zeroed_pages);
criterion_main!(benches);
