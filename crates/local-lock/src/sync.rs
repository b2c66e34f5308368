//! The sync shim: every atomic, spin lock, back-off loop, interior-mutable
//! cell and double-word compare-exchange of the crate family goes through
//! this module, so that `--cfg loom` swaps all of them for loom-visible
//! equivalents at once (as crossbeam's `primitive` module does).
//!
//! | item | normal build | `cfg(loom)` |
//! |---|---|---|
//! | [`atomic`] | `core::sync::atomic` | `loom::sync::atomic` |
//! | [`SpinLock`] | `spin::mutex::SpinMutex` | `loom::sync::Mutex` |
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

/// A spin lock protecting a `T` (`spin::mutex::SpinMutex`; a loom mutex under
/// loom). It does not touch IRQs or preemption: callers that may race with an
/// interrupt handler on the same CPU take it inside
/// [`Platform::irq_save`](crate::Platform::irq_save), as `spin_lock_irqsave`
/// does (see the `buddy` crate's zone lock).
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
    #[cfg(not(loom))]
    inner: spin::mutex::SpinMutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

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
    inner: spin::mutex::SpinMutexGuard<'a, T>,
    #[cfg(loom)]
    inner: loom::sync::MutexGuard<'a, T>,
}

impl<T> SpinLock<T> {
    const_fn! {
        /// A new, unlocked spin lock.
        pub fn new(value: T) -> Self {
            SpinLock {
                #[cfg(not(loom))]
                inner: spin::mutex::SpinMutex::new(value),
                #[cfg(loom)]
                inner: loom::sync::Mutex::new(value),
            }
        }
    }
}

impl<T: ?Sized> SpinLock<T> {
    /// Spins until the lock is taken.
    #[inline]
    pub fn lock(&self) -> SpinLockGuard<'_, T> {
        SpinLockGuard {
            #[cfg(not(loom))]
            inner: self.inner.lock(),
            #[cfg(loom)]
            inner: self.inner.lock().unwrap(),
        }
    }

    /// Takes the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> Option<SpinLockGuard<'_, T>> {
        #[cfg(not(loom))]
        let inner = self.inner.try_lock()?;
        #[cfg(loom)]
        let inner = self.inner.try_lock().ok()?;
        Some(SpinLockGuard { inner })
    }

    /// Whether the lock is held (a racy hint, for assertions).
    #[cfg(not(loom))]
    pub fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }

    /// Access without locking through `&mut self`.
    pub fn get_mut(&mut self) -> &mut T {
        #[cfg(not(loom))]
        return self.inner.get_mut();
        #[cfg(loom)]
        return self.inner.get_mut().unwrap();
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
        &self.inner
    }
}

impl<T: ?Sized> core::ops::DerefMut for SpinLockGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
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
        // SAFETY: caller's contract.
        unsafe { self.inner.force_unlock() }
    }

    /// Takes the lock and forgets the guard (spinning, then yielding): the
    /// `prepare` half of a `fork` handler. Released by
    /// [`force_unlock`](Self::force_unlock).
    pub fn lock_for_fork(&self) {
        let backoff = Backoff::new();
        loop {
            if let Some(g) = self.try_lock() {
                core::mem::forget(g);
                return;
            }
            #[cfg(feature = "std")]
            if backoff.is_completed() {
                std::thread::yield_now();
                continue;
            }
            backoff.snooze();
        }
    }
}
