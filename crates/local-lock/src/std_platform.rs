//! Platforms for std processes.
//!
//! * [`StdCpu`]: slots are the machine's real CPUs (`sched_getcpu()`, which
//!   glibc >= 2.35 answers from rseq without a system call). A thread can be
//!   preempted or migrated at any instruction, so slots are protected by a
//!   per-CPU spin lock: the locked (PREEMPT_RT) strategy.
//! * [`PerThread`]: every live thread owns a virtual CPU slot, so nobody
//!   else can touch it while the thread lives: the pinned strategy with no
//!   atomic instruction on the fast path (how thread-caching allocators get
//!   their speed). Threads beyond [`PerThread::OWNED_SLOTS`] share one extra
//!   slot under the locked strategy. When a thread exits, the hooks
//!   registered with [`PerThread::on_thread_exit`] run on its slot (an
//!   allocator flushes its caches there) and the slot is handed over to the
//!   next thread; a free slot may be drained remotely.

extern crate std;

use std::cell::Cell;

use crate::handover::SlotTable;
use crate::platform::{IrqFlags, Pin, Platform, Strategy};
use crate::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use crate::sync::Backoff;

/// Writes `args` and a newline to stderr **without allocating** (a stack
/// buffer of 256 bytes, longer messages are cut), then aborts: how a global
/// allocator reports a fatal misuse such as a bad free (it must neither
/// unwind nor allocate).
#[cold]
#[inline(never)]
pub fn die(args: core::fmt::Arguments<'_>) -> ! {
    struct Buf {
        b: [u8; 256],
        n: usize,
    }
    impl core::fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            let k = s.len().min(self.b.len() - self.n);
            self.b[self.n..self.n + k].copy_from_slice(&s.as_bytes()[..k]);
            self.n += k;
            Ok(())
        }
    }
    let mut buf = Buf { b: [0; 256], n: 0 };
    let _ = core::fmt::Write::write_fmt(&mut buf, args);
    let _ = core::fmt::Write::write_str(&mut buf, "\n");
    // SAFETY: writing our own buffer to fd 2; abort has no preconditions.
    unsafe {
        libc::write(2, buf.b.as_ptr().cast(), buf.n);
        libc::abort()
    }
}

