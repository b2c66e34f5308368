//! SLUB: object caches (`kmem_cache`) and kmalloc, faithful to mm/slub.c
//! after the 2021 `local_lock` conversion (seed 001), over any page
//! allocator ([`SlabSource`]: the pcp lists over the buddy by default).
//!
//! See also the project's design document, `docs/DESIGN.md`, for how this
//! crate fits the others.
//!
//! # Structure
//!
//! * [`KmemCache`]: object size, alignment, slab order from
//!   `calculate_order` (waste 1/16, 1/8, 1/4; `min_objects = 4 *
//!   (fls(nr_cpus) + 1)`; `slub_max_order` 3, falling back to the minimum
//!   order when the page allocator cannot supply the preferred one),
//!   `min_partial`, the CPU partial limit. The free pointer lives inside a
//!   free object, in its middle (at word 0 in [`SlabFlags::HARDENED`]
//!   caches, whose decoded free pointers are all checked: the hot paths
//!   then need no offset), or after the object with poisoning, red zones
//!   around an object smaller than a word, or a constructor ([`KmemCache::with_ctor`], the kernel's `ctor`: run
//!   on each object when its slab is made; objects stay constructed across
//!   free and alloc; hardened caches with one take the slab paths).
//! * Per CPU (`kmem_cache_cpu`): the CPU slab, its lockless `freelist`, the
//!   transaction id `tid` (starts at the CPU number, advances by
//!   [`KmemCache::TID_STEP`], a power of two >= the slots, so `tid %
//!   TID_STEP` names the CPU), the CPU partial slabs, statistics.
//! * Per slab (the buddy's owner words, see [`slab`]):
//!   `freelist` and `counters` (`inuse`, `objects`, `frozen`) changed
//!   together by one double-word compare-exchange; the cache; list links.
//! * Per node (`kmem_cache_node`, one per node of the page allocator's
//!   [`nr_node_ids`](buddy::PageAlloc::nr_node_ids), at most
//!   [`MAX_NUMNODES`]): `list_lock` and the partial list, the barn of
//!   sheaves, `nr_slabs`, `nr_partial`, `total_objects`. See *NUMA nodes*.
//! * **gfp flags** ([`KmemCache::alloc_flags`], `kmem_cache_alloc(s, gfp)`;
//!   [`Kmalloc::kmalloc_flags`], `kmalloc(size, gfp)`): the request's
//!   [`AllocFlags`](buddy::AllocFlags) reach the page allocator when a slab
//!   (or a large block) is needed: `allocate_slab` tries the preferred
//!   order lightly (`NOWARN | NORETRY`, no `NOFAIL`, no reclaim and no
//!   reserves when it could block), then the minimum order with the flags
//!   as given, so `NOWARN`, the retry flags, `MEMALLOC`, `HIGH`/`ATOMIC`
//!   and zone limits act in the buddy's slow path. `ZEROED` zeroes the
//!   object.
//!
//! # Fast paths
//!
//! Chosen per cache at first use:
//!
//! * **Lockless** (a platform with interrupts, the pinned strategy and a
//!   lock-free double-word compare-exchange: a `!PREEMPT_RT` kernel):
//!   allocation reads `(freelist, tid)` (one load: a stale object never
//!   pairs with a newer tid), then the CPU slab, then compare-exchanges
//!   `(object, tid) -> (next, next tid)` on the CPU it runs on; a mismatch
//!   (migration, an interrupt that allocated or freed, a slow path) retries.
//!   A free of an object of the CPU slab links it and compare-exchanges the
//!   same way. No lock is taken and nothing is disabled around the path;
//!   the compare-exchange itself is
//!   [`this_cpu_cmpxchg_double`](local_lock::this_cpu_cmpxchg_double)
//!   ("preemption off, still this CPU?, compare-exchange", as the generic
//!   per-CPU ops implement it).
//! * **Locked** (`PREEMPT_RT`'s locked strategy, where a fast path could
//!   interleave with a slow path on the same CPU slot; a CPU without a
//!   lock-free double-word CAS; the per-thread std platform; or
//!   [`SlabFlags::LOCKED_FASTPATH`]): the same steps under the local lock.
//!   With [`PerThread`](local_lock::std_platform::PerThread) the slot is the
//!   thread's own and taking the pinned lock costs no atomic instruction,
//!   which is why [`GlobalSlub`] uses it.
//!
//! # NUMA nodes
//!
//! New slabs come from [`alloc_block_node`](buddy::PageAlloc::alloc_block_node)
//! (the node asked, or the local one:
//! [`Platform::numa_node_id`](local_lock::Platform::numa_node_id)); a
//! slab's node is [`page_to_nid`](buddy::PageAlloc::page_to_nid) of its
//! block, kept in its tag, and every free of its objects, from any CPU,
//! goes to that node's list. [`KmemCache::alloc_node`]
//! (`kmem_cache_alloc_node`) and [`Kmalloc::kmalloc_node`] take a node or
//! [`NUMA_NO_NODE`] (any: what `alloc` asks): as `___slab_alloc`, a CPU
//! slab of another node is deactivated (`node_match`,
//! [`ALLOC_NODE_MISMATCH`](SlubStat::ALLOC_NODE_MISMATCH)), the node's
//! partial list and a new slab of the node are tried first without reclaim
//! (`try_thisnode`), then the other nodes' partial lists by distance
//! (`get_any_partial`, [`KmemCache::set_remote_node_defrag_ratio`]) and
//! the page allocator's fallback; [`THISNODE`](buddy::AllocFlags::THISNODE)
//! allows neither. Each node has its barn; a CPU trades with its node's,
//! and objects of another node than the freeing CPU's bypass the sheaves
//! (6.18's `slab_free`). With one node (the default of every source) all
//! of this folds to node 0 at compile time.
//!
//! # Lock order (as 5.15)
//!
//! 1. `node->list_lock` (spin lock, interrupts saved; one node's at a time)
//! 2. `cpu_slab->lock` (the local lock, `local_lock_irqsave`)
//!
//! The slow path never takes the list lock while holding the local lock: it
//! drops the local lock to search the node list or to ask the page allocator
//! for a slab, then re-takes it and re-validates (another context may have
//! installed a CPU slab meanwhile: that one is flushed, `CPUSLAB_FLUSH`).
//! `put_cpu_partial` takes the local lock while the list lock may be held
//! (1 then 2). Slab state changes by compare-exchange need no lock.
//!
//! # The frozen-slab rule
//!
//! A *frozen* slab belongs to one CPU (its CPU slab, or a slab on its CPU
//! partial list). Other CPUs may push frees onto its freelist with the
//! slab compare-exchange ([`FREE_FROZEN`](SlubStat::FREE_FROZEN)), but only
//! the owner takes objects from it, and only the owner unfreezes it
//! (deactivation, draining its partial list). An unfrozen slab is on the
//! node partial list (it has free objects, or is empty and kept for
//! `min_partial`) or on no list (full). A remote free that makes a full
//! slab partial freezes it onto the freeing CPU's partial list
//! ([`CPU_PARTIAL_FREE`](SlubStat::CPU_PARTIAL_FREE)); one that empties an
//! unfrozen slab takes the list lock and frees it if the node already has
//! `min_partial` slabs. [`KmemCache::validate`] checks the rule.
//!
//! # Interrupt context
//!
//! On the lockless mode, allocation and free work in interrupt handlers:
//! fast paths retry when interrupted, slow paths run with interrupts
//! disabled. On the locked strategy (PREEMPT_RT) interrupt handlers are
//! threads in the kernel; a platform that runs a handler on top of a holder
//! of the same slot would deadlock (reported as a panic by the local lock).
//!
//! # Batching, hardening, debugging (issue #6)
//!
//! * **Bulk APIs**: [`KmemCache::alloc_bulk`] and [`KmemCache::free_bulk`]
//!   go through the sheaves first (`alloc_from_pcs_bulk`,
//!   `free_to_pcs_bulk`), then slabs: one local-lock hold for the CPU
//!   freelist, detached freelists per slab with the kernel's look-ahead.
//! * **Sheaves** ([`KmemCache::with_sheaves`]): per-CPU main and spare
//!   arrays of object pointers behind the local trylock, and a barn of full
//!   and empty sheaves: a producer/consumer pair trades whole sheaves
//!   instead of bouncing slab cache lines (seed 004). A sheaf cache has its
//!   own inline fast path; its frees are validated by the CPU's last
//!   looked-up slab range (reset by any slab discard), else by the page
//!   descriptor lookup (slabs are compound blocks). [`GlobalSlub`] has them.
//! * **Hardening**: [`SlabFlags::HARDENED`] (obfuscated free pointers and
//!   sheaf entries, seeded by
//!   [`Platform::random_seed`](local_lock::Platform::random_seed); double
//!   free markers; checked free pointers and sheaf entries, see *Bad
//!   input*; on in [`GlobalSlub`]: 178 instructions per 64 B alloc + free
//!   pair with sheaves against 175 unhardened, by callgrind) and
//!   [`SlabFlags::RANDOM_FREELIST`] (the kernel's per-cache Fisher-Yates
//!   `random_seq`, walked from a random position in each new slab).
//! * **Debugging** (`slub_debug`): [`SlabFlags::CONSISTENCY_CHECKS`],
//!   [`SlabFlags::RED_ZONE`], [`SlabFlags::POISON`],
//!   [`SlabFlags::STORE_USER`]. Debug caches take the locked path: every
//!   allocation and free under the list lock, no fast path, no CPU slabs;
//!   a corruption names the cache, the object, what was expected and
//!   found, and the recorded owners, then panics; [`KmemCache::validate`]
//!   walks every slab (partial and full).
//!
//! # Bad input
//!
//! A free of a pointer outside this page allocator, inside an object, of
//! another cache, or freed twice in a row (the kernel's naive check: the
//! object is already the freelist head) is refused with
//! [`FreeError`] (`try_free`) or a panic naming the problem (`free`,
//! `kfree`), before any state changes.
//!
//! [`SlabFlags::HARDENED`] caches (the [`GlobalSlub`] default) also:
//!
//! * refuse a double free with other frees in between (free a, free b,
//!   free a): a free object's free-pointer word holds the cache's secret
//!   (an object in a sheaf) or an encoded pointer that decodes to null or
//!   into its own slab (an object on a freelist); every allocation clears
//!   the word. The sheaf fast free recognises the sheaf marker only; an
//!   object that went back to its slab and is freed again through the
//!   sheaves breaks the slab freelist through it, which the next
//!   allocation to reach it reports (it is never handed out twice);
//! * check every free pointer an allocation follows (one range check
//!   against the CPU slab) and every sheaf entry (stored as `object ^
//!   secret`, checked against the span of the cache's slabs), so a write
//!   after free is reported as a corrupted freelist or sheaf (cache, slab
//!   or sheaf, object, the value found) instead of crashing or making an
//!   allocation return an address the writer chose.
//!
//! Every freelist walk (deactivation, validation, debug checks) is bounded
//! by the slab's object count and checks each entry is an object of the
//! slab: a cycle or a wild pointer is reported, never followed forever.
//! [`KmemCache::try_free_bulk`] checks the whole array (every pointer, none
//! already free, no duplicates) before it frees anything.
#![no_std]
#![warn(missing_docs)]
#![cfg_attr(feature = "nightly", feature(allocator_api))]

