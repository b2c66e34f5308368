//! `pages`, `pages-2t`, `orders`: the page allocator micro-benchmark of
//! Mel Gorman's "Only use per-cpu allocator for irq-safe requests" (seed
//! 000), run on this family's buddy and pcp beside user-space peers.
//!
//! * **`pages`** (the seed's table): allocate N order-0 pages (4 KiB, 4 KiB
//!   aligned), then free the N, for N = 1, 2, 4, ..., 16384; the two phases
//!   are timed separately (`rdtsc` around each, as the seed's
//!   `pagealloc-micro.stp` does) and reported per page: alloc, free, total.
//!   Rows: the buddy directly (`Buddy<Kernel<UserHooks>>`: the zone lock
//!   with the kernel's irq save/restore through the soft IRQ mask); pcp over
//!   that buddy with each policy on the kernel platform (pinned strategy)
//!   and with per-thread slots; `GlobalPcp` through `GlobalAlloc`; and the
//!   peers through `GlobalAlloc` with `Layout` 4096/4096:
//!   `buddy_system_allocator` (over its own region of the same size),
//!   glibc (`System`: `posix_memalign`), mimalloc, jemalloc, rpmalloc. The
//!   seed's figures (Linux 4.10 vanilla = IRQs disabled around the pcp lists,
//!   irqsafe-v1r5 = preemption only) stand beside the matching pcp rows.
//!   The same rounds are also timed whole (the runner's clock around each
//!   batch, no `rdtsc` inside: [`alloc_free_rounds_case`]), and those rows
//!   carry the targets (issue #22: the per-phase reads cost an allocator
//!   bound by its instructions more than one stalled on memory); every
//!   N's cases are measured in one interleaved run, so a burst of the
//!   host's load spreads over every case's rounds.
//! * **`pages-2t`**: the same churn on two threads at once, each pinned to
//!   its own CPU, beside the one-thread figure of the same allocator:
//!   aggregate pages/s and the 2-thread/1-thread scaling, with the runner's
//!   two-CPU check.
//! * **`orders`**: one alloc + free pair of a block of order 0..=10 (size =
//!   alignment = 4 KiB << order).
//!
//! The building blocks ([`Arena`], [`PageAlloc`] and its implementations)
//! are public for the `zeroed` table and the criterion bench.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::NonNull;
use std::sync::Arc;

use buddy::{AllocFlags, Buddy, Config, FreeFlags, Order, Tunables, ZoneId};
use local_lock::kernel::Kernel;
use local_lock::std_platform::{PerThread, StdCpu};
use local_lock::Platform;
use pcp::{PageSource, Pcp, Policy};

use super::Table;
use crate::measure::{
    alloc_free_case, alloc_free_rounds_case, black_box, fmt_num, per_item, phase_note, with_phases,
    AllocFree, Case, Clock, Ctx, Phases, Report, Row, SeedRef, Verdict,
};
use crate::user_kernel::{UserHooks, UserKernel};

// ---------------------------------------------------------------------------
// Memory: arenas for the buddy and for buddy_system_allocator
// ---------------------------------------------------------------------------

/// Bytes per page.
pub const PAGE: usize = 4096;

/// The buddy's shape: the kernel's (4 KiB pages, MAX_ORDER 10), no min
/// watermark reserve (a benchmark arena, not a machine's memory).
pub const CONFIG: Config = Config::DEFAULT.with_tunables(Tunables::NO_MIN);

/// Size of every arena: 1 GiB, so the kernel's formulas give the pcp the
/// `batch` of a real zone (63 with 4 KiB pages from 1 GiB up; a 128 MiB zone
/// would get 7). The mapping is `MAP_NORESERVE` and the allocators never
/// touch the pages they hand out, so only the pages a table writes (and the
/// memmap lines in use) become resident.
pub const ARENA_BYTES: usize = 1 << 30;

