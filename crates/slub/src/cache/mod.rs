//! `struct kmem_cache`: the cache, its per-CPU and per-node state, the
//! mode chosen at first use, free pointers, constructors and accessors.
//! The paths live in one file per layer, each an `impl` block of
//! [`KmemCache`]:
//!
//! * [`fast`]: the dispatchers (`alloc`, `free`, `try_free`) and the fast
//!   paths;
//! * [`sheaf`]: sheaves and the barn;
//! * [`this_cpu`]: the sheaf paths over the platform's restartable
//!   `this_cpu` operations (rseq on std: no slot lock);
//! * [`bulk`]: `alloc_bulk`, `free_bulk`;
//! * [`slab_path`]: the slab layer (`___slab_alloc`, `__slab_free`,
//!   partial lists, new slabs, deactivation, `do_slab_free`);
//! * [`debug`]: `slub_debug` checks;
//! * [`flush`]: flush, shrink, destroy, fork;
//! * [`report`]: statistics, slabinfo, validation;
//! * [`node`]: `kmem_cache_node` per NUMA node, `kmem_cache_alloc_node`,
//!   `get_partial` / `get_any_partial`, the per-node barns.
//!
//! Calls run downwards: fast -> sheaf / bulk -> slab_path -> the page
//! allocator; debug, flush and report use the slab layer.

use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicUsize as CoreAtomicUsize, Ordering as CoreOrdering};

use buddy::Order;
use local_lock::sync::atomic::{AtomicUsize, Ordering};
use local_lock::sync::{AtomicDWord, CachePadded, DWord, SpinLockGuard};
use local_lock::this_cpu::{CpuSheaves, FreeCheck};
use local_lock::{ConstInit, IrqFlags, LocalGuard, LocalLock, Platform, Strategy};

use crate::layout::{
    calculate_layout, calculate_layout_ctor, CacheError, CacheLayout, Geometry, SlabFlags,
};
use crate::slab::{PartialList, Slab, ON_PARTIAL, TAG_SLAB};

use crate::source::SlabSource;
use crate::stats::{SlubStat, StatCells};
use node::{KmemCacheNode, DEFAULT_REMOTE_NODE_DEFRAG_RATIO};
pub use node::{MAX_NUMNODES, NUMA_NO_NODE};

mod build;
mod bulk;
mod debug;
mod fast;
#[cfg(all(test, not(loom)))]
mod fidelity_tests;
mod flush;
mod freeptr;
#[cfg(all(test, not(loom)))]
mod layout_tests;
pub(crate) mod node;
mod pagemap;
mod random_seq;
mod recs;
pub(crate) mod report;
mod sheaf;
mod slab_path;
mod this_cpu;
pub use this_cpu::FastFree;

/// The lock-free part of a CPU's state: `(freelist, tid)` for the lockless
/// fast path, the CPU slab, statistics. (The rest of `kmem_cache_cpu` is
/// [`CpuLocked`], behind the local lock.)
#[repr(C)]
pub(crate) struct CpuFast {
    /// Lockless mode: `(freelist, tid)`, changed by the fast paths'
    /// compare-exchange and by the slow path under the local lock.
    fl_tid: AtomicDWord,
    /// The CPU slab's descriptor address (0: none). Written under the local
    /// lock only; read by the lockless fast paths.
    slab: AtomicUsize,
    /// The CPU slab's first byte and object count (0, 0: none): the locked
    /// fast free recognises an object of the CPU slab by address alone,
    /// without the descriptor lookup (`virt_to_slab`). Written with `slab`.
    slab_base: CoreAtomicUsize,
    slab_objects: CoreAtomicUsize,
    /// `slab_objects * size`: the bytes the CPU slab's objects span (the
    /// hardened range checks).
    slab_span: CoreAtomicUsize,
    /// Slabs on this CPU's partial list (a racy mirror for reports).
    partial_slabs: CoreAtomicUsize,
    stats: StatCells,
}

impl CpuFast {
    #[cfg(not(loom))]
    const fn new() -> Self {
        CpuFast {
            fl_tid: AtomicDWord::new(DWord::new(0, 0)),
            slab: AtomicUsize::new(0),
            slab_base: CoreAtomicUsize::new(0),
            slab_objects: CoreAtomicUsize::new(0),
            slab_span: CoreAtomicUsize::new(0),
            partial_slabs: CoreAtomicUsize::new(0),
            stats: StatCells::new(),
        }
    }
    #[cfg(loom)]
    fn new() -> Self {
        CpuFast {
            fl_tid: AtomicDWord::new(DWord::new(0, 0)),
            slab: AtomicUsize::new(0),
            slab_base: CoreAtomicUsize::new(0),
            slab_objects: CoreAtomicUsize::new(0),
            slab_span: CoreAtomicUsize::new(0),
            partial_slabs: CoreAtomicUsize::new(0),
            stats: StatCells::new(),
        }
    }
}

/// The part of `kmem_cache_cpu` behind the local lock.
#[derive(Debug)]
pub(crate) struct CpuLocked {
    /// Locked mode: the CPU freelist.
    freelist: usize,
    /// Locked mode: the transaction id.
    tid: usize,
    /// First slab of the CPU partial chain (linked through `link`).
    partial: usize,
    /// Slabs on the chain.
    partial_slabs: usize,
    /// Sheaves (0: none): the main sheaf objects are taken from and freed
    /// to, and the spare.
    main: usize,
    spare: usize,
    /// Sheaf frees: the slab the last looked-up free belonged to (its first
    /// byte and object count) and the cache's discard count then. A free
    /// inside it is validated by its address alone while no slab of the
    /// cache has been discarded since (a discarded slab's memory may belong
    /// to someone else now).
    vbase: usize,
    vobjects: usize,
    /// `vobjects * size`: the bytes the slab's objects span.
    vspan: usize,
    vgen: usize,
}

