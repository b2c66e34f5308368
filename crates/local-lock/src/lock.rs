//! [`LocalLock<T>`]: one `T` per CPU, reached only through guards.

use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};

use crate::platform::{IrqFlags, Pin, Platform, Strategy};
use crate::sync::atomic::{compiler_fence, AtomicUsize, Ordering};
use crate::sync::{Backoff, CachePadded, MutPtr, UnsafeCell};

/// Default number of per-CPU slots of a [`LocalLock`] (enough for the
/// per-thread std platform's 64 virtual CPUs).
pub const DEFAULT_SLOTS: usize = 64;

/// Slot state: nobody holds it.
const FREE: usize = 0;
/// Slot state (pinned strategy): held by the pinned owner or a nested
/// interrupt handler. Written with plain (relaxed) stores: no atomic RMW.
const PINNED_HELD: usize = 1;
/// Slot state (locked strategy) is `tag(cpu, in_irq)`: bit 0 clear, bit 1 =
/// taken in interrupt context, bits 2.. = holder's CPU + 1.
#[inline(always)]
fn locked_tag(cpu: usize, in_irq: bool) -> usize {
    ((cpu + 1) << 2) | ((in_irq as usize) << 1)
}

/// Values that can initialise a slot in a `const` context.
///
/// ```
/// use local_lock::std_platform::PerThread;
/// use local_lock::{ConstInit, LocalLock};
///
/// struct Counts {
///     allocs: u64,
///     frees: u64,
/// }
/// impl ConstInit for Counts {
///     const INIT: Self = Counts { allocs: 0, frees: 0 };
/// }
/// // `LocalLock::new` is `const` for `ConstInit` slots: usable in a `static`.
/// static COUNTS: LocalLock<Counts, PerThread> = LocalLock::new(PerThread);
/// COUNTS.lock().allocs += 2;
/// COUNTS.lock().frees += 1;
/// let c = COUNTS.lock();
/// assert_eq!((c.allocs, c.frees), (2, 1), "this thread's slot");
/// // Integers, arrays, options and raw pointers start at zero, None, null.
/// assert_eq!(<[u32; 4]>::INIT, [0; 4]);
/// assert_eq!(<Option<&str>>::INIT, None);
/// assert!(<*mut u8>::INIT.is_null());
/// ```
pub trait ConstInit {
    /// The initial value of every CPU's slot.
    const INIT: Self;
}

// `repr(C)`: the data first, the two words after it, so the words share the
// cache line of the data's last fields (pcp puts its `count` there, which
// the published word mirrors).
#[repr(C)]
struct Slot<T> {
    /// The per-CPU data; accessed only by the holder of `state`.
    data: UnsafeCell<T>,
    /// `FREE`, `PINNED_HELD` or a locked tag. Under the pinned strategy
    /// only the owning CPU (and its nested interrupts) writes it, so relaxed
    /// loads and stores plus compiler fences suffice; under the locked
    /// strategy it is a spin lock word (acquire/release CAS).
    state: AtomicUsize,
    /// A word the holder publishes for lockless readers on other CPUs
    /// ([`LocalGuard::publish`], [`LocalLock::published`]): written only
    /// under the slot, read by anyone.
    published: AtomicUsize,
}