/// An anonymous private mapping (`MAP_NORESERVE`), its usable part aligned
/// to a requested boundary; unmapped on drop.
pub struct Mapping {
    raw: NonNull<u8>,
    raw_len: usize,
    start: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Mapping` is an address range it owns exclusively; whoever it is
// handed to (one allocator) synchronises its use.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only reads the addresses.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes whose start is aligned to `align` (a power of two
    /// at least the page size).
    ///
    /// # Panics
    ///
    /// If the kernel refuses the mapping.
    pub fn new(len: usize, align: usize) -> Mapping {
        assert!(align.is_power_of_two() && align >= PAGE && len > 0);
        let raw_len = len + align;
        // SAFETY: a fresh anonymous private mapping (no fd, no fixed
        // address); the arguments are valid.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                raw_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert!(
            p != libc::MAP_FAILED,
            "mm-bench: mmap of {raw_len} bytes failed: {}",
            std::io::Error::last_os_error()
        );
        let raw = p.cast::<u8>();
        let off = (raw as usize).next_multiple_of(align) - raw as usize;
        Mapping {
            // SAFETY: mmap succeeded, so `raw` is not null.
            raw: unsafe { NonNull::new_unchecked(raw) },
            raw_len,
            // SAFETY: `off < align`, so `raw + off` lies in the mapping.
            start: unsafe { NonNull::new_unchecked(raw.add(off)) },
            len,
        }
    }

    /// The aligned start.
    pub fn start(&self) -> *mut u8 {
        self.start.as_ptr()
    }

    /// Usable bytes from [`start`](Self::start).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a mapping has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range is the one mmap returned; nothing uses it any
        // more (its allocator was dropped before it, see `Arena`).
        unsafe { libc::munmap(self.raw.as_ptr().cast(), self.raw_len) };
    }
}

/// A buddy allocator on the kernel platform over its own [`Mapping`].
pub struct Arena {
    // Dropped before `map` (declaration order): the buddy never outlives its
    // memory.
    buddy: Buddy<UserKernel>,
    map: Mapping,
    pages: usize,
}

impl Arena {
    /// A [`CONFIG`] buddy over a fresh mapping of `bytes` bytes, added as
    /// known zero (`zeroed`: PG_zero, no clearing of the carved memmap) or
    /// not (every block dirty, as memory that was in use).
    pub fn new(bytes: usize, zeroed: bool) -> Arc<Arena> {
        let a = Arc::new(Arena {
            buddy: Buddy::new(Kernel::new(), CONFIG),
            map: Mapping::new(bytes, CONFIG.max_block_size()),
            pages: 0,
        });
        // SAFETY: the mapping is fresh (reads as zero), used by nothing
        // else, and lives as long as the buddy (same struct, dropped after).
        let pages = unsafe { a.buddy.add_region(a.map.start(), a.map.len(), zeroed) }
            .expect("mm-bench: add_region");
        let mut a = a;
        Arc::get_mut(&mut a).expect("not shared yet").pages = pages;
        a
    }

    /// The buddy.
    pub fn buddy(&self) -> &Buddy<UserKernel> {
        &self.buddy
    }

    /// Pages the region added (the mapping less the memmap carved from it).
    pub fn pages(&self) -> usize {
        self.pages
    }
}

/// An [`Arena`] as the page source of a pcp (shared by the direct row and
/// the pcp rows of a table).
#[derive(Clone)]
pub struct Shared(pub Arc<Arena>);

impl PageSource for Shared {
    type P = UserKernel;
    #[inline(always)]
    fn buddy(&self) -> &Buddy<UserKernel> {
        &self.0.buddy
    }
}

// ---------------------------------------------------------------------------
// The competitors behind one interface
// ---------------------------------------------------------------------------

/// A page allocator as the tables drive it: blocks of `PAGE << order`
/// bytes aligned to their size. Implementations are monomorphised into the
/// measuring loops (no `dyn` call per page).
pub trait PageAlloc: Send + Sync + 'static {
    /// A block of `order`.
    ///
    /// # Panics
    ///
    /// When the allocator is exhausted (the tables stay far below that).
    fn alloc(&self, order: u8) -> NonNull<u8>;

    /// A block of `order` that reads as zero.
    ///
    /// # Panics
    ///
    /// As [`alloc`](Self::alloc).
    fn alloc_zeroed(&self, order: u8) -> NonNull<u8>;

    /// Frees a block.
    ///
    /// # Safety
    ///
    /// `p` came from this allocator's `alloc`/`alloc_zeroed` with `order`
    /// and is not used afterwards.
    unsafe fn free(&self, p: NonNull<u8>, order: u8);

    /// Frees a block that still reads as zero; allocators that track zero
    /// pages (PG_zero) keep it known zero.
    ///
    /// # Safety
    ///
    /// As [`free`](Self::free), and the block reads as zero.
    unsafe fn free_zero(&self, p: NonNull<u8>, order: u8) {
        // SAFETY: forwarded contract.
        unsafe { self.free(p, order) }
    }

    /// Called first on worker thread `t` (0 or 1) of a two-thread case.
    fn enter_thread(&self, t: usize) {
        let _ = t;
    }
}

#[inline(always)]
fn order(o: u8) -> Order {
    Order::new(o).expect("order within ORDER_LIMIT")
}

#[cold]
#[inline(never)]
fn exhausted(who: &str, o: u8) -> ! {
    panic!("mm-bench: {who} could not allocate a block of order {o}")
}

/// The buddy allocator directly (`alloc_pages` / `free_pages`).
pub struct BuddyPages(pub Arc<Arena>);

impl PageAlloc for BuddyPages {
    #[inline(always)]
    fn alloc(&self, o: u8) -> NonNull<u8> {
        match self.0.buddy.alloc_pages(order(o), AllocFlags::NONE) {
            Some(p) => p.ptr,
            None => exhausted("buddy", o),
        }
    }
    #[inline(always)]
    fn alloc_zeroed(&self, o: u8) -> NonNull<u8> {
        match self.0.buddy.alloc_pages(order(o), AllocFlags::ZEROED) {
            Some(p) => p.ptr,
            None => exhausted("buddy", o),
        }
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>, o: u8) {
        // SAFETY: forwarded contract.
        unsafe { self.0.buddy.free_pages(p, order(o)) }
    }
    #[inline(always)]
    unsafe fn free_zero(&self, p: NonNull<u8>, o: u8) {
        // SAFETY: forwarded contract (the block reads as zero).
        unsafe { self.0.buddy.free_pages_zeroed(p, order(o)) }
    }
}

/// Per-CPU lists over an [`Arena`]'s buddy, on platform `L`.
pub struct PcpPages<L: Platform> {
    /// The lists.
    pub pcp: Pcp<Shared, L>,
    enter: fn(usize),
}

impl<L: Platform> PcpPages<L> {
    /// `Pcp::new` over `arena` (the kernel's `batch`/`high` for its zone),
    /// on `platform` with `policy`; `enter(t)` runs first on worker `t` of a
    /// two-thread case (the kernel platform makes it virtual CPU `t + 1`).
    pub fn new(arena: &Arc<Arena>, platform: L, policy: Policy, enter: fn(usize)) -> Self {
        PcpPages {
            pcp: Pcp::new(Shared(arena.clone()), ZoneId::new(0), platform, policy),
            enter,
        }
    }
}

/// [`PcpPages`] on the kernel platform: the measuring thread is virtual CPU
/// 0, the workers of two-thread cases are CPUs 1 and 2.
pub fn kernel_pcp(arena: &Arc<Arena>, policy: Policy) -> PcpPages<UserKernel> {
    PcpPages::new(arena, Kernel::new(), policy, |t| {
        // SAFETY: two-thread cases run one worker per index on virtual CPUs
        // 1 and 2, which no other thread uses meanwhile (the measuring
        // thread, CPU 0, waits), and the fresh worker holds no lock.
        unsafe { UserHooks::set_cpu(t + 1) }
    })
}

/// [`PcpPages`] on per-thread slots (`PerThread`).
pub fn per_thread_pcp(arena: &Arc<Arena>, policy: Policy) -> PcpPages<PerThread> {
    PcpPages::new(arena, PerThread, policy, |_| {})
}

/// [`PcpPages`] on real CPUs (`StdCpu`: `sched_getcpu` + a per-CPU spin
/// lock, the locked strategy).
pub fn std_cpu_pcp(arena: &Arc<Arena>, policy: Policy) -> PcpPages<StdCpu> {
    PcpPages::new(arena, StdCpu, policy, |_| {})
}

impl<L: Platform + Send + 'static> PageAlloc for PcpPages<L> {
    #[inline(always)]
    fn alloc(&self, o: u8) -> NonNull<u8> {
        match self.pcp.alloc(order(o), AllocFlags::NONE) {
            Some(p) => p.ptr,
            None => exhausted("pcp", o),
        }
    }
    #[inline(always)]
    fn alloc_zeroed(&self, o: u8) -> NonNull<u8> {
        match self.pcp.alloc(order(o), AllocFlags::ZEROED) {
            Some(p) => p.ptr,
            None => exhausted("pcp", o),
        }
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>, o: u8) {
        // SAFETY: forwarded contract.
        unsafe { self.pcp.free(p, order(o), FreeFlags::NONE) }
    }
    #[inline(always)]
    unsafe fn free_zero(&self, p: NonNull<u8>, o: u8) {
        // SAFETY: forwarded contract (the block reads as zero).
        unsafe { self.pcp.free(p, order(o), FreeFlags::ZERO) }
    }
    fn enter_thread(&self, t: usize) {
        (self.enter)(t)
    }
}

#[inline(always)]
fn layout(o: u8) -> Layout {
    let size = PAGE << o;
    Layout::from_size_align(size, size).expect("power-of-two layout")
}

/// Any `GlobalAlloc` with `Layout::from_size_align(4096 << order, 4096 <<
/// order)`: glibc (`System`: `posix_memalign`, and `posix_memalign` +
/// `memset` for `alloc_zeroed` since the alignment exceeds 16), mimalloc,
/// jemalloc, rpmalloc, `GlobalPcp`.
pub struct Global<G>(pub G);

impl<G: GlobalAlloc + Send + Sync + 'static> PageAlloc for Global<G> {
    #[inline(always)]
    fn alloc(&self, o: u8) -> NonNull<u8> {
        // SAFETY: the layout has a non-zero size.
        match NonNull::new(unsafe { self.0.alloc(layout(o)) }) {
            Some(p) => p,
            None => exhausted(core::any::type_name::<G>(), o),
        }
    }
    #[inline(always)]
    fn alloc_zeroed(&self, o: u8) -> NonNull<u8> {
        // SAFETY: the layout has a non-zero size.
        match NonNull::new(unsafe { self.0.alloc_zeroed(layout(o)) }) {
            Some(p) => p,
            None => exhausted(core::any::type_name::<G>(), o),
        }
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>, o: u8) {
        // SAFETY: forwarded contract: allocated here with this layout.
        unsafe { self.0.dealloc(p.as_ptr(), layout(o)) }
    }
}

/// This family's `pcp::GlobalPcp` (per-thread pcp lists over the mmap-backed
/// `GlobalBuddy`) as a value (it lives in a static).
pub struct GlobalPcpHeap;

static GLOBAL_PCP: pcp::GlobalPcp = pcp::GlobalPcp::new();

// SAFETY: forwards to `GlobalPcp`, a `GlobalAlloc`.
unsafe impl GlobalAlloc for GlobalPcpHeap {
    #[inline(always)]
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        unsafe { GLOBAL_PCP.alloc(l) }
    }
    #[inline(always)]
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        unsafe { GLOBAL_PCP.alloc_zeroed(l) }
    }
    #[inline(always)]
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { GLOBAL_PCP.dealloc(p, l) }
    }
}