impl ConstInit for CpuLocked {
    const INIT: Self = CpuLocked {
        freelist: 0,
        tid: 0,
        partial: 0,
        partial_slabs: 0,
        main: 0,
        spare: 0,
        vbase: 0,
        vobjects: 0,
        vspan: 0,
        vgen: 0,
    };
}

/// A sheaf: one page block of the page allocator holding `size`, a barn
/// link and up to `capacity` object pointers (exposed addresses).
#[derive(Clone, Copy)]
struct Sheaf(usize);

impl Sheaf {
    const HDR: usize = 2;
    #[inline(always)]
    fn word(self, i: usize) -> &'static core::sync::atomic::AtomicUsize {
        let p = core::ptr::with_exposed_provenance_mut::<usize>(
            self.0 + i * core::mem::size_of::<usize>(),
        );
        // SAFETY: a sheaf page holds HDR + capacity words and is only
        // touched by its current holder (a CPU slot or the barn lock).
        unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }
    }
    #[inline(always)]
    fn size(self) -> usize {
        self.word(0).load(CoreOrdering::Relaxed)
    }
    #[inline(always)]
    fn set_size(self, n: usize) {
        self.word(0).store(n, CoreOrdering::Relaxed)
    }
    #[inline(always)]
    fn next(self) -> usize {
        self.word(1).load(CoreOrdering::Relaxed)
    }
    #[inline(always)]
    fn set_next(self, n: usize) {
        self.word(1).store(n, CoreOrdering::Relaxed)
    }
    #[inline(always)]
    fn get(self, i: usize) -> usize {
        self.word(Self::HDR + i).load(CoreOrdering::Relaxed)
    }
    /// The address of entry `i` (the key of its encoding).
    #[inline(always)]
    fn entry_addr(self, i: usize) -> usize {
        self.0 + (Self::HDR + i) * core::mem::size_of::<usize>()
    }
    #[inline(always)]
    fn set(self, i: usize, v: usize) {
        self.word(Self::HDR + i).store(v, CoreOrdering::Relaxed)
    }
    /// The object slots as pointers.
    fn objects(self) -> *mut *mut u8 {
        core::ptr::with_exposed_provenance_mut::<*mut u8>(
            self.0 + Self::HDR * core::mem::size_of::<usize>(),
        )
    }
}

/// The per-node barn: bounded lists of full and empty sheaves.
#[derive(Debug)]
pub(crate) struct Barn {
    full: usize,
    nr_full: usize,
    empty: usize,
    nr_empty: usize,
}

impl Barn {
    /// `MAX_FULL_SHEAVES`, `MAX_EMPTY_SHEAVES`.
    const MAX_FULL: usize = 10;
    const MAX_EMPTY: usize = 10;
    const fn new() -> Self {
        Barn {
            full: 0,
            nr_full: 0,
            empty: 0,
            nr_empty: 0,
        }
    }
}

/// An encoded free pointer (`freeptr_t`): the word a free object holds at
/// the cache's free-pointer offset, from which
/// [`KmemCache::fp_decode`] recovers the next free object (or 0, the end
/// of the freelist). In unhardened caches the word is the pointer itself;
/// in hardened ones it is obfuscated with the cache's secret and the
/// word's address, so the end of a freelist is not the zero word.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreePtr(usize);

impl FreePtr {
    /// The zero word: the end of a freelist in an unhardened cache; in a
    /// hardened one, what [`KmemCache::clear_fp`] leaves in an object
    /// being handed out (it decodes to neither null nor an object).
    pub(crate) const NULL: FreePtr = FreePtr(0);

    /// Whether this is the zero word ([`NULL`](Self::NULL)).
    #[inline(always)]
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) const fn is_null(self) -> bool {
        self.0 == 0
    }

    /// The word as stored.
    #[inline(always)]
    pub(crate) const fn raw(self) -> usize {
        self.0
    }
}

type Guard<'a, P, const N: usize> = LocalGuard<'a, CpuLocked, P, N>;

/// A cache's constructor (`s->ctor`), run on every object of a new slab.
#[derive(Clone, Copy)]
pub(crate) enum Ctor {
    /// The kernel's `void (*ctor)(void *)` ([`KmemCache::with_ctor`]).
    Raw(fn(NonNull<u8>)),
    /// A typed cache's `fn(&mut MaybeUninit<T>) -> &mut T`, called through
    /// this ABI-compatible type (every argument and result a thin
    /// pointer); the result must be the object (the proof it was
    /// initialised).
    Typed(fn(NonNull<u8>) -> NonNull<u8>),
}

/// A node spin lock (`list_lock`, the barn's lock) with interrupts saved
/// (`spin_lock_irqsave`).
struct IrqSpinGuard<'a, T, P: Platform> {
    g: core::mem::ManuallyDrop<SpinLockGuard<'a, T>>,
    platform: &'a P,
    flags: IrqFlags,
}

type NodeGuard<'a, P> = IrqSpinGuard<'a, PartialList<ON_PARTIAL>, P>;

type NodeBarnGuard<'a, P> = IrqSpinGuard<'a, Barn, P>;

impl<T, P: Platform> core::ops::Deref for IrqSpinGuard<'_, T, P> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.g
    }
}

