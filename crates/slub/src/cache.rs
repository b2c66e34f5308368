//! `struct kmem_cache` and its allocation and free paths.

use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicUsize as CoreAtomicUsize, Ordering as CoreOrdering};

use buddy::AllocFlags;
use buddy::Order;
use local_lock::sync::atomic::{AtomicUsize, Ordering};
use local_lock::sync::{AtomicDWord, CachePadded, DWord, SpinLock, SpinLockGuard};
use local_lock::{ConstInit, IrqFlags, LocalGuard, LocalLock, Platform, Strategy};

use crate::layout::{calculate_layout, CacheError, CacheLayout, Geometry, SlabFlags};
use crate::slab::{Counters, PartialList, Slab, SlabState, ON_PARTIAL, TAG_KIND, TAG_SLAB};
use crate::source::SlabSource;
use crate::stats::{SlubStat, SlubStats, StatCells};

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

type Guard<'a, P, const N: usize> = LocalGuard<'a, CpuLocked, P, N>;

/// Why a free was refused (the state is left untouched).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// No allocated block of the page allocator contains the address.
    NotAllocated(usize),
    /// The block is not a slab (a page allocation or a large kmalloc).
    NotSlab(usize),
    /// The slab belongs to another cache (its name).
    WrongCache(usize, &'static str),
    /// Not the start of an object: the address and its offset in the slab.
    NotObjectStart(usize, usize),
    /// The object is at the head of the freelist it would be pushed onto:
    /// freed twice (the kernel's naive check).
    DoubleFree(usize),
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FreeError::NotAllocated(a) => {
                write!(
                    f,
                    "{a:#x} is not in any allocated block of this cache's page allocator"
                )
            }
            FreeError::NotSlab(a) => write!(f, "{a:#x} is not in a slab"),
            FreeError::WrongCache(a, other) => {
                write!(f, "{a:#x} is an object of another cache ({other})")
            }
            FreeError::NotObjectStart(a, off) => {
                write!(
                    f,
                    "{a:#x} is not the start of an object (offset {off} in its slab)"
                )
            }
            FreeError::DoubleFree(a) => write!(f, "double free of {a:#x}"),
        }
    }
}

/// A cache still held objects when it was destroyed (they and their slabs
/// are left alone, as `kmem_cache_destroy` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheBusy {
    /// The cache's name.
    pub name: &'static str,
    /// Slabs still allocated.
    pub slabs: usize,
    /// Objects still allocated.
    pub objects: usize,
}

impl fmt::Display for CacheBusy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kmem_cache_destroy {}: slab cache still has objects ({} in {} slabs)",
            self.name, self.objects, self.slabs
        )
    }
}

/// An owner record for reports.
struct Track(Option<(&'static core::panic::Location<'static>, usize, usize)>);

impl fmt::Display for Track {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((loc, cpu, when)) => write!(f, "at {loc} on CPU {cpu}, t={when}"),
            None => write!(f, "(not recorded)"),
        }
    }
}

/// A slabinfo line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabInfo {
    /// Cache name.
    pub name: &'static str,
    /// Objects allocated (objects of CPU slabs count as allocated, as in
    /// `/proc/slabinfo`).
    pub active_objs: usize,
    /// Objects in all slabs.
    pub num_objs: usize,
    /// Stride of an object (`size`).
    pub objsize: usize,
    /// Objects per slab at the preferred order.
    pub objperslab: usize,
    /// Pages per slab at the preferred order.
    pub pagesperslab: usize,
    /// Slabs.
    pub num_slabs: usize,
    /// Slabs on the node partial list.
    pub partial_slabs: usize,
    /// Slabs on CPU partial lists.
    pub cpu_partial_slabs: usize,
    /// Slabs installed as CPU slabs.
    pub cpu_slabs: usize,
}

impl SlabInfo {
    /// The `/proc/slabinfo` header.
    pub const HEADER: &'static str = "# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : slabdata <active_slabs> <num_slabs> : partial <node> <cpu> <cpu_slabs>";
}

impl fmt::Display for SlabInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<17} {:>13} {:>10} {:>9} {:>12} {:>14} : slabdata {:>6} {:>6} : partial {:>4} {:>4} {:>4}",
            self.name,
            self.active_objs,
            self.num_objs,
            self.objsize,
            self.objperslab,
            self.pagesperslab,
            self.num_slabs,
            self.num_slabs,
            self.partial_slabs,
            self.cpu_partial_slabs,
            self.cpu_slabs
        )
    }
}

/// A node spin lock (`list_lock`, the barn's lock) with interrupts saved
/// (`spin_lock_irqsave`).
struct IrqSpinGuard<'a, T, P: Platform> {
    g: core::mem::ManuallyDrop<SpinLockGuard<'a, T>>,
    platform: &'a P,
    flags: IrqFlags,
}

type NodeGuard<'a, P> = IrqSpinGuard<'a, PartialList, P>;
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

const MODE_UNKNOWN: u8 = 0;
const MODE_LOCKLESS: u8 = 1;
const MODE_LOCKED: u8 = 2;
/// `fast`: plain locked / lockless caches (no sheaves, no debug).
const FAST_LOCKED: u8 = 1;
const FAST_LOCKLESS: u8 = 2;
/// `fast`: sheaves (either mode underneath), no debug.
const FAST_SHEAVES: u8 = 4;
/// `fast` bit: hardened (with `FAST_LOCKED` or `FAST_SHEAVES`). The hot
/// paths are compiled per variant, so an unhardened cache pays no flag
/// test for the hardened checks; bits, not a dense enumeration, so the
/// dispatch is two bit tests rather than a jump table.
const FAST_H: u8 = 8;
/// Debug flags: every operation under the list lock with checks.
const MODE_DEBUG: u8 = 3;

/// A SLUB object cache (`struct kmem_cache`) over the page allocator `S`,
/// with per-CPU state for `N` slots of platform `P`.
///
/// See the crate documentation for the fast-path modes, the lock order and
/// the frozen-slab rule.
///
/// Slabs record the cache's id (drawn at first use), not its address, so a
/// cache may be moved like any Rust value.
pub struct KmemCache<S: SlabSource, P: Platform, const N: usize = 64> {
    name: &'static str,
    /// Unique id, drawn at first use (0 before).
    id: CoreAtomicUsize,
    /// kmalloc class + 1, or 0.
    kidx: u8,
    /// Hardening: the per-cache random value (drawn at first use).
    random: CoreAtomicUsize,
    /// Freelist randomisation: xorshift state (0 until first use).
    shuffle: CoreAtomicUsize,
    /// Objects per sheaf (0: no sheaves).
    sheaf_capacity: usize,
    /// The barn (`node->barn`), under its own spin lock (IRQs saved).
    barn: SpinLock<Barn>,
    lay: CacheLayout,
    flags: SlabFlags,
    geometry: Geometry,
    source: S,
    mode: AtomicU8,
    /// Which fast path `alloc`/`free` take: `FAST_LOCKED`, `FAST_LOCKLESS`,
    /// or 0 (first use, sheaves or debug: the out-of-line dispatcher).
    dispatch: AtomicU8,
    cpu: LocalLock<CpuLocked, P, N>,
    fast: [CachePadded<CpuFast>; N],
    pub(crate) node: SpinLock<PartialList>,
    /// Debug caches: the full slabs (`n->full`), under `node` then this.
    full: SpinLock<PartialList>,
    /// Racy mirror of the node's `nr_partial`.
    nr_partial: CoreAtomicUsize,
    nr_slabs: CoreAtomicUsize,
    total_objects: CoreAtomicUsize,
    /// Slabs discarded so far (see `CpuLocked::vgen`).
    discards: CoreAtomicUsize,
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
}

// SAFETY: all shared state is atomic or behind the local lock / list lock.
unsafe impl<S: SlabSource, P: Platform, const N: usize> Sync for KmemCache<S, P, N> {}
// SAFETY: as above; the cache owns its slabs.
unsafe impl<S: SlabSource + Send, P: Platform + Send, const N: usize> Send for KmemCache<S, P, N> {}