/// One `T` per CPU, each in its own cache-line-padded slot, reached only
/// through guards that pin the caller (see the crate docs for the two
/// strategies and the nesting rules).
///
/// `N` is the number of slots; it must be at least the platform's
/// [`MIN_SLOTS`](Platform::MIN_SLOTS) (checked at compile time by
/// [`new`](Self::new) and at run time by [`new_with`](Self::new_with)). On a
/// `Locked` platform CPU ids at or above `N` share slots (`cpu % N`), which is
/// safe because the lock protects them; a `Pinned` pin naming a CPU at or
/// above `N` is refused with a panic.
///
/// ```
/// use local_lock::std_platform::StdCpu;
/// use local_lock::{LocalLock, Strategy};
///
/// // One counter per real CPU (slots locked: a thread may migrate).
/// let mut hits: LocalLock<u64, StdCpu> = LocalLock::new_with(StdCpu::new(), |_| 0);
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| {
///             for _ in 0..100 {
///                 *hits.lock() += 1;
///             }
///         });
///     }
/// });
/// assert_eq!(hits.lock().strategy(), Strategy::Locked);
/// // `&mut` reaches every slot without locking: the total.
/// assert_eq!(hits.iter_mut().map(|n| *n).sum::<u64>(), 400);
/// ```
#[repr(C)]
pub struct LocalLock<T, P: Platform, const N: usize = DEFAULT_SLOTS> {
    platform: P,
    /// Stored last CPU first: CPU `i`'s slot is `slots[N - 1 - i]` ([`at`]),
    /// so CPU 0's ends the lock, and a structure that puts its own first
    /// CPUs' records right after the lock (slub's `KmemCache`) has theirs
    /// and their slots on one page.
    ///
    /// [`at`]: Self::at
    slots: [CachePadded<Slot<T>>; N],
}

// SAFETY: every access to a slot's `T` is serialised by the slot protocol
// (pinning or the slot lock), and `T` may move between threads through
// remote access and thread migration, hence `T: Send`.
unsafe impl<T: Send, P: Platform, const N: usize> Sync for LocalLock<T, P, N> {}
// SAFETY: owning the lock owns every `T`.
unsafe impl<T: Send, P: Platform + Send, const N: usize> Send for LocalLock<T, P, N> {}

#[cfg(not(loom))]
impl<T: ConstInit, P: Platform, const N: usize> LocalLock<T, P, N> {
    /// A lock whose slots all start as `T::INIT`, usable in a `static`.
    ///
    /// Too few slots for the platform is a compile-time error:
    ///
    /// ```compile_fail
    /// use local_lock::{LocalLock, std_platform::PerThread};
    /// // PerThread needs 64 slots (63 owned + the overflow slot).
    /// static L: LocalLock<u32, PerThread, 8> = LocalLock::new(PerThread);
    /// ```
    pub const fn new(platform: P) -> Self {
        const {
            assert!(
                N >= P::MIN_SLOTS,
                "LocalLock: fewer slots than the platform's MIN_SLOTS"
            )
        };
        LocalLock {
            platform,
            slots: [const {
                CachePadded::new(Slot {
                    data: UnsafeCell::new(T::INIT),
                    state: AtomicUsize::new(FREE),
                    published: AtomicUsize::new(0),
                })
            }; N],
        }
    }
}

#[cfg(not(loom))]
impl<T: ConstInit, P: Platform, const N: usize> LocalLock<T, P, N> {
    /// [`new`](Self::new), written in place over zeroed memory: only the
    /// platform is written, the slots are left as they are (a zero slot
    /// is a free, unpublished slot holding zero bytes). A lock in a zero
    /// `.bss` slot then has only the pages its CPUs use written.
    ///
    /// # Safety
    ///
    /// `lock` is valid for writes of `Self`, aligned, and all its bytes
    /// are zero; `T::INIT` is all zero bytes; nothing else accesses the
    /// lock during the call.
    pub unsafe fn init_in_zeroed(lock: *mut Self, platform: P) {
        const {
            assert!(
                N >= P::MIN_SLOTS,
                "LocalLock: fewer slots than the platform's MIN_SLOTS"
            );
            assert!(FREE == 0, "a zero slot is a free one");
        };
        // SAFETY: the caller's pointer; the platform field held zero bytes
        // (nothing to drop).
        unsafe { core::ptr::addr_of_mut!((*lock).platform).write(platform) };
    }
}

impl<T, P: Platform, const N: usize> LocalLock<T, P, N> {
    /// A lock whose slot for CPU `i` starts as `init(i)`.
    pub fn new_with(platform: P, mut init: impl FnMut(usize) -> T) -> Self {
        assert!(
            N >= P::MIN_SLOTS,
            "LocalLock: {N} slots, but the platform needs at least {}",
            P::MIN_SLOTS
        );
        let mut slots: [CachePadded<Slot<T>>; N] = core::array::from_fn(|i| {
            CachePadded::new(Slot {
                data: UnsafeCell::new(init(i)),
                state: AtomicUsize::new(FREE),
                published: AtomicUsize::new(0),
            })
        });
        // (made in CPU order, stored last CPU first)
        slots.reverse();
        LocalLock { platform, slots }
    }

    /// CPU `cpu`'s slot (`cpu < N`; see the field's order).
    #[inline(always)]
    fn at(&self, cpu: usize) -> &CachePadded<Slot<T>> {
        &self.slots[N - 1 - cpu]
    }

    /// The platform.
    #[inline(always)]
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// The bytes of one slot (the slots end the lock, CPU 0's last: see
    /// the field's order).
    pub const SLOT_BYTES: usize = core::mem::size_of::<CachePadded<Slot<T>>>();

    /// Number of slots (`N`).
    pub const fn slots(&self) -> usize {
        N
    }

    #[inline(always)]
    fn slot(&self, pin: Pin) -> &Slot<T> {
        if pin.cpu < N {
            self.at(pin.cpu)
        } else {
            // Only scalars cross into the cold path, so `pin` stays in
            // registers on the fast path.
            self.slot_out_of_range(pin.cpu, pin.strategy == Strategy::Locked)
        }
    }

    #[cold]
    #[inline(never)]
    fn slot_out_of_range(&self, cpu: usize, locked: bool) -> &Slot<T> {
        if locked {
            self.at(cpu % N)
        } else {
            panic!("LocalLock: the platform pinned CPU {cpu} but the lock has only {N} slots")
        }
    }

    /// `local_lock()`: pins the caller (preemption or migration disabled) and
    /// takes this CPU's slot.
    ///
    /// # Panics
    ///
    /// If this CPU's slot is already held by the caller's own context or by
    /// the task an interrupt handler interrupted: that is a deadlock in the
    /// kernel; use [`try_lock`](Self::try_lock) where re-entry is possible.
    #[inline]
    pub fn lock(&self) -> LocalGuard<'_, T, P, N> {
        self.acquire(IrqState::None)
    }

    /// `local_lock_irq()`: disables interrupts, then [`lock`](Self::lock).
    /// Interrupts are enabled again when the guard drops, so it must not be
    /// used where they may already be disabled.
    #[inline]
    pub fn lock_irq(&self) -> LocalGuard<'_, T, P, N> {
        self.platform.irq_disable();
        self.acquire(IrqState::Disabled)
    }

    /// `local_lock_irqsave()`: saves and disables interrupts, then
    /// [`lock`](Self::lock). The saved state is restored when the guard drops.
    #[inline]
    pub fn lock_irqsave(&self) -> LocalGuard<'_, T, P, N> {
        let flags = self.platform.irq_save();
        self.acquire(IrqState::Saved(flags))
    }

    /// `local_trylock()`: like [`lock`](Self::lock) but returns `None` instead
    /// of deadlocking when the slot is held (an interrupt handler that
    /// interrupted the holder, or a contended slot on the locked strategy).
    #[inline]
    pub fn try_lock(&self) -> Option<LocalGuard<'_, T, P, N>> {
        self.try_acquire(IrqState::None)
    }

    /// `local_trylock_irqsave()`: [`try_lock`](Self::try_lock) with
    /// interrupts saved and disabled while held.
    #[inline]
    pub fn try_lock_irqsave(&self) -> Option<LocalGuard<'_, T, P, N>> {
        let flags = self.platform.irq_save();
        let g = self.try_acquire(IrqState::Saved(flags));
        if g.is_none() {
            // SAFETY: restores the save just above, nothing nested in between.
            unsafe { self.platform.irq_restore(flags) };
        }
        g
    }

    /// `spin_trylock(&pcp->lock)` (Linux 6.0+): [`try_lock`](Self::try_lock)
    /// for slots that are real per-CPU spin locks on every strategy: on a
    /// pinned platform the slot word is taken with an acquiring CAS (not a
    /// plain store), so [`lock_remote_spin`](Self::lock_remote_spin) can take
    /// it from another CPU. A slot must be taken only through the `_spin`
    /// methods (or only through the others) for its whole life.
    #[inline]
    pub fn try_lock_spin(&self) -> Option<LocalGuard<'_, T, P, N>> {
        let pin = self.platform.pin();
        let slot = self.slot(pin);
        let tag = locked_tag(pin.cpu, self.platform.in_interrupt());
        if slot
            .state
            .compare_exchange(FREE, tag, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            Some(LocalGuard::new(self, pin, slot, IrqState::None, false))
        } else {
            // SAFETY: undoes the pin just taken.
            unsafe { self.platform.unpin(pin) };
            None
        }
    }

    /// `spin_lock_irqsave(&pcp->lock)` on this CPU's slot: the spin-lock
    /// flavour of [`lock_irqsave`](Self::lock_irqsave) (see
    /// [`try_lock_spin`](Self::try_lock_spin)); waits while another CPU
    /// holds the slot remotely.
    ///
    /// # Panics
    ///
    /// If an interrupt handler wants the slot held by the task it
    /// interrupted (a deadlock).
    #[inline]
    pub fn lock_irqsave_spin(&self) -> LocalGuard<'_, T, P, N> {
        let flags = self.platform.irq_save();
        let pin = self.platform.pin();
        let slot = self.slot(pin);
        let tag = locked_tag(pin.cpu, self.platform.in_interrupt());
        self.spin_acquire(slot, tag);
        LocalGuard::new(self, pin, slot, IrqState::Saved(flags), false)
    }

    /// `spin_lock_irqsave(&per_cpu_ptr(pcp, cpu)->lock)`: another CPU's slot
    /// on every platform, for drains (Linux 6.0+ drains remote lists under
    /// their lock). Where the platform grants remote access
    /// ([`Platform::pin_remote`]) it is used; otherwise (a pinned platform)
    /// the caller stays pinned to its own CPU and spins on `cpu`'s slot
    /// word. `None` if `cpu` is not a slot index (`>= N`). The slot must be
    /// a spin slot (see [`try_lock_spin`](Self::try_lock_spin)).
    pub fn lock_remote_spin(&self, cpu: usize) -> Option<LocalGuard<'_, T, P, N>> {
        self.remote(cpu, true)
    }

    #[inline(always)]
    fn acquire(&self, irq: IrqState) -> LocalGuard<'_, T, P, N> {
        // An owned slot on its own path: its strategy a constant, its bound
        // check folded into the platform's (issue #22).
        if let Some(cpu) = self.platform.pin_owned() {
            if cpu < N {
                let pin = Pin {
                    cpu,
                    strategy: Strategy::Pinned,
                    token: 0,
                };
                let slot = self.at(cpu);
                self.take_pinned(slot, cpu);
                return LocalGuard::new(self, pin, slot, irq, false);
            }
        }
        let pin = self.platform.pin();
        let slot = self.slot(pin);
        match pin.strategy {
            Strategy::Pinned => self.take_pinned(slot, pin.cpu),
            Strategy::Locked => {
                let tag = locked_tag(pin.cpu, self.platform.in_interrupt());
                if slot
                    .state
                    .compare_exchange_weak(FREE, tag, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    self.lock_contended(slot, tag);
                }
            }
        }
        LocalGuard::new(self, pin, slot, irq, false)
    }

    #[inline(always)]
    fn try_acquire(&self, irq: IrqState) -> Option<LocalGuard<'_, T, P, N>> {
        let pin = self.platform.pin();
        let slot = self.slot(pin);
        let ok = match pin.strategy {
            Strategy::Pinned => {
                if slot.state.load(Ordering::Relaxed) == FREE {
                    slot.state.store(PINNED_HELD, Ordering::Relaxed);
                    compiler_fence(Ordering::SeqCst);
                    true
                } else {
                    false
                }
            }
            Strategy::Locked => {
                let tag = locked_tag(pin.cpu, self.platform.in_interrupt());
                slot.state
                    .compare_exchange(FREE, tag, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            }
        };
        if ok {
            Some(LocalGuard::new(self, pin, slot, irq, false))
        } else {
            // SAFETY: undoes the pin just taken.
            unsafe { self.platform.unpin(pin) };
            None
        }
    }

    /// Takes a pinned slot (`cpu`'s): a plain store, after the check that
    /// nobody on this CPU holds it already.
    #[inline(always)]
    fn take_pinned(&self, slot: &Slot<T>, cpu: usize) {
        if slot.state.load(Ordering::Relaxed) != FREE {
            self.reentered(cpu);
        }
        slot.state.store(PINNED_HELD, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
    }

    #[cold]
    #[inline(never)]
    fn reentered(&self, cpu: usize) -> ! {
        panic!(
            "LocalLock: CPU {}'s slot re-entered (in_interrupt = {}): the holder was interrupted \
             or nested the same lock; use try_lock or an irq-disabling flavour",
            cpu,
            self.platform.in_interrupt()
        )
    }

    /// Takes a slot's word as a spin lock (acquire CAS, then spinning).
    #[inline(always)]
    fn spin_acquire(&self, slot: &Slot<T>, tag: usize) {
        if slot
            .state
            .compare_exchange(FREE, tag, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended(slot, tag);
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self, slot: &Slot<T>, tag: usize) {
        let backoff = Backoff::new();
        loop {
            let cur = slot.state.load(Ordering::Relaxed);
            if cur == FREE {
                if slot
                    .state
                    .compare_exchange_weak(FREE, tag, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
            } else if tag & 2 != 0 && (cur >> 2) == (tag >> 2) && cur & 2 == 0 {
                // We are an interrupt handler and the holder is the task we
                // interrupted on this very CPU: it cannot run until we return.
                panic!(
                    "LocalLock: deadlock: interrupt on CPU {} wants the slot held by the task it \
                     interrupted; use try_lock or lock_irqsave in the task",
                    (tag >> 2) - 1
                );
            }
            self.platform.spin_wait(&backoff);
        }
    }

    /// Access to another CPU's slot, for draining, where the platform allows
    /// it (see [`Platform::pin_remote`]). Interrupts are saved and disabled
    /// while it is held. `None` if the platform refuses (pinned kernel CPUs,
    /// live per-thread slots) or if `cpu` is not a slot index (`>= N`).
    pub fn lock_remote(&self, cpu: usize) -> Option<LocalGuard<'_, T, P, N>> {
        self.remote(cpu, false)
    }

    /// [`lock_remote`](Self::lock_remote), or with `spin`
    /// [`lock_remote_spin`](Self::lock_remote_spin).
    fn remote(&self, cpu: usize, spin: bool) -> Option<LocalGuard<'_, T, P, N>> {
        if cpu >= N {
            return None;
        }
        let flags = self.platform.irq_save();
        let pin = match self.platform.pin_remote(cpu) {
            Some(pin) => pin,
            // A spin slot: interrupts stay disabled while held (no
            // preemption in a kernel), so no pin of the caller's own CPU is
            // needed, as on the locked strategy.
            None if spin => Pin {
                cpu,
                strategy: Strategy::Locked,
                token: 0,
            },
            None => {
                // SAFETY: restores the save just above.
                unsafe { self.platform.irq_restore(flags) };
                return None;
            }
        };
        let slot = self.slot(pin);
        if pin.strategy == Strategy::Pinned && !spin {
            // The platform gave us exclusive use of the slot.
            debug_assert_eq!(slot.state.load(Ordering::Relaxed), FREE);
            slot.state.store(PINNED_HELD, Ordering::Relaxed);
            compiler_fence(Ordering::SeqCst);
        } else {
            let tag = locked_tag(self.platform.current_cpu(), self.platform.in_interrupt());
            self.spin_acquire(slot, tag);
        }
        Some(LocalGuard::new(
            self,
            pin,
            slot,
            IrqState::Saved(flags),
            true,
        ))
    }

    /// The word slot `cpu % N`'s holders last published
    /// ([`LocalGuard::publish`]; 0 at first): a racy read without the
    /// slot, as the kernel reads another CPU's `pcp->count` (drain_all's
    /// `has_pcps`).
    ///
    /// ```
    /// use local_lock::std_platform::PerThread;
    /// use local_lock::LocalLock;
    ///
    /// let l: LocalLock<Vec<u32>, PerThread> = LocalLock::new_with(PerThread, |_| Vec::new());
    /// let mut g = l.lock();
    /// let cpu = g.cpu();
    /// g.push(7);
    /// g.publish(g.len());
    /// g.unlock();
    /// assert_eq!(l.published(cpu), 1, "readable without the slot");
    /// assert_eq!(l.published(cpu + 1), 0);
    /// ```
    #[inline]
    pub fn published(&self, cpu: usize) -> usize {
        self.at(cpu % N).published.load(Ordering::Relaxed)
    }

    /// Mutable access to every slot through `&mut self` (set-up, tear-down).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().rev().map(|s| {
            // SAFETY: `&mut self` excludes every guard.
            s.data.get_mut().with(|p| unsafe { &mut *p })
        })
    }

    /// Mutable access to one slot through `&mut self`.
    pub fn get_mut(&mut self, cpu: usize) -> &mut T {
        // SAFETY: `&mut self` excludes every guard.
        self.slots[N - 1 - cpu % N]
            .data
            .get_mut()
            .with(|p| unsafe { &mut *p })
    }
}

