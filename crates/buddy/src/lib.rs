//! The Linux kernel's zoned buddy page allocator, with known-zero page
//! tracking (PG_zero, seed 003), `no_std`, over the `local-lock` platform.
//!
//! See also the project's design document, `docs/DESIGN.md`, for how this
//! crate fits the others.
//!
//! # Design
//!
//! ```text
//!            Buddy<P: Platform>
//!   ┌─────────────────────────────────────────────────────────────────┐
//!   │ zones[nid * nr + t]  node nid's zone of type t (by address:     │
//!   │                type t = [end(t-1), end(t))), empty ones allowed │
//!   │   lock ─ SpinLock<ZoneInner>, taken inside irq_save/restore     │
//!   │     free_area[order 0..=MAX_ORDER]                              │
//!   │        lists[ZERO]  ⇄ heads of known-zero blocks                │
//!   │        lists[DIRTY] ⇄ heads of other blocks                     │
//!   │     zero_bits / dirty_bits (non-empty orders), free, managed,   │
//!   │     watermarks, lowmem_reserve, stats                           │
//!   │ spans[0..16]   address range + memmap (one descriptor per page) │
//!   │                + its node (page → node is the span lookup)      │
//!   │ nodes          which have memory; per node its zonelist's node  │
//!   │                order by distance (build_zonelists)              │
//!   └─────────────────────────────────────────────────────────────────┘
//! ```
//!
//! * **Descriptors**: one 64-byte `PageDesc` (`struct page`) per
//!   page in a memmap. Address → descriptor is: find the span (one compare
//!   for the first span; at most [`MAX_SPANS`]), subtract, shift, index. A
//!   free block's head descriptor is marked `FREE` with its order and
//!   PG_zero bits and linked into its list (doubly linked: O(1) unlink);
//!   an allocated block's head is `ALLOC` with its order. "Is my buddy free
//!   and of this order" is one descriptor read at `pfn ^ (1 << order)`, so
//!   a free merges in O(MAX_ORDER) steps and never searches a list.
//!   **All-zero bytes are a valid descriptor** (an unmanaged page), so a
//!   memmap in fresh `mmap` memory needs no initialisation.
//! * **Spans and memory sources**: a span is an address range with a
//!   memmap. `no_std` callers [`add_region`](Buddy::add_region)`(start, len,
//!   zeroed)`: the parts outside existing spans become spans whose memmap is
//!   carved from their own start; parts inside a span declared with
//!   [`add_span`](Buddy::add_span) (memmap placed by the caller) or a grown
//!   std span use it. Edges are trimmed to pages; holes are pages never
//!   added; regions can be added at any time. The zone of a page is given
//!   by its address ([`ZoneSpec::end`], multiples of the largest block so
//!   buddies never straddle zones). With `std`, [`GlobalBuddy`] reserves one
//!   large `PROT_NONE` range per span (memmap at its start), and maps
//!   MAX_ORDER-aligned blocks (and the memmap pages describing them) as the
//!   heap grows.
//! * **NUMA nodes** (`pglist_data`): memory is tagged with a node when it
//!   is added ([`add_region_node`](Buddy::add_region_node),
//!   [`add_span_node`](Buddy::add_span_node); `add_region`/`add_span` are
//!   node 0), up to [`MAX_NUMNODES`] (4: each node holds its zones
//!   inline). Every node has the configuration's zone types, so zone ids
//!   are `nid * nr_zones + type` ([`ZoneId`]: a type where flags use it,
//!   [`AllocFlags::zone_max`]; node 0's zone ids are the types). A node
//!   is a property of its spans: a page's node, and so its zone on free,
//!   comes from the span lookup every free already does (one add). When a
//!   node first gets memory every node's zonelist is rebuilt: the nodes
//!   with memory by the platform's
//!   [`node_distance`](local_lock::Platform::node_distance), nearest
//!   first (`build_zonelists`), each node's zones from the highest allowed
//!   type down. [`alloc_pages_node`](Buddy::alloc_pages_node) walks node
//!   `nid`'s zonelist, [`alloc_pages`](Buddy::alloc_pages) the caller's
//!   ([`numa_node_id`](local_lock::Platform::numa_node_id)); `THISNODE`
//!   keeps only the node's own zones (fails, never falls back). With one
//!   node (only node 0 has memory) allocation keeps its single-node path:
//!   one relaxed load decides. Per-node counters:
//!   [`nr_free_pages_node`](Buddy::nr_free_pages_node),
//!   [`managed_pages_node`](Buddy::managed_pages_node),
//!   [`stat_node`](Buddy::stat_node); buddyinfo prints a `Node n, zone`
//!   line per zone of each node with memory.
//! * **Allocation** ([`alloc_pages`](Buddy::alloc_pages)): the kernel's
//!   `get_page_from_freelist` twice over the request's zonelist (its
//!   node's zones, highest allowed first, then the other nodes' by
//!   distance): every zone against its **low** watermark
//!   (a lockless `zone_watermark_fast` first; skipped with one zone), then
//!   every zone against **min** (`HIGH` may go below it by half,
//!   `NONBLOCK` by a further quarter), each plus the `lowmem_reserve` owed
//!   to lower zones; then `MEMALLOC`'s pass without watermarks. In a zone:
//!   lock, check, take the smallest free block of at least the order
//!   (`trailing_zeros` of a bitmap), split it down (`expand`: upper halves
//!   back to their lists), unlock, then clear what must be cleared.
//! * **GFP slow path** ([`alloc_slowpath`], [`BuddySource::alloc_or_grow`]):
//!   rounds of the source's growth ([`BuddySource::grow`]) and, for
//!   requests that may block, its reclaim hook ([`BuddySource::reclaim`],
//!   by default the platform's
//!   [`reclaim_pages`](local_lock::Platform::reclaim_pages)), each followed
//!   by a retry, as the retry flags say (`NORETRY` one round,
//!   `RETRY_MAYFAIL` while they make progress, `NOFAIL` forever, none:
//!   while they make progress up to [`MAX_GROW_RETRIES`], one round for
//!   costly orders); then the failure report
//!   ([`BuddySource::warn_alloc`]) unless `NOWARN`. See [`AllocFlags`].
//! * **Free** ([`free_pages`](Buddy::free_pages)): the head descriptor must
//!   be `ALLOC` with the order given (bad frees are caught here and reported
//!   with the address and the problem, leaving the state intact); merge with
//!   free buddies; put the block at the **tail** if the buddy one order up is
//!   free (it is likely to merge soon, so it should not be handed out first)
//!   or the caller asked (fresh memory, cold), else at the head.
//! * **Known-zero pages (PG_zero)**: each free block carries two bits, "lower
//!   half zero" and "upper half zero"; both set = PG_zero. Splitting a block
//!   gives each half PG_zero iff its bit was set; merging two blocks sets a
//!   bit iff that half was wholly zero, so the merged block is zero only if
//!   both were, and a half-zero block still tells which half needs
//!   clearing. Zeroed requests take the smallest known-zero block first
//!   (no clearing); otherwise they clear only the part not known zero,
//!   outside the lock. Ordinary requests prefer non-zero blocks of the
//!   smallest order. Fresh memory from the OS or a zeroed region is marked
//!   zero; [`free_pages_zeroed`](Buddy::free_pages_zeroed) keeps it.
//! * **Purging** (memory back to the OS, std page sources): whole free
//!   blocks at or above the purge order ([`PurgePolicy`], default 9) are
//!   given back through the page source's hook
//!   ([`BuddySource::purge`]: `madvise(MADV_DONTNEED)` for
//!   [`GlobalBuddy`]; none by default, so `no_std` sources are unaffected),
//!   a batch at a time taken off the lists under the zone lock, purged
//!   outside it, and put back cold, flagged purged (`PG_reported`) and
//!   known zero (the OS zeroes them: `alloc_zeroed` after a purge clears
//!   nothing). A split keeps the flag on both halves, a merge keeps it only
//!   if both halves had it (purged + resident = resident), a hand-out
//!   clears it. [`trim_with`](Buddy::trim_with) purges now
//!   (`malloc_trim`); [`decay_with`](Buddy::decay_with) is one decay scan
//!   (jemalloc's `dirty_decay_ms`: blocks two scans saw free `decay_ms`
//!   apart, keeping a watermark of resident free pages), which
//!   `GlobalBuddy::decay` runs on its slow paths.
//! * **Bulk** for pcp: [`alloc_bulk`](Buddy::alloc_bulk) (`rmqueue_bulk`) and
//!   [`free_bulk`](Buddy::free_bulk) (`free_pcppages_bulk`), each under one
//!   zone-lock acquisition. `alloc_bulk` tells each block's known-zero bit;
//!   `free_bulk` ignores `Page::zero` (a `Page` says what the block was when
//!   handed out, not after its holder wrote it), and only
//!   [`free_bulk_keep_zero`](Buddy::free_bulk_keep_zero), whose caller
//!   states its zero-flagged blocks still read as zero (pcp's zero lists),
//!   keeps PG_zero.
//! * **Owner words** ([`Owner`]): the head descriptor of an allocated block
//!   holds a 16-byte-aligned [`AtomicDWord`](local_lock::sync::AtomicDWord)
//!   plus two `AtomicUsize` and a tag, **which belong to whoever holds the
//!   block**; [`owner_of`](Buddy::owner_of) finds them from any address
//!   inside the block (one descriptor read for the head page, two for a
//!   block allocated with [`AllocFlags::COMP`], at most `MAX_ORDER` more
//!   otherwise). They are zero when a block is handed out: the free that
//!   brings a block back clears the words its holder left set (loads only
//!   when it left none), so the allocation stores none of them.
//!
//! # Invariants
//!
//! Checked by `Buddy::check_invariants` (feature `invariants`, and this
//! crate's tests) after every operation in the tests and the fuzz target:
//!
//! * per zone: `free = Σ_order nr_free(order) × 2^order`, `free <= managed`;
//! * every listed block is a naturally aligned `FREE` head of its list's
//!   order, in its zone (of its span's node) and span, with no block head
//!   inside it; every
//!   `FREE` descriptor is listed; PG_zero matches the list it is on;
//! * no two free buddies of equal order remain unmerged. With eager merging
//!   this makes the free blocks a function of the set of free pages: each
//!   free page lies in the largest aligned all-free block (up to
//!   `MAX_ORDER`, within a span). The reference model in `buddy::testing`
//!   checks exactly that.
//!
//! # Checking ladder
//!
//! 1. Always: the descriptor check of every free (head, order, alignment,
//!    ownership, double free, a block on a per-CPU list: owner tag
//!    [`PCP_TAG`]), reported with the address and the problem; a region
//!    added twice or overlapping memory added before (or a memmap) is
//!    refused with [`RegionError::Overlap`].
//! 2. `invariants` (and tests): the full checker, plus verification that
//!    every block handed out as known zero and every block freed as zero
//!    reads as zero.
//!
//! # API at a glance
//!
//! | need | call |
//! |---|---|
//! | memory | [`add_region`](Buddy::add_region), [`add_span`](Buddy::add_span), [`add_region_node`](Buddy::add_region_node), [`add_span_node`](Buddy::add_span_node), [`GlobalBuddy`] |
//! | nodes | [`alloc_pages_node`](Buddy::alloc_pages_node), [`alloc_block_node`](Buddy::alloc_block_node), [`nr_node_ids`](Buddy::nr_node_ids), [`page_to_nid`](Buddy::page_to_nid), [`node_order`](Buddy::node_order), [`zone_id`](Buddy::zone_id), [`zone_node`](Buddy::zone_node), [`zone_type`](Buddy::zone_type), [`node_zones`](Buddy::node_zones), [`nr_free_pages_node`](Buddy::nr_free_pages_node), [`managed_pages_node`](Buddy::managed_pages_node), [`stat_node`](Buddy::stat_node) |
//! | one block | [`alloc_pages`](Buddy::alloc_pages), [`alloc_pages_zone`](Buddy::alloc_pages_zone), [`free_pages`](Buddy::free_pages), [`free_pages_zeroed`](Buddy::free_pages_zeroed), [`free_pages_flags`](Buddy::free_pages_flags), [`try_free_pages`](Buddy::try_free_pages) |
//! | pcp refill / drain | [`alloc_bulk`](Buddy::alloc_bulk), [`free_bulk`](Buddy::free_bulk), [`try_free_bulk`](Buddy::try_free_bulk), [`free_bulk_keep_zero`](Buddy::free_bulk_keep_zero), [`try_free_bulk_keep_zero`](Buddy::try_free_bulk_keep_zero) |
//! | zones | [`zonelist`](Buddy::zonelist), [`zone_of`](Buddy::zone_of), [`managed_pages`](Buddy::managed_pages), [`watermarks`](Buddy::watermarks), [`watermark_ok`](Buddy::watermark_ok), [`set_tunables`](Buddy::set_tunables) |
//! | page-source contract (pcp, slub) | [`PageAlloc`] (`alloc_block` → [`Block`]: the block with its owner words), [`BuddySource`] (the buddy, its growth and reclaim hooks, the failure report) |
//! | gfp slow path | [`BuddySource::alloc_or_grow`], [`alloc_slowpath`] (for a layer with its own attempt: pcp's lists), [`alloc_block_low`](Buddy::alloc_block_low), [`watermark_fast`](Buddy::watermark_fast), [`watermark_low_fast`](Buddy::watermark_low_fast) |
//! | owner words (slub, pcp) | [`owner_of`](Buddy::owner_of) → [`BlockRef`] { head, order, [`Owner`] }, [`page_state`](Buddy::page_state) |
//! | memory back to the OS | [`trim_with`](Buddy::trim_with), [`decay_with`](Buddy::decay_with), [`nr_purged_pages`](Buddy::nr_purged_pages), [`BuddySource::trim`], `GlobalBuddy::trim`/`decay`, [`PurgePolicy`] |
//! | observability | `Display` (buddyinfo), [`zoneinfo`](Buddy::zoneinfo), [`zone_info`](Buddy::zone_info), [`stat`](Buddy::stat) |
//!
//! # Lock order
//!
//! 1. `GlobalBuddy::grow` (std only): serialises growth; held across the
//!    `mmap` calls and the `add_region` that follows.
//! 2. `Buddy::resize`: serialises span creation, region addition,
//!    watermark/reserve setup and the tunables; protects the tunables and the
//!    zones' `managed` counts.
//! 3. `zone.lock` (one per zone), always taken inside
//!    [`Platform::irq_save`](local_lock::Platform::irq_save) and released
//!    before [`irq_restore`](local_lock::Platform::irq_restore)
//!    (`spin_lock_irqsave`). It protects everything in the zone's
//!    `ZoneInner` (free lists, counts, watermark copies, stats) and the
//!    `state`, `next`, `prev`, `aux` words of the descriptors of the zone's
//!    free blocks. Never two zone locks at once. Callers' locks (pcp's
//!    per-CPU lock) nest outside it.
//!
//! The allocator is `Sync`: any thread, and on a kernel platform any
//! interrupt handler, may call it (IRQs are off while a zone lock is held,
//! so an interrupt on the same CPU cannot spin on it). Nothing but the
//! `alloc_bulk` sink and the `free_bulk` iterator runs under a zone lock,
//! and those must not call back into the allocator. The purge hook runs
//! outside every zone lock (on blocks taken off the lists).
//!
//! # Pinned (kernel) and locked (std/RT) platforms
//!
//! The buddy has no per-CPU state, so both strategies of `local-lock` see
//! the same code: the zone lock is a spin lock in every case; on a kernel
//! platform `irq_save` really masks interrupts, on std and on RT it is a
//! no-op (std has no interrupts; RT handlers are threads). A contended
//! zone or resize lock waits as [`SpinLock`](local_lock::sync::SpinLock)
//! does: without `std` it spins; on std (Linux) it spins briefly and then
//! sleeps on a futex, as `spinlock_t` does on PREEMPT_RT.
//!
//! # Re-entrancy
//!
//! The allocator never allocates. A page source that feeds it (the std
//! growth path) only calls `mmap`, never the global allocator, so the buddy
//! can itself be the global allocator.
//!
//! # Features
//!
//! * `std` (default): [`GlobalBuddy`] (mmap-backed `#[global_allocator]`)
//!   and the std platforms of `local-lock`.
//! * `invariants`: `Buddy::check_invariants` (always on in this crate's
//!   own tests), the known-zero verification on every hand-out and
//!   zeroed free, and with `std` the model/harness in `buddy::testing` for
//!   fuzzing and other crates' tests.

