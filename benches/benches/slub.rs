//! criterion: SLUB's `GlobalSlub` beside mimalloc, jemalloc and glibc on
//! the object fast paths.
//!
//! `cargo bench -p mm-bench --bench slub [-- --quick] [FILTER]`
//!
//! * `slub/pair/NAME/SIZE`: one alloc + free of SIZE = 64 or 256 bytes
//!   (`Layout` align 8); throughput is per pair.
//! * `slub/batch64/NAME/SIZE`: allocate 64 objects of SIZE, then free them
//!   in allocation order; throughput is per object.
//!
//! NAME: `GlobalSlub` (`slub::GlobalSlub`, a static used as a value: kmalloc
//! classes over per-thread pcp pages), `mimalloc`, `jemalloc`, `System`
//! (glibc), all through `GlobalAlloc`. The runner (`cargo run --release -p
//! mm-bench -- --table slub-pairs`, `--table slub-batch`) has more sizes,
//! more peers, the kernel-platform `KmemCache` rows and the phase split.

use std::alloc::System;
use std::hint::black_box;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mm_bench::tables::slub::{layout, Heap, ObjHeap, SlubHeap, GLOBAL_SLUB};

/// `iters` alloc + free pairs of `size` bytes.
fn pairs<A: ObjHeap>(a: &A, size: usize, iters: u64) -> Duration {
    let l = layout(size);
    let t0 = Instant::now();
    for _ in 0..iters {
        let p = black_box(a.alloc(l));
        // SAFETY: allocated just above with `l`, freed once.
        unsafe { a.free(p, l) };
    }
    t0.elapsed()
}

/// `iters` rounds of: allocate `n` objects of `size` bytes, free them.
fn batch<A: ObjHeap>(a: &A, size: usize, n: usize, iters: u64) -> Duration {
    let l = layout(size);
    let mut slots = vec![NonNull::<u8>::dangling(); n];
    let t0 = Instant::now();
    for _ in 0..iters {
        for s in slots.iter_mut() {
            *s = a.alloc(l);
        }
        for &p in slots.iter() {
            // SAFETY: allocated just above with `l`, freed once.
            unsafe { a.free(p, l) };
        }
    }
    black_box(&slots);
    t0.elapsed()
}

fn bench_one<A: ObjHeap>(c: &mut Criterion, name: &str, a: &A) {
    for size in [64usize, 256] {
        let mut g = c.benchmark_group("slub/pair");
        g.warm_up_time(Duration::from_millis(500));
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(BenchmarkId::new(name, size), &size, |b, &size| {
            b.iter_custom(|iters| pairs(a, size, iters))
        });
        g.finish();
        let n = 64;
        let mut g = c.benchmark_group("slub/batch64");
        g.warm_up_time(Duration::from_millis(500));
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new(name, size), &size, |b, &size| {
            b.iter_custom(|iters| batch(a, size, n, iters))
        });
        g.finish();
    }
}

fn slub(c: &mut Criterion) {
    bench_one(c, "GlobalSlub", &SlubHeap(&GLOBAL_SLUB));
    bench_one(c, "mimalloc", &Heap(mimalloc::MiMalloc));
    bench_one(c, "jemalloc", &Heap(tikv_jemallocator::Jemalloc));
    bench_one(c, "System", &Heap(System));
}

criterion_group!(benches, slub);
criterion_main!(benches);
