//! The platform trait: what a kernel (or a std process, loom, a test) must
//! tell the allocators about CPUs, interrupts and preemption.

use crate::sync::atomic::Ordering;
use crate::sync::{AtomicDWord, Backoff, DWord};
use crate::this_cpu::{self, FreeCheck, FreePush, SheafSlots, SheafWord};

/// Interrupt state saved by [`Platform::irq_save`], to be handed back to
/// [`Platform::irq_restore`] (the kernel's `unsigned long flags`).
///
/// ```
/// use local_lock::test_platform::TestPlatform;
/// use local_lock::{IrqFlags, Platform};
///
/// let p = TestPlatform::pinned(1);
/// assert!(!p.irqs_disabled());
/// let outer: IrqFlags = p.irq_save();
/// let inner = p.irq_save(); // nested saves
/// assert!(p.irqs_disabled());
/// // SAFETY: restored in reverse order of saving, on this CPU.
/// unsafe { p.irq_restore(inner) };
/// assert!(p.irqs_disabled(), "still masked by the outer save");
/// // SAFETY: as above.
/// unsafe { p.irq_restore(outer) };
/// assert!(!p.irqs_disabled());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqFlags(pub usize);

/// How a CPU's slot of a [`LocalLock`](crate::LocalLock) is protected.
///
/// ```
/// use local_lock::test_platform::TestPlatform;
/// use local_lock::{LocalLock, Strategy};
///
/// let kernel: LocalLock<u32, TestPlatform> = LocalLock::new(TestPlatform::pinned(2));
/// let rt: LocalLock<u32, TestPlatform> = LocalLock::new(TestPlatform::locked(2));
/// assert_eq!(kernel.lock().strategy(), Strategy::Pinned);
/// assert_eq!(rt.lock().strategy(), Strategy::Locked);
/// // Only a locked slot may be reached from another CPU.
/// assert!(kernel.lock_remote(1).is_none());
/// assert!(rt.lock_remote(1).is_some());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Kernel without PREEMPT_RT (and the per-thread std platform): being
    /// pinned (preemption, or IRQs, disabled; or owning the thread's slot) is
    /// the whole protection. No atomic read-modify-write on the fast path;
    /// another CPU may not touch the slot while its owner can run.
    Pinned,
    /// PREEMPT_RT and std with real CPUs: a per-CPU spin lock (the owner can
    /// be preempted or migrated at any instruction). Remote draining locks
    /// the target slot directly, as Linux 6.x pcp does.
    Locked,
}

/// The result of pinning: which slot the caller may use and how it is
/// protected. Produced by [`Platform::pin`] / [`Platform::pin_remote`] and
/// handed back to the matching unpin.
///
/// ```
/// use local_lock::test_platform::TestPlatform;
/// use local_lock::{Pin, Platform, Strategy};
///
/// let p = TestPlatform::pinned(4);
/// p.set_cpu(2); // this thread now runs on CPU 2
/// let pin: Pin = p.pin();
/// assert_eq!((pin.cpu, pin.strategy), (2, Strategy::Pinned));
/// // SAFETY: this context's pin, released once.
/// unsafe { p.unpin(pin) };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pin {
    /// The CPU (slot index) the caller is pinned to.
    pub cpu: usize,
    /// How that slot is protected for this holder.
    pub strategy: Strategy,
    /// Private to the platform (e.g. whether preemption was disabled).
    pub token: usize,
}

