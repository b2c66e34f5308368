//! `slub-pairs`, `slub-batch`, `slub-2t`, `slub-prodcons`, `slub-larson`:
//! this family's SLUB (`GlobalSlub`, i.e. kmalloc over per-thread pcp pages,
//! and `KmemCache`, the kernel's `kmem_cache_alloc` of one exact size)
//! beside the allocators a user would pick instead, measured in the same
//! run, interleaved, pinned, medians over rounds.
//!
//! * **`slub-pairs`**: one alloc + free pair of 16, 64, 256, 1024, 4096 B
//!   (`Layout` align 8) per operation. Seed 001 (the SLUB `local_lock`
//!   series) claims the fast paths are untouched by the conversion on !RT
//!   and that RT takes the local lock on them: the two `KmemCache` rows on
//!   the kernel platform are exactly those two fast paths.
//! * **`slub-batch`**: allocate N objects of 64 B, then free the N
//!   (N = 1, 4, ..., 16384), per object, alloc and free phases apart (seed
//!   000's shape, applied to objects).
//! * **`slub-2t`**: 64 B pairs on one thread, then on two pinned threads at
//!   once (the runner's two-CPU check beside them): per-thread caches scale,
//!   heaps behind one lock collapse.
//! * **`slub-prodcons`**: seed 004 (Eric Dumazet's SLUB producer/consumer
//!   problem): a producer thread allocates 64 B (and 256 B) objects, writes
//!   them and passes them through a bounded single-producer single-consumer
//!   ring ([`Ring`], 1024 entries, the depth of a NIC RX ring) to a
//!   consumer thread on the other CPU, which reads and frees them. Every
//!   free is remote. Then the same in batches of 64 (the seed: "batch
//!   things a bit like SLAB"): the producer allocates 64 at a time and the
//!   consumer frees 64 at a time, the SLUB rows through
//!   `kmem_cache_alloc_bulk` / `kmem_cache_free_bulk`
//!   ([`ObjHeap::alloc_batch`], [`ObjHeap::free_batch`]; the peers, with no
//!   bulk API, loop). Every section has a floor row, "ring only (no
//!   allocator)": the same ring fed round-robin from a fixed pool, nothing
//!   allocated or freed (the queue and the cache-line transfer alone; not a
//!   peer). After the table, one fixed run per SLUB row (and per SLUB row
//!   in batches at 256 B) prints the SLUB statistics it caused, in the
//!   seed's `grep . *` format with per-CPU splits, and per 1000 allocations
//!   (objects passed) beside the seed's skbuff_head_cache.
//! * **`slub-larson`**: a Larson-style server churn: each of two threads
//!   replaces random slots (its own region 7 times in 8, another thread's
//!   1 in 8, so about a quarter of the frees are remote) of an array of
//!   objects of random sizes 16..=1024 B, for a fixed time; ops/s and the
//!   peak resident memory. Each allocator runs in its own child process
//!   (the runner re-executed with a hidden flag, [`larson_child_main`]) so
//!   its `VmHWM` is its own.
//!
//! The competitors ([`Competitors`]) are `GlobalAlloc`s used as objects
//! (none is installed as the global allocator): `GlobalSlub` (a static),
//! `KmemCache`s over `GlobalPages` (the same pcp pages as `GlobalSlub`), glibc
//! (`System`), mimalloc, jemalloc, snmalloc, rpmalloc, and the `no_std` heaps
//! talc, linked_list_allocator and buddy_system_allocator, each over its own
//! fixed arena ([`ARENA_BYTES`], `MAP_NORESERVE`) behind the spin lock it
//! would need as a global allocator. They are monomorphised into the
//! measuring loops through [`ObjHeap`] (no `dyn` call per object).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use local_lock::kernel::Kernel;
use local_lock::std_platform::PerThread;
use local_lock::sync::CachePadded;
use local_lock::Platform;
use slub::{GlobalPages, GlobalSlub, KmemCache, SlabFlags, SlubStat, SlubStats};

use super::pages::{fastest, median_of, verdict, Mapping};
use super::Table;
use crate::measure::{
    alloc_free_case, arithmetic, black_box, fmt_num, per_item, phase_note, pin_current_thread,
    two_cpu_check, with_phases, AllocFree, Case, Clock, Ctx, Phases, Report, Row, Spread, Stats,
    Stopwatch,
};
use crate::user_kernel::{UserHooks, UserKernel};

// ---------------------------------------------------------------------------
// The competitors
// ---------------------------------------------------------------------------

/// Bytes of each `no_std` heap's arena (`MAP_NORESERVE`: only what a heap
/// touches becomes resident).
pub const ARENA_BYTES: usize = 256 << 20;

/// The alignment every table asks for (the kernel's `ARCH_KMALLOC_MINALIGN`
/// on x86-64, and what a `u64` needs).
pub const ALIGN: usize = 8;

/// `Layout` of `size` bytes aligned to [`ALIGN`].
#[inline(always)]
pub fn layout(size: usize) -> Layout {
    match Layout::from_size_align(size, ALIGN) {
        Ok(l) => l,
        Err(_) => panic!("mm-bench: bad object size {size}"),
    }
}

/// An object allocator as the tables drive it.
pub trait ObjHeap: Send + Sync + 'static {
    /// An object of `l` (never null: exhaustion panics).
    fn alloc(&self, l: Layout) -> NonNull<u8>;

    /// Frees an object.
    ///
    /// # Safety
    ///
    /// `p` came from this heap's `alloc` with `l` and is not used afterwards.
    unsafe fn free(&self, p: NonNull<u8>, l: Layout);

    /// Called first on worker thread `t` of a multi-thread case (kernel
    /// platform rows make it virtual CPU `t + 1`).
    fn enter_thread(&self, t: usize) {
        let _ = t;
    }

    /// Fills every slot of `out` with an object of `l` (never null:
    /// exhaustion panics, as in [`alloc`](Self::alloc)). The default is one
    /// [`alloc`](Self::alloc) per slot; the SLUB rows override it with
    /// `kmem_cache_alloc_bulk`.
    #[inline(always)]
    fn alloc_batch(&self, l: Layout, out: &mut [*mut u8]) {
        alloc_each(self, l, out)
    }

    /// Frees every object of `objs`. The default is one
    /// [`free`](Self::free) per object; the SLUB rows override it with
    /// `kmem_cache_free_bulk`.
    ///
    /// # Safety
    ///
    /// Every pointer came from this heap's `alloc` or `alloc_batch` with
    /// `l`, appears once, and is not used afterwards.
    #[inline(always)]
    unsafe fn free_batch(&self, objs: &[NonNull<u8>], l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { free_each(self, objs, l) }
    }
}

/// [`ObjHeap::alloc_batch`] as one [`ObjHeap::alloc`] per slot.
#[inline(always)]
fn alloc_each<A: ObjHeap + ?Sized>(a: &A, l: Layout, out: &mut [*mut u8]) {
    for s in out.iter_mut() {
        *s = a.alloc(l).as_ptr();
    }
}

/// [`ObjHeap::free_batch`] as one [`ObjHeap::free`] per object.
///
/// # Safety
///
/// As [`ObjHeap::free_batch`].
#[inline(always)]
unsafe fn free_each<A: ObjHeap + ?Sized>(a: &A, objs: &[NonNull<u8>], l: Layout) {
    for &p in objs {
        // SAFETY: the caller's contract, object by object.
        unsafe { a.free(p, l) };
    }
}

/// `kmem_cache_alloc_bulk` of `cache` into `out`; the slots it did not fill
/// (it fills all or, when the pages run out, none) one object at a time,
/// panicking if memory is really exhausted.
#[inline(always)]
fn cache_alloc_bulk<S: slub::SlabSource, P: Platform, const N: usize>(
    cache: &KmemCache<S, P, N>,
    l: Layout,
    out: &mut [*mut u8],
) {
    let got = cache.alloc_bulk(out);
    for s in &mut out[got..] {
        match cache.alloc() {
            Some(p) => *s = p.as_ptr(),
            None => exhausted(cache.name(), l),
        }
    }
}

#[cold]
#[inline(never)]
fn exhausted(who: &str, l: Layout) -> ! {
    panic!("mm-bench: {who} could not allocate {} B", l.size())
}

/// Any `GlobalAlloc` (glibc, mimalloc, jemalloc, snmalloc, rpmalloc).
pub struct Heap<G>(pub G);

impl<G: GlobalAlloc + Send + Sync + 'static> ObjHeap for Heap<G> {
    #[inline(always)]
    fn alloc(&self, l: Layout) -> NonNull<u8> {
        // SAFETY: every table's layouts have a non-zero size.
        match NonNull::new(unsafe { self.0.alloc(l) }) {
            Some(p) => p,
            None => exhausted(core::any::type_name::<G>(), l),
        }
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { self.0.dealloc(p.as_ptr(), l) }
    }
    fn enter_thread(&self, _t: usize) {
        rpmalloc_thread_init::<G>();
    }
}

/// rpmalloc (built without its preload hooks) needs every thread to call
/// `rpmalloc_thread_initialize` before its first allocation; the crate's
/// `GlobalAlloc` does not. Called for every `Heap` on worker threads (a
/// no-op for the others).
fn rpmalloc_thread_init<G: 'static>() {
    if core::any::TypeId::of::<G>() == core::any::TypeId::of::<rpmalloc::RpMalloc>() {
        // SAFETY: idempotent per thread (it checks the thread's heap), and
        // initialises the library first if needed.
        unsafe {
            rpmalloc_sys::rpmalloc_initialize();
            rpmalloc_sys::rpmalloc_thread_initialize();
        }
    }
}

/// The `GlobalSlub` every SLUB table measures: kmalloc (13 size classes)
/// over per-thread pcp lists over the mmap-grown buddy, per-thread virtual
/// CPUs (the local lock's pinned strategy, no atomic instruction on the
/// fast path), per-CPU sheaves (the default).
pub static GLOBAL_SLUB: GlobalSlub = GlobalSlub::new();

/// `GlobalSlub` without sheaves (the slab path only: per-CPU slab,
/// partial slabs, remote frees by compare-exchange), beside the default,
/// which has per-CPU sheaves (issue #6: the batching seed 004 asked for).
pub static GLOBAL_SLUB_NO_SHEAVES: GlobalSlub =
    GlobalSlub::with_config(GlobalSlub::DEFAULT_FLAGS, 0);
/// Its row name.
pub const NO_SHEAVES_ROW: &str = "GlobalSlub, no sheaves";

/// A `GlobalSlub` (a static: [`GLOBAL_SLUB`], [`GLOBAL_SLUB_NO_SHEAVES`])
/// as a value; batches go through its kmalloc cache's bulk API.
pub struct SlubHeap(pub &'static GlobalSlub);

impl ObjHeap for SlubHeap {
    #[inline(always)]
    fn alloc(&self, l: Layout) -> NonNull<u8> {
        // SAFETY: non-zero size.
        match NonNull::new(unsafe { self.0.alloc(l) }) {
            Some(p) => p,
            None => exhausted("GlobalSlub", l),
        }
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { self.0.dealloc(p.as_ptr(), l) }
    }
    #[inline(always)]
    fn alloc_batch(&self, l: Layout, out: &mut [*mut u8]) {
        match slub::kmalloc_class(l.size(), l.align()) {
            Some(c) => cache_alloc_bulk(&self.0.kmalloc().caches()[c], l, out),
            None => alloc_each(self, l, out),
        }
    }
    #[inline(always)]
    unsafe fn free_batch(&self, objs: &[NonNull<u8>], l: Layout) {
        match slub::kmalloc_class(l.size(), l.align()) {
            // SAFETY: forwarded contract: objects of `l` from this heap, i.e.
            // of the kmalloc cache of `l`'s class (the one `alloc` and
            // `alloc_batch` take them from).
            Some(c) => unsafe { self.0.kmalloc().caches()[c].free_bulk(objs) },
            // SAFETY: forwarded contract.
            None => unsafe { free_each(self, objs, l) },
        }
    }
}

/// A `KmemCache` of one object size over `GlobalPages`.
pub type BenchCache<P> = KmemCache<GlobalPages, P>;

/// One `KmemCache` of an exact size (`kmem_cache_alloc`/`kmem_cache_free`,
/// no size-class lookup), over the pcp pages of `GlobalSlub`.
pub struct CacheHeap<P: Platform + 'static> {
    /// The cache (created once per process and size, see [`kmem_cache`]).
    pub cache: &'static BenchCache<P>,
    enter: fn(usize),
}