/// `buddy_system_allocator::LockedHeap<33>` (a spin-locked buddy with
/// intrusive free lists) over its own [`Mapping`] of [`ARENA_BYTES`].
pub struct BsaPages {
    // Dropped before `map`.
    heap: buddy_system_allocator::LockedHeap<33>,
    _map: Mapping,
}

impl BsaPages {
    /// The heap over a fresh mapping of `bytes`.
    pub fn new(bytes: usize) -> Self {
        let map = Mapping::new(bytes, CONFIG.max_block_size());
        let heap = buddy_system_allocator::LockedHeap::<33>::new();
        // SAFETY: the mapping is ours, unused, and outlives the heap (same
        // struct, dropped after it).
        unsafe { heap.lock().init(map.start() as usize, map.len()) };
        BsaPages { heap, _map: map }
    }
}

impl PageAlloc for BsaPages {
    #[inline(always)]
    fn alloc(&self, o: u8) -> NonNull<u8> {
        // SAFETY: the layout has a non-zero size.
        match NonNull::new(unsafe { self.heap.alloc(layout(o)) }) {
            Some(p) => p,
            None => exhausted("buddy_system_allocator", o),
        }
    }
    #[inline(always)]
    fn alloc_zeroed(&self, o: u8) -> NonNull<u8> {
        // SAFETY: the layout has a non-zero size.
        match NonNull::new(unsafe { self.heap.alloc_zeroed(layout(o)) }) {
            Some(p) => p,
            None => exhausted("buddy_system_allocator", o),
        }
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>, o: u8) {
        // SAFETY: forwarded contract.
        unsafe { self.heap.dealloc(p.as_ptr(), layout(o)) }
    }
}

// ---------------------------------------------------------------------------
// The churn: alloc N order-0 pages, then free them
// ---------------------------------------------------------------------------

/// Order-0 pages of a [`PageAlloc`] as the items of the measurement
/// module's alloc-N-then-free-N round ([`alloc_free_case`]).
pub struct Order0<A>(pub Arc<A>);

impl<A: PageAlloc> AllocFree for Order0<A> {
    #[inline(always)]
    fn alloc(&self) -> NonNull<u8> {
        self.0.alloc(0)
    }
    #[inline(always)]
    unsafe fn free(&self, p: NonNull<u8>) {
        // SAFETY: forwarded contract (allocated above with order 0).
        unsafe { self.0.free(p, 0) }
    }
    fn enter_thread(&self, t: usize) {
        self.0.enter_thread(t)
    }
}