/// A CPU/interrupt/preemption platform.
///
/// ```
/// use local_lock::std_platform::{PerThread, StdCpu};
/// use local_lock::{Platform, Strategy};
///
/// // Generic code asks the platform how its per-CPU slots work.
/// fn describe<P: Platform>(p: &P) -> (usize, Strategy, bool) {
///     (p.nr_cpus(), p.default_strategy(), P::HAS_IRQS)
/// }
/// assert_eq!(describe(&PerThread), (PerThread::OWNED_SLOTS + 1, Strategy::Pinned, false));
/// assert_eq!(describe(&StdCpu::new()).1, Strategy::Locked);
/// let p = PerThread::new();
/// let pin = p.pin(); // this thread's own virtual CPU
/// assert!(pin.cpu < PerThread::OWNED_SLOTS);
/// assert_eq!(pin.strategy, Strategy::Pinned);
/// // SAFETY: our pin, released once.
/// unsafe { p.unpin(pin) };
/// ```
///
/// # Safety
///
/// [`LocalLock`](crate::LocalLock) builds its exclusion on these promises:
///
/// 1. While a [`Pin`] with [`Strategy::Pinned`] returned by [`pin`](Self::pin)
///    is held (until [`unpin`](Self::unpin)), no context other than the
///    caller and interrupt handlers nested inside it (which run to completion
///    before the caller continues, on the same CPU) uses slot `pin.cpu` with a
///    `Pinned` pin, and [`pin_remote`](Self::pin_remote) returns `None` or a
///    `Locked` pin for it only if nobody can hold a `Pinned` pin for it.
/// 2. A `Pinned` pin from [`pin_remote`](Self::pin_remote) is exclusive: no
///    other pin of that slot exists until [`unpin_remote`](Self::unpin_remote).
/// 3. A slot is never handed out with `Pinned` and `Locked` pins at once: a
///    slot is either always `Locked` or protected by pinning.
/// 4. `irq_save`/`irq_restore` (and `irq_disable`/`irq_enable`) really keep
///    this CPU's interrupt handlers from running in between, when
///    [`HAS_IRQS`](Self::HAS_IRQS) is true.
/// 5. [`pin_owned`](Self::pin_owned) returns `Some(cpu)` only when
///    [`pin`](Self::pin), called instead, would have returned `Pin { cpu,
///    strategy: Strategy::Pinned, token: 0 }` with no other effect, and
///    [`unpin`](Self::unpin) of that pin is valid without a `pin` call.
pub unsafe trait Platform: Sync {
    /// The fewest slots a `LocalLock` must have on this platform (checked at
    /// compile time by `LocalLock::new`): every CPU id a `Pinned` pin can name
    /// must be a real slot.
    const MIN_SLOTS: usize = 1;

    /// Whether this platform has interrupts at all (std processes do not).
    const HAS_IRQS: bool;

    /// Whether the allocators' zone locks (taken with interrupts saved,
    /// `spin_lock_irqsave(&zone->lock)`) are raw spin locks
    /// ([`SpinLock::new_raw`](crate::sync::SpinLock::new_raw)): true where a
    /// holder cannot be preempted, as in a kernel without PREEMPT_RT, so
    /// waiters spin and the unlock is a plain store; false (the default)
    /// where it can (std threads, PREEMPT_RT's sleeping spinlocks), so
    /// contended waiters sleep and the unlock swaps to find them.
    const RAW_SPINLOCKS: bool = false;

    /// Number of possible CPUs (slots in use).
    fn nr_cpus(&self) -> usize;

    /// Number of CPUs that run (the kernel's `num_online_cpus()`, or
    /// `cpumask_weight(cpumask_of_node(nid))` on one node): what per-CPU
    /// caches divide a zone's memory by (pcp's `zone_highsize`), as opposed
    /// to [`nr_cpus`](Self::nr_cpus), the slots an id may name. Read when
    /// caches are sized, not on fast paths. The default is `nr_cpus()`; std
    /// platforms give the CPUs the process may run on
    /// ([`online_cpus`](crate::std_platform::online_cpus)), kernels their
    /// booted CPUs ([`KernelHooks::nr_online_cpus`](crate::kernel::KernelHooks::nr_online_cpus)).
    /// At least 1.
    fn nr_online_cpus(&self) -> usize {
        self.nr_cpus()
    }

