//! The typed, safe layer: [`PerCpu<T>`] owns one `T` per CPU in a percpu
//! area, and [`PerCpuCounter`] is the classic use (per-CPU deltas summed on
//! read, `percpu_counter`).
//!
//! Access rules:
//!
//! * any CPU's value: [`PerCpu::get`] (`&T`, so `T: Sync` for sharing);
//! * this CPU's value: [`PerCpu::this_cpu`] pins the caller through the
//!   object's own [`LocalLock`] (preemption disabled on a pinned kernel, a
//!   per-slot lock on RT/std), so read-modify-write sequences on this CPU's
//!   `T` are not interleaved with other users of the same CPU's value;
//! * every value mutably: through `&mut self` ([`PerCpu::get_mut`],
//!   [`PerCpu::iter_mut`]).
//!
//! Mutation through `&self` goes through interior mutability in `T`
//! (atomics, as the counter does with plain loads and stores made exclusive
//! by the local lock).

use core::marker::PhantomData;
use core::ops::Deref;
use core::ptr::NonNull;

use local_lock::{LocalGuard, LocalLock, Platform, DEFAULT_SLOTS};

use crate::error::PcpuError;
use crate::pcpu::PcpuAllocator;
use crate::source::ChunkSource;
use crate::types::{PcpuPtr, MAX_ALLOC_SIZE, PAGE_SIZE};
use local_lock::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// One `T` per CPU (unit) of an allocator, `alloc_percpu(T)` with a safe
/// API. Each CPU's value is built by `init(cpu)` and dropped with the
/// `PerCpu`; the area is freed afterwards.
///
/// `N` is the number of slots of the local lock used for this-CPU access
/// (at least the platform's `MIN_SLOTS`; one cache line per slot).
///
/// ```
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{Config, HeapSource, PcpuAllocator, PerCpu};
///
/// // One unit per CPU of the machine.
/// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), Config::new(64 << 10)).unwrap();
/// let mut names: PerCpu<'_, String, _, _> = PerCpu::new(&a, |cpu| format!("cpu{cpu}")).unwrap();
/// assert_eq!(names.nr_cpus(), a.nr_units());
/// assert_eq!(names.get(0), "cpu0");
/// names.get_mut(0).push_str(" (boot)");
/// assert_eq!(names.iter().next().unwrap(), "cpu0 (boot)");
/// // This CPU's value, with the caller pinned while it is held.
/// let mine = names.this_cpu();
/// assert_eq!(*mine, *names.get(mine.cpu()));
/// drop(mine);
/// drop(names); // drops every CPU's String, then frees the area
/// assert_eq!(a.stats().nr_cur_alloc, 0);
/// ```
pub struct PerCpu<'a, T, P: Platform, S: ChunkSource, const N: usize = DEFAULT_SLOTS> {
    alloc: &'a PcpuAllocator<P, S>,
    ptr: PcpuPtr,
    lock: LocalLock<(), P, N>,
    _owns: PhantomData<T>,
}

// SAFETY: the `PerCpu` owns its `T`s (moving it moves them between
// threads: `T: Send`); the allocator is shared by reference (it is Sync).
unsafe impl<T: Send, P: Platform + Send, S: ChunkSource, const N: usize> Send
    for PerCpu<'_, T, P, S, N>
{
}
// SAFETY: `&PerCpu` hands out `&T` to any thread (`get`, `this_cpu`,
// `iter`): `T: Sync`. Mutation needs `&mut PerCpu`.
unsafe impl<T: Sync, P: Platform, S: ChunkSource, const N: usize> Sync for PerCpu<'_, T, P, S, N> {}

