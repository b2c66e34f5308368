//! The allocator stack of this kernel, all `static`s built at compile time
//! over the platform [`Kp`]:
//!
//! ```text
//!   KMALLOC (13 kmalloc caches)   OBJ_CACHE, SHEAF_CACHE      PERCPU (+ COUNTERS)
//!        |                             |                          |
//!   PCP_TRYLOCK                   PCP_IRQSAFE     PCP_TASKONLY    |  PCP_DMA
//!        \____________________________|______________|___________|_____/
//!                                   BUDDY  (zones DMA | Normal)
//! ```
//!
//! * **Zones.** `DMA` is RAM below [`DMA_END`] (the first 16 MiB: the
//!   image, then ~15 MiB for the buddy), `Normal` is everything above. A
//!   Normal request falls back to DMA when Normal is short (the zonelist),
//!   minus DMA's `lowmem_reserve`; a DMA request (`zone_max(DMA)`) never
//!   gets Normal pages.
//! * **Nodes.** Each RAM range goes to the node its device-tree memory
//!   node names (`numa-node-id`, node 0 without one): node `n`'s zones
//!   are the buddy's zone ids `2n` (DMA, empty above node 0's first 16
//!   MiB) and `2n + 1` (Normal). Allocations prefer the hart's node and
//!   fall back by the tree's `distance-map`. The pcp lists cache node 0's
//!   zones.
//! * **Memory.** Boot hands the buddy the RAM between the image's end and
//!   the device tree, and the RAM after the tree (a hole where the tree
//!   is), as *zeroed* regions. What that relies on: QEMU allocates guest RAM
//!   zero-filled; with `-bios none` no firmware runs; before our first
//!   instruction QEMU wrote only the ELF segments (below `__kernel_end`)
//!   and the device tree (left out). So every page handed over reads as
//!   zero: PG_zero is set on all of them and the memmaps carved from them
//!   need no clearing.
//! * **pcp.** Three lists over the Normal zone, one per protection policy
//!   (`IrqSafe`, `TaskOnly`, `Trylock`), and one over DMA. SLUB's kmalloc
//!   takes slabs from the `Trylock` lists (Linux 6.2+), the
//!   `kernel_obj` and `kernel_sheaf` caches from the `IrqSafe` ones.
//! * **SLUB.** On this target the caches choose the *locked* fast path:
//!   riscv64gc has no lock-free 128-bit compare-exchange (no Zacas), so the
//!   `(freelist, tid)` fast path runs under `local_lock_irqsave` instead of
//!   the lockless cmpxchg (see `slub`'s crate docs). Slab state words still
//!   change by `AtomicDWord` compare-exchange, through portable-atomic's
//!   lock table, made interrupt-safe by `unsafe-assume-privileged`
//!   (Cargo.toml).
//! * **percpu.** A dynamic-chunk allocator (8 units of 32 KiB) whose chunk
//!   memory and metadata come from the buddy ([`PercpuPages`]).

use core::cell::UnsafeCell;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;
use core::sync::atomic::AtomicUsize;

use buddy::{AllocFlags, Buddy, Config, Order, ZoneId, ZoneSpec};
use local_lock::kernel::Kernel;
use pcp::{Pcp, Policy};
use percpu_bitmap::{ChunkSource, PcpuAllocator, PerCpuCounter};
use slub::{Geometry, Kmalloc, KmemCache, SlabFlags};

use crate::arch::MAX_HARTS;
use crate::platform::Kp;

/// Per-CPU slots of every per-CPU structure (one per possible hart).
pub const NCPU: usize = MAX_HARTS;
/// Page size.
pub const PAGE: usize = 4096;
/// Largest order (4 MiB blocks).
pub const MAX_ORDER: u8 = 10;
/// First address above the DMA zone (a multiple of the 4 MiB block).
pub const DMA_END: usize = 0x8100_0000;
/// The low zone.
pub const DMA: ZoneId = ZoneId::new(0);
/// The normal zone.
pub const NORMAL: ZoneId = ZoneId::new(1);