    /// The CPU the caller runs on: only a hint unless pinned.
    fn current_cpu(&self) -> usize;

    /// Whether the caller runs in interrupt context.
    fn in_interrupt(&self) -> bool;

    /// Whether interrupts are disabled on this CPU.
    fn irqs_disabled(&self) -> bool;

    /// Disables interrupts, returning the previous state
    /// (`local_irq_save`). A no-op where there are none.
    fn irq_save(&self) -> IrqFlags;

    /// Restores the state saved by [`irq_save`](Self::irq_save)
    /// (`local_irq_restore`).
    ///
    /// # Safety
    ///
    /// `flags` comes from the matching `irq_save` on this CPU, and saves are
    /// restored in reverse order.
    unsafe fn irq_restore(&self, flags: IrqFlags);

    /// Disables interrupts (`local_irq_disable`).
    fn irq_disable(&self);

    /// Enables interrupts (`local_irq_enable`).
    ///
    /// # Safety
    ///
    /// Matches an earlier `irq_disable` by the same context, and interrupts
    /// were enabled before it.
    unsafe fn irq_enable(&self);

    /// Disables preemption (or, on RT and std, migration).
    fn preempt_disable(&self);

    /// Re-enables preemption.
    ///
    /// # Safety
    ///
    /// Matches an earlier `preempt_disable` by the same context.
    unsafe fn preempt_enable(&self);

    /// Pins the caller to its CPU and says how that CPU's slot is protected.
    /// The default disables preemption and uses
    /// [`default_strategy`](Self::default_strategy).
    #[inline(always)]
    fn pin(&self) -> Pin {
        self.preempt_disable();
        Pin {
            cpu: self.current_cpu(),
            strategy: self.default_strategy(),
            token: 0,
        }
    }

    /// The caller's CPU when it owns that CPU's slot outright and knows so
    /// cheaply (a per-thread platform's own slot): then
    /// [`pin`](Self::pin) would return `Pin { cpu, strategy:
    /// Strategy::Pinned, token: 0 }` and do nothing else, so `LocalLock`
    /// builds that pin itself on a separate fast path (one thread-local
    /// load and a compare, no strategy merged over the platform's slow
    /// cases; issue #22). `None` (the default): use `pin`.
    #[inline(always)]
    fn pin_owned(&self) -> Option<usize> {
        None
    }

    /// Undoes [`pin`](Self::pin).
    ///
    /// # Safety
    ///
    /// `pin` comes from this context's matching `pin` call and is released
    /// once, in reverse order of pinning.
    #[inline(always)]
    unsafe fn unpin(&self, pin: Pin) {
        let _ = pin;
        // SAFETY: matches the preempt_disable in `pin` (caller's contract).
        unsafe { self.preempt_enable() }
    }

    /// The strategy of this platform's slots.
    fn default_strategy(&self) -> Strategy;

    /// A random seed for hardening (SLUB's obfuscated freelist pointers):
    /// a kernel returns boot entropy, std platforms OS randomness. The
    /// default, 0, means "no entropy": users then derive values from
    /// addresses only (still obfuscated, but predictable).
    fn random_seed(&self) -> u64 {
        0
    }

    /// `nr_node_ids`: NUMA nodes (the highest node id + 1; see
    /// [`topology`](crate::topology)). The default is one node.
    fn nr_node_ids(&self) -> usize {
        1
    }

    /// `cpu_to_node(cpu)`: the node of CPU `cpu` (node 0 by default).
    fn cpu_to_node(&self, cpu: usize) -> usize {
        let _ = cpu;
        0
    }

    /// `node_distance(a, b)`: [`LOCAL_DISTANCE`](crate::topology::LOCAL_DISTANCE)
    /// from a node to itself, [`REMOTE_DISTANCE`](crate::topology::REMOTE_DISTANCE)
    /// between two nodes by default (a SLIT entry on a real machine).
    fn node_distance(&self, a: usize, b: usize) -> u8 {
        if a == b {
            crate::topology::LOCAL_DISTANCE
        } else {
            crate::topology::REMOTE_DISTANCE
        }
    }

