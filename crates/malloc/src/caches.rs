//! The 25 caches behind `malloc`: kmalloc's 13 classes (8 B to 8 KiB)
//! and the 12 intermediate ones ([`MID_SIZES`]), indexed as their slab
//! tags name them (tag index - 1). They live in this library (not in a
//! `GlobalSlub`; [`large`](crate::large) serves whole pages and mappings)
//! so that [`configure`] can rebuild them at
//! init with the flags and sheaves the environment asks for
//! (`MM_SLUB_DEBUG`, `MM_SHEAF_CAPACITY`): built with the defaults in the
//! image, rebuilt in place before their first use.

use core::cell::UnsafeCell;
use core::mem::{size_of, MaybeUninit};
use core::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, Ordering};

use local_lock::fork::ForkLocks;
use local_lock::std_platform::RseqCpu;
use local_lock::Platform;
use slub::{
    kmalloc_class, kmalloc_index, kmalloc_sheaf_capacity, Geometry, GlobalSlub, SlabFlags,
    KMALLOC_MAX_CACHE_SIZE, KMALLOC_NAMES, KMALLOC_SIZES,
};

/// A cache of this library.
pub type Cache = slub::KmemCache<&'static pcp::GlobalPcp, RseqCpu, SLOTS>;

/// Per-CPU records of each cache (CPU `c` uses record `c`; a CPU beyond
/// them takes the slab paths, locked, without sheaves): 32, not
/// `GlobalSlub`'s 64. Each record is about 650 bytes, and a process maps
/// (and faults in, around what it touches) the caches' image whole: 32
/// records instead of 64 took 400 KiB off a bash process's peak RSS
/// (measured: `bash -c 'x=$(echo 1)'`, 4.9-5.0 MiB -> 4.5-4.7 MiB; glibc
/// 3.0-3.2 MiB; 16 records: 4.3-4.5 MiB).
pub const SLOTS: usize = 32;

/// The intermediate classes' object sizes: quarter steps between the
/// kmalloc classes from 1 KiB to 8 KiB (jemalloc's spacing: 4 classes per
/// doubling), where a power-of-two class wastes up to half of each object
/// (sqlite's page cache asks for 4.1-4.4 KiB per page: 8 KiB each in
/// kmalloc-8k, 5 KiB here). Their slabs are of `slub_max_order` 3 at most
/// (32 KiB: 4 objects of 7 KiB, 25 of 1.25 KiB). Above 8 KiB a slab holds
/// too few objects to beat the buddy's power-of-two blocks, so those stay
/// whole pages.
///
/// 4608 is an extra step (an eighth): it is the one size between 4 and 5
/// KiB that fills a 32 KiB slab (7 objects, 512 bytes left), and it serves
/// what sqlite asks most (measured: a page cache of 4.1-4.5 KiB entries,
/// 10% less peak RSS than with 5120 alone). 1056 and 1152 are two more
/// (1 KiB and a header, 31 and 28 objects per 32 KiB slab): sqlite's
/// 1032-byte allocations (13 MB of its peak) lost 19% of each object in
/// 1280 (measured, sqlite3 peak RSS with the purge policy of
/// [`pages`](crate::pages): 57.9 MB with 1152 alone, 56.5 MB with 1056
/// too; glibc 51.9).
pub const MID_SIZES: [usize; MID] = [
    1056, 1152, 1280, 1536, 1792, 2560, 3072, 3584, 4608, 5120, 6144, 7168,
];
/// Their cache names.
pub const MID_NAMES: [&str; MID] = [
    "malloc-1056",
    "malloc-1152",
    "malloc-1280",
    "malloc-1536",
    "malloc-1792",
    "malloc-2560",
    "malloc-3072",
    "malloc-3584",
    "malloc-4608",
    "malloc-5120",
    "malloc-6144",
    "malloc-7168",
];
/// How many intermediate classes.
pub const MID: usize = 12;
/// Their indexes (after kmalloc's 13).
pub const MID_BASE: usize = 13;
/// How many caches.
pub const NR_CACHES: usize = MID_BASE + MID;

/// Cache `i`'s name.
pub const fn name(i: usize) -> &'static str {
    if i < MID_BASE {
        KMALLOC_NAMES[i]
    } else {
        MID_NAMES[i - MID_BASE]
    }
}