impl<'a, T, P: Platform + Clone, S: ChunkSource, const N: usize> PerCpu<'a, T, P, S, N> {
    /// Allocates one `T` per unit of `alloc` and initialises CPU `cpu`'s
    /// value with `init(cpu)` (a blocking request). Refuses types larger
    /// than [`MAX_ALLOC_SIZE`] or aligned beyond a page, a local lock with
    /// fewer slots than the platform needs, and an allocator with fewer
    /// units than the platform has CPUs.
    pub fn new(
        alloc: &'a PcpuAllocator<P, S>,
        mut init: impl FnMut(usize) -> T,
    ) -> Result<Self, PcpuError> {
        let size = core::mem::size_of::<T>().max(1);
        let align = core::mem::align_of::<T>();
        if size > MAX_ALLOC_SIZE {
            return Err(PcpuError::TooLarge { size });
        }
        if align > PAGE_SIZE {
            return Err(PcpuError::BadAlign { align });
        }
        if N < P::MIN_SLOTS {
            return Err(PcpuError::BadConfig(
                "PerCpu: fewer local-lock slots than the platform's MIN_SLOTS",
            ));
        }
        if alloc.nr_units() < alloc.platform().nr_cpus() {
            return Err(PcpuError::BadConfig(
                "PerCpu: the allocator has fewer units than the platform has CPUs",
            ));
        }
        let ptr = alloc.alloc(size, align)?;

        // If `init` panics, drop what was built and free the area.
        struct Partial<'g, T, P: Platform, S: ChunkSource> {
            alloc: &'g PcpuAllocator<P, S>,
            ptr: PcpuPtr,
            done: usize,
            _t: PhantomData<T>,
        }
        impl<T, P: Platform, S: ChunkSource> Drop for Partial<'_, T, P, S> {
            fn drop(&mut self) {
                for cpu in 0..self.done {
                    // SAFETY: CPUs below `done` hold an initialised `T`.
                    unsafe {
                        core::ptr::drop_in_place(
                            self.alloc.per_cpu_ptr(self.ptr, cpu).cast::<T>().as_ptr(),
                        )
                    };
                }
                self.alloc.free(self.ptr);
            }
        }
        let mut partial = Partial::<T, P, S> {
            alloc,
            ptr,
            done: 0,
            _t: PhantomData,
        };
        for cpu in 0..alloc.nr_units() {
            let v = init(cpu);
            // SAFETY: each unit's copy is `size` bytes aligned to `align`
            // (areas honour the requested alignment and units are page
            // aligned), zeroed, and ours.
            unsafe { alloc.per_cpu_ptr(ptr, cpu).cast::<T>().as_ptr().write(v) };
            partial.done = cpu + 1;
        }
        core::mem::forget(partial);
        Ok(PerCpu {
            alloc,
            ptr,
            lock: LocalLock::new_with(alloc.platform().clone(), |_| ()),
            _owns: PhantomData,
        })
    }
}