/// A case running `iters` rounds of alloc-N-then-free-N of order-0 pages,
/// timing itself per round (alloc + free; [`per_item`] makes it per page);
/// with `phases`, each sample's alloc and free times per page are kept
/// apart too. With `threads == 2` each worker calls
/// [`PageAlloc::enter_thread`] first.
pub fn churn_case<A: PageAlloc>(
    name: impl Into<String>,
    a: &Arc<A>,
    n: usize,
    clock: Clock,
    threads: usize,
    phases: Option<Arc<Phases>>,
) -> Case {
    alloc_free_case(name, Order0(a.clone()), n, clock, threads, phases)
}

/// [`churn_case`]'s rounds timed as a whole (one thread, no clock read
/// inside a batch: [`alloc_free_rounds_case`]).
pub fn rounds_case<A: PageAlloc>(name: impl Into<String>, a: &Arc<A>, n: usize) -> Case {
    alloc_free_rounds_case(name, Order0(a.clone()), n)
}

// ---------------------------------------------------------------------------
// Seed 000's table
// ---------------------------------------------------------------------------

/// Seed 000 (mmtests pagealloc, Linux 4.10-rc2): per N, `[alloc, free,
/// total]` cycles per order-0 page for vanilla (IRQs disabled around the pcp
/// lists) and irqsafe-v1r5 (preemption only).
const SEED: [(usize, [f64; 3], [f64; 3]); 15] = [
    (1, [287.15, 165.00, 452.15], [219.00, 89.00, 308.00]),
    (2, [221.23, 113.00, 334.23], [183.23, 63.00, 246.23]),
    (4, [187.00, 99.00, 286.00], [151.38, 54.00, 205.38]),
    (8, [167.54, 88.00, 255.54], [132.77, 47.38, 180.15]),
    (16, [156.00, 83.00, 239.00], [123.00, 46.00, 169.00]),
    (32, [149.00, 80.00, 229.00], [118.31, 44.38, 162.69]),
    (64, [138.77, 72.62, 211.38], [116.00, 43.00, 159.00]),
    (128, [145.00, 78.00, 223.00], [118.00, 42.00, 160.00]),
    (256, [136.15, 80.46, 216.62], [125.00, 57.00, 182.00]),
    (512, [147.92, 96.38, 244.31], [121.77, 64.69, 186.46]),
    (1024, [147.23, 107.31, 254.54], [126.15, 72.54, 198.69]),
    (2048, [155.15, 108.92, 264.08], [129.92, 78.08, 208.00]),
    (4096, [164.00, 113.38, 277.38], [136.77, 82.23, 219.00]),
    (8192, [166.92, 112.08, 279.00], [138.08, 82.85, 220.92]),
    (16384, [159.00, 110.38, 269.38], [138.00, 81.92, 219.92]),
];

/// The seed's figures for `n`: `(vanilla, irqsafe-v1r5)`.
fn seed_for(n: usize) -> Option<([f64; 3], [f64; 3])> {
    SEED.iter().find(|s| s.0 == n).map(|s| (s.1, s.2))
}

fn seed_ref(label: &'static str, f: [f64; 3], ghz: Option<f64>) -> SeedRef {
    SeedRef {
        label,
        cycles: f[2],
        // The seed's machine clock is not published: its cycles at this
        // machine's TSC rate.
        ns: ghz.map_or(f64::NAN, |g| f[2] / g),
    }
}

/// N values of the `pages` table (quick, default, `--full`).
fn page_counts(cfg: &crate::measure::Config) -> Vec<usize> {
    let full: Vec<usize> = (0..=14).map(|k| 1 << k).collect();
    cfg.sweep(&[1, 64, 4096], &[1, 8, 64, 512, 4096, 16384], &full)
}

/// One summary line of the `pages` table from one N's rows: the line,
/// the buddy's and buddy_system_allocator's medians, the fastest pcp row
/// and the fastest peer.
#[allow(clippy::type_complexity)]
fn summary_line(
    n: usize,
    rows: &[Row],
) -> Option<(String, f64, f64, (&'static str, f64), (&'static str, f64))> {
    let (b, bs, p, q) = (
        median_of(rows, "buddy")?,
        median_of(rows, "buddy_system_allocator")?,
        fastest(rows, &PCP_ROWS)?,
        fastest(rows, &PEER_ROWS)?,
    );
    let (r1, r2) = (p.1 / q.1, b / bs);
    let line = format!(
        "  {n:>6}  {:>7}  {:>7} {:<12}  {:>7} {:<24}  {r1:>5.2}x {:<6}  {:>7}  {r2:>5.2}x {}",
        fmt_num(b),
        fmt_num(p.1),
        p.0.trim_start_matches("pcp "),
        fmt_num(q.1),
        q.0,
        verdict(r1 <= 1.0),
        fmt_num(bs),
        verdict(r2 < 1.0),
    );
    Some((line, b, bs, p, q))
}

/// The column heads of [`summary_line`].
fn summary_header() -> String {
    format!(
        "  {:>6}  {:>7}  {:<20}  {:<32}  {:<13}  {:>7}  {}",
        "N", "buddy", "pcp best (policy)", "best peer", "pcp/peer", "bsa", "buddy/bsa"
    )
}

/// The lowest and highest of `(N, ns)` figures.
fn flatness(totals: &[(usize, f64)]) -> Option<((usize, f64), (usize, f64))> {
    let lo = totals.iter().min_by(|a, b| a.1.total_cmp(&b.1))?;
    let hi = totals.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    Some((*lo, *hi))
}

/// Rows whose minimum is "pcp best" in the summary.
const PCP_ROWS: [&str; 4] = [
    "pcp irq-safe",
    "pcp task-only",
    "pcp trylock",
    "pcp per-thread",
];
/// Rows whose minimum is "best peer" in the summary.
const PEER_ROWS: [&str; 5] = [
    "buddy_system_allocator",
    "glibc (System)",
    "mimalloc",
    "jemalloc",
    "rpmalloc",
];

