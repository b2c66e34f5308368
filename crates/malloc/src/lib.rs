//! `mm-malloc`: the C/POSIX/glibc allocation surface (`malloc`, `free`,
//! `calloc`, `realloc`, `posix_memalign`, `malloc_usable_size`, ...) over
//! slub: kmalloc's 13 size classes plus 12 intermediate classes between 1
//! and 8 KiB ([`MID_SIZES`]), caches of this library built as
//! [`GlobalSlub`]'s (per-CPU sheaves on restartable sequences, hardened
//! free pointers) over the pages every `GlobalSlub` shares (pcp over the
//! buddy); whole pages tagged as `kmalloc_large` blocks above 8 KiB;
//! recorded direct mappings from 256 KiB on (and above the largest block,
//! 4 MiB). Every entry point is
//! size-less, as C's are: `free` finds the slab (or large block, or
//! mapping) from the address, as the kernel's `kfree` does
//! (`virt_to_slab`), the slab's tag naming its cache.
//!
//! Use it as a drop-in (`LD_PRELOAD=libmm_malloc.so program`) or link it
//! (`cc prog.c libmm_malloc.a -lpthread -ldl -lm`); `include/mm_malloc.h`
//! declares the non-standard entry points. The library never calls the
//! libc allocator: its state is static, the caches are per CPU (no
//! thread-exit hook); the one TLS destructor below it (the pcp slot of
//! `PerThread`, whose registration makes glibc call `calloc`) is claimed
//! before any lock is taken, and a `calloc` nested in that registration
//! is served (`local_lock`'s `TLS_REGISTERING`); messages are written to
//! fd 2 from a stack buffer, and bad input aborts (as glibc's `free():
//! invalid pointer` does) instead of unwinding across the C boundary.
//!
//! A thread whose first contact with the allocator is a `free` that
//! finds its CPU's sheaf full is covered too (`tests/c/remote_free.c`):
//! the restartable free gives up on a full sheaf, and the slow path claims
//! the slot before any lock, as the allocation's does.
//!
//! A class's cache is built at its first use, and the first
//! 32 objects of a class (`caches::COLD_OBJECTS`) are taken from
//! a larger class's cache (at most twice the size) before it is: each
//! cache a process builds costs it about 6-8 pages of records, slab and
//! sheaves, and small programs ask for a few objects of many classes.
//!
//! What differs from glibc: `malloc(n)` for `n <= 8` is 8-byte aligned
//! (kmalloc-8, as jemalloc and mimalloc do; every larger request is at
//! least 16-byte aligned); `aligned_alloc` refuses an alignment that is
//! not a power of two with `EINVAL` (glibc 2.38 on; 2.36 rounds it up);
//! `mallinfo2` reports this allocator's figures (see [`mallinfo2`]);
//! `malloc_trim` ignores its pad.
//!
//! Environment (read once at init, from `/proc/self/environ` without
//! allocating: [`env`]):
//! - `MM_STATS=1` prints the slabinfo, SLUB statistics, pcp lists and
//!   buddyinfo to stderr at exit (what [`malloc_stats`] prints);
//! - `MM_SLUB_DEBUG=FZPU[,cache...][;...]`, the kernel's `slub_debug=`:
//!   `F` consistency checks, `Z` red zones, `P` poisoning, `U` owner
//!   tracking (empty: all four; `-`: none), on every cache or on the named
//!   ones (`kmalloc-64`, `malloc-4608`, a prefix with `*`). The named caches
//!   are rebuilt with those flags before their first object (no sheaves,
//!   every operation checked under the list lock); a corruption found
//!   (a red zone or poison overwritten, a bad free) is reported on stderr
//!   by slub (the cache, the object's address, its owner records under
//!   `U`) and the process aborts;
//! - `MM_SHEAF_CAPACITY=n`: per-CPU sheaves of up to `n` objects (capped
//!   per class at 32 KiB of objects, and at [`MAX_SHEAF_CAPACITY`]; 0: no
//!   sheaves) instead of 128;
//! - `MM_MMAP_THRESHOLD=n`: requests of `n` bytes or more (above 8 KiB)
//!   are direct mappings of exact page counts, unmapped when freed (glibc's
//!   `M_MMAP_THRESHOLD`), instead of power-of-two blocks of the buddy;
//!   default 256 KiB (measured: peak RSS of sqlite3 1.36x -> 1.33x glibc,
//!   git 1.38x -> 1.34x, python-stdlib 1.29x -> 1.27x);
//! - `MM_DECAY=0`: no time-based purge of free pages (the buddy's decay,
//!   paused); `malloc_trim` still purges. The decay time and the resident
//!   cap are the static purge policy of the library's own pages
//!   ([`pages::PURGE`]: free blocks from 32 KiB on go back to the OS once
//!   more than 128 KiB of them, or an eighth of the pages in use, is
//!   resident, or after 100 ms).
//!
//! `realloc` of a direct mapping (256 KiB and more) resizes it with
//! `mremap`, as glibc does with its mmapped chunks.

