//! criterion: seed 002's percpu workload in small (allocate N objects,
//! then free them in order) on this family's bitmap allocator beside the
//! area-map baseline it replaced.
//!
//! `cargo bench -p mm-bench --bench percpu [-- --quick] [FILTER]`
//!
//! * `percpu/alloc_free/NAME/SIZE`: 10 000 objects of SIZE = 4, 64, 1024 B
//!   (4-byte aligned) allocated, then freed in order; throughput per
//!   object. NAME: `bitmap` (`PcpuAllocator<Kernel<UserHooks>>`, 64 KiB
//!   units, one per CPU, over `MmapSource`) and `area-map`
//!   (`mm_bench::area_map::AreaMap`, same chunk shape and source).
//!
//! Each iteration runs on a fresh allocator (built and dropped untimed), so
//! chunk creation is inside the timing as in the kernel's `pcpu_alloc`.
//! The runner (`cargo run --release -p mm-bench -- --table percpu`) gives
//! the seed's 1M-object tables with alloc and free apart and the seed's
//! figures beside.

use std::hint::black_box;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mm_bench::tables::percpu::{new_area_map, new_bitmap, PcpuAlloc};
use percpu_bitmap::MmapSource;

/// Objects per iteration.
const N: usize = 10_000;

/// `iters` fresh allocators: allocate `N` objects of `size`, free them in
/// order (timed); build and drop untimed.
fn churn<A: PcpuAlloc>(make: impl Fn() -> A, size: usize, iters: u64) -> Duration {
    let mut v: Vec<NonNull<u8>> = Vec::with_capacity(N);
    let mut spent = Duration::ZERO;
    for _ in 0..iters {
        let a = make();
        v.clear();
        let t0 = Instant::now();
        for _ in 0..N {
            v.push(a.alloc(size, 4));
        }
        for &p in &v {
            a.free(p);
        }
        spent += t0.elapsed();
        black_box(&v);
        drop(a);
    }
    spent
}

fn bench(c: &mut Criterion) {
    let units = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut g = c.benchmark_group("percpu/alloc_free");
    g.throughput(Throughput::Elements(N as u64));
    for size in [4usize, 64, 1024] {
        g.bench_with_input(BenchmarkId::new("bitmap", size), &size, |b, &size| {
            b.iter_custom(|iters| churn(|| new_bitmap(MmapSource::new(), units), size, iters))
        });
        g.bench_with_input(BenchmarkId::new("area-map", size), &size, |b, &size| {
            b.iter_custom(|iters| churn(|| new_area_map(MmapSource::new(), units), size, iters))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