/// OS randomness (`getrandom`), or the time and an address if that fails
/// (or under miri, which has no `getrandom` with isolation).
pub fn os_random_seed() -> u64 {
    #[cfg_attr(miri, allow(unused_mut))]
    let mut v: u64 = 0;
    #[cfg(not(miri))]
    {
        // SAFETY: writes at most 8 bytes into `v`.
        let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
        if n == 8 && v != 0 {
            return v;
        }
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (&v as *const u64 as u64).rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15
}

/// The parts of a std platform's [`Platform`] impl that are the same
/// for every std platform: a process takes no interrupts and disables no
/// preemption (those are no-ops), and its seeds come from the OS.
macro_rules! std_process_platform {
    // ... and slots under the locked strategy (real CPUs, where a thread
    // can be preempted or migrated at any instruction).
    (locked) => {
        std_process_platform!();
        /// Slots are CPUs here: their nodes are the machine's
        /// ([`system_topology`](crate::os::system_topology)).
        fn cpu_to_node(&self, cpu: usize) -> usize {
            crate::os::system_topology().cpu_to_node(cpu)
        }
        #[inline(always)]
        fn default_strategy(&self) -> Strategy {
            Strategy::Locked
        }
        fn spin_wait(&self, backoff: &Backoff) {
            // The holder may have been preempted: after a short spin, give
            // it the CPU (an RT lock would sleep here).
            if backoff.is_completed() {
                std::thread::yield_now();
            } else {
                backoff.snooze();
            }
        }
    };
    () => {
        #[inline(always)]
        fn in_interrupt(&self) -> bool {
            false
        }
        #[inline(always)]
        fn irqs_disabled(&self) -> bool {
            false
        }
        #[inline(always)]
        fn irq_save(&self) -> IrqFlags {
            IrqFlags(0)
        }
        #[inline(always)]
        unsafe fn irq_restore(&self, _flags: IrqFlags) {}
        #[inline(always)]
        fn irq_disable(&self) {}
        #[inline(always)]
        unsafe fn irq_enable(&self) {}
        #[inline(always)]
        fn preempt_disable(&self) {}
        #[inline(always)]
        unsafe fn preempt_enable(&self) {}
        #[inline(always)]
        fn random_seed(&self) -> u64 {
            os_random_seed()
        }
        fn nr_node_ids(&self) -> usize {
            crate::os::system_topology().nr_nodes()
        }
        fn node_distance(&self, a: usize, b: usize) -> u8 {
            crate::os::system_topology().node_distance(a, b)
        }
        /// The node of the CPU the caller runs on (`sched_getcpu()`), for
        /// every std platform, including those whose slots are not CPUs.
        fn numa_node_id(&self) -> usize {
            // SAFETY: no preconditions.
            let cpu = unsafe { libc::sched_getcpu() };
            crate::os::system_topology().cpu_to_node(usize::try_from(cpu).unwrap_or(0))
        }
    };
}

/// Real CPUs from `sched_getcpu()`; the locked strategy.
///
/// ```
/// use local_lock::std_platform::StdCpu;
/// use local_lock::{LocalLock, Platform, Strategy};
///
/// let p = StdCpu::new();
/// assert_eq!(p.default_strategy(), Strategy::Locked);
/// assert!(p.current_cpu() < p.nr_cpus());
/// assert!(!StdCpu::HAS_IRQS, "a process takes no interrupts");
/// let l: LocalLock<u32, StdCpu> = LocalLock::new(StdCpu::new());
/// *l.lock() += 5; // whichever CPU this thread runs on
/// // Locked slots can be reached from anywhere: sum them all.
/// let total: u32 = (0..l.slots()).map(|cpu| *l.lock_remote(cpu).unwrap()).sum();
/// assert_eq!(total, 5);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct StdCpu;

impl StdCpu {
    /// The platform (zero-sized).
    pub const fn new() -> Self {
        StdCpu
    }
}

/// The CPUs this process may run on (`sched_getaffinity`, less any cgroup
/// quota: `std::thread::available_parallelism`), read once and cached; 1 if
/// the OS cannot tell. The std platforms' [`Platform::nr_online_cpus`]
/// (at most their `nr_cpus`), and the figure a user-space stand-in for a
/// kernel ([`KernelHooks::nr_online_cpus`](crate::kernel::KernelHooks::nr_online_cpus))
/// can give.
///
/// ```
/// use local_lock::std_platform::{online_cpus, PerThread, StdCpu};
/// use local_lock::Platform;
///
/// let n = online_cpus();
/// assert!(n >= 1);
/// assert!(StdCpu::new().nr_online_cpus() <= StdCpu::new().nr_cpus());
/// // Per-thread slots: the memory is shared by the CPUs, not the threads.
/// assert_eq!(PerThread.nr_online_cpus(), n.min(PerThread::OWNED_SLOTS + 1));
/// ```
pub fn online_cpus() -> usize {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.load(Ordering::Relaxed);
    if n != 0 {
        return n;
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    N.store(n, Ordering::Relaxed);
    n
}

fn configured_cpus() -> usize {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.load(Ordering::Relaxed);
    if n != 0 {
        return n;
    }
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as usize;
    N.store(n, Ordering::Relaxed);
    n
}

/// `sched_getcpu()`, or 0 if the kernel cannot tell. Under miri (which has
/// no `sched_getcpu`) threads are spread over the CPUs by a per-thread
/// number, so the locked strategy's sharing is still exercised.
#[inline]
#[cfg(miri)]
pub fn sched_getcpu() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::thread_local!(static ID: usize = NEXT.fetch_add(1, Ordering::Relaxed));
    ID.with(|id| *id % configured_cpus())
}

/// `sched_getcpu()`, or 0 if the kernel cannot tell.
#[inline]
#[cfg(not(miri))]
pub fn sched_getcpu() -> usize {
    // SAFETY: sched_getcpu has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    if c < 0 {
        0
    } else {
        c as usize
    }
}