impl<P: Platform + Send + 'static> ObjHeap for CacheHeap<P> {
    #[inline(always)]
    fn alloc(&self, l: Layout) -> NonNull<u8> {
        debug_assert!(
            l.size() <= self.cache.object_size() && l.align() <= self.cache.object_align()
        );
        match self.cache.alloc() {
            Some(p) => p,
            None => exhausted(self.cache.name(), l),
        }
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>, _l: Layout) {
        // SAFETY: forwarded contract (an object of this cache).
        unsafe { self.cache.free(p) }
    }
    fn enter_thread(&self, t: usize) {
        (self.enter)(t)
    }
    #[inline(always)]
    fn alloc_batch(&self, l: Layout, out: &mut [*mut u8]) {
        debug_assert!(
            l.size() <= self.cache.object_size() && l.align() <= self.cache.object_align()
        );
        cache_alloc_bulk(self.cache, l, out)
    }
    #[inline(always)]
    unsafe fn free_batch(&self, objs: &[NonNull<u8>], _l: Layout) {
        // SAFETY: forwarded contract (objects of this cache, each once).
        unsafe { self.cache.free_bulk(objs) }
    }
}

/// Which fast path a kernel-platform cache takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FastPath {
    /// !PREEMPT_RT: the lockless `(freelist, tid)` double-word
    /// compare-exchange.
    Lockless,
    /// PREEMPT_RT's choice after seed 001 (`SLAB_LOCKED_FASTPATH` here):
    /// the local lock around the fast path.
    LocalLock,
}

type Registry<P> = Mutex<Vec<(usize, u8, &'static BenchCache<P>)>>;
static PER_THREAD_CACHES: Registry<PerThread> = Mutex::new(Vec::new());
static KERNEL_CACHES: Registry<UserKernel> = Mutex::new(Vec::new());

fn registered<P: Platform + 'static>(
    reg: &Registry<P>,
    size: usize,
    key: u8,
    make: impl FnOnce(&'static str) -> BenchCache<P>,
) -> &'static BenchCache<P> {
    let mut v = reg.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, _, c)) = v.iter().find(|e| e.0 == size && e.1 == key) {
        return c;
    }
    let name: &'static str = Box::leak(format!("bench-{size}").into_boxed_str());
    // Leaked on purpose: one cache per size and flavour for the whole run
    // (its slabs stay with the shared pcp pages).
    let c: &'static BenchCache<P> = Box::leak(Box::new(make(name)));
    v.push((size, key, c));
    c
}

/// The process's `KmemCache` of `size` bytes on per-thread virtual CPUs
/// (the same platform as `GlobalSlub`: fast path under the pinned local
/// lock).
pub fn kmem_cache(size: usize) -> CacheHeap<PerThread> {
    let cache = registered(&PER_THREAD_CACHES, size, 0, |name| {
        KmemCache::create(name, size, ALIGN, SlabFlags::NONE, GlobalPages, PerThread)
            .expect("mm-bench: kmem_cache_create")
    });
    CacheHeap {
        cache,
        enter: |_| {},
    }
}

/// The process's `KmemCache` of `size` bytes on the kernel platform
/// (`Kernel<UserHooks>`: virtual CPU 0 for the measuring thread, `t + 1`
/// for worker `t`), with the fast path `fp`.
pub fn kernel_kmem_cache(size: usize, fp: FastPath) -> CacheHeap<UserKernel> {
    let flags = match fp {
        FastPath::Lockless => SlabFlags::NONE,
        FastPath::LocalLock => SlabFlags::LOCKED_FASTPATH,
    };
    let cache = registered(&KERNEL_CACHES, size, fp as u8, |name| {
        KmemCache::create(name, size, ALIGN, flags, GlobalPages, Kernel::new())
            .expect("mm-bench: kmem_cache_create")
    });
    CacheHeap {
        cache,
        enter: |t| {
            // SAFETY: multi-thread cases run one worker per index on
            // virtual CPUs 1, 2, ... while the measuring thread (CPU 0)
            // waits, and a fresh worker holds no lock.
            unsafe { UserHooks::set_cpu(t + 1) }
        },
    }
}

/// talc 5 (`TalcLock` with spin's `SpinMutex`) over its own arena.
pub struct TalcHeap {
    // Dropped before `_map`.
    heap: talc::TalcLock<spin::mutex::SpinMutex<()>, talc::source::Claim>,
    _map: Mapping,
}

impl TalcHeap {
    /// The heap over a fresh mapping of `bytes`.
    pub fn new(bytes: usize) -> Self {
        let map = Mapping::new(bytes, 4096);
        // SAFETY: the mapping is ours, unused, and outlives the heap (same
        // struct, dropped after it).
        let heap = talc::TalcLock::new(unsafe { talc::source::Claim::new(map.start(), map.len()) });
        TalcHeap { heap, _map: map }
    }
}

impl ObjHeap for TalcHeap {
    #[inline(always)]
    fn alloc(&self, l: Layout) -> NonNull<u8> {
        // SAFETY: non-zero size.
        match NonNull::new(unsafe { self.heap.alloc(l) }) {
            Some(p) => p,
            None => exhausted("talc", l),
        }
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { self.heap.dealloc(p.as_ptr(), l) }
    }
}

/// linked_list_allocator's `LockedHeap` (a first-fit hole list behind a
/// spin lock) over its own arena.
pub struct LlaHeap {
    heap: linked_list_allocator::LockedHeap,
    _map: Mapping,
}

impl LlaHeap {
    /// The heap over a fresh mapping of `bytes`.
    pub fn new(bytes: usize) -> Self {
        let map = Mapping::new(bytes, 4096);
        let heap = linked_list_allocator::LockedHeap::empty();
        // SAFETY: as in `TalcHeap::new`.
        unsafe { heap.lock().init(map.start(), map.len()) };
        LlaHeap { heap, _map: map }
    }
}

impl ObjHeap for LlaHeap {
    #[inline(always)]
    fn alloc(&self, l: Layout) -> NonNull<u8> {
        // SAFETY: non-zero size.
        match NonNull::new(unsafe { self.heap.alloc(l) }) {
            Some(p) => p,
            None => exhausted("linked_list_allocator", l),
        }
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { self.heap.dealloc(p.as_ptr(), l) }
    }
}

/// buddy_system_allocator's `LockedHeap<33>` (spin-locked buddy) over its
/// own arena.
pub struct BsaHeap {
    heap: buddy_system_allocator::LockedHeap<33>,
    _map: Mapping,
}

impl BsaHeap {
    /// The heap over a fresh mapping of `bytes`.
    pub fn new(bytes: usize) -> Self {
        let map = Mapping::new(bytes, 4096);
        let heap = buddy_system_allocator::LockedHeap::<33>::new();
        // SAFETY: as in `TalcHeap::new`.
        unsafe { heap.lock().init(map.start() as usize, map.len()) };
        BsaHeap { heap, _map: map }
    }
}

impl ObjHeap for BsaHeap {
    #[inline(always)]
    fn alloc(&self, l: Layout) -> NonNull<u8> {
        // SAFETY: non-zero size.
        match NonNull::new(unsafe { self.heap.alloc(l) }) {
            Some(p) => p,
            None => exhausted("buddy_system_allocator", l),
        }
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { self.heap.dealloc(p.as_ptr(), l) }
    }
}

/// What a competitor is, for the summaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `GlobalSlub`.
    Slub,
    /// A `KmemCache` of the exact size.
    Cache,
    /// An allocator a user would pick instead.
    Peer,
}

/// Row names.
pub const GLOBAL_SLUB_ROW: &str = "GlobalSlub";
/// `KmemCache` on `PerThread`.
pub const CACHE_ROW: &str = "KmemCache, PerThread";
/// `KmemCache` on the kernel platform, lockless fast path.
pub const LOCKLESS_ROW: &str = "KmemCache, lockless (Kernel<UserHooks>)";
/// `KmemCache` on the kernel platform, local lock on the fast path.
pub const LOCKED_ROW: &str = "KmemCache, local_lock (Kernel<UserHooks>)";
/// The peers' rows, in print order.
pub const PEERS: [&str; 8] = [
    "glibc (System)",
    "mimalloc",
    "jemalloc",
    "snmalloc",
    "rpmalloc",
    "talc (spin lock)",
    "linked_list_allocator (spin lock)",
    "buddy_system_allocator (spin lock)",
];

/// Called once per competitor by [`Competitors::visit`].
pub trait Visit {
    /// One competitor.
    fn visit<A: ObjHeap>(&mut self, name: &'static str, kind: Kind, a: &Arc<A>);
}

/// Which `KmemCache` rows [`Competitors::visit`] includes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caches {
    /// None (random sizes: only kmalloc can serve them).
    None,
    /// `KmemCache` on `PerThread` and the lockless kernel-platform one.
    Both,
    /// Those and the kernel-platform one with the local lock on the fast
    /// path (seed 001's RT choice).
    WithLocked,
}

/// Every allocator of the SLUB tables.
pub struct Competitors {
    slub: Arc<SlubHeap>,
    sheaves: Arc<SlubHeap>,
    glibc: Arc<Heap<System>>,
    mi: Arc<Heap<mimalloc::MiMalloc>>,
    je: Arc<Heap<tikv_jemallocator::Jemalloc>>,
    sn: Arc<Heap<snmalloc_rs::SnMalloc>>,
    rp: Arc<Heap<rpmalloc::RpMalloc>>,
    talc: Arc<TalcHeap>,
    lla: Arc<LlaHeap>,
    bsa: Arc<BsaHeap>,
}

impl Default for Competitors {
    fn default() -> Self {
        Self::new()
    }
}

impl Competitors {
    /// All of them (the `no_std` heaps over fresh arenas of
    /// [`ARENA_BYTES`]).
    pub fn new() -> Self {
        Competitors {
            slub: Arc::new(SlubHeap(&GLOBAL_SLUB)),
            sheaves: Arc::new(SlubHeap(&GLOBAL_SLUB_NO_SHEAVES)),
            glibc: Arc::new(Heap(System)),
            mi: Arc::new(Heap(mimalloc::MiMalloc)),
            je: Arc::new(Heap(tikv_jemallocator::Jemalloc)),
            sn: Arc::new(Heap(snmalloc_rs::SnMalloc)),
            rp: Arc::new(Heap(rpmalloc::RpMalloc)),
            talc: Arc::new(TalcHeap::new(ARENA_BYTES)),
            lla: Arc::new(LlaHeap::new(ARENA_BYTES)),
            bsa: Arc::new(BsaHeap::new(ARENA_BYTES)),
        }
    }

    /// Calls `v` for `GlobalSlub`, the `KmemCache`s of `size` bytes that
    /// `caches` selects, and the peers, in print order.
    pub fn visit<V: Visit>(&self, size: usize, caches: Caches, v: &mut V) {
        v.visit(GLOBAL_SLUB_ROW, Kind::Slub, &self.slub);
        v.visit(NO_SHEAVES_ROW, Kind::Cache, &self.sheaves);
        if caches != Caches::None {
            v.visit(CACHE_ROW, Kind::Cache, &Arc::new(kmem_cache(size)));
            v.visit(
                LOCKLESS_ROW,
                Kind::Cache,
                &Arc::new(kernel_kmem_cache(size, FastPath::Lockless)),
            );
        }
        if caches == Caches::WithLocked {
            v.visit(
                LOCKED_ROW,
                Kind::Cache,
                &Arc::new(kernel_kmem_cache(size, FastPath::LocalLock)),
            );
        }
        v.visit(PEERS[0], Kind::Peer, &self.glibc);
        v.visit(PEERS[1], Kind::Peer, &self.mi);
        v.visit(PEERS[2], Kind::Peer, &self.je);
        v.visit(PEERS[3], Kind::Peer, &self.sn);
        v.visit(PEERS[4], Kind::Peer, &self.rp);
        v.visit(PEERS[5], Kind::Peer, &self.talc);
        v.visit(PEERS[6], Kind::Peer, &self.lla);
        v.visit(PEERS[7], Kind::Peer, &self.bsa);
    }
}