    /// `numa_node_id()`: the node the caller runs on (a hint unless
    /// pinned). The default is the node of [`current_cpu`](Self::current_cpu).
    fn numa_node_id(&self) -> usize {
        self.cpu_to_node(self.current_cpu())
    }

    /// The kernel's page reclaim (`try_to_free_pages`, its shrinkers):
    /// called by the page allocator's slow path when the watermarks refuse
    /// a request of `2^order` pages that may block (not `NONBLOCK`, not the
    /// reclaimer's own `MEMALLOC`), outside every allocator lock, for node
    /// `nid`. Free what can be freed back to the allocators and return the
    /// number of pages reclaimed (0: no progress). The retry policy
    /// (`NORETRY` once, `RETRY_MAYFAIL` while it makes progress, `NOFAIL`
    /// forever) is the caller's. The default reclaims nothing.
    fn reclaim_pages(&self, nid: usize, order: u8) -> usize {
        let _ = (nid, order);
        0
    }

    /// `warn_alloc`: a request of `2^order` pages with gfp bits `gfp`
    /// failed and did not pass `__GFP_NOWARN` (a kernel prints "page
    /// allocation failure" and its memory state). Called outside every
    /// allocator lock; must not allocate. The default does nothing.
    fn warn_alloc(&self, order: u8, gfp: u32) {
        let _ = (order, gfp);
    }

    /// Access to another CPU's slot (for draining). `None` where the platform
    /// cannot allow it (pinned kernel: the owner may be running; per-thread:
    /// the slot's thread is alive). The default allows it on `Locked`
    /// platforms only.
    fn pin_remote(&self, cpu: usize) -> Option<Pin> {
        match self.default_strategy() {
            Strategy::Locked => Some(Pin {
                cpu,
                strategy: Strategy::Locked,
                token: 0,
            }),
            _ => None,
        }
    }

    /// Releases a pin from [`pin_remote`](Self::pin_remote).
    ///
    /// # Safety
    ///
    /// `pin` comes from `pin_remote` on this platform and is released once;
    /// or it is `Pin { cpu, strategy: Locked, token: 0 }`, which
    /// implementations must ignore: a spin slot taken where `pin_remote`
    /// refused ([`LocalLock::lock_remote_spin`](crate::LocalLock::lock_remote_spin)).
    unsafe fn unpin_remote(&self, pin: Pin) {
        let _ = pin;
    }

    /// Waits a little for a contended slot lock (spin, then on std yield).
    #[inline]
    fn spin_wait(&self, backoff: &Backoff) {
        backoff.snooze();
    }

    /// Whether the `this_cpu_*` sheaf operations below are restartable
    /// sequences that callers use without the slot lock (rseq on std,
    /// [`RseqCpu`](crate::std_platform::RseqCpu)). The defaults are the
    /// kernel's generic per-CPU operations (interrupts saved and pinned:
    /// valid on [`Strategy::Pinned`] platforms only); the default is
    /// `false`, so users keep their locked paths.
    #[inline(always)]
    fn restartable(&self) -> bool {
        false
    }

    /// The per-thread area the `this_cpu_*` operations address, which
    /// callers keep beside their records and pass in [`SheafSlots`]
    /// ([`SheafSlots::with_area`]); read once, at a cache's first use,
    /// by callers that then use the restartable operations only if it is
    /// not 0. A restartable platform returns non-zero once
    /// [`restartable`](Self::restartable) holds; 0 (the default): none.
    #[inline(always)]
    fn this_cpu_area(&self) -> isize {
        0
    }