// SAFETY: all slots use the locked strategy (requirement 3), std has no
// interrupts (requirement 4 holds vacuously with HAS_IRQS = false).
unsafe impl Platform for StdCpu {
    const HAS_IRQS: bool = false;

    fn nr_cpus(&self) -> usize {
        configured_cpus()
    }
    fn nr_online_cpus(&self) -> usize {
        online_cpus().min(configured_cpus())
    }
    #[inline(always)]
    fn current_cpu(&self) -> usize {
        sched_getcpu()
    }
    std_process_platform!(locked);
}

// ---------------------------------------------------------------------------
// RseqCpu
// ---------------------------------------------------------------------------

/// Per-CPU sheaves reached by restartable sequences (Linux `rseq`,
/// registered by glibc 2.35+; [`rseq`] module): the kernel's `this_cpu`
/// operations in user space, so cached memory is per CPU, not per
/// thread, and any number of threads share the CPUs without a lock on
/// the fast path.
///
/// The slots are the threads' concurrency ids (`mm_cid`, Linux 6.3+),
/// tcmalloc's virtual CPUs: at most one per CPU and one per thread, so a
/// process of one thread uses slot 0 whichever CPU it runs on (and a
/// child it forks finds its caches there), and two threads use two slots
/// on a machine of 64 CPUs. On a NUMA machine slot `k` trades with the
/// node of CPU `k` ([`cpu_to_node`](Platform::cpu_to_node)); new slabs
/// still come from the caller's node ([`numa_node_id`](Platform::numa_node_id),
/// its real CPU).
///
/// Slots of a [`LocalLock`](crate::LocalLock) (the slab paths behind the
/// sheaves) use the locked strategy, as [`StdCpu`] does. Where rseq is
/// unavailable (other OSes and architectures, kernels before 6.3, glibc
/// before 2.35, `glibc.pthread.rseq=0`, or `MM_NO_RSEQ` set in the
/// environment), [`restartable`](Platform::restartable) is false, the
/// slots are real CPUs (`sched_getcpu()`) and users take their locked
/// paths: still per CPU, with no thread limit.
///
/// ```
/// use local_lock::std_platform::RseqCpu;
/// use local_lock::{Platform, Strategy};
///
/// let p = RseqCpu::new();
/// assert_eq!(p.default_strategy(), Strategy::Locked);
/// assert!(p.current_cpu() < p.nr_cpus());
/// // On this project's machines (glibc 2.36, Linux 6.x) rseq is there.
/// println!("restartable: {}", p.restartable());
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct RseqCpu;