/// Writes cache `i` with `flags` and sheaves of up to `sheaves` objects
/// (capped per class as kmalloc's: an intermediate class as the kmalloc
/// class above it) into its zero slot, in place
/// ([`KmemCache::new_in_zeroed`](slub::KmemCache::new_in_zeroed): the
/// header and node 0 only; the per-CPU records and other nodes stay
/// zero, their pages untouched until a CPU uses them).
///
/// How it was done before, measured: built in a 23 KiB scratch image and
/// its non-zero words copied to the slot (6 pages of scratch resident in
/// every process, `tr` 300k of its 800k instructions in the build's
/// memset and copy, callgrind); built on the stack (28 KiB more stack
/// resident); written whole in place (6 page faults and an `madvise` per
/// class).
///
/// # Safety
///
/// Under the build lock, cache `i` not built (its slot all zero).
#[inline(never)]
unsafe fn write_image(i: usize, flags: SlabFlags, sheaves: usize) {
    let (size, class) = if i < MID_BASE {
        (KMALLOC_SIZES[i], i)
    } else {
        (
            MID_SIZES[i - MID_BASE],
            kmalloc_index(MID_SIZES[i - MID_BASE]),
        )
    };
    // Debug caches put a red zone before each object: ask for malloc's
    // alignment (the plain classes from 16 on have it from their stride).
    let align = if flags.is_debug() && size >= 16 {
        16
    } else {
        8
    };
    let slot = CACHES[i + 1].cache.get().cast::<Cache>();
    // SAFETY: the caller's contract: the slot is zero and ours (a `Slot`
    // aligns the cache).
    unsafe {
        Cache::new_in_zeroed(
            slot,
            name(i),
            size,
            align,
            flags,
            Geometry::new(64),
            crate::pages::pages(),
            RseqCpu::new(),
        )
    };
    // SAFETY: just written; nobody else reads it before its bit is set.
    let c = unsafe { &mut *slot };
    c.set_kmalloc_index(i);
    c.set_sheaves(kmalloc_sheaf_capacity(class, sheaves));
}

/// One cache's storage: zero (in `.bss`) until [`configure`] writes the
/// cache at init, shared (`&`) afterwards.
///
/// Why not a `const` image in `.data`: the caches (23 then) were 530 KB, nearly
/// all zero (32 per-CPU records each), and `.data` is a private file
/// mapping, whose first read of a page maps the 16 pages around it
/// (the kernel's fault-around): every process paid about 480 KB of RSS
/// for them. In `.bss` a page costs only once written: a build writes only
/// the cache's header and node 0 ([`write_image`]), and the pages that
/// would hold only zeros (most of the per-CPU records, touched later as
/// CPUs use them) are never touched. Measured, peak RSS of `git
/// --version`: 5.26 -> 4.84 MiB (glibc 3.78).
///
/// Page-aligned, the cache [`SLOT_PAD`] bytes into it: the first CPUs'
/// lock slots, the header, node 0 and the first CPUs' sheaf words and
/// fast records are then on one page (slub's `repr(C)` layout): one page
/// of a class that a process uses (two while the sheaf words, the fast
/// records and the nodes were three arrays, three or five before).
///
/// Each slot is [`SLOT_BYTES`] (a power of two) and slot `t` holds the
/// cache of page-map tag `t` (cache `t - 1`; slot 0 and those past
/// [`NR_CACHES`] stay zero): `free` finds the cache of a map byte by a
/// shift and an add, with no range check and no table
/// ([`slot_of_tag`]). The slots past the caches are never touched: only
/// address space.
#[repr(C, align(4096))]
pub struct Slot {
    _pad: [u8; SLOT_PAD],
    cache: UnsafeCell<MaybeUninit<Cache>>,
    _tail: [u8; SLOT_TAIL],
}

/// A [`Slot`]'s size.
pub const SLOT_BYTES: usize = 32 << 10;
const SLOT_TAIL: usize = SLOT_BYTES - SLOT_PAD - size_of::<Cache>();
/// Slots: one per tag a map byte can carry (5 bits).
const NR_SLOTS: usize = 32;

/// The bytes before the cache in its [`Slot`]: the least (at the cache's
/// alignment) that puts [`Cache::FIRST_CPUS_AT`] at or after a page
/// boundary.
const SLOT_PAD: usize = Cache::FIRST_CPUS_PAD;
const _: () = assert!(SLOT_PAD.is_multiple_of(core::mem::align_of::<Cache>()));
// The first CPUs' records, the header and node 0 on one page.
const _: () = assert!(
    (SLOT_PAD + Cache::FIRST_CPUS_AT) % 4096 + Cache::FIRST_CPUS_SPAN <= 4096,
    "the first CPUs' records span two pages"
);