#[derive(Clone, Copy)]
enum IrqState {
    None,
    Disabled,
    Saved(IrqFlags),
}

/// Exclusive access to one CPU's `T`. `!Send`: it must be dropped by the
/// context (and on the CPU) that took it. Dropping releases the slot, then
/// unpins, then restores interrupts, the reverse of taking.
///
/// ```
/// use local_lock::test_platform::TestPlatform;
/// use local_lock::{LocalGuard, LocalLock, Strategy};
///
/// let p = TestPlatform::pinned(2);
/// let l: LocalLock<Vec<u32>, TestPlatform> = LocalLock::new_with(p, |_| Vec::new());
/// p.set_cpu(1);
/// let mut g: LocalGuard<'_, Vec<u32>, TestPlatform, 64> = l.lock();
/// g.push(7); // `DerefMut` to CPU 1's vector
/// assert_eq!((g.cpu(), g.strategy()), (1, Strategy::Pinned));
/// assert_eq!(p.preempt_count(), 1, "pinned while held");
/// g.unlock();
/// assert_eq!(p.preempt_count(), 0);
/// p.set_cpu(0);
/// assert!(l.lock().is_empty(), "CPU 0 has its own vector");
/// ```
///
/// A guard cannot leave its thread:
///
/// ```compile_fail
/// use local_lock::{LocalLock, std_platform::StdCpu};
/// static L: LocalLock<u32, StdCpu> = LocalLock::new(StdCpu);
/// let g = L.lock();
/// std::thread::spawn(move || drop(g)); // error: LocalGuard is not Send
/// ```
#[must_use = "the slot is released when the guard drops"]
pub struct LocalGuard<'a, T, P: Platform, const N: usize> {
    lock: &'a LocalLock<T, P, N>,
    slot: &'a Slot<T>,
    /// The tracked access to the slot's data; ended in `drop` *before* the
    /// slot is released (under loom the access must close first).
    ptr: ManuallyDrop<MutPtr<T>>,
    pin: Pin,
    irq: IrqState,
    remote: bool,
    _not_send: PhantomData<*mut ()>,
}

