//! The sync shim: every atomic, spin lock, back-off loop, interior-mutable
//! cell and double-word compare-exchange of the crate family goes through
//! this module, so that `--cfg loom` swaps all of them for loom-visible
//! equivalents at once (as crossbeam's `primitive` module does).
//!
//! | item | normal build | `cfg(loom)` |
//! |---|---|---|
//! | [`atomic`] | `core::sync::atomic` | `loom::sync::atomic` |
//! | [`SpinLock`] | adaptive (spin, then futex) with `std` on Linux; a spin lock without `std` | `loom::sync::Mutex` |
//! | [`Backoff`], [`spin_loop`] | `crossbeam_utils::Backoff`, `core::hint::spin_loop` | `loom::thread::yield_now` |
//! | [`UnsafeCell`] | `core::cell::UnsafeCell` behind loom's `with`/`with_mut` API | `loom::cell::UnsafeCell` |
//! | [`AtomicDWord`] | `portable_atomic::AtomicU128` (`AtomicU64` on 32-bit) | a loom mutex around two words |
//!
//! Under loom nothing can be built in a `const` context, so constructors that
//! are `const fn` in normal builds are plain `fn` there; the [`const_fn!`](crate::const_fn)
//! macro writes such a constructor once for both builds.
//!
//! # Double-word compare-exchange
//!
//! SLUB's lockless fast path and per-slab `freelist`/`counters` update need a
//! compare-exchange of two adjacent words. [`AtomicDWord`] provides it and
//! [`dwcas_is_lock_free`] says whether the CPU really has it (x86-64
//! `cmpxchg16b`, detected at run time unless the target feature is enabled,
//! aarch64 `casp`/`ldxp`; **not** riscv64 without Zacas). Where it is not lock
//! free, portable-atomic would fall back to a global lock table: callers on an
//! allocation fast path must check [`dwcas_is_lock_free`] and take their own
//! locked path instead, as the kernel does when `system_has_cmpxchg128()` is
//! false.