/// `(name, median ns)` of the fastest peer among `rows`.
fn fastest_peer(rows: &[Row]) -> Option<(&'static str, f64)> {
    fastest(rows, &PEERS)
}

/// Appends "x.xx of the fastest peer (NAME n ns)" to every row's note and
/// returns the summary line material `(GlobalSlub, fastest peer)`.
fn ratio_notes(rows: &mut [Row]) -> Option<(f64, (&'static str, f64))> {
    let best = fastest_peer(rows)?;
    for r in rows.iter_mut() {
        let ratio = r.stats.ns.median / best.1;
        let sep = if r.case.note.is_empty() { "" } else { "; " };
        r.case.note = format!(
            "{}{sep}{ratio:.2}x the fastest peer ({} {} ns)",
            r.case.note,
            best.0,
            fmt_num(best.1)
        );
    }
    Some((median_of(rows, GLOBAL_SLUB_ROW)?, best))
}

/// Measures `cases` (interleaved, as every table does) filed under
/// `section`, as rows.
fn measure_rows(cx: &Ctx<'_>, cases: Vec<Case>, section: &str) -> Vec<Row> {
    let cases: Vec<Case> = cases.into_iter().map(|c| c.section(section)).collect();
    let stats = cx.measure(&cases);
    cases
        .into_iter()
        .zip(stats)
        .map(|(case, stats)| Row { case, stats })
        .collect()
}

// ---------------------------------------------------------------------------
// Case bodies
// ---------------------------------------------------------------------------

/// `n` alloc + free pairs of `l`.
#[inline(always)]
fn pairs<A: ObjHeap>(a: &A, l: Layout, n: u64) {
    for _ in 0..n {
        let p = black_box(a.alloc(l));
        // SAFETY: allocated just above with `l`, freed once.
        unsafe { a.free(p, l) };
    }
}

/// Untimed pairs a worker does first: a fresh thread's first allocation
/// sets up its thread cache, heap or slot (jemalloc's tcache, rpmalloc's
/// heap, GlobalSlub's virtual CPU and CPU slab), a one-time cost per thread
/// that the runner's per-sample threads would otherwise pay in every batch.
pub const WARM_PAIRS: u64 = 256;

/// A case doing `iters` alloc + free pairs of `l` on `threads` threads
/// (each thread's set-up, [`WARM_PAIRS`], untimed).
pub fn pair_case<A: ObjHeap>(name: &str, a: &Arc<A>, l: Layout, threads: usize) -> Case {
    let a = a.clone();
    Case::custom(name, move |t, iters| {
        if threads > 1 {
            a.enter_thread(t);
        }
        pairs(&*a, l, WARM_PAIRS);
        let sw = Stopwatch::start();
        pairs(&*a, l, iters);
        sw.stop()
    })
    .threads(threads)
}

/// Objects of one `Layout` from an [`ObjHeap`], as the items of the
/// measurement module's alloc-N-then-free-N round ([`alloc_free_case`]).
pub struct Objects<A> {
    /// The heap.
    pub a: Arc<A>,
    /// The objects' layout.
    pub l: Layout,
}

impl<A: ObjHeap> AllocFree for Objects<A> {
    #[inline(always)]
    fn alloc(&self) -> NonNull<u8> {
        self.a.alloc(self.l)
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>) {
        // SAFETY: forwarded contract (allocated above with `l`).
        unsafe { self.a.free(p, self.l) }
    }
    fn enter_thread(&self, t: usize) {
        self.a.enter_thread(t)
    }
}

/// A case running `iters` rounds of alloc-N-then-free-N of `l`, recording
/// the phases per object; figures are per round (the table divides by N).
pub fn batch_case<A: ObjHeap>(
    name: &str,
    a: &Arc<A>,
    l: Layout,
    n: usize,
    clock: Clock,
    phases: Arc<Phases>,
) -> Case {
    let items = Objects { a: a.clone(), l };
    alloc_free_case(name, items, n, clock, 1, Some(phases))
}

// ---------------------------------------------------------------------------
// The producer/consumer ring
// ---------------------------------------------------------------------------

/// A bounded single-producer single-consumer ring of object pointers
/// (Lamport's queue with cached indices: each side re-reads the other's
/// index only when the ring looks full or empty, so the two CPUs share the
/// index lines once per lap, not once per object).
pub struct Ring {
    slots: Box<[AtomicPtr<u8>]>,
    mask: usize,
    /// Next slot to pop (written by the consumer).
    head: CachePadded<AtomicUsize>,
    /// Next slot to push (written by the producer).
    tail: CachePadded<AtomicUsize>,
}

/// The producer's end (one at a time).
pub struct Producer<'a> {
    ring: &'a Ring,
    tail: usize,
    head_seen: usize,
}

/// The consumer's end (one at a time).
pub struct Consumer<'a> {
    ring: &'a Ring,
    head: usize,
    tail_seen: usize,
}

#[inline(always)]
fn wait(spins: &mut u32) {
    if *spins < 256 {
        core::hint::spin_loop();
        *spins += 1;
    } else {
        // The other side has no CPU right now: give it ours.
        std::thread::yield_now();
    }
}

impl Ring {
    /// A ring of `cap` entries (a power of two).
    pub fn new(cap: usize) -> Ring {
        assert!(cap.is_power_of_two());
        Ring {
            slots: (0..cap)
                .map(|_| AtomicPtr::new(core::ptr::null_mut()))
                .collect(),
            mask: cap - 1,
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// The producer's end. The ring is for one producer and one consumer at
    /// a time (more would lose entries, not break memory safety).
    pub fn producer(&self) -> Producer<'_> {
        Producer {
            ring: self,
            tail: self.tail.load(Ordering::Relaxed),
            head_seen: self.head.load(Ordering::Acquire),
        }
    }

    /// The consumer's end (see [`producer`](Self::producer)).
    pub fn consumer(&self) -> Consumer<'_> {
        Consumer {
            ring: self,
            head: self.head.load(Ordering::Relaxed),
            tail_seen: self.tail.load(Ordering::Acquire),
        }
    }
}

impl Producer<'_> {
    /// Appends `p`, waiting while the ring is full.
    #[inline(always)]
    pub fn push(&mut self, p: *mut u8) {
        let r = self.ring;
        let mut spins = 0;
        while self.tail.wrapping_sub(self.head_seen) > r.mask {
            self.head_seen = r.head.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head_seen) > r.mask {
                wait(&mut spins);
            }
        }
        r.slots[self.tail & r.mask].store(p, Ordering::Relaxed);
        self.tail = self.tail.wrapping_add(1);
        r.tail.store(self.tail, Ordering::Release);
    }

    /// Appends all of `ps` (at most the ring's size) with one publication
    /// of the tail (a driver's one doorbell per batch), waiting until they
    /// fit.
    #[inline(always)]
    pub fn push_batch(&mut self, ps: &[*mut u8]) {
        let r = self.ring;
        let n = ps.len();
        assert!(n <= r.mask + 1, "mm-bench: batch larger than the ring");
        let mut spins = 0;
        while self.tail.wrapping_sub(self.head_seen) + n > r.mask + 1 {
            self.head_seen = r.head.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head_seen) + n > r.mask + 1 {
                wait(&mut spins);
            }
        }
        for (k, &p) in ps.iter().enumerate() {
            r.slots[self.tail.wrapping_add(k) & r.mask].store(p, Ordering::Relaxed);
        }
        self.tail = self.tail.wrapping_add(n);
        r.tail.store(self.tail, Ordering::Release);
    }
}

impl Consumer<'_> {
    /// Takes the oldest entry, waiting while the ring is empty.
    #[inline(always)]
    pub fn pop(&mut self) -> *mut u8 {
        let r = self.ring;
        let mut spins = 0;
        while self.head == self.tail_seen {
            self.tail_seen = r.tail.load(Ordering::Acquire);
            if self.head == self.tail_seen {
                wait(&mut spins);
            }
        }
        let p = r.slots[self.head & r.mask].load(Ordering::Relaxed);
        self.head = self.head.wrapping_add(1);
        r.head.store(self.head, Ordering::Release);
        p
    }

    /// Takes `out.len()` entries (at most the ring's size) with one
    /// publication of the head, waiting until that many are there.
    #[inline(always)]
    pub fn pop_batch(&mut self, out: &mut [*mut u8]) {
        let r = self.ring;
        let n = out.len();
        assert!(n <= r.mask + 1, "mm-bench: batch larger than the ring");
        let mut spins = 0;
        while self.tail_seen.wrapping_sub(self.head) < n {
            self.tail_seen = r.tail.load(Ordering::Acquire);
            if self.tail_seen.wrapping_sub(self.head) < n {
                wait(&mut spins);
            }
        }
        for (k, o) in out.iter_mut().enumerate() {
            *o = r.slots[self.head.wrapping_add(k) & r.mask].load(Ordering::Relaxed);
        }
        self.head = self.head.wrapping_add(n);
        r.head.store(self.head, Ordering::Release);
    }
}

/// Entries of the producer/consumer ring (a NIC RX ring's depth: seed 004
/// quotes 256 ... 4096).
pub const RING: usize = 1024;

/// Objects per batch of the batched producer/consumer shape (and the
/// largest `batch` the producer and the consumer halves take).
pub const BATCH: usize = 64;

/// The producer's half: `count` objects of `l` allocated, their first word
/// written (the driver building the skb), pushed; `batch` (1..=[`BATCH`])
/// at a time through [`ObjHeap::alloc_batch`] when above 1, each batch
/// published with one store of the ring's tail (a driver's doorbell per
/// batch; the last batch may be short).
#[inline(always)]
fn produce<A: ObjHeap>(a: &A, l: Layout, ring: &Ring, count: u64, batch: usize) {
    assert!((1..=BATCH).contains(&batch), "mm-bench: batch {batch}");
    let mut tx = ring.producer();
    if batch == 1 {
        for i in 0..count {
            let p = a.alloc(l);
            // SAFETY: a fresh object of at least 8 bytes, aligned to 8 (for
            // the ring-only floor: a pool slot the consumer is done with,
            // see `RingOnly`).
            unsafe { p.as_ptr().cast::<u64>().write(i) };
            tx.push(p.as_ptr());
        }
        return;
    }
    let mut buf = [core::ptr::null_mut::<u8>(); BATCH];
    let mut i = 0u64;
    while i < count {
        let objs = &mut buf[..(count - i).min(batch as u64) as usize];
        a.alloc_batch(l, objs);
        for &p in objs.iter() {
            // SAFETY: as above (`alloc_batch` fills every slot).
            unsafe { p.cast::<u64>().write(i) };
            i += 1;
        }
        tx.push_batch(objs);
    }
}

/// The consumer's half: `count` objects popped, their first word read
/// (the socket reading the skb), freed; `batch` at a time through
/// [`ObjHeap::free_batch`] when above 1 (taken from the ring together, read
/// one by one, then freed together; the last batch may be short).
#[inline(always)]
fn consume<A: ObjHeap>(a: &A, l: Layout, ring: &Ring, count: u64, batch: usize) {
    assert!((1..=BATCH).contains(&batch), "mm-bench: batch {batch}");
    let mut rx = ring.consumer();
    if batch == 1 {
        for _ in 0..count {
            let p = rx.pop();
            // SAFETY: an object the producer allocated with `l` and wrote,
            // now ours (handed over through the ring's release/acquire);
            // freed once.
            unsafe {
                black_box(p.cast::<u64>().read());
                a.free(NonNull::new_unchecked(p), l);
            }
        }
        return;
    }
    let mut buf = [NonNull::<u8>::dangling(); BATCH];
    let mut raw = [core::ptr::null_mut::<u8>(); BATCH];
    let mut i = 0u64;
    while i < count {
        let n = (count - i).min(batch as u64) as usize;
        rx.pop_batch(&mut raw[..n]);
        for (s, &p) in buf[..n].iter_mut().zip(&raw[..n]) {
            // SAFETY: as above; the pointer is an object, not null.
            unsafe {
                black_box(p.cast::<u64>().read());
                *s = NonNull::new_unchecked(p);
            }
        }
        // SAFETY: `n` distinct objects the producer allocated with `l`, now
        // ours, each freed once here.
        unsafe { a.free_batch(&buf[..n], l) };
        i += n as u64;
    }
}