    /// The area to hand a section, given the copy `kept` (non-zero) the
    /// caller read from beside its records: `kept` by default. A platform
    /// whose area is one process-wide value reads it from its own place,
    /// at a constant address, so that the section's first loads (the CPU
    /// id) need not wait until the caller has found its records (their
    /// address may come at the end of a chain of loads: a size class, a
    /// cache); the caller's `kept` then only decides the dispatch, which
    /// the branch predictor takes off that chain.
    #[inline(always)]
    fn this_cpu_area_now(&self, kept: isize) -> isize {
        kept
    }

    /// `this_cpu` pop: the last entry of the running CPU's main sheaf, 0
    /// when it has none (no record, no main sheaf, empty).
    ///
    /// # Safety
    ///
    /// [`restartable`](Self::restartable) returned true on this platform
    /// (the operations then stay valid for the life of the process), or
    /// this platform's slots are [`Strategy::Pinned`] (the defaults).
    #[inline(always)]
    unsafe fn this_cpu_sheaf_pop<const N: usize>(&self, s: SheafSlots<'_, N>) -> usize {
        this_cpu_generic(self, s, |r| this_cpu::pop_in(r, s.cap())).unwrap_or(0)
    }

    /// [`this_cpu_sheaf_pop`](Self::this_cpu_sheaf_pop) for sheaves whose
    /// size word nobody but these operations and the sheaf's owner writes
    /// (private memory, `PageAlloc::PRIVATE_META`): it may trust that word
    /// to be at most the capacity (one check fewer on the restartable
    /// path). The default is `this_cpu_sheaf_pop`.
    ///
    /// # Safety
    ///
    /// As [`this_cpu_sheaf_pop`](Self::this_cpu_sheaf_pop), and every
    /// sheaf's size word is at most `s.cap()`.
    #[inline(always)]
    unsafe fn this_cpu_sheaf_pop_private<const N: usize>(&self, s: SheafSlots<'_, N>) -> usize {
        // SAFETY: the caller's contract.
        unsafe { self.this_cpu_sheaf_pop(s) }
    }

    /// `this_cpu` push of `v` onto the running CPU's main sheaf; false when
    /// it has none or it is full.
    ///
    /// # Safety
    ///
    /// [`restartable`](Self::restartable) returned true on this platform
    /// (the operations then stay valid for the life of the process), or
    /// this platform's slots are [`Strategy::Pinned`] (the defaults).
    #[inline(always)]
    unsafe fn this_cpu_sheaf_push<const N: usize>(&self, s: SheafSlots<'_, N>, v: usize) -> bool {
        this_cpu_generic(self, s, |r| this_cpu::push_in(r, s.cap(), v)).unwrap_or(false)
    }