#![no_std]
#![warn(missing_docs)]

#[cfg(any(feature = "std", test, loom))]
extern crate std;

#[cfg(feature = "allocator-api2")]
mod api2;
mod buddy;
#[cfg(any(test, loom, feature = "invariants"))]
mod check;
mod desc;
mod error;
#[cfg(all(feature = "std", not(loom)))]
mod fork;
#[cfg(all(feature = "std", not(loom)))]
mod global;
#[cfg(loom)]
pub mod loom_support;
mod slowpath;
mod source;
mod span;
mod types;
mod zone;

#[cfg(all(feature = "std", not(loom), any(test, feature = "invariants")))]
pub mod testing;

pub use crate::buddy::{Block, BlockRef, Buddy, PageState, ZoneInfo};
pub use crate::desc::{is_pcp_tag, Owner, PCP_TAG, PCP_TAG_MASK};
pub use crate::error::{FreeError, FreeErrorKind, RegionError};
#[cfg(all(feature = "std", not(loom)))]
pub use crate::global::{GlobalBuddy, GLOBAL_CONFIG};
pub use crate::slowpath::alloc_slowpath;
pub use crate::source::{BuddySource, PageAlloc, PageMapView, MAX_GROW_RETRIES};
pub use crate::span::MAX_SPANS;
pub use crate::types::{
    AllocFlags, Config, FreeFlags, Order, Page, Pfn, PurgePolicy, Stat, Tunables, Watermarks,
    ZoneId, ZoneSpec, ZoneStats, CAP_CHECK_MS, MAX_NUMNODES, MAX_ZONES, MAX_ZONE_IDS, ORDER_LIMIT,
};

#[cfg(all(test, not(loom)))]
mod tests;

// The allocator is shared between threads (and, on a kernel, interrupt
// handlers): it must be `Sync` whenever its platform is.
#[cfg(all(feature = "std", not(loom)))]
const _: () = {
    const fn sync<T: Sync + Send>() {}
    sync::<Buddy<local_lock::std_platform::StdCpu>>();
    sync::<GlobalBuddy>();
    sync::<Page>();
};