impl<'a, T, P: Platform, const N: usize> LocalGuard<'a, T, P, N> {
    #[inline(always)]
    fn new(
        lock: &'a LocalLock<T, P, N>,
        pin: Pin,
        slot: &'a Slot<T>,
        irq: IrqState,
        remote: bool,
    ) -> Self {
        LocalGuard {
            lock,
            slot,
            ptr: ManuallyDrop::new(slot.data.get_mut()),
            pin,
            irq,
            remote,
            _not_send: PhantomData,
        }
    }

    /// The CPU whose slot this is.
    #[inline(always)]
    pub fn cpu(&self) -> usize {
        self.pin.cpu
    }

    /// How the slot is protected for this guard.
    #[inline(always)]
    pub fn strategy(&self) -> Strategy {
        self.pin.strategy
    }

    /// The platform of the lock.
    #[inline(always)]
    pub fn platform(&self) -> &'a P {
        &self.lock.platform
    }

    /// Publishes `v` for lockless readers ([`LocalLock::published`]): a
    /// relaxed store to a word beside the slot's data, in its cache line
    /// (a per-CPU count other CPUs poll, as the kernel's `pcp->count`).
    #[inline(always)]
    pub fn publish(&self, v: usize) {
        self.slot.published.store(v, Ordering::Relaxed);
    }

    /// The word last published on this slot ([`publish`](Self::publish);
    /// 0 at first): the holder's own reading of it (a plain load: only
    /// holders write it), so a per-CPU count that must be published can
    /// live there alone instead of in `T` and the word.
    ///
    /// ```
    /// use local_lock::std_platform::PerThread;
    /// use local_lock::LocalLock;
    ///
    /// let l: LocalLock<(), PerThread> = LocalLock::new_with(PerThread, |_| ());
    /// let g = l.lock();
    /// g.publish(g.published() + 3);
    /// assert_eq!(g.published(), 3);
    /// ```
    #[inline(always)]
    pub fn published(&self) -> usize {
        self.slot.published.load(Ordering::Relaxed)
    }
}