impl<'a, T, P: Platform, S: ChunkSource, const N: usize> PerCpu<'a, T, P, S, N> {
    /// The allocator holding the values.
    #[inline]
    pub fn allocator(&self) -> &'a PcpuAllocator<P, S> {
        self.alloc
    }

    /// Number of CPUs (units).
    #[inline]
    pub fn nr_cpus(&self) -> usize {
        self.alloc.nr_units()
    }

    /// The percpu area holding the values.
    #[inline]
    pub fn as_pcpu_ptr(&self) -> PcpuPtr {
        self.ptr
    }

    #[inline(always)]
    fn slot(&self, cpu: usize) -> NonNull<T> {
        self.alloc.per_cpu_ptr(self.ptr, cpu).cast()
    }

    /// `per_cpu_ptr(p, cpu)`: CPU `cpu`'s value.
    ///
    /// # Panics
    ///
    /// If `cpu >= nr_cpus()`.
    #[inline]
    pub fn get(&self, cpu: usize) -> &T {
        // SAFETY: initialised in `new`, shared access only through `&self`.
        unsafe { self.slot(cpu).as_ref() }
    }

    /// CPU `cpu`'s value, mutably.
    ///
    /// # Panics
    ///
    /// If `cpu >= nr_cpus()`.
    #[inline]
    pub fn get_mut(&mut self, cpu: usize) -> &mut T {
        // SAFETY: initialised; `&mut self` excludes every other access.
        unsafe { self.slot(cpu).as_mut() }
    }

    /// Every CPU's value, in CPU order (`for_each_possible_cpu`).
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.nr_cpus()).map(move |cpu| self.get(cpu))
    }

    /// Every CPU's value mutably, in CPU order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        let (alloc, ptr) = (self.alloc, self.ptr);
        (0..alloc.nr_units()).map(move |cpu| {
            // SAFETY: distinct CPUs' values do not overlap; `&mut self` is
            // held for the iterator's life.
            unsafe { alloc.per_cpu_ptr(ptr, cpu).cast::<T>().as_mut() }
        })
    }

    /// This CPU's value, with the caller pinned (`get_cpu_ptr` under the
    /// object's local lock) until the guard drops.
    ///
    /// # Panics
    ///
    /// If this CPU's slot is already held by this context (nested
    /// `this_cpu` on the same object, or an interrupt handler interrupting
    /// a holder on a pinned platform: use [`try_this_cpu`](Self::try_this_cpu)
    /// there), or if the platform names a CPU without a unit.
    #[inline]
    pub fn this_cpu(&self) -> ThisCpu<'_, T, P, N> {
        self.guarded(self.lock.lock())
    }

    /// [`this_cpu`](Self::this_cpu) with interrupts saved and disabled while
    /// held (`local_lock_irqsave`): safe against this CPU's interrupt
    /// handlers using the same object.
    #[inline]
    pub fn this_cpu_irqsave(&self) -> ThisCpu<'_, T, P, N> {
        self.guarded(self.lock.lock_irqsave())
    }

    /// [`this_cpu`](Self::this_cpu) that returns `None` instead of
    /// deadlocking when the slot is held (`local_trylock`).
    #[inline]
    pub fn try_this_cpu(&self) -> Option<ThisCpu<'_, T, P, N>> {
        self.lock.try_lock().map(|g| self.guarded(g))
    }

    #[inline(always)]
    fn guarded<'g>(&'g self, guard: LocalGuard<'g, (), P, N>) -> ThisCpu<'g, T, P, N> {
        let cpu = guard.cpu();
        assert!(
            cpu < self.nr_cpus(),
            "PerCpu: the platform pinned CPU {cpu}, but the allocator has {} units",
            self.nr_cpus()
        );
        ThisCpu {
            value: self.get(cpu),
            cpu,
            _guard: guard,
        }
    }
}

impl<T, P: Platform, S: ChunkSource, const N: usize> Drop for PerCpu<'_, T, P, S, N> {
    fn drop(&mut self) {
        for cpu in 0..self.nr_cpus() {
            // SAFETY: initialised in `new`, dropped once, here.
            unsafe { core::ptr::drop_in_place(self.slot(cpu).as_ptr()) };
        }
        self.alloc.free(self.ptr);
    }
}

impl<T: core::fmt::Debug, P: Platform, S: ChunkSource, const N: usize> core::fmt::Debug
    for PerCpu<'_, T, P, S, N>
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// This CPU's value of a [`PerCpu`], with the caller pinned. `!Send`.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{Config, HeapSource, PcpuAllocator, PerCpu, ThisCpu};
///
/// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), Config::new(64 << 10)).unwrap();
/// // Atomic cells: this CPU writes its own, anyone may read.
/// let hits: PerCpu<'_, AtomicU64, _, _> = PerCpu::new(&a, |_| AtomicU64::new(0)).unwrap();
/// let cpu = {
///     let c: ThisCpu<'_, AtomicU64, _, { local_lock::DEFAULT_SLOTS }> = hits.this_cpu();
///     c.fetch_add(1, Ordering::Relaxed);
///     // The slot is held: a nested attempt on this object fails.
///     assert!(hits.try_this_cpu().is_none());
///     c.cpu()
/// };
/// assert_eq!(hits.get(cpu).load(Ordering::Relaxed), 1);
/// assert!(hits.try_this_cpu().is_some(), "released with the guard");
/// ```
pub struct ThisCpu<'g, T, P: Platform, const N: usize> {
    value: &'g T,
    cpu: usize,
    _guard: LocalGuard<'g, (), P, N>,
}