#![allow(clippy::missing_safety_doc)] // each `# Safety` is the C contract

use core::ffi::{c_int, c_void};
use core::fmt::Write as _;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use buddy::PageAlloc;
use libc::size_t;
use local_lock::std_platform::{die, PerThread};
use local_lock::Platform;
use slub::slab::{tag_kmalloc_index, TAG_KIND, TAG_SLAB};
use slub::{FastFree, GlobalSlub, KMALLOC_MAX_CACHE_SIZE};

use crate::pages::pages;

/// `MALLOC_ALIGNMENT`: what `malloc` guarantees for requests above 8
/// bytes (every kmalloc class from 16 on is aligned to 16 or more).
pub const MALLOC_ALIGNMENT: usize = 16;

mod arena;
mod caches;
mod env;
mod large;
pub mod pages;

/// Rust's allocations in this library (none but a panic's message).
#[global_allocator]
static RUST_ALLOC: arena::RustAlloc = arena::RustAlloc;

use caches::{cache, NR_CACHES};
pub use caches::{Cache, MID_NAMES, MID_SIZES};

/// The cache named by a slab tag's kmalloc index (1-based), kmalloc's or
/// an intermediate one.
#[inline(always)]
fn cache_of_index(i: usize) -> Option<&'static Cache> {
    if (1..=NR_CACHES).contains(&i) {
        Some(cache(i - 1))
    } else {
        None
    }
}

/// Whether [`init`] ran.
static READY: AtomicBool = AtomicBool::new(false);
/// Where the statistics go (a copy of fd 2 made at start under
/// `MM_STATS`, else fd 2).
static STATS_FD: AtomicI32 = AtomicI32::new(2);
/// `MM_STATS` was set (to anything but `0`) at start.
static STATS_AT_EXIT: AtomicBool = AtomicBool::new(false);

/// One-time set-up, from the library's constructor or the first slow
/// path (whichever comes first): reads the environment
/// ([`env`](crate::env): nothing allocated), rebuilds the caches it
/// configures (before their first object), registers the fork handlers (a
/// `static` of a shared library is not in the main image, so `GlobalSlub`
/// does not register it by itself). Allocates nothing. A second thread
/// arriving meanwhile waits (the first allocation comes before any
/// thread in practice).
#[cold]
#[inline(never)]
fn init() {
    if INIT_STATE
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Acquire)
        .is_err()
    {
        while INIT_STATE.load(Ordering::Acquire) != 2 {
            core::hint::spin_loop();
        }
        return;
    }
    // SAFETY: the first thing of the one init, before any allocation.
    unsafe { pages::init_pages() };
    let s = env::read();
    if s.iter().any(Option::is_some) {
        apply_env(&s);
    }
    // The lists' bounds (before any page goes through them: init runs
    // before the first allocation).
    let _ = pages().pcp().set_batch_high(Some(pages::PCP_BATCH_HIGH));
    // The pages' fork handlers.
    pages::PagesFork::register();
    local_lock::fork::register(&caches::CACHES_FORK, local_lock::fork::level::OBJECTS);
    INIT_STATE.store(2, Ordering::Release);
    READY.store(true, Ordering::Release);
}

/// [`init`]'s progress: 0 not started, 1 running, 2 done.
static INIT_STATE: AtomicI32 = AtomicI32::new(0);

/// The settings of the environment (see the crate's documentation), when
/// one is set: out of line, so the code of a process run without any
/// (parsing `MM_SLUB_DEBUG` among it) is not in the text it maps
/// (`build.rs`: the code every process runs fits one 64 KiB window).
#[cold]
#[inline(never)]
fn apply_env(s: &env::Settings) {
    if s[0].is_some_and(|v| !v.bytes().is_empty() && v.bytes() != b"0") {
        // A copy of stderr: programs may close fd 2 at exit (coreutils'
        // `close_stdout`) before the report.
        // SAFETY: dup has no memory preconditions.
        let fd = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
        STATS_FD.store(if fd >= 0 { fd } else { 2 }, Ordering::Relaxed);
        STATS_AT_EXIT.store(true, Ordering::Relaxed);
    }
    let debug = match &s[1] {
        Some(v) => caches::parse_slub_debug(v.bytes()).flags,
        None => [slub::SlabFlags::NONE; NR_CACHES],
    };
    let sheaves = s[2]
        .and_then(|v| env::number(v.bytes()))
        .map_or(GlobalSlub::DEFAULT_SHEAVES, |n| n.min(MAX_SHEAF_CAPACITY));
    // SAFETY: init runs before the first object, on one thread.
    unsafe { caches::configure(&debug, sheaves) };
    if let Some(n) = s[4].and_then(|v| env::number(v.bytes())) {
        large::MMAP_THRESHOLD.store(n, Ordering::Relaxed);
    }
    if s[3].is_some_and(|v| v.bytes() == b"0") {
        pages().pcp().source().set_decay_paused(true);
    }
}

