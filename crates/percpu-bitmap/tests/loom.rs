//! Loom models of the allocator's concurrency: the data lock
//! (`pcpu_lock`, taken with IRQs saved) against the slow lock
//! (`pcpu_alloc_mutex`) held across page-source calls, atomic and blocking
//! requests, frees, the balance work, interrupt-context requests, and the
//! per-CPU counter.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release
//! -p percpu-bitmap --test loom`. Preemption bound: 2 (the default below when
//! `LOOM_MAX_PREEMPTIONS` is unset). Each model ends with the brute-force
//! invariant checker, and every area is written and read back in every
//! unit, so an overlap or a lost allocation fails the model.
#![cfg(loom)]

use local_lock::loom_platform::LoomPlatform;
use local_lock::Strategy;
use loom::sync::Arc;
use loom::thread;
use percpu_bitmap::{Config, HeapSource, PcpuAllocator, PcpuError, PcpuPtr, PerCpuCounter};

type A = PcpuAllocator<LoomPlatform, HeapSource>;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(f);
}

const UNITS: usize = 2;

/// 2 units; a first chunk with a 4 KiB dynamic region (fully populated).
fn with_first() -> A {
    let p = LoomPlatform::new(UNITS, Strategy::Locked);
    PcpuAllocator::new(
        p,
        HeapSource::new(),
        Config::new(32 << 10).units(UNITS).first_chunk(0, 0, 4096),
    )
    .unwrap()
}

fn stamp(a: &A, p: PcpuPtr, size: usize, tag: u8) {
    for cpu in 0..UNITS {
        let q = a.per_cpu_ptr(p, cpu).as_ptr();
        for i in 0..size {
            // SAFETY: the area is live and `size` bytes in every unit.
            unsafe {
                assert_eq!(*q.add(i), 0, "area not zeroed in unit {cpu}");
                *q.add(i) = tag;
            }
        }
    }
}

fn verify(a: &A, p: PcpuPtr, size: usize, tag: u8) {
    for cpu in 0..UNITS {
        let q = a.per_cpu_ptr(p, cpu).as_ptr();
        // SAFETY: as in `stamp`.
        assert!(
            (0..size).all(|i| unsafe { *q.add(i) } == tag),
            "area overwritten"
        );
    }
}

/// A blocking and an atomic request race for the first chunk, then free.
#[test]
fn blocking_vs_atomic_alloc_and_free() {
    model(|| {
        let a = Arc::new(with_first());
        let t = {
            let a = a.clone();
            thread::spawn(move || {
                a.platform().set_cpu(1);
                let p = a.alloc(64, 8).unwrap();
                stamp(&a, p, 64, 1);
                verify(&a, p, 64, 1);
                a.free(p);
            })
        };
        a.platform().set_cpu(0);
        let q = a.alloc_atomic(128, 4).unwrap();
        stamp(&a, q, 128, 2);
        t.join().unwrap();
        verify(&a, q, 128, 2);
        a.free(q);
        a.check_invariants();
        assert_eq!(a.stats().nr_cur_alloc, 0);
    });
}

/// A blocking request that must create and populate a chunk (slow lock
/// held, data lock dropped around the page source) races with an atomic
/// request, which must not create one.
#[test]
fn chunk_creation_vs_atomic_request() {
    model(|| {
        let p = LoomPlatform::new(UNITS, Strategy::Locked);
        let a = Arc::new(
            PcpuAllocator::new(p, HeapSource::new(), Config::new(32 << 10).units(UNITS)).unwrap(),
        );
        let t = {
            let a = a.clone();
            thread::spawn(move || {
                a.platform().set_cpu(1);
                let p = a.alloc(16, 4).unwrap();
                stamp(&a, p, 16, 7);
                p
            })
        };
        a.platform().set_cpu(0);
        let atomic = a.alloc_atomic(16, 4);
        let p = t.join().unwrap();
        match atomic {
            // Only populated pages of the chunk the other thread made.
            Ok(q) => {
                stamp(&a, q, 16, 8);
                verify(&a, p, 16, 7);
                a.free(q);
            }
            Err(e) => assert_eq!(e, PcpuError::NoMemory),
        }
        assert_eq!(a.stats().nr_chunks, 1);
        a.free(p);
        a.check_invariants();
    });
}