// SAFETY: the cache is `Sync`; the one `&mut` access (`configure`) happens
// before any other thread can reach it (see `configure`).
unsafe impl Sync for Slot {}

/// The caches, kmalloc's then the intermediate ones: zero until
/// [`configure`] (hardened, with sheaves, as `GlobalSlub::new`'s, unless the
/// environment says otherwise).
static CACHES: [Slot; NR_SLOTS] = [const {
    Slot {
        _pad: [0; SLOT_PAD],
        cache: UnsafeCell::new(MaybeUninit::zeroed()),
        _tail: [0; SLOT_TAIL],
    }
}; NR_SLOTS];

// A slot is whole pages (what `.bss` gives back untouched), of the size
// `slot_of_tag` scales by; every cache has a slot (tags 1..=NR_CACHES).
const _: () = assert!(size_of::<Slot>() == SLOT_BYTES);
const _: () = assert!(NR_CACHES < NR_SLOTS && NR_SLOTS == 1 << 5);

/// Bit `i`: cache `i` was written ([`ensure_built`]); before that its slot
/// is zero, not a cache, and [`cache`] must not be called for it.
static BUILT: AtomicU32 = AtomicU32::new(0);

/// Serialises [`ensure_built`] (and keeps builds out of a `fork`).
static BUILD_LOCK: AtomicBool = AtomicBool::new(false);

/// What [`configure`] recorded for the builds: per-cache debug flags and
/// the sheaf capacity (written once at init, before any build).
struct Settings(UnsafeCell<([SlabFlags; NR_CACHES], usize)>);

// SAFETY: written once by `configure` before any reader (a build follows
// the library's init, which publishes it with a release store).
unsafe impl Sync for Settings {}

static SETTINGS: Settings = Settings(UnsafeCell::new((
    [SlabFlags::NONE; NR_CACHES],
    GlobalSlub::DEFAULT_SHEAVES,
)));

// `NR_CACHES` bits fit `BUILT`.
const _: () = assert!(NR_CACHES <= 32);

/// Whether cache `i` exists.
#[inline(always)]
pub fn built(i: usize) -> bool {
    BUILT.load(Ordering::Acquire) & (1 << i) != 0
}

/// Where cache `i` is or will be (`None` for an index out of range, with
/// no bounds check's panic call): all zero until [`built`], the cache
/// afterwards, for the process's life (see `Cache::alloc_fast_checked_in`).
#[inline(always)]
pub fn slot(i: usize) -> Option<*const Cache> {
    CACHES
        .get(i.wrapping_add(1))
        .map(|s| s.cache.get().cast::<Cache>().cast_const())
}

/// Cache `i` (`i < NR_CACHES`), once [`built`].
#[inline(always)]
pub fn cache(i: usize) -> &'static Cache {
    debug_assert!(built(i));
    // SAFETY: written by `ensure_built` (the only writer) before its bit
    // was set (the callers check `built`, or reach the cache through one
    // of its slabs, or call `ensure_built` first).
    unsafe { (*CACHES[i + 1].cache.get()).assume_init_ref() }
}

fn build_lock() {
    while BUILD_LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // SAFETY: no memory preconditions.
        unsafe { libc::sched_yield() };
    }
}

fn build_unlock() {
    BUILD_LOCK.store(false, Ordering::Release);
}

/// Cache `i`, written first if it is not yet: caches are built on first
/// use, so a process pays (in time at start, and in pages of `.bss`
/// touched) only for the classes it uses (measured, a loop of `/bin/true`
/// execs: 1035 -> 925 us each; glibc 645, mimalloc 755).
pub fn ensure_built(i: usize) -> &'static Cache {
    if !built(i) {
        build_slow(i);
    }
    cache(i)
}