impl<T, P: Platform, const N: usize> ThisCpu<'_, T, P, N> {
    /// The CPU the caller is pinned to.
    #[inline]
    pub fn cpu(&self) -> usize {
        self.cpu
    }
}

impl<T, P: Platform, const N: usize> Deref for ThisCpu<'_, T, P, N> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        self.value
    }
}

/// `percpu_counter`: each CPU adds to its own cell under its local lock
/// (no atomic read-modify-write: a plain load and store, exclusive on that
/// CPU), and reads sum all cells. A sum taken while others add is a
/// snapshot of each cell, not a linearizable total.
///
/// ```
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{Config, HeapSource, PcpuAllocator, PerCpuCounter};
///
/// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), Config::new(64 << 10)).unwrap();
/// let mut requests: PerCpuCounter<'_, _, _> = PerCpuCounter::new(&a).unwrap();
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| {
///             for _ in 0..1000 {
///                 requests.inc();
///             }
///             requests.add(-10);
///         });
///     }
/// });
/// assert_eq!(requests.sum(), 4 * 990);
/// assert_eq!(requests.reset(), 4 * 990);
/// assert_eq!(requests.sum_exact(), 0);
/// ```
pub struct PerCpuCounter<'a, P: Platform, S: ChunkSource, const N: usize = DEFAULT_SLOTS> {
    cells: PerCpu<'a, AtomicI64, P, S, N>,
}

impl<'a, P: Platform + Clone, S: ChunkSource, const N: usize> PerCpuCounter<'a, P, S, N> {
    /// A counter at zero.
    pub fn new(alloc: &'a PcpuAllocator<P, S>) -> Result<Self, PcpuError> {
        Ok(PerCpuCounter {
            cells: PerCpu::new(alloc, |_| AtomicI64::new(0))?,
        })
    }
}

impl<'a, P: Platform, S: ChunkSource, const N: usize> PerCpuCounter<'a, P, S, N> {
    /// The allocator holding the cells.
    pub fn allocator(&self) -> &'a PcpuAllocator<P, S> {
        self.cells.alloc
    }

    /// Adds `delta` to this CPU's cell (`percpu_counter_add`, interrupts
    /// saved so handlers may count too).
    #[inline]
    pub fn add(&self, delta: i64) {
        let c = self.cells.this_cpu_irqsave();
        c.store(c.load(Relaxed).wrapping_add(delta), Relaxed);
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1)
    }

    /// Subtracts one.
    #[inline]
    pub fn dec(&self) {
        self.add(-1)
    }

    /// The sum of every CPU's cell (`percpu_counter_sum`).
    pub fn sum(&self) -> i64 {
        self.cells
            .iter()
            .fold(0i64, |s, c| s.wrapping_add(c.load(Relaxed)))
    }

    /// The sum, exact because `&mut self` excludes concurrent adds.
    pub fn sum_exact(&mut self) -> i64 {
        self.cells
            .iter_mut()
            .fold(0i64, |s, c| s.wrapping_add(c.load(Relaxed)))
    }

    /// CPU `cpu`'s cell.
    pub fn cpu_value(&self, cpu: usize) -> i64 {
        self.cells.get(cpu).load(Relaxed)
    }

    /// Sets every cell to zero and returns the old sum.
    pub fn reset(&mut self) -> i64 {
        let s = self.sum_exact();
        for c in self.cells.iter_mut() {
            c.store(0, Relaxed);
        }
        s
    }
}