/// Makes a constructor `const fn` in normal builds and a plain `fn` under
/// loom (whose types cannot be built in a const context).
///
/// ```
/// struct Counter(local_lock::sync::atomic::AtomicUsize);
/// impl Counter {
///     local_lock::const_fn! {
///         /// A zeroed counter.
///         pub fn new() -> Self { Counter(local_lock::sync::atomic::AtomicUsize::new(0)) }
///     }
/// }
/// ```
#[macro_export]
macro_rules! const_fn {
    ($(#[$m:meta])* $vis:vis fn $name:ident $(<$($g:tt),*>)? ($($args:tt)*) -> $ret:ty $body:block) => {
        #[cfg(not(loom))]
        $(#[$m])* $vis const fn $name $(<$($g),*>)? ($($args)*) -> $ret $body
        #[cfg(loom)]
        $(#[$m])* $vis fn $name $(<$($g),*>)? ($($args)*) -> $ret $body
    };
}

/// Atomics: `core::sync::atomic`, or loom's under `cfg(loom)`.
pub mod atomic {
    #[cfg(not(loom))]
    pub use core::sync::atomic::{
        compiler_fence, fence, AtomicBool, AtomicI32, AtomicI64, AtomicIsize, AtomicPtr, AtomicU16,
        AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
    };
    #[cfg(loom)]
    pub use loom::sync::atomic::{
        fence, AtomicBool, AtomicI32, AtomicI64, AtomicIsize, AtomicPtr, AtomicU16, AtomicU32,
        AtomicU64, AtomicU8, AtomicUsize, Ordering,
    };

    /// Under loom a compiler fence orders nothing loom can observe (a
    /// simulated interrupt is another loom thread), so it is a full fence.
    #[cfg(loom)]
    pub fn compiler_fence(order: Ordering) {
        loom::sync::atomic::fence(order)
    }
}

/// Hint inside a spin loop. Under loom it yields, which loom requires of
/// every loop that waits for another thread.
#[inline(always)]
pub fn spin_loop() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Exponential back-off for CAS retry loops and spin waits
/// (`crossbeam_utils::Backoff`; under loom every step yields).
///
/// ```
/// use local_lock::sync::atomic::{AtomicUsize, Ordering};
/// use local_lock::sync::Backoff;
///
/// // A CAS retry loop: double a shared value another thread may change.
/// let v = AtomicUsize::new(21);
/// let backoff = Backoff::new();
/// let mut cur = v.load(Ordering::Relaxed);
/// loop {
///     match v.compare_exchange_weak(cur, cur * 2, Ordering::AcqRel, Ordering::Relaxed) {
///         Ok(_) => break,
///         Err(seen) => {
///             cur = seen;
///             backoff.spin();
///         }
///     }
/// }
/// assert_eq!(v.load(Ordering::Relaxed), 42);
/// // Waiting for another thread: snooze until it is time to block.
/// let ready = std::sync::atomic::AtomicBool::new(false);
/// std::thread::scope(|s| {
///     s.spawn(|| ready.store(true, Ordering::Release));
///     let b = Backoff::new();
///     while !ready.load(Ordering::Acquire) {
///         if b.is_completed() {
///             std::thread::yield_now();
///         } else {
///             b.snooze();
///         }
///     }
/// });
/// ```
#[cfg(not(loom))]
pub use crossbeam_utils::Backoff;

/// Exponential back-off (loom build: every step yields to loom's scheduler).
#[cfg(loom)]
#[derive(Debug, Default)]
pub struct Backoff(());

#[cfg(loom)]
impl Backoff {
    /// A new back-off.
    pub fn new() -> Self {
        Backoff(())
    }
    /// Back off in a CAS loop.
    pub fn spin(&self) {
        loom::thread::yield_now()
    }
    /// Back off while waiting for another thread.
    pub fn snooze(&self) {
        loom::thread::yield_now()
    }
    /// Whether it is time to block instead (never under loom).
    pub fn is_completed(&self) -> bool {
        false
    }
    /// Start again.
    pub fn reset(&self) {}
}

/// Cache-line padding (128 bytes on x86-64: adjacent-line prefetch).
pub use crossbeam_utils::CachePadded;

// ---------------------------------------------------------------------------
// UnsafeCell with loom's API
// ---------------------------------------------------------------------------

/// `UnsafeCell` with loom's closure API, so that under loom every access is
/// checked for data races, and in normal builds it compiles to a raw pointer.
///
/// ```
/// use local_lock::sync::UnsafeCell;
///
/// let c = UnsafeCell::new(5u32);
/// // SAFETY: nothing else accesses `c` while the closures run.
/// c.with_mut(|p| unsafe { *p += 1 });
/// // SAFETY: as above.
/// assert_eq!(c.with(|p| unsafe { *p }), 6);
/// assert_eq!(c.into_inner(), 6);
/// ```
#[cfg(not(loom))]
#[derive(Debug, Default)]
#[repr(transparent)]
pub struct UnsafeCell<T: ?Sized>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// Wraps a value.
    pub const fn new(value: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(value))
    }
    /// Unwraps the value.
    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

#[cfg(not(loom))]
impl<T: ?Sized> UnsafeCell<T> {
    /// Shared access through a raw pointer. The caller's protocol must make
    /// the access race free (loom checks that).
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    /// Exclusive access through a raw pointer. The caller's protocol must
    /// make the access race free (loom checks that).
    #[inline(always)]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
    /// A tracked mutable pointer (loom's `MutPtr` API): the access stays
    /// "open" while it lives, so a guard can hold it.
    #[inline(always)]
    pub fn get_mut(&self) -> MutPtr<T> {
        MutPtr(self.0.get())
    }
}

/// Mutable pointer into an [`UnsafeCell`] (loom's `MutPtr` API).
///
/// ```
/// use local_lock::sync::{MutPtr, UnsafeCell};
///
/// let c = UnsafeCell::new(vec![1]);
/// let m: MutPtr<Vec<i32>> = c.get_mut(); // the access stays open while `m` lives
/// // SAFETY: `m` is the only access to the cell while it lives.
/// unsafe { m.deref().push(2) };
/// drop(m);
/// assert_eq!(c.into_inner(), [1, 2]);
/// ```
#[cfg(not(loom))]
#[derive(Debug)]
pub struct MutPtr<T: ?Sized>(*mut T);

#[cfg(not(loom))]
impl<T: ?Sized> MutPtr<T> {
    /// Dereferences the pointer.
    ///
    /// # Safety
    ///
    /// The caller's protocol gives it exclusive access for the returned
    /// lifetime.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn deref(&self) -> &mut T {
        // SAFETY: the caller guarantees exclusive access.
        unsafe { &mut *self.0 }
    }
    /// Calls `f` with the raw pointer.
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0)
    }
}

#[cfg(loom)]
pub use loom::cell::{MutPtr, UnsafeCell};

// ---------------------------------------------------------------------------
// SpinLock
// ---------------------------------------------------------------------------