    /// `this_cpu` pop of up to `out.len()` entries of the running CPU's
    /// main sheaf, the last one first, in one operation (the kernel's
    /// `alloc_from_pcs_bulk` under one local lock); returns how many were
    /// popped (0 when it has none, or is empty).
    ///
    /// # Safety
    ///
    /// As [`this_cpu_sheaf_pop`](Self::this_cpu_sheaf_pop).
    #[inline(always)]
    unsafe fn this_cpu_sheaf_pop_many<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        out: &mut [usize],
    ) -> usize {
        this_cpu_generic(self, s, |r| this_cpu::pop_many_in(r, s.cap(), out)).unwrap_or(0)
    }

    /// `this_cpu` push of the entries of `src`, in order, onto the running
    /// CPU's main sheaf as far as it has room, in one operation (the
    /// kernel's `free_to_pcs_bulk`); returns how many were pushed (0 when
    /// it has none, or is full).
    ///
    /// # Safety
    ///
    /// As [`this_cpu_sheaf_push`](Self::this_cpu_sheaf_push).
    #[inline(always)]
    unsafe fn this_cpu_sheaf_push_many<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        src: &[usize],
    ) -> usize {
        this_cpu_generic(self, s, |r| this_cpu::push_many_in(r, s.cap(), src)).unwrap_or(0)
    }

    /// Way `way` of the running CPU's validated ranges `(base, span,
    /// vgen)`, read as one snapshot; `None` when the CPU has no record.
    ///
    /// # Safety
    ///
    /// [`restartable`](Self::restartable) returned true on this platform
    /// (the operations then stay valid for the life of the process), or
    /// this platform's slots are [`Strategy::Pinned`] (the defaults).
    #[inline(always)]
    unsafe fn this_cpu_range<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        way: usize,
    ) -> Option<(usize, usize, usize)> {
        this_cpu_generic(self, s, |r| this_cpu::range_in(r, way))
    }

    /// Records a validated range as way `way` on the running CPU (see
    /// [`this_cpu::set_range_in`]); false when it has no record.
    ///
    /// # Safety
    ///
    /// [`restartable`](Self::restartable) returned true on this platform
    /// (the operations then stay valid for the life of the process), or
    /// this platform's slots are [`Strategy::Pinned`] (the defaults).
    #[inline(always)]
    unsafe fn this_cpu_set_range<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        way: usize,
        base: usize,
        span: usize,
        gen: usize,
    ) -> bool {
        this_cpu_generic(self, s, |r| this_cpu::set_range_in(r, way, base, span, gen)).is_some()
    }

    /// `this_cpu_xchg` of a sheaf word: stores `new`, returns the old
    /// value; `None` when the CPU has no record.
    ///
    /// # Safety
    ///
    /// [`restartable`](Self::restartable) returned true on this platform
    /// (the operations then stay valid for the life of the process), or
    /// this platform's slots are [`Strategy::Pinned`] (the defaults).
    #[inline(always)]
    unsafe fn this_cpu_xchg<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        w: SheafWord,
        new: usize,
    ) -> Option<usize> {
        this_cpu_generic(self, s, |r| this_cpu::xchg_in(r, s.cap(), w, new))
    }

    /// `this_cpu_cmpxchg` of a sheaf word from `old` to `new`; false when
    /// it held something else or the CPU has no record.
    ///
    /// # Safety
    ///
    /// [`restartable`](Self::restartable) returned true on this platform
    /// (the operations then stay valid for the life of the process), or
    /// this platform's slots are [`Strategy::Pinned`] (the defaults).
    #[inline(always)]
    unsafe fn this_cpu_cmpxchg<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        w: SheafWord,
        old: usize,
        new: usize,
    ) -> bool {
        this_cpu_generic(self, s, |r| this_cpu::cmpxchg_in(r, s.cap(), w, old, new))
            .unwrap_or(false)
    }

    /// A hardened free's push as one `this_cpu` operation: `obj` must lie
    /// on an object boundary inside the running CPU's validated range,
    /// recorded at the current discard count (else [`FreePush::Miss`]);
    /// then the free marker `chk.key` is stored into its first word
    /// without reading it (a double free that is not immediate is found
    /// when the object leaves the sheaf: its marker is gone) and `obj ^
    /// key` pushed onto the main sheaf ([`FreePush::Pushed`]), unless it
    /// already is the sheaf's top entry ([`FreePush::Marked`]: an
    /// immediate double free), or [`FreePush::Full`] with the object
    /// marked when there is no room.
    ///
    /// # Safety
    ///
    /// As [`this_cpu_sheaf_pop`](Self::this_cpu_sheaf_pop); `chk` describes
    /// the records of `s`; `obj` (once validated) is the caller's to
    /// write.
    #[inline(always)]
    unsafe fn this_cpu_free_push<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        chk: &FreeCheck,
        obj: usize,
    ) -> FreePush {
        this_cpu_generic(self, s, |r| this_cpu::free_push_in(r, chk, obj)).unwrap_or(FreePush::Miss)
    }

    /// [`this_cpu_free_push`](Self::this_cpu_free_push) pushing `obj`
    /// itself, not `obj ^ key`: for sheaves kept in memory no user can
    /// reach, whose entries need no encoding.
    ///
    /// # Safety
    ///
    /// As [`this_cpu_free_push`](Self::this_cpu_free_push).
    #[inline(always)]
    unsafe fn this_cpu_free_push_plain<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        chk: &FreeCheck,
        obj: usize,
    ) -> FreePush {
        this_cpu_generic(self, s, |r| this_cpu::free_push_in_plain(r, chk, obj))
            .unwrap_or(FreePush::Miss)
    }

    /// An unhardened free's push as one `this_cpu` operation:
    /// [`this_cpu_free_push_plain`](Self::this_cpu_free_push_plain)
    /// without the free marker and the top-entry check (the steps of
    /// [`this_cpu::free_push_in_unmarked`]; never [`FreePush::Marked`]).
    ///
    /// # Safety
    ///
    /// As [`this_cpu_free_push`](Self::this_cpu_free_push).
    #[inline(always)]
    unsafe fn this_cpu_free_push_unmarked<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        chk: &FreeCheck,
        obj: usize,
    ) -> FreePush {
        this_cpu_generic(self, s, |r| this_cpu::free_push_in_unmarked(r, chk, obj))
            .unwrap_or(FreePush::Miss)
    }

    /// Exchanges sheaf word `w` of another CPU's record (a remote drain)
    /// and waits until no operation that may still use the old value runs
    /// on that CPU. `None` where the platform cannot (the default: pinned
    /// CPUs are drained by their owners).
    fn remote_sheaf_xchg<const N: usize>(
        &self,
        s: SheafSlots<'_, N>,
        cpu: usize,
        w: SheafWord,
        new: usize,
    ) -> Option<usize> {
        let _ = (s, cpu, w, new);
        None
    }
}

