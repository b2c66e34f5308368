//! Per-CPU page lists over the buddy allocator (`struct per_cpu_pages`),
//! with the protection policies of seed 000 and its successors and the
//! hot/cold ordering and zero list of seed 003.
//!
//! See also the project's design document, `docs/DESIGN.md`, for how this
//! crate fits the others.
//!
//! # Design
//!
//! ```text
//!   ZonePcps<S, L, N, Z>                       pcps[z]: zone z's lists (every
//!   │                                          zone type of every node)
//!   Pcp<S: PageSource, L: Platform>            one zone of S's buddy
//!   ├─ cpus: LocalLock<CpuPages, L>            one slot per CPU
//!   │    count, high, free_count, alloc_factor, flags  (Linux 6.7+)
//!   │    normal[order 0..=3]  head = hot ... tail = cold
//!   │    zero[order 0..=3]    known-zero pages, same order
//!   ├─ batch, high_min, high_max               kernel formulas or set by hand
//!   └─ counters[cpu]: stats + count mirror     written by the holder, summed on read
//! ```
//!
//! Pages on the lists are *allocated* in the buddy; they are linked through
//! their descriptors' owner words (`data` = prev, `link` = next, `tag` =
//! list id), never through the page memory (that would dirty the zero list).
//! The list id is a [`buddy::PCP_TAG`] tag, stamped when a page is linked
//! and cleared when it is handed out, so the buddy refuses a free of a page
//! that sits on a list (a double free that has not reached the buddy).
//! Drains return the zero lists' pages with
//! [`Buddy::free_bulk_keep_zero`](buddy::Buddy::free_bulk_keep_zero): they
//! keep PG_zero in the buddy.
//!
//! * **Allocation**: orders 0..=3 pop the head of this CPU's list (the tail
//!   for `COLD`) once the zone passes its lockless watermark check
//!   (`zone_watermark_fast`, as the kernel before `rmqueue_pcplist`: the
//!   low watermark; else, after the lower zones' low pass, min with the
//!   request's `HIGH`/`NONBLOCK` reductions; a refused request goes to the
//!   buddy, `WATERMARK_BYPASS`); when the lists and the buddy cannot serve,
//!   the gfp slow path ([`buddy::alloc_slowpath`]: the source's growth and
//!   reclaim hook under the retry flags) retries them; an empty list is refilled with `batch` pages under **one**
//!   zone-lock acquisition ([`Buddy::alloc_bulk`](buddy::Buddy::alloc_bulk)),
//!   known-zero pages going to the zero list. `ZEROED` requests take the zero
//!   list first, then a normal page and clear it (outside the locks);
//!   `ONLY_ZERO` never clears; normal requests use zero pages when the normal
//!   list is empty. Each allocation halves `free_count`. A refill
//!   (`nr_pcp_alloc`) raises the CPU's `high` by what it asks for; order-0
//!   refills ask for `batch << alloc_factor` pages, the factor growing with
//!   each refill while that fits below `high` (at most
//!   `PCP_BATCH_SCALE_MAX`) and halved by each free; a batch of 1 (lists
//!   that should not keep pages) refills one block of any order.
//! * **Free**: checked against the descriptor (owned, head, order, not
//!   already on a list), pushed at the head (the tail for `COLD`), the zero
//!   list if freed still zero; `free_count` (pages freed since the last
//!   allocations) grows. When `count` reaches the CPU's `high`
//!   (`nr_pcp_high`), `free_count` pages (clamped to `[batch, high - batch]`,
//!   `nr_pcp_free`) return to the buddy from the cold ends, the freed
//!   order's list first, each list drained to empty before the next
//!   (round-robin over the orders, zero lists last), under **one**
//!   zone-lock acquisition (`free_pcppages_bulk`).
//! * **Auto-tuned high** (Linux 6.7+): each CPU's `high` lives in
//!   `[high_min, high_max]` (`zone_highsize` of the low watermark, and of an
//!   eighth of the zone, each shared out between the platform's **online**
//!   CPUs, [`Platform::nr_online_cpus`](local_lock::Platform::nr_online_cpus),
//!   as the kernel divides by the node's online CPUs, not the possible
//!   slots). A CPU whose frees fill its lists gets `high` raised
//!   to `free_count + batch` (up to `high_max`), so a burst of frees costs a
//!   few large batches; `decay_pcp_high` (the kernel's vmstat refresh: call
//!   it periodically, the prezero helper thread does) lowers it by an eighth
//!   toward `high_min` and frees what lies above. Consecutive high-order
//!   frees (`PCPF_PREV_FREE_HIGH_ORDER`) free at once (`free_high`). A
//!   `high` set by hand (`set_batch_high`, the sysctl) fixes
//!   `high_min == high_max`: no tuning.
//! * **Nodes** ([`ZonePcps`], the kernel's `zone->per_cpu_pageset` of
//!   every zone): one `Pcp` per zone of the buddy, node `n`'s zone of
//!   type `t` at `n * nr_zones + t`. An allocation walks the zonelist of
//!   the request's node ([`Buddy::zonelist_node`](buddy::Buddy::zonelist_node):
//!   its zones, then the other nodes' by distance; `THISNODE` its own),
//!   every zone against its low watermark, then against min, each passing
//!   zone served from its lists on this CPU (`get_page_from_freelist` ->
//!   `rmqueue_pcplist`); then the buddy's node path and slow path. A free
//!   goes to the lists of the page's own zone (known from its check: the
//!   span lookup gives the node, [`Buddy::head_owner_zone`](buddy::Buddy::head_owner_zone)),
//!   so a CPU caches pages of every node it allocates from and remote
//!   pages never mix into the local lists. A single `Pcp` keeps only its
//!   own zone's pages (another node's zone of the same type goes to the
//!   buddy) and, for another node's request, asks the buddy for that node.
//! * **Drains**: local, one remote CPU (under its lock: on every platform
//!   under `Trylock`, whose slots are real per-CPU spin locks as the
//!   kernel's `pcp->lock` since 6.0; under the other policies where the
//!   platform allows, the locked strategy), all CPUs with pages.
//! * **Bulk**: `alloc_bulk` fills an array's empty slots under one hold;
//!   `free_bulk` frees many under one hold. `prezero(budget)` clears cold
//!   pages into the zero list (idle loop).
//!
//! # Policies ([`Policy`])
//!
//! | policy | task side | interrupt side |
//! |---|---|---|
//! | `IrqSafe` (5.14) | `lock_irqsave` | `lock_irqsave`: uses the lists |
//! | `TaskOnly` (seed 000) | `lock` (preemption only) | straight to the buddy (zone lock, IRQs saved) |
//! | `Trylock` (6.2+) | `try_lock_spin` (a real per-CPU spin lock: remote drains on every platform) | `try_lock_spin`; fails if it interrupted the holder → buddy |
//!
//! # Lock order
//!
//! 1. The per-CPU lists' local lock (`Pcp::cpus`): protects one CPU's
//!    `CpuPages` and the owner words of the pages on them.
//! 2. The buddy's zone lock (IRQs saved), taken inside 1 for refills, batch
//!    frees and drains, never the other way round.
//!
//! The counters are written only by the holder of a CPU's lists (a relaxed
//! load and store: the kernel's deliberately racy per-CPU counters, made
//! sound with atomics), except by bypass paths, which add atomically.
//!
//! # Pinned and locked platforms
//!
//! On a pinned platform (kernel !RT, per-thread std) the lists are reached
//! with no atomic read-modify-write; remote drains are refused (drain on the
//! CPU itself). On a locked platform (RT, std real CPUs) the slot lock makes
//! remote drains direct.
#![no_std]
#![warn(missing_docs)]