/// The largest `MM_SHEAF_CAPACITY` taken (larger values are cut to it):
/// a sheaf is one block of `slub_max_order` 3 (32 KiB of entries).
pub const MAX_SHEAF_CAPACITY: usize = 1024;

/// Errno of the calling thread.
fn errno() -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

#[inline(always)]
fn ensure_init() {
    if !READY.load(Ordering::Acquire) {
        init();
    }
}

/// The library's constructor (`.init_array`): set up before `main`, so
/// the fork handlers exist before the program's first thread.
#[used]
#[unsafe(link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn() = {
    extern "C" fn ctor() {
        ensure_init();
    }
    ctor
};

/// The library's destructor (`.fini_array`): the `MM_STATS=1` report.
#[used]
#[unsafe(link_section = ".fini_array")]
static DESTRUCTOR: extern "C" fn() = {
    extern "C" fn dtor() {
        if STATS_AT_EXIT.load(Ordering::Relaxed) {
            write_stats();
        }
    }
    dtor
};

#[inline(always)]
fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Claims the calling thread's page-list slot (`PerThread`, under the
/// pcp that `GlobalSlub`'s slabs come from) before any lock is taken: the
/// claim registers a TLS destructor, which makes glibc `calloc` (nested
/// into this library: it takes the sheaf fast path, or the overflow slot
/// while the registration is under way). One TLS read once claimed.
#[inline(always)]
fn claim_thread_slot() {
    let _ = PerThread.current_cpu();
}

/// `malloc` without errno: a kmalloc object (the inline sheaf pop of
/// `GlobalSlub::alloc`), else a large kmalloc block, else a recorded
/// mapping.
#[inline(always)]
fn alloc(size: usize) -> *mut u8 {
    match alloc_fast(size) {
        Some(p) => p.as_ptr(),
        None => alloc_after_fast(size),
    }
}

/// The sheaf pop of [`alloc`], calling nothing (`None`: the rest of the
/// allocation, [`alloc_after_fast`]).
#[inline(always)]
fn alloc_fast(size: usize) -> Option<NonNull<u8>> {
    // (0 takes the class of 1: `caches::class`.)
    if size <= KMALLOC_MAX_CACHE_SIZE {
        // (The checked slot only: the other slot's pop reports a missing
        // marker, a call; `alloc_object_slow` tries it.)
        // SAFETY: the class's slot (built or still zero).
        return unsafe { Cache::alloc_fast_checked_in(caches::slot(caches::class(size))?) };
    }
    None
}

/// [`alloc`] after its sheaf pop: the cache's full allocation, or a
/// large block or mapping.
#[inline(always)]
fn alloc_after_fast(size: usize) -> *mut u8 {
    let size = size.max(1);
    if size <= KMALLOC_MAX_CACHE_SIZE {
        return alloc_object_slow(caches::class(size), size);
    }
    alloc_slow(size, MALLOC_ALIGNMENT)
}

/// Cache `i`'s full allocation (sheaf refill, slab paths); while cache
/// `i` is not built, its first objects come from a larger class
/// ([`caches::cold_class`]: a process pays for a cache only once it uses
/// the class).
#[cold]
#[inline(never)]
fn alloc_object_slow(i: usize, size: usize) -> *mut u8 {
    ensure_init();
    claim_thread_slot();
    let i = if caches::built(i) {
        i
    } else {
        match caches::cold_class(i) {
            caches::Cold::Cache(i) => i,
            caches::Cold::Pages => {
                let p = large::alloc(size, MALLOC_ALIGNMENT, false);
                if !p.is_null() {
                    return p;
                }
                i
            }
        }
    };
    let c = caches::ensure_built(i);
    // A hardened cache whose frees may mark blind (no map tag): the other
    // slot's pop.
    if let Some(p) = c.alloc_fast::<true>() {
        return p.as_ptr();
    }
    let p = c.alloc();
    // (The page map exists once a slab does: `free`'s lookup copy.)
    pages::publish_free_map();
    match p {
        Some(p) => p.as_ptr(),
        // The caches found no page: what kmalloc can still do.
        None => alloc_slow(size, MALLOC_ALIGNMENT),
    }
}

/// Everything beyond the sheaf pop: first use, large blocks, exhaustion.
#[cold]
#[inline(never)]
fn alloc_slow(size: usize, align: usize) -> *mut u8 {
    ensure_init();
    claim_thread_slot();
    let size = size.max(1);
    if align > MALLOC_ALIGNMENT && size <= KMALLOC_MAX_CACHE_SIZE {
        if let Some(i) = caches::class_aligned(size, align) {
            if let Some(p) = caches::ensure_built(i).alloc() {
                return p.as_ptr();
            }
        }
    }
    large::alloc(size, align, false)
}