/// A two-thread case: worker 0 produces `iters` objects, worker 1 consumes
/// them, `batch` at a time (1: one by one); each times itself (the mean is
/// the wall time per object).
pub fn prodcons_case<A: ObjHeap>(name: &str, a: &Arc<A>, l: Layout, batch: usize) -> Case {
    let a = a.clone();
    let ring = Arc::new(Ring::new(RING));
    Case::custom(name, move |t, iters| {
        a.enter_thread(t);
        pairs(&*a, l, WARM_PAIRS);
        let sw = Stopwatch::start();
        if t == 0 {
            produce(&*a, l, &ring, iters, batch);
        } else {
            consume(&*a, l, &ring, iters, batch);
        }
        sw.stop()
    })
    .threads(2)
}

/// Objects in the pool of the ring-only floor (`RingOnly`): four ring
/// lengths, where the ring lets the producer run at most [`RING`] ahead.
pub const POOL_OBJECTS: usize = 4 * RING;

/// Alignment of the floor's pool (a cache line: a 64 B object owns its
/// line, as in a kmalloc-64 slab).
const POOL_ALIGN: usize = 64;

/// Row name of the floor of `slub-prodcons`.
pub const FLOOR_ROW: &str = "ring only (no allocator)";

thread_local! {
    /// The calling thread's next pool slot (of any [`RingOnly`]).
    static POOL_CURSOR: Cell<usize> = const { Cell::new(0) };
}

/// The floor of `slub-prodcons`: no allocator. `alloc` hands out the slots
/// of a fixed pool of [`POOL_OBJECTS`] objects round-robin (a thread-local
/// cursor: no shared write), `free` does nothing, so the producer/consumer
/// case measures the ring and the transfer of each object's line alone.
///
/// Not a heap: a slot comes back after [`POOL_OBJECTS`] allocations of
/// the same thread, live or not. The producer/consumer case makes that
/// safe: when the producer writes its object `j`, its push of `j - 1` saw
/// the consumer's head at `j - RING` or more (acquire), and the consumer
/// reads each object before popping the next, so every object up to
/// `j - RING - 2` has been read (and nothing later is touched again);
/// `j` reuses the slot of `j - POOL_OBJECTS`, far below. Each sample runs
/// on fresh threads, started after the previous ones were joined, and the
/// consumer's own (warm-up) allocations write nothing.
struct RingOnly {
    base: NonNull<u8>,
    size: usize,
    block: Layout,
}

// SAFETY: the pool is plain memory owned by the struct; the struct itself
// holds no thread-affine state (the cursor is thread-local), and who writes
// which slot when is the producer/consumer protocol's business (see above).
unsafe impl Send for RingOnly {}
// SAFETY: as above.
unsafe impl Sync for RingOnly {}

impl RingOnly {
    /// A pool of [`POOL_OBJECTS`] objects of `size` bytes (a multiple of
    /// [`ALIGN`]), one block from `System`.
    fn new(size: usize) -> RingOnly {
        assert!(
            size >= ALIGN && size.is_multiple_of(ALIGN),
            "mm-bench: pool of {size} B"
        );
        let block = match Layout::from_size_align(POOL_OBJECTS * size, POOL_ALIGN) {
            Ok(b) => b,
            Err(_) => panic!("mm-bench: bad pool of {size} B"),
        };
        // SAFETY: a non-zero size.
        let base = match NonNull::new(unsafe { System.alloc(block) }) {
            Some(p) => p,
            None => exhausted("System (ring-only pool)", block),
        };
        RingOnly { base, size, block }
    }
}

impl Drop for RingOnly {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with `block`, freed once; nothing uses
        // the pool once its owner is dropped.
        unsafe { System.dealloc(self.base.as_ptr(), self.block) }
    }
}

impl ObjHeap for RingOnly {
    #[inline(always)]
    fn alloc(&self, l: Layout) -> NonNull<u8> {
        debug_assert!(l.size() <= self.size && l.align() <= POOL_ALIGN);
        let i = POOL_CURSOR.with(|c| {
            let i = c.get();
            c.set(i.wrapping_add(1));
            i
        }) % POOL_OBJECTS;
        // SAFETY: `i < POOL_OBJECTS`: slot `i` lies inside the block.
        unsafe { self.base.add(i * self.size) }
    }
    #[inline(always)]
    unsafe fn free(&self, _p: NonNull<u8>, _l: Layout) {}
}

// ---------------------------------------------------------------------------
// slub-pairs
// ---------------------------------------------------------------------------

/// Object sizes of `slub-pairs`.
pub const PAIR_SIZES: [usize; 5] = [16, 64, 256, 1024, 4096];

struct PairCases {
    l: Layout,
    threads: usize,
    cases: Vec<Case>,
}

impl Visit for PairCases {
    fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, a: &Arc<A>) {
        self.cases.push(pair_case(name, a, self.l, self.threads));
    }
}

/// The `slub-pairs` table (see the module docs).
pub struct SlubPairs;

impl Table for SlubPairs {
    fn name(&self) -> &'static str {
        "slub-pairs"
    }

    fn about(&self) -> &'static str {
        "SLUB fast paths (seed 001): one alloc + free of 16..4096 B: GlobalSlub, KmemCache (lockless / local_lock / per-thread), glibc, mimalloc, jemalloc, snmalloc, rpmalloc, talc, linked_list_allocator, buddy_system_allocator"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let comp = Competitors::new();
        let mut rows = Vec::new();
        let mut summary = Vec::new();
        for size in PAIR_SIZES {
            let section = format!("{size} B (Layout align {ALIGN}): one alloc + free");
            let mut v = PairCases {
                l: layout(size),
                threads: 1,
                cases: Vec::new(),
            };
            comp.visit(size, Caches::WithLocked, &mut v);
            let mut these = measure_rows(cx, v.cases, &section);
            if let Some((s, best)) = ratio_notes(&mut these) {
                let lockless = median_of(&these, LOCKLESS_ROW).unwrap_or(f64::NAN);
                let locked = median_of(&these, LOCKED_ROW).unwrap_or(f64::NAN);
                summary.push(format!(
                    "  {size:>5}  {:>10}  {:>8} {:<20}  {:>5.2}x {:<6}  {:>9}  {:>9}  {:>+6.1}%",
                    fmt_num(s),
                    fmt_num(best.1),
                    best.0,
                    s / best.1,
                    verdict(s <= best.1),
                    fmt_num(lockless),
                    fmt_num(locked),
                    (locked / lockless - 1.0) * 100.0,
                ));
            }
            rows.extend(these);
        }
        let lockless = kernel_kmem_cache(64, FastPath::Lockless).cache.lockless();
        let mut notes = vec![
            format!(
                "ns/op: one alloc + free pair through GlobalAlloc-style calls, the pointer through black_box, nothing written. \
                 GlobalSlub = slub::GlobalSlub (kmalloc classes over per-thread pcp pages; fast path under the pinned \
                 per-thread local lock: a TLS load, no atomic instruction; kfree finds the slab from the address). \
                 KmemCache = kmem_cache_create of the exact size over the same pages (no size-class lookup): on PerThread, \
                 and on the kernel platform Kernel<UserHooks> (preempt count + soft IRQ mask in TLS) with the !RT lockless \
                 (freelist, tid) cmpxchg16b fast path (lockless() = {lockless}) and with SLAB_LOCKED_FASTPATH (the local \
                 lock on the fast path: what PREEMPT_RT does after seed 001)."
            ),
            format!(
                "talc, linked_list_allocator, buddy_system_allocator: each over its own {} MiB MAP_NORESERVE arena behind a spin \
                 lock (TalcLock<spin::SpinMutex>, their LockedHeaps), as they would run as a global allocator.",
                ARENA_BYTES >> 20
            ),
            "seed 001 (SLUB local_lock series, v3) publishes no per-operation figures: its only benchmark is Mike Galbraith's \
             hackbench on !RT, 0.939-0.946 s before vs 0.938-0.948 s after (negligible, 'the fast paths are not affected'); \
             RT 'takes the local lock also in the fast paths': the local_lock row minus the lockless row is that price here."
                .into(),
            "summary (ns per pair; target: GlobalSlub <= the fastest peer, about 3.3 ns at 64 B on this machine; last columns: \
             seed 001's two fast paths):"
                .into(),
            format!(
                "  {:>5}  {:>10}  {:<29}  {:<13}  {:>9}  {:>9}  {:>7}",
                "size", "GlobalSlub", "fastest peer", "ratio", "lockless", "local_lock", "RT cost"
            ),
        ];
        notes.extend(summary);
        Report {
            table: "slub-pairs",
            title: "SLUB alloc + free pairs, 16..4096 B, against the peers (seed 001: fast paths)"
                .into(),
            notes,
            rows,
        }
    }
}

// ---------------------------------------------------------------------------
// slub-batch
// ---------------------------------------------------------------------------

/// N values of `slub-batch`.
pub fn batch_counts(quick: bool) -> Vec<usize> {
    if quick {
        vec![1, 64, 4096]
    } else {
        vec![1, 4, 16, 64, 256, 1024, 4096, 16384]
    }
}

struct BatchCases {
    l: Layout,
    n: usize,
    clock: Clock,
    cases: Vec<(Case, Arc<Phases>)>,
}

impl Visit for BatchCases {
    fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, a: &Arc<A>) {
        let (l, n, clock) = (self.l, self.n, self.clock);
        self.cases
            .push(with_phases(|ph| batch_case(name, a, l, n, clock, ph)));
    }
}

/// The `slub-batch` table (see the module docs).
pub struct SlubBatch;

impl Table for SlubBatch {
    fn name(&self) -> &'static str {
        "slub-batch"
    }

    fn about(&self) -> &'static str {
        "alloc N then free N objects of 64 B (N = 1..16384), ns per object, alloc/free split: GlobalSlub, KmemCache, peers"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let comp = Competitors::new();
        let clock = Clock::new(cx.machine.tsc_ghz);
        let size = 64;
        let mut rows = Vec::new();
        let mut summary = Vec::new();
        for n in batch_counts(cx.cfg.quick) {
            let section = format!("N = {n}: alloc {n} x {size} B, then free them (per object)");
            let mut v = BatchCases {
                l: layout(size),
                n,
                clock,
                cases: Vec::new(),
            };
            comp.visit(size, Caches::Both, &mut v);
            let (cases, phs): (Vec<Case>, Vec<Arc<Phases>>) = v
                .cases
                .into_iter()
                .map(|(c, ph)| (c.section(section.clone()), ph))
                .unzip();
            let stats = cx.measure(&cases);
            let mut these: Vec<Row> = Vec::new();
            for ((mut case, mut st), ph) in cases.into_iter().zip(stats).zip(phs) {
                per_item(&mut st, n);
                if let Some(note) = phase_note(&ph, st.rounds) {
                    case.note = note;
                }
                these.push(Row { case, stats: st });
            }
            if let Some((s, best)) = ratio_notes(&mut these) {
                summary.push(format!(
                    "  {n:>6}  {:>10}  {:>8} {:<34}  {:>5.2}x {}",
                    fmt_num(s),
                    fmt_num(best.1),
                    best.0,
                    s / best.1,
                    verdict(s <= best.1)
                ));
            }
            rows.extend(these);
        }
        let mut notes = vec![
            "ns/op and cycles/op: alloc + free per object; the note splits the phases (rdtsc around each) and gives the ratio \
             to the fastest peer at that N. Same competitors as slub-pairs (see there); objects are freed in allocation order."
                .to_string(),
            "N = 1 measures the clock, not the allocators: each phase is one object between two rdtsc reads (about 9.5 ns, \
             the pages table's '(timer: empty phases)' floor), so every row shows ~19 ns there."
                .to_string(),
            "SLUB at large N: the CPU slab runs out every objs_per_slab objects (64 at 64 B in an order-0 slab), so the slow \
             path (new slab from the pcp, or a partial one) is part of the figure, as it is in the kernel."
                .to_string(),
            "summary (ns per object; target: GlobalSlub <= the fastest peer):".to_string(),
            format!(
                "  {:>6}  {:>10}  {:<43}  {}",
                "N", "GlobalSlub", "fastest peer", "ratio"
            ),
        ];
        notes.extend(summary);
        Report {
            table: "slub-batch",
            title: "SLUB batches: alloc N, free N objects of 64 B (seed 000's shape on objects)"
                .into(),
            notes,
            rows,
        }
    }
}

