//! `fork()` in a multithreaded program: `pthread_atfork` handlers for the
//! std allocators of the family, as every production `malloc` has.
//!
//! A forked child has one thread, a copy of the one that called `fork`. A
//! lock that another thread held at that moment stays held in the child
//! forever, and the child hangs on its first allocation that needs it. So
//! before `fork` (`prepare`) the forking thread takes every lock of every
//! registered allocator, in each allocator's lock order; after `fork` the
//! parent and the child release them (`parent`, `child`). The data those
//! locks protect is then consistent in the child.
//!
//! Allocators register with [`register`] (a `'static` object and its
//! [`level`]): levels are taken in increasing order (objects before
//! the page allocators they sit on: slub caches, then pcp lists, then the
//! buddy), registrations within a level in registration order, and the
//! release runs in reverse. A registration must be made where the caller
//! holds no allocator lock (an allocation's entry, before any lock), since
//! it waits for a `fork` in progress; the handlers are installed with
//! `pthread_atfork` on the first registration.
//!
//! Per-thread slots ([`PerThread`](crate::std_platform::PerThread)) need
//! no lock: a slot is owned by its thread. In the child, slots of threads
//! that do not exist there stay owned (what they cached stays cached); the
//! forking thread keeps its slot, and new threads take free ones or the
//! shared overflow slot, whose lock the allocators take in `prepare`.

extern crate std;

pub mod stress;

use core::marker::PhantomData;

use crate::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use crate::sync::SpinLock;

/// The lock levels, taken in increasing order before `fork`.
pub mod level {
    /// Object allocators (slub caches, the percpu bitmap heap).
    pub const OBJECTS: u8 = 0;
    /// Per-CPU page lists (pcp) and other layers between objects and pages.
    pub const PAGES: u8 = 1;
    /// Page allocators (the buddy and its growth from the OS).
    pub const BUDDY: u8 = 2;
    /// Number of levels.
    pub const COUNT: u8 = 3;
}

/// An allocator whose locks must be held across `fork`.
///
/// ```
/// use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
/// use local_lock::fork::{level, register, ForkLocks};
///
/// /// A pool with one lock (a flag here).
/// struct Pool {
///     locked: AtomicBool,
///     forks: AtomicUsize,
/// }
/// impl ForkLocks for Pool {
///     fn fork_prepare(&self) {
///         while self.locked.swap(true, Ordering::Acquire) {
///             std::hint::spin_loop();
///         }
///     }
///     unsafe fn fork_parent(&self) {
///         self.forks.fetch_add(1, Ordering::Relaxed);
///         self.locked.store(false, Ordering::Release);
///     }
///     unsafe fn fork_child(&self) {
///         self.locked.store(false, Ordering::Release);
///     }
/// }
/// static POOL: Pool = Pool { locked: AtomicBool::new(false), forks: AtomicUsize::new(0) };
/// assert!(register(&POOL, level::OBJECTS));
///
/// # #[cfg(not(miri))] { // miri cannot fork
/// // SAFETY: the child only reads an atomic and exits.
/// let pid = unsafe { libc::fork() };
/// if pid == 0 {
///     let free = !POOL.locked.load(Ordering::Relaxed);
///     // SAFETY: ends the child without running the parent's destructors.
///     unsafe { libc::_exit(if free { 0 } else { 1 }) };
/// }
/// let mut status = -1;
/// // SAFETY: waits for our own child.
/// assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
/// assert_eq!(status, 0, "the child found the lock released");
/// assert_eq!(POOL.forks.load(Ordering::Relaxed), 1, "the parent handler ran");
/// assert!(!POOL.locked.load(Ordering::Relaxed));
/// # }
/// ```
pub trait ForkLocks: Sync {
    /// Takes every lock of the allocator, in its lock order (blocking until
    /// each is free). Called by the thread that forks, before `fork`.
    fn fork_prepare(&self);

    /// Releases what [`fork_prepare`](Self::fork_prepare) took, in the
    /// parent after `fork`.
    ///
    /// # Safety
    ///
    /// Called once after `fork_prepare` of the same thread.
    unsafe fn fork_parent(&self);

    /// Releases (or re-initialises) what
    /// [`fork_prepare`](Self::fork_prepare) took, in the child after
    /// `fork` (the child's only thread).
    ///
    /// # Safety
    ///
    /// Called once in the child of a `fork` made after `fork_prepare`.
    unsafe fn fork_child(&self);
}

/// Type-erased handlers of one registered object.
struct Hooks {
    prepare: unsafe fn(usize),
    parent: unsafe fn(usize),
    child: unsafe fn(usize),
}

struct Thunks<T>(PhantomData<T>);

impl<T: ForkLocks> Thunks<T> {
    const HOOKS: Hooks = Hooks {
        prepare: Self::prepare,
        parent: Self::parent,
        child: Self::child,
    };