/// The buddy's shape: 4 KiB pages, orders 0..=10, zones DMA and Normal,
/// the kernel's watermark tunables.
pub const CONFIG: Config = Config::new(PAGE, MAX_ORDER).with_zones(&[
    ZoneSpec {
        name: "DMA",
        end: DMA_END,
    },
    ZoneSpec {
        name: "Normal",
        end: usize::MAX,
    },
]);

/// The page allocator.
pub static BUDDY: Buddy<Kp> = Buddy::new(Kernel::new(), CONFIG);

/// A pcp over [`BUDDY`].
pub type KPcp = Pcp<&'static Buddy<Kp>, Kp, NCPU>;

/// Normal-zone lists, `local_lock_irqsave` (5.14-5.19).
pub static PCP_IRQSAFE: KPcp = Pcp::new(&BUDDY, NORMAL, Kernel::new(), Policy::IrqSafe);
/// Normal-zone lists, preemption only; interrupts bypass to the buddy (seed 000).
pub static PCP_TASKONLY: KPcp = Pcp::new(&BUDDY, NORMAL, Kernel::new(), Policy::TaskOnly);
/// Normal-zone lists, trylock (6.2+); an interrupt that finds them held bypasses.
pub static PCP_TRYLOCK: KPcp = Pcp::new(&BUDDY, NORMAL, Kernel::new(), Policy::Trylock);
/// DMA-zone lists (task-only).
pub static PCP_DMA: KPcp = Pcp::new(&BUDDY, DMA, Kernel::new(), Policy::TaskOnly);

/// Every pcp, with its report name.
pub static PCPS: [(&str, &KPcp); 4] = [
    ("irq-safe", &PCP_IRQSAFE),
    ("task-only", &PCP_TASKONLY),
    ("trylock", &PCP_TRYLOCK),
    ("dma", &PCP_DMA),
];

/// kmalloc over the trylock lists.
pub static KMALLOC: Kmalloc<&'static KPcp, Kp, NCPU> =
    Kmalloc::new(&PCP_TRYLOCK, Kernel::new(), Geometry::new(NCPU));

/// A dedicated cache, as a subsystem would create (`kmem_cache_create`):
/// 200-byte objects aligned to 64. Kept in an [`Excl`] so the end of the
/// run can `validate()` it (which needs exclusive access).
pub static OBJ_CACHE: Excl<KmemCache<&'static KPcp, Kp, NCPU>> = Excl::new(KmemCache::new(
    "kernel_obj",
    200,
    64,
    SlabFlags::NONE,
    Geometry::new(NCPU),
    &PCP_IRQSAFE,
    Kernel::new(),
));

/// A cache with per-CPU sheaves (`kmem_cache_args.sheaf_capacity`, 6.18
/// on): 64-byte objects, sheaves of 32. Allocated and freed one by one and
/// in bulk, from task and interrupt context, freed remotely in bulk.
pub static SHEAF_CACHE: Excl<KmemCache<&'static KPcp, Kp, NCPU>> = Excl::new(
    KmemCache::new(
        "kernel_sheaf",
        64,
        8,
        SlabFlags::NONE,
        Geometry::new(NCPU),
        &PCP_IRQSAFE,
        Kernel::new(),
    )
    .with_sheaves(32),
);

/// The percpu allocator's chunk source: whole buddy blocks (chunk memory and
/// metadata), from the Normal zone with fallback.
pub struct PercpuPages;

fn percpu_order(pages: usize, align: usize) -> Option<Order> {
    Order::for_pages(pages.max(align / PAGE).max(1))
}

// SAFETY: buddy blocks are `2^order` pages aligned to their size (at least
// `pages` pages and `align`), held by us until freed; `populate` does
// nothing (RAM is always there) and nothing here calls back into the
// percpu allocator.
unsafe impl ChunkSource for PercpuPages {
    fn alloc_pages(&self, pages: usize, align: usize) -> Option<NonNull<u8>> {
        let order = percpu_order(pages, align)?;
        BUDDY.alloc_pages(order, AllocFlags::NONE).map(|p| p.ptr)
    }
    unsafe fn free_pages(&self, ptr: NonNull<u8>, pages: usize, align: usize) {
        let order = percpu_order(pages, align).expect("percpu: order of a freed block");
        // SAFETY: the block came from `alloc_pages` with the same arguments.
        unsafe { BUDDY.free_pages(ptr, order) }
    }
}