/// A lock protecting a `T`, the crate family's `spinlock_t`. It does not
/// touch IRQs or preemption: callers that may race with an interrupt handler
/// on the same CPU take it inside
/// [`Platform::irq_save`](crate::Platform::irq_save), as `spin_lock_irqsave`
/// does (see the `buddy` crate's zone lock).
///
/// How a contended `lock` waits depends on the build, as `spinlock_t` does
/// on `PREEMPT_RT` (where it becomes a sleeping `rtmutex` because a
/// preempted holder would make every waiter spin away its time slice):
///
/// | build | waiting |
/// |---|---|
/// | `std` on Linux | adaptive: a short exponential spin, then sleep in the kernel (`FUTEX_WAIT_PRIVATE`), woken by the unlock (`FUTEX_WAKE_PRIVATE`) |
/// | `std` elsewhere | a short spin, then `yield_now` |
/// | no `std` (kernels) | a pure spin lock (`pause` loop) |
/// | `cfg(loom)` | `loom::sync::Mutex` |
///
/// The lock word is the classic three-state futex word of Drepper's
/// "Futexes Are Tricky" (mutex3, as in Rust's std and glibc): 0 unlocked,
/// 1 locked, 2 locked and maybe waiters; the uncontended lock is one
/// compare-exchange, the unlock one swap (a store without `std`), and only
/// an unlock that finds 2 makes a system call. Nothing allocates: the
/// lock runs inside global allocators.
///
/// ```
/// use local_lock::sync::SpinLock;
///
/// static TOTAL: SpinLock<u64> = SpinLock::new(0);
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| {
///             for _ in 0..1000 {
///                 *TOTAL.lock() += 1;
///             }
///         });
///     }
/// });
/// assert_eq!(*TOTAL.lock(), 4000);
/// let held = TOTAL.lock();
/// assert!(TOTAL.is_locked() && TOTAL.try_lock().is_none());
/// drop(held);
/// // `&mut` needs no locking.
/// let mut l = SpinLock::new(vec![1]);
/// l.get_mut().push(2);
/// assert_eq!(*l.lock(), [1, 2]);
/// ```
pub struct SpinLock<T: ?Sized> {
    /// `UNLOCKED`, `LOCKED` or `CONTENDED` (a futex word on Linux).
    #[cfg(not(loom))]
    state: core::sync::atomic::AtomicU32,
    /// A raw spin lock ([`new_raw`](SpinLock::new_raw)): never sleeps, so
    /// the unlock is a plain store.
    #[cfg(not(loom))]
    raw: bool,
    #[cfg(not(loom))]
    data: core::cell::UnsafeCell<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

// SAFETY: the lock hands out the `T` to one thread at a time (as
// `std::sync::Mutex`): sharing the lock moves the `T` between threads, hence
// `T: Send`.
#[cfg(not(loom))]
unsafe impl<T: ?Sized + Send> Sync for SpinLock<T> {}
// SAFETY: owning the lock owns the `T`.
#[cfg(not(loom))]
unsafe impl<T: ?Sized + Send> Send for SpinLock<T> {}

/// Guard of a [`SpinLock`]; unlocks on drop.
///
/// ```
/// use local_lock::sync::{SpinLock, SpinLockGuard};
///
/// let l = SpinLock::new(String::from("a"));
/// {
///     let mut g: SpinLockGuard<'_, String> = l.lock();
///     g.push('b'); // `DerefMut` to the data
///     assert!(l.try_lock().is_none(), "held while the guard lives");
/// }
/// assert_eq!(l.try_lock().as_deref().map(String::as_str), Some("ab"));
/// ```
pub struct SpinLockGuard<'a, T: ?Sized> {
    #[cfg(not(loom))]
    lock: &'a SpinLock<T>,
    /// `Send` iff `T: Send`, `Sync` iff `T: Sync` (with the lock's `T: Send`).
    #[cfg(not(loom))]
    _data: core::marker::PhantomData<&'a mut T>,
    #[cfg(loom)]
    inner: loom::sync::MutexGuard<'a, T>,
}

/// Lock word: free.
#[cfg(not(loom))]
const UNLOCKED: u32 = 0;
/// Lock word: held, nobody sleeps on it.
#[cfg(not(loom))]
const LOCKED: u32 = 1;
/// Lock word: held, and a waiter may sleep on it (the unlock wakes one).
#[cfg(not(loom))]
const CONTENDED: u32 = 2;

/// Exponential spin steps before a contended lock sleeps (or yields):
/// `crossbeam_utils::Backoff`'s `SPIN_LIMIT`, 1 + 2 + ... + 64 = 127
/// `pause`s in all.
#[cfg(all(not(loom), feature = "std"))]
const SPIN_STEPS: u32 = 6;

/// Whether a contended lock sleeps in the kernel (a futex) rather than
/// spinning (see [`SpinLock`]).
#[cfg(not(loom))]
const SLEEPS: bool = cfg!(all(
    feature = "std",
    any(target_os = "linux", target_os = "android")
));

/// The futex calls of the adaptive [`SpinLock`] (Linux, `std`); also for
/// other lock words of the crate that should sleep instead of spinning (a
/// `usize` word's low half is `word.as_ptr().cast::<AtomicU32>()` on
/// little-endian targets).
#[cfg(all(
    not(loom),
    feature = "std",
    any(target_os = "linux", target_os = "android")
))]
pub(crate) mod futex {
    use core::sync::atomic::AtomicU32;

    /// `FUTEX_WAIT_PRIVATE`: sleeps while `*word == expected` (returns at
    /// once if it differs; may also return spuriously or on a signal: the
    /// caller re-checks).
    #[inline]
    pub(crate) fn wait(word: &AtomicU32, expected: u32) {
        // SAFETY: `word` is a live, aligned 32-bit atomic for the whole call;
        // a null timeout waits without limit. No memory is written.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                expected,
                core::ptr::null::<libc::timespec>(),
            );
        }
    }

    /// `FUTEX_WAKE_PRIVATE`: wakes one thread sleeping on `word`.
    #[inline]
    pub(crate) fn wake_one(word: &AtomicU32) {
        // SAFETY: as in `wait`; waking touches no memory of ours.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            );
        }
    }
}

impl<T> SpinLock<T> {
    const_fn! {
        /// A new, unlocked lock.
        pub fn new(value: T) -> Self {
            SpinLock {
                #[cfg(not(loom))]
                state: core::sync::atomic::AtomicU32::new(UNLOCKED),
                #[cfg(not(loom))]
                raw: false,
                #[cfg(not(loom))]
                data: core::cell::UnsafeCell::new(value),
                #[cfg(loom)]
                inner: loom::sync::Mutex::new(value),
            }
        }
    }