impl<T, P: Platform> core::ops::DerefMut for IrqSpinGuard<'_, T, P> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.g
    }
}

impl<T, P: Platform> Drop for IrqSpinGuard<'_, T, P> {
    fn drop(&mut self) {
        // SAFETY: dropped once, here; then the saved IRQ state comes back.
        unsafe {
            core::mem::ManuallyDrop::drop(&mut self.g);
            self.platform.irq_restore(self.flags);
        }
    }
}

/// How a cache's operations are protected, chosen at first use
/// (`KmemCache::init_mode`); stored as its `u8` in `KmemCache::mode`.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Not chosen yet: the next operation runs `init_mode`.
    Unknown = 0,
    /// The lockless `(freelist, tid)` compare-exchange fast paths.
    Lockless = 1,
    /// The fast paths under the local lock.
    Locked = 2,
    /// Debug flags: every operation under the list lock with checks.
    Debug = 3,
}

impl Mode {
    /// Decodes a stored mode (an unknown value reads as `Unknown`).
    #[inline(always)]
    const fn from_u8(v: u8) -> Mode {
        match v {
            1 => Mode::Lockless,
            2 => Mode::Locked,
            3 => Mode::Debug,
            _ => Mode::Unknown,
        }
    }
}

/// Which inline fast path `alloc`/`try_free` take, stored as its `u8` in
/// `KmemCache::dispatch`. Bits, not a dense enumeration (`Locked`,
/// `Lockless` and `Sheaves` are one bit each, [`Fast::HARDENED`] adds the
/// hardened variant), so the dispatchers compare the loaded byte against
/// these values with two bit tests rather than a jump table. The hot paths
/// are compiled per variant, so an unhardened cache pays no flag test for
/// the hardened checks.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fast {
    /// The out-of-line dispatchers (`alloc_special`, `free_special`):
    /// first use and debug caches.
    Special = 0,
    /// A plain (no sheaves, no debug) cache under the local lock.
    Locked = 1,
    /// A plain cache with the lockless fast paths.
    Lockless = 2,
    /// Sheaves (either mode underneath), no debug.
    Sheaves = 4,
    /// `Locked`, hardened.
    LockedHardened = 1 | Fast::HARDENED,
    /// `Sheaves`, hardened.
    SheavesHardened = 4 | Fast::HARDENED,
    /// Sheaves reached through the platform's restartable `this_cpu`
    /// operations (rseq), no slot lock.
    Rseq = 16,
    /// `Rseq`, hardened.
    RseqHardened = 16 | Fast::HARDENED,
}

impl Fast {
    /// The hardened bit (with `Locked` or `Sheaves`).
    const HARDENED: u8 = 8;
}