// ---------------------------------------------------------------------------
// slub-2t
// ---------------------------------------------------------------------------

struct TwoThreadCases {
    l: Layout,
    cases: Vec<Case>,
}

impl Visit for TwoThreadCases {
    fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, a: &Arc<A>) {
        self.cases.push(pair_case(name, a, self.l, 1));
        self.cases.push(pair_case(name, a, self.l, 2));
    }
}

/// The `slub-2t` table (see the module docs).
pub struct Slub2t;

impl Table for Slub2t {
    fn name(&self) -> &'static str {
        "slub-2t"
    }

    fn about(&self) -> &'static str {
        "64 B alloc + free pairs on one thread and on two pinned threads at once (2-CPU check): GlobalSlub, KmemCache, peers"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let comp = Competitors::new();
        let size = 64;
        let section =
            format!("{size} B: each thread does alloc + free pairs (ns per pair per thread)");
        let mut v = TwoThreadCases {
            l: layout(size),
            cases: Vec::new(),
        };
        comp.visit(size, Caches::Both, &mut v);
        let cases: Vec<Case> = v
            .cases
            .into_iter()
            .map(|c| c.section(section.clone()))
            .collect();
        let stats = cx.measure(&cases);
        let mut rows: Vec<Row> = cases
            .into_iter()
            .zip(stats)
            .map(|(case, stats)| Row { case, stats })
            .collect();
        let mut summary = Vec::new();
        for i in (0..rows.len()).step_by(2) {
            let one = rows[i].stats.ns.median;
            let two = rows[i + 1].stats.ns.median;
            let agg1 = 1e3 / one;
            let agg2 = 2.0 * 1e3 / two;
            rows[i].case.note = format!("{} Mpairs/s", fmt_num(agg1));
            rows[i + 1].case.note = format!(
                "{} Mpairs/s aggregate; 2t/1t scaling {:.2}x",
                fmt_num(agg2),
                agg2 / agg1
            );
            summary.push((rows[i].case.name.clone(), agg2, agg2 / agg1));
        }
        let best_peer = summary
            .iter()
            .filter(|s| PEERS.contains(&s.0.as_str()))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .cloned();
        let mut notes = vec![
            format!("each allocator twice: one thread (the measuring thread), then two threads at once pinned to two CPUs, each doing \
             its own pairs; ns/op is per pair per thread; Mpairs/s counts both. KmemCache lockless: workers are virtual CPUs \
             1 and 2 of Kernel<UserHooks>. The runner starts fresh threads for every batch: each does {WARM_PAIRS} untimed \
             pairs first, so a thread cache's one-time set-up (jemalloc's tcache, GlobalSlub's slot and CPU slab) is not \
             in the figure, nor is GlobalSlub's flush at thread exit (after the stopwatch stops)."
            ),
            "2cpu: the runner's two-CPU check (pure arithmetic on one vs two threads): below ~1.9x the second CPU was partly \
             someone else's, and scaling figures are capped by it. The no_std heaps share one spin lock: their lock line \
             bounces between the CPUs on every operation."
                .to_string(),
            "summary (aggregate Mpairs/s on two threads, scaling 2t/1t):".to_string(),
        ];
        for (name, agg, sc) in &summary {
            notes.push(format!("  {name:<42} {:>8}  {sc:>5.2}x", fmt_num(*agg)));
        }
        if let (Some(s), Some(p)) = (summary.iter().find(|s| s.0 == GLOBAL_SLUB_ROW), best_peer) {
            notes.push(format!(
                "target GlobalSlub >= the best peer's aggregate: {} vs {} ({}): {}",
                fmt_num(s.1),
                fmt_num(p.1),
                p.0,
                verdict(s.1 >= p.1)
            ));
        }
        Report {
            table: "slub-2t",
            title: "SLUB 64 B pairs on two CPUs at once".into(),
            notes,
            rows,
        }
    }
}

// ---------------------------------------------------------------------------
// slub-prodcons
// ---------------------------------------------------------------------------

/// The producer/consumer target of issue #6: GlobalSlub's throughput at
/// least this multiple of the best peer's (reported, not asserted).
pub const PRODCONS_TARGET: f64 = 1.2;

/// Object sizes of `slub-prodcons`.
pub const PRODCONS_SIZES: [usize; 2] = [64, 256];

struct ProdConsCases {
    l: Layout,
    batch: usize,
    cases: Vec<Case>,
}

impl Visit for ProdConsCases {
    fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, a: &Arc<A>) {
        self.cases.push(prodcons_case(name, a, self.l, self.batch));
    }
}

/// What one fixed producer/consumer run did to a cache's statistics.
pub struct StatsRun {
    /// Objects passed.
    pub objects: u64,
    /// Wall time of the run (the slower worker's, each timed from the
    /// start barrier to its last object).
    pub secs: f64,
    /// The producer's and the consumer's CPU (slot) numbers.
    pub cpus: [usize; 2],
    /// Per-CPU deltas, indexed by CPU.
    pub per_cpu: Vec<SlubStats>,
    /// Their sum.
    pub total: SlubStats,
}

/// Runs `objects` objects of `l` from a producer to a consumer (pinned to
/// the first two allowed CPUs), `batch` at a time (1: one by one, else
/// [`ObjHeap::alloc_batch`] / [`ObjHeap::free_batch`] of up to [`BATCH`]),
/// and returns the statistics delta of `cache` (read per CPU slot
/// `0..slots`).
#[allow(clippy::too_many_arguments)]
pub fn prodcons_stats<A: ObjHeap, S: slub::SlabSource, P: Platform>(
    a: &A,
    l: Layout,
    objects: u64,
    batch: usize,
    cache: &KmemCache<S, P>,
    slots: usize,
    cpus: &[usize],
    pin: bool,
) -> StatsRun {
    let ring = Ring::new(RING);
    let start = Barrier::new(3);
    let done = Barrier::new(3);
    let exit = Barrier::new(3);
    let snap = || -> Vec<SlubStats> { (0..slots).map(|c| cache.cpu_stats(c)).collect() };
    let ids = Mutex::new([0usize; 2]);
    // Each worker's own time: the measuring thread is not pinned and, with
    // the two workers on two CPUs, may run late (its clock would then start
    // after most of the run).
    let times = Mutex::new([0.0f64; 2]);
    let mut before = Vec::new();
    let mut after = Vec::new();
    std::thread::scope(|s| {
        for t in 0..2 {
            let (ring, start, done, exit, ids, times) = (&ring, &start, &done, &exit, &ids, &times);
            s.spawn(move || {
                if pin && !cpus.is_empty() {
                    let _ = pin_current_thread(cpus[t % cpus.len()]);
                }
                a.enter_thread(t);
                ids.lock().unwrap()[t] = cache.platform().current_cpu();
                start.wait();
                let t0 = Instant::now();
                if t == 0 {
                    produce(a, l, ring, objects, batch);
                } else {
                    consume(a, l, ring, objects, batch);
                }
                times.lock().unwrap()[t] = t0.elapsed().as_secs_f64();
                done.wait();
                // Stay alive (and keep the slot) until the snapshot is taken:
                // a per-thread slot is flushed when its thread exits.
                exit.wait();
            });
        }
        before = snap();
        start.wait();
        done.wait();
        after = snap();
        exit.wait();
    });
    let per_cpu: Vec<SlubStats> = before.iter().zip(&after).map(|(b, a)| b.delta(a)).collect();
    let mut total = SlubStats::default();
    for d in &per_cpu {
        total.add(d);
    }
    let cpus = *ids.lock().unwrap();
    let [tp, tc] = *times.lock().unwrap();
    StatsRun {
        objects,
        secs: tp.max(tc),
        cpus,
        per_cpu,
        total,
    }
}

/// Seed 004's `/sys/kernel/slab/skbuff_head_cache` statistics (Linux 3.2-rc,
/// 8 CPUs, 192 B objects, 21 per order-0 slab, cpu_partial 30, min_partial
/// 5; CPU 0 the softirq producer, CPU 4 the main consumer): the totals.
/// Items the 2011 kernel did not have are absent.
pub const SEED_004: [(SlubStat, u64); 23] = [
    (SlubStat::ALLOC_FASTPATH, 89_181_782),
    (SlubStat::ALLOC_SLOWPATH, 4_430_371),
    (SlubStat::FREE_FASTPATH, 21_192_924),
    (SlubStat::FREE_SLOWPATH, 71_825_749),
    (SlubStat::FREE_FROZEN, 67_988_498),
    (SlubStat::FREE_ADD_PARTIAL, 0),
    (SlubStat::FREE_REMOVE_PARTIAL, 18),
    (SlubStat::ALLOC_FROM_PARTIAL, 412_658),
    (SlubStat::ALLOC_SLAB, 2_831_313),
    (SlubStat::ALLOC_REFILL, 593_417),
    (SlubStat::ALLOC_NODE_MISMATCH, 0),
    (SlubStat::FREE_SLAB, 2_831_186),
    (SlubStat::CPUSLAB_FLUSH, 0),
    (SlubStat::DEACTIVATE_FULL, 0),
    (SlubStat::DEACTIVATE_EMPTY, 2_831_168),
    (SlubStat::DEACTIVATE_TO_HEAD, 0),
    (SlubStat::DEACTIVATE_TO_TAIL, 0),
    (SlubStat::DEACTIVATE_REMOTE_FREES, 0),
    (SlubStat::DEACTIVATE_BYPASS, 3_836_954),
    (SlubStat::ORDER_FALLBACK, 0),
    (SlubStat::CMPXCHG_DOUBLE_CPU_FAIL, 0),
    (SlubStat::CMPXCHG_DOUBLE_FAIL, 1),
    (SlubStat::CPU_PARTIAL_ALLOC, 592_991),
];

/// Seed 004's `cpu_partial_free` (listed apart: the array above keeps the
/// kernel's item order of `enum stat_item`).
pub const SEED_004_CPU_PARTIAL_FREE: u64 = 4_429_836;

/// The seed's figure for `s`, if the 2011 kernel counted it.
pub fn seed_004(s: SlubStat) -> Option<u64> {
    if s == SlubStat::CPU_PARTIAL_FREE {
        return Some(SEED_004_CPU_PARTIAL_FREE);
    }
    SEED_004.iter().find(|e| e.0 == s).map(|e| e.1)
}

/// The statistics in seed 004's `grep . *` format: `item:total C1=.. C2=..`
/// (non-zero items; the CPUs are the run's slot numbers).
pub fn seed_format(run: &StatsRun) -> Vec<String> {
    let mut out = Vec::new();
    for &s in SlubStat::ALL {
        let total = run.total.get(s);
        if total == 0 {
            continue;
        }
        let mut line = format!("{}:{total}", s.name().to_lowercase());
        for (cpu, d) in run.per_cpu.iter().enumerate() {
            let v = d.get(s);
            if v != 0 {
                let _ = write!(line, " C{cpu}={v}");
            }
        }
        out.push(line);
    }
    out
}

/// Allocations a run's figures are per: the objects it passed (its only
/// allocations: no warm-up). Not `alloc_fastpath + alloc_slowpath`, the
/// seed's sum: allocations from a sheaf count as `alloc_pcs` instead, and
/// objects of a bulk allocation taken from the CPU freelist count in
/// neither.
fn allocs(run: &StatsRun) -> f64 {
    run.objects as f64
}