/// The balance work (populating, reclaiming, destroying free chunks with
/// the data lock dropped) runs while another CPU frees and allocates.
#[test]
fn balance_vs_alloc_free() {
    model(|| {
        let p = LoomPlatform::new(UNITS, Strategy::Locked);
        let a = Arc::new(
            PcpuAllocator::new(p, HeapSource::new(), Config::new(32 << 10).units(UNITS)).unwrap(),
        );
        // Setup (not modelled in parallel): one chunk with one area.
        a.platform().set_cpu(0);
        let p0 = a.alloc(4096, 4096).unwrap();
        let b = {
            let a = a.clone();
            thread::spawn(move || {
                a.platform().set_cpu(1);
                a.balance();
            })
        };
        a.free(p0);
        let p1 = a.alloc_atomic(32, 4);
        b.join().unwrap();
        if let Ok(p1) = p1 {
            stamp(&a, p1, 32, 3);
            verify(&a, p1, 32, 3);
            a.free(p1);
        }
        a.check_invariants();
        assert_eq!(a.stats().nr_cur_alloc, 0);
        assert!(a.stats().nr_chunks <= 2);
    });
}

/// An interrupt on CPU 0 allocates (atomically, whatever it asks) and
/// frees while the task on CPU 0 holds the data lock with IRQs saved: the
/// interrupt can only run outside the task's critical sections.
#[test]
fn interrupt_context_requests() {
    model(|| {
        let a = Arc::new(with_first());
        let irq = {
            let a = a.clone();
            thread::spawn(move || {
                let plat = a.platform().clone();
                plat.interrupt(0, || {
                    let p = a.alloc(8, 4).unwrap();
                    stamp(&a, p, 8, 9);
                    verify(&a, p, 8, 9);
                    a.free(p);
                })
            })
        };
        a.platform().set_cpu(0);
        let p = a.alloc(8, 4).unwrap();
        stamp(&a, p, 8, 5);
        irq.join().unwrap();
        verify(&a, p, 8, 5);
        a.free(p);
        a.check_invariants();
    });
}

/// Two tasks on CPU 0 (the locked, RT-style strategy: they can interleave)
/// add to a per-CPU counter through its local lock; the cells are updated
/// with a plain load and store, so only the lock keeps the read-modify-write
/// whole. A third task counts on CPU 1. The final sum is exact. (The cells
/// use Relaxed accesses, which loom does not branch on; the lock's
/// compare-exchange is what the model explores.)
#[test]
fn percpu_counter() {
    model(|| {
        let a = Arc::new(with_first());
        // SAFETY: the counter (and every clone of its Arc) is dropped below
        // before `a`, so the reference never outlives the allocator.
        let alloc: &'static A = unsafe { &*Arc::as_ptr(&a) };
        let c = Arc::new(PerCpuCounter::<'static, _, _, UNITS>::new(alloc).unwrap());
        let spawn = |cpu: usize, n: i64| {
            let c = c.clone();
            thread::spawn(move || {
                c.allocator().platform().set_cpu(cpu);
                c.add(n);
            })
        };
        let t0 = spawn(0, 2);
        let t1 = spawn(1, 5);
        a.platform().set_cpu(0);
        c.add(10);
        t0.join().unwrap();
        t1.join().unwrap();
        assert_eq!(c.cpu_value(0), 12, "an update on CPU 0 was lost");
        assert_eq!(c.sum(), 17);
        drop(c);
        a.check_invariants();
        drop(a);
    });
}
