//! criterion: the `local_lock` flavours on the two std platforms against
//! the locks a user would take instead.
//!
//! `cargo bench -p mm-bench --bench local_lock [-- --quick] [FILTER]`
//!
//! * `local_lock/1thread/*`: one thread; every flavour (`lock`, `lock_irq`,
//!   `lock_irqsave`, `try_lock`) on `StdCpu` (locked strategy:
//!   `sched_getcpu` + a per-CPU spin lock) and `PerThread` (pinned strategy:
//!   the thread's own slot, no atomic read-modify-write), `spin::Mutex` and
//!   `std::sync::Mutex` (lock, +1, unlock each).
//! * `local_lock/2threads/*`: two threads at once, one per CPU, each doing
//!   the iterations: the per-CPU locks touch their own cache lines, the two
//!   mutexes are one shared lock. The time is wall time for `iters`
//!   operations per thread. Run the `mm-bench` runner for the same figures
//!   with the two-CPU check beside them (criterion cannot show it).

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use local_lock::std_platform::{PerThread, StdCpu};
use local_lock::LocalLock;
use mm_bench::measure::{allowed_cpus, pin_current_thread};

static L_STD: LocalLock<u64, StdCpu> = LocalLock::new(StdCpu);
static L_THREAD: LocalLock<u64, PerThread> = LocalLock::new(PerThread);
static SPIN: spin::Mutex<u64> = spin::Mutex::new(0);
static STD_MUTEX: std::sync::Mutex<u64> = std::sync::Mutex::new(0);

fn one_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("local_lock/1thread");
    g.bench_function("StdCpu/lock", |b| b.iter(|| *L_STD.lock() += 1));
    g.bench_function("StdCpu/lock_irq", |b| b.iter(|| *L_STD.lock_irq() += 1));
    g.bench_function("StdCpu/lock_irqsave", |b| {
        b.iter(|| *L_STD.lock_irqsave() += 1)
    });
    g.bench_function("StdCpu/try_lock", |b| {
        b.iter(|| black_box(L_STD.try_lock().map(|mut g| *g += 1)))
    });
    g.bench_function("PerThread/lock", |b| b.iter(|| *L_THREAD.lock() += 1));
    g.bench_function("PerThread/lock_irq", |b| {
        b.iter(|| *L_THREAD.lock_irq() += 1)
    });
    g.bench_function("PerThread/lock_irqsave", |b| {
        b.iter(|| *L_THREAD.lock_irqsave() += 1)
    });
    g.bench_function("PerThread/try_lock", |b| {
        b.iter(|| black_box(L_THREAD.try_lock().map(|mut g| *g += 1)))
    });
    g.bench_function("spin::Mutex", |b| b.iter(|| *SPIN.lock() += 1));
    g.bench_function("std::sync::Mutex", |b| {
        b.iter(|| *STD_MUTEX.lock().unwrap() += 1)
    });
    g.finish();
}

/// Wall time for `iters` runs of `op` on each of two threads at once, each
/// pinned to its own CPU where the machine has two.
fn two_threads(iters: u64, op: fn()) -> Duration {
    let cpus = allowed_cpus();
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|t| {
                let (barrier, cpus) = (&barrier, &cpus);
                s.spawn(move || {
                    if cpus.len() >= 2 {
                        let _ = pin_current_thread(cpus[t]);
                    }
                    barrier.wait();
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        op();
                    }
                    t0.elapsed()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).max().unwrap()
    })
}

fn two_thread_group(c: &mut Criterion) {
    let mut g = c.benchmark_group("local_lock/2threads");
    let cases: [(&str, fn()); 4] = [
        ("StdCpu/lock", || *L_STD.lock() += 1),
        ("PerThread/lock", || *L_THREAD.lock() += 1),
        ("spin::Mutex shared", || *SPIN.lock() += 1),
        ("std::sync::Mutex shared", || {
            *STD_MUTEX.lock().unwrap() += 1
        }),
    ];
    for (name, op) in cases {
        g.bench_function(name, |b| b.iter_custom(|iters| two_threads(iters, op)));
    }
    g.finish();
}

criterion_group! {
    name = benches;
    // Short runs: a 2-core machine shared with builds; the runner is the
    // place for careful figures.
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = one_thread, two_thread_group
}
criterion_main!(benches);