/// Builds the struct (shared by the const and the loom constructors).
macro_rules! build_cache {
    ($name:expr, $lay:expr, $flags:expr, $g:expr, $source:expr, $cpu:expr, $fast:expr) => {
        KmemCache {
            name: $name,
            id: CoreAtomicUsize::new(0),
            kidx: 0,
            random: CoreAtomicUsize::new(0),
            shuffle: CoreAtomicUsize::new(0),
            sheaf_capacity: 0,
            barn: SpinLock::new(Barn::new()),
            lay: $lay,
            flags: $flags,
            geometry: $g,
            source: $source,
            mode: AtomicU8::new(MODE_UNKNOWN),
            dispatch: AtomicU8::new(0),
            cpu: $cpu,
            fast: $fast,
            node: SpinLock::new(PartialList::new()),
            full: SpinLock::new(PartialList::new_full()),
            nr_partial: CoreAtomicUsize::new(0),
            nr_slabs: CoreAtomicUsize::new(0),
            total_objects: CoreAtomicUsize::new(0),
            discards: CoreAtomicUsize::new(0),
            slab_lo: CoreAtomicUsize::new(usize::MAX),
            slab_hi: CoreAtomicUsize::new(0),
            slab_ref: CoreAtomicUsize::new(0),
            slab_mask: CoreAtomicUsize::new(usize::MAX),
            spill_stats: StatCells::new(),
        }
    };
}

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// `tid` step: a power of two >= the slots, so `tid % TID_STEP` names
    /// the CPU.
    pub const TID_STEP: usize = N.next_power_of_two();

    /// A cache (`kmem_cache_create`), usable in a `static`: objects of
    /// `size` bytes aligned to `align`, slabs sized for `geometry`.
    ///
    /// # Panics
    ///
    /// On an invalid size or alignment (at compile time in a `static`).
    #[cfg(not(loom))]
    pub const fn new(
        name: &'static str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        geometry: Geometry,
        source: S,
        platform: P,
    ) -> Self {
        let lay = match calculate_layout(size, align, flags, &geometry) {
            Ok(l) => l,
            Err(CacheError::ZeroSize) => panic!("KmemCache::new: object size 0"),
            Err(CacheError::BadAlign(_)) => {
                panic!("KmemCache::new: alignment not a power of two up to the page size")
            }
            Err(CacheError::TooLarge(_)) => panic!("KmemCache::new: object too large for a slab"),
            Err(CacheError::BadPageSize(_)) => panic!("KmemCache::new: bad page size"),
        };
        build_cache!(
            name,
            lay,
            flags,
            geometry,
            source,
            LocalLock::new(platform),
            [const { CachePadded::new(CpuFast::new()) }; N]
        )
    }

    /// A cache sized from the source's page size and the platform's CPU
    /// count (`slub_max_order` 3); an invalid size or alignment is an error.
    pub fn create(
        name: &'static str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        source: S,
        platform: P,
    ) -> Result<Self, CacheError> {
        let g = Geometry {
            page_size: source.page_size(),
            nr_cpus: platform.nr_cpus().min(N),
            max_order: 3,
            page_max_order: source.max_order().get(),
        };
        Self::create_with(name, size, align, flags, g, source, platform)
    }

    /// [`create`](Self::create) with an explicit geometry (e.g. another
    /// `slub_max_order`). Both add the global default flags
    /// ([`set_default_flags`](crate::layout::set_default_flags), the
    /// `slub_debug` of this crate).
    pub fn create_with(
        name: &'static str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        g: Geometry,
        source: S,
        platform: P,
    ) -> Result<Self, CacheError> {
        let flags = flags.union(crate::layout::default_flags());
        let lay = calculate_layout(size, align, flags, &g)?;
        Ok(build_cache!(
            name,
            lay,
            flags,
            g,
            source,
            LocalLock::new_with(platform, |_| CpuLocked::INIT),
            core::array::from_fn(|_| CachePadded::new(CpuFast::new()))
        ))
    }

    /// Marks the cache as kmalloc class `i` (its slabs' tags say so, and
    /// `kfree` finds the cache from them).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) const fn with_kmalloc_index(mut self, i: usize) -> Self {
        self.kidx = i as u8 + 1;
        self
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
        assert!(
            (capacity + Sheaf::HDR) * core::mem::size_of::<usize>()
                <= self.geometry.page_size << self.geometry.max_order,
            "KmemCache::with_sheaves: capacity too large for a sheaf block"
        );
        self.sheaf_capacity = capacity;
        self
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
    /// Whether the fast paths are the lockless (freelist, tid)
    /// compare-exchange (`true`) or run under the local lock.
    pub fn lockless(&self) -> bool {
        self.mode() == MODE_LOCKLESS
    }

    #[inline(always)]
    fn mode(&self) -> u8 {
        let m = self.mode.load(CoreOrdering::Relaxed);
        if m != MODE_UNKNOWN {
            m
        } else {
            self.init_mode()
        }
    }

    #[cold]
    fn init_mode(&self) -> u8 {
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
            self.random.store((z as usize) | 1, CoreOrdering::Relaxed);
        }
        if self.flags.contains(SlabFlags::RANDOM_FREELIST) {
            let z = p.random_seed() ^ (self.id() as u64).wrapping_mul(0xd6e8_feb8_6659_fd93);
            self.shuffle.store((z as usize) | 1, CoreOrdering::Relaxed);
        }
        let m = if self.flags.is_debug() {
            MODE_DEBUG
        } else if lockless {
            MODE_LOCKLESS
        } else {
            MODE_LOCKED
        };
        self.mode.store(m, CoreOrdering::Relaxed);
        let plain = self.sheaf_capacity == 0 && !self.flags.is_debug();
        let h = self.hardened();
        let f = match m {
            MODE_LOCKED if plain && h => FAST_LOCKED | FAST_H,
            MODE_LOCKED if plain => FAST_LOCKED,
            MODE_LOCKLESS if plain => FAST_LOCKLESS,
            MODE_LOCKED | MODE_LOCKLESS if self.sheaf_capacity != 0 && h => FAST_SHEAVES | FAST_H,
            MODE_LOCKED | MODE_LOCKLESS if self.sheaf_capacity != 0 => FAST_SHEAVES,
            _ => 0,
        };
        // The hardened fast paths address the free pointer without the
        // offset (`fp_word_fast`).
        assert!(
            f & FAST_H == 0 || self.lay.offset == 0,
            "KmemCache {}: hardened fast path with the free pointer at {}",
            self.name,
            self.lay.offset
        );
        self.dispatch.store(f, CoreOrdering::Relaxed);
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
    /// object boundary below `objects` (`obj_to_index` by reciprocal
    /// multiplication: no division).
    #[inline(always)]
    fn obj_index(&self, off: usize, objects: usize) -> Option<usize> {
        let idx = ((off as u128 * self.lay.reciprocal as u128) >> 64) as usize;
        (idx < objects && idx * self.lay.size == off).then_some(idx)
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

    // ------------------------------------------------------ free pointers

    /// The free pointer of the free object at `obj` (`get_freepointer`).
    /// Read atomically: the lockless fast path may read an object another
    /// context has just allocated (the value is then discarded by the
    /// failing compare-exchange, as `get_freepointer_safe` does).
    #[inline(always)]
    fn get_fp(&self, obj: usize) -> usize {
        let slot = obj + self.lay.offset;
        let p = core::ptr::with_exposed_provenance_mut::<usize>(slot);
        // SAFETY: objects are word aligned inside slab memory, which stays
        // mapped; the read is atomic.
        let v = unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }.load(CoreOrdering::Relaxed);
        self.fp_code(v, slot)
    }

    /// Sets the free pointer of an object the caller holds.
    #[inline(always)]
    fn set_fp(&self, obj: usize, next: usize) {
        let slot = obj + self.lay.offset;
        let p = core::ptr::with_exposed_provenance_mut::<usize>(slot);
        // SAFETY: as in `get_fp`; the caller holds the object.
        unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }
            .store(self.fp_code(next, slot), CoreOrdering::Relaxed)
    }

    /// `freelist_ptr`: encodes or decodes (the same XOR) a free pointer
    /// stored at `slot`, when the cache is hardened.
    #[inline(always)]
    fn fp_code(&self, v: usize, slot: usize) -> usize {
        if self.flags.contains(SlabFlags::HARDENED) {
            v ^ self.random.load(CoreOrdering::Relaxed) ^ slot.swap_bytes()
        } else {
            v
        }
    }

    /// Whether the cache is hardened: free pointers and sheaf entries
    /// encoded with the cache's secret, free objects recognisable by their
    /// free-pointer word (double frees), decoded pointers checked.
    #[inline(always)]
    fn hardened(&self) -> bool {
        self.flags.contains(SlabFlags::HARDENED)
    }

    /// The free-pointer word of object `obj`.
    #[inline(always)]
    fn fp_word(&self, obj: usize) -> &'static core::sync::atomic::AtomicUsize {
        let p = core::ptr::with_exposed_provenance_mut::<usize>(obj + self.lay.offset);
        // SAFETY: objects are word aligned inside slab memory, which stays
        // mapped while the cache holds the slab; accesses are atomic.
        unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }
    }

    /// The free-pointer word of `obj` on a fast path compiled for hardened
    /// (`H`) or plain caches: hardened caches keep it at offset 0 (see
    /// `cache_layout`; checked when the fast path is chosen), so `H` needs
    /// no offset.
    #[inline(always)]
    fn fp_word_fast<const H: bool>(&self, obj: usize) -> &'static core::sync::atomic::AtomicUsize {
        let p = core::ptr::with_exposed_provenance_mut::<usize>(if H {
            obj
        } else {
            obj + self.lay.offset
        });
        // SAFETY: as for `fp_word`.
        unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }
    }

    /// Hardened caches: the key of `obj`'s free-pointer word (`fp_code`'s
    /// XOR: a free pointer is stored as `next ^ key`, so a free object in
    /// a sheaf, marked as encoding null, holds `key` itself). Only for the
    /// hardened fast paths, whose caches keep the free pointer at offset 0
    /// (the word's address is the object's; debug caches go through
    /// `fp_code` with their own offset).
    #[inline(always)]
    fn fp_key(&self, obj: usize) -> usize {
        self.random.load(CoreOrdering::Relaxed) ^ obj.swap_bytes()
    }

    /// Hardened caches: the key of sheaf entries (entries are stored as
    /// `object ^ key`; the key is the cache's secret, which is also the
    /// marker a free object in a sheaf holds, see
    /// [`looks_free`](Self::looks_free)).
    #[inline(always)]
    fn entry_key(&self) -> usize {
        self.random.load(CoreOrdering::Relaxed)
    }

    /// Whether `o` is a word-aligned address within the span of this
    /// cache's slabs, rounded to the power-of-two window around them (one
    /// mask test; hardened sheaf entries must). A garbage value passes with
    /// a probability of about `window / 2^64 / 8`.
    #[inline(always)]
    fn in_slabs(&self, o: usize) -> bool {
        (o ^ self.slab_ref.load(CoreOrdering::Relaxed)) & self.slab_mask.load(CoreOrdering::Relaxed)
            == 0
    }

    /// Hardened caches: clears the free-pointer word of an object being
    /// handed out, so that it no longer reads as free ([`looks_free`]):
    /// a raw 0 decodes to `secret ^ slot`, which is neither null nor an
    /// object of the slab unless the secret happens to be one of about
    /// `slab bytes` values out of 2^64.
    ///
    /// [`looks_free`]: Self::looks_free
    #[inline(always)]
    fn clear_fp(&self, obj: usize) {
        if self.hardened() {
            let p = core::ptr::with_exposed_provenance_mut::<usize>(obj + self.lay.offset);
            // SAFETY: an object the caller just took; word aligned in slab
            // memory.
            unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }.store(0, CoreOrdering::Relaxed)
        }
    }

    /// Hardened caches: whether `obj` (an object of the slab whose objects
    /// span `[base, base + span)`) reads as free: every free object's
    /// free-pointer word holds the cache's secret (an object in a sheaf:
    /// [`mark_free`](Self::mark_free)) or decodes to null (the end of a
    /// freelist) or to an object of its own slab, and every allocation
    /// clears the word ([`clear_fp`](Self::clear_fp)).
    /// Without the secret, a live object's contents match with negligible
    /// probability. Always `false` for unhardened caches (a user's data
    /// may well hold a pointer into the slab).
    #[inline(always)]
    fn looks_free(&self, obj: usize, base: usize, span: usize) -> bool {
        if !self.hardened() {
            return false;
        }
        let w = self.fp_word(obj).load(CoreOrdering::Relaxed);
        let r = self.random.load(CoreOrdering::Relaxed);
        let d = w ^ r ^ (obj + self.lay.offset).swap_bytes();
        w == r || d == 0 || d.wrapping_sub(base) < span
    }

    /// Hardened caches: whether `next`, read from a free object of the slab
    /// at `base` holding `objects`, is null or an object of that slab
    /// (one range and stride check); unhardened caches trust it.
    #[inline(always)]
    fn fp_ok(&self, next: usize, base: usize, objects: usize) -> bool {
        !self.hardened() || next == 0 || self.obj_index(next.wrapping_sub(base), objects).is_some()
    }

    /// Reports a free pointer that is not an object of its slab (a write
    /// after free, or a freelist cycle) and panics.
    #[cold]
    #[inline(never)]
    fn bad_freelist(&self, base: usize, obj: usize, next: usize, what: &str) -> ! {
        panic!(
            "slub {}: corrupted freelist in slab {base:#x}: free object {obj:#x} {what} \
             (free pointer found: {next:#x}; a write after free or a double free)",
            self.name
        )
    }

    /// Stores `obj` as sheaf entry `i`: hardened caches store it encoded
    /// (`obj ^ secret`), so a write into a freed block that became a sheaf
    /// cannot name an address kmalloc would return.
    #[inline(always)]
    fn sheaf_set(&self, sh: Sheaf, i: usize, obj: usize) {
        if self.hardened() {
            sh.set(i, obj ^ self.entry_key())
        } else {
            sh.set(i, obj)
        }
    }

    /// Sheaf entry `i`, decoded; a hardened cache reports (and panics on)
    /// an entry outside its slabs instead of returning it (`None`: the
    /// caller unlocks, then calls [`bad_sheaf`](Self::bad_sheaf) with the
    /// `Err` value).
    #[inline(always)]
    fn sheaf_get(&self, sh: Sheaf, i: usize) -> Result<usize, usize> {
        let o = sh.get(i);
        if self.hardened() {
            let o = o ^ self.entry_key();
            if !self.in_slabs(o) {
                return Err(o);
            }
            return Ok(o);
        }
        Ok(o)
    }

    /// Hardened caches: marks an object pushed onto a sheaf as free (its
    /// free-pointer word holds the secret, see
    /// [`looks_free`](Self::looks_free)).
    #[inline(always)]
    fn mark_free(&self, obj: usize) {
        if self.hardened() {
            self.fp_word(obj).store(
                self.random.load(CoreOrdering::Relaxed),
                CoreOrdering::Relaxed,
            );
        }
    }

    /// Reports a sheaf whose size word is beyond its capacity.
    #[cold]
    #[inline(never)]
    fn bad_sheaf_size(&self, sh: Sheaf, n: usize) -> ! {
        panic!(
            "slub {}: corrupted sheaf {:#x}: size {n} above its capacity {} (a write after free)",
            self.name, sh.0, self.sheaf_capacity
        )
    }

    /// Reports a sheaf entry that decodes outside the cache's slabs.
    #[cold]
    #[inline(never)]
    fn bad_sheaf(&self, sh: Sheaf, i: usize, o: usize) -> ! {
        panic!(
            "slub {}: corrupted sheaf {:#x}: entry {i} (at {:#x}) decodes to {o:#x}, \
             which is not an object of the cache (slabs within {:#x}..{:#x}; a write after free)",
            self.name,
            sh.0,
            sh.entry_addr(i),
            self.slab_lo.load(CoreOrdering::Relaxed),
            self.slab_hi.load(CoreOrdering::Relaxed)
        )
    }

    #[inline(always)]
    fn obj_ptr(obj: usize) -> NonNull<u8> {
        // SAFETY: objects are never at address 0.
        unsafe { NonNull::new_unchecked(core::ptr::with_exposed_provenance_mut(obj)) }
    }

    // ---------------------------------------------------------- allocation

    /// Allocates an object (`kmem_cache_alloc`); `None` when the page
    /// allocator has no slab to give.
    #[inline(always)]
    #[track_caller]
    pub fn alloc(&self) -> Option<NonNull<u8>> {
        let f = self.dispatch.load(CoreOrdering::Relaxed);
        // The default (`GlobalSlub::new()`) first.
        if f == FAST_SHEAVES | FAST_H {
            match self.alloc_from_pcs::<true>() {
                Some(o) => Some(o),
                None => self.alloc_pcs_fallback(),
            }
        } else if f & FAST_SHEAVES != 0 {
            match self.alloc_from_pcs::<false>() {
                Some(o) => Some(o),
                None => self.alloc_pcs_fallback(),
            }
        } else if f & FAST_LOCKED != 0 {
            if f & FAST_H != 0 {
                self.alloc_locked::<true>()
            } else {
                self.alloc_locked::<false>()
            }
        } else if f == FAST_LOCKLESS {
            self.alloc_lockless()
        } else {
            self.alloc_special(core::panic::Location::caller())
        }
    }

    /// The slab path of a sheaf cache (the trylock failed: re-entry from an
    /// interrupt; or no sheaf could be had).
    #[cold]
    #[inline(never)]
    fn alloc_pcs_fallback(&self) -> Option<NonNull<u8>> {
        if self.mode() == MODE_LOCKLESS {
            self.alloc_lockless()
        } else {
            self.alloc_slow_locked()
        }
    }

    /// `alloc` on first use, with sheaves, or with debug flags.
    #[inline(never)]
    fn alloc_special(&self, loc: &'static core::panic::Location<'static>) -> Option<NonNull<u8>> {
        let m = self.mode();
        if self.flags.is_debug() {
            return self.alloc_debug(loc);
        }
        if self.sheaf_capacity != 0 {
            let o = if self.hardened() {
                self.alloc_from_pcs::<true>()
            } else {
                self.alloc_from_pcs::<false>()
            };
            if o.is_some() {
                return o;
            }
        }
        if m == MODE_LOCKLESS {
            self.alloc_lockless()
        } else if self.hardened() {
            self.alloc_locked::<true>()
        } else {
            self.alloc_locked::<false>()
        }
    }

    /// The lockless fast path: read `(freelist, tid)` (tid and freelist in
    /// one load, so a stale object never pairs with a newer tid), then the
    /// slab; compare-exchange `(object, tid) -> (next, next tid)` on the
    /// CPU we run on. `this_cpu_cmpxchg_double` is one instruction on x86;
    /// here it is "pin (preemption off), same CPU?, compare-exchange,
    /// unpin", as the generic per-CPU ops do: nothing else is disabled.
    #[inline]
    fn alloc_lockless(&self) -> Option<NonNull<u8>> {
        let p = self.cpu.platform();
        loop {
            let cpu = p.current_cpu();
            let c = &self.fast[cpu];
            let d = c.fl_tid.load(Ordering::Acquire);
            let slab = c.slab.load(Ordering::Relaxed);
            if d.lo == 0 || slab == 0 {
                let g = self.lock_cpu();
                return self.slab_alloc_slow(g);
            }
            let next = self.get_fp(d.lo);
            if !self.fp_ok(
                next,
                c.slab_base.load(CoreOrdering::Relaxed),
                c.slab_objects.load(CoreOrdering::Relaxed),
            ) {
                self.recheck_lockless(cpu, d);
                continue;
            }
            let pin = p.pin();
            let ok = pin.cpu == cpu
                && c.fl_tid
                    .compare_exchange(
                        d,
                        DWord::new(next, Self::next_tid(d.hi, cpu)),
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_ok();
            // SAFETY: matches the pin above.
            unsafe { p.unpin(pin) };
            if ok {
                self.clear_fp(d.lo);
                c.stats.inc(SlubStat::ALLOC_FASTPATH);
                return Some(Self::obj_ptr(d.lo));
            }
            c.stats.inc(SlubStat::CMPXCHG_DOUBLE_CPU_FAIL);
        }
    }

    /// A lockless fast path read a free pointer outside the CPU slab: a
    /// race (an interrupt or a remote flush changed the CPU's freelist or
    /// slab meanwhile: retry), or a corrupted freelist, which is reported
    /// when, under the local lock (no flush can be half done), the same
    /// freelist head still holds it.
    #[cold]
    #[inline(never)]
    fn recheck_lockless(&self, cpu: usize, d: DWord) {
        let g = self.lock_cpu();
        if g.cpu() != cpu {
            return;
        }
        let c = self.fast_of(cpu);
        if c.fl_tid.load(Ordering::Acquire) != d {
            return;
        }
        let base = c.slab_base.load(CoreOrdering::Relaxed);
        let next = self.get_fp(d.lo);
        if !self.fp_ok(next, base, c.slab_objects.load(CoreOrdering::Relaxed)) {
            drop(g);
            self.bad_freelist(base, d.lo, next, "points outside its slab");
        }
    }

    /// The fast path under the local lock (PREEMPT_RT, no lock-free
    /// double-word CAS, or the per-thread std platform, where taking the
    /// pinned lock costs no atomic instruction).
    #[inline]
    fn alloc_locked<const H: bool>(&self) -> Option<NonNull<u8>> {
        let mut g = self.lock_cpu();
        let fl = g.freelist;
        if fl != 0 {
            let cpu = g.cpu();
            let w = self.fp_word_fast::<H>(fl);
            let next = if H {
                w.load(CoreOrdering::Relaxed) ^ self.fp_key(fl)
            } else {
                w.load(CoreOrdering::Relaxed)
            };
            if H {
                // The next object must be one of the CPU slab (a write
                // after free cannot send the next allocation elsewhere),
                // and the one handed out no longer reads as free.
                let c = self.fast_of(cpu);
                let base = c.slab_base.load(CoreOrdering::Relaxed);
                let span = c.slab_span.load(CoreOrdering::Relaxed);
                // One range check (null passes: `min`); a pointer inside
                // the slab but off an object boundary cannot be made
                // without the secret.
                if next.min(next.wrapping_sub(base)) >= span {
                    g.unlock();
                    self.bad_freelist(base, fl, next, "points outside its slab");
                }
                w.store(0, CoreOrdering::Relaxed);
            }
            g.freelist = next;
            // Locked mode: the tid only counts transactions (no CAS reads
            // it), so no CPU-naming start value is needed.
            g.tid = g.tid.wrapping_add(Self::TID_STEP);
            self.stat_cpu(cpu, SlubStat::ALLOC_FASTPATH);
            g.unlock();
            return Some(Self::obj_ptr(fl));
        }
        // The slow path re-takes the lock: passing the guard along would
        // keep it in memory on the fast path.
        g.unlock();
        self.alloc_slow_locked()
    }

    #[inline(never)]
    fn alloc_slow_locked(&self) -> Option<NonNull<u8>> {
        self.slab_alloc_slow(self.lock_cpu())
    }

    /// The CPU freelist (either mode), under the local lock.
    #[inline(always)]
    fn c_freelist(&self, g: &Guard<'_, P, N>) -> usize {
        if self.mode() == MODE_LOCKLESS {
            self.fast_of(g.cpu()).fl_tid.load(Ordering::Acquire).lo
        } else {
            g.freelist
        }
    }

    /// Sets the CPU freelist and advances the tid, under the local lock of
    /// the CPU we run on (no fast path of this CPU can run meanwhile).
    #[inline(always)]
    fn c_set_freelist(&self, g: &mut Guard<'_, P, N>, fl: usize) {
        let cpu = g.cpu();
        if self.mode() == MODE_LOCKLESS {
            let c = self.fast_of(cpu);
            let d = c.fl_tid.load(Ordering::Relaxed);
            c.fl_tid
                .store(DWord::new(fl, Self::next_tid(d.hi, cpu)), Ordering::Release);
        } else {
            g.freelist = fl;
            g.tid = Self::next_tid(g.tid, cpu);
        }
    }

    /// Detaches the CPU freelist, advancing the tid. Safe against the
    /// CPU's own lockless fast paths running concurrently (a remote flush):
    /// a compare-exchange loop.
    fn c_take_freelist(&self, g: &mut Guard<'_, P, N>) -> usize {
        let cpu = g.cpu();
        if self.mode() == MODE_LOCKLESS {
            let c = self.fast_of(cpu);
            let mut d = c.fl_tid.load(Ordering::Acquire);
            loop {
                match c.fl_tid.compare_exchange(
                    d,
                    DWord::new(0, Self::next_tid(d.hi, cpu)),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return d.lo,
                    Err(now) => d = now,
                }
            }
        } else {
            let fl = g.freelist;
            g.freelist = 0;
            g.tid = Self::next_tid(g.tid, cpu);
            fl
        }
    }

    /// `load_freelist`: the CPU freelist becomes the rest of `fl`; returns
    /// its first object.
    #[inline(always)]
    fn load_freelist(&self, g: &mut Guard<'_, P, N>, fl: usize) -> NonNull<u8> {
        let next = self.get_fp(fl);
        if self.hardened() {
            // `fl` heads the CPU slab's freelist (installed just before).
            let c = self.fast_of(g.cpu());
            let base = c.slab_base.load(CoreOrdering::Relaxed);
            let objects = c.slab_objects.load(CoreOrdering::Relaxed);
            if self.obj_index(fl.wrapping_sub(base), objects).is_none() {
                self.bad_freelist(base, fl, fl, "is not an object of the CPU slab");
            }
            if !self.fp_ok(next, base, objects) {
                self.bad_freelist(base, fl, next, "points outside its slab");
            }
            self.clear_fp(fl);
        }
        self.c_set_freelist(g, next);
        Self::obj_ptr(fl)
    }

    /// `___slab_alloc`: refill from the CPU slab's freelist, the CPU partial
    /// slabs, the node partial list, or a new slab.
    #[inline(never)]
    fn slab_alloc_slow<'a>(&'a self, mut g: Guard<'a, P, N>) -> Option<NonNull<u8>> {
        self.stat_cpu(g.cpu(), SlubStat::ALLOC_SLOWPATH);
        loop {
            let cpu = g.cpu();
            let c = self.fast_of(cpu);
            let slab = c.slab.load(Ordering::Relaxed);
            if slab != 0 {
                let fl = self.c_freelist(&g);
                if fl != 0 {
                    return Some(self.load_freelist(&mut g, fl));
                }
                // SAFETY: the CPU slab is held (frozen) by this CPU.
                let s = unsafe { Slab::from_addr(slab) };
                let fl = self.get_freelist(s);
                if fl != 0 {
                    self.stat_cpu(cpu, SlubStat::ALLOC_REFILL);
                    return Some(self.load_freelist(&mut g, fl));
                }
                // Full: it leaves the CPU (unfrozen, on no list).
                self.set_cpu_slab(c, 0);
                self.c_set_freelist(&mut g, 0);
                self.stat_cpu(cpu, SlubStat::DEACTIVATE_BYPASS);
            }
            // new_slab: the CPU partial list first.
            if g.partial != 0 {
                // SAFETY: chain members are held (frozen) slabs.
                let s = unsafe { Slab::from_addr(g.partial) };
                g.partial = s.next();
                g.partial_slabs -= 1;
                c.partial_slabs
                    .store(g.partial_slabs, CoreOrdering::Relaxed);
                s.set_next(0);
                self.set_cpu_slab(c, s.addr());
                self.stat_cpu(cpu, SlubStat::CPU_PARTIAL_ALLOC);
                continue;
            }
            // new_objects: outside the local lock (list_lock ranks above
            // it; the page allocator may take long).
            drop(g);
            let (slab, fl) = match self.get_partial() {
                Some(x) => x,
                None => self.new_slab()?,
            };
            g = self.lock_cpu();
            // retry_load_slab: another context may have installed a slab.
            loop {
                let c = self.fast_of(g.cpu());
                let old = c.slab.load(Ordering::Relaxed);
                if old == 0 {
                    break;
                }
                self.set_cpu_slab(c, 0);
                let ofl = self.c_take_freelist(&mut g);
                drop(g);
                // SAFETY: we detached it from the CPU; it is frozen for us.
                self.deactivate_slab(unsafe { Slab::from_addr(old) }, ofl);
                self.stat_here(SlubStat::CPUSLAB_FLUSH);
                g = self.lock_cpu();
            }
            self.set_cpu_slab(self.fast_of(g.cpu()), slab.addr());
            return Some(self.load_freelist(&mut g, fl));
        }
    }

    /// `get_freelist`: takes the CPU slab's whole freelist; the slab stays
    /// frozen if there was one, else it is full and unfrozen.
    fn get_freelist(&self, s: Slab<'_>) -> usize {
        let mut old = s.state();
        loop {
            let mut new = old;
            new.counters.inuse = old.counters.objects;
            new.counters.frozen = old.freelist != 0;
            new.freelist = 0;
            match s.cas(old, new) {
                Ok(()) => return old.freelist,
                Err(now) => {
                    self.stat_here(SlubStat::CMPXCHG_DOUBLE_FAIL);
                    old = now
                }
            }
        }
    }

    /// `spin_lock_irqsave(&n->list_lock)`.
    fn lock_node(&self) -> NodeGuard<'_, P> {
        let platform = self.cpu.platform();
        let flags = platform.irq_save();
        NodeGuard {
            g: core::mem::ManuallyDrop::new(self.node.lock()),
            platform,
            flags,
        }
    }

    /// `get_partial_node`: takes the first usable slab of the node partial
    /// list (frozen, its freelist taken) and moves more to the CPU partial
    /// list until it holds half its limit.
    fn get_partial(&self) -> Option<(Slab<'static>, usize)> {
        if self.nr_partial.load(CoreOrdering::Relaxed) == 0 {
            return None;
        }
        let mut n = self.lock_node();
        let mut object: Option<(Slab<'static>, usize)> = None;
        let mut partial_slabs = 0;
        let mut cur = n.head;
        while cur != 0 {
            // SAFETY: list members are held slabs.
            let s = unsafe { Slab::from_addr(cur) };
            cur = s.next();
            let t = self.acquire_slab(&mut n, s, object.is_none());
            if t == 0 {
                break;
            }
            if object.is_none() {
                object = Some((s, t));
                self.stat_here(SlubStat::ALLOC_FROM_PARTIAL);
            } else {
                self.put_cpu_partial(s, false);
                self.stat_here(SlubStat::CPU_PARTIAL_NODE);
                partial_slabs += 1;
            }
            if self.lay.cpu_partial == 0 || partial_slabs > self.lay.cpu_partial_slabs / 2 {
                break;
            }
        }
        self.nr_partial.store(n.nr_partial, CoreOrdering::Relaxed);
        object
    }

    /// `acquire_slab`: freezes a node partial slab and takes it off the
    /// list; for the CPU slab (`take`) also takes its freelist.
    fn acquire_slab(&self, n: &mut NodeGuard<'_, P>, s: Slab<'_>, take: bool) -> usize {
        let mut old = s.state();
        loop {
            debug_assert!(!old.counters.frozen);
            let mut new = old;
            if take {
                new.counters.inuse = old.counters.objects;
                new.freelist = 0;
            }
            new.counters.frozen = true;
            match s.cas(old, new) {
                Ok(()) => break,
                Err(now) => {
                    self.stat_here(SlubStat::CMPXCHG_DOUBLE_FAIL);
                    old = now
                }
            }
        }
        n.remove(s);
        old.freelist
    }

    /// `allocate_slab`: at the preferred order, else at the minimum order
    /// (`ORDER_FALLBACK`); the objects are linked in address order and the
    /// slab is returned frozen with its freelist taken.
    fn new_slab(&self) -> Option<(Slab<'static>, usize)> {
        let oo = self.lay.oo;
        let mut page = self
            .source
            .alloc_block(Order::new(oo.order)?, AllocFlags::COMP);
        let mut objects = oo.objects as usize;
        if page.is_none() && self.lay.min.order != oo.order {
            page = self
                .source
                .alloc_block(Order::new(self.lay.min.order)?, AllocFlags::COMP);
            objects = self.lay.min.objects as usize;
            if page.is_some() {
                self.stat_here(SlubStat::ORDER_FALLBACK);
            }
        }
        let block = page?;
        let page = block.page;
        // SAFETY: descriptors live as long as the page allocator, which
        // outlives every slab of this cache.
        let s: Slab<'static> = Slab(unsafe { &*(block.owner as *const buddy::Owner) });
        s.0.data().store(self.id(), Ordering::Relaxed);
        s.set_next(0);
        s.set_prev(0);
        s.set_tag(self.slab_tag());
        let base = page.ptr.as_ptr();
        let size = self.lay.size;
        self.slab_lo.fetch_min(base.addr(), CoreOrdering::Relaxed);
        self.slab_hi
            .fetch_max(base.addr() + objects * size, CoreOrdering::Relaxed);
        let _ = self.slab_ref.compare_exchange(
            0,
            base.addr(),
            CoreOrdering::Relaxed,
            CoreOrdering::Relaxed,
        );
        let r = self.slab_ref.load(CoreOrdering::Relaxed);
        for a in [base.addr(), base.addr() + objects * size - 1] {
            let k = usize::BITS - (a ^ r).leading_zeros();
            let high = if k >= usize::BITS {
                0
            } else {
                !((1usize << k) - 1)
            };
            self.slab_mask.fetch_and(
                high | (core::mem::size_of::<usize>() - 1),
                CoreOrdering::Relaxed,
            );
        }
        // Link order: position k holds object (mul * k + start) % objects,
        // the identity unless the freelist is randomised.
        let (mul, start) = self.shuffle_params(objects);
        let obj = |k: usize| {
            let i = (mul * k + start) % objects;
            // SAFETY: inside the block.
            unsafe { base.add(i * size) }.expose_provenance()
        };
        let head = obj(0);
        for k in 0..objects {
            let next = if k + 1 < objects { obj(k + 1) } else { 0 };
            self.set_fp(obj(k), next);
        }
        s.store_state(SlabState {
            freelist: 0,
            counters: Counters {
                inuse: objects as u16,
                objects: objects as u16,
                frozen: true,
            },
        });
        self.nr_slabs.fetch_add(1, CoreOrdering::Relaxed);
        self.total_objects.fetch_add(objects, CoreOrdering::Relaxed);
        self.stat_here(SlubStat::ALLOC_SLAB);
        Some((s, head))
    }

    /// The shuffle of a new slab of `objects` (`shuffle_freelist`): a
    /// per-cache multiplier made coprime with `objects` and a random start;
    /// `(1, 0)` (address order) without `RANDOM_FREELIST`.
    fn shuffle_params(&self, objects: usize) -> (usize, usize) {
        if !self.flags.contains(SlabFlags::RANDOM_FREELIST) || objects < 2 {
            return (1, 0);
        }
        // xorshift64* step (racy updates only lose randomness).
        let mut x = self.shuffle.load(CoreOrdering::Relaxed) as u64 | 1;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.shuffle.store(x as usize, CoreOrdering::Relaxed);
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let mut mul = ((self.id() as u64).wrapping_mul(0x9e37_79b9) % objects as u64) as usize | 1;
        if mul == 1 && objects > 3 {
            mul = 3;
        }
        while gcd(mul, objects) != 1 {
            mul += 1;
        }
        (mul, (r >> 32) as usize % objects)
    }

    /// Returns an empty, unlisted, unfrozen slab to the page allocator.
    fn discard_slab(&self, s: Slab<'_>) {
        let st = s.state();
        debug_assert_eq!(st.counters.inuse, 0);
        let order = s.0.order().expect("a slab is an allocated block");
        let base = s.base();
        s.set_tag(0);
        s.0.data().store(0, Ordering::Relaxed);
        // Invalidates every CPU's validated range (sheaf frees).
        self.discards.fetch_add(1, CoreOrdering::Relaxed);
        self.nr_slabs.fetch_sub(1, CoreOrdering::Relaxed);
        self.total_objects
            .fetch_sub(st.counters.objects as usize, CoreOrdering::Relaxed);
        // SAFETY: we held the block since new_slab and nothing uses it.
        unsafe { self.source.free_block(NonNull::new_unchecked(base), order) };
    }

    // ---------------------------------------------------------------- free

    /// Finds and validates the slab of an object of this cache.
    #[inline(always)]
    fn slab_of(&self, ptr: NonNull<u8>) -> Result<(Slab<'_>, usize), FreeError> {
        self.slab_block_of(ptr).map(|(s, obj, _)| (s, obj))
    }

    /// [`slab_of`](Self::slab_of) with the slab's block.
    #[inline(always)]
    fn slab_block_of(
        &self,
        ptr: NonNull<u8>,
    ) -> Result<(Slab<'_>, usize, buddy::BlockRef<'_>), FreeError> {
        let a = ptr.as_ptr().addr();
        let b = self
            .source
            .block_of(ptr.as_ptr())
            .ok_or(FreeError::NotAllocated(a))?;
        let (s, obj) = self.check_object(Slab(b.owner), b.head, b.order, ptr)?;
        Ok((s, obj, b))
    }

    /// Validates `ptr` as an object of slab `s` (headed at `head`) of this
    /// cache.
    #[inline(always)]
    pub(crate) fn check_object<'s>(
        &self,
        s: Slab<'s>,
        head: NonNull<u8>,
        order: Order,
        ptr: NonNull<u8>,
    ) -> Result<(Slab<'s>, usize), FreeError> {
        let a = ptr.as_ptr().addr();
        if s.tag() & TAG_KIND != TAG_SLAB {
            return Err(FreeError::NotSlab(a));
        }
        if s.cache_id() != self.id() {
            return Err(FreeError::WrongCache(a, "another cache"));
        }
        let off = a - head.as_ptr().addr();
        // Objects per slab from the block's order (no double-word load);
        // the index by reciprocal multiplication (`obj_to_index`), no
        // division on the free path.
        if self.obj_index(off, self.objects_of(order)).is_none() {
            return Err(FreeError::NotObjectStart(a, off));
        }
        Ok((s, ptr.as_ptr().expose_provenance()))
    }

    /// Frees an object (`kmem_cache_free`).
    ///
    /// # Panics
    ///
    /// If `ptr` is not an object of this cache (foreign, inside an object,
    /// of another cache) or is freed twice in a row (the kernel's naive
    /// check), naming the problem; nothing is changed.
    ///
    /// # Safety
    ///
    /// `ptr` was allocated from this cache and is not used afterwards.
    #[inline]
    #[track_caller]
    pub unsafe fn free(&self, ptr: NonNull<u8>) {
        // SAFETY: forwarded.
        if let Err(e) = unsafe { self.try_free(ptr) } {
            panic!("kmem_cache_free({}): {e}", self.name)
        }
    }

    /// [`free`](Self::free) that reports bad input instead of panicking.
    ///
    /// # Safety
    ///
    /// As [`free`](Self::free), for a pointer that passes the checks.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn try_free(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        let f = self.dispatch.load(CoreOrdering::Relaxed);
        // `kfree` -> `virt_to_slab` (validates) -> `free_to_pcs`; the
        // default (`GlobalSlub::new()`) first.
        if f == FAST_SHEAVES | FAST_H {
            if self.free_to_pcs_ptr::<true>(ptr)? {
                return Ok(());
            }
        } else if f & FAST_SHEAVES != 0 {
            if self.free_to_pcs_ptr::<false>(ptr)? {
                return Ok(());
            }
        } else if f & FAST_LOCKED != 0 {
            let done = if f & FAST_H != 0 {
                self.free_locked::<true>(ptr)?
            } else {
                self.free_locked::<false>(ptr)?
            };
            if done {
                return Ok(());
            }
        }
        // The slab path (sheaves: a failed trylock, no sheaf; locked: an
        // object outside the CPU slab).
        // SAFETY: forwarded.
        unsafe { self.try_free_other(ptr, f, core::panic::Location::caller()) }
    }

    /// Locked fast free: an object of the CPU slab is recognised by its
    /// address (the CPU slab is this cache's, held by this CPU) and pushed
    /// onto the CPU freelist; `Ok(false)` sends the caller to the slab
    /// path. Hardened (`H`): refused if it reads as free.
    #[inline(always)]
    fn free_locked<const H: bool>(&self, ptr: NonNull<u8>) -> Result<bool, FreeError> {
        let mut g = self.lock_cpu();
        let cpu = g.cpu();
        let c = self.fast_of(cpu);
        let a = ptr.as_ptr().addr();
        let base = c.slab_base.load(CoreOrdering::Relaxed);
        let objects = c.slab_objects.load(CoreOrdering::Relaxed);
        if self.obj_index(a.wrapping_sub(base), objects).is_none() {
            g.unlock();
            return Ok(false);
        }
        let obj = ptr.as_ptr().expose_provenance();
        let fl = g.freelist;
        let w = self.fp_word_fast::<H>(obj);
        if H {
            // On a freelist of this slab already: its free pointer decodes
            // to null or to an object of the slab.
            let key = self.fp_key(obj);
            let d = w.load(CoreOrdering::Relaxed) ^ key;
            if d.min(d.wrapping_sub(base)) < c.slab_span.load(CoreOrdering::Relaxed) {
                g.unlock();
                return Err(FreeError::DoubleFree(obj));
            }
            w.store(fl ^ key, CoreOrdering::Relaxed);
        } else {
            if fl == obj {
                g.unlock();
                return Err(FreeError::DoubleFree(obj));
            }
            w.store(fl, CoreOrdering::Relaxed);
        }
        g.freelist = obj;
        g.tid = g.tid.wrapping_add(Self::TID_STEP);
        self.stat_cpu(cpu, SlubStat::FREE_FASTPATH);
        g.unlock();
        Ok(true)
    }

    /// `try_free` beyond the inlined paths: the lockless mode, an object
    /// outside the CPU slab on the locked mode, a sheaf free the sheaves
    /// could not take, first use, debug caches.
    ///
    /// # Safety
    ///
    /// As [`try_free`](Self::try_free).
    #[inline(never)]
    unsafe fn try_free_other(
        &self,
        ptr: NonNull<u8>,
        f: u8,
        loc: &'static core::panic::Location<'static>,
    ) -> Result<(), FreeError> {
        if f == 0 {
            // SAFETY: forwarded.
            return unsafe { self.free_special(ptr, loc) };
        }
        let (s, obj) = self.slab_of(ptr)?;
        // SAFETY: forwarded; validated.
        unsafe { self.free_validated(s, obj) }
    }

    /// `try_free` on first use, with sheaves, or with debug flags.
    ///
    /// # Safety
    ///
    /// As [`try_free`](Self::try_free).
    #[inline]
    unsafe fn free_special(
        &self,
        ptr: NonNull<u8>,
        loc: &'static core::panic::Location<'static>,
    ) -> Result<(), FreeError> {
        self.mode();
        if self.flags.is_debug() {
            return self.free_debug(ptr, loc);
        }
        if self.sheaf_capacity != 0 {
            let done = if self.hardened() {
                self.free_to_pcs_ptr::<true>(ptr)?
            } else {
                self.free_to_pcs_ptr::<false>(ptr)?
            };
            if done {
                return Ok(());
            }
        }
        let (s, obj) = self.slab_of(ptr)?;
        // SAFETY: forwarded; validated.
        unsafe { self.free_validated(s, obj) }
    }

    /// The free path of a sheaf cache: validates `ptr` (by the CPU's
    /// validated range, else the descriptor lookup) and pushes it onto the
    /// main sheaf; `Ok(false)` sends the caller to the slab path.
    #[inline(always)]
    fn free_to_pcs_ptr<const H: bool>(&self, ptr: NonNull<u8>) -> Result<bool, FreeError> {
        let Some(g) = self.try_lock_cpu() else {
            return Ok(false);
        };
        let a = ptr.as_ptr().addr();
        let gen = self.discards.load(CoreOrdering::Relaxed);
        if !self.in_validated_range(&g, a, gen) {
            // The lookup runs outside the lock: nothing that may unwind
            // runs under it, so the guard stays in registers.
            g.unlock();
            return self.free_to_pcs_miss(ptr, gen);
        }
        let obj = ptr.as_ptr().expose_provenance();
        let w = self.fp_word_fast::<H>(obj);
        let r = if H {
            self.random.load(CoreOrdering::Relaxed)
        } else {
            0
        };
        // Already free in a sheaf: marked with the secret. (An object on
        // a slab freelist is found by the slab paths' full check.)
        if H && w.load(CoreOrdering::Relaxed) == r {
            g.unlock();
            return Err(FreeError::DoubleFree(obj));
        }
        if g.main != 0 {
            let main = Sheaf(g.main);
            let n = main.size();
            if !H && n > 0 && main.get(n - 1) == obj {
                g.unlock();
                return Err(FreeError::DoubleFree(obj));
            }
            if n < self.sheaf_capacity {
                if H {
                    // Marked free (its free pointer encodes null), and
                    // stored encoded.
                    w.store(r, CoreOrdering::Relaxed);
                    main.set(n, obj ^ r);
                } else {
                    main.set(n, obj);
                }
                main.set_size(n + 1);
                self.stat_cpu(g.cpu(), SlubStat::FREE_PCS);
                g.unlock();
                return Ok(true);
            }
        }
        // The slow path re-takes the lock: passing the guard along would
        // keep it in memory on the fast path.
        g.unlock();
        self.free_to_pcs_relock(obj)
    }

    /// A sheaf free outside the CPU's validated range: the descriptor
    /// lookup, then (under the lock again) the range recorded and the push.
    #[inline(never)]
    fn free_to_pcs_miss(&self, ptr: NonNull<u8>, gen: usize) -> Result<bool, FreeError> {
        let (base, objects) = self.validate_range(ptr)?;
        let obj = ptr.as_ptr().expose_provenance();
        if self.looks_free(obj, base, objects * self.lay.size) {
            return Err(FreeError::DoubleFree(obj));
        }
        let Some(mut g) = self.try_lock_cpu() else {
            return Ok(false);
        };
        g.vbase = base;
        g.vobjects = objects;
        g.vspan = objects * self.lay.size;
        g.vgen = gen;
        self.free_to_pcs_slow(g, ptr.as_ptr().expose_provenance())
    }

    /// [`free_to_pcs_slow`](Self::free_to_pcs_slow) from scratch (the
    /// state is re-read under the lock).
    #[inline(never)]
    fn free_to_pcs_relock(&self, obj: usize) -> Result<bool, FreeError> {
        match self.try_lock_cpu() {
            Some(g) => self.free_to_pcs_slow(g, obj),
            None => Ok(false),
        }
    }

    /// The descriptor lookup of a sheaf free outside the CPU's validated
    /// range: the slab's first byte and object count.
    #[inline(never)]
    fn validate_range(&self, ptr: NonNull<u8>) -> Result<(usize, usize), FreeError> {
        let (_, _, b) = self.slab_block_of(ptr)?;
        Ok((b.head.as_ptr().addr(), self.objects_of(b.order)))
    }

    /// The free after validation (`do_slab_free` of one object).
    ///
    /// # Safety
    ///
    /// `obj` is an allocated object of slab `s` of this cache.
    #[inline]
    pub(crate) unsafe fn free_validated(&self, s: Slab<'_>, obj: usize) -> Result<(), FreeError> {
        if self.hardened() {
            let span = s.state().counters.objects as usize * self.lay.size;
            if self.looks_free(obj, s.base().addr(), span) {
                return Err(FreeError::DoubleFree(obj));
            }
        }
        // SAFETY: a chain of one validated object.
        unsafe { self.do_slab_free(s, obj, obj, 1) }
    }

    /// `__slab_free`: pushes the chain `head..tail` (`cnt` objects of slab
    /// `s`) onto the slab's freelist by compare-exchange, taking the list
    /// lock only when the slab changes lists.
    pub(crate) fn slab_free_slow(
        &self,
        s: Slab<'_>,
        head: usize,
        tail: usize,
        cnt: usize,
    ) -> Result<(), FreeError> {
        self.stat_here(SlubStat::FREE_SLOWPATH);
        let has_cpu_partial = self.lay.cpu_partial != 0;
        let mut n: Option<NodeGuard<'_, P>> = None;
        let mut old = s.state();
        let (was_frozen, new) = loop {
            if n.is_some() {
                n = None;
                old = s.state();
            }
            let prior = old.freelist;
            if prior == tail {
                return Err(FreeError::DoubleFree(tail));
            }
            self.set_fp(tail, prior);
            let mut new = old;
            new.freelist = head;
            new.counters.inuse = old.counters.inuse.wrapping_sub(cnt as u16);
            let was_frozen = old.counters.frozen;
            if (new.counters.inuse == 0 || prior == 0) && !was_frozen {
                if has_cpu_partial && prior == 0 {
                    // A full slab: freeze it onto this CPU's partial list.
                    new.counters.frozen = true;
                } else {
                    n = Some(self.lock_node());
                }
            }
            match s.cas(old, new) {
                Ok(()) => break (was_frozen, new),
                Err(now) => {
                    self.stat_here(SlubStat::CMPXCHG_DOUBLE_FAIL);
                    old = now;
                }
            }
        };
        let Some(mut n) = n else {
            if new.counters.frozen && !was_frozen {
                self.put_cpu_partial(s, true);
                self.stat_here(SlubStat::CPU_PARTIAL_FREE);
            }
            if was_frozen {
                self.stat_here(SlubStat::FREE_FROZEN);
            }
            return Ok(());
        };
        let prior = old.freelist;
        if new.counters.inuse == 0 && n.nr_partial >= self.lay.min_partial {
            // slab_empty
            if prior != 0 {
                n.remove(s);
                self.stat_here(SlubStat::FREE_REMOVE_PARTIAL);
            }
            self.nr_partial.store(n.nr_partial, CoreOrdering::Relaxed);
            drop(n);
            self.stat_here(SlubStat::FREE_SLAB);
            self.discard_slab(s);
            return Ok(());
        }
        // Full -> partial (only without CPU partial lists).
        if !has_cpu_partial && prior == 0 {
            n.add(s, true);
            self.nr_partial.store(n.nr_partial, CoreOrdering::Relaxed);
            self.stat_here(SlubStat::FREE_ADD_PARTIAL);
        }
        Ok(())
    }

    /// `put_cpu_partial`: pushes a frozen slab onto this CPU's partial
    /// list; with `drain`, a full list is first moved to the node list.
    fn put_cpu_partial(&self, s: Slab<'_>, drain: bool) {
        let mut g = self.lock_cpu();
        let cpu = g.cpu();
        let mut to_unfreeze = 0;
        let mut slabs = 0;
        if g.partial != 0 {
            if drain && g.partial_slabs >= self.lay.cpu_partial_slabs {
                to_unfreeze = g.partial;
                g.partial = 0;
                g.partial_slabs = 0;
                self.stat_cpu(cpu, SlubStat::CPU_PARTIAL_DRAIN);
            } else {
                slabs = g.partial_slabs;
            }
        }
        s.set_next(g.partial);
        g.partial = s.addr();
        g.partial_slabs = slabs + 1;
        self.fast_of(cpu)
            .partial_slabs
            .store(g.partial_slabs, CoreOrdering::Relaxed);
        drop(g);
        if to_unfreeze != 0 {
            self.unfreeze_partials(to_unfreeze);
        }
    }

    /// `__unfreeze_partials`: moves a detached CPU partial chain to the node
    /// list; empty slabs beyond `min_partial` go back to the page allocator.
    fn unfreeze_partials(&self, mut chain: usize) {
        let mut discard = 0;
        let mut n = self.lock_node();
        while chain != 0 {
            // SAFETY: chain members are slabs frozen for this CPU.
            let s = unsafe { Slab::from_addr(chain) };
            chain = s.next();
            let mut old = s.state();
            let new = loop {
                let mut new = old;
                new.counters.frozen = false;
                match s.cas(old, new) {
                    Ok(()) => break new,
                    Err(now) => {
                        self.stat_here(SlubStat::CMPXCHG_DOUBLE_FAIL);
                        old = now
                    }
                }
            };
            if new.counters.inuse == 0 && n.nr_partial >= self.lay.min_partial {
                s.set_next(discard);
                discard = s.addr();
            } else {
                n.add(s, true);
                self.stat_here(SlubStat::FREE_ADD_PARTIAL);
            }
        }
        self.nr_partial.store(n.nr_partial, CoreOrdering::Relaxed);
        drop(n);
        while discard != 0 {
            // SAFETY: collected above, unlisted and empty.
            let s = unsafe { Slab::from_addr(discard) };
            discard = s.next();
            self.stat_here(SlubStat::DEACTIVATE_EMPTY);
            self.discard_slab(s);
            self.stat_here(SlubStat::FREE_SLAB);
        }
    }

    /// `deactivate_slab`: gives a CPU slab back, splicing the CPU freelist
    /// `fl` into the slab's; the slab goes to the node partial list (head,
    /// or tail if it received remote frees), stays full on no list, or is
    /// freed when empty beyond `min_partial`.
    fn deactivate_slab(&self, s: Slab<'_>, fl: usize) {
        let mut tail_pos = false;
        if s.state().freelist != 0 {
            self.stat_here(SlubStat::DEACTIVATE_REMOTE_FREES);
            tail_pos = true;
        }
        // Stage one: count the CPU freelist and find its tail; every entry
        // must be an object of the slab, at most `objects` of them.
        let base = s.base().addr();
        let objects = s.state().counters.objects as usize;
        let mut free_delta = 0usize;
        let mut tail = 0;
        let mut p = fl;
        while p != 0 {
            if self.obj_index(p.wrapping_sub(base), objects).is_none() {
                self.bad_freelist(base, tail, p, "points outside its slab");
            }
            if free_delta == objects {
                self.bad_freelist(
                    base,
                    p,
                    p,
                    "is reached again: the CPU freelist is longer than the slab (a cycle)",
                );
            }
            free_delta += 1;
            tail = p;
            p = self.get_fp(p);
        }
        // Stage two: unfreeze with the spliced freelist.
        #[derive(PartialEq)]
        enum M {
            Free,
            Partial,
            Full,
        }
        let mut n: Option<NodeGuard<'_, P>> = None;
        let mut old = s.state();
        let mode = loop {
            let mut new = old;
            if fl != 0 {
                self.set_fp(tail, old.freelist);
                new.freelist = fl;
            }
            new.counters.inuse = old.counters.inuse - free_delta as u16;
            new.counters.frozen = false;
            let mode = if new.counters.inuse == 0
                && self.nr_partial.load(CoreOrdering::Relaxed) >= self.lay.min_partial
            {
                M::Free
            } else if new.freelist != 0 {
                M::Partial
            } else {
                M::Full
            };
            if mode == M::Partial {
                if n.is_none() {
                    n = Some(self.lock_node());
                }
            } else {
                n = None;
            }
            match s.cas(old, new) {
                Ok(()) => break mode,
                Err(now) => {
                    self.stat_here(SlubStat::CMPXCHG_DOUBLE_FAIL);
                    old = now
                }
            }
        };
        match mode {
            M::Partial => {
                let mut n = n.expect("list lock held for a partial slab");
                n.add(s, tail_pos);
                self.nr_partial.store(n.nr_partial, CoreOrdering::Relaxed);
                drop(n);
                self.stat_here(if tail_pos {
                    SlubStat::DEACTIVATE_TO_TAIL
                } else {
                    SlubStat::DEACTIVATE_TO_HEAD
                });
            }
            M::Free => {
                self.stat_here(SlubStat::DEACTIVATE_EMPTY);
                self.discard_slab(s);
                self.stat_here(SlubStat::FREE_SLAB);
            }
            M::Full => self.stat_here(SlubStat::DEACTIVATE_FULL),
        }
    }

    // ------------------------------------------------------------- sheaves

    /// `local_trylock` of the CPU's slot for the sheaves (interrupts saved
    /// where there are any): a context that interrupted the holder gets
    /// `None` and takes the slab path.
    #[inline(always)]
    fn try_lock_cpu(&self) -> Option<Guard<'_, P, N>> {
        if P::HAS_IRQS {
            self.cpu.try_lock_irqsave()
        } else {
            self.cpu.try_lock()
        }
    }

    /// `alloc_empty_sheaf`: a page block for a sheaf.
    fn new_sheaf(&self) -> Option<Sheaf> {
        let bytes = (self.sheaf_capacity + Sheaf::HDR) * core::mem::size_of::<usize>();
        let order = Order::new(crate::layout::get_order(bytes, self.geometry.page_size))?;
        let b = self.source.alloc_block(order, AllocFlags::NONE)?;
        b.owner
            .tag()
            .store(crate::slab::TAG_SHEAF, Ordering::Relaxed);
        let sh = Sheaf(b.page.ptr.as_ptr().expose_provenance());
        sh.set_size(0);
        sh.set_next(0);
        self.stat_here(SlubStat::SHEAF_ALLOC);
        Some(sh)
    }

    /// Frees an empty sheaf's block.
    fn free_sheaf(&self, sh: Sheaf) {
        debug_assert_eq!(sh.size(), 0);
        let p = core::ptr::with_exposed_provenance_mut::<u8>(sh.0);
        if let Some(b) = self.source.block_of(p) {
            b.owner.tag().store(0, Ordering::Relaxed);
            // SAFETY: the block was allocated by `new_sheaf` and is empty.
            unsafe { self.source.free_block(b.head, b.order) };
            self.stat_here(SlubStat::SHEAF_FREE);
        }
    }

    /// `sheaf_flush`: returns a sheaf's objects to their slabs (bulk free).
    fn flush_sheaf(&self, sh: Sheaf) {
        let n = sh.size();
        if n == 0 {
            return;
        }
        if n > self.sheaf_capacity {
            self.bad_sheaf_size(sh, n);
        }
        if self.hardened() {
            // Entries decoded in place for the bulk free.
            for i in 0..n {
                match self.sheaf_get(sh, i) {
                    Ok(o) => sh.set(i, o),
                    Err(o) => self.bad_sheaf(sh, i, o),
                }
            }
        }
        // SAFETY: the sheaf holds `n` validated objects of this cache, each
        // once; NonNull<u8> has the layout of *mut u8.
        let objs = unsafe { core::slice::from_raw_parts(sh.objects() as *const NonNull<u8>, n) };
        // SAFETY: as above.
        if let Err(e) = unsafe { self.free_bulk_slab(objs) } {
            panic!("{}: corrupted sheaf: {e}", self.name)
        }
        sh.set_size(0);
        self.stat_here(SlubStat::SHEAF_FLUSH);
    }

    /// `refill_sheaf`: fills an empty sheaf by bulk allocation; false if the
    /// page allocator ran out.
    fn refill_sheaf(&self, sh: Sheaf) -> bool {
        let cap = self.sheaf_capacity;
        // SAFETY: the sheaf's object area holds `cap` pointers and is ours.
        let out = unsafe { core::slice::from_raw_parts_mut(sh.objects(), cap) };
        if self.alloc_bulk_slab(out) == cap {
            if self.hardened() {
                // Marked free and encoded in place.
                for i in 0..cap {
                    let o = sh.get(i);
                    self.mark_free(o);
                    self.sheaf_set(sh, i, o);
                }
            }
            sh.set_size(cap);
            self.stat_here(SlubStat::SHEAF_REFILL);
            true
        } else {
            false
        }
    }

    fn lock_barn(&self) -> NodeBarnGuard<'_, P> {
        let platform = self.cpu.platform();
        let flags = platform.irq_save();
        NodeBarnGuard {
            g: core::mem::ManuallyDrop::new(self.barn.lock()),
            platform,
            flags,
        }
    }

    /// `barn_replace_empty_sheaf`: a full sheaf for our empty one, which
    /// the barn keeps (or, beyond its limit, is freed).
    fn barn_get_full(&self, empty: Sheaf) -> Option<Sheaf> {
        let mut b = self.lock_barn();
        if b.full == 0 {
            drop(b);
            self.stat_here(SlubStat::BARN_GET_FAIL);
            return None;
        }
        let full = Sheaf(b.full);
        b.full = full.next();
        b.nr_full -= 1;
        let keep = b.nr_empty < Barn::MAX_EMPTY;
        if keep {
            empty.set_next(b.empty);
            b.empty = empty.0;
            b.nr_empty += 1;
        }
        drop(b);
        if !keep {
            self.free_sheaf(empty);
        }
        self.stat_here(SlubStat::BARN_GET);
        Some(full)
    }

    /// `barn_replace_full_sheaf`: gives the barn our full sheaf for an
    /// empty one (from the barn, or new); `Err(full)` when the barn already
    /// holds its limit of full sheaves (or no empty sheaf can be had).
    fn barn_put_full(&self, full: Sheaf) -> Result<Sheaf, Sheaf> {
        let mut b = self.lock_barn();
        if b.nr_full >= Barn::MAX_FULL {
            drop(b);
            self.stat_here(SlubStat::BARN_PUT_FAIL);
            return Err(full);
        }
        let empty = if b.empty != 0 {
            let e = Sheaf(b.empty);
            b.empty = e.next();
            b.nr_empty -= 1;
            Some(e)
        } else {
            None
        };
        let empty = match empty {
            Some(e) => e,
            None => {
                drop(b);
                let Some(e) = self.new_sheaf() else {
                    self.stat_here(SlubStat::BARN_PUT_FAIL);
                    return Err(full);
                };
                b = self.lock_barn();
                if b.nr_full >= Barn::MAX_FULL {
                    drop(b);
                    self.free_sheaf(e);
                    self.stat_here(SlubStat::BARN_PUT_FAIL);
                    return Err(full);
                }
                e
            }
        };
        full.set_next(b.full);
        b.full = full.0;
        b.nr_full += 1;
        drop(b);
        self.stat_here(SlubStat::BARN_PUT);
        Some(empty).ok_or(full)
    }

    /// Allocation from the per-CPU sheaves: pop from main; else swap with
    /// a non-empty spare; else trade the empty main for a full sheaf at the
    /// barn; else refill it from slabs. `None` sends the caller to the slab
    /// path (a failed trylock: re-entry from an interrupt; no memory).
    #[inline(always)]
    fn alloc_from_pcs<const H: bool>(&self) -> Option<NonNull<u8>> {
        let g = self.try_lock_cpu()?;
        if g.main != 0 {
            let main = Sheaf(g.main);
            let n = main.size();
            // 1..=capacity (a size beyond it is reported by the slow path).
            if n.wrapping_sub(1) < self.sheaf_capacity {
                let i = n - 1;
                let mut o = main.get(i);
                if H {
                    o ^= self.entry_key();
                    if !self.in_slabs(o) {
                        g.unlock();
                        self.bad_sheaf(main, i, o)
                    }
                }
                main.set_size(i);
                self.stat_cpu(g.cpu(), SlubStat::ALLOC_PCS);
                g.unlock();
                if H {
                    self.fp_word_fast::<H>(o).store(0, CoreOrdering::Relaxed);
                }
                return Some(Self::obj_ptr(o));
            }
        }
        // The slow path re-takes the lock (see `free_to_pcs_ptr`).
        g.unlock();
        self.alloc_from_pcs_relock()
    }

    /// [`alloc_from_pcs_slow`](Self::alloc_from_pcs_slow) from scratch.
    #[inline(never)]
    fn alloc_from_pcs_relock(&self) -> Option<NonNull<u8>> {
        self.alloc_from_pcs_slow(self.try_lock_cpu()?)
    }

    #[inline(never)]
    fn alloc_from_pcs_slow<'a>(&'a self, mut g: Guard<'a, P, N>) -> Option<NonNull<u8>> {
        loop {
            if g.main != 0 {
                let main = Sheaf(g.main);
                let n = main.size();
                if n > self.sheaf_capacity {
                    drop(g);
                    self.bad_sheaf_size(main, n);
                }
                if n > 0 {
                    let o = match self.sheaf_get(main, n - 1) {
                        Ok(o) => o,
                        Err(o) => {
                            drop(g);
                            self.bad_sheaf(main, n - 1, o)
                        }
                    };
                    main.set_size(n - 1);
                    self.stat_cpu(g.cpu(), SlubStat::ALLOC_PCS);
                    drop(g);
                    self.clear_fp(o);
                    return Some(Self::obj_ptr(o));
                }
                if g.spare != 0 && Sheaf(g.spare).size() > 0 {
                    let c: &mut CpuLocked = &mut g;
                    core::mem::swap(&mut c.main, &mut c.spare);
                    self.stat_cpu(g.cpu(), SlubStat::SHEAF_SWAP);
                    continue;
                }
            }
            // Detach the (empty or missing) main sheaf and get a full one
            // outside the lock.
            let empty = core::mem::take(&mut g.main);
            drop(g);
            let empty = if empty != 0 {
                Sheaf(empty)
            } else {
                self.new_sheaf()?
            };
            let full = match self.barn_get_full(empty) {
                Some(f) => f,
                None => {
                    if !self.refill_sheaf(empty) {
                        self.free_sheaf(empty);
                        return None;
                    }
                    empty
                }
            };
            // Install it; another context may have installed a main sheaf
            // meanwhile (or we moved): then give ours to the barn/slabs.
            match self.try_lock_cpu() {
                Some(g2) => {
                    g = g2;
                    if g.main == 0 {
                        g.main = full.0;
                    } else {
                        drop(g);
                        self.retire_sheaf(full);
                        g = self.try_lock_cpu()?;
                    }
                }
                None => {
                    self.retire_sheaf(full);
                    return None;
                }
            }
        }
    }

    /// A detached sheaf nobody will use: to the barn if it is full and the
    /// barn has room, else its objects back to slabs and the sheaf freed.
    fn retire_sheaf(&self, sh: Sheaf) {
        if sh.size() == self.sheaf_capacity {
            if let Ok(e) = self.barn_put_full(sh) {
                self.free_sheaf(e);
                return;
            }
        }
        self.flush_sheaf(sh);
        self.free_sheaf(sh);
    }

    /// Free into the per-CPU sheaves beyond the inline push: a full main
    /// is swapped with an empty spare, traded at the barn for an empty
    /// sheaf, or flushed to slabs by bulk free. `Ok(false)` sends the
    /// caller to the slab path (a failed trylock; no memory for a sheaf).
    #[inline(never)]
    fn free_to_pcs_slow<'a>(
        &'a self,
        mut g: Guard<'a, P, N>,
        obj: usize,
    ) -> Result<bool, FreeError> {
        let cap = self.sheaf_capacity;
        loop {
            if g.main != 0 {
                let main = Sheaf(g.main);
                let n = main.size();
                if n > cap {
                    drop(g);
                    self.bad_sheaf_size(main, n);
                }
                if n < cap {
                    if !self.hardened() && n > 0 && main.get(n - 1) == obj {
                        return Err(FreeError::DoubleFree(obj));
                    }
                    self.mark_free(obj);
                    self.sheaf_set(main, n, obj);
                    main.set_size(n + 1);
                    self.stat_cpu(g.cpu(), SlubStat::FREE_PCS);
                    return Ok(true);
                }
                if g.spare == 0 || Sheaf(g.spare).size() == 0 {
                    if g.spare == 0 {
                        drop(g);
                        let sp = self.new_sheaf();
                        g = match self.try_lock_cpu() {
                            Some(g) => g,
                            None => {
                                if let Some(sp) = sp {
                                    self.free_sheaf(sp);
                                }
                                return Ok(false);
                            }
                        };
                        match sp {
                            Some(sp) if g.spare == 0 => g.spare = sp.0,
                            Some(sp) => {
                                drop(g);
                                self.free_sheaf(sp);
                                g = match self.try_lock_cpu() {
                                    Some(g) => g,
                                    None => return Ok(false),
                                };
                            }
                            None => return Ok(false),
                        }
                        continue;
                    }
                    let c: &mut CpuLocked = &mut g;
                    core::mem::swap(&mut c.main, &mut c.spare);
                    self.stat_cpu(g.cpu(), SlubStat::SHEAF_SWAP);
                    continue;
                }
            }
            // Detach the full (or missing) main and get an empty one.
            let full = core::mem::take(&mut g.main);
            drop(g);
            let empty = if full == 0 {
                match self.new_sheaf() {
                    Some(e) => e,
                    None => return Ok(false),
                }
            } else {
                match self.barn_put_full(Sheaf(full)) {
                    Ok(e) => e,
                    Err(f) => {
                        self.flush_sheaf(f);
                        f
                    }
                }
            };
            match self.try_lock_cpu() {
                Some(g2) => {
                    g = g2;
                    if g.main == 0 {
                        g.main = empty.0;
                    } else {
                        drop(g);
                        self.free_sheaf(empty);
                        g = match self.try_lock_cpu() {
                            Some(g) => g,
                            None => return Ok(false),
                        };
                    }
                }
                None => {
                    self.free_sheaf(empty);
                    return Ok(false);
                }
            }
        }
    }

    /// Detaches and returns a CPU's sheaves (under its lock).
    fn take_sheaves(g: &mut Guard<'_, P, N>) -> [usize; 2] {
        [core::mem::take(&mut g.main), core::mem::take(&mut g.spare)]
    }

    /// Flushes detached sheaves to slabs and frees them.
    fn drop_sheaves(&self, sheaves: [usize; 2]) {
        for sh in sheaves {
            if sh != 0 {
                self.flush_sheaf(Sheaf(sh));
                self.free_sheaf(Sheaf(sh));
            }
        }
    }

    /// Empties the barn: full sheaves' objects back to slabs, every sheaf
    /// freed (part of shrink).
    fn flush_barn(&self) {
        let (mut full, mut empty) = {
            let mut b = self.lock_barn();
            let r = (b.full, b.empty);
            *b = Barn::new();
            r
        };
        while full != 0 {
            let sh = Sheaf(full);
            full = sh.next();
            self.flush_sheaf(sh);
            self.free_sheaf(sh);
        }
        while empty != 0 {
            let sh = Sheaf(empty);
            empty = sh.next();
            self.free_sheaf(sh);
        }
    }

    /// Full and empty sheaves in the barn (a racy snapshot).
    pub fn barn_sheaves(&self) -> (usize, usize) {
        let b = self.lock_barn();
        (b.nr_full, b.nr_empty)
    }

    // ---------------------------------------------------------------- debug

    /// The object of a slot (`fixup_red_left`).
    #[inline(always)]
    fn slot_to_obj(&self, slot: usize) -> usize {
        slot + self.lay.red_left_pad
    }

    /// Byte `i` of a slot, as an atomic cell (objects may be shared with a
    /// buggy user; these checks read and write bytewise).
    #[inline(always)]
    fn byte(slot: usize, i: usize) -> &'static core::sync::atomic::AtomicU8 {
        let p = core::ptr::with_exposed_provenance_mut::<u8>(slot + i);
        // SAFETY: inside the slot, which lies in slab memory that stays
        // mapped.
        unsafe { core::sync::atomic::AtomicU8::from_ptr(p) }
    }

    fn fill(slot: usize, from: usize, to: usize, v: u8) {
        for i in from..to {
            Self::byte(slot, i).store(v, CoreOrdering::Relaxed);
        }
    }

    /// The first byte of `slot[from..to]` that is not `v`: (offset, found).
    fn find_not(slot: usize, from: usize, to: usize, v: u8) -> Option<(usize, u8)> {
        (from..to).find_map(|i| {
            let b = Self::byte(slot, i).load(CoreOrdering::Relaxed);
            (b != v).then_some((i, b))
        })
    }

    /// The byte ranges of a slot: (left red zone end, object end, right red
    /// zone end, tracks start, tracks end).
    fn debug_ranges(&self) -> (usize, usize, usize, usize, usize) {
        let pad = self.lay.red_left_pad;
        let tracks = if self.flags.contains(SlabFlags::STORE_USER) {
            2 * crate::layout::TRACK_WORDS * core::mem::size_of::<usize>()
        } else {
            0
        };
        (
            pad,
            pad + self.lay.object_size,
            pad + self.lay.inuse,
            pad + self.lay.track_offset,
            pad + self.lay.track_offset + tracks,
        )
    }

    /// `init_object`: red zones (0xbb free / 0xcc allocated), the poisoned
    /// body of a free object (0x6b, last byte 0xa5), padding (0x5a).
    fn init_object(&self, slot: usize, active: bool) {
        let (l, o, r, _ts, te) = self.debug_ranges();
        if self.flags.contains(SlabFlags::RED_ZONE) {
            let v = if active { 0xcc } else { 0xbb };
            Self::fill(slot, 0, l, v);
            Self::fill(slot, o, r, v);
        }
        if self.flags.contains(SlabFlags::POISON) {
            if !active && o > l {
                Self::fill(slot, l, o - 1, 0x6b);
                Self::byte(slot, o - 1).store(0xa5, CoreOrdering::Relaxed);
            }
            Self::fill(
                slot,
                te.max(self.lay.offset + core::mem::size_of::<usize>()),
                self.lay.size,
                0x5a,
            );
        }
    }

    /// `check_object`: verifies what `init_object` wrote; a mismatch is a
    /// corruption report (and a panic).
    fn check_debug_object(&self, slot: usize, active: bool, what: &str) {
        let (l, o, r, _ts, te) = self.debug_ranges();
        if self.flags.contains(SlabFlags::RED_ZONE) {
            let v = if active { 0xcc } else { 0xbb };
            if let Some((i, b)) =
                Self::find_not(slot, 0, l, v).or_else(|| Self::find_not(slot, o, r, v))
            {
                self.corruption(slot, what, "red zone overwritten", i, v, b);
            }
        }
        if self.flags.contains(SlabFlags::POISON) {
            if !active && o > l {
                if let Some((i, b)) = Self::find_not(slot, l, o - 1, 0x6b) {
                    self.corruption(
                        slot,
                        what,
                        "poison overwritten (use after free)",
                        i,
                        0x6b,
                        b,
                    );
                }
                let b = Self::byte(slot, o - 1).load(CoreOrdering::Relaxed);
                if b != 0xa5 {
                    self.corruption(slot, what, "poison end marker overwritten", o - 1, 0xa5, b);
                }
            }
            let pstart = te.max(self.lay.offset + core::mem::size_of::<usize>());
            if let Some((i, b)) = Self::find_not(slot, pstart, self.lay.size, 0x5a) {
                self.corruption(slot, what, "object padding overwritten", i, 0x5a, b);
            }
        }
    }

    /// `set_track`: records the owner (call site, CPU, time) of an
    /// allocation (`free = false`) or a free.
    fn set_track(&self, slot: usize, free: bool, loc: &'static core::panic::Location<'static>) {
        if !self.flags.contains(SlabFlags::STORE_USER) {
            return;
        }
        static TICK: CoreAtomicUsize = CoreAtomicUsize::new(1);
        let (_, _, _, ts, _) = self.debug_ranges();
        let w = core::mem::size_of::<usize>();
        let base = slot
            + ts
            + if free {
                crate::layout::TRACK_WORDS * w
            } else {
                0
            };
        let vals = [
            (loc as *const core::panic::Location<'static>).expose_provenance(),
            self.cpu.platform().current_cpu(),
            TICK.fetch_add(1, CoreOrdering::Relaxed),
        ];
        for (k, v) in vals.into_iter().enumerate() {
            let p = core::ptr::with_exposed_provenance_mut::<usize>(base + k * w);
            // SAFETY: the track words of a slot we hold, word aligned.
            unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }.store(v, CoreOrdering::Relaxed);
        }
    }

    /// One owner record, printable.
    fn track(&self, slot: usize, free: bool) -> Track {
        if !self.flags.contains(SlabFlags::STORE_USER) {
            return Track(None);
        }
        let (_, _, _, ts, _) = self.debug_ranges();
        let w = core::mem::size_of::<usize>();
        let base = slot
            + ts
            + if free {
                crate::layout::TRACK_WORDS * w
            } else {
                0
            };
        let get = |k: usize| {
            let p = core::ptr::with_exposed_provenance_mut::<usize>(base + k * w);
            // SAFETY: as in `set_track`.
            unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }.load(CoreOrdering::Relaxed)
        };
        let loc = get(0);
        if loc == 0 {
            return Track(None);
        }
        // SAFETY: only `set_track` writes a nonzero value here: the address
        // of a `'static` Location.
        let loc: &'static core::panic::Location<'static> =
            unsafe { &*core::ptr::with_exposed_provenance(loc) };
        Track(Some((loc, get(1), get(2))))
    }

    /// Reports a corruption (the cache, the object, what was expected and
    /// found, the owners) and panics.
    #[cold]
    fn corruption(
        &self,
        slot: usize,
        when: &str,
        what: &str,
        off: usize,
        expected: u8,
        found: u8,
    ) -> ! {
        let obj = self.slot_to_obj(slot);
        panic!(
            "slub {}: {what} in object {obj:#x} (slot {slot:#x}, byte {off} of the slot; {when}): \
             expected {expected:#04x}, found {found:#04x}; allocated {}; freed {}",
            self.name,
            self.track(slot, false),
            self.track(slot, true)
        )
    }

    /// A new slab for a debug cache: unfrozen, every object free and
    /// initialised, on no list yet.
    fn new_debug_slab(&self) -> Option<Slab<'static>> {
        let (s, head) = self.new_slab()?;
        let objects = s.state().counters.objects;
        let base = s.base().addr();
        for i in 0..objects as usize {
            self.init_object(base + i * self.lay.size, false);
        }
        s.store_state(SlabState {
            freelist: head,
            counters: Counters {
                inuse: 0,
                objects,
                frozen: false,
            },
        });
        Some(s)
    }

    /// Allocation for debug caches (`alloc_debug_processing`): under the
    /// list lock, from the first partial slab (or a new one), checking the
    /// object is intact before handing it out.
    fn alloc_debug(&self, loc: &'static core::panic::Location<'static>) -> Option<NonNull<u8>> {
        self.mode();
        self.stat_here(SlubStat::ALLOC_SLOWPATH);
        let mut n = self.lock_node();
        let s = if n.head != 0 {
            // SAFETY: list members are held slabs.
            unsafe { Slab::from_addr(n.head) }
        } else {
            drop(n);
            let s = self.new_debug_slab()?;
            n = self.lock_node();
            n.add(s, false);
            s
        };
        let st = s.state();
        let slot = st.freelist;
        let base = s.base().addr();
        // Always (not only with CONSISTENCY_CHECKS): the checks below read
        // the slot.
        if self
            .obj_index(slot.wrapping_sub(base), st.counters.objects as usize)
            .is_none()
        {
            drop(n);
            self.bad_freelist(
                base,
                slot,
                slot,
                "heads the slab's freelist but is not an object of it",
            );
        }
        self.check_debug_object(slot, false, "allocation");
        let next = self.get_fp(slot);
        s.store_state(SlabState {
            freelist: next,
            counters: Counters {
                inuse: st.counters.inuse + 1,
                ..st.counters
            },
        });
        if next == 0 {
            n.remove(s);
            self.full.lock().add(s, true);
        }
        self.nr_partial.store(n.nr_partial, CoreOrdering::Relaxed);
        drop(n);
        self.init_object(slot, true);
        self.set_track(slot, false, loc);
        Some(Self::obj_ptr(self.slot_to_obj(slot)))
    }

    /// Free for debug caches (`free_debug_processing`): the object must be
    /// an allocated object of this cache (with `CONSISTENCY_CHECKS`, not on
    /// its slab's freelist: a full walk) whose red zones are intact; it is
    /// poisoned and its owner recorded. Corruption panics with a report.
    fn free_debug(
        &self,
        ptr: NonNull<u8>,
        loc: &'static core::panic::Location<'static>,
    ) -> Result<(), FreeError> {
        self.mode();
        let a = ptr.as_ptr().addr();
        let pad = self.lay.red_left_pad;
        if a < pad {
            return Err(FreeError::NotAllocated(a));
        }
        let slot_ptr = ptr.as_ptr().wrapping_sub(pad);
        let (s, slot) = self.slab_of(NonNull::new(slot_ptr).ok_or(FreeError::NotAllocated(a))?)?;
        self.stat_here(SlubStat::FREE_SLOWPATH);
        let mut n = self.lock_node();
        let st = s.state();
        if self.flags.contains(SlabFlags::CONSISTENCY_CHECKS) {
            let mut p = st.freelist;
            let mut k = 0;
            let base = s.base().addr();
            let objects = st.counters.objects as usize;
            while p != 0 && k <= objects {
                if self.obj_index(p.wrapping_sub(base), objects).is_none() {
                    drop(n);
                    self.bad_freelist(base, slot, p, "is on a freelist that leaves its slab");
                }
                if p == slot {
                    drop(n);
                    panic!(
                        "slub {}: double free of object {:#x}: it is already on its slab's freelist; allocated {}; freed {}",
                        self.name,
                        a,
                        self.track(slot, false),
                        self.track(slot, true)
                    );
                }
                p = self.get_fp(p);
                k += 1;
            }
        }
        self.check_debug_object(slot, true, "free");
        self.set_track(slot, true, loc);
        self.init_object(slot, false);
        self.set_fp(slot, st.freelist);
        let inuse = st.counters.inuse - 1;
        s.store_state(SlabState {
            freelist: slot,
            counters: Counters {
                inuse,
                ..st.counters
            },
        });
        if st.freelist == 0 {
            self.full.lock().remove(s);
            n.add(s, true);
        }
        let discard = inuse == 0 && n.nr_partial > self.lay.min_partial;
        if discard {
            n.remove(s);
        }
        self.nr_partial.store(n.nr_partial, CoreOrdering::Relaxed);
        drop(n);
        if discard {
            self.discard_slab(s);
            self.stat_here(SlubStat::FREE_SLAB);
        }
        Ok(())
    }

    /// `validate_slab` of every slab of a debug cache: each object's state
    /// (free objects poisoned and with inactive red zones, allocated ones
    /// with active red zones) and the free count; panics on corruption.
    fn validate_debug(&self) {
        let n = self.lock_node();
        let full = self.full.lock();
        for head in [n.head, full.head] {
            let mut cur = head;
            while cur != 0 {
                // SAFETY: list members are held slabs.
                let s = unsafe { Slab::from_addr(cur) };
                let st = s.state();
                let base = s.base().addr();
                let mut free = [0u64; 512];
                let mut p = st.freelist;
                let mut k = 0;
                let objects = st.counters.objects as usize;
                let mut prev = 0;
                while p != 0 {
                    if self.obj_index(p.wrapping_sub(base), objects).is_none() {
                        self.bad_freelist(base, prev, p, "points outside its slab");
                    }
                    prev = p;
                    let i = (p - base) / self.lay.size;
                    if i < 32768 {
                        free[(i / 64) % 512] |= 1 << (i % 64);
                    }
                    self.check_debug_object(p, false, "validate (free object)");
                    p = self.get_fp(p);
                    k += 1;
                    assert!(
                        k <= st.counters.objects as usize,
                        "{}: freelist cycle",
                        self.name
                    );
                }
                assert_eq!(
                    k,
                    (st.counters.objects - st.counters.inuse) as usize,
                    "{}: free count of slab {base:#x}",
                    self.name
                );
                for i in 0..st.counters.objects as usize {
                    if free[(i / 64) % 512] & (1 << (i % 64)) == 0 {
                        self.check_debug_object(
                            base + i * self.lay.size,
                            true,
                            "validate (allocated object)",
                        );
                    }
                }
                cur = s.next();
            }
        }
    }

    // ---------------------------------------------------------------- bulk

    /// `kmem_cache_alloc_bulk`: fills `out` with objects under one
    /// local-lock hold (the slow path runs where the CPU freelist runs dry),
    /// advancing the tid once per hold. Returns `out.len()`, or 0 when the
    /// page allocator runs out (the objects taken so far are freed again,
    /// as the kernel does).
    #[track_caller]
    pub fn alloc_bulk(&self, out: &mut [*mut u8]) -> usize {
        if self.flags.is_debug() {
            // Debug caches check every object: one at a time.
            for i in 0..out.len() {
                match self.alloc() {
                    Some(o) => out[i] = o.as_ptr(),
                    None => {
                        for p in &mut out[..i] {
                            // SAFETY: taken just above.
                            unsafe { self.free(NonNull::new_unchecked(*p)) };
                            *p = core::ptr::null_mut();
                        }
                        return 0;
                    }
                }
            }
            return out.len();
        }
        // Sheaves first (`alloc_from_pcs_bulk`), then slabs for the rest.
        let from_pcs = if self.sheaf_capacity != 0 {
            self.alloc_from_pcs_bulk(out)
        } else {
            0
        };
        if from_pcs == out.len() {
            return from_pcs;
        }
        if self.alloc_bulk_slab(&mut out[from_pcs..]) == 0 {
            for p in &mut out[..from_pcs] {
                // SAFETY: taken from this cache just above.
                unsafe { self.free(NonNull::new_unchecked(*p)) };
                *p = core::ptr::null_mut();
            }
            return 0;
        }
        if self.hardened() {
            // Handed out: no longer free (see `looks_free`).
            for p in &out[from_pcs..] {
                self.clear_fp(p.addr());
            }
        }
        out.len()
    }

    /// `alloc_from_pcs_bulk`: fills `out` from this CPU's sheaves (main,
    /// then a non-empty spare, then full sheaves from the barn; no refill:
    /// once the barn has no full sheaf the caller continues from slabs,
    /// rather than copying pointers twice). Returns how many it filled.
    fn alloc_from_pcs_bulk(&self, out: &mut [*mut u8]) -> usize {
        let mut i = 0;
        while i < out.len() {
            let Some(mut g) = self.try_lock_cpu() else {
                break;
            };
            if g.main != 0 {
                let main = Sheaf(g.main);
                let n = main.size();
                if n > 0 {
                    if n > self.sheaf_capacity {
                        g.unlock();
                        self.bad_sheaf_size(main, n);
                    }
                    let batch = n.min(out.len() - i);
                    for k in 0..batch {
                        let o = match self.sheaf_get(main, n - batch + k) {
                            Ok(o) => o,
                            Err(o) => {
                                // The objects popped so far stay in the sheaf.
                                g.unlock();
                                self.bad_sheaf(main, n - batch + k, o)
                            }
                        };
                        self.clear_fp(o);
                        out[i + k] = core::ptr::with_exposed_provenance_mut(o);
                    }
                    main.set_size(n - batch);
                    self.fast_of(g.cpu()).stats.add(SlubStat::ALLOC_PCS, batch);
                    i += batch;
                    g.unlock();
                    continue;
                }
                if g.spare != 0 && Sheaf(g.spare).size() > 0 {
                    let c: &mut CpuLocked = &mut g;
                    core::mem::swap(&mut c.main, &mut c.spare);
                    self.stat_cpu(g.cpu(), SlubStat::SHEAF_SWAP);
                    g.unlock();
                    continue;
                }
            }
            let empty = core::mem::take(&mut g.main);
            g.unlock();
            // A CPU's first sheaf (the kernel's CPUs always have a main).
            let empty = if empty != 0 {
                Sheaf(empty)
            } else {
                match self.new_sheaf() {
                    Some(e) => e,
                    None => break,
                }
            };
            match self.barn_get_full(empty) {
                Some(full) => self.install_main(full),
                None => {
                    self.install_main(empty);
                    break;
                }
            }
        }
        i
    }

    /// Installs a detached sheaf as this CPU's main, or (another context
    /// installed one meanwhile, or the trylock fails) retires it.
    fn install_main(&self, sh: Sheaf) {
        match self.try_lock_cpu() {
            Some(mut g) if g.main == 0 => {
                g.main = sh.0;
                g.unlock();
            }
            Some(g) => {
                g.unlock();
                self.retire_sheaf(sh);
            }
            None => self.retire_sheaf(sh),
        }
    }

    /// `free_to_pcs_bulk`: pushes validated objects onto this CPU's
    /// sheaves (main, an empty-enough spare, empty sheaves traded at the
    /// barn for full ones); returns how many it took (the rest go to
    /// slabs: the barn has its limit of full sheaves, or no memory).
    fn free_to_pcs_bulk(&self, objs: &[NonNull<u8>]) -> usize {
        let cap = self.sheaf_capacity;
        let mut i = 0;
        while i < objs.len() {
            let Some(mut g) = self.try_lock_cpu() else {
                break;
            };
            if g.main != 0 {
                let main = Sheaf(g.main);
                let n = main.size();
                if n < cap {
                    let batch = (cap - n).min(objs.len() - i);
                    for k in 0..batch {
                        let o = objs[i + k].as_ptr().expose_provenance();
                        self.mark_free(o);
                        self.sheaf_set(main, n + k, o);
                    }
                    main.set_size(n + batch);
                    self.fast_of(g.cpu()).stats.add(SlubStat::FREE_PCS, batch);
                    i += batch;
                    g.unlock();
                    continue;
                }
                if g.spare != 0 && Sheaf(g.spare).size() < cap {
                    let c: &mut CpuLocked = &mut g;
                    core::mem::swap(&mut c.main, &mut c.spare);
                    self.stat_cpu(g.cpu(), SlubStat::SHEAF_SWAP);
                    g.unlock();
                    continue;
                }
            }
            let full = core::mem::take(&mut g.main);
            g.unlock();
            let empty = if full == 0 {
                self.new_sheaf()
            } else {
                match self.barn_put_full(Sheaf(full)) {
                    Ok(e) => Some(e),
                    Err(f) => {
                        self.install_main(f);
                        None
                    }
                }
            };
            match empty {
                Some(e) => self.install_main(e),
                None => break,
            }
        }
        i
    }

    /// A window of [`free_bulk`](Self::free_bulk) onto the sheaves: every
    /// pointer validated first (by the CPU's validated range, else the
    /// descriptor lookup; an error leaves everything untouched), then as
    /// many pushed as the sheaves take ([`free_to_pcs_bulk`](Self::free_to_pcs_bulk));
    /// returns how many.
    fn free_window_to_pcs(&self, window: &[NonNull<u8>]) -> Result<usize, FreeError> {
        let Some(mut g) = self.try_lock_cpu() else {
            return Ok(0);
        };
        let gen = self.discards.load(CoreOrdering::Relaxed);
        for p in window {
            if !self.in_validated_range(&g, p.as_ptr().addr(), gen) {
                match self.validate_range(*p) {
                    Ok((base, objects)) => {
                        g.vbase = base;
                        g.vobjects = objects;
                        g.vspan = objects * self.lay.size;
                        g.vgen = gen;
                    }
                    Err(e) => {
                        g.unlock();
                        return Err(e);
                    }
                }
            }
        }
        g.unlock();
        Ok(self.free_to_pcs_bulk(window))
    }

    /// The slab part of [`alloc_bulk`](Self::alloc_bulk): the CPU freelist
    /// under one local-lock hold (one tid bump), the slow path as needed;
    /// all or nothing.
    fn alloc_bulk_slab(&self, out: &mut [*mut u8]) -> usize {
        let n = out.len();
        let mut i = 0;
        let mut g = self.lock_cpu();
        let mut fl = self.c_freelist(&g);
        let cpu_slab = |g: &Guard<'_, P, N>| {
            let c = self.fast_of(g.cpu());
            (
                c.slab_base.load(CoreOrdering::Relaxed),
                c.slab_objects.load(CoreOrdering::Relaxed),
            )
        };
        let (mut base, mut objects) = cpu_slab(&g);
        while i < n {
            if fl == 0 {
                // Hand the (empty) freelist back with one tid bump, then
                // let the slow path refill and take one object.
                self.c_set_freelist(&mut g, 0);
                match self.slab_alloc_slow(g) {
                    Some(o) => {
                        out[i] = o.as_ptr();
                        i += 1;
                    }
                    None => {
                        for p in &mut out[..i] {
                            self.clear_fp(p.addr());
                            // SAFETY: taken from this cache just above.
                            unsafe { self.free(NonNull::new_unchecked(*p)) };
                            *p = core::ptr::null_mut();
                        }
                        return 0;
                    }
                }
                g = self.lock_cpu();
                fl = self.c_freelist(&g);
                (base, objects) = cpu_slab(&g);
                continue;
            }
            out[i] = Self::obj_ptr(fl).as_ptr();
            let next = self.get_fp(fl);
            if !self.fp_ok(next, base, objects) {
                // Nothing taken so far is lost: the freelist is handed
                // back up to `fl`, whose pointer is bad.
                self.c_set_freelist(&mut g, fl);
                drop(g);
                for p in &mut out[..i] {
                    self.clear_fp(p.addr());
                    // SAFETY: taken from this cache just above.
                    unsafe { self.free(NonNull::new_unchecked(*p)) };
                }
                self.bad_freelist(base, fl, next, "points outside its slab");
            }
            fl = next;
            i += 1;
        }
        self.c_set_freelist(&mut g, fl);
        n
    }

    /// `kmem_cache_free_bulk`: frees every pointer of `objs`. Objects are
    /// grouped per slab into detached freelists (`build_detached_freelist`:
    /// from the end of the array, gathering objects of the same slab with a
    /// look-ahead of 3 misses), and each group is freed with one
    /// compare-exchange (or one push onto the CPU freelist).
    ///
    /// # Panics
    ///
    /// If a pointer is not an object of this cache, is already free, or
    /// appears twice in `objs`, naming it; the whole array is checked
    /// before anything is freed, so nothing is.
    ///
    /// # Safety
    ///
    /// Every pointer was allocated from this cache, appears once, and is
    /// not used afterwards.
    #[track_caller]
    pub unsafe fn free_bulk(&self, objs: &[NonNull<u8>]) {
        // SAFETY: forwarded.
        if let Err(e) = unsafe { self.try_free_bulk(objs) } {
            panic!("kmem_cache_free_bulk({}): {e}", self.name)
        }
    }

    /// [`free_bulk`](Self::free_bulk) that reports the first bad pointer
    /// instead of panicking.
    ///
    /// The whole array is validated before anything changes: an `Err`
    /// means no object of `objs` was freed. Refused: a pointer that is not
    /// an object of this cache (foreign, interior, of another cache), an
    /// object already free (in a hardened cache: its free-pointer word
    /// reads as free; in a debug cache: on its slab's freelist; otherwise
    /// the kernel's naive check, the head of its slab's freelist), and a
    /// pointer that appears twice in `objs` (found by sorting copies of
    /// the addresses on the stack; nothing is written before the checks
    /// pass).
    ///
    /// # Safety
    ///
    /// As [`free_bulk`](Self::free_bulk), for pointers that pass the checks.
    #[track_caller]
    pub unsafe fn try_free_bulk(&self, objs: &[NonNull<u8>]) -> Result<(), FreeError> {
        self.mode();
        self.check_bulk(objs)?;
        if self.flags.is_debug() {
            for p in objs {
                // SAFETY: forwarded; each object checked.
                unsafe { self.try_free(*p)? };
            }
            return Ok(());
        }
        // SAFETY: forwarded; checked as a whole.
        unsafe { self.free_bulk_windows(objs, self.sheaf_capacity != 0) }
    }

    /// Validates a whole [`try_free_bulk`](Self::try_free_bulk) array
    /// before any change: every pointer an allocated object of this cache,
    /// none twice.
    fn check_bulk(&self, objs: &[NonNull<u8>]) -> Result<(), FreeError> {
        let pad = self.lay.red_left_pad;
        let debug = self.flags.is_debug();
        // The last slab looked up (most arrays hold runs of one slab).
        let (mut base, mut objects, mut slab) = (0usize, 0usize, 0usize);
        for p in objs {
            let a = p.as_ptr().addr();
            let slot = a.wrapping_sub(pad);
            if self.obj_index(slot.wrapping_sub(base), objects).is_none() {
                let sp =
                    NonNull::new(p.as_ptr().wrapping_sub(pad)).ok_or(FreeError::NotAllocated(a))?;
                let (s, _, b) = self.slab_block_of(sp).map_err(|e| match e {
                    FreeError::NotObjectStart(_, off) => FreeError::NotObjectStart(a, off),
                    e => e,
                })?;
                (base, objects, slab) =
                    (b.head.as_ptr().addr(), self.objects_of(b.order), s.addr());
            }
            // SAFETY: looked up just above; the caller holds its objects.
            let s = unsafe { Slab::from_addr(slab) };
            let obj = p.as_ptr().expose_provenance();
            let free = if debug {
                self.debug_on_freelist(s, obj - pad)
            } else if self.hardened() {
                self.looks_free(obj, base, objects * self.lay.size)
            } else {
                s.state().freelist == obj
            };
            if free {
                return Err(FreeError::DoubleFree(obj));
            }
        }
        // Duplicates: sorted runs of 256 addresses on the stack (2 KiB),
        // each searched for every later pointer (one sort up to 256
        // objects; 4 sorts and 6 run searches for 1024). Nothing is
        // written, so a refused array keeps its contents.
        const C: usize = 256;
        let mut buf = [0usize; C];
        for (ci, chunk) in objs.chunks(C).enumerate() {
            let run = &mut buf[..chunk.len()];
            for (d, p) in run.iter_mut().zip(chunk) {
                *d = p.as_ptr().addr();
            }
            run.sort_unstable();
            if let Some(w) = run.windows(2).find(|w| w[0] == w[1]) {
                return Err(FreeError::DoubleFree(w[0]));
            }
            for p in &objs[((ci + 1) * C).min(objs.len())..] {
                let a = p.as_ptr().addr();
                if run.binary_search(&a).is_ok() {
                    return Err(FreeError::DoubleFree(a));
                }
            }
        }
        Ok(())
    }

    /// Whether object `obj` of slab `s` (headed at `head`, of `order`) is
    /// known to be free: on its slab's freelist (debug caches), its
    /// free-pointer word reads as free (hardened caches), or it heads its
    /// slab's freelist (others). `ksize` asks.
    pub(crate) fn known_free(
        &self,
        s: Slab<'_>,
        head: NonNull<u8>,
        order: Order,
        obj: usize,
    ) -> bool {
        if self.flags.is_debug() {
            self.debug_on_freelist(s, obj - self.lay.red_left_pad)
        } else if self.hardened() {
            self.looks_free(
                obj,
                head.as_ptr().addr(),
                self.objects_of(order) * self.lay.size,
            )
        } else {
            s.state().freelist == obj
        }
    }

    /// Debug caches: whether `slot` is on slab `s`'s freelist (a bounded
    /// walk under the list lock).
    fn debug_on_freelist(&self, s: Slab<'_>, slot: usize) -> bool {
        let n = self.lock_node();
        let st = s.state();
        let base = s.base().addr();
        let objects = st.counters.objects as usize;
        let mut p = st.freelist;
        let mut k = 0;
        while p != 0 && k <= objects {
            if p == slot {
                return true;
            }
            if self.obj_index(p.wrapping_sub(base), objects).is_none() {
                drop(n);
                self.bad_freelist(base, slot, p, "is on a freelist that leaves its slab");
            }
            p = self.get_fp(p);
            k += 1;
        }
        false
    }

    /// The slab part of [`try_free_bulk`](Self::try_free_bulk) (a sheaf
    /// flush).
    ///
    /// # Safety
    ///
    /// As [`free_bulk`](Self::free_bulk).
    unsafe fn free_bulk_slab(&self, objs: &[NonNull<u8>]) -> Result<(), FreeError> {
        // SAFETY: forwarded.
        unsafe { self.free_bulk_windows(objs, false) }
    }

    /// Frees `objs` by windows of 64, each validated before any change:
    /// first onto the sheaves (`pcs`), the rest as detached freelists.
    ///
    /// # Safety
    ///
    /// As [`free_bulk`](Self::free_bulk).
    unsafe fn free_bulk_windows(&self, objs: &[NonNull<u8>], pcs: bool) -> Result<(), FreeError> {
        const W: usize = 64;
        for window in objs.rchunks(W) {
            let mut done: u64 = 0;
            let mut first = 0;
            if pcs {
                // Validated as a whole first, then onto the sheaves.
                let taken = self.free_window_to_pcs(window)?;
                if taken == window.len() {
                    continue;
                }
                done = (1u64 << taken) - 1;
                first = taken;
            }
            // Validate the whole (rest of the) window first.
            let mut slabs: [usize; W] = [0; W];
            for k in first..window.len() {
                slabs[k] = self.slab_of(window[k])?.0.addr();
            }
            let len = window.len();
            let mut end = len;
            while end > 0 {
                let last = end - 1;
                if done & (1 << last) != 0 {
                    end -= 1;
                    continue;
                }
                // build_detached_freelist
                let slab = slabs[last];
                let tail = window[last].as_ptr().expose_provenance();
                let mut head = tail;
                let mut cnt = 1;
                done |= 1 << last;
                let mut misses = 0;
                let mut k = last;
                while k > 0 {
                    k -= 1;
                    if done & (1 << k) != 0 {
                        continue;
                    }
                    if slabs[k] == slab {
                        let o = window[k].as_ptr().expose_provenance();
                        if o == head {
                            return Err(FreeError::DoubleFree(o));
                        }
                        self.set_fp(o, head);
                        head = o;
                        cnt += 1;
                        done |= 1 << k;
                    } else {
                        // The kernel's look-ahead: give up after 3 misses.
                        misses += 1;
                        if misses == 3 {
                            break;
                        }
                    }
                }
                // SAFETY: validated objects of that slab, linked above.
                unsafe { self.do_slab_free(Slab::from_addr(slab), head, tail, cnt)? };
                end -= 1;
            }
        }
        Ok(())
    }

    /// `do_slab_free` of a detached chain `head..tail` of `cnt` objects of
    /// slab `s`: onto the CPU freelist if `s` is the CPU slab, else
    /// `__slab_free`.
    ///
    /// # Safety
    ///
    /// The chain links `cnt` allocated objects of `s` ending at `tail`.
    unsafe fn do_slab_free(
        &self,
        s: Slab<'_>,
        head: usize,
        tail: usize,
        cnt: usize,
    ) -> Result<(), FreeError> {
        if self.mode() == MODE_LOCKLESS {
            let p = self.cpu.platform();
            loop {
                let cpu = p.current_cpu();
                let c = &self.fast[cpu];
                let d = c.fl_tid.load(Ordering::Acquire);
                if c.slab.load(Ordering::Relaxed) != s.addr() {
                    return self.slab_free_slow(s, head, tail, cnt);
                }
                if d.lo == tail {
                    return Err(FreeError::DoubleFree(tail));
                }
                self.set_fp(tail, d.lo);
                let pin = p.pin();
                let ok = pin.cpu == cpu
                    && c.fl_tid
                        .compare_exchange(
                            d,
                            DWord::new(head, Self::next_tid(d.hi, cpu)),
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        )
                        .is_ok();
                // SAFETY: matches the pin above.
                unsafe { p.unpin(pin) };
                if ok {
                    c.stats.inc(SlubStat::FREE_FASTPATH);
                    return Ok(());
                }
                c.stats.inc(SlubStat::CMPXCHG_DOUBLE_CPU_FAIL);
            }
        } else {
            let mut g = self.lock_cpu();
            let cpu = g.cpu();
            if self.fast_of(cpu).slab.load(Ordering::Relaxed) == s.addr() {
                if g.freelist == tail {
                    return Err(FreeError::DoubleFree(tail));
                }
                self.set_fp(tail, g.freelist);
                g.freelist = head;
                g.tid = g.tid.wrapping_add(Self::TID_STEP);
                self.stat_cpu(cpu, SlubStat::FREE_FASTPATH);
                return Ok(());
            }
            drop(g);
            self.slab_free_slow(s, head, tail, cnt)
        }
    }

    // --------------------------------------------------- flush and shrink

    /// Detaches a CPU's slab and partial chain under its lock, then gives
    /// them back outside it.
    fn flush_guard<'a>(
        &'a self,
        mut g: Guard<'a, P, N>,
        relock: impl Fn() -> Option<Guard<'a, P, N>>,
    ) {
        let sheaves = Self::take_sheaves(&mut g);
        if sheaves != [0, 0] {
            // Sheaves first (their objects go back to slabs), then the CPU
            // slab and partial slabs, which those frees may have refilled.
            drop(g);
            self.drop_sheaves(sheaves);
            g = match relock() {
                Some(g) => g,
                None => return,
            };
        }
        let c = self.fast_of(g.cpu());
        let slab = c.slab.load(Ordering::Relaxed);
        let mut fl = 0;
        if slab != 0 {
            // Slab first, then the freelist with a tid bump: a fast free
            // that still saw the old slab fails its compare-exchange.
            self.set_cpu_slab(c, 0);
            fl = self.c_take_freelist(&mut g);
        }
        let partial = g.partial;
        g.partial = 0;
        g.partial_slabs = 0;
        c.partial_slabs.store(0, CoreOrdering::Relaxed);
        drop(g);
        if slab != 0 {
            // SAFETY: detached from the CPU above; frozen for us.
            self.deactivate_slab(unsafe { Slab::from_addr(slab) }, fl);
            self.stat_here(SlubStat::CPUSLAB_FLUSH);
        }
        if partial != 0 {
            self.unfreeze_partials(partial);
        }
    }

    /// Flushes the calling CPU's slab and partial slabs (`flush_cpu_slab`).
    pub fn flush_local(&self) {
        self.flush_guard(self.lock_cpu(), || Some(self.lock_cpu()));
    }

    /// Flushes one CPU, where the platform lets us reach it (see
    /// [`LocalLock::lock_remote`]); `false` if it could not.
    pub fn flush_cpu(&self, cpu: usize) -> bool {
        match self.cpu.lock_remote(cpu) {
            Some(g) => {
                self.flush_guard(g, || self.cpu.lock_remote(cpu));
                true
            }
            None => false,
        }
    }

    /// Flushes the calling CPU and every CPU the platform lets us reach
    /// (`flush_all`); returns how many slots could not be reached (pinned
    /// kernel CPUs must flush themselves, e.g. from an IPI; live per-thread
    /// slots are flushed by their threads, at the latest on exit).
    pub fn flush_all(&self) -> usize {
        self.flush_local();
        let mut missed = 0;
        for cpu in 0..N {
            if !self.flush_cpu(cpu) {
                missed += 1;
            }
        }
        missed
    }

    /// Flushes every slot through exclusive access (no other context can
    /// use the cache).
    fn flush_exclusive(&mut self) {
        // Sheaves and the barn first: their objects go back to slabs (and
        // may land on CPU freelists or partial lists, flushed next).
        let mut sheaves: [[usize; 2]; N] = [[0; 2]; N];
        for (i, l) in self.cpu.iter_mut().enumerate() {
            sheaves[i] = [core::mem::take(&mut l.main), core::mem::take(&mut l.spare)];
        }
        for sh in sheaves {
            self.drop_sheaves(sh);
        }
        self.flush_barn();
        let mut work: [(usize, usize, usize); N] = [(0, 0, 0); N];
        let lockless = self.mode() == MODE_LOCKLESS;
        for (i, l) in self.cpu.iter_mut().enumerate() {
            let c = &self.fast[i];
            let slab = c.slab.load(Ordering::Relaxed);
            c.slab.store(0, Ordering::Relaxed);
            c.slab_base.store(0, CoreOrdering::Relaxed);
            c.slab_objects.store(0, CoreOrdering::Relaxed);
            c.slab_span.store(0, CoreOrdering::Relaxed);
            let fl = if lockless {
                let d = c.fl_tid.load(Ordering::Relaxed);
                c.fl_tid
                    .store(DWord::new(0, Self::next_tid(d.hi, i)), Ordering::Relaxed);
                d.lo
            } else {
                core::mem::take(&mut l.freelist)
            };
            work[i] = (slab, fl, core::mem::take(&mut l.partial));
            l.partial_slabs = 0;
            c.partial_slabs.store(0, CoreOrdering::Relaxed);
        }
        for (slab, fl, partial) in work {
            if slab != 0 {
                // SAFETY: detached above.
                self.deactivate_slab(unsafe { Slab::from_addr(slab) }, fl);
            }
            if partial != 0 {
                self.unfreeze_partials(partial);
            }
        }
    }

    /// `__kmem_cache_shrink`: flushes every reachable CPU, frees the empty
    /// node partial slabs and sorts the rest fullest first (so allocations
    /// fill them and the emptier ones may drain). Returns the slabs freed.
    pub fn shrink(&self) -> usize {
        // The barn first: its full sheaves' objects go back to slabs, and a
        // slab they make partial may be frozen onto this CPU's partial
        // list, which the CPU flush then empties.
        self.flush_barn();
        self.flush_all();
        self.shrink_node()
    }

    fn shrink_node(&self) -> usize {
        const PROMOTE: usize = 32;
        let mut buckets = [0usize; PROMOTE];
        let mut discard = 0;
        let mut n = self.lock_node();
        let mut cur = n.head;
        while cur != 0 {
            // SAFETY: list members are held slabs.
            let s = unsafe { Slab::from_addr(cur) };
            cur = s.next();
            let c = s.state().counters;
            let free = (c.objects - c.inuse) as usize;
            if c.inuse == 0 {
                n.remove(s);
                s.set_next(discard);
                discard = s.addr();
            } else if free <= PROMOTE {
                n.remove(s);
                s.set_next(buckets[free - 1]);
                buckets[free - 1] = s.addr();
            }
        }
        // The fullest (fewest free) end up first; order within a bucket kept.
        for b in buckets.iter().rev() {
            let mut cur = *b;
            while cur != 0 {
                // SAFETY: collected above.
                let s = unsafe { Slab::from_addr(cur) };
                cur = s.next();
                n.add(s, false);
            }
        }
        self.nr_partial.store(n.nr_partial, CoreOrdering::Relaxed);
        drop(n);
        let mut freed = 0;
        while discard != 0 {
            // SAFETY: collected above: unlisted, empty.
            let s = unsafe { Slab::from_addr(discard) };
            discard = s.next();
            self.discard_slab(s);
            freed += 1;
        }
        freed
    }

    /// `kmem_cache_destroy`: flushes every CPU, frees every empty slab and
    /// reports objects still allocated (whose slabs are then left alone).
    pub fn destroy(&mut self) -> Result<(), CacheBusy> {
        self.flush_exclusive();
        self.shrink_node();
        let slabs = self.nr_slabs.load(CoreOrdering::Relaxed);
        if slabs == 0 {
            Ok(())
        } else {
            let info = self.slabinfo();
            Err(CacheBusy {
                name: self.name,
                slabs,
                objects: info.active_objs,
            })
        }
    }

    // ------------------------------------------------------------ reports

    /// Statistics summed over the CPUs.
    pub fn stats(&self) -> SlubStats {
        let mut s = self.spill_stats.snapshot();
        for c in &self.fast {
            s.add(&c.stats.snapshot());
        }
        s
    }

    /// One CPU's statistics.
    pub fn cpu_stats(&self, cpu: usize) -> SlubStats {
        self.fast_of(cpu).stats.snapshot()
    }

    /// Slabs allocated from the page allocator and not yet freed.
    pub fn nr_slabs(&self) -> usize {
        self.nr_slabs.load(CoreOrdering::Relaxed)
    }

    /// The slabinfo line (a racy snapshot while the cache is in use).
    pub fn slabinfo(&self) -> SlabInfo {
        let (partial_slabs, partial_free) = {
            let n = self.lock_node();
            let mut free = 0;
            let mut cur = n.head;
            while cur != 0 {
                // SAFETY: list members are held slabs.
                let s = unsafe { Slab::from_addr(cur) };
                let c = s.state().counters;
                free += (c.objects - c.inuse) as usize;
                cur = s.next();
            }
            (n.nr_partial, free)
        };
        let num_objs = self.total_objects.load(CoreOrdering::Relaxed);
        let cpu_partial_slabs = self
            .fast
            .iter()
            .map(|c| c.partial_slabs.load(CoreOrdering::Relaxed))
            .sum();
        let cpu_slabs = self
            .fast
            .iter()
            .filter(|c| c.slab.load(Ordering::Relaxed) != 0)
            .count();
        SlabInfo {
            name: self.name,
            active_objs: num_objs.saturating_sub(partial_free),
            num_objs,
            objsize: self.lay.size,
            objperslab: self.lay.oo.objects as usize,
            pagesperslab: 1 << self.lay.oo.order,
            num_slabs: self.nr_slabs.load(CoreOrdering::Relaxed),
            partial_slabs,
            cpu_partial_slabs,
            cpu_slabs,
        }
    }

    /// Checks the cache's invariants on a quiescent cache and panics with a
    /// description of the first violation:
    ///
    /// * node partial list: links consistent both ways, `nr_partial`
    ///   matches, every member tagged, unfrozen, of this cache, with
    ///   `inuse < objects` (or empty), its freelist inside the slab, on
    ///   object boundaries, without cycles, `objects - inuse` long;
    /// * the frozen rule: every CPU slab and CPU partial slab is frozen and
    ///   named by exactly one CPU, and no node partial slab is frozen;
    /// * CPU freelists lie inside their CPU slab.
    pub fn validate(&mut self) {
        self.validate_nodes();
        let lockless = self.mode.load(CoreOrdering::Relaxed) == MODE_LOCKLESS;
        let v = self.validator();
        for (i, l) in self.cpu.iter_mut().enumerate() {
            v.cpu(i, &self.fast[i], l, lockless);
        }
    }

    /// [`validate`](Self::validate) through `&self` (e.g. on a
    /// `GlobalSlub`'s caches): the node lists under the list lock, and the
    /// CPU state of every slot the platform lets this context lock (its
    /// own, and remote ones where [`LocalLock::lock_remote`] can). The
    /// cache must be quiescent as for `validate`.
    pub fn validate_shared(&self) {
        self.validate_nodes();
        let lockless = self.mode.load(CoreOrdering::Relaxed) == MODE_LOCKLESS;
        let v = self.validator();
        {
            let g = self.lock_cpu();
            let i = g.cpu();
            v.cpu(i % N, self.fast_of(i), &g, lockless);
        }
        for i in 0..N {
            if let Some(g) = self.cpu.lock_remote(i) {
                v.cpu(i, &self.fast[i], &g, lockless);
            }
        }
    }

    /// What the freelist checks need of the cache.
    fn validator(&self) -> Validator {
        Validator {
            name: self.name,
            size: self.lay.size,
            offset: self.lay.offset,
            hardened: self.hardened(),
            random: self.random.load(CoreOrdering::Relaxed),
        }
    }

    /// The debug slabs and the node partial list (under their locks).
    fn validate_nodes(&self) {
        if self.flags.is_debug() {
            self.validate_debug();
        }
        let me = self.id();
        let tag = self.slab_tag();
        let v = self.validator();
        let name = self.name;
        let n = self.lock_node();
        let mut count = 0;
        let mut prev = 0;
        let mut cur = n.head;
        while cur != 0 {
            // SAFETY: list members are held slabs.
            let s = unsafe { Slab::from_addr(cur) };
            assert_eq!(s.prev(), prev, "{}: partial list prev link broken", name);
            assert_eq!(s.tag(), tag | ON_PARTIAL, "{}: partial slab tag", name);
            assert_eq!(s.cache_id(), me, "{}: partial slab of another cache", name);
            let st = s.state();
            assert!(
                !st.counters.frozen,
                "{}: frozen slab on the node list",
                name
            );
            assert!(
                st.counters.inuse < st.counters.objects || st.counters.inuse == 0,
                "{}: full slab on the partial list",
                name
            );
            let free = v.walk(s, st.freelist);
            assert_eq!(
                free,
                (st.counters.objects - st.counters.inuse) as usize,
                "{}: freelist length != objects - inuse",
                name
            );
            count += 1;
            prev = cur;
            cur = s.next();
        }
        assert_eq!(n.tail, prev, "{}: partial list tail", name);
        assert_eq!(count, n.nr_partial, "{}: nr_partial", name);
    }
}