/// `kzalloc`: small objects are cleared (`size` bytes); large blocks the
/// page allocator knows to be zero (fresh from the OS, purged, the zero
/// list, direct mappings) are not cleared again.
fn zalloc(size: usize) -> *mut u8 {
    let size = size.max(1);
    if size <= KMALLOC_MAX_CACHE_SIZE {
        let p = alloc(size);
        if !p.is_null() {
            // SAFETY: a fresh allocation of at least `size` bytes.
            unsafe { p.write_bytes(0, size) };
        }
        return p;
    }
    ensure_init();
    claim_thread_slot();
    large::alloc(size, MALLOC_ALIGNMENT, true)
}

/// An allocation aligned to `align` (a power of two).
fn alloc_aligned(align: usize, size: usize) -> *mut u8 {
    if align <= 8 || (align <= MALLOC_ALIGNMENT && size > 8) {
        return alloc(size);
    }
    alloc_slow(size, align)
}

/// [`alloc_aligned`], with `errno = ENOMEM` when it fails (`aligned_alloc`,
/// `memalign`).
fn alloc_aligned_or_enomem(align: usize, size: usize) -> *mut u8 {
    let p = alloc_aligned(align, size);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

/// Reports bad input to `free`-like entry points and aborts (never
/// unwinds into C).
#[cold]
#[inline(never)]
fn bad(what: &str, p: *mut u8, e: &dyn core::fmt::Display) -> ! {
    die(format_args!(
        "mm-malloc: {what}({p:p}): invalid pointer: {e}"
    ))
}

/// `kfree`: the block from the address; an object of a cache the page
/// map names goes through that cache's inline free (validated by the map
/// byte), else through the full checked free; large blocks and mappings
/// to the pages.
#[inline(always)]
unsafe fn dealloc(p: *mut u8, what: &str) {
    // The page map names the cache in one byte (null and anything outside
    // the heap read 0: no cache), and the cache's inline free validates
    // the object from the same byte. Every other outcome is a tail call,
    // so this path needs no stack frame.
    let Some(byte) = pages::page_byte(p) else {
        // SAFETY: as below.
        return unsafe { dealloc_untagged(p, what) };
    };
    let c = caches::slot_of_tag(byte);
    // (A slot without a built cache, as tag 0's, reads as no restartable
    // cache: `Slow`, before `p` is used.)
    // SAFETY: C's contract: `p` is a live allocation of ours (bad input is
    // refused before any change); `byte` is `p`'s page's byte in the map
    // of the caches' source (`PAGES`), read after `p`'s allocation; `c` is
    // the slot of the byte's tag, whose cache (if built) has that tag
    // (`caches::claim_map_tag`).
    match unsafe { Cache::free_fast_tag_in(c, p, byte) } {
        FastFree::Freed => {}
        // SAFETY: as above.
        FastFree::Slow => unsafe { dealloc_tag_slow(p, byte, what) },
        // SAFETY: the object `free_fast_tag_in` left marked (not null),
        // of the written cache at `byte`'s slot.
        FastFree::Unpushed => unsafe { dealloc_unpushed_tag(p, byte, what) },
    }
}

/// A free the inline free left unchanged: by the page map's byte, the
/// cache's other paths, else the untagged ones.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only
unsafe extern "C" fn dealloc_tag_slow(p: *mut u8, byte: u8, what: &str) {
    if let Some(c) = caches::cache_of_tag(byte) {
        // SAFETY: a tagged byte is a heap page's: `p` is not null.
        let nn = unsafe { NonNull::new_unchecked(p) };
        // SAFETY: C's contract (as `dealloc`).
        return unsafe { dealloc_cache_slow(c, nn, what) };
    }
    // SAFETY: as above.
    unsafe { dealloc_untagged(p, what) }
}

/// A free of cache `c`'s that its map-checked inline free left unchanged
/// (or whose page has no tag): the cache's other inline paths, then its
/// full free.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only
unsafe extern "C" fn dealloc_cache_slow(c: &Cache, p: NonNull<u8>, what: &str) {
    // SAFETY: C's contract; bad input is refused before any change.
    match unsafe { c.try_free_fast::<true>(p) } {
        Ok(true) => {}
        // SAFETY: as above.
        Ok(false) => unsafe { dealloc_object_slow(c, p, what) },
        Err(e) => bad(what, p.as_ptr(), &e),
    }
}

/// A free the inline free validated and marked, whose CPU's main sheaf
/// was full or missing.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only
unsafe extern "C" fn dealloc_unpushed(c: &Cache, p: NonNull<u8>, what: &str) {
    // SAFETY: the object `free_fast_byte` left marked, not freed since.
    if let Err(e) = unsafe { c.free_unpushed(p) } {
        bad(what, p.as_ptr(), &e)
    }
}

/// [`dealloc_unpushed`] of the cache at map byte `byte`'s slot.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only
unsafe extern "C" fn dealloc_unpushed_tag(p: *mut u8, byte: u8, what: &str) {
    // SAFETY: the caller's: the slot holds the written cache whose inline
    // free left `p` (not null) marked.
    unsafe { dealloc_unpushed(&*caches::slot_of_tag(byte), NonNull::new_unchecked(p), what) }
}

/// A free that the page map does not name: null, a slab of a cache
/// without a tag, a large block or a direct mapping, or bad input.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only
unsafe extern "C" fn dealloc_untagged(p: *mut u8, what: &str) {
    let Some(nn) = NonNull::new(p) else { return };
    if let Some(b) = pages().block_of(p) {
        let tag = b.owner.tag().load(Ordering::Relaxed);
        if tag & TAG_KIND == TAG_SLAB {
            let Some(c) = cache_of_index(tag_kmalloc_index(tag)) else {
                bad(what, p, &"an object of a cache that is not malloc's")
            };
            // SAFETY: C's contract: `p` is a live allocation of ours; bad
            // input is refused before any change.
            return unsafe { dealloc_cache_slow(c, nn, what) };
        }
    }
    // SAFETY: as above.
    unsafe { dealloc_slow(p, what) }
}

/// The cache's full free (`try_free`: the descriptor lookup, the double
/// free check, the sheaf slow paths).
#[cold]
#[inline(never)]
unsafe fn dealloc_object_slow(c: &Cache, p: NonNull<u8>, what: &str) {
    ensure_init();
    claim_thread_slot();
    // SAFETY: C's contract; bad input is refused before any change.
    if let Err(e) = unsafe { c.try_free(p) } {
        bad(what, p.as_ptr(), &e)
    }
}

#[cold]
#[inline(never)]
unsafe fn dealloc_slow(p: *mut u8, what: &str) {
    ensure_init();
    claim_thread_slot();
    // SAFETY: `dealloc` passes a non-null `p`; C's contract; bad input is
    // refused before any change.
    if let Err(e) = unsafe { large::free(NonNull::new_unchecked(p)) } {
        bad(what, p, &e)
    }
}

/// `ksize` (of kmalloc's caches, large blocks and mappings), or the
/// object size of an intermediate class: an object of a cache the page
/// map names by the map byte and the cache's boundary check (as `free`
/// finds it), anything else by [`usable_slow`].
#[inline]
fn usable(p: *mut u8) -> usize {
    let byte = pages().page_tag(p);
    if let Some(c) = caches::cache_of_tag(byte) {
        if let Some(n) = c.ksize_by_map_byte(p, byte) {
            return n;
        }
    }
    usable_slow(p)
}

/// [`usable`] by the block's descriptor (the page walk and a division):
/// large blocks, mappings, caches without a tag, and bad input (reported).
#[cold]
#[inline(never)]
fn usable_slow(p: *mut u8) -> usize {
    if let Some(b) = pages().block_of(p) {
        let tag = b.owner.tag().load(Ordering::Relaxed);
        if tag & TAG_KIND == TAG_SLAB {
            let Some(c) = cache_of_index(tag_kmalloc_index(tag)) else {
                bad(
                    "malloc_usable_size",
                    p,
                    &"an object of a cache that is not malloc's",
                )
            };
            let l = c.layout();
            let off = (p.addr() - b.head.as_ptr().addr()).wrapping_sub(l.red_left_pad);
            if !off.is_multiple_of(l.size) || off / l.size >= usize::from(l.oo.objects) {
                bad("malloc_usable_size", p, &"not the start of an object")
            }
            return c.object_size();
        }
    }
    large::size(p).unwrap_or_else(|e| bad("malloc_usable_size", p, &e))
}

/// `malloc(3)`: at least `size` bytes (a unique pointer for 0), 16-byte
/// aligned above 8 bytes; null and `ENOMEM` on exhaustion.
#[unsafe(no_mangle)]
pub extern "C" fn malloc(size: size_t) -> *mut c_void {
    malloc_inline(size)
}

/// [`malloc`]'s body, for the entry points that are a `malloc` (a call to
/// the exported symbol goes through the GOT: it may be interposed).
/// The pop calls nothing and the rest is a tail call: no stack frame.
#[inline(always)]
fn malloc_inline(size: size_t) -> *mut c_void {
    match alloc_fast(size) {
        Some(p) => p.as_ptr().cast(),
        None => malloc_slow(size),
    }
}

/// `malloc` after the sheaf pop (`ENOMEM` on exhaustion).
#[cold]
#[inline(never)]
extern "C" fn malloc_slow(size: size_t) -> *mut c_void {
    let p = alloc_after_fast(size);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p.cast()
}

/// `free(3)`: null is ignored; anything that is not a live allocation of
/// this library is reported and aborts.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: C's contract.
    unsafe { dealloc(p.cast(), "free") }
}