/// A SLUB object cache (`struct kmem_cache`) over the page allocator `S`,
/// with per-CPU state for `N` slots of platform `P`.
///
/// See the crate documentation for the fast-path modes, the lock order and
/// the frozen-slab rule.
///
/// Slabs record the cache's id (drawn at first use), not its address, so a
/// cache may be moved like any Rust value.
///
/// ```
/// use local_lock::std_platform::PerThread;
/// use slub::{GlobalPages, KmemCache, SlabFlags};
///
/// let mut cache = KmemCache::<GlobalPages, PerThread>::create(
///     "task_struct", 200, 16, SlabFlags::HARDENED, GlobalPages, PerThread).unwrap();
/// assert_eq!((cache.name(), cache.object_size(), cache.object_align()), ("task_struct", 200, 16));
/// let a = cache.alloc().unwrap();
/// let b = cache.zalloc().unwrap();
/// assert_ne!(a, b);
/// assert_eq!(a.as_ptr() as usize % 16, 0);
/// // SAFETY: `b` is a fresh zeroed object of 200 bytes.
/// assert!(unsafe { core::slice::from_raw_parts(b.as_ptr(), 200) }.iter().all(|&x| x == 0));
/// assert_eq!(cache.nr_slabs(), 1);
/// // SAFETY: ours, each freed once.
/// unsafe {
///     cache.free(a);
///     cache.free(b);
/// }
/// cache.validate();
/// assert_eq!(cache.destroy(), Ok(()), "every object was freed");
/// ```
#[repr(C)]
pub struct KmemCache<S: SlabSource, P: Platform, const N: usize = 64> {
    /// `s->cpu_slab`'s lock and locked part, one slot per CPU, stored last
    /// CPU first (`LocalLock`): CPU 0's slot ends where the header begins.
    cpu: LocalLock<CpuLocked, P, N>,
    name: &'static str,
    /// Unique id, drawn at first use (0 before).
    id: CoreAtomicUsize,
    /// Hardening: the per-cache random value (drawn at first use).
    pub(crate) random: CoreAtomicUsize,
    /// Freelist randomisation: xorshift state (0 until first use), for the
    /// random sequence and each new slab's start in it.
    shuffle: CoreAtomicUsize,
    /// Freelist randomisation: address of the cache's random sequence
    /// (`random_seq`, `oo.objects` u16 object indices in a page block), 0
    /// until the first randomised slab.
    random_seq: CoreAtomicUsize,
    /// Objects per sheaf (0: no sheaves).
    sheaf_capacity: usize,
    lay: CacheLayout,
    flags: SlabFlags,
    geometry: Geometry,
    source: S,
    mode: AtomicU8,
    /// Which fast path `alloc`/`free` take: a [`Fast`] (`Special` on first
    /// use and for debug caches: the out-of-line dispatchers).
    dispatch: AtomicU8,
    /// kmalloc class + 1, or 0.
    kidx: u8,
    /// The inline fast paths' dispatch (`KmemCache::alloc_fast`,
    /// `try_free_fast`): index 1 (hardened), 2 (hardened, every free
    /// reading the marker: `alloc_fast_checked`) or 0 holds the platform's
    /// per-thread area when `dispatch` is `Fast::RseqHardened` or
    /// `Fast::Rseq`, and 0 otherwise; one load both dispatches and gives
    /// the restartable sections their area.
    fast_area: [core::sync::atomic::AtomicIsize; 3],
    /// `s->remote_node_defrag_ratio` (out of 1024; see
    /// [`KmemCache::set_remote_node_defrag_ratio`]).
    defrag_ratio: CoreAtomicUsize,
    /// `get_any_partial`'s draw: a Weyl sequence (see there).
    node_rng: CoreAtomicUsize,
    /// What the restartable hardened free checks (its `gen` is the count
    /// of slabs discarded so far, see `CpuLocked::vgen`).
    fcheck: FreeCheck,
    /// This cache's page-map tag (`pagemap.rs`): 0 before its first slab,
    /// [`pagemap::NO_TAG`] without one, else the tag shifted left by 3.
    map_tag: core::sync::atomic::AtomicU8,
    /// The inline free's page-map check (`pagemap.rs`).
    mcheck: pagemap::MapCheck,
    /// Hardening: the lowest first byte and the highest end of any slab
    /// this cache ever had (grow only): a decoded sheaf entry outside
    /// `[slab_lo, slab_hi)` is not an object of the cache.
    slab_lo: CoreAtomicUsize,
    slab_hi: CoreAtomicUsize,
    /// The same span as one mask test (the hot check): `o` may be an object
    /// of the cache only if `(o ^ slab_ref) & slab_mask == 0`, where
    /// `slab_ref` is the first slab's address (set once) and `slab_mask`
    /// keeps the bits above those in which any slab address differs from
    /// it, and the low bits of word alignment (it only loses bits).
    slab_ref: CoreAtomicUsize,
    slab_mask: CoreAtomicUsize,
    /// Stats of contexts whose CPU is beyond `N` (locked platforms).
    spill_stats: StatCells,
    /// The constructor (`s->ctor`), if any: run on each object when a slab
    /// is made; the free pointer then lives after the object.
    ctor: Option<Ctor>,
    /// The idle shrink's state (`IDLE_ACTIVE`, `IDLE_DIRTY`; see
    /// [`shrink_if_idle`](Self::shrink_if_idle)).
    idle: AtomicU8,
    // The per-CPU records and the nodes after the header (`repr(C)`):
    // the first CPUs' lock slots (at the end of `cpu`), the header, node 0
    // and the first CPUs' records (at the start of `fast`) share a page
    // when the cache starts [`FIRST_CPUS_AT`](Self::FIRST_CPUS_AT) bytes
    // (rounded to its alignment) before a page boundary: one page touched
    // per cache a process uses (two when the sheaf words, the fast
    // records and the nodes were three arrays after the header, five
    // before any of this).
    /// `s->node[0]` (see [`nodes`](Self::nodes)).
    pub(crate) node0: CachePadded<KmemCacheNode>,
    /// Each CPU's sheaf words (the restartable platforms' sheaves,
    /// reached by the platform's `this_cpu` operations only; the locked
    /// and pinned platforms keep theirs in [`CpuLocked`]) and fast record
    /// (lockless fast path, CPU slab, statistics), CPU 0's first.
    fast: recs::CpuRecs<N>,
    /// `s->node[1..]`: with [`node0`](Self::node0), one
    /// [`KmemCacheNode`] per node of the page allocator (`nr_node_ids()`,
    /// at most [`MAX_NUMNODES`]), each with its partial list,
    /// `list_lock`, barn and counters ([`get_node`](Self::get_node)).
    pub(crate) nodes: [CachePadded<KmemCacheNode>; MAX_NUMNODES - 1],
}