/// The cache's parameters for [`KmemCache::validate`]'s walks.
struct Validator {
    name: &'static str,
    size: usize,
    offset: usize,
    hardened: bool,
    random: usize,
}

impl Validator {
    fn walk(&self, s: Slab<'_>, fl: usize) -> usize {
        let (hardened, random) = (self.hardened, self.random);
        walk_freelist(
            self.size,
            self.offset,
            s,
            fl,
            self.name,
            move |v: usize, slot: usize| {
                if hardened {
                    v ^ random ^ slot.swap_bytes()
                } else {
                    v
                }
            },
        )
    }

    /// One CPU's state: its slab frozen, off the node list, its freelist
    /// inside it; its partial chain frozen and counted.
    fn cpu(&self, i: usize, c: &CpuFast, l: &CpuLocked, lockless: bool) {
        let name = self.name;
        let slab = c.slab.load(Ordering::Relaxed);
        let fl = if lockless {
            c.fl_tid.load(Ordering::Relaxed).lo
        } else {
            l.freelist
        };
        if slab != 0 {
            // SAFETY: a CPU slab is held.
            let s = unsafe { Slab::from_addr(slab) };
            assert!(
                s.state().counters.frozen,
                "{name}: CPU {i}'s slab not frozen"
            );
            assert!(!s.on_partial(), "{name}: CPU {i}'s slab on the node list");
            self.walk(s, fl);
        } else {
            assert_eq!(fl, 0, "{name}: CPU {i} has a freelist but no slab");
        }
        let mut k = 0;
        let mut cur = l.partial;
        while cur != 0 {
            // SAFETY: chain members are held.
            let s = unsafe { Slab::from_addr(cur) };
            assert!(
                s.state().counters.frozen,
                "{name}: CPU {i} partial slab not frozen"
            );
            assert!(!s.on_partial(), "{name}: CPU partial slab on the node list");
            assert_ne!(cur, slab, "{name}: CPU slab also on the CPU partial list");
            k += 1;
            cur = s.next();
        }
        assert_eq!(k, l.partial_slabs, "{name}: CPU {i} partial_slabs");
    }
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Walks a freelist inside slab `s`, checking bounds and boundaries, and
/// returns its length.
fn walk_freelist(
    size: usize,
    offset: usize,
    s: Slab<'_>,
    fl: usize,
    name: &str,
    decode: impl Fn(usize, usize) -> usize,
) -> usize {
    let base = s.base().addr();
    let objects = s.state().counters.objects as usize;
    let mut n = 0;
    let mut prev = 0;
    let mut p = fl;
    while p != 0 {
        assert!(
            p >= base && (p - base).is_multiple_of(size) && (p - base) / size < objects,
            "slub {name}: corrupted freelist in slab {base:#x}: entry {p:#x} (after {prev:#x}) \
             is outside the slab or off an object boundary"
        );
        n += 1;
        assert!(
            n <= objects,
            "slub {name}: corrupted freelist in slab {base:#x}: more than {objects} entries \
             (a cycle), {p:#x} reached again"
        );
        prev = p;
        let q = core::ptr::with_exposed_provenance::<usize>(p + offset);
        // SAFETY: inside the slab, word aligned.
        let raw = unsafe { core::sync::atomic::AtomicUsize::from_ptr(q as *mut usize) }
            .load(CoreOrdering::Relaxed);
        p = decode(raw, p + offset);
    }
    n
}

impl<S: SlabSource, P: Platform, const N: usize> Drop for KmemCache<S, P, N> {
    /// Gives every empty slab back; slabs with objects still allocated are
    /// left (and leak), as `kmem_cache_destroy` leaves them.
    fn drop(&mut self) {
        if self.mode.load(CoreOrdering::Relaxed) != MODE_UNKNOWN {
            let _ = self.destroy();
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

// ---------------------------------------------------------------------------
// fork support (issue #14 item 13; see `crate::fork`)
// ---------------------------------------------------------------------------

#[cfg(all(feature = "std", not(loom)))]
impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// Takes every lock of the cache in the lock order and keeps them, for
    /// `fork`: `list_lock`, the debug caches' full list, the per-CPU lock
    /// word of `locked_cpu` (a slot the platform always locks, e.g. the
    /// per-thread platform's overflow slot), then the barn (a leaf: nothing
    /// is taken while it is held).
    ///
    /// # Safety
    ///
    /// `locked_cpu`, if given, is protected by the locked strategy for
    /// every context that uses it.
    pub unsafe fn fork_lock(&self, locked_cpu: Option<usize>) {
        self.node.lock_for_fork();
        self.full.lock_for_fork();
        if let Some(cpu) = locked_cpu {
            // SAFETY: caller's contract.
            unsafe { self.cpu.fork_lock_slot(cpu) };
        }
        self.barn.lock_for_fork();
    }

    /// Releases what [`fork_lock`](Self::fork_lock) took (same
    /// `locked_cpu`), in the parent or in the forked child.
    ///
    /// # Safety
    ///
    /// Taken by `fork_lock` on this thread (in a child: on the thread that
    /// forked).
    pub unsafe fn fork_unlock(&self, locked_cpu: Option<usize>) {
        // SAFETY: caller's contract: each is held, its guard forgotten.
        unsafe {
            self.barn.force_unlock();
            if let Some(cpu) = locked_cpu {
                self.cpu.fork_unlock_slot(cpu);
            }
            self.full.force_unlock();
            self.node.force_unlock();
        }
    }
}