/// `cfree`: [`free`] (an old SunOS name glibc kept).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cfree(p: *mut c_void) {
    // SAFETY: C's contract.
    unsafe { dealloc(p.cast(), "cfree") }
}

/// `free_sized` (C23): [`free`]; the size is not needed (and not
/// trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free_sized(p: *mut c_void, _size: size_t) {
    // SAFETY: C's contract.
    unsafe { dealloc(p.cast(), "free_sized") }
}

/// `free_aligned_sized` (C23): [`free`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free_aligned_sized(p: *mut c_void, _align: size_t, _size: size_t) {
    // SAFETY: C's contract.
    unsafe { dealloc(p.cast(), "free_aligned_sized") }
}

/// `calloc(3)`: `n * size` zeroed bytes; null and `ENOMEM` when the
/// product overflows or memory runs out. Known-zero pages are not
/// cleared again.
#[unsafe(no_mangle)]
pub extern "C" fn calloc(n: size_t, size: size_t) -> *mut c_void {
    let Some(bytes) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    let p = zalloc(bytes);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p.cast()
}

/// `realloc(3)`, as glibc: `realloc(NULL, n)` is `malloc(n)`;
/// `realloc(p, 0)` frees `p` and returns null (errno untouched); in place
/// while the block's usable size holds `n` and `n` is more than half of
/// it (a shrink to half or less moves to a smaller class, as glibc gives
/// the tail back); otherwise a new block gets the contents and `p` is
/// freed. On exhaustion null and `ENOMEM`, `p` left as it was.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: size_t) -> *mut c_void {
    if p.is_null() {
        // `realloc(NULL, n)` (a third of python's reallocs): `malloc`'s
        // path, not through realloc_impl's frame and a call through the
        // GOT (18 instructions more).
        return malloc_inline(size);
    }
    // SAFETY: C's contract.
    unsafe { realloc_impl(p.cast(), size, "realloc") }.cast()
}