    /// # Safety
    ///
    /// `obj` is the address of a `&'static T` given to [`register`].
    unsafe fn prepare(obj: usize) {
        // SAFETY: caller's contract.
        unsafe { &*(obj as *const T) }.fork_prepare()
    }
    /// # Safety
    ///
    /// As `prepare`; after it, in the parent.
    unsafe fn parent(obj: usize) {
        // SAFETY: caller's contract.
        unsafe { (*(obj as *const T)).fork_parent() }
    }
    /// # Safety
    ///
    /// As `prepare`; after it, in the child.
    unsafe fn child(obj: usize) {
        // SAFETY: caller's contract.
        unsafe { (*(obj as *const T)).fork_child() }
    }
}

/// Most registered objects.
pub const MAX_REGISTERED: usize = 64;

struct Entry {
    obj: AtomicUsize,
    hooks: AtomicPtr<Hooks>,
    level: AtomicU8,
}

static TABLE: [Entry; MAX_REGISTERED] = [const {
    Entry {
        obj: AtomicUsize::new(0),
        hooks: AtomicPtr::new(core::ptr::null_mut()),
        level: AtomicU8::new(0),
    }
}; MAX_REGISTERED];
/// Entries `0..LEN` are complete (published with Release under `REG`).
static LEN: AtomicUsize = AtomicUsize::new(0);
/// Serialises registrations; held by the forking thread from `prepare` to
/// `parent`/`child`, so the table does not change across a `fork`.
static REG: SpinLock<()> = SpinLock::new(());
/// Entries whose locks `prepare` took (released by `parent`/`child`).
static PREPARED: AtomicUsize = AtomicUsize::new(0);
/// 0: handlers not installed, 1: being installed, 2: installed, 3: failed.
static INSTALLED: AtomicU8 = AtomicU8::new(0);

/// Registers `obj`'s locks to be taken before every `fork` and released
/// after it, at `level` (see [`level`]); installs the `pthread_atfork`
/// handlers on first use. Registering the same object at the same level
/// again is a no-op. Returns `false` if the table ([`MAX_REGISTERED`]
/// entries) is full or the handlers could not be installed.
///
/// The caller must hold no lock of any registered allocator (it may wait
/// for a `fork` in progress, whose `prepare` waits for those locks).
pub fn register<T: ForkLocks>(obj: &'static T, level: u8) -> bool {
    if !install() {
        return false;
    }
    let addr = obj as *const T as usize;
    REG.lock_for_fork();
    let n = LEN.load(Ordering::Relaxed);
    let dup = TABLE[..n]
        .iter()
        .any(|e| e.obj.load(Ordering::Relaxed) == addr && e.level.load(Ordering::Relaxed) == level);
    let ok = if dup {
        true
    } else if n == MAX_REGISTERED {
        false
    } else {
        let e = &TABLE[n];
        e.obj.store(addr, Ordering::Relaxed);
        e.level.store(level, Ordering::Relaxed);
        let hooks: &'static Hooks = &Thunks::<T>::HOOKS;
        e.hooks
            .store(hooks as *const Hooks as *mut Hooks, Ordering::Relaxed);
        LEN.store(n + 1, Ordering::Release);
        true
    };
    // SAFETY: taken just above by this thread, guard forgotten.
    unsafe { REG.force_unlock() };
    ok
}

/// glibc's `__libc_single_threaded` (2.32 on), found once when the
/// handlers are installed (null: unknown).
static SINGLE_THREADED: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());

fn resolve_single_threaded() {
    #[cfg(all(target_os = "linux", target_env = "gnu", not(miri)))]
    {
        // SAFETY: a NUL-terminated name; a successful lookup does not
        // allocate.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__libc_single_threaded".as_ptr()) };
        SINGLE_THREADED.store(p.cast(), Ordering::Relaxed);
    }
}

/// Whether the process has only ever had one thread (glibc's
/// `__libc_single_threaded`; `false` where it cannot be told, or before
/// the first [`register`]). A `prepare` handler may then leave its locks
/// alone, as glibc's `fork` leaves its own malloc's: no other thread can
/// hold them, and taking and releasing them only costs the parent and the
/// child a copy-on-write fault on every page with a lock word.
pub fn single_threaded() -> bool {
    let p = SINGLE_THREADED.load(Ordering::Relaxed);
    // SAFETY: null or glibc's `char` variable, valid while the process runs.
    !p.is_null() && unsafe { p.read_volatile() } != 0
}

/// Objects registered so far.
pub fn registered() -> usize {
    LEN.load(Ordering::Acquire)
}