/// The percpu allocator type.
pub type KPercpu = PcpuAllocator<Kp, PercpuPages>;
/// A percpu counter of this kernel.
pub type KCounter = PerCpuCounter<'static, Kp, PercpuPages, NCPU>;

/// The percpu allocator: 8 units (one per possible hart) of 32 KiB per
/// chunk. Dropped at the end of the run (its chunks go back to the buddy).
pub static PERCPU: Excl<ManuallyDrop<KPercpu>> = Excl::new(ManuallyDrop::new(
    PcpuAllocator::new_dynamic(Kernel::new(), PercpuPages, 32 << 10, NCPU),
));

/// The per-CPU counters of the self-test: one incremented by task code,
/// one by the timer interrupt handler. Created by hart 0 before the others
/// start, dropped at the end.
pub static COUNTERS: Excl<Option<(KCounter, KCounter)>> = Excl::new(None);

/// Free pages in the buddy right after boot handed it the RAM.
pub static INITIAL_FREE: AtomicUsize = AtomicUsize::new(0);

/// The percpu allocator.
pub fn percpu() -> &'static KPercpu {
    PERCPU.get()
}

/// The counters `(task, irq)`.
pub fn counters() -> &'static (KCounter, KCounter) {
    COUNTERS.get().as_ref().expect("counters created at boot")
}

/// A `static` whose value is shared (`get`) while the harts run and
/// reached exclusively (`get_mut`) at boot before the other harts start
/// and at the end of the run when they are parked at a barrier with their
/// timers off: the kernel's "stop_machine" moments.
pub struct Excl<T>(UnsafeCell<T>);

// SAFETY: shared access hands out `&T` (T: Sync); exclusive access is
// `unsafe` and its callers guarantee nobody else uses the value meanwhile.
unsafe impl<T: Sync> Sync for Excl<T> {}

impl<T> Excl<T> {
    /// Wraps `v`.
    pub const fn new(v: T) -> Self {
        Excl(UnsafeCell::new(v))
    }
    /// Shared access.
    pub fn get(&'static self) -> &'static T {
        // SAFETY: exclusive access (`get_mut`) happens only while no other
        // context uses the value (its contract).
        unsafe { &*self.0.get() }
    }
    /// Exclusive access.
    ///
    /// # Safety
    ///
    /// No other context uses the value (or a reference from `get`) until
    /// the returned reference is dead.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_mut(&'static self) -> &'static mut T {
        // SAFETY: caller's contract.
        unsafe { &mut *self.0.get() }
    }
}

/// [`add_ram`] of `[start, end)` on node `nid` less the `holes` (each
/// `[lo, hi)`, in any order, possibly outside the range); returns the pages
/// added.
///
/// # Safety
///
/// As [`add_ram`], for the range less the holes.
pub unsafe fn add_ram_except(
    nid: usize,
    start: usize,
    end: usize,
    mut holes: [(usize, usize); 2],
) -> usize {
    holes.sort_unstable();
    let mut at = start;
    let mut pages = 0;
    for (lo, hi) in holes {
        let (lo, hi) = (lo.clamp(at, end), hi.clamp(at, end));
        // SAFETY: caller's contract: `[at, lo)` is in the range, outside
        // every hole.
        pages += unsafe { add_ram(nid, at, lo) };
        at = at.max(hi);
    }
    // SAFETY: as above.
    pages + unsafe { add_ram(nid, at, end) }
}

/// Hands `[start, end)` to the buddy as zeroed RAM of NUMA node `nid`
/// (the device tree's `numa-node-id` of its memory node; see the module
/// docs); returns the pages added.
///
/// # Safety
///
/// The range is RAM that nothing else uses, reads as zero, and is handed
/// over once.
pub unsafe fn add_ram(nid: usize, start: usize, end: usize) -> usize {
    if end <= start {
        return 0;
    }
    // SAFETY: caller's contract.
    match unsafe { BUDDY.add_region_node(nid, start as *mut u8, end - start, true) } {
        Ok(pages) => pages,
        Err(e) => panic!("buddy: add_region_node({nid}, {start:#x}, {end:#x}): {e:?}"),
    }
}