impl RseqCpu {
    /// The platform (zero-sized).
    pub const fn new() -> Self {
        RseqCpu
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
use crate::rseq;

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
mod rseq {
    //! No restartable sequences here: every operation fails.
    pub fn available() -> bool {
        false
    }
}

use crate::this_cpu::{FreeCheck, FreePush, SheafSlots, SheafWord};

// SAFETY: LocalLock slots use the locked strategy (requirement 3); std has
// no interrupts (4). The `this_cpu` operations are restartable sequences
// (each one indivisible with respect to every other on the same CPU, see
// `rseq`), used only while `restartable()` holds.
unsafe impl Platform for RseqCpu {
    const HAS_IRQS: bool = false;

    fn nr_cpus(&self) -> usize {
        configured_cpus()
    }
    fn nr_online_cpus(&self) -> usize {
        online_cpus().min(configured_cpus())
    }
    #[inline(always)]
    fn current_cpu(&self) -> usize {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        if rseq::available() {
            let c = rseq::cpu_id() as usize;
            if c < 1 << 20 {
                return c;
            }
        }
        sched_getcpu()
    }
    std_process_platform!(locked);
    #[inline(always)]
    fn restartable(&self) -> bool {
        rseq::available()
    }
    #[inline(always)]
    fn this_cpu_area(&self) -> isize {
        if rseq::available() {
            rseq::area()
        } else {
            0
        }
    }
    /// The process-wide `__rseq_offset` (the same value as `kept`).
    #[inline(always)]
    fn this_cpu_area_now(&self, kept: isize) -> isize {
        debug_assert_eq!(kept, rseq::area());
        rseq::area()
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[inline(always)]
    unsafe fn this_cpu_sheaf_pop<const N: usize>(&self, s: SheafSlots<'_, N>) -> usize {
        // SAFETY: restartable() was true (caller's contract): rseq is
        // registered; SheafSlots' contract.
        unsafe { rseq::pop(s) }
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[inline(always)]
    unsafe fn this_cpu_sheaf_pop_private<const N: usize>(&self, s: SheafSlots<'_, N>) -> usize {
        // SAFETY: as above; the caller's contract on the size words.
        unsafe { rseq::pop_private(s) }
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[inline(always)]
    unsafe fn this_cpu_sheaf_push<const N: usize>(&self, s: SheafSlots<'_, N>, v: usize) -> bool {
        // SAFETY: as above.
        unsafe { rseq::push(s, v) }
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[inline(always)]
    unsafe fn this_cpu_sheaf_pop_many<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        out: &mut [usize],
    ) -> usize {
        // SAFETY: as above.
        unsafe { rseq::pop_many(s, out) }
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[inline(always)]
    unsafe fn this_cpu_sheaf_push_many<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        src: &[usize],
    ) -> usize {
        // SAFETY: as above.
        unsafe { rseq::push_many(s, src) }
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[inline(always)]
    unsafe fn this_cpu_range<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        way: usize,
    ) -> Option<(usize, usize, usize)> {
        // SAFETY: as above.
        Some(unsafe { rseq::range(s, way) })
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[inline(always)]
    unsafe fn this_cpu_set_range<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        way: usize,
        base: usize,
        span: usize,
        gen: usize,
    ) -> bool {
        // SAFETY: as above.
        unsafe { rseq::set_range(s, way, base, span, gen) }
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[inline(always)]
    unsafe fn this_cpu_xchg<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        w: SheafWord,
        new: usize,
    ) -> Option<usize> {
        // SAFETY: as above.
        unsafe { rseq::xchg(s, w, new) }
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[inline(always)]
    unsafe fn this_cpu_cmpxchg<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        w: SheafWord,
        old: usize,
        new: usize,
    ) -> bool {
        // SAFETY: as above.
        unsafe { rseq::cmpxchg(s, w, old, new) }
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[inline(always)]
    unsafe fn this_cpu_free_push<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        chk: &FreeCheck,
        obj: usize,
    ) -> FreePush {
        // SAFETY: as above; the caller's contract on `chk` and the object.
        unsafe { rseq::free_push(s, chk, obj) }
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[inline(always)]
    unsafe fn this_cpu_free_push_plain<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        chk: &FreeCheck,
        obj: usize,
    ) -> FreePush {
        // SAFETY: as above.
        unsafe { rseq::free_push_plain(s, chk, obj) }
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[inline(always)]
    unsafe fn this_cpu_free_push_unmarked<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        chk: &FreeCheck,
        obj: usize,
    ) -> FreePush {
        // SAFETY: as above.
        unsafe { rseq::free_push_unmarked(s, chk, obj) }
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn remote_sheaf_xchg<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        cpu: usize,
        w: SheafWord,
        new: usize,
    ) -> Option<usize> {
        if !rseq::available() {
            return None;
        }
        rseq::remote_xchg(s, cpu, w, new)
    }
}

// ---------------------------------------------------------------------------
// PerThread
// ---------------------------------------------------------------------------

/// Every live thread owns a virtual CPU; the pinned strategy.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use local_lock::std_platform::PerThread;
/// use local_lock::{LocalLock, Strategy};
///
/// static CACHE: LocalLock<u32, PerThread> = LocalLock::new(PerThread);
/// let me = CACHE.lock().cpu();
/// assert!(me < PerThread::OWNED_SLOTS);
/// assert_eq!(CACHE.lock().strategy(), Strategy::Pinned, "an owned slot needs no atomics");
/// assert_eq!(CACHE.lock().cpu(), me, "a thread keeps its slot");
/// // Another thread owns another slot; when it exits, hooks see its slot.
/// static EXITED: AtomicUsize = AtomicUsize::new(usize::MAX);
/// fn flush(slot: usize) {
///     EXITED.store(slot, Ordering::Relaxed);
/// }
/// assert!(PerThread::on_thread_exit(flush));
/// let other = std::thread::spawn(|| CACHE.lock().cpu()).join().unwrap();
/// assert_ne!(other, me);
/// assert_eq!(EXITED.load(Ordering::Relaxed), other);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct PerThread;

/// Thread-local slot value: not yet claimed.
const TLS_NONE: usize = usize::MAX;
/// Thread-local slot value: the thread exited its slot (TLS destructors
/// running); it uses the shared overflow slot from now on.
const TLS_EXITED: usize = usize::MAX - 1;
/// `MY_SLOT` while the thread registers its destructor: that registration
/// may allocate (glibc's `__cxa_thread_atexit_impl` calls `calloc`), and
/// when this platform sits under the process's `malloc` (mm-malloc) the
/// nested call must not register again: it takes the overflow slot.
const TLS_REGISTERING: usize = usize::MAX - 2;

const MAX_EXIT_HOOKS: usize = 16;

static SLOTS: SlotTable<{ PerThread::OWNED_SLOTS }> = SlotTable::new();
/// Registered exit hooks, `fn(usize)` stored as pointers (keeping their
/// provenance), null when empty.
static EXIT_HOOKS: [AtomicPtr<()>; MAX_EXIT_HOOKS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_EXIT_HOOKS];
static LIVE_OWNERS: AtomicUsize = AtomicUsize::new(0);

std::thread_local! {
    // No destructor: readable during other TLS destructors.
    static MY_SLOT: Cell<usize> = const { Cell::new(TLS_NONE) };
    // Its destructor hands the slot over when the thread exits.
    static RELEASE: SlotRelease = const { SlotRelease };
}

struct SlotRelease;

impl Drop for SlotRelease {
    fn drop(&mut self) {
        let slot = MY_SLOT.get();
        if slot >= PerThread::OWNED_SLOTS {
            return;
        }
        // The slot is still ours: hooks flush it through the normal pinned
        // path (`pin` still answers `slot`).
        run_exit_hooks(slot);
        MY_SLOT.set(TLS_EXITED);
        LIVE_OWNERS.fetch_sub(1, Ordering::Relaxed);
        // Release: everything the hooks and the thread wrote to the slot is
        // visible to whoever claims it next (see `handover`).
        SLOTS.release(slot);
    }
}

fn run_exit_hooks(slot: usize) {
    for h in &EXIT_HOOKS {
        let f = h.load(Ordering::Acquire);
        if !f.is_null() {
            // SAFETY: only `on_thread_exit` stores here, and it stores a
            // `fn(usize)` cast to a pointer.
            let f: fn(usize) = unsafe { core::mem::transmute::<*mut (), fn(usize)>(f) };
            f(slot);
        }
    }
}

impl PerThread {
    /// Virtual CPUs that threads own exclusively.
    pub const OWNED_SLOTS: usize = 63;
    /// The shared slot of threads that found no free owned slot (and of
    /// threads whose TLS is being torn down); always locked.
    pub const OVERFLOW_SLOT: usize = 63;

    /// The platform (zero-sized).
    pub const fn new() -> Self {
        PerThread
    }

    /// Registers `hook`, called with the slot index on the exiting thread
    /// while it still owns the slot (before hand-over), for every thread that
    /// owned a slot. Registering the same function twice is a no-op. Returns
    /// `false` if the hook table (16 entries) is full.
    pub fn on_thread_exit(hook: fn(usize)) -> bool {
        let v = hook as *mut ();
        for h in &EXIT_HOOKS {
            match h.compare_exchange(
                core::ptr::null_mut(),
                v,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(cur) if cur == v => return true,
                Err(_) => {}
            }
        }
        false
    }

    /// Threads that currently own a slot.
    pub fn live_owners() -> usize {
        LIVE_OWNERS.load(Ordering::Relaxed)
    }

    /// The calling thread's slot, claiming one on first use.
    #[inline(always)]
    fn my_slot() -> (usize, Strategy) {
        let s = MY_SLOT.get();
        if s < Self::OWNED_SLOTS {
            (s, Strategy::Pinned)
        } else {
            Self::my_slot_slow(s)
        }
    }

    #[cold]
    #[inline(never)]
    fn my_slot_slow(s: usize) -> (usize, Strategy) {
        if s == TLS_NONE {
            // Register the destructor first; if TLS is already being torn
            // down, use the overflow slot. A call nested in the
            // registration (an allocator under `malloc`) sees
            // TLS_REGISTERING and uses the overflow slot too.
            MY_SLOT.set(TLS_REGISTERING);
            let registered = RELEASE.try_with(|_| ()).is_ok();
            MY_SLOT.set(TLS_NONE);
            if registered {
                if let Some(i) = SLOTS.claim() {
                    MY_SLOT.set(i);
                    LIVE_OWNERS.fetch_add(1, Ordering::Relaxed);
                    return (i, Strategy::Pinned);
                }
            }
        }
        (Self::OVERFLOW_SLOT, Strategy::Locked)
    }
}

// SAFETY: an owned slot is used only by its owning thread (no interrupts in
// std; signal handlers must not allocate through these locks, documented),
// and it is handed to a remote drainer or a new thread only after the owner
// released it (SLOT_FREE with Release, claimed with an Acquire CAS), so
// pinned pins are exclusive (1, 2). The overflow slot is always locked (3).
unsafe impl Platform for PerThread {
    const MIN_SLOTS: usize = PerThread::OWNED_SLOTS + 1;
    const HAS_IRQS: bool = false;

    fn nr_cpus(&self) -> usize {
        Self::OWNED_SLOTS + 1
    }
    fn nr_online_cpus(&self) -> usize {
        // The slots are threads; the memory is shared by the CPUs that run
        // them.
        online_cpus().min(Self::OWNED_SLOTS + 1)
    }
    #[inline(always)]
    fn current_cpu(&self) -> usize {
        Self::my_slot().0
    }
    std_process_platform!();
    #[inline(always)]
    fn pin(&self) -> Pin {
        let (cpu, strategy) = Self::my_slot();
        Pin {
            cpu,
            strategy,
            token: 0,
        }
    }
    #[inline(always)]
    fn pin_owned(&self) -> Option<usize> {
        // An owned slot: exactly what `pin` returns for it, and `unpin`
        // does nothing.
        let s = MY_SLOT.get();
        (s < Self::OWNED_SLOTS).then_some(s)
    }
    #[inline(always)]
    unsafe fn unpin(&self, _pin: Pin) {}
    #[inline(always)]
    fn default_strategy(&self) -> Strategy {
        Strategy::Pinned
    }
    fn pin_remote(&self, cpu: usize) -> Option<Pin> {
        if cpu == Self::OVERFLOW_SLOT {
            return Some(Pin {
                cpu,
                strategy: Strategy::Locked,
                token: 0,
            });
        }
        if !SLOTS.try_drain(cpu) {
            return None;
        }
        Some(Pin {
            cpu,
            strategy: Strategy::Pinned,
            token: 1,
        })
    }
    unsafe fn unpin_remote(&self, pin: Pin) {
        if pin.token == 1 {
            SLOTS.end_drain(pin.cpu);
        }
    }
    fn spin_wait(&self, backoff: &Backoff) {
        if backoff.is_completed() {
            std::thread::yield_now();
        } else {
            backoff.snooze();
        }
    }
}
