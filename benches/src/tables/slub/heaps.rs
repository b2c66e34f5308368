//! The competitors of the SLUB tables, as [`ObjHeap`]s: `GlobalSlub` (with
//! and without sheaves), `KmemCache`s of one exact size on `PerThread` and
//! on the kernel platform, the malloc peers through their `GlobalAlloc`,
//! and the `no_std` heaps over their own arenas; [`Competitors`] visits
//! them in print order. Also the summaries every table makes against the
//! fastest peer.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use local_lock::kernel::Kernel;
use local_lock::std_platform::PerThread;
use local_lock::Platform;
use slub::{GlobalPages, GlobalSlub, KmemCache, SlabFlags};

use crate::measure::{fmt_num, Case, Ctx, Row};
use crate::tables::pages::{fastest, median_of, Mapping};
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
    // SAFETY: `*mut u8` and `Option<NonNull<u8>>` have the same layout
    // (null is `None`); the slots are written before they are read.
    let slots = unsafe { &mut *(out as *mut [*mut u8] as *mut [Option<core::ptr::NonNull<u8>>]) };
    let got = cache.alloc_bulk(slots);
    for s in &mut out[got..] {
        match cache.alloc() {
            Some(p) => *s = p.as_ptr(),
            None => exhausted(cache.name(), l),
        }
    }
}

#[cold]
#[inline(never)]
pub(super) fn exhausted(who: &str, l: Layout) -> ! {
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
    fn enter_thread(&self, t: usize) {
        super::child::count_cpu_enter(t);
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

// ---------------------------------------------------------------------------
// Summaries against the peers
// ---------------------------------------------------------------------------

/// `(name, median ns)` of the fastest peer among `rows`.
fn fastest_peer(rows: &[Row]) -> Option<(&'static str, f64)> {
    fastest(rows, &PEERS)
}

/// Appends "x.xx of the fastest peer (NAME n ns)" to every row's note and
/// returns the summary line material `(GlobalSlub, fastest peer)`.
pub(super) fn ratio_notes(rows: &mut [Row]) -> Option<(f64, (&'static str, f64))> {
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
pub(super) fn measure_rows(cx: &Ctx<'_>, cases: Vec<Case>, section: &str) -> Vec<Row> {
    let cases: Vec<Case> = cases.into_iter().map(|c| c.section(section)).collect();
    let stats = cx.measure(&cases);
    cases
        .into_iter()
        .zip(stats)
        .map(|(case, stats)| Row { case, stats })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::slub::{BATCH, PAIR_SIZES};

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
}