#[cold]
#[inline(never)]
fn build_slow(i: usize) {
    build_lock();
    if !built(i) {
        // SAFETY: `configure` ran (the library's init precedes every
        // build) and nothing writes the settings afterwards.
        let (debug, sheaves) = unsafe { *SETTINGS.0.get() };
        let f = debug[i];
        let flags = if f.is_debug() {
            f
        } else {
            GlobalSlub::DEFAULT_FLAGS
        };
        // SAFETY: the build lock is held and the cache is not built: its
        // slot is zero and ours.
        unsafe { write_image(i, flags, sheaves) };
        BUILT.fetch_or(1 << i, Ordering::Release);
        claim_map_tag(i);
    }
    build_unlock();
}

/// How many objects a class that is not built yet (cold) takes from a
/// larger class ([`lender`]) before it is built. A built cache costs a
/// process its written records (about 4 pages of `.bss`: the cache's
/// first page, CPU 0's lock slot, fast record and sheaves, and its node;
/// see [`Slot`]), a first slab and a sheaf page or two, and faults them in
/// again after each `fork`: 6-8 pages, whether it serves one object or
/// thousands. Small programs ask for a few objects of many classes (a
/// `git commit`: 1 to 12 objects each of 128, 1024, 1536, 1792, 2048,
/// 2560, 3584 and 6144 bytes; `tr`: 18 of 1056, one of 1536 and 1792);
/// those are now objects of a larger class (at most `COLD_OBJECTS` per
/// class, at most twice their size: a few KiB of waste in any program)
/// instead of caches of their own. Off under `MM_SLUB_DEBUG` (each
/// object stays in its own, possibly debug, cache).
pub const COLD_OBJECTS: u16 = 32;

/// Objects served so far for each cold class (see [`COLD_OBJECTS`]).
static COLD: [AtomicU16; NR_CACHES] = [const { AtomicU16::new(0) }; NR_CACHES];

/// `MM_SLUB_DEBUG` is set: every class builds its own cache at once.
static NO_LENDING: AtomicBool = AtomicBool::new(false);

/// Cache `i`'s object size (without debug metadata).
pub const fn object_size(i: usize) -> usize {
    if i < MID_BASE {
        KMALLOC_SIZES[i]
    } else {
        MID_SIZES[i - MID_BASE]
    }
}

/// The class that lends cold class `i` its objects: the smallest built
/// class at most twice as large, else the power of two above a class that
/// is not one (malloc-1536: kmalloc-2k, built for it), else `i` itself (a
/// power-of-two class with no built class above it builds its own cache).
pub fn lender(i: usize) -> usize {
    let size = object_size(i);
    let mut best = None;
    for j in 0..NR_CACHES {
        let s = object_size(j);
        if s > size && s <= 2 * size && built(j) && best.is_none_or(|b| s < object_size(b)) {
            best = Some(j);
        }
    }
    match best {
        Some(j) => j,
        None if size.is_power_of_two() => i,
        None => kmalloc_index(size.next_power_of_two()),
    }
}

/// Where a cold class's object comes from ([`cold_class`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cold {
    /// This cache (built for it if it is not yet).
    Cache(usize),
    /// A block of whole pages (kmalloc's large path, `large::alloc`).
    Pages,
}

/// Objects of at least this size, of a cold class whose [`lender`] is not
/// built (itself, or the power of two above it), are blocks of whole pages ([`Cold::Pages`]): a page or two
/// for each of the few objects a small program asks for, at most twice
/// the object, instead of a cache built for them (its slot's pages, a
/// first slab, a sheaf). Measured, a shell running a fork loop built
/// kmalloc-2k, -4k and -8k for 5 to 18 objects each (issue #18).
pub const COLD_PAGES_FROM: usize = 2048;

/// Where an object of class `i` comes from when cache `i` is not built:
/// for its first [`COLD_OBJECTS`] objects, its [`lender`], or whole pages
/// if that is not built and the objects are of [`COLD_PAGES_FROM`] bytes
/// or more;
/// then cache `i` itself. (Counted without a read-modify-write: threads
/// racing on a cold class may lend a few objects more.)
pub fn cold_class(i: usize) -> Cold {
    if NO_LENDING.load(Ordering::Relaxed) {
        return Cold::Cache(i);
    }
    let n = COLD[i].load(Ordering::Relaxed);
    if n >= COLD_OBJECTS {
        return Cold::Cache(i);
    }
    COLD[i].store(n + 1, Ordering::Relaxed);
    match lender(i) {
        l if !built(l) && object_size(i) >= COLD_PAGES_FROM => Cold::Pages,
        l => Cold::Cache(l),
    }
}