/// The median ns of row `name` among `rows`.
pub(crate) fn median_of(rows: &[Row], name: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.case.name == name)
        .map(|r| r.stats.ns.median)
}

/// The fastest of the rows named `names`: `(name, median ns)`.
pub(crate) fn fastest(rows: &[Row], names: &[&'static str]) -> Option<(&'static str, f64)> {
    names
        .iter()
        .filter_map(|&nm| median_of(rows, nm).map(|v| (nm, v)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// The `pages` table (see the module docs).
pub struct Pages;

impl Table for Pages {
    fn name(&self) -> &'static str {
        "pages"
    }

    fn about(&self) -> &'static str {
        "seed 000: alloc N order-0 pages then free N (N = 1..16384), alloc/free/total ns per page: buddy, pcp (each policy), peers"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let clock = Clock::new(cx.machine.tsc_ghz);
        let ghz = cx.machine.tsc_ghz;
        let arena = Arena::new(ARENA_BYTES, true);
        let buddy = Arc::new(BuddyPages(arena.clone()));
        let irqsafe = Arc::new(kernel_pcp(&arena, Policy::IrqSafe));
        let taskonly = Arc::new(kernel_pcp(&arena, Policy::TaskOnly));
        let trylock = Arc::new(kernel_pcp(&arena, Policy::Trylock));
        let perthread = Arc::new(per_thread_pcp(&arena, Policy::IrqSafe));
        let gpcp = Arc::new(Global(GlobalPcpHeap));
        let bsa = Arc::new(BsaPages::new(ARENA_BYTES));
        let glibc = Arc::new(Global(System));
        let mi = Arc::new(Global(mimalloc::MiMalloc));
        let je = Arc::new(Global(tikv_jemallocator::Jemalloc));
        let rp = Arc::new(Global(rpmalloc::RpMalloc));

        let mut rows: Vec<Row> = Vec::new();
        let mut summary: Vec<String> = Vec::new();
        let mut buddy_totals: Vec<(usize, f64)> = Vec::new();
        let mut phase_totals: Vec<(usize, f64)> = Vec::new();
        let mut phase_summary: Vec<String> = Vec::new();
        let mut verdicts = Vec::new();
        // Per N: its per-phase cases' count, its whole-round cases' count
        // and the phase records, in the order of `all`.
        let mut groups: Vec<(usize, usize, usize, Vec<Arc<Phases>>)> = Vec::new();
        let mut all: Vec<Case> = Vec::new();
        for n in page_counts(cx.cfg) {
            let section = format!("N = {n}: alloc {n} order-0 pages, then free them (per page)");
            let mut cases = vec![
                with_phases(|ph| churn_case("buddy", &buddy, n, clock, 1, Some(ph))),
                with_phases(|ph| churn_case("pcp irq-safe", &irqsafe, n, clock, 1, Some(ph))),
                with_phases(|ph| churn_case("pcp task-only", &taskonly, n, clock, 1, Some(ph))),
                with_phases(|ph| churn_case("pcp trylock", &trylock, n, clock, 1, Some(ph))),
                with_phases(|ph| churn_case("pcp per-thread", &perthread, n, clock, 1, Some(ph))),
                with_phases(|ph| churn_case("GlobalPcp", &gpcp, n, clock, 1, Some(ph))),
                with_phases(|ph| churn_case("buddy_system_allocator", &bsa, n, clock, 1, Some(ph))),
                with_phases(|ph| churn_case("glibc (System)", &glibc, n, clock, 1, Some(ph))),
                with_phases(|ph| churn_case("mimalloc", &mi, n, clock, 1, Some(ph))),
                with_phases(|ph| churn_case("jemalloc", &je, n, clock, 1, Some(ph))),
                with_phases(|ph| churn_case("rpmalloc", &rp, n, clock, 1, Some(ph))),
            ];
            if n == 1 {
                // The timing floor: the same clock reads with empty phases.
                cases.push(with_phases(|ph| {
                    Case::custom("(timer: empty phases)", move |_, iters| {
                        let (mut ta, mut tf) = (0u64, 0u64);
                        for _ in 0..iters {
                            let t0 = clock.now();
                            black_box(0u8);
                            let t1 = clock.now();
                            black_box(0u8);
                            let t2 = clock.now();
                            ta += t1.wrapping_sub(t0);
                            tf += t2.wrapping_sub(t1);
                        }
                        let it = iters as f64;
                        ph.push(clock.elapsed(ta, it), clock.elapsed(tf, it));
                        clock.elapsed(ta + tf, 1.0)
                    })
                    // Not a `floor()`: back-to-back rdtsc reads with nothing
                    // between them queue on each other, while an allocator's
                    // work overlaps them (26.5 ns here against pcp
                    // per-thread's 17.8 ns at N = 1, issue #21): it is the
                    // timer's cost, not a lower bound.
                }));
            }
            let (cs, phs): (Vec<Case>, Vec<Arc<Phases>>) = cases
                .into_iter()
                .map(|(c, ph)| (c.section(section.clone()), ph))
                .unzip();
            // The same rounds with no clock read inside a batch (the
            // targets' figures, see `alloc_free_rounds_case`), interleaved
            // with the per-phase cases.
            let wsection = format!(
                "N = {n}, whole rounds (the runner's clock around each batch, none inside): per page; the targets"
            );
            let whole = [
                rounds_case("buddy", &buddy, n),
                rounds_case("pcp irq-safe", &irqsafe, n),
                rounds_case("pcp task-only", &taskonly, n),
                rounds_case("pcp trylock", &trylock, n),
                rounds_case("pcp per-thread", &perthread, n),
                rounds_case("GlobalPcp", &gpcp, n),
                rounds_case("buddy_system_allocator", &bsa, n),
                rounds_case("glibc (System)", &glibc, n),
                rounds_case("mimalloc", &mi, n),
                rounds_case("jemalloc", &je, n),
                rounds_case("rpmalloc", &rp, n),
            ];
            groups.push((n, cs.len(), whole.len(), phs));
            all.extend(cs);
            all.extend(whole.into_iter().map(|c| c.section(wsection.clone())));
        }
        // Every N's cases in one interleaved measurement: a burst of the
        // host's load (this VM's come and go over seconds) then takes a
        // few rounds of every case, which the medians drop, instead of
        // every round of one N section (issue #22: one section per run
        // came out 1.5-1.7x slow for the buddy when each N was measured
        // on its own).
        let mut stats = cx.measure(&all).into_iter();
        let mut all = all.into_iter();
        for (n, kp, kw, phs) in groups {
            let cs: Vec<Case> = all.by_ref().take(kp).collect();
            let stats_n: Vec<_> = stats.by_ref().take(kp).collect();
            let wcases: Vec<Case> = all.by_ref().take(kw).collect();
            let wstats: Vec<_> = stats.by_ref().take(kw).collect();
            let stats = stats_n;
            let mut wrows: Vec<Row> = Vec::new();
            for (case, mut st) in wcases.into_iter().zip(wstats) {
                per_item(&mut st, n);
                wrows.push(Row { case, stats: st });
            }
            let seeds = seed_for(n);
            let mut these: Vec<Row> = Vec::new();
            for ((mut case, mut st), ph) in cs.into_iter().zip(stats).zip(phs) {
                per_item(&mut st, n);
                if let Some(note) = phase_note(&ph, st.rounds) {
                    case.note = note;
                }
                let seed = match (case.name.as_str(), seeds) {
                    ("pcp irq-safe", Some((van, _))) => Some(("4.10 vanilla", van)),
                    ("pcp task-only", Some((_, irq))) => Some(("4.10 irqsafe-v1r5", irq)),
                    _ => None,
                };
                if let Some((label, fig)) = seed {
                    case.seed = Some(seed_ref(label, fig, ghz));
                    case.note.push_str(&format!(
                        "; seed alloc {} + free {} cyc",
                        fmt_num(fig[0]),
                        fmt_num(fig[1])
                    ));
                }
                these.push(Row { case, stats: st });
            }

            // The targets, on the whole rounds; the per-phase figures are
            // summarised beside them.
            if let Some((line, b, bs, p, q)) = summary_line(n, &wrows) {
                buddy_totals.push((n, b));
                verdicts.push(
                    Verdict::at_most(
                        format!("N = {n}: pcp best <= best peer"),
                        p.1,
                        q.1,
                        "ns/page",
                    )
                    .vs_peer(q.1 / p.1)
                    .on(&wrows, &[p.0, q.0]),
                );
                verdicts.push(
                    Verdict::at_most(
                        format!("N = {n}: buddy <= buddy_system_allocator"),
                        b,
                        bs,
                        "ns/page",
                    )
                    .vs_peer(bs / b)
                    .on(&wrows, &["buddy", "buddy_system_allocator"]),
                );
                summary.push(line);
            }
            if let Some((line, b, ..)) = summary_line(n, &these) {
                phase_totals.push((n, b));
                phase_summary.push(line);
            }
            rows.extend(these);
            rows.extend(wrows);
        }

        let (batch, high) = irqsafe.pcp.batch_high();
        let (_, high_max) = irqsafe.pcp.high_range();
        let mut notes = vec![
            format!(
                "setup: one buddy (Buddy<Kernel<UserHooks>>: 4 KiB pages, MAX_ORDER 10, Tunables::NO_MIN) over a 1 GiB \
                 MAP_NORESERVE mapping ({} pages after its memmap), shared by the buddy row and the four pcp rows; pcp \
                 batch/high = {batch}/{high}, each CPU's high auto-tuned up to high_max {high_max} (Pcp::new: the kernel's \
                 zone_batchsize/zone_highsize for that zone, Linux 6.7+ tuning); \
                 buddy_system_allocator (LockedHeap<33>) over its own 1 GiB mapping; the others through GlobalAlloc with \
                 Layout 4096/4096 (glibc: posix_memalign). GlobalPcp = pcp::GlobalPcp (per-thread lists over the mmap-backed GlobalBuddy).",
                arena.pages()
            ),
            "ns/op and cycles/op: total (alloc + free) per page, cases interleaved within each N; the note splits the two \
             phases (each timed with rdtsc, as the seed; the '(timer: empty phases)' row is that floor per round, i.e. per page at N = 1)."
                .into(),
            "seed: mmtests pagealloc-micro.stp on Linux 4.10-rc2, TSC cycles per page; vanilla = local_irq_save around the pcp \
             lists (our irq-safe row), irqsafe-v1r5 = preempt_disable only (our task-only row). Its ns column is its cycles at \
             this machine's TSC rate (the seed's clock is not published). Its loop allocates batch+1 pages and divides by \
             batch: its N = 1 figure is the cost of two pages."
                .into(),
            "glibc: freeing N pages at the top of the brk heap trims it (M_TRIM_THRESHOLD 128 KiB), so each round re-grows it \
             and faults the pages in again (two brk calls and about N page faults per round at N >= 64); run with \
             GLIBC_TUNABLES=glibc.malloc.trim_threshold=1073741824 to see glibc without trimming."
                .into(),
            "summary of the whole rounds (total ns per page, no clock read inside a batch; targets: pcp best <= best peer at \
             every N; buddy < buddy_system_allocator at every N, and flat in N, max/min <= 1.2):"
                .into(),
            summary_header(),
        ];
        notes.extend(summary);
        let flat = flatness(&buddy_totals);
        if let Some((lo, hi)) = flat {
            notes.push(format!(
                "buddy flatness (whole rounds): from {} ns/page (N = {}) to {} ns/page (N = {}): max/min {:.2}x",
                fmt_num(lo.1),
                lo.0,
                fmt_num(hi.1),
                hi.0,
                hi.1 / lo.1
            ));
            verdicts.push(Verdict::at_most(
                "buddy flat in N: max/min of its whole-round cost",
                hi.1 / lo.1,
                1.2,
                "x",
            ));
        }
        notes.push(
            "the same summary for the per-phase figures (the seed's method: two rdtsc per round, whose cost is in each figure, \
             a third of the buddy's at N = 1; not the targets):"
                .into(),
        );
        notes.push(summary_header());
        notes.extend(phase_summary);
        if let Some((lo, hi)) = flatness(&phase_totals) {
            notes.push(format!(
                "buddy flatness (per phase): max/min {:.2}x (N = {} / N = {})",
                hi.1 / lo.1,
                hi.0,
                lo.0
            ));
        }
        Report {
            table: "pages",
            title: "Order-0 page churn: alloc N, free N (seed 000: mmtests pagealloc, Mel Gorman's irq-safe pcp patch)"
                .into(),
            notes,
            rows,
            verdicts,
            ..Report::default()
        }
    }
}

// ---------------------------------------------------------------------------
// Two threads
// ---------------------------------------------------------------------------

/// N values of the `pages-2t` table (quick, default, `--full`).
fn page_counts_2t(cfg: &crate::measure::Config) -> Vec<usize> {
    cfg.sweep(&[64], &[1, 64, 4096], &[1, 64, 512, 4096])
}

/// The `pages-2t` table (see the module docs).
pub struct Pages2t;

impl Table for Pages2t {
    fn name(&self) -> &'static str {
        "pages-2t"
    }

    fn about(&self) -> &'static str {
        "seed 000 on two CPUs: alloc N / free N on two pinned threads at once vs one: pcp trylock (StdCpu, PerThread, Kernel<UserHooks>) over one buddy, peers"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let clock = Clock::new(cx.machine.tsc_ghz);
        let arena = Arena::new(ARENA_BYTES, true);
        let std_cpu = Arc::new(std_cpu_pcp(&arena, Policy::Trylock));
        let per_thread = Arc::new(per_thread_pcp(&arena, Policy::Trylock));
        let kernel = Arc::new(kernel_pcp(&arena, Policy::Trylock));
        let buddy = Arc::new(BuddyPages(arena.clone()));
        let glibc = Arc::new(Global(System));
        let mi = Arc::new(Global(mimalloc::MiMalloc));
        let je = Arc::new(Global(tikv_jemallocator::Jemalloc));

        let mut rows: Vec<Row> = Vec::new();
        let mut summary: Vec<String> = Vec::new();
        for n in page_counts_2t(cx.cfg) {
            let section = format!(
                "N = {n}: each thread allocs {n} order-0 pages, then frees them (ns per page per thread)"
            );
            let mut cs = Vec::new();
            macro_rules! pair {
                ($name:expr, $a:expr) => {
                    cs.push(churn_case($name, &$a, n, clock, 1, None));
                    cs.push(churn_case($name, &$a, n, clock, 2, None));
                };
            }
            pair!("pcp trylock, StdCpu", std_cpu);
            pair!("pcp trylock, PerThread", per_thread);
            pair!("pcp trylock, Kernel<UserHooks>", kernel);
            pair!("buddy (one zone lock)", buddy);
            pair!("glibc (System)", glibc);
            pair!("mimalloc", mi);
            pair!("jemalloc", je);
            let cs: Vec<Case> = cs.into_iter().map(|c| c.section(section.clone())).collect();
            let stats = cx.measure(&cs);
            let mut these: Vec<Row> = cs
                .into_iter()
                .zip(stats)
                .map(|(case, mut st)| {
                    per_item(&mut st, n);
                    Row { case, stats: st }
                })
                .collect();
            let mut best: Option<(String, f64)> = None;
            for i in (0..these.len()).step_by(2) {
                let one = these[i].stats.ns.median;
                let two = these[i + 1].stats.ns.median;
                // Pages per second: one page per `ns` on each thread.
                let agg1 = 1e3 / one;
                let agg2 = 2.0 * 1e3 / two;
                these[i].case.note = format!("{} Mpages/s", fmt_num(agg1));
                these[i + 1].case.note = format!(
                    "{} Mpages/s aggregate; 2t/1t scaling {:.2}x",
                    fmt_num(agg2),
                    agg2 / agg1
                );
                let name = these[i].case.name.clone();
                if best.as_ref().is_none_or(|b| agg2 > b.1) {
                    best = Some((name, agg2));
                }
            }
            if let Some((name, agg)) = best {
                summary.push(format!(
                    "  N = {n}: highest aggregate {} Mpages/s: {name}",
                    fmt_num(agg)
                ));
            }
            rows.extend(these);
        }
        let mut notes = vec![
            "each allocator twice: one thread (the measuring thread), then two threads at once pinned to two CPUs, each \
             allocating N pages and freeing them; ns/op is per page per thread (the mean of the two); Mpages/s counts both."
                .to_string(),
            "the pcp rows share one buddy (one zone lock, IRQs saved through the soft mask) with the buddy row; StdCpu = \
             sched_getcpu + per-CPU spin lock (locked strategy); PerThread = the thread's own slot (pinned); Kernel<UserHooks> = \
             virtual CPUs 1 and 2 for the workers (pinned, preempt count + soft IRQ mask)."
                .to_string(),
            "2cpu: the runner's two-CPU check (pure arithmetic on one vs two threads): below ~1.9x the second CPU was \
             partly someone else's, and scaling figures are capped by it."
                .to_string(),
        ];
        notes.extend(summary);
        Report {
            table: "pages-2t",
            title: "Order-0 page churn on two CPUs (seed 000's shape, one and two threads)".into(),
            notes,
            rows,
            ..Report::default()
        }
    }
}

