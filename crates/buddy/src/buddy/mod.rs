//! [`Buddy`]: the zoned page allocator. This module holds the struct, its
//! constructor and its locks; the public API is split by layer, each file
//! adding an `impl` block (lowest first, no file using one below it in this
//! list):
//!
//! * `zero`: known-zero (PG_zero) clearing ranges and checked-build
//!   verification;
//! * `owner`: descriptor lookups ([`Buddy::owner_of`], [`Buddy::page_state`]);
//! * `free`: one-block free and its checks (`__free_pages`);
//! * `alloc`: one-block allocation (`alloc_pages`), `GlobalAlloc`;
//! * `bulk`: pcp's `rmqueue_bulk` / `free_pcppages_bulk`;
//! * `watermark`: watermarks, reserves, tunables;
//! * `region`: spans and regions (memory in);
//! * `node`: NUMA nodes (`pglist_data`): per-node zones, zonelists by
//!   distance, `alloc_pages_node`, per-node counters;
//! * `purge`: free blocks given back to the OS (trim, decay);
//! * `report`: buddyinfo, zoneinfo, counters.
//!
//! The zone's free lists themselves (`__free_one_page`, `expand`,
//! `rmqueue`) are in `crate::zone`.

mod alloc;
mod bulk;
mod free;
mod node;
mod owner;
mod purge;
mod region;
mod report;
mod watermark;
mod zero;

pub use owner::{Block, BlockRef, PageState};
pub use report::ZoneInfo;

use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};

use local_lock::sync::atomic::{AtomicUsize, Ordering};
use local_lock::sync::{SpinLock, SpinLockGuard};
use local_lock::{IrqFlags, Platform};

use crate::span::Found;
use crate::span::SpanTable;
use crate::types::{Config, Tunables, MAX_ZONE_IDS};
use crate::zone::{Zone, ZoneInner};
use node::NodeTable;

/// The zoned buddy allocator over platform `P` (see the crate docs for the
/// design, the lock order and the invariants).
///
/// Built empty by a `const fn`; memory comes from
/// [`add_region`](Self::add_region) (and [`add_span`](Self::add_span) for
/// a memmap placed by the caller).
///
/// ```
/// use buddy::{AllocFlags, Buddy, Config, Order, Tunables, ZoneId};
/// use local_lock::std_platform::StdCpu;
///
/// // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// let mut mem = vec![0u8; 1 << 20];
/// // 4 KiB pages, blocks up to order 4 (64 KiB), no min watermark.
/// let heap = Buddy::new(StdCpu, Config::new(4096, 4).with_tunables(Tunables::NO_MIN));
/// // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
///
/// let pages = heap.total_managed_pages();
/// assert!(pages > 240, "1 MiB less the carved memmap and the trimmed edges");
/// let p = heap.alloc_pages(Order::new(2).unwrap(), AllocFlags::ZEROED).unwrap();
/// assert!(p.zero && p.addr() % (4 << 12) == 0);
/// assert_eq!(heap.nr_free_pages(ZoneId::new(0)), pages - 4);
/// assert!(heap.owns(p.ptr.as_ptr()));
/// // SAFETY: our block, of its order, freed once.
/// unsafe { heap.free_pages(p.ptr, p.order) };
/// assert_eq!(heap.total_free_pages(), pages);
/// // `/proc/buddyinfo`: free blocks per order.
/// assert!(heap.to_string().starts_with("Node 0, zone   Normal"));
/// ```
pub struct Buddy<P> {
    /// Interrupts are saved around every zone-lock hold.
    platform: P,
    /// Page size, orders, zones.
    cfg: Config,
    /// The zones of every node: node `n`'s zone of type `t` at
    /// `n * nr_zones + t` (node 0's zones first, lowest addresses first).
    zones: [Zone; MAX_ZONE_IDS],
    /// The nodes with memory and their zonelists' node order.
    nodes: NodeTable,
    /// Address ranges with a memmap.
    spans: SpanTable,
    /// The resize lock: serialises span creation, region addition and
    /// watermark setup (protects the tunables it holds, and the `managed`
    /// counts). Outside every zone lock.
    resize: SpinLock<Tunables>,
}

/// The zone lock, held with IRQs saved (`spin_lock_irqsave`); releases the
/// lock, then restores IRQs, on drop. `!Send`.
pub(crate) struct ZoneGuard<'a, P: Platform> {
    inner: ManuallyDrop<SpinLockGuard<'a, ZoneInner>>,
    /// The zone's lockless `NR_FREE_PAGES` mirror, refreshed on unlock.
    nr_free: &'a AtomicUsize,
    platform: &'a P,
    flags: IrqFlags,
    _not_send: PhantomData<*mut ()>,
}

impl<P: Platform> Deref for ZoneGuard<'_, P> {
    type Target = ZoneInner;
    #[inline(always)]
    fn deref(&self) -> &ZoneInner {
        &self.inner
    }
}

impl<P: Platform> DerefMut for ZoneGuard<'_, P> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut ZoneInner {
        &mut self.inner
    }
}