/// The shapes of `slub-prodcons`: objects per batch (1: one by one).
pub const PRODCONS_BATCHES: [usize; 2] = [1, BATCH];

/// The `slub-prodcons` table (see the module docs).
pub struct SlubProdCons;

impl Table for SlubProdCons {
    fn name(&self) -> &'static str {
        "slub-prodcons"
    }

    fn about(&self) -> &'static str {
        "seed 004: producer thread allocs 64/256 B objects (one by one, and in batches of 64), consumer thread on the other CPU frees them (SPSC ring), ns per object, SLUB statistics: GlobalSlub, KmemCache, peers, ring-only floor"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let comp = Competitors::new();
        let mut rows = Vec::new();
        let mut summary = Vec::new();
        for batch in PRODCONS_BATCHES {
            for size in PRODCONS_SIZES {
                let (section, label) = if batch == 1 {
                    (
                        format!(
                            "{size} B: producer allocs + writes, {RING}-entry ring, consumer reads + frees (ns per object)"
                        ),
                        format!("{size}"),
                    )
                } else {
                    (
                        format!(
                            "{size} B, batches of {batch}: producer allocs {batch} (bulk) + writes them, {RING}-entry ring, \
                             consumer reads {batch} + frees them as a batch (ns per object)"
                        ),
                        format!("{size} x{batch}"),
                    )
                };
                let l = layout(size);
                let mut v = ProdConsCases {
                    l,
                    batch,
                    cases: Vec::new(),
                };
                comp.visit(size, Caches::Both, &mut v);
                // The floor, in the same interleaved rounds (not a peer: its
                // name is not in PEERS, so the ratios ignore it).
                v.cases.push(prodcons_case(
                    FLOOR_ROW,
                    &Arc::new(RingOnly::new(size)),
                    l,
                    batch,
                ));
                let mut these = measure_rows(cx, v.cases, &section);
                for r in these.iter_mut() {
                    r.case.note = format!("{} Mobj/s", fmt_num(1e3 / r.stats.ns.median));
                }
                if let Some((s, best)) = ratio_notes(&mut these) {
                    let floor = median_of(&these, FLOOR_ROW).unwrap_or(f64::NAN);
                    summary.push(format!(
                        "  {label:>8}  {:>9} Mobj/s  {:>8} Mobj/s {:<34}  {:>5.2}x  {:<6}  {:>9} Mobj/s",
                        fmt_num(1e3 / s),
                        fmt_num(1e3 / best.1),
                        best.0,
                        best.1 / s,
                        verdict(best.1 / s >= PRODCONS_TARGET),
                        fmt_num(1e3 / floor),
                    ));
                }
                rows.extend(these);
            }
        }

        // The statistics: one fixed run per SLUB row and size, one by one,
        // then per SLUB row at 256 B in batches.
        let objects: u64 = if cx.cfg.quick { 1 << 16 } else { 1 << 21 };
        let cpus = &cx.machine.allowed_cpus;
        let pin = cx.cfg.pin;
        // (name, short name for the per-1000 columns, run)
        let mut runs: Vec<(String, String, StatsRun)> = Vec::new();
        let shapes = PRODCONS_SIZES
            .iter()
            .map(|&size| (size, 1))
            .chain([(256, BATCH)]);
        for (size, batch) in shapes {
            let l = layout(size);
            let (how, tag) = if batch == 1 {
                (String::new(), format!("{size}"))
            } else {
                (format!(", batches of {batch}"), format!("{size}x{batch}"))
            };
            let class = slub::kmalloc_class(size, ALIGN).expect("a kmalloc class");
            for (heap, what, short) in [
                (&GLOBAL_SLUB, "GlobalSlub", "GS"),
                (&GLOBAL_SLUB_NO_SHEAVES, "GlobalSlub, no sheaves", "GS-nosh"),
            ] {
                let kcache = &heap.kmalloc().caches()[class];
                let h = SlubHeap(heap);
                let run = prodcons_stats(&h, l, objects, batch, kcache, 64, cpus, pin);
                runs.push((
                    format!("{} ({what}{how})", kcache.name()),
                    format!("{tag} {short}"),
                    run,
                ));
            }
            let kc = kernel_kmem_cache(size, FastPath::Lockless);
            let run = prodcons_stats(&kc, l, objects, batch, kc.cache, 64, cpus, pin);
            runs.push((
                format!(
                    "{} (KmemCache, lockless, Kernel<UserHooks>{how})",
                    kc.cache.name()
                ),
                format!("{tag} lockless"),
                run,
            ));
        }

        // Whether the bulk calls of the sheaves row went through its sheaves
        // (the batched statistics run says).
        let bulk_sheaves = match runs
            .iter()
            .find(|(_, short, _)| short.contains('x') && short.ends_with(" GS"))
        {
            Some((_, _, r))
                if r.total.get(SlubStat::ALLOC_PCS) + r.total.get(SlubStat::FREE_PCS) == 0 =>
            {
                " Here alloc_bulk / free_bulk bypass the sheaves (the batched statistics run of GlobalSlub \
                 counts no alloc_pcs and no free_pcs): in batches, that row is the slab path's bulk \
                 calls, not the sheaves'."
            }
            Some(_) => {
                " alloc_bulk / free_bulk take from and return to the sheaves first (alloc_pcs, free_pcs in the \
                 batched statistics run of GlobalSlub)."
            }
            None => "",
        };
        let mut notes = vec![
            format!(
                "each object: the producer (worker 0, pinned to the first CPU) allocates it and writes its first word, pushes it \
                 into a {RING}-entry single-producer single-consumer ring (cached indices, spin then yield when full/empty); \
                 the consumer (worker 1, the second CPU) pops it, reads the word and frees it. ns/op is wall time per object \
                 (mean of the two threads' times, each after {WARM_PAIRS} untimed alloc + free pairs of its own); Mobj/s its inverse. Every free is remote: the object was allocated on the \
                 other CPU (seed 004: skbs built in softirq on CPU 0, freed by the socket's reader on another CPU)."
            ),
            format!(
                "batches of {BATCH} (seed 004: 'batch things a bit like SLAB'): the producer allocates {BATCH} objects at once, writes \
                 each and hands the batch over with one publication of the ring index (a driver's doorbell per batch); the \
                 consumer takes {BATCH}, reads each, then frees them together. ns/op stays per object. (Handing over object by \
                 object instead makes the ring, not the allocator, the cost: when the consumer waits on an almost empty ring \
                 it takes the index line from the producer at every push, 15 ns per object measured with rdtsc.) The \
                 SLUB rows use the kernel's bulk API, as a network driver's NAPI skb cache does: kmem_cache_alloc_bulk and \
                 kmem_cache_free_bulk (KmemCache::alloc_bulk / free_bulk; for both GlobalSlub rows on the \
                 kmalloc cache of the size's class, the one their alloc takes objects from). The peers have no bulk API: \
                 their batch is {BATCH} alloc calls, then {BATCH} free calls.{bulk_sheaves}"
            ),
            format!(
                "'{FLOOR_ROW}': the floor, measured in the same interleaved rounds: the same producer, consumer and ring, but \
                 no allocator: the producer takes objects round-robin from a fixed pool of {POOL_OBJECTS} objects of the \
                 size (4 x the ring, one System block aligned to 64 B, allocated before the table; the ring keeps the \
                 producer at most {RING} objects ahead, so a slot is never written while the consumer may still read it) \
                 and writes the first word; the consumer reads it and frees nothing. What it shows is the cost of the queue \
                 and of moving each object's cache line to the other CPU; an allocator row minus it is the allocator's \
                 share. It is not a peer (not in the ratios). Its rounds can spread widely: when \
                 the ring runs full or empty, the two CPUs work on the same line of slots at each hand-off; in \
                 between, they pipeline."
            ),
            "2cpu: the runner's two-CPU check; with one CPU the ring degenerates to time-sharing hand-offs.".into(),
            format!(
                "summary (target, issue #6: GlobalSlub's throughput >= {PRODCONS_TARGET} x the best peer's; x64 = batches \
                 of 64; last column: the ring-only floor):"
            ),
            format!(
                "  {:>8}  {:>16}  {:<50}  {:>6}  {:<6}  {:>16}",
                "size", "GlobalSlub", "best peer", "ratio", "verdict", "ring only"
            ),
        ];
        notes.extend(summary);
        notes.push(String::new());
        notes.push(format!(
            "SLUB statistics of one run of {objects} objects per cache after the table (producer on the first CPU, consumer on \
             the second; C<n> = the slot the thread ran on: a PerThread virtual CPU for GlobalSlub, the kernel platform's \
             CPU 1 (producer) and 2 (consumer) for the KmemCache), one by one at 64 and 256 B, then in batches of {BATCH} \
             at 256 B (alloc_bulk / free_bulk), in seed 004's `grep . *` format:"
        ));
        for (name, _, run) in &runs {
            notes.push(format!(
                "-- {name}: producer C{}, consumer C{}; {:.1} ns/object ({} Mobj/s)",
                run.cpus[0],
                run.cpus[1],
                run.secs * 1e9 / run.objects as f64,
                fmt_num(run.objects as f64 / run.secs / 1e6)
            ));
            notes.extend(seed_format(run).into_iter().map(|l| format!("   {l}")));
        }
        notes.push(String::new());
        notes.push(format!(
            "per 1000 allocations (objects passed), beside seed 004 (skbuff_head_cache, 192 B, 21 objects per slab, 93.6 M \
             allocations; '-' = not counted by the 2011 kernel); columns: size (x{BATCH}: in batches), GS = GlobalSlub's \
             kmalloc cache (sheaves), GS-nosh = GlobalSlub without sheaves, lockless = the KmemCache on Kernel<UserHooks>:"
        ));
        let mut head = format!("  {:<24}", "item");
        for (_, short, _) in &runs {
            let _ = write!(head, " {short:>15}");
        }
        let _ = write!(head, " {:>12}", "seed 004");
        notes.push(head);
        let seed_allocs = 89_181_782.0 + 4_430_371.0;
        for &s in SlubStat::ALL {
            let seed = seed_004(s);
            if runs.iter().all(|(_, _, r)| r.total.get(s) == 0) && seed.unwrap_or(0) == 0 {
                continue;
            }
            let mut line = format!("  {:<24}", s.name().to_lowercase());
            for (_, _, r) in &runs {
                let _ = write!(
                    line,
                    " {:>15.2}",
                    r.total.get(s) as f64 * 1000.0 / allocs(r).max(1.0)
                );
            }
            match seed {
                Some(v) => {
                    let _ = write!(line, " {:>12.2}", v as f64 * 1000.0 / seed_allocs);
                }
                None => {
                    let _ = write!(line, " {:>12}", "-");
                }
            }
            notes.push(line);
        }
        notes.push(
            "the seed's pathology is alloc_slab = free_slab = deactivate_empty at ~30 per 1000 allocations: the consumer's \
             CPU partial list gets slabs that empty there and go back to the page allocator, while the producer keeps \
             allocating new ones."
                .into(),
        );
        Report {
            table: "slub-prodcons",
            title: "SLUB producer/consumer: allocated on one CPU, freed on the other (seed 004)"
                .into(),
            notes,
            rows,
        }
    }
}

// ---------------------------------------------------------------------------
// slub-larson
// ---------------------------------------------------------------------------

/// The shape of one Larson run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LarsonParams {
    /// Threads, each pinned to its own CPU.
    pub threads: usize,
    /// Timed part.
    pub millis: u64,
    /// Slots per thread (each holds one live object).
    pub slots: usize,
    /// Random seed.
    pub seed: u64,
}

/// What one Larson run measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LarsonResult {
    /// Replacements (one alloc + one free each), all threads.
    pub ops: u64,
    /// Timed seconds (the slowest thread's).
    pub secs: f64,
    /// Bytes live at the end (sum of the requested sizes).
    pub live: u64,
    /// VmRSS before the workload, KiB (0 in-process).
    pub rss0_kb: u64,
    /// VmHWM after the workload, KiB (0 in-process).
    pub hwm_kb: u64,
}