/// The C ABI, so that `realloc` can reach it by a tail call (a Rust-ABI
/// callee took a call, a frame and a return: 3 instructions per realloc).
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only
unsafe extern "C" fn realloc_impl(p: *mut u8, size: usize, what: &str) -> *mut u8 {
    if p.is_null() {
        return malloc_inline(size).cast();
    }
    if size == 0 {
        // SAFETY: C's contract.
        unsafe { dealloc(p, what) };
        return ptr::null_mut();
    }
    // SAFETY: C's contract: `p` is live and ours.
    if let Some(q) = unsafe { large::remap(p, size) } {
        return q;
    }
    let old = usable(p);
    if size <= old && (size > old / 2 || old <= MALLOC_ALIGNMENT) {
        return p;
    }
    let q = alloc(size);
    if q.is_null() {
        set_errno(libc::ENOMEM);
        return q;
    }
    // SAFETY: both live and distinct, each at least `min` long; `p` is
    // freed once (C's contract).
    unsafe {
        ptr::copy_nonoverlapping(p, q, old.min(size));
        dealloc(p, what);
    }
    q
}

/// `reallocarray(3)`: [`realloc`] of `n * size` bytes; null and `ENOMEM`
/// (and `p` untouched) when the product overflows.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    let Some(bytes) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    // SAFETY: C's contract.
    unsafe { realloc_impl(p.cast(), bytes, "reallocarray") }.cast()
}

/// `posix_memalign(3)`: `EINVAL` unless `align` is a power of two and a
/// multiple of `sizeof(void *)`; `ENOMEM` on exhaustion (also left in
/// errno, as glibc's does); `*out` is left alone on error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let p = alloc_aligned(align, size);
    if p.is_null() {
        set_errno(libc::ENOMEM);
        return libc::ENOMEM;
    }
    // SAFETY: C's contract: `out` is writable.
    unsafe { *out = p.cast() };
    0
}

/// `aligned_alloc` (C11), as glibc 2.38 on: null and `EINVAL` unless
/// `align` is a power of two (any size is accepted, C17's DR 460).
#[unsafe(no_mangle)]
pub extern "C" fn aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    alloc_aligned_or_enomem(align, size).cast()
}

/// `memalign(3)`, as glibc: an alignment that is not a power of two is
/// rounded up to one; null and `EINVAL` above `SIZE_MAX / 2 + 1`.
#[unsafe(no_mangle)]
pub extern "C" fn memalign(align: size_t, size: size_t) -> *mut c_void {
    let Some(align) = align.checked_next_power_of_two() else {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    };
    alloc_aligned_or_enomem(align, size).cast()
}

fn page_size() -> usize {
    pages().page_size()
}

/// `valloc(3)`: page aligned.
#[unsafe(no_mangle)]
pub extern "C" fn valloc(size: size_t) -> *mut c_void {
    memalign(page_size(), size)
}

