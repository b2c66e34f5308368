//! `PerCpu<T>` and `PerCpuCounter`.

use std::cell::Cell;
use std::rc::Rc;
use std::string::{String, ToString};
use std::vec::Vec;

use local_lock::test_platform::TestPlatform;

use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use crate::{Config, HeapSource, PcpuAllocator, PcpuError, PerCpu, PerCpuCounter};

type A<'s> = PcpuAllocator<TestPlatform, &'s HeapSource>;

fn alloc4(src: &HeapSource) -> A<'_> {
    PcpuAllocator::new(
        TestPlatform::pinned(4),
        src,
        Config::new(32 << 10).units(4).first_chunk(0, 0, 8192),
    )
    .unwrap()
}

#[test]
fn values_are_built_per_cpu_and_dropped_per_cpu() {
    let src = HeapSource::new();
    let a = alloc4(&src);
    let drops = Rc::new(Cell::new(0usize));
    struct D(Rc<Cell<usize>>, String);
    impl Drop for D {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }
    {
        let mut pc: PerCpu<'_, D, _, _> =
            PerCpu::new(&a, |cpu| D(drops.clone(), cpu.to_string())).unwrap();
        assert_eq!(pc.nr_cpus(), 4);
        let names: Vec<&str> = pc.iter().map(|d| d.1.as_str()).collect();
        assert_eq!(names, ["0", "1", "2", "3"]);
        pc.get_mut(2).1.push('!');
        assert_eq!(pc.get(2).1, "2!");
        for d in pc.iter_mut() {
            d.1.push('x');
        }
        assert_eq!(pc.get(3).1, "3x");
        assert_eq!(a.stats().nr_cur_alloc, 1);
        a.check_invariants();
    }
    assert_eq!(drops.get(), 4, "one drop per CPU");
    assert_eq!(a.stats().nr_cur_alloc, 0, "area freed");
    a.check_invariants();
}

#[test]
fn this_cpu_follows_the_platform() {
    let src = HeapSource::new();
    let a = alloc4(&src);
    let pc: PerCpu<'_, AtomicU64, _, _> =
        PerCpu::new(&a, |cpu| AtomicU64::new(cpu as u64 * 100)).unwrap();
    let tp = *a.platform();
    for cpu in 0..4 {
        tp.on_cpu(cpu, || {
            let g = pc.this_cpu();
            assert_eq!(g.cpu(), cpu);
            assert_eq!(g.load(Relaxed), cpu as u64 * 100);
            g.store(7, Relaxed);
            // The slot is held: a nested access fails instead of racing.
            assert!(pc.try_this_cpu().is_none());
            drop(g);
            assert!(pc.try_this_cpu().is_some());
        });
    }
    assert!(pc.iter().all(|v| v.load(Relaxed) == 7));
    // An interrupt handler is kept out by the irqsave flavour.
    tp.on_cpu(1, || {
        let g = pc.this_cpu_irqsave();
        assert_eq!(tp.interrupt(|| ()), None, "IRQs masked while held");
        drop(g);
        assert_eq!(tp.interrupt(|| pc.this_cpu().cpu()), Some(1));
    });
}

#[test]
fn counter_sums_per_cpu_deltas() {
    let src = HeapSource::new();
    let a = alloc4(&src);
    let mut c: PerCpuCounter<'_, _, _> = PerCpuCounter::new(&a).unwrap();
    let tp = *a.platform();
    for i in 0..100 {
        tp.on_cpu(i % 4, || c.inc());
    }
    tp.on_cpu(3, || c.add(-10));
    tp.on_cpu(2, || c.dec());
    assert_eq!(c.sum(), 89);
    assert_eq!(c.cpu_value(0), 25);
    assert_eq!(c.cpu_value(3), 15);
    assert_eq!(c.sum_exact(), 89);
    assert_eq!(c.reset(), 89);
    assert_eq!(c.sum(), 0);
}

#[test]
fn failed_init_drops_what_was_built_and_frees() {
    let src = HeapSource::new();
    let a = alloc4(&src);
    let built = AtomicUsize::new(0);
    let dropped = AtomicUsize::new(0);
    struct D<'d>(&'d AtomicUsize);
    impl Drop for D<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Relaxed);
        }
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _pc: PerCpu<'_, D<'_>, _, _> = PerCpu::new(&a, |cpu| {
            assert!(cpu < 2, "init fails on CPU 2");
            built.fetch_add(1, Relaxed);
            D(&dropped)
        })
        .unwrap();
    }));
    assert!(r.is_err());
    assert_eq!(built.load(Relaxed), 2);
    assert_eq!(dropped.load(Relaxed), 2);
    assert_eq!(a.stats().nr_cur_alloc, 0);
    a.check_invariants();
}

#[test]
fn refusals() {
    let src = HeapSource::new();
    let a = alloc4(&src);
    let big = PerCpu::<'_, [u8; 40000], _, _>::new(&a, |_| [0; 40000]).err();
    assert_eq!(big, Some(PcpuError::TooLarge { size: 40000 }));
    // A platform with more CPUs than units.
    let b = PcpuAllocator::new(
        TestPlatform::pinned(8),
        &src,
        Config::new(32 << 10).units(4),
    )
    .unwrap();
    assert!(matches!(
        PerCpu::<'_, u32, _, _>::new(&b, |_| 0).err(),
        Some(PcpuError::BadConfig(_))
    ));
    // Zero-sized values still get a (4-byte) area.
    let z: PerCpu<'_, (), _, _> = PerCpu::new(&a, |_| ()).unwrap();
    assert_eq!(z.iter().count(), 4);
}

#[test]
fn high_alignment_values() {
    #[repr(align(256))]
    struct Aligned(u64);
    let src = HeapSource::new();
    let a = alloc4(&src);
    let pc: PerCpu<'_, Aligned, _, _> = PerCpu::new(&a, |c| Aligned(c as u64)).unwrap();
    for cpu in 0..4 {
        let r = pc.get(cpu);
        assert_eq!(r as *const Aligned as usize % 256, 0);
        assert_eq!(r.0, cpu as u64);
    }
}

/// Real threads on the std platform: adds from several threads sum up.
#[test]
#[cfg(not(miri))]
fn counter_across_threads() {
    use local_lock::std_platform::StdCpu;
    use local_lock::Platform;
    let src = HeapSource::new();
    let n = StdCpu.nr_cpus();
    let a = PcpuAllocator::new(StdCpu::new(), &src, Config::new(32 << 10).units(n)).unwrap();
    let c: PerCpuCounter<'_, _, _> = PerCpuCounter::new(&a).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..10_000 {
                    c.inc();
                }
            });
        }
    });
    assert_eq!(c.sum(), 40_000);
}