    const_fn! {
        /// A new, unlocked *raw* spin lock (the kernel's `raw_spinlock_t`):
        /// contended waiters only spin (with `std`, yielding the CPU after a
        /// while), never sleep, so the unlock is a plain store instead of
        /// the swap a sleeping lock needs to see its waiters (one atomic
        /// read-modify-write less per lock hold). For locks whose holders
        /// cannot be preempted ([`Platform::RAW_SPINLOCKS`](crate::Platform::RAW_SPINLOCKS)).
        ///
        /// ```
        /// use local_lock::sync::SpinLock;
        ///
        /// let l = SpinLock::new_raw(1u32);
        /// *l.lock() += 1;
        /// assert_eq!(*l.lock(), 2);
        /// ```
        pub fn new_raw(value: T) -> Self {
            SpinLock {
                #[cfg(not(loom))]
                state: core::sync::atomic::AtomicU32::new(UNLOCKED),
                #[cfg(not(loom))]
                raw: true,
                #[cfg(not(loom))]
                data: core::cell::UnsafeCell::new(value),
                #[cfg(loom)]
                inner: loom::sync::Mutex::new(value),
            }
        }
    }
}

impl<T: ?Sized> SpinLock<T> {
    /// Takes the lock, waiting as long as it takes (see [`SpinLock`] for
    /// how: spin, then sleep on Linux `std`).
    #[inline]
    pub fn lock(&self) -> SpinLockGuard<'_, T> {
        #[cfg(not(loom))]
        {
            use core::sync::atomic::Ordering::{Acquire, Relaxed};
            if self
                .state
                .compare_exchange_weak(UNLOCKED, LOCKED, Acquire, Relaxed)
                .is_err()
            {
                self.lock_contended();
            }
            SpinLockGuard {
                lock: self,
                _data: core::marker::PhantomData,
            }
        }
        #[cfg(loom)]
        SpinLockGuard {
            inner: self.inner.lock().unwrap(),
        }
    }

    /// Takes the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> Option<SpinLockGuard<'_, T>> {
        #[cfg(not(loom))]
        {
            use core::sync::atomic::Ordering::{Acquire, Relaxed};
            self.state
                .compare_exchange(UNLOCKED, LOCKED, Acquire, Relaxed)
                .ok()?;
            Some(SpinLockGuard {
                lock: self,
                _data: core::marker::PhantomData,
            })
        }
        #[cfg(loom)]
        Some(SpinLockGuard {
            inner: self.inner.try_lock().ok()?,
        })
    }

    /// Whether the lock is held (a racy hint, for assertions).
    #[cfg(not(loom))]
    pub fn is_locked(&self) -> bool {
        self.state.load(core::sync::atomic::Ordering::Relaxed) != UNLOCKED
    }

    /// Access without locking through `&mut self`.
    pub fn get_mut(&mut self) -> &mut T {
        #[cfg(not(loom))]
        return self.data.get_mut();
        #[cfg(loom)]
        return self.inner.get_mut().unwrap();
    }
}

#[cfg(not(loom))]
impl<T: ?Sized> SpinLock<T> {
    /// The contended half of [`lock`](Self::lock): Rust std's futex mutex
    /// (`lock_contended`), i.e. Drepper's mutex3 with a bounded spin first.
    /// Without `SLEEPS` the word never becomes `CONTENDED` and this is the
    /// test-and-test-and-set loop of `spin::mutex::SpinMutex` (after the
    /// bounded spin, with `std`, each retry yields the CPU).
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        use core::sync::atomic::Ordering::{Acquire, Relaxed};
        if SLEEPS && !self.raw {
            let mut state = self.spin();
            // Free now: try to take it without marking waiters.
            if state == UNLOCKED {
                match self
                    .state
                    .compare_exchange(UNLOCKED, LOCKED, Acquire, Relaxed)
                {
                    Ok(_) => return,
                    Err(s) => state = s,
                }
            }
            loop {
                // Take it as CONTENDED (we cannot know whether others sleep:
                // the unlock then makes one spare wake-up at worst).
                if state != CONTENDED && self.state.swap(CONTENDED, Acquire) == UNLOCKED {
                    return;
                }
                self.wait();
                state = self.spin();
            }
        } else {
            loop {
                if self
                    .state
                    .compare_exchange_weak(UNLOCKED, LOCKED, Acquire, Relaxed)
                    .is_ok()
                {
                    return;
                }
                #[cfg(feature = "std")]
                if self.spin() != UNLOCKED {
                    // The holder may have been preempted: give it the CPU.
                    std::thread::yield_now();
                }
                #[cfg(not(feature = "std"))]
                while self.state.load(Relaxed) != UNLOCKED {
                    spin_loop();
                }
            }
        }
    }

    /// Spins with exponential back-off while the lock is held without
    /// waiters, at most `SPIN_STEPS` steps; returns the last state seen.
    #[cfg(feature = "std")]
    #[inline]
    fn spin(&self) -> u32 {
        use core::sync::atomic::Ordering::Relaxed;
        let mut step = 0;
        loop {
            let state = self.state.load(Relaxed);
            if state != LOCKED || step > SPIN_STEPS {
                return state;
            }
            for _ in 0..1u32 << step {
                spin_loop();
            }
            step += 1;
        }
    }

    #[cfg(not(feature = "std"))]
    #[inline]
    fn spin(&self) -> u32 {
        self.state.load(core::sync::atomic::Ordering::Relaxed)
    }

    /// Sleeps while the word is `CONTENDED` (Linux `std`; never called
    /// elsewhere, where `SLEEPS` is false).
    #[inline]
    fn wait(&self) {
        #[cfg(all(feature = "std", any(target_os = "linux", target_os = "android")))]
        futex::wait(&self.state, CONTENDED);
    }

    /// Releases the lock, waking one sleeper if the word says there may be
    /// one.
    ///
    /// # Safety
    ///
    /// The lock is held by the caller (through a guard that is not used
    /// again, or one that was forgotten).
    #[inline]
    unsafe fn unlock(&self) {
        use core::sync::atomic::Ordering::Release;
        if SLEEPS && !self.raw {
            if self.state.swap(UNLOCKED, Release) == CONTENDED {
                self.wake();
            }
        } else {
            self.state.store(UNLOCKED, Release);
        }
    }

    #[cold]
    #[inline(never)]
    fn wake(&self) {
        #[cfg(all(feature = "std", any(target_os = "linux", target_os = "android")))]
        futex::wake_one(&self.state);
    }
}