/// Smallest and largest object of the Larson churn.
pub const LARSON_SIZES: (usize, usize) = (16, 1024);

#[inline(always)]
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[inline(always)]
fn larson_new<A: ObjHeap>(a: &A, rng: &mut u64) -> *mut u8 {
    let span = (LARSON_SIZES.1 - LARSON_SIZES.0 + 1) as u64;
    let size = LARSON_SIZES.0 + (xorshift(rng) % span) as usize;
    let p = a.alloc(layout(size)).as_ptr();
    // SAFETY: a fresh object of at least 16 bytes aligned to 8: its size
    // goes in the first word (the freeing thread needs it for the Layout).
    unsafe { p.cast::<u64>().write(size as u64) };
    p
}

/// Frees a Larson object (its size is in its first word).
///
/// # Safety
///
/// `p` is a live object of `larson_new` on `a`, not used afterwards.
#[inline(always)]
unsafe fn larson_free<A: ObjHeap>(a: &A, p: *mut u8) {
    // SAFETY: the caller's contract: the first word holds the size.
    unsafe {
        let size = p.cast::<u64>().read() as usize;
        a.free(NonNull::new_unchecked(p), layout(size));
    }
}

/// Runs the churn on `a` (see the module docs); `keep` leaves the objects
/// allocated at the end (a child process about to exit), else they are
/// freed.
pub fn larson_run<A: ObjHeap>(
    a: &A,
    p: &LarsonParams,
    cpus: &[usize],
    pin: bool,
    keep: bool,
) -> LarsonResult {
    let total = p.threads * p.slots;
    let slots: Vec<AtomicPtr<u8>> = (0..total)
        .map(|_| AtomicPtr::new(core::ptr::null_mut()))
        .collect();
    let stop = AtomicBool::new(false);
    let start = Barrier::new(p.threads + 1);
    let end = Barrier::new(p.threads);
    let results: Vec<(u64, f64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..p.threads)
            .map(|t| {
                let (slots, stop, start, end) = (&slots, &stop, &start, &end);
                s.spawn(move || {
                    if pin && !cpus.is_empty() {
                        let _ = pin_current_thread(cpus[t % cpus.len()]);
                    }
                    a.enter_thread(t);
                    let mut rng =
                        p.seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(t as u64 + 1)) | 1;
                    let own = t * p.slots;
                    for s in &slots[own..own + p.slots] {
                        s.store(larson_new(a, &mut rng), Ordering::Relaxed);
                    }
                    start.wait();
                    let t0 = Instant::now();
                    let mut ops = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..64 {
                            let r = xorshift(&mut rng);
                            let i = if r & 7 == 0 {
                                ((r >> 3) % total as u64) as usize
                            } else {
                                own + ((r >> 3) % p.slots as u64) as usize
                            };
                            let new = larson_new(a, &mut rng);
                            let old = slots[i].swap(new, Ordering::AcqRel);
                            // SAFETY: taken out of its slot by the swap: ours
                            // alone, a live object of `larson_new`.
                            unsafe { larson_free(a, old) };
                        }
                        ops += 64;
                    }
                    let secs = t0.elapsed().as_secs_f64();
                    end.wait();
                    let live: u64 = slots[own..own + p.slots]
                        .iter()
                        // SAFETY: every thread stopped (barrier): the slots
                        // hold live objects with their size in the first word.
                        .map(|s| unsafe { s.load(Ordering::Acquire).cast::<u64>().read() })
                        .sum();
                    if !keep {
                        for s in &slots[own..own + p.slots] {
                            // SAFETY: as above; each slot freed once, by its
                            // region's owner.
                            unsafe { larson_free(a, s.load(Ordering::Acquire)) };
                        }
                    }
                    (ops, secs, live)
                })
            })
            .collect();
        start.wait();
        std::thread::sleep(Duration::from_millis(p.millis));
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    LarsonResult {
        ops: results.iter().map(|r| r.0).sum(),
        secs: results.iter().map(|r| r.1).fold(0.0, f64::max),
        live: results.iter().map(|r| r.2).sum(),
        rss0_kb: 0,
        hwm_kb: 0,
    }
}

/// `VmRSS` and `VmHWM` of this process, KiB.
pub fn rss_kb() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The hidden flag that makes the runner a Larson child.
pub const LARSON_CHILD_FLAG: &str = "--slub-larson-child";

struct LarsonVisit<'a> {
    name: &'a str,
    p: LarsonParams,
    cpus: Vec<usize>,
    pin: bool,
    keep: bool,
    result: Option<LarsonResult>,
}

impl Visit for LarsonVisit<'_> {
    fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, a: &Arc<A>) {
        if name == self.name && self.result.is_none() {
            let (rss0, _) = rss_kb();
            let mut r = larson_run(&**a, &self.p, &self.cpus, self.pin, self.keep);
            r.rss0_kb = rss0;
            r.hwm_kb = rss_kb().1;
            self.result = Some(r);
        }
    }
}

/// Runs `name`'s Larson churn in this process.
fn larson_in_process(
    comp: &Competitors,
    name: &str,
    p: LarsonParams,
    cpus: &[usize],
    pin: bool,
    keep: bool,
) -> Option<LarsonResult> {
    let mut v = LarsonVisit {
        name,
        p,
        cpus: cpus.to_vec(),
        pin,
        keep,
        result: None,
    };
    comp.visit(0, Caches::None, &mut v);
    v.result
}

/// The runner's hidden child mode: `mm-bench --slub-larson-child NAME
/// THREADS MILLIS SLOTS SEED CPUS` (CPUS `0,1` or `-` for unpinned) runs
/// one allocator's Larson churn and prints one `larson ...` line. `None`
/// when the arguments are not a child's (the runner goes on as usual).
pub fn larson_child_main() -> Option<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some(LARSON_CHILD_FLAG) {
        return None;
    }
    let parse = || -> Option<(String, LarsonParams, Vec<usize>)> {
        let name = args.get(1)?.clone();
        let p = LarsonParams {
            threads: args.get(2)?.parse().ok()?,
            millis: args.get(3)?.parse().ok()?,
            slots: args.get(4)?.parse().ok()?,
            seed: args.get(5)?.parse().ok()?,
        };
        let cpus = match args.get(6)?.as_str() {
            "-" => Vec::new(),
            s => s
                .split(',')
                .map(|c| c.parse().ok())
                .collect::<Option<Vec<usize>>>()?,
        };
        Some((name, p, cpus))
    };
    let Some((name, p, cpus)) = parse() else {
        eprintln!("mm-bench {LARSON_CHILD_FLAG}: bad arguments {args:?}");
        return Some(ExitCode::from(2));
    };
    let comp = Competitors::new();
    let pin = !cpus.is_empty();
    match larson_in_process(&comp, &name, p, &cpus, pin, true) {
        Some(r) => {
            println!(
                "larson ops={} secs={} live={} rss0_kb={} hwm_kb={}",
                r.ops, r.secs, r.live, r.rss0_kb, r.hwm_kb
            );
            // Exit without unwinding the heaps (the objects stay allocated).
            std::process::exit(0)
        }
        None => {
            eprintln!("mm-bench {LARSON_CHILD_FLAG}: no allocator {name:?}");
            Some(ExitCode::from(2))
        }
    }
}

/// Parses a child's `larson ...` line.
pub fn parse_larson_line(s: &str) -> Option<LarsonResult> {
    let line = s.lines().find(|l| l.starts_with("larson "))?;
    let get = |k: &str| -> Option<&str> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
    };
    Some(LarsonResult {
        ops: get("ops")?.parse().ok()?,
        secs: get("secs")?.parse().ok()?,
        live: get("live")?.parse().ok()?,
        rss0_kb: get("rss0_kb")?.parse().ok()?,
        hwm_kb: get("hwm_kb")?.parse().ok()?,
    })
}

/// Runs `name` in a child process (the runner binary re-executed), or in
/// this process if there is no runner binary to re-execute (the
/// result's RSS fields are then 0).
fn larson_child(
    comp: &Competitors,
    name: &str,
    p: LarsonParams,
    cpus: &[usize],
    pin: bool,
) -> Option<LarsonResult> {
    let exe = std::env::current_exe().ok();
    let is_runner = exe
        .as_ref()
        .and_then(|e| e.file_stem())
        .is_some_and(|s| s == "mm-bench");
    if let (Some(exe), true) = (exe, is_runner) {
        let cpu_arg = if pin && cpus.len() >= 2 {
            format!("{},{}", cpus[0], cpus[1])
        } else {
            "-".to_string()
        };
        let out = std::process::Command::new(exe)
            .args([
                LARSON_CHILD_FLAG,
                name,
                &p.threads.to_string(),
                &p.millis.to_string(),
                &p.slots.to_string(),
                &p.seed.to_string(),
                &cpu_arg,
            ])
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "mm-bench: larson child for {name} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        return parse_larson_line(&String::from_utf8_lossy(&out.stdout));
    }
    let mut r = larson_in_process(comp, name, p, cpus, pin, false)?;
    r.rss0_kb = 0;
    r.hwm_kb = 0;
    Some(r)
}

struct Names(Vec<&'static str>);

impl Visit for Names {
    fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, _a: &Arc<A>) {
        self.0.push(name);
    }
}

/// The `slub-larson` table (see the module docs).
pub struct SlubLarson;