// ---------------------------------------------------------------------------
// Orders
// ---------------------------------------------------------------------------

/// Orders of the `orders` table.
fn orders(cfg: &crate::measure::Config) -> Vec<u8> {
    let full: Vec<u8> = (0..=10).collect();
    cfg.sweep(&[0, 4, 10], &[0, 1, 2, 4, 7, 10], &full)
}

/// The `orders` table (see the module docs).
pub struct Orders;

impl Table for Orders {
    fn name(&self) -> &'static str {
        "orders"
    }

    fn about(&self) -> &'static str {
        "one alloc + free of a block of order 0..=10 (size = align = 4 KiB << order): buddy, pcp, buddy_system_allocator, glibc, mimalloc, jemalloc"
    }

    fn run(&self, cx: &Ctx<'_>) -> Report {
        let arena = Arena::new(ARENA_BYTES, true);
        let buddy = Arc::new(BuddyPages(arena.clone()));
        let trylock = Arc::new(kernel_pcp(&arena, Policy::Trylock));
        let bsa = Arc::new(BsaPages::new(ARENA_BYTES));
        let glibc = Arc::new(Global(System));
        let mi = Arc::new(Global(mimalloc::MiMalloc));
        let je = Arc::new(Global(tikv_jemallocator::Jemalloc));

        fn pair<A: PageAlloc>(name: &str, a: &Arc<A>, o: u8) -> Case {
            let a = a.clone();
            Case::op(name, move || {
                let p = black_box(a.alloc(o));
                // SAFETY: allocated just above with order `o`, freed once.
                unsafe { a.free(p, o) };
            })
        }
        let mut cases = Vec::new();
        for o in orders(cx.cfg) {
            let kib = 4usize << o;
            let section = format!("order {o}: {kib} KiB, {kib} KiB aligned (one alloc + free)");
            let mut these = vec![
                pair("buddy", &buddy, o),
                pair("pcp trylock", &trylock, o),
                pair("buddy_system_allocator", &bsa, o),
                pair("glibc (System)", &glibc, o),
                pair("mimalloc", &mi, o),
                pair("jemalloc", &je, o),
            ];
            these[1].note = if o <= 3 {
                "per-CPU list".into()
            } else {
                "above order 3: straight to the buddy".into()
            };
            cases.extend(these.into_iter().map(|c| c.section(section.clone())));
        }
        let report = cx.report(
            "orders",
            "One alloc + free pair per order (size = alignment = 4 KiB << order)",
            cases,
        );
        let mut summary = vec![
            "buddy and pcp: the arena of the pages table (1 GiB, kernel platform); buddy_system_allocator: its own 1 GiB; \
             the others: GlobalAlloc with Layout (4 KiB << order, 4 KiB << order)."
                .to_string(),
            "a lone block in an otherwise free buddy splits from order 10 and merges back on every pair (as the kernel's \
             would on an idle zone); glibc serves 128 KiB and up with mmap until its dynamic threshold rises."
                .to_string(),
            "  order    buddy   buddy_system_allocator  buddy/bsa   best of glibc/mimalloc/jemalloc".to_string(),
        ];
        for o in orders(cx.cfg) {
            let kib = 4usize << o;
            let section = format!("order {o}: {kib} KiB, {kib} KiB aligned (one alloc + free)");
            let in_sec: Vec<Row> = report
                .rows
                .iter()
                .filter(|r| r.case.section == section)
                .cloned()
                .collect();
            if let (Some(b), Some(bs), Some(p)) = (
                median_of(&in_sec, "buddy"),
                median_of(&in_sec, "buddy_system_allocator"),
                fastest(&in_sec, &["glibc (System)", "mimalloc", "jemalloc"]),
            ) {
                summary.push(format!(
                    "  {o:>5}  {:>7}  {:>23}  {:>8.2}x   {} ({})",
                    fmt_num(b),
                    fmt_num(bs),
                    b / bs,
                    fmt_num(p.1),
                    p.0
                ));
            }
        }
        let mut report = report;
        report.notes.extend(summary);
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Aligned blocks that can be written; zeroed blocks read zero, also
    /// after a dirty free and after a still-zero free.
    fn check<A: PageAlloc>(a: &A) {
        check_orders(a, &[0, 3, 10]);
    }

    fn check_orders<A: PageAlloc>(a: &A, orders: &[u8]) {
        for &o in orders {
            let size = PAGE << o;
            let p = a.alloc(o);
            assert_eq!(p.as_ptr() as usize % size, 0, "order {o} misaligned");
            // SAFETY: a block of `size` bytes we hold.
            unsafe {
                p.as_ptr().write_bytes(0xa5, size);
                a.free(p, o);
            }
            for still_zero in [false, true] {
                let z = a.alloc_zeroed(o);
                // SAFETY: a block of `size` bytes we hold.
                let s = unsafe { core::slice::from_raw_parts(z.as_ptr(), size) };
                assert!(s.iter().all(|&b| b == 0), "order {o}: not zeroed");
                // SAFETY: ours, freed once; it reads as zero (checked).
                unsafe {
                    if still_zero {
                        a.free_zero(z, o)
                    } else {
                        a.free(z, o)
                    }
                }
            }
        }
    }

    #[test]
    fn every_competitor_hands_out_aligned_and_zeroed_pages() {
        let arena = Arena::new(64 << 20, true);
        check(&BuddyPages(arena.clone()));
        for policy in [Policy::IrqSafe, Policy::TaskOnly, Policy::Trylock] {
            check(&kernel_pcp(&arena, policy));
        }
        check(&per_thread_pcp(&arena, Policy::IrqSafe));
        check(&std_cpu_pcp(&arena, Policy::Trylock));
        check(&BsaPages::new(64 << 20));
        check(&Global(System));
        check(&Global(mimalloc::MiMalloc));
        check(&Global(tikv_jemallocator::Jemalloc));
        // rpmalloc refuses alignments above its 64 KiB spans (it is in the
        // order-0 tables only).
        check_orders(&Global(rpmalloc::RpMalloc), &[0, 3]);
        check(&Global(GlobalPcpHeap));
        let dirty = Arena::new(64 << 20, false);
        check(&BuddyPages(dirty.clone()));
        check(&kernel_pcp(&dirty, Policy::Trylock));
    }

    #[test]
    fn seed_rows_cover_the_table() {
        for n in page_counts(&crate::measure::Config::full()) {
            let (van, irq) = seed_for(n).expect("a seed row per N");
            for f in [van, irq] {
                assert!(
                    (f[0] + f[1] - f[2]).abs() < 0.02,
                    "N = {n}: alloc + free != total"
                );
            }
        }
    }
}