/// The kernel's generic `this_cpu` operation: interrupts saved, pinned,
/// `f` on the pinned CPU's record (`None`: no record, or a platform whose
/// pins are not exclusive).
#[inline(always)]
fn this_cpu_generic<P: Platform + ?Sized, R, const N: usize>(
    p: &P,
    s: SheafSlots<'_, N>,
    f: impl FnOnce(&this_cpu::CpuSheaves) -> R,
) -> Option<R> {
    let flags = p.irq_save();
    let pin = p.pin();
    let r = match s.record(pin.cpu) {
        Some(rec) if pin.strategy == Strategy::Pinned => Some(f(rec)),
        _ => None,
    };
    // SAFETY: matches the pin and the save above, in reverse order.
    unsafe {
        p.unpin(pin);
        p.irq_restore(flags);
    }
    r
}

/// `this_cpu_cmpxchg_double` as the generic per-CPU operations implement it
/// ("preemption off, still this CPU?, compare-exchange, preemption on"; on
/// x86 it is one `cmpxchg16b` on a `%gs`-relative address): pins the caller
/// ([`Platform::pin`]) and, if it still runs on `cpu`, compare-exchanges
/// `word` (the per-CPU pair of `cpu`) from `old` to `new` (acquire-release
/// on success, relaxed on failure), then unpins. Nothing else is disabled:
/// interrupts stay on.
///
/// Returns whether the exchange happened: `false` if the caller migrated
/// away from `cpu` since it read `old` on that CPU (then `word` is not
/// touched: another CPU's pair may only be changed by its owner), or if the
/// pair no longer equals `old` (an interrupt or another context changed it,
/// e.g. advanced a transaction id). Callers retry from a fresh read, as
/// SLUB's lockless `(freelist, tid)` fast paths do.
#[inline(always)]
pub fn this_cpu_cmpxchg_double<P: Platform + ?Sized>(
    platform: &P,
    cpu: usize,
    word: &AtomicDWord,
    old: DWord,
    new: DWord,
) -> bool {
    let pin = platform.pin();
    let ok = pin.cpu == cpu
        && word
            .compare_exchange(old, new, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
    // SAFETY: matches the pin above, released once.
    unsafe { platform.unpin(pin) };
    ok
}