impl<P: Platform> Drop for ZoneGuard<'_, P> {
    #[inline(always)]
    fn drop(&mut self) {
        // The lockless free count (`zone_watermark_fast`): one relaxed
        // store of the count this hold leaves.
        self.nr_free.store(self.inner.free, Ordering::Relaxed);
        if P::RAW_SPINLOCKS {
            // SAFETY: taken out exactly once, here; the zone locks of a
            // platform with `RAW_SPINLOCKS` are raw (`Zone::new`).
            unsafe { SpinLockGuard::unlock_raw(ManuallyDrop::take(&mut self.inner)) };
        } else {
            // SAFETY: dropped exactly once, here.
            unsafe { ManuallyDrop::drop(&mut self.inner) };
        }
        // SAFETY: `flags` came from the `irq_save` in `lock_zone` on this
        // CPU, and this restore comes after every later save was restored
        // (guards nest).
        unsafe { self.platform.irq_restore(self.flags) };
    }
}

impl<P: Platform> Buddy<P> {
    local_lock::const_fn! {
        /// An empty allocator (no memory yet) over `platform`, shaped by
        /// `config`.
        pub fn new(platform: P, config: Config) -> Self {
            #[cfg(not(loom))]
            let zones = [const { Zone::new(P::RAW_SPINLOCKS) }; MAX_ZONE_IDS];
            #[cfg(loom)]
            let zones = core::array::from_fn(|_| Zone::new(P::RAW_SPINLOCKS));
            Buddy {
                platform,
                cfg: config,
                zones,
                nodes: NodeTable::new(config.nr_zones() - 1),
                spans: SpanTable::new(),
                resize: SpinLock::new(config.tunables()),
            }
        }
    }

    /// The configuration.
    #[inline(always)]
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The platform.
    #[inline(always)]
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// `spin_lock_irqsave(&zone->lock)`.
    #[inline(always)]
    pub(crate) fn lock_zone(&self, zone: usize) -> ZoneGuard<'_, P> {
        let flags = self.platform.irq_save();
        // Contended: spins briefly, then (std on Linux) sleeps in the kernel,
        // as `spinlock_t` does on PREEMPT_RT (see `SpinLock`).
        // (The zone's field addresses at their uses: `unhoisted`.)
        let z = unhoisted(&self.zones[zone]);
        let inner = z.lock.lock();
        ZoneGuard {
            inner: ManuallyDrop::new(inner),
            nr_free: &z.nr_free,
            platform: &self.platform,
            flags,
            _not_send: PhantomData,
        }
    }

    /// The zone (index into `zones`) of `addr`, a page of span `f`
    /// (`page_zone`): its node's zones, the type its address gives.
    #[inline(always)]
    pub(crate) fn zone_in(&self, f: &Found, addr: usize) -> usize {
        if self.cfg.nr_zones() <= 1 {
            // One zone per node: no type to work out (issue #22).
            return f.info.zone_base % MAX_ZONE_IDS;
        }
        let z = f.info.zone_base + self.cfg.zone_of_addr(addr).index();
        debug_assert!(z < MAX_ZONE_IDS);
        // (`zone_base` is `nid * nr_zones`, `nid < MAX_NUMNODES`: the
        // remainder, an `and`, is `z` itself and spares the zone array's
        // bounds check, issue #22.)
        z % MAX_ZONE_IDS
    }

    fn lock_resize(&self) -> SpinLockGuard<'_, Tunables> {
        self.resize.lock()
    }

    /// Internal access for the checker.
    #[cfg(any(test, loom, feature = "invariants"))]
    pub(crate) fn spans(&self) -> &SpanTable {
        &self.spans
    }
}

/// `r` itself, through an empty `asm!` the optimiser cannot see through:
/// the addresses of `r`'s fields are then worked out where they are used
/// (folded into each load's addressing mode), not hoisted out of a
/// caller's loop by LLVM's loop-invariant code motion, which kept them in
/// registers it then spilled to the stack (no rematerialisation of an
/// address off a register): a loop of page frees paid a store of each
/// before the loop and a reload and a second load at each use (issue #22:
/// seven field addresses of the free path). No instruction; elsewhere `r`.
#[inline(always)]
pub(crate) fn unhoisted<T>(r: &T) -> &T {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    {
        let mut p = r as *const T;
        // SAFETY: an empty template: no instruction, no memory access;
        // `p` comes back unchanged. (A pointer into a `nomem` block on
        // purpose: nothing reads through it there.)
        #[allow(clippy::pointers_in_nomem_asm_block)]
        unsafe {
            core::arch::asm!("/* {0} */", inout(reg) p, options(nomem, nostack, preserves_flags))
        };
        // SAFETY: `p` is `r`, valid for as long as `r`.
        unsafe { &*p }
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    r
}

impl<P> fmt::Debug for Buddy<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buddy")
            .field("config", &self.cfg)
            .field("spans", &self.spans.len())
            .finish_non_exhaustive()
    }
}

// fork support (issue #14 item 13; see `crate::fork`)

#[cfg(all(feature = "std", not(loom)))]
impl<P: Platform> Buddy<P> {
    /// Takes the resize lock, then every zone lock (in zone order; nothing
    /// ever holds two), and keeps them: the `prepare` half of a `fork`
    /// handler (the lock order of the crate docs).
    pub fn fork_lock(&self) {
        self.resize.lock_for_fork();
        for z in &self.zones {
            z.lock.lock_for_fork();
        }
    }

    /// Releases the locks taken by [`fork_lock`](Self::fork_lock), in the
    /// parent or in the forked child.
    ///
    /// # Safety
    ///
    /// They were taken by `fork_lock` on this thread (in a child: on the
    /// thread that forked).
    pub unsafe fn fork_unlock(&self) {
        // SAFETY: caller's contract: each is held, its guard forgotten.
        unsafe {
            for z in self.zones.iter().rev() {
                z.lock.force_unlock();
            }
            self.resize.force_unlock();
        }
    }
}