impl<T, P: Platform, const N: usize> Deref for LocalGuard<'_, T, P, N> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the slot exclusively (pinned or locked).
        self.ptr.with(|p| unsafe { &*p })
    }
}

impl<T, P: Platform, const N: usize> DerefMut for LocalGuard<'_, T, P, N> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only borrow.
        self.ptr.with(|p| unsafe { &mut *p })
    }
}

impl<T, P: Platform, const N: usize> LocalGuard<'_, T, P, N> {
    /// Releases the slot now (what dropping the guard does), inlined into
    /// the caller: a fast path that ends with `g.unlock()` keeps the guard
    /// in registers, where the compiler may otherwise call an outlined drop
    /// glue with the guard spilled to the stack.
    #[inline(always)]
    pub fn unlock(self) {
        let mut g = ManuallyDrop::new(self);
        g.release();
    }
}

impl<T, P: Platform, const N: usize> Drop for LocalGuard<'_, T, P, N> {
    #[inline(always)]
    fn drop(&mut self) {
        self.release();
    }
}

impl<T, P: Platform, const N: usize> LocalGuard<'_, T, P, N> {
    /// The release (see `Drop`); called exactly once per guard.
    #[inline(always)]
    fn release(&mut self) {
        // SAFETY: `ptr` is not used after this point.
        unsafe { ManuallyDrop::drop(&mut self.ptr) };
        let platform = &self.lock.platform;
        // A releasing store on both strategies: a pinned slot may be a spin
        // slot that another CPU takes (`lock_remote_spin`), and one code
        // path for both keeps a guard whose acquisition flavour is chosen
        // at run time (pcp's policies) free of a branch here. On x86 it is
        // the plain store the pinned strategy needs anyway; the compiler
        // fence orders it against this CPU's interrupt handlers.
        compiler_fence(Ordering::SeqCst);
        self.slot.state.store(FREE, Ordering::Release);
        // SAFETY: the pin was taken by this guard's constructor, in this
        // context; guards are !Send so we are still on that CPU.
        unsafe {
            if self.remote {
                platform.unpin_remote(self.pin)
            } else {
                platform.unpin(self.pin)
            }
        }
        match self.irq {
            IrqState::None => {}
            // SAFETY: matches the irq_disable/irq_save taken before pinning.
            IrqState::Disabled => unsafe { platform.irq_enable() },
            // SAFETY: as above.
            IrqState::Saved(flags) => unsafe { platform.irq_restore(flags) },
        }
    }
}