impl Table for SlubLarson {
    fn name(&self) -> &'static str {
        "slub-larson"
    }

    fn about(&self) -> &'static str {
        "Larson-style churn on two threads (random 16..1024 B, a quarter of frees remote), ops/s and peak RSS, one child process per allocator: GlobalSlub, peers"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let comp = Competitors::new();
        let mut names = Names(Vec::new());
        comp.visit(0, Caches::None, &mut names);
        let names = names.0;
        let cpus: Vec<usize> = cx.machine.allowed_cpus.iter().copied().take(2).collect();
        let pin = cx.cfg.pin;
        let (rounds, millis) = if cx.cfg.quick {
            (1, 150)
        } else {
            (cx.cfg.rounds.clamp(1, 5), 600)
        };
        let p = LarsonParams {
            threads: 2,
            millis,
            slots: 8192,
            seed: 0x5eed_1a25_0000_0001,
        };
        // Yardstick for the two-CPU check: about 5 ms of arithmetic.
        let t = Instant::now();
        arithmetic(1 << 16);
        let per = t.elapsed().as_nanos().max(1) as f64 / (1u64 << 16) as f64;
        let work = ((5e6 / per) as u64).max(1 << 12);

        let mut res: Vec<Vec<LarsonResult>> = vec![Vec::new(); names.len()];
        let mut ratios = Vec::new();
        for round in 0..rounds {
            ratios.push(two_cpu_check(&cpus, pin, work));
            for k in 0..names.len() {
                let i = (round + k) % names.len();
                let seed = p.seed.wrapping_add(round as u64);
                if let Some(r) =
                    larson_child(&comp, names[i], LarsonParams { seed, ..p }, &cpus, pin)
                {
                    res[i].push(r);
                }
            }
        }
        let two_cpu = Spread::of(&ratios).map(|s| s.median);
        let section = format!(
            "{} threads x {} slots, random {}..={} B, {} ms per run, one child process per run",
            p.threads, p.slots, LARSON_SIZES.0, LARSON_SIZES.1, p.millis
        );
        let mut rows = Vec::new();
        let mut summary = Vec::new();
        for (name, rs) in names.iter().zip(&res) {
            if rs.is_empty() {
                continue;
            }
            // ns per replacement per thread.
            let ns: Vec<f64> = rs
                .iter()
                .map(|r| r.secs * 1e9 * p.threads as f64 / r.ops.max(1) as f64)
                .collect();
            let mops: Vec<f64> = rs.iter().map(|r| r.ops as f64 / r.secs / 1e6).collect();
            let hwm: Vec<f64> = rs.iter().map(|r| r.hwm_kb as f64 / 1024.0).collect();
            let foot: Vec<f64> = rs
                .iter()
                .map(|r| r.hwm_kb.saturating_sub(r.rss0_kb) as f64 / 1024.0)
                .collect();
            let live =
                rs.iter().map(|r| r.live as f64).sum::<f64>() / rs.len() as f64 / (1 << 20) as f64;
            let (Some(ns), Some(mops), Some(hwm), Some(foot)) = (
                Spread::of(&ns),
                Spread::of(&mops),
                Spread::of(&hwm),
                Spread::of(&foot),
            ) else {
                continue;
            };
            let note = if hwm.median > 0.0 {
                format!(
                    "{} Mops/s; peak RSS {} MiB, {} MiB above the child's start, for {} MiB live",
                    fmt_num(mops.median),
                    fmt_num(hwm.median),
                    fmt_num(foot.median),
                    fmt_num(live)
                )
            } else {
                format!(
                    "{} Mops/s (in-process: no per-allocator RSS)",
                    fmt_num(mops.median)
                )
            };
            summary.push((*name, mops.median, foot.median, live));
            rows.push(Row {
                case: Case::raw(*name, |_, _| {})
                    .threads(p.threads)
                    .section(section.clone())
                    .note(note),
                stats: Stats {
                    ns,
                    cycles: None,
                    iters: rs.iter().map(|r| r.ops).sum::<u64>() / rs.len() as u64,
                    rounds: rs.len(),
                    two_cpu,
                },
            });
        }
        let mut notes = vec![
            "each thread owns a region of the slot array and replaces a random slot of it (7 in 8) or of the other thread's \
             region (1 in 8) with a new object of a random size: alloc, write its size in the first word, swap it in, free \
             the old one (Layout from its first word); about a quarter of the frees are of objects the other thread allocated. \
             ns/op = wall time per replacement per thread; Mops/s counts both threads."
                .to_string(),
            "peak RSS: each allocator in its own child process (the runner re-executed with a hidden flag), VmHWM at the end; \
             'above the start' subtracts VmRSS before the workload (the runner's own pages). The no_std heaps' arenas are \
             MAP_NORESERVE: only touched pages count."
                .to_string(),
            "summary (targets, reported not asserted: GlobalSlub's ops/s >= the best peer's; footprint):".to_string(),
        ];
        for (name, mops, foot, live) in &summary {
            notes.push(format!(
                "  {name:<36} {:>7} Mops/s  {:>7} MiB footprint  ({:.2}x the live bytes)",
                fmt_num(*mops),
                fmt_num(*foot),
                if *live > 0.0 { foot / live } else { f64::NAN }
            ));
        }
        let best = summary
            .iter()
            .filter(|s| PEERS.contains(&s.0))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(s), Some(b)) = (summary.iter().find(|s| s.0 == GLOBAL_SLUB_ROW), best) {
            notes.push(format!(
                "GlobalSlub {} Mops/s vs best peer {} {} Mops/s: {}",
                fmt_num(s.1),
                b.0,
                fmt_num(b.1),
                verdict(s.1 >= b.1)
            ));
        }
        Report {
            table: "slub-larson",
            title: "Larson-style server churn on two CPUs: throughput and peak RSS".into(),
            notes,
            rows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Check {
        sizes: Vec<usize>,
        checked: Vec<&'static str>,
    }

    impl Visit for Check {
        fn visit<A: ObjHeap>(&mut self, name: &'static str, _kind: Kind, a: &Arc<A>) {
            for &size in &self.sizes {
                let l = layout(size);
                let mut objs: Vec<(usize, usize)> = Vec::new();
                let mut ptrs = Vec::new();
                for i in 0..200u8 {
                    let p = a.alloc(l);
                    assert_eq!(
                        p.as_ptr() as usize % ALIGN,
                        0,
                        "{name}: {size} B misaligned"
                    );
                    // SAFETY: an object of `size` bytes we hold.
                    unsafe { p.as_ptr().write_bytes(i, size) };
                    objs.push((p.as_ptr() as usize, size));
                    ptrs.push((p, i));
                }
                objs.sort_unstable();
                for w in objs.windows(2) {
                    assert!(
                        w[0].0 + w[0].1 <= w[1].0,
                        "{name}: {size} B objects overlap"
                    );
                }
                for (p, i) in ptrs {
                    // SAFETY: ours, written above with `i`.
                    let s = unsafe { core::slice::from_raw_parts(p.as_ptr(), size) };
                    assert!(
                        s.iter().all(|&b| b == i),
                        "{name}: {size} B object clobbered"
                    );
                    // SAFETY: allocated above with `l`, freed once.
                    unsafe { a.free(p, l) };
                }
                // The batch API (bulk for the SLUB rows): twice, so the
                // second batch reuses what the first freed.
                for round in 0..2u8 {
                    let mut out = [core::ptr::null_mut::<u8>(); BATCH + 3];
                    a.alloc_batch(l, &mut out);
                    let mut addrs: Vec<usize> = out.iter().map(|p| p.addr()).collect();
                    addrs.sort_unstable();
                    assert!(addrs[0] != 0, "{name}: alloc_batch left a slot null");
                    for w in addrs.windows(2) {
                        assert!(w[0] + size <= w[1], "{name}: batch objects overlap");
                    }
                    for (k, &p) in out.iter().enumerate() {
                        assert_eq!(p.addr() % ALIGN, 0, "{name}: batch misaligned");
                        // SAFETY: an object of `size` bytes we hold.
                        unsafe { p.write_bytes(round ^ k as u8, size) };
                    }
                    let objs: Vec<NonNull<u8>> = out
                        .iter()
                        .enumerate()
                        .map(|(k, &p)| {
                            // SAFETY: ours, written above.
                            let s = unsafe { core::slice::from_raw_parts(p, size) };
                            assert!(
                                s.iter().all(|&b| b == round ^ k as u8),
                                "{name}: {size} B batch object clobbered"
                            );
                            NonNull::new(p).expect("checked above")
                        })
                        .collect();
                    // SAFETY: allocated above with `l`, each freed once.
                    unsafe { a.free_batch(&objs, l) };
                }
            }
            self.checked.push(name);
        }
    }

    /// Passes `objects` through a producer and a consumer thread, `batch`
    /// at a time, with the consumer checking every object's first word.
    fn pass<A: ObjHeap>(a: &A, l: Layout, objects: u64, batch: usize) {
        let ring = Ring::new(RING);
        std::thread::scope(|s| {
            s.spawn(|| {
                a.enter_thread(0);
                produce(a, l, &ring, objects, batch);
            });
            a.enter_thread(1);
            let mut rx = ring.consumer();
            let mut buf = Vec::new();
            for i in 0..objects {
                let p = rx.pop();
                // SAFETY: an object the producer wrote, ours now.
                assert_eq!(unsafe { p.cast::<u64>().read() }, i);
                buf.push(NonNull::new(p).expect("not null"));
                if buf.len() == batch {
                    // SAFETY: objects of `a` with `l`, each freed once.
                    unsafe { a.free_batch(&buf, l) };
                    buf.clear();
                }
            }
            // SAFETY: as above.
            unsafe { a.free_batch(&buf, l) };
        });
    }

    #[test]
    fn producer_consumer_shapes_pass_every_object_in_order() {
        // Counts that are not multiples of the batch: a short last batch.
        let objects = 10 * RING as u64 + 37;
        for batch in [1, 7, BATCH] {
            for size in PRODCONS_SIZES {
                let l = layout(size);
                pass(&SlubHeap(&GLOBAL_SLUB), l, objects, batch);
                pass(&SlubHeap(&GLOBAL_SLUB_NO_SHEAVES), l, objects, batch);
                pass(&kmem_cache(size), l, objects, batch);
                pass(&Heap(System), l, objects, batch);
                pass(&RingOnly::new(size), l, objects, batch);
            }
        }
        // The timed halves themselves, as the table runs them.
        let ring = Ring::new(RING);
        let pool = RingOnly::new(64);
        for batch in [1, BATCH] {
            std::thread::scope(|s| {
                s.spawn(|| produce(&SlubHeap(&GLOBAL_SLUB), layout(64), &ring, objects, batch));
                s.spawn(|| consume(&SlubHeap(&GLOBAL_SLUB), layout(64), &ring, objects, batch));
            });
            std::thread::scope(|s| {
                s.spawn(|| produce(&pool, layout(64), &ring, objects, batch));
                s.spawn(|| consume(&pool, layout(64), &ring, objects, batch));
            });
        }
    }

    #[test]
    fn ring_only_pool_is_round_robin_per_thread() {
        let pool = RingOnly::new(256);
        let l = layout(256);
        std::thread::scope(|s| {
            s.spawn(|| {
                let first = pool.alloc(l);
                for k in 1..POOL_OBJECTS {
                    let p = pool.alloc(l);
                    assert_eq!(p.as_ptr().addr(), first.as_ptr().addr() + k * 256);
                    assert_eq!(p.as_ptr().addr() % POOL_ALIGN, 0);
                }
                // Back to the first slot after a full lap.
                assert_eq!(pool.alloc(l), first);
            });
        });
    }

    #[test]
    fn every_competitor_hands_out_aligned_disjoint_usable_objects() {
        let comp = Competitors::new();
        // The kernel-platform caches: this test thread is their only user,
        // as virtual CPU 7.
        // SAFETY: no other thread uses virtual CPU 7 (the other tests use
        // CPU 0 or their own structures), and we hold no lock.
        unsafe { UserHooks::set_cpu(7) };
        for size in PAIR_SIZES {
            let mut c = Check {
                sizes: vec![size],
                checked: Vec::new(),
            };
            comp.visit(size, Caches::WithLocked, &mut c);
            // GlobalSlub, GlobalSlub without sheaves, three KmemCaches, the peers.
            assert_eq!(c.checked.len(), 5 + PEERS.len());
        }
        let mut c = Check {
            sizes: vec![16, 24, 100, 520, 1000, 1024],
            checked: Vec::new(),
        };
        comp.visit(0, Caches::None, &mut c);
        assert_eq!(c.checked.len(), 2 + PEERS.len());
        assert!(
            kernel_kmem_cache(64, FastPath::Lockless).cache.lockless()
                || !local_lock::sync::dwcas_is_lock_free()
        );
        assert!(!kernel_kmem_cache(64, FastPath::LocalLock).cache.lockless());
        // SAFETY: as above.
        unsafe { UserHooks::set_cpu(0) };
    }

    #[test]
    fn ring_passes_everything_in_order() {
        let ring = Ring::new(8);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut tx = ring.producer();
                for i in 1..=10_000usize {
                    tx.push(core::ptr::without_provenance_mut(i));
                }
            });
            let mut rx = ring.consumer();
            for i in 1..=10_000usize {
                assert_eq!(rx.pop().addr(), i);
            }
        });
    }

    #[test]
    fn larson_runs_and_frees() {
        let comp = Competitors::new();
        let p = LarsonParams {
            threads: 2,
            millis: 20,
            slots: 64,
            seed: 1,
        };
        for name in [GLOBAL_SLUB_ROW, "talc (spin lock)", "rpmalloc"] {
            let r = larson_in_process(&comp, name, p, &[], false, false).expect("a competitor");
            assert!(r.ops > 0 && r.secs > 0.0, "{name}");
            assert!(r.live >= 2 * 64 * 16 && r.live <= 2 * 64 * 1024, "{name}");
        }
        let line = "larson ops=10 secs=0.5 live=100 rss0_kb=3 hwm_kb=9\n";
        assert_eq!(
            parse_larson_line(line),
            Some(LarsonResult {
                ops: 10,
                secs: 0.5,
                live: 100,
                rss0_kb: 3,
                hwm_kb: 9
            })
        );
    }

    #[test]
    fn seed_004_items_are_the_kernels() {
        assert_eq!(seed_004(SlubStat::ALLOC_FASTPATH), Some(89_181_782));
        assert_eq!(seed_004(SlubStat::CPU_PARTIAL_FREE), Some(4_429_836));
        assert_eq!(seed_004(SlubStat::CPU_PARTIAL_DRAIN), None);
        // free_slowpath = free_frozen + the rest of the slow frees.
        assert!(seed_004(SlubStat::FREE_SLOWPATH) >= seed_004(SlubStat::FREE_FROZEN));
    }
}