/// `pvalloc(3)`: page aligned, the size rounded up to whole pages (one
/// page for 0); `ENOMEM` if rounding overflows.
#[unsafe(no_mangle)]
pub extern "C" fn pvalloc(size: size_t) -> *mut c_void {
    let ps = page_size();
    let Some(rounded) = size.max(1).checked_next_multiple_of(ps) else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    memalign(ps, rounded)
}

/// `malloc_usable_size(3)`: the bytes usable at `p` (its class's object
/// size, the whole block or mapping); 0 for null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> size_t {
    if p.is_null() {
        return 0;
    }
    usable(p.cast())
}

/// `malloc_trim(3)`: flushes every CPU's sheaves and slabs, shrinks the
/// caches, drains the page lists and purges free blocks
/// ([`GlobalSlub::trim`]); 1 if memory went back to the OS. `pad` is
/// ignored.
#[unsafe(no_mangle)]
pub extern "C" fn malloc_trim(_pad: size_t) -> c_int {
    ensure_init();
    claim_thread_slot();
    for c in caches::all() {
        c.flush_all();
        c.shrink();
    }
    c_int::from(pages().trim() > 0)
}

/// For instruction counting under valgrind (which does not implement the
/// `rseq` system call, so glibc cannot register it): makes the
/// restartable per-CPU paths run as if the thread were on CPU 0, as
/// `ci/icount.sh` counts `GlobalSlub`'s
/// ([`local_lock::rseq::assume_cpu0_for_counting`]). Returns 1 if it
/// could (glibc 2.35+ keeps an rseq area), 0 otherwise (and on targets
/// without rseq). Call it before the first allocation of the sizes to
/// count (a cache picks its path at first use), from a **single-threaded**
/// process: without the kernel no section is ever restarted, and every
/// thread would use CPU 0's records. Not for production use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mm_malloc_count_as_cpu0() -> c_int {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    // SAFETY: the caller's contract (one thread, before the caches' use).
    if !local_lock::rseq::available() && unsafe { local_lock::rseq::assume_cpu0_for_counting() } {
        return 1;
    }
    0
}

/// glibc's `struct mallinfo2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mallinfo2 {
    /// Heap bytes mapped from the OS (the buddy's reservations in use).
    pub arena: size_t,
    /// Free blocks in the buddy.
    pub ordblks: size_t,
    /// Slabs (all kmalloc caches).
    pub smblks: size_t,
    /// Live direct mappings (above the largest block).
    pub hblks: size_t,
    /// Always 0 (the mappings' bytes are not summed).
    pub hblkhd: size_t,
    /// Always 0.
    pub usmblks: size_t,
    /// Bytes of free objects in slabs.
    pub fsmblks: size_t,
    /// Bytes in use: `arena` minus the free bytes below.
    pub uordblks: size_t,
    /// Free bytes: free buddy pages plus free slab objects.
    pub fordblks: size_t,
    /// Always 0.
    pub keepcost: size_t,
}

/// glibc's (deprecated) `struct mallinfo`: [`Mallinfo2`] in `int`s.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mallinfo {
    /// See [`Mallinfo2`].
    pub arena: c_int,
    /// See [`Mallinfo2`].
    pub ordblks: c_int,
    /// See [`Mallinfo2`].
    pub smblks: c_int,
    /// See [`Mallinfo2`].
    pub hblks: c_int,
    /// See [`Mallinfo2`].
    pub hblkhd: c_int,
    /// See [`Mallinfo2`].
    pub usmblks: c_int,
    /// See [`Mallinfo2`].
    pub fsmblks: c_int,
    /// See [`Mallinfo2`].
    pub uordblks: c_int,
    /// See [`Mallinfo2`].
    pub fordblks: c_int,
    /// See [`Mallinfo2`].
    pub keepcost: c_int,
}

/// `mallinfo2(3)` with this allocator's figures (see [`Mallinfo2`]'s
/// fields; objects cached in sheaves count as in use, as
/// `/proc/slabinfo` counts them active).
#[unsafe(no_mangle)]
pub extern "C" fn mallinfo2() -> Mallinfo2 {
    ensure_init();
    let gb = pages().pcp().source();
    let arena = gb.heap_bytes();
    let b = pages().buddy();
    let free_pages = b.total_free_pages() * page_size();
    let (mut slabs, mut free_objs) = (0, 0);
    for c in caches::all() {
        let s = c.slabinfo();
        slabs += s.num_slabs;
        free_objs += (s.num_objs - s.active_objs) * s.objsize;
    }
    let fordblks = free_pages + free_objs;
    Mallinfo2 {
        arena,
        ordblks: (0..=b.config().max_order().get())
            .filter_map(buddy::Order::new)
            .map(|o| b.free_blocks(buddy::ZoneId::new(0), o))
            .sum(),
        smblks: slabs,
        hblks: gb.direct_mappings(),
        hblkhd: 0,
        usmblks: 0,
        fsmblks: free_objs,
        uordblks: arena.saturating_sub(fordblks),
        fordblks,
        keepcost: 0,
    }
}