/// Installs the handlers once (outside `REG`: `pthread_atfork` takes the C
/// library's own lock, which `fork` holds while running `prepare`).
fn install() -> bool {
    loop {
        match INSTALLED.load(Ordering::Acquire) {
            2 => return true,
            3 => return false,
            0 => {
                if INSTALLED
                    .compare_exchange(0, 1, Ordering::Acquire, Ordering::Acquire)
                    .is_ok()
                {
                    resolve_single_threaded();
                    // SAFETY: three `extern "C"` functions with no
                    // preconditions.
                    let r = unsafe {
                        libc::pthread_atfork(Some(on_prepare), Some(on_parent), Some(on_child))
                    };
                    INSTALLED.store(if r == 0 { 2 } else { 3 }, Ordering::Release);
                }
            }
            _ => std::thread::yield_now(),
        }
    }
}

fn entry(i: usize) -> (usize, &'static Hooks, u8) {
    let e = &TABLE[i];
    let hooks = e.hooks.load(Ordering::Relaxed);
    // SAFETY: entries below `LEN` hold a `&'static Hooks` (written before
    // `LEN` was published).
    let hooks = unsafe { &*hooks };
    (
        e.obj.load(Ordering::Relaxed),
        hooks,
        e.level.load(Ordering::Relaxed),
    )
}

extern "C" fn on_prepare() {
    REG.lock_for_fork();
    let n = LEN.load(Ordering::Acquire);
    PREPARED.store(n, Ordering::Relaxed);
    for lv in 0..level::COUNT {
        for i in 0..n {
            let (obj, hooks, l) = entry(i);
            if l == lv {
                // SAFETY: `obj` is a registered `&'static T` of these hooks.
                unsafe { (hooks.prepare)(obj) };
            }
        }
    }
}

extern "C" fn on_parent() {
    release(|h| h.parent);
}

extern "C" fn on_child() {
    release(|h| h.child);
}

fn release(pick: impl Fn(&Hooks) -> unsafe fn(usize)) {
    let n = PREPARED.load(Ordering::Relaxed);
    for lv in (0..level::COUNT).rev() {
        for i in (0..n).rev() {
            let (obj, hooks, l) = entry(i);
            if l == lv {
                // SAFETY: `prepare` took this object's locks on this
                // thread (or on the thread this child copies).
                unsafe { pick(hooks)(obj) };
            }
        }
    }
    // SAFETY: taken by `on_prepare` on this thread.
    unsafe { REG.force_unlock() };
}

/// Whether `p` lies in a writable segment of the main executable as
/// loaded (its `.data` or `.bss`, found from the program headers the
/// kernel passes in the auxiliary vector: `getauxval(AT_PHDR)`, no lock,
/// no allocation). An object there is a `static` of the program (or a
/// part of one): never moved and never dropped while the process runs, so
/// `&*p` may be taken as `'static`. Stacks, heaps and other mappings never
/// lie inside a loaded segment. `false` where this cannot be told (other
/// targets, miri, an executable without a `PT_PHDR` header).
pub fn in_main_image(p: *const u8) -> bool {
    #[cfg(all(target_os = "linux", target_pointer_width = "64", not(miri)))]
    {
        // SAFETY: getauxval has no preconditions.
        let (phdr, phnum) = unsafe {
            (
                libc::getauxval(libc::AT_PHDR) as usize,
                libc::getauxval(libc::AT_PHNUM) as usize,
            )
        };
        if phdr == 0 || phnum == 0 {
            return false;
        }
        // SAFETY: the kernel maps the executable's program headers there,
        // `phnum` of them, for the life of the process.
        let hdrs = unsafe { core::slice::from_raw_parts(phdr as *const libc::Elf64_Phdr, phnum) };
        // The load bias: where PT_PHDR says the headers are, against
        // where they are.
        let Some(bias) = hdrs
            .iter()
            .find(|h| h.p_type == libc::PT_PHDR)
            .map(|h| phdr.wrapping_sub(h.p_vaddr as usize))
        else {
            return false;
        };
        let a = p as usize;
        hdrs.iter().any(|h| {
            h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_W != 0 && {
                let lo = bias.wrapping_add(h.p_vaddr as usize);
                lo <= a && a - lo < h.p_memsz as usize
            }
        })
    }
    #[cfg(not(all(target_os = "linux", target_pointer_width = "64", not(miri))))]
    {
        let _ = p;
        false
    }
}

#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU64;

    static WRITABLE: AtomicU64 = AtomicU64::new(1);
    static ZEROED: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

    #[test]
    fn statics_are_in_the_main_image_locals_and_heap_are_not() {
        assert!(in_main_image((&WRITABLE as *const AtomicU64).cast()));
        assert!(in_main_image((&ZEROED[63] as *const AtomicU64).cast()));
        let local = AtomicU64::new(WRITABLE.load(Ordering::Relaxed));
        assert!(!in_main_image((&local as *const AtomicU64).cast()));
        let boxed = std::boxed::Box::new(AtomicU64::new(2));
        assert!(!in_main_image((&*boxed as *const AtomicU64).cast()));
        assert!(!in_main_image(core::ptr::null()));
    }
}