impl<T: ?Sized> SpinLockGuard<'_, T> {
    /// Releases the lock of a guard whose lock the caller knows to be raw
    /// ([`SpinLock::new_raw`]), e.g. from a constant such as
    /// [`Platform::RAW_SPINLOCKS`](crate::Platform::RAW_SPINLOCKS): the
    /// plain release store of a raw lock's drop, without reading which
    /// kind the lock is (one load and a branch of every hold).
    ///
    /// # Safety
    ///
    /// The lock was made by [`SpinLock::new_raw`] (a lock that may have
    /// sleepers needs the unlock that wakes them).
    #[inline(always)]
    pub unsafe fn unlock_raw(this: Self) {
        #[cfg(not(loom))]
        {
            debug_assert!(this.lock.raw || !SLEEPS);
            let this = core::mem::ManuallyDrop::new(this);
            this.lock
                .state
                .store(UNLOCKED, core::sync::atomic::Ordering::Release);
        }
        #[cfg(loom)]
        drop(this);
    }
}

#[cfg(not(loom))]
impl<T: ?Sized> Drop for SpinLockGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard holds the lock and is not used again.
        unsafe { self.lock.unlock() }
    }
}

impl<T: ?Sized + core::fmt::Debug> core::fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.try_lock() {
            Some(g) => f.debug_struct("SpinLock").field("data", &&*g).finish(),
            None => f.write_str("SpinLock { <locked> }"),
        }
    }
}

impl<T: ?Sized> core::ops::Deref for SpinLockGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        #[cfg(not(loom))]
        // SAFETY: the guard holds the lock: no `&mut` to the data exists
        // elsewhere.
        return unsafe { &*self.lock.data.get() };
        #[cfg(loom)]
        return &self.inner;
    }
}

impl<T: ?Sized> core::ops::DerefMut for SpinLockGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        #[cfg(not(loom))]
        // SAFETY: the guard holds the lock, and `&mut self` makes this the
        // only borrow through it.
        return unsafe { &mut *self.lock.data.get() };
        #[cfg(loom)]
        return &mut self.inner;
    }
}

// ---------------------------------------------------------------------------
// Double-word compare-exchange
// ---------------------------------------------------------------------------

/// A pair of machine words that is loaded, stored and compare-exchanged as
/// one unit: `(lo, hi)`, e.g. SLUB's `(freelist, tid)` or
/// `(freelist, counters)`. Aligned to twice the word size.
///
/// ```
/// use local_lock::sync::DWord;
///
/// // SLUB's per-CPU (freelist, tid).
/// let d = DWord::new(0x1000, 7);
/// assert_eq!((d.lo, d.hi), (0x1000, 7));
/// assert_eq!(d, DWord { lo: 0x1000, hi: 7 });
/// assert_eq!(DWord::default(), DWord::new(0, 0));
/// assert_ne!(d, DWord::new(0x1000, 8), "equal only if both words are");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct DWord {
    /// The first word (at the lower address).
    pub lo: usize,
    /// The second word.
    pub hi: usize,
}

impl DWord {
    /// A pair.
    #[inline(always)]
    pub const fn new(lo: usize, hi: usize) -> Self {
        DWord { lo, hi }
    }
}

#[cfg(all(not(loom), target_pointer_width = "64"))]
type Wide = portable_atomic::AtomicU128;
#[cfg(all(not(loom), target_pointer_width = "64"))]
type WideInt = u128;
#[cfg(all(not(loom), target_pointer_width = "32"))]
type Wide = portable_atomic::AtomicU64;
#[cfg(all(not(loom), target_pointer_width = "32"))]
type WideInt = u64;