/// `mallinfo(3)`: [`mallinfo2`] saturated to `int`.
#[unsafe(no_mangle)]
pub extern "C" fn mallinfo() -> Mallinfo {
    let m = mallinfo2();
    let i = |v: usize| c_int::try_from(v).unwrap_or(c_int::MAX);
    Mallinfo {
        arena: i(m.arena),
        ordblks: i(m.ordblks),
        smblks: i(m.smblks),
        hblks: i(m.hblks),
        hblkhd: i(m.hblkhd),
        usmblks: i(m.usmblks),
        fsmblks: i(m.fsmblks),
        uordblks: i(m.uordblks),
        fordblks: i(m.fordblks),
        keepcost: i(m.keepcost),
    }
}

/// `malloc_stats(3)`: this allocator's report on stderr: the kmalloc
/// caches' slabinfo and SLUB statistics, the pcp lists, the buddy's
/// buddyinfo (written through a stack buffer: nothing is allocated).
#[unsafe(no_mangle)]
pub extern "C" fn malloc_stats() {
    ensure_init();
    write_stats();
}

fn write_stats() {
    let mut w = Fd2 { b: [0; 1024], n: 0 };
    let m = mallinfo2();
    let _ = writeln!(
        w,
        "mm-malloc: arena {} in use {} free {} (slab objects {}) slabs {} direct mappings {}",
        m.arena, m.uordblks, m.fordblks, m.fsmblks, m.smblks, m.hblks
    );
    let _ = writeln!(w, "{}", slub::SlabInfo::HEADER);
    for c in caches::all() {
        let _ = writeln!(w, "{}", c.slabinfo());
    }
    let mut st = slub::SlubStats::default();
    for c in caches::all() {
        st.merge(&c.stats());
    }
    let _ = writeln!(w, "{st}");
    let _ = writeln!(w, "{}", pages().pcp().report());
    let _ = writeln!(w, "{}", pages().buddy());
    w.flush();
}

/// A `fmt::Write` to fd 2 through a stack buffer.
struct Fd2 {
    b: [u8; 1024],
    n: usize,
}

impl Fd2 {
    fn flush(&mut self) {
        let mut off = 0;
        while off < self.n {
            // SAFETY: our own buffer, `n` bytes filled.
            let r = unsafe {
                libc::write(
                    STATS_FD.load(Ordering::Relaxed),
                    self.b[off..].as_ptr().cast(),
                    self.n - off,
                )
            };
            if r <= 0 {
                break;
            }
            off += r as usize;
        }
        self.n = 0;
    }
}

impl core::fmt::Write for Fd2 {
    fn write_str(&mut self, mut s: &str) -> core::fmt::Result {
        while !s.is_empty() {
            if self.n == self.b.len() {
                self.flush();
            }
            let k = s.len().min(self.b.len() - self.n);
            self.b[self.n..self.n + k].copy_from_slice(&s.as_bytes()[..k]);
            self.n += k;
            s = &s[k..];
        }
        Ok(())
    }
}

// glibc's internal names, which some programs and libraries call
// directly (as mimalloc and jemalloc also define them).

/// `__libc_malloc`: [`malloc`].
#[unsafe(no_mangle)]
pub extern "C" fn __libc_malloc(size: size_t) -> *mut c_void {
    malloc(size)
}
/// `__libc_free`: [`free`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_free(p: *mut c_void) {
    // SAFETY: C's contract.
    unsafe { free(p) }
}
/// `__libc_calloc`: [`calloc`].
#[unsafe(no_mangle)]
pub extern "C" fn __libc_calloc(n: size_t, size: size_t) -> *mut c_void {
    calloc(n, size)
}
/// `__libc_realloc`: [`realloc`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_realloc(p: *mut c_void, size: size_t) -> *mut c_void {
    // SAFETY: C's contract.
    unsafe { realloc(p, size) }
}
/// `__libc_memalign`: [`memalign`].
#[unsafe(no_mangle)]
pub extern "C" fn __libc_memalign(align: size_t, size: size_t) -> *mut c_void {
    memalign(align, size)
}
/// `__libc_valloc`: [`valloc`].
#[unsafe(no_mangle)]
pub extern "C" fn __libc_valloc(size: size_t) -> *mut c_void {
    valloc(size)
}
/// `__libc_pvalloc`: [`pvalloc`].
#[unsafe(no_mangle)]
pub extern "C" fn __libc_pvalloc(size: size_t) -> *mut c_void {
    pvalloc(size)
}
/// `__posix_memalign`: [`posix_memalign`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __posix_memalign(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
) -> c_int {
    // SAFETY: C's contract.
    unsafe { posix_memalign(out, align, size) }
}