#[cfg(any(feature = "std", test))]
extern crate std;

#[cfg(feature = "allocator-api2")]
mod api2;
mod cache;
mod error;
pub mod layout;
pub mod slab;
mod source;
pub mod stats;
mod typed;

#[cfg(not(loom))]
mod kmalloc;

#[cfg(all(feature = "std", not(loom)))]
mod fork;
#[cfg(all(feature = "std", not(loom)))]
mod global;

pub use crate::cache::report::SlabInfo;
pub use crate::cache::{FastFree, KmemCache, MAX_NUMNODES, NUMA_NO_NODE};
pub use crate::error::{CacheBusy, FreeError, FreeErrorKind};
#[cfg(all(feature = "std", not(loom)))]
pub use crate::global::{GlobalPages, GlobalSlub};
#[cfg(not(loom))]
pub use crate::kmalloc::{
    kmalloc_class, kmalloc_index, kmalloc_sheaf_capacity, Kmalloc, Report, KMALLOC_MAX_CACHE_SIZE,
    KMALLOC_NAMES, KMALLOC_SHEAF_BYTES, KMALLOC_SIZES, ZERO_SIZE_PTR,
};
pub use crate::layout::{
    default_flags, set_default_flags, CacheError, CacheLayout, Geometry, OrderObjects, SlabFlags,
};
pub use crate::source::SlabSource;
pub use crate::stats::{SlubStat, SlubStats};
pub use crate::typed::{CacheBox, OutOfMemory, TypedCache};

#[cfg(all(any(test, feature = "testing"), not(loom)))]
pub mod testing;
#[cfg(all(test, not(loom)))]
mod tests;