/// Every cache built so far.
pub fn all() -> impl DoubleEndedIterator<Item = &'static Cache> {
    (0..NR_CACHES).filter(|&i| built(i)).map(cache)
}

/// `MID_CLASS[(size + 31) / 32]`: the intermediate class for a size up
/// to 7168 bytes (every class is a multiple of 32), or `NONE` where the
/// kmalloc class is as small.
const MID_CLASS: [u8; 225] = {
    let mut t = [NONE; 225];
    let mut k = 1;
    while k < 225 {
        let size = k * 32;
        let kmalloc = KMALLOC_SIZES[kmalloc_index(size)];
        let mut j = 0;
        while j < MID {
            if MID_SIZES[j] >= size && MID_SIZES[j] < kmalloc {
                t[k] = j as u8;
                break;
            }
            j += 1;
        }
        k += 1;
    }
    t
};
const NONE: u8 = u8::MAX;

/// The intermediate class for `size`, if it is smaller than the kmalloc
/// class (1025..=7168 bytes, except sizes kmalloc serves as well).
#[cfg(test)]
fn mid_class(size: usize) -> Option<usize> {
    if size <= 1024 || size > 7168 {
        return None;
    }
    // (`get`: no bounds check's panic call in `malloc`'s fast path.)
    match MID_CLASS.get(size.div_ceil(32)) {
        Some(&j) if j != NONE => Some(j as usize),
        _ => None,
    }
}

/// The cache for `size` (at most 8 KiB; 0 as 1): intermediate or
/// kmalloc, by one byte load from [`CLASS8`] (every class is a multiple
/// of 8 bytes), as jemalloc's `sz_size2index_tab`: no `max(1)`, no range
/// split between a table and a bit scan, no bounds check (the table's
/// entries are below [`NR_CACHES`], checked when it is built).
#[inline(always)]
pub fn class(size: usize) -> usize {
    debug_assert!(size <= KMALLOC_MAX_CACHE_SIZE);
    let i = CLASS8[(size + 7) >> 3] as usize;
    // SAFETY: every entry of `CLASS8` is below `NR_CACHES` (its builder
    // asserts it at compile time).
    unsafe { core::hint::assert_unchecked(i < NR_CACHES) };
    i
}

/// [`class`] by arithmetic and the intermediate table (what [`CLASS8`]
/// holds; a size of 1..=8192).
const fn class_of(size: usize) -> usize {
    if size > 1024 && size <= 7168 {
        let j = MID_CLASS[size.div_ceil(32)];
        if j != NONE {
            return MID_BASE + j as usize;
        }
    }
    kmalloc_index(size)
}

/// `CLASS8[(size + 7) >> 3]`: the class of every size up to 8 KiB.
static CLASS8: [u8; KMALLOC_MAX_CACHE_SIZE / 8 + 1] = {
    let mut t = [0u8; KMALLOC_MAX_CACHE_SIZE / 8 + 1];
    let mut k = 0;
    while k < t.len() {
        let size = if k == 0 { 1 } else { k * 8 };
        let c = class_of(size);
        assert!(c < NR_CACHES);
        // (Each size of the bucket, `size - 7..=size`, has this class:
        // class sizes are multiples of 8.)
        assert!(k == 0 || class_of(size - 7) == c);
        t[k] = c as u8;
        k += 1;
    }
    t
};