// SAFETY: all shared state is atomic or behind the local lock / list lock.
unsafe impl<S: SlabSource, P: Platform, const N: usize> Sync for KmemCache<S, P, N> {}
// SAFETY: as above; the cache owns its slabs.
unsafe impl<S: SlabSource + Send, P: Platform + Send, const N: usize> Send for KmemCache<S, P, N> {}

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// Where the records the first two CPUs use begin in a cache (CPU 1's
    /// lock slot; CPU 0's follows, then the header, node 0, and their
    /// sheaf words and fast records): a cache stored so that this offset
    /// is near the start of a page (a `static` in `.bss`; the cache is
    /// aligned to [`SHEAF_RECORD_STRIDE`](local_lock::this_cpu::SHEAF_RECORD_STRIDE))
    /// has them on one page.
    pub const FIRST_CPUS_AT: usize = core::mem::offset_of!(Self, name)
        - if N >= 2 { 2 } else { N } * LocalLock::<CpuLocked, P, N>::SLOT_BYTES;

    /// Where in its page a cache should start (a multiple of its
    /// alignment, below 4096) for [`FIRST_CPUS_AT`](Self::FIRST_CPUS_AT)
    /// to fall at or just after a page boundary: the pad before a cache in
    /// a page-aligned slot (mm-malloc's `.bss` slots).
    pub const FIRST_CPUS_PAD: usize = {
        let pad = (4096 - Self::FIRST_CPUS_AT % 4096) % 4096;
        let a = core::mem::align_of::<Self>();
        pad.div_ceil(a) * a % 4096
    };

    /// The bytes from [`FIRST_CPUS_AT`](Self::FIRST_CPUS_AT) to the end of
    /// CPU 1's records (what one page should hold).
    pub const FIRST_CPUS_SPAN: usize = core::mem::offset_of!(Self, fast)
        + 2 * local_lock::this_cpu::SHEAF_RECORD_STRIDE
        - Self::FIRST_CPUS_AT;

    /// `tid` step: a power of two >= the slots, so `tid % TID_STEP` names
    /// the CPU.
    pub const TID_STEP: usize = N.next_power_of_two();

    /// Marks the cache as kmalloc class `i` (its slabs' tags say so, and
    /// `kfree` finds the cache from them: [`tag_kmalloc_index`] gives
    /// `i + 1`). Classes 0..13 are [`Kmalloc`](crate::Kmalloc)'s; a front
    /// end with classes of its own (mm-malloc's intermediate classes)
    /// numbers them from 13 on, up to 254, so its size-less free finds them
    /// the same way (`Kmalloc::kfree` refuses them: not its caches).
    ///
    /// [`tag_kmalloc_index`]: crate::slab::tag_kmalloc_index
    #[cfg_attr(loom, allow(dead_code))]
    pub const fn with_kmalloc_index(mut self, i: usize) -> Self {
        self.set_kmalloc_index(i);
        self
    }

    /// [`with_kmalloc_index`](Self::with_kmalloc_index) in place (a cache
    /// built where it lives, e.g. mm-malloc's, without moving it).
    #[cfg_attr(loom, allow(dead_code))]
    pub const fn set_kmalloc_index(&mut self, i: usize) {
        assert!(i < 255, "KmemCache::with_kmalloc_index: class above 254");
        self.kidx = i as u8 + 1;
    }

    /// Enables per-CPU sheaves of `capacity` objects (the kernel's
    /// `kmem_cache_args.sheaf_capacity`; 0 disables them). A sheaf is one
    /// page block, so the capacity is capped by what a block of
    /// `slub_max_order` holds.
    ///
    /// # Panics
    ///
    /// If `capacity` does not fit a sheaf block.
    pub const fn with_sheaves(mut self, capacity: usize) -> Self {
        self.set_sheaves(capacity);
        self
    }

    /// [`with_sheaves`](Self::with_sheaves) in place (typed caches, and a
    /// cache built where it lives).
    ///
    /// # Panics
    ///
    /// If `capacity` does not fit a sheaf block.
    pub const fn set_sheaves(&mut self, capacity: usize) {
        assert!(
            (capacity + Sheaf::HDR) * core::mem::size_of::<usize>()
                <= self.geometry.page_size << self.geometry.max_order,
            "KmemCache::with_sheaves: capacity too large for a sheaf block"
        );
        // Hardened caches with a constructor take the slab paths (see
        // `with_ctor`): no sheaves.
        self.sheaf_capacity = if self.ctor.is_some() && self.flags.contains(SlabFlags::HARDENED) {
            0
        } else {
            capacity
        };
    }

    /// Gives the cache a constructor (the `ctor` of `kmem_cache_create`):
    /// `ctor` runs on every object when a slab is made (`allocate_slab`,
    /// outside the cache's locks), and never again while the slab lives,
    /// so objects must be freed in their constructed state and come back
    /// from [`alloc`](Self::alloc) as the constructor or their last user
    /// left them (type-stable objects: a lock or list head initialised
    /// once).
    ///
    /// As in the kernel, nothing of the cache's own lives in a free
    /// object any more: the free pointer moves after the object
    /// (`calculate_sizes`), [`SlabFlags::POISON`] no longer poisons the
    /// object (only its padding), red zones lie outside it anyway, and
    /// [`SlabFlags::HARDENED`] caches, whose inline paths keep their free
    /// marker in the object's first word, take the slab paths instead
    /// (encoded, checked free pointers after the object; no sheaves:
    /// [`with_sheaves`](Self::with_sheaves) is then ignored).
    /// Unhardened caches keep their sheaves, which write nothing into
    /// objects.
    ///
    /// Must be called before the cache is first used.
    ///
    /// ```
    /// use core::ptr::NonNull;
    /// use core::sync::atomic::{AtomicUsize, Ordering};
    /// use local_lock::std_platform::PerThread;
    /// use slub::{GlobalPages, KmemCache, SlabFlags};
    ///
    /// static BUILT: AtomicUsize = AtomicUsize::new(0);
    /// fn ctor(p: NonNull<u8>) {
    ///     // SAFETY: an object of 32 bytes of the cache, ours for now.
    ///     unsafe { p.as_ptr().write_bytes(0x5c, 32) };
    ///     BUILT.fetch_add(1, Ordering::Relaxed);
    /// }
    /// let c = KmemCache::<_, _>::create("ctor", 32, 8, SlabFlags::HARDENED, GlobalPages, PerThread)
    ///     .unwrap()
    ///     .with_ctor(ctor);
    /// assert!(c.has_ctor() && c.layout().offset >= 32, "free pointer after the object");
    /// let a = c.alloc().unwrap();
    /// // SAFETY: a live 32-byte object of ours.
    /// let bytes = unsafe { core::slice::from_raw_parts(a.as_ptr(), 32) };
    /// assert!(bytes.iter().all(|&b| b == 0x5c));
    /// assert_eq!(BUILT.load(Ordering::Relaxed), c.layout().oo.objects as usize, "once per object");
    /// // SAFETY: ours, freed once (still constructed).
    /// unsafe { c.free(a) };
    /// let b = c.alloc().unwrap();
    /// // SAFETY: as above.
    /// assert!(unsafe { core::slice::from_raw_parts(b.as_ptr(), 32) }.iter().all(|&x| x == 0x5c));
    /// // SAFETY: as above.
    /// unsafe { c.free(b) };
    /// ```
    ///
    /// # Panics
    ///
    /// If the word after the object makes it too large for a slab.
    pub const fn with_ctor(mut self, ctor: fn(NonNull<u8>)) -> Self {
        self.set_ctor(Ctor::Raw(ctor));
        self
    }

    /// [`with_ctor`](Self::with_ctor) for any [`Ctor`] (typed caches).
    pub(crate) const fn set_ctor(&mut self, ctor: Ctor) {
        let lay = match calculate_layout_ctor(
            self.lay.object_size,
            self.lay.align,
            self.flags,
            &self.geometry,
            true,
        ) {
            Ok(l) => l,
            Err(_) => {
                panic!("KmemCache::with_ctor: object too large for a slab with its free pointer")
            }
        };
        self.lay = lay;
        self.ctor = Some(ctor);
        if self.flags.contains(SlabFlags::HARDENED) {
            self.sheaf_capacity = 0;
        }
    }

    /// Whether the cache has a constructor ([`with_ctor`](Self::with_ctor)).
    pub fn has_ctor(&self) -> bool {
        self.ctor.is_some()
    }

    /// Runs the constructor on the object at `obj` (an object of a slab
    /// being made, or one the caller holds).
    #[inline]
    pub(crate) fn run_ctor(&self, obj: usize) {
        let p = Self::obj_ptr(obj);
        match self.ctor {
            None => {}
            Some(Ctor::Raw(f)) => f(p),
            Some(Ctor::Typed(f)) => {
                let r = f(p);
                assert!(
                    r == p,
                    "slub {}: the constructor returned {r:p}, not the object {p:p} it was given",
                    self.name
                );
            }
        }
    }

    /// The cache's flags.
    pub fn flags(&self) -> SlabFlags {
        self.flags
    }

    /// Whether the cache has debug flags (every operation checked, under
    /// the list lock).
    pub fn is_debug(&self) -> bool {
        self.flags.is_debug()
    }

    /// Objects per sheaf (0: sheaves off).
    pub fn sheaf_capacity(&self) -> usize {
        self.sheaf_capacity
    }

    /// The slab tag of this cache.
    #[inline(always)]
    fn slab_tag(&self) -> u32 {
        TAG_SLAB | ((self.kidx as u32) << 8)
    }

    /// The cache's id (0 until first use).
    #[inline(always)]
    pub(crate) fn id(&self) -> usize {
        self.id.load(CoreOrdering::Relaxed)
    }

    /// The cache's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The computed layout.
    pub fn layout(&self) -> &CacheLayout {
        &self.lay
    }

    /// The size the user asked for.
    pub fn object_size(&self) -> usize {
        self.lay.object_size
    }

    /// Alignment every object of this cache has: the configured alignment,
    /// and any larger power of two the stride guarantees (slabs are aligned
    /// to their size), up to the page size.
    pub fn object_align(&self) -> usize {
        let mut stride_align = self.lay.size & self.lay.size.wrapping_neg();
        let pad = self.lay.red_left_pad;
        if pad != 0 {
            // Debug objects sit `red_left_pad` into their slot.
            stride_align = stride_align.min(pad & pad.wrapping_neg());
        }
        stride_align
            .max(self.lay.align)
            .min(self.geometry.page_size)
    }

    /// The page allocator.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The platform.
    pub fn platform(&self) -> &P {
        self.cpu.platform()
    }

    /// Whether this cache's sheaves are reached through the platform's
    /// restartable `this_cpu` operations (rseq on std: no slot lock on
    /// the fast paths), decided at first use from
    /// [`Platform::restartable`].
    ///
    /// ```
    /// use local_lock::std_platform::{PerThread, RseqCpu};
    /// use local_lock::Platform;
    /// use slub::{GlobalPages, KmemCache, SlabFlags};
    /// let c = KmemCache::<_, _>::create("r", 64, 8, SlabFlags::HARDENED, GlobalPages, RseqCpu)
    ///     .unwrap()
    ///     .with_sheaves(32);
    /// // SAFETY: ours, freed once.
    /// unsafe { c.free(c.alloc().unwrap()) };
    /// assert_eq!(c.restartable(), RseqCpu.restartable());
    /// let t = KmemCache::<_, _>::create("t", 64, 8, SlabFlags::HARDENED, GlobalPages, PerThread)
    ///     .unwrap()
    ///     .with_sheaves(32);
    /// // SAFETY: as above.
    /// unsafe { t.free(t.alloc().unwrap()) };
    /// assert!(!t.restartable(), "per-thread slots keep the locked sheaves");
    /// ```
    pub fn restartable(&self) -> bool {
        self.rcs()
    }

    /// Whether the fast paths are the lockless (freelist, tid)
    /// compare-exchange (`true`) or run under the local lock.
    pub fn lockless(&self) -> bool {
        self.mode() == Mode::Lockless
    }

    #[inline(always)]
    fn mode(&self) -> Mode {
        let m = self.mode.load(CoreOrdering::Acquire);
        if m != Mode::Unknown as u8 {
            Mode::from_u8(m)
        } else {
            self.init_mode()
        }
    }

    #[cold]
    fn init_mode(&self) -> Mode {
        let p = self.cpu.platform();
        let lockless = P::HAS_IRQS
            && local_lock::sync::dwcas_is_lock_free()
            && p.default_strategy() == Strategy::Pinned
            && !self.flags.contains(SlabFlags::LOCKED_FASTPATH);
        if lockless {
            assert!(
                p.nr_cpus() <= N,
                "KmemCache {}: the platform has {} CPUs but the cache {N} slots",
                self.name,
                p.nr_cpus()
            );
        }
        assert_eq!(
            self.source.page_size(),
            self.geometry.page_size,
            "KmemCache {}: built for {} B pages but the page allocator has {} B pages",
            self.name,
            self.geometry.page_size,
            self.source.page_size()
        );
        let nodes = self.source.nr_node_ids();
        assert!(
            (1..=MAX_NUMNODES).contains(&nodes),
            "KmemCache {}: the page allocator has {nodes} nodes, at most {MAX_NUMNODES} supported",
            self.name
        );
        static NEXT_ID: CoreAtomicUsize = CoreAtomicUsize::new(1);
        if self.id.load(CoreOrdering::Relaxed) == 0 {
            let _ = self.id.compare_exchange(
                0,
                NEXT_ID.fetch_add(1, CoreOrdering::Relaxed),
                CoreOrdering::Relaxed,
                CoreOrdering::Relaxed,
            );
        }
        if self.flags.contains(SlabFlags::HARDENED) && self.random.load(CoreOrdering::Relaxed) == 0
        {
            // splitmix64 of the platform's seed, the id and the address.
            let mut z = p
                .random_seed()
                .wrapping_add((self.id() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
                ^ ((self as *const Self).addr() as u64).rotate_left(17);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            // The low byte (the free marker's first byte, see
            // `marked_free`) is odd, in 0x81..=0xfd: not 0, not 0xff and
            // not ASCII, the byte values user data holds most often.
            let low = 0x81 + (z as usize & 0x3e);
            // Another context may be in its first use too (threads starting
            // together): the first value stored wins, everyone uses it.
            let _ = self.random.compare_exchange(
                0,
                (z as usize & !0xff) | low,
                CoreOrdering::Relaxed,
                CoreOrdering::Relaxed,
            );
        }
        if self.flags.contains(SlabFlags::RANDOM_FREELIST)
            && self.shuffle.load(CoreOrdering::Relaxed) == 0
        {
            let z = p.random_seed() ^ (self.id() as u64).wrapping_mul(0xd6e8_feb8_6659_fd93);
            let _ = self.shuffle.compare_exchange(
                0,
                (z as usize) | 1,
                CoreOrdering::Relaxed,
                CoreOrdering::Relaxed,
            );
        }
        let m = if self.flags.is_debug() {
            Mode::Debug
        } else if lockless {
            Mode::Lockless
        } else {
            Mode::Locked
        };
        let fc = &self.fcheck;
        fc.recip
            .store(self.lay.reciprocal as usize, CoreOrdering::Relaxed);
        fc.size.store(self.lay.size, CoreOrdering::Relaxed);
        fc.key.store(
            self.random.load(CoreOrdering::Relaxed),
            CoreOrdering::Relaxed,
        );
        fc.nr.store(N, CoreOrdering::Relaxed);
        fc.cap.store(self.sheaf_capacity, CoreOrdering::Relaxed);
        let slab_bytes = self.geometry.page_size << self.lay.oo.order;
        fc.shift
            .store(slab_bytes.trailing_zeros() as usize, CoreOrdering::Relaxed);
        // Every context reads the same area (0 when the platform cannot
        // tell yet, e.g. rseq still being looked up by another thread):
        // never overwrite one with 0.
        let area = p.this_cpu_area();
        if area != 0 {
            fc.area.store(area, CoreOrdering::Relaxed);
        }
        // The page-map tag claimed now, before the cache is seen
        // initialised (so before any object exists): with it every free
        // reads the marker (`checked_frees`).
        let checked = self.source.has_page_tags() && self.map_tag_now().is_some();
        self.mode.store(m as u8, CoreOrdering::Release);
        let plain = self.sheaf_capacity == 0 && !self.flags.is_debug();
        let h = self.hardened();
        // Restartable sheaves need the sheaf layout the sequences assume.
        // Several nodes: the locked sheaves, whose free path checks the
        // object's node (the restartable sequences do not know nodes).
        let rseq = p.restartable()
            && area != 0
            && nodes == 1
            && core::mem::size_of::<CachePadded<CpuSheaves>>() == 128
            && Sheaf::HDR == local_lock::this_cpu::SHEAF_HDR_WORDS;
        let f = match m {
            // Their inline paths keep the free pointer at word 0: a
            // constructor's object is the caller's (see `with_ctor`).
            Mode::Locked if plain && h && self.ctor.is_some() => Fast::Special,
            Mode::Locked if plain && h => Fast::LockedHardened,
            Mode::Locked if plain => Fast::Locked,
            Mode::Lockless if plain => Fast::Lockless,
            Mode::Locked | Mode::Lockless if self.sheaf_capacity != 0 && rseq && h => {
                Fast::RseqHardened
            }
            Mode::Locked | Mode::Lockless if self.sheaf_capacity != 0 && rseq => Fast::Rseq,
            Mode::Locked | Mode::Lockless if self.sheaf_capacity != 0 && h => Fast::SheavesHardened,
            Mode::Locked | Mode::Lockless if self.sheaf_capacity != 0 => Fast::Sheaves,
            _ => Fast::Special,
        };
        // The hardened fast paths address the free pointer without the
        // offset (`fp_word_fast`).
        assert!(
            f as u8 & Fast::HARDENED == 0 || self.lay.offset == 0,
            "KmemCache {}: hardened fast path with the free pointer at {}",
            self.name,
            self.lay.offset
        );
        // Release (and Acquire where `mode` and `dispatch` are read): a
        // context that sees the cache initialised sees its secret and
        // `fcheck` too.
        // Contexts in their first use together may decide differently
        // (the platform's own first use reentering it, e.g. rseq's lookup
        // allocating: other threads wait for that decision, see
        // `rseq::available`): the first decision stands, so the inline
        // fast paths (`fast_area`) and the dispatch never disagree.
        if self
            .dispatch
            .compare_exchange(
                Fast::Special as u8,
                f as u8,
                CoreOrdering::AcqRel,
                CoreOrdering::Acquire,
            )
            .is_ok()
        {
            if f == Fast::RseqHardened && checked {
                // Every free reads the marker (the page map names the
                // cache): the inline paths of `alloc_fast_checked`.
                self.fast_area[2].store(area, CoreOrdering::Release);
            } else if f == Fast::RseqHardened {
                self.fast_area[1].store(area, CoreOrdering::Release);
            } else if f == Fast::Rseq {
                self.fast_area[0].store(area, CoreOrdering::Release);
            }
        }
        m
    }

    #[inline(always)]
    fn next_tid(tid: usize, cpu: usize) -> usize {
        if tid == 0 {
            (cpu % Self::TID_STEP) + Self::TID_STEP
        } else {
            tid.wrapping_add(Self::TID_STEP)
        }
    }

    /// Installs `slab` (a descriptor address, or 0) as the CPU slab of `c`,
    /// under `c`'s local lock (or with exclusive access).
    #[inline]
    fn set_cpu_slab(&self, c: &CpuFast, slab: usize) {
        let (base, objects) = if slab == 0 {
            (0, 0)
        } else {
            // SAFETY: the caller installs a slab it holds.
            let s = unsafe { Slab::from_addr(slab) };
            let order = s.0.order().expect("a slab is an allocated block");
            (s.base().addr(), self.objects_of(order))
        };
        c.slab_base.store(base, CoreOrdering::Relaxed);
        c.slab_objects.store(objects, CoreOrdering::Relaxed);
        c.slab_span
            .store(objects * self.lay.size, CoreOrdering::Relaxed);
        c.slab.store(slab, Ordering::Release);
    }

    /// Objects in a slab of `order` (the preferred order or the fallback):
    /// from the block's order, no double-word load.
    #[inline(always)]
    fn objects_of(&self, order: Order) -> usize {
        if order.get() == self.lay.oo.order {
            self.lay.oo.objects as usize
        } else {
            self.lay.min.objects as usize
        }
    }

    /// Whether `a` is an object of the CPU's validated slab range (sheaf
    /// frees), recorded while the cache's discard count was `gen`.
    #[inline(always)]
    fn in_validated_range(&self, c: &CpuLocked, a: usize, gen: usize) -> bool {
        c.vgen == gen
            && self
                .obj_index(a.wrapping_sub(c.vbase), c.vobjects)
                .is_some()
    }

    /// The index of the object at offset `off` of a slab, if `off` is an
    /// object boundary below `objects` (`obj_to_index` by multiplication
    /// with the stride's odd inverse: no division;
    /// [`CacheLayout::object_index`]).
    #[inline(always)]
    fn obj_index(&self, off: usize, objects: usize) -> Option<usize> {
        self.lay.object_index(off, objects)
    }

    /// `local_lock_irqsave(&s->cpu_slab->lock)`; a plain `local_lock` on
    /// platforms without interrupts (nothing to save).
    #[inline(always)]
    fn lock_cpu(&self) -> Guard<'_, P, N> {
        if P::HAS_IRQS {
            self.cpu.lock_irqsave()
        } else {
            self.cpu.lock()
        }
    }

    #[inline(always)]
    fn fast_of(&self, cpu: usize) -> &CpuFast {
        &self.fast[cpu % N]
    }

    #[inline(always)]
    fn stat_cpu(&self, cpu: usize, s: SlubStat) {
        self.fast_of(cpu).stats.inc(s)
    }

    /// Counts on the CPU the caller runs on (a hint; counters are racy).
    #[inline(always)]
    fn stat_here(&self, s: SlubStat) {
        let cpu = self.cpu.platform().current_cpu();
        if cpu < N {
            self.fast[cpu].stats.inc(s)
        } else {
            self.spill_stats.inc(s)
        }
    }

    #[inline(always)]
    fn obj_ptr(obj: usize) -> NonNull<u8> {
        // SAFETY: objects are never at address 0.
        unsafe { NonNull::new_unchecked(core::ptr::with_exposed_provenance_mut(obj)) }
    }
}

impl<S: SlabSource, P: Platform, const N: usize> Drop for KmemCache<S, P, N> {
    /// Gives every empty slab back; slabs with objects still allocated are
    /// left (and leak), as `kmem_cache_destroy` leaves them.
    fn drop(&mut self) {
        if self.mode.load(CoreOrdering::Relaxed) != Mode::Unknown as u8 {
            let _ = self.destroy_exclusive();
        }
    }
}

impl<S: SlabSource, P: Platform, const N: usize> fmt::Debug for KmemCache<S, P, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KmemCache")
            .field("name", &self.name)
            .field("layout", &self.lay)
            .field("lockless", &self.lockless())
            .finish_non_exhaustive()
    }
}