#[cfg(any(feature = "std", test))]
extern crate std;

/// The [`PageAlloc`](buddy::PageAlloc) methods a pcp type answers from
/// its buddy (`self.buddy()`): page size, largest order, the owner lookup
/// and the node queries (in `impl PageAlloc` blocks of this crate).
macro_rules! page_alloc_from_buddy {
    () => {
        #[inline]
        fn page_size(&self) -> usize {
            self.buddy().config().page_size()
        }
        #[inline]
        fn max_order(&self) -> buddy::Order {
            self.buddy().config().max_order()
        }
        #[inline(always)]
        fn block_of(&self, addr: *const u8) -> Option<buddy::BlockRef<'_>> {
            self.buddy().owner_of(addr)
        }
        fn nr_node_ids(&self) -> usize {
            self.buddy().nr_node_ids()
        }
        fn page_to_nid(&self, addr: *const u8) -> usize {
            self.buddy().page_to_nid(addr).unwrap_or(0)
        }
    };
}

#[cfg(feature = "allocator-api2")]
mod api2;
mod error;
pub mod list;
mod pcp;
pub mod sizing;
pub mod stats;
mod zones;

#[cfg(all(feature = "std", not(loom)))]
mod fork;
#[cfg(all(feature = "std", not(loom)))]
mod global;
pub use crate::error::{BadFree, BadFreeKind, BatchHighError, DrainError};
#[cfg(all(feature = "std", not(loom)))]
pub use crate::global::{spawn_prezero_thread, GlobalPcp, GLOBAL_BATCH, GLOBAL_HIGH};
pub use crate::pcp::{CpuPages, PageSource, Pcp, Policy};
pub use crate::sizing::MAX_HIGH;
pub use crate::stats::{PcpStat, PcpStats};
pub use crate::zones::ZonePcps;

#[cfg(all(feature = "std", not(loom), any(test, feature = "invariants")))]
pub mod testing;

#[cfg(test)]
mod tests;
#[cfg(all(test, not(loom)))]
mod tests_gfp;
#[cfg(all(test, not(loom)))]
mod tests_numa;