/// An atomic [`DWord`]. See the module docs for when it is lock free.
///
/// Where it is not (riscv64gc without Zacas, 32-bit targets without a
/// 64-bit CAS), portable-atomic falls back to a global table of spin locks.
/// That fallback is **not interrupt-safe** unless the `assume-privileged`
/// feature is on (it then masks interrupts around the critical section): a
/// kernel whose interrupt handlers allocate (the buddy's owner words and
/// SLUB's slab compare-exchange use this type) must enable it, or a handler
/// can spin forever on the lock its interrupted task holds.
///
/// ```
/// use local_lock::sync::atomic::Ordering::{AcqRel, Acquire};
/// use local_lock::sync::{dwcas_is_lock_free, AtomicDWord, DWord};
///
/// # // miri: the doctest is built without `+cmpxchg16b`.
/// # #[cfg(not(miri))] {
/// // (freelist, tid): a pop succeeds only if neither word changed.
/// let cpu = AtomicDWord::new(DWord::new(0x1000, 0));
/// let old = DWord::new(0x1000, 0);
/// assert_eq!(cpu.compare_exchange(old, DWord::new(0x2000, 1), AcqRel, Acquire), Ok(old));
/// // A stale snapshot fails and returns the current pair.
/// let r = cpu.compare_exchange(old, DWord::new(0x3000, 2), AcqRel, Acquire);
/// assert_eq!(r, Err(DWord::new(0x2000, 1)));
/// assert_eq!(cpu.load(Acquire), DWord::new(0x2000, 1));
/// // Fast paths check this first and take a locked path when it is false.
/// let _lockless: bool = dwcas_is_lock_free();
/// # }
/// ```
#[repr(C, align(16))]
pub struct AtomicDWord {
    #[cfg(not(loom))]
    v: Wide,
    #[cfg(loom)]
    v: loom::sync::Mutex<DWord>,
}

#[cfg(not(loom))]
#[inline(always)]
const fn pack(d: DWord) -> WideInt {
    (d.lo as WideInt) | ((d.hi as WideInt) << usize::BITS)
}

#[cfg(not(loom))]
#[inline(always)]
const fn unpack(v: WideInt) -> DWord {
    DWord {
        lo: v as usize,
        hi: (v >> usize::BITS) as usize,
    }
}

impl AtomicDWord {
    const_fn! {
        /// A new atomic pair.
        pub fn new(d: DWord) -> Self {
            AtomicDWord {
                #[cfg(not(loom))]
                v: Wide::new(pack(d)),
                #[cfg(loom)]
                v: loom::sync::Mutex::new(d),
            }
        }
    }

    /// Loads both words as one unit.
    #[inline(always)]
    pub fn load(&self, order: atomic::Ordering) -> DWord {
        #[cfg(not(loom))]
        return unpack(self.v.load(order));
        #[cfg(loom)]
        {
            let _ = order;
            *self.v.lock().unwrap()
        }
    }

    /// Stores both words as one unit.
    #[inline(always)]
    pub fn store(&self, d: DWord, order: atomic::Ordering) {
        #[cfg(not(loom))]
        self.v.store(pack(d), order);
        #[cfg(loom)]
        {
            let _ = order;
            *self.v.lock().unwrap() = d;
        }
    }

    /// Compare-exchange of both words: if the pair equals `current`, replace
    /// it with `new`. Returns the previous pair (`Ok` on success).
    #[inline(always)]
    pub fn compare_exchange(
        &self,
        current: DWord,
        new: DWord,
        success: atomic::Ordering,
        failure: atomic::Ordering,
    ) -> Result<DWord, DWord> {
        #[cfg(not(loom))]
        return self
            .v
            .compare_exchange(pack(current), pack(new), success, failure)
            .map(unpack)
            .map_err(unpack);
        #[cfg(loom)]
        {
            let _ = (success, failure);
            let mut g = self.v.lock().unwrap();
            if *g == current {
                *g = new;
                Ok(current)
            } else {
                Err(*g)
            }
        }
    }

    /// Access through `&mut self`.
    pub fn get_mut(&mut self) -> DWord {
        #[cfg(not(loom))]
        return unpack(*self.v.get_mut());
        #[cfg(loom)]
        return *self.v.get_mut().unwrap();
    }
}

impl core::fmt::Debug for AtomicDWord {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.load(atomic::Ordering::Relaxed).fmt(f)
    }
}

/// Whether [`AtomicDWord`] is lock free on this CPU (checked at run time: on
/// x86-64 without `-C target-feature=+cmpxchg16b` portable-atomic detects
/// `cmpxchg16b` with `cpuid`). When false, allocation fast paths must not use
/// it (they would hit a hidden global lock table): take the locked path.
/// Under loom it reports `true`, so the lockless protocols are the ones
/// model-checked.
#[inline]
pub fn dwcas_is_lock_free() -> bool {
    #[cfg(loom)]
    return true;
    #[cfg(not(loom))]
    return Wide::is_lock_free();
}