/// The kmalloc cache for `size` whose objects are aligned to `align`
/// (each cache's real alignment: debug caches have red zones in the
/// stride), or `None` for whole pages (`Kmalloc::class` over these
/// caches).
pub fn class_aligned(size: usize, align: usize) -> Option<usize> {
    let mut i = kmalloc_class(size, align)?;
    while i < MID_BASE {
        if ensure_built(i).object_align() >= align {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// What `MM_SLUB_DEBUG` asked for: flags per cache.
pub struct DebugConfig {
    /// The debug flags of each cache (`NONE`: the default).
    pub flags: [SlabFlags; NR_CACHES],
}

/// Parses `MM_SLUB_DEBUG` as the kernel's `slub_debug=`: blocks separated
/// by `;`, each `FLAGS[,cache[,cache...]]`. `FLAGS` are letters: `F`
/// consistency checks, `Z` red zones, `P` poisoning, `U` owner tracking
/// (case-insensitive), `-` none; other letters (`T`, `A`, `O`) are
/// ignored; an empty value means `FZPU`. Without cache names a block
/// applies to every cache; a name may end with `*` (a prefix), e.g.
/// `Z,kmalloc-*`. A later block overrides an earlier one.
// (Out of line and cold: only a process with `MM_SLUB_DEBUG` runs it, and
// its code stays out of the text every process has resident.)
#[cold]
#[inline(never)]
pub fn parse_slub_debug(v: &[u8]) -> DebugConfig {
    let mut c = DebugConfig {
        flags: [SlabFlags::NONE; NR_CACHES],
    };
    for block in v.split(|&b| b == b';') {
        let mut parts = block.split(|&b| b == b',');
        let letters = parts.next().unwrap_or(&[]);
        let mut f = SlabFlags::NONE;
        for &l in letters {
            f = f.union(match l.to_ascii_uppercase() {
                b'F' => SlabFlags::CONSISTENCY_CHECKS,
                b'Z' => SlabFlags::RED_ZONE,
                b'P' => SlabFlags::POISON,
                b'U' => SlabFlags::STORE_USER,
                _ => SlabFlags::NONE,
            });
        }
        if letters.is_empty() {
            f = SlabFlags::DEBUG_ALL;
        }
        let mut named = false;
        for n in parts.filter(|n| !n.is_empty()) {
            named = true;
            for (i, slot) in c.flags.iter_mut().enumerate() {
                let name = name(i).as_bytes();
                let hit = match n.strip_suffix(b"*") {
                    Some(prefix) => name.starts_with(prefix),
                    None => name == n,
                };
                if hit {
                    *slot = f;
                }
            }
        }
        if !named {
            c.flags = [f; NR_CACHES];
        }
    }
    c
}

/// Records the caches' settings: `debug[i]`'s flags (debug caches: no
/// sheaves, every operation checked under the list lock, as the kernel's)
/// or the defaults, and sheaves of up to `sheaves` objects per class.
/// Each cache is written at its first use ([`ensure_built`]), in place,
/// its header only ([`write_image`]).
///
/// # Safety
///
/// Once, before any cache is built: no allocation, no other thread (the
/// library's init, single-threaded, before its first object).
pub unsafe fn configure(debug: &[SlabFlags; NR_CACHES], sheaves: usize) {
    NO_LENDING.store(debug.iter().any(|f| f.is_debug()), Ordering::Relaxed);
    // SAFETY: the contract: nobody reads the settings yet.
    unsafe { *SETTINGS.0.get() = (*debug, sheaves) };
}

/// Fork handlers of the caches (as slub's for `GlobalSlub`).
pub struct CachesFork;

/// The slots a CPU of this machine can use (CPU `c` uses slot `c`; with
/// more than [`SLOTS`] configured CPUs, all of them): only those are locked around
/// `fork` (each lock taken costs a copy-on-write fault on its page in the
/// parent and the child).
fn fork_slots() -> core::ops::Range<usize> {
    0..RseqCpu::new().nr_cpus().min(SLOTS)
}

/// `prepare` found the process single-threaded and took no lock.
static FORK_SKIPPED: AtomicBool = AtomicBool::new(false);

impl ForkLocks for CachesFork {
    fn fork_prepare(&self) {
        let skip = local_lock::fork::single_threaded();
        FORK_SKIPPED.store(skip, Ordering::Relaxed);
        if skip {
            return;
        }
        // No cache is built meanwhile (a half-written slot in the child).
        build_lock();
        for c in all() {
            // SAFETY: RseqCpu locks every slot.
            unsafe { c.fork_lock(fork_slots()) };
        }
    }
    unsafe fn fork_parent(&self) {
        if FORK_SKIPPED.load(Ordering::Relaxed) {
            return;
        }
        for c in all().rev() {
            // SAFETY: taken by `fork_prepare` on this thread.
            unsafe { c.fork_unlock(fork_slots()) };
        }
        build_unlock();
    }
    unsafe fn fork_child(&self) {
        if FORK_SKIPPED.load(Ordering::Relaxed) {
            return;
        }
        for c in all().rev() {
            // SAFETY: taken by `fork_prepare` on the thread this child
            // copies.
            unsafe { c.fork_unlock(fork_slots()) };
        }
        build_unlock();
    }
}

/// The caches' fork handlers.
pub static CACHES_FORK: CachesFork = CachesFork;

/// Gives built cache `i` page-map tag `i + 1` ([`KmemCache::set_map_tag`],
/// before its first slab): `free` then finds an object's cache from its
/// page's map byte by arithmetic ([`cache_of_tag`]). Called by the build,
/// under the build lock.
///
/// [`KmemCache::set_map_tag`]: slub::KmemCache::set_map_tag
fn claim_map_tag(i: usize) {
    const _: () = assert!(NR_CACHES < 32, "tags are 1..=31");
    // SAFETY: every cache on `PAGES` (this library's source) is one of
    // these, each given its own tag `i + 1` here; a cache that cannot take
    // it keeps none and its frees take the descriptor path.
    let _ = unsafe { cache(i).set_map_tag(i as u8 + 1) };
}

/// The cache whose slabs carry page-map byte `b` (0: none): tag `t` is
/// cache `t - 1` ([`claim_map_tag`]). A tagged page is a slab's, so the
/// cache was built before the byte was set.
#[inline(always)]
pub fn cache_of_tag(b: u8) -> Option<&'static Cache> {
    let t = usize::from(b >> 3);
    // (`wrapping_sub`: tag 0, no cache, becomes an index out of range.)
    let i = t.wrapping_sub(1);
    (i < NR_CACHES).then(|| cache(i))
}

/// Where the cache of page-map byte `b` is or would be: slot `b >> 3`
/// (see [`Slot`]), all zero unless it holds a built cache with that tag
/// (for [`Cache::free_fast_tag_in`]). No check, no table: every byte
/// names a slot.
#[inline(always)]
pub fn slot_of_tag(b: u8) -> *const Cache {
    // (Slot `b >> 3`, below NR_SLOTS (5 bits), at byte `(b & 0xf8) << 12`:
    // an `and` and a shift. In bounds: a pointer into `CACHES`.)
    const _: () = assert!(SLOT_BYTES >> 3 == 1 << 12);
    CACHES
        .as_ptr()
        .cast::<u8>()
        .wrapping_add(((usize::from(b) & 0xf8) << 12) + SLOT_PAD)
        .cast::<Cache>()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cache's objects lead back to it through the page map (what
    /// `free` uses instead of the descriptor walk).
    #[test]
    fn page_map_tags_name_each_cache() {
        use buddy::PageAlloc;
        for i in 0..NR_CACHES {
            let c = ensure_built(i);
            let p = c.alloc().unwrap();
            let t = crate::pages::pages().page_tag(p.as_ptr());
            let back = cache_of_tag(t).expect("tagged");
            assert!(core::ptr::eq(back, c), "{}", name(i));
            // `free`'s way: the map byte from its copy of the map's place,
            // the cache at the slot of the byte's tag.
            crate::pages::publish_free_map();
            assert_eq!(crate::pages::page_byte(p.as_ptr()), Some(t), "{}", name(i));
            assert!(core::ptr::eq(slot_of_tag(t), c), "{}", name(i));
            // The same byte sizes the object (malloc_usable_size's fast
            // path), and refuses an address inside it and another
            // cache's byte.
            assert_eq!(
                c.ksize_by_map_byte(p.as_ptr(), t),
                Some(c.object_size()),
                "{}",
                name(i)
            );
            assert_eq!(
                c.ksize_by_map_byte(p.as_ptr().wrapping_add(4), t),
                None,
                "{}",
                name(i)
            );
            let other = ((((i + 1) % NR_CACHES) as u8 + 1) << 3) | (t & 7);
            assert_eq!(c.ksize_by_map_byte(p.as_ptr(), other), None, "{}", name(i));
            // SAFETY: ours, freed once.
            unsafe { c.free(p) };
        }
        assert!(cache_of_tag(0).is_none(), "an untagged page names no cache");
        // The slots of tag 0 and of the tags past the caches hold no cache
        // (zero: `free_fast_tag_in` declines at once).
        for t in (0..32u8).filter(|&t| t == 0 || usize::from(t) > NR_CACHES) {
            let s = slot_of_tag(t << 3).cast::<u8>();
            // SAFETY: a slot of `CACHES`, never written.
            let bytes = unsafe { core::slice::from_raw_parts(s, size_of::<Cache>()) };
            assert!(bytes.iter().all(|&b| b == 0), "slot {t}");
        }
        assert_eq!(crate::pages::page_byte(core::ptr::null()), None);
    }

    /// A cache written in place into a zero slot ([`write_image`]'s
    /// `new_in_zeroed`) writes one page: its header's, with node 0 and the
    /// first CPUs' lock slots, sheaf words and fast records (two before:
    /// node 0 and the sheaf words were on another). Into a fresh mapping
    /// laid out as a [`Slot`], the other pages stay out of memory
    /// (`mincore`), as the slots' in `.bss` do; a typed write of the whole
    /// cache (or of a scratch image) wrote all six.
    #[test]
    fn a_cache_built_in_place_writes_one_page() {
        const PAGE: usize = 4096;
        let pages = size_of::<Slot>() / PAGE;
        // SAFETY: a fresh anonymous mapping (reads as zero).
        let m = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                pages * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(m, libc::MAP_FAILED);
        let slot = m.cast::<u8>().wrapping_add(SLOT_PAD).cast::<Cache>();
        // SAFETY: within the mapping, aligned (page-aligned + `SLOT_PAD`),
        // all zero, ours.
        unsafe {
            Cache::new_in_zeroed(
                slot,
                "t",
                64,
                8,
                GlobalSlub::DEFAULT_FLAGS,
                Geometry::new(64),
                crate::pages::pages(),
                RseqCpu::new(),
            )
        };
        let mut vec = vec![0u8; pages];
        // SAFETY: the mapping and a byte per page.
        let rc = unsafe { libc::mincore(m, pages * PAGE, vec.as_mut_ptr()) };
        assert_eq!(rc, 0);
        let resident = (0..pages).filter(|&p| vec[p] & 1 != 0).count();
        // SAFETY: written above; only read.
        assert_eq!(unsafe { &*slot }.name(), "t");
        assert_eq!(resident, 1, "pages written by the build: {vec:?}");
        // SAFETY: the mapping made above (the cache never used: nothing to
        // drop).
        unsafe { libc::munmap(m, pages * PAGE) };
    }

    #[test]
    fn mid_classes_are_the_smallest_that_fit() {
        for size in 1..=8192 {
            let kmalloc = KMALLOC_SIZES[kmalloc_index(size)];
            match mid_class(size) {
                Some(j) => {
                    assert!(MID_SIZES[j] >= size, "{size}");
                    assert!(MID_SIZES[j] < kmalloc, "{size}");
                    assert!(j == 0 || MID_SIZES[j - 1] < size || MID_SIZES[j - 1] >= kmalloc);
                }
                None => assert!(
                    MID_SIZES.iter().all(|&m| m < size || m >= kmalloc),
                    "{size}: an intermediate class would fit better"
                ),
            }
        }
        // The one-table class is the intermediate class where there is
        // one, else the kmalloc class; 0 is 1's.
        for size in 0..=8192 {
            let want = match mid_class(size.max(1)) {
                Some(j) => MID_BASE + j,
                None => kmalloc_index(size.max(1)),
            };
            assert_eq!(class(size), want, "{size}");
            assert!(object_size(class(size)) >= size, "{size}");
        }
        assert_eq!(mid_class(4400), Some(8), "sqlite's pages: malloc-4608");
        assert_eq!(mid_class(1032), Some(0), "sqlite's 1032: malloc-1056");
        assert_eq!(mid_class(1100), Some(1), "malloc-1152");
    }

    #[test]
    fn slub_debug_syntax() {
        let all = parse_slub_debug(b"");
        assert!(all.flags.iter().all(|&f| f == SlabFlags::DEBUG_ALL));
        let z = parse_slub_debug(b"z");
        assert!(z.flags.iter().all(|&f| f == SlabFlags::RED_ZONE));
        let some = parse_slub_debug(b"FZ,kmalloc-64,malloc-4608");
        let fz = SlabFlags::CONSISTENCY_CHECKS.union(SlabFlags::RED_ZONE);
        for i in 0..NR_CACHES {
            let want = if name(i) == "kmalloc-64" || name(i) == "malloc-4608" {
                fz
            } else {
                SlabFlags::NONE
            };
            assert_eq!(some.flags[i], want, "{}", name(i));
        }
        let glob = parse_slub_debug(b"P,malloc-*;-,malloc-1280");
        assert_eq!(glob.flags[MID_BASE + 2], SlabFlags::NONE);
        assert_eq!(glob.flags[MID_BASE + 3], SlabFlags::POISON);
        assert_eq!(glob.flags[0], SlabFlags::NONE);
    }
}