// ---------------------------------------------------------------------------
// fork support (issue #14 item 13)
// ---------------------------------------------------------------------------

#[cfg(not(loom))]
impl<T, P: Platform, const N: usize> LocalLock<T, P, N> {
    /// Takes slot `cpu`'s lock word as the locked strategy does, with no
    /// guard (spinning until it is free): the `prepare` half of a `fork`
    /// handler (see [`fork`](crate::fork)), for the slots a platform always
    /// locks (every slot of a locked platform, the per-thread platform's
    /// overflow slot). Released by [`fork_unlock_slot`](Self::fork_unlock_slot).
    ///
    /// # Safety
    ///
    /// Slot `cpu` (`< N`) is protected by the locked strategy for every
    /// context that uses it, and the caller does not hold it.
    pub unsafe fn fork_lock_slot(&self, cpu: usize) {
        let slot = self.at(cpu);
        let tag = locked_tag(cpu, false);
        let backoff = Backoff::new();
        while slot
            .state
            .compare_exchange_weak(FREE, tag, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.platform.spin_wait(&backoff);
        }
    }

    /// Releases a slot taken by [`fork_lock_slot`](Self::fork_lock_slot)
    /// (in the parent, or in the forked child).
    ///
    /// # Safety
    ///
    /// The slot was taken by `fork_lock_slot` on this thread (in the child:
    /// on the thread that forked).
    pub unsafe fn fork_unlock_slot(&self, cpu: usize) {
        self.at(cpu).state.store(FREE, Ordering::Release);
    }
}