/// Whether [`AtomicDWord`] is lock free on every CPU of this target, known at
/// compile time (x86-64 with `+cmpxchg16b`, aarch64, ...).
pub const DWCAS_ALWAYS_LOCK_FREE: bool = {
    #[cfg(loom)]
    {
        true
    }
    #[cfg(not(loom))]
    {
        Wide::is_always_lock_free()
    }
};

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use atomic::Ordering::*;
    use std::format;

    #[test]
    fn dword_cas_roundtrip() {
        let a = AtomicDWord::new(DWord::new(1, 2));
        assert_eq!(a.load(Relaxed), DWord::new(1, 2));
        assert_eq!(
            a.compare_exchange(DWord::new(1, 3), DWord::new(5, 6), AcqRel, Acquire),
            Err(DWord::new(1, 2))
        );
        assert_eq!(
            a.compare_exchange(DWord::new(1, 2), DWord::new(usize::MAX, 7), AcqRel, Acquire),
            Ok(DWord::new(1, 2))
        );
        assert_eq!(a.load(Relaxed), DWord::new(usize::MAX, 7));
        a.store(DWord::new(0, usize::MAX), Release);
        assert_eq!(a.load(Acquire), DWord::new(0, usize::MAX));
    }

    #[test]
    fn raw_spin_lock_excludes_and_never_marks_waiters() {
        // Two threads hammer a raw lock: every increment is kept, and the
        // word only ever holds UNLOCKED or LOCKED (no sleeper to wake).
        let l = SpinLock::new_raw(0u64);
        let seen_contended = core::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        let mut g = l.lock();
                        *g += 1;
                        if l.state.load(Relaxed) == CONTENDED {
                            seen_contended.store(true, Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(*l.lock(), 40_000);
        assert!(!seen_contended.load(Relaxed));
        assert!(!l.is_locked());
    }

    #[test]
    fn dword_alignment() {
        assert_eq!(core::mem::align_of::<AtomicDWord>(), 16);
        assert_eq!(
            core::mem::size_of::<AtomicDWord>(),
            2 * core::mem::size_of::<usize>()
        );
    }

    #[test]
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    fn dwcas_lock_free_on_x86_64() {
        // This machine has cmpxchg16b (checked); portable-atomic detects it.
        assert!(dwcas_is_lock_free());
    }

    #[test]
    #[cfg(all(target_arch = "x86_64", target_feature = "cmpxchg16b"))]
    fn dwcas_inlined_with_cmpxchg16b() {
        // .cargo/config.toml enables the feature: no run-time dispatch.
        const { assert!(DWCAS_ALWAYS_LOCK_FREE) };
    }

    #[test]
    fn spinlock_basic() {
        let l = SpinLock::new(5);
        {
            let mut g = l.lock();
            *g += 1;
            assert!(l.try_lock().is_none());
            assert!(l.is_locked());
        }
        assert_eq!(*l.lock(), 6);
    }

    /// Mutual exclusion under many threads: a non-atomic read-modify-write
    /// with a pause between the read and the write loses updates unless the
    /// lock excludes; every wake-up must arrive or the test hangs.
    #[test]
    fn spinlock_many_threads_exact_total() {
        let (threads, iters) = if cfg!(miri) { (6, 30) } else { (64, 2000) };
        let l = SpinLock::new(0u64);
        std::thread::scope(|s| {
            for t in 0..threads {
                let l = &l;
                s.spawn(move || {
                    for i in 0..iters {
                        let mut g = l.lock();
                        let v = *g;
                        if (t + i) % 16 == 0 {
                            // Hold it a while now and then: contention,
                            // so waiters sleep (Linux std) and are woken.
                            for _ in 0..50 {
                                spin_loop();
                            }
                        }
                        *g = v + 1;
                    }
                });
            }
        });
        assert_eq!(*l.lock(), threads as u64 * iters as u64);
        assert!(!l.is_locked());
    }

    /// `try_lock` never blocks and never admits a second holder, while other
    /// threads `lock`.
    #[test]
    fn spinlock_try_lock_with_lockers() {
        let iters = if cfg!(miri) { 20 } else { 5000 };
        let l = SpinLock::new((0u64, 0u64));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..iters {
                        let mut g = l.lock();
                        g.0 += 1;
                        g.1 += 1;
                    }
                });
                s.spawn(|| {
                    let mut got = 0;
                    while got < iters {
                        if let Some(mut g) = l.try_lock() {
                            assert_eq!(g.0, g.1);
                            g.0 += 1;
                            g.1 += 1;
                            got += 1;
                        }
                    }
                });
            }
        });
        assert_eq!(*l.lock(), (8 * iters, 8 * iters));
    }

    /// This thread's CPU time (user + system), `getrusage(RUSAGE_THREAD)`.
    #[cfg(all(feature = "std", target_os = "linux", not(miri)))]
    fn thread_cpu_time() -> std::time::Duration {
        // SAFETY: `rusage` is plain data; getrusage fills it.
        let mut r: libc::rusage = unsafe { core::mem::zeroed() };
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut r) }, 0);
        let tv = |t: libc::timeval| {
            std::time::Duration::from_secs(t.tv_sec as u64)
                + std::time::Duration::from_micros(t.tv_usec as u64)
        };
        tv(r.ru_utime) + tv(r.ru_stime)
    }

    /// The lock is adaptive on Linux std: waiters for a holder that keeps the
    /// lock 50 ms sleep in the kernel instead of spinning, and every one of
    /// them is woken. With a spin lock the 8 waiters would burn
    /// min(8, CPUs) x 50 ms of CPU time between them (at least 50 ms even on
    /// one CPU); here they use a few hundred microseconds.
    #[test]
    #[cfg(all(feature = "std", target_os = "linux", not(miri)))]
    fn spinlock_waiters_sleep() {
        use atomic::{AtomicBool, AtomicUsize};
        use std::time::{Duration, Instant};
        use std::vec::Vec;
        const WAITERS: usize = 8;
        const HOLD: Duration = Duration::from_millis(50);
        let l = SpinLock::new(0usize);
        let started = AtomicUsize::new(0);
        let released = AtomicBool::new(false);
        let g = l.lock();
        let cpu: Vec<Duration> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..WAITERS)
                .map(|_| {
                    s.spawn(|| {
                        started.fetch_add(1, SeqCst);
                        let t0 = thread_cpu_time();
                        let mut g = l.lock();
                        let spent = thread_cpu_time() - t0;
                        assert!(released.load(SeqCst), "taken while held");
                        *g += 1;
                        spent
                    })
                })
                .collect();
            while started.load(SeqCst) < WAITERS {
                std::thread::yield_now();
            }
            let t = Instant::now();
            std::thread::sleep(HOLD);
            released.store(true, SeqCst);
            let held = t.elapsed();
            assert!(held >= HOLD);
            drop(g);
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(*l.lock(), WAITERS, "every waiter was woken and got it");
        let total: Duration = cpu.iter().sum();
        // A spinning lock: >= 50 ms in all (one CPU) and up to 8 x 50 ms.
        assert!(
            total < HOLD / 4,
            "waiters burnt {total:?} of CPU time while the lock was held {HOLD:?}: {cpu:?}"
        );
    }

    /// `force_unlock` of a lock taken by `lock_for_fork` wakes a thread that
    /// sleeps on it (the parent side of a fork handler).
    #[test]
    fn spinlock_force_unlock_wakes_sleeper() {
        let l = SpinLock::new(0u32);
        l.lock_for_fork();
        assert!(l.is_locked() && l.try_lock().is_none());
        std::thread::scope(|s| {
            let h = s.spawn(|| *l.lock() += 1);
            std::thread::sleep(std::time::Duration::from_millis(20));
            // SAFETY: taken by `lock_for_fork` above, guard forgotten.
            unsafe { l.force_unlock() };
            h.join().unwrap();
        });
        assert_eq!(*l.lock(), 1);
        assert!(!l.is_locked());
        // Again, as a parent and a child of one fork would: lock, release.
        l.lock_for_fork();
        // SAFETY: as above.
        unsafe { l.force_unlock() };
        assert_eq!(*l.try_lock().unwrap(), 1);
    }

    #[test]
    fn spinlock_unlock_raw_releases() {
        let l = SpinLock::new_raw(1u32);
        // SAFETY: `l` is raw.
        unsafe { SpinLockGuard::unlock_raw(l.lock()) };
        assert!(!l.is_locked());
        assert_eq!(*l.try_lock().unwrap(), 1);
    }

    #[test]
    fn spinlock_debug_and_get_mut() {
        let mut l = SpinLock::new(3);
        assert_eq!(format!("{l:?}"), "SpinLock { data: 3 }");
        let g = l.lock();
        assert_eq!(format!("{l:?}"), "SpinLock { <locked> }");
        drop(g);
        *l.get_mut() += 1;
        assert_eq!(*l.lock(), 4);
        // Unsized data.
        let b: &SpinLock<[u8]> = &SpinLock::new([1u8, 2, 3]);
        b.lock()[1] = 9;
        assert_eq!(&*b.lock(), &[1, 9, 3]);
    }

    #[test]
    fn cell_api() {
        let c = UnsafeCell::new(3);
        // SAFETY: single-threaded test, no other reference exists.
        c.with_mut(|p| unsafe { *p = 4 });
        // SAFETY: as above.
        assert_eq!(c.with(|p| unsafe { *p }), 4);
    }
}

// ---------------------------------------------------------------------------
// fork support (issue #14 item 13)
// ---------------------------------------------------------------------------

#[cfg(not(loom))]
impl<T: ?Sized> SpinLock<T> {
    /// Releases the lock without its guard: for `fork` handlers, which
    /// take a lock before `fork` (forgetting the guard) and release it in
    /// the parent and in the child (see [`fork`](crate::fork)).
    ///
    /// # Safety
    ///
    /// The lock is held through a guard that was forgotten and is not used
    /// again (in a forked child: held by the thread that forked).
    pub unsafe fn force_unlock(&self) {
        // SAFETY: caller's contract. The unlock wakes a sleeper if the word
        // says there may be one (in the parent); in a forked child no other
        // thread exists, and the wake-up finds nobody.
        unsafe { self.unlock() }
    }

    /// Takes the lock and forgets the guard (as [`lock`](Self::lock) waits):
    /// the `prepare` half of a `fork` handler. Released by
    /// [`force_unlock`](Self::force_unlock).
    pub fn lock_for_fork(&self) {
        core::mem::forget(self.lock());
    }
}
