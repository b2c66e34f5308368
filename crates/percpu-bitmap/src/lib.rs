//! The Linux percpu area allocator (`mm/percpu.c` after the 2017 bitmap
//! rewrite, with the 2019 scan hints), as a `no_std` crate.
//!
//! See also the project's design document, `docs/DESIGN.md`, for how this
//! crate fits the others.
//!
//! # Chunks and units
//!
//! ```text
//!  c0                                  c1
//!  +--------+--------+--------+-----+  +--------+--------+--------+-----+
//!  |   u0   |   u1   |   u2   | ... |  |   u0   |   u1   |   u2   | ... |
//!  +--------+--------+--------+-----+  +--------+--------+--------+-----+
//!  |<-unit->|                          ^ base (unit 0, aligned to
//!      |                                 next_power_of_two(unit_size))
//!      +-- an area of 16 B at offset 0x340 of c0 occupies [0x340, 0x350)
//!          of c0:u0, c0:u1, c0:u2, ... : one copy per CPU
//! ```
//!
//! A chunk holds one *unit* per possible CPU, all of `unit_size` bytes (a
//! multiple of the page = block size, at least 32 KiB). Units are laid out
//! in groups (`Config::units_per_group`, each group's span rounded up to
//! `atom_size`), so `unit_offset(cpu) = group * group_stride + index *
//! unit_size`. An allocation returns an offset valid in every unit; its
//! handle [`PcpuPtr`] is unit 0's address `base + off`, and CPU `cpu`'s copy
//! is `per_cpu_ptr(p, cpu) = base + unit_offset(cpu) + off`.
//!
//! **NUMA** (issue #20): [`Config::groups_by_node`] makes the groups the
//! nodes of a [`Topology`](local_lock::topology::Topology) (as
//! `pcpu_build_alloc_info` groups CPUs at `LOCAL_DISTANCE`), and every
//! unit's pages, of the first chunk and of dynamic chunks, are populated
//! through [`ChunkSource::populate_node`] with the node of the unit's CPU
//! (`Platform::cpu_to_node`), so a kernel backs them from that node's
//! memory as `pcpu_alloc_pages` does.
//!
//! * The **first chunk** (optional, from [`Config::first_chunk`]) is
//!   `static | reserved | dynamic`, fully populated and immutable. Its
//!   reserved region is a separate chunk (`pcpu_reserved_chunk`) that
//!   serves only reserved requests and is on no slot list; its dynamic
//!   region (`pcpu_first_chunk`) serves normal requests. Both hide the bytes
//!   outside their region as pre-allocated (`start_offset`/`end_offset`).
//! * **Dynamic chunks** are created on demand from the [`ChunkSource`],
//!   unpopulated, and destroyed by [`PcpuAllocator::balance`] when free.
//!
//! # Bits, bytes and blocks
//!
//! All hints are in bits unless stated:
//!
//! ```text
//! 1 bit     = MIN_ALLOC_SIZE = 4 bytes        bit_off   = byte_off / 4
//! 1 block   = 1 page = PAGE_SIZE = 4096 bytes = BLOCK_BITS = 1024 bits
//! block     = bit_off / 1024                  block_off = bit_off % 1024
//! map_bits  = nr_pages * 1024                 slot(size)= max(fls(size) - 5 + 2, 1)
//! ```
//!
//! # Per-chunk metadata
//!
//! * `alloc_map`: 1 bit per 4 bytes, 1 = allocated.
//! * `bound_map`: `map_bits + 1` bits. An allocation `[s, e)` sets bit `s`
//!   and bit `e` and clears the bits in between; free finds `e` as the next
//!   set bit after `s` and does not clear anything. So a bit that is
//!   allocated *and* a boundary is exactly the start of a live allocation,
//!   which is how bad frees are detected.
//! * One `pcpu_block_md` per page (`contig_hint` + start, `scan_hint` +
//!   start, `left_free`, `right_free`, `first_free`) and one for the chunk.
//!   Block hints are exact; the chunk contig hint may be too small (by less
//!   than a block per side of a run), never too large. See [`chunk`] for the
//!   equations and the update rules.
//! * `populated` (1 bit per page) and `nr_empty_pop_pages`.
//!
//! **Allocation** (`pcpu_alloc`): size rounded to 4, 4 B..=32 KiB, alignment
//! a power of two up to a page. Slots are searched from the request's slot
//! up to the free slot; a chunk whose contig hint (alignment padding
//! included) cannot fit is skipped, and one that fails in a slot below 3 is
//! demoted to slot 0. Within a chunk the metadata blocks are walked to a
//! fitting region (starting after the scan hint when it is too small), the
//! bitmap is searched over at most the request plus one block, block hints
//! are rescanned only where broken, and the chunk hint only if the
//! allocation overlaps it. Non-atomic requests populate the pages under the
//! area; every request zeroes the area in every unit (except bytes known to
//! be zero, see below).
//!
//! **Free** (`free_percpu`): the size comes from the boundary map; block
//! hints are updated from the neighbouring hints or a bit search inside the
//! first and last block; the chunk hint is rescanned only if the freed
//! extent is a whole block or crosses blocks, otherwise merged locally.
//!
//! **Slots** `0..nr_slots`: `1..=slot(unit_size)` by largest free run,
//! 0 for (nearly) full or demoted chunks, then `sidelined` (isolated and
//! depopulated), `free` (wholly free chunks), `to_depopulate` (isolated,
//! awaiting [`balance`](PcpuAllocator::balance)).
//!
//! # Locking
//!
//! Lock order (outermost first):
//!
//! 1. **`slow`** = the kernel's `pcpu_alloc_mutex` (a `SpinLock` here:
//!    on std a short spin, then a futex sleep; it may be held across
//!    chunk-source calls). Protects chunk
//!    creation and destruction, population and depopulation, the lookup
//!    table's growth, and serialises non-atomic allocations and the
//!    balance work. Never taken in interrupt context (requests made there
//!    are atomic) and never while holding `pcpu_lock`.
//! 2. **IRQs saved** (`Platform::irq_save`), then
//! 3. **`data`** = `pcpu_lock` (a spin lock, `spin_lock_irqsave`).
//!    Protects everything else: the slot lists, every chunk's state, bitmaps
//!    and hints, the lookup table's contents, the global counters. Held only
//!    for bitmap and list work, never across a chunk-source call, so atomic
//!    requests and frees (which take only this lock) are safe from
//!    interrupt context on kernel platforms.
//!
//! The typed layer's [`LocalLock`](local_lock::LocalLock) (this-CPU access
//! of a [`PerCpu`]) is independent: allocator locks are taken only when a
//! `PerCpu` is created or dropped, never while one of its guards is held.
//! On std there are no interrupts, so `irq_save` is free; on a kernel
//! platform with the pinned strategy, per-CPU guards disable preemption and
//! (with `_irqsave`) interrupts.
//!
//! The chunk source must not allocate from the allocator it serves; it is
//! called with `slow` held and `data` released.
//!
//! # Layers
//!
//! * [`PcpuAllocator`]: the untyped allocator (`alloc_percpu`,
//!   `free_percpu`, `per_cpu_ptr`, the balance work, statistics, the
//!   invariant checker under `cfg(test)` or feature `invariants`).
//! * [`PerCpu<T>`]: one `T` per CPU, initialised and dropped per CPU, with
//!   `get(cpu)`, this-CPU access through a local lock, and iteration;
//!   [`PerCpuCounter`] sums per-CPU deltas on read.
//! * `GlobalBitmap` (feature `std`): a `#[global_allocator]` byte heap over
//!   one unit's bitmaps and hints, with large requests sent to `mmap`.
//! * `testing` (feature `testing`, or this crate's tests): the harness that
//!   applies operations to an allocator and a model of its live areas,
//!   driven by the proptest state machines and (with feature `arbitrary`,
//!   `testing::fuzz`) the cargo-fuzz target.
//!
//! # Source files
//!
//! Each module imports only from modules below it in this list, never from
//! `lib.rs`, which only declares and re-exports:
//!
//! * `testing.rs` (and `testing/fuzz.rs`): the test harness.
//! * `global.rs`, `large.rs`, `fork.rs`: `GlobalBitmap`; `percpu.rs`: the
//!   typed layer; `check.rs`: the invariant checker.
//! * `pcpu/`: the allocator. `mod.rs` holds the struct, the data under
//!   `pcpu_lock`, the locks, the constructors (`pcpu_setup_first_chunk`),
//!   slot placement and teardown; the paths are `impl` blocks layered as
//!   `balance.rs` (`pcpu_balance_workfn`) and `alloc.rs` (`pcpu_alloc`)
//!   over `free.rs` (`free_percpu`) over `populate.rs` (chunk creation and
//!   (de)population, `percpu-vm.c`); `config.rs` is [`Config`] and the
//!   geometry, `stats.rs` [`Stats`].
//! * `chunk_map.rs`: the address -> chunk lookup table.
//! * `chunk/`: one chunk. `meta.rs` (the header and its metadata
//!   allocation) and `area.rs` (search, `pcpu_alloc_area`,
//!   `pcpu_free_area`, population bookkeeping) over `hints.rs` (the hint
//!   maintenance) over `state.rs` (its state and the view the algorithms
//!   work on); `mod.rs` only re-exports.
//! * `block.rs` (one block's hints), `bitmap.rs` (bit operations),
//!   `source.rs` ([`ChunkSource`], `MmapSource`, `HeapSource`).
//! * `types.rs` (constants, [`PcpuPtr`], [`AllocFlags`]) and `error.rs`
//!   ([`PcpuError`], [`FreeError`]).
//!
//! # Divergences from the kernel
//!
//! The brute-force checker found four corners where the kernel's hint rules
//! (6.x `mm/percpu.c`) leave a hint too small or misplaced; each is fixed
//! minimally and has a test:
//!
//! 1. The free path's local merge into the chunk hint passes the
//!    block-relative end of the freed extent (a negative-size region for
//!    every block but the first, so the merge is a no-op there); the
//!    chunk-relative end is used (`local_merge_outside_block_zero`).
//! 2. `pcpu_block_update` made a run smaller than the contig hint the scan
//!    hint when the scan hint was unknown (0) or lay before it; the refresh
//!    that later promotes the scan hint and scans only after it then missed
//!    a larger earlier run (block contig hint too small). Here the scan hint
//!    only moves to a larger run starting at or before it
//!    (`scan_hint_promotion_stays_exact`).
//! 3. A new contig run starting exactly at the scan hint kept the scan hint
//!    (`<` instead of `<=`), leaving it inside the contig hint; and pieces of
//!    one run cut at block edges (chunk level) could overlap the contig
//!    hint. The scan hint is kept disjoint from the contig hint.
//! 4. `pcpu_block_refresh_hint` zeroes `right_free` and re-derives it only
//!    from regions scanned after a promoted scan hint; when the promoted run
//!    is the one at the block's end, `right_free` stayed 0. It is recounted.
//!
//! Implementation choices that do not change any hint:
//!
//! * The metadata walks skip runs of wholly free and wholly full blocks
//!   through two summary bitmaps, and `pcpu_find_zero_area` visits only
//!   aligned clear bits a word at a time (it returns what the kernel's loop
//!   returns; tested against it).
//! * A bitmap of non-empty slots lets a request skip empty slots.
//! * When an allocation starts at the first free bit of its block (or
//!   chunk) and that block's (chunk's) contig hint is the free run from
//!   there to the end, the hint refresh is computed directly: the rescan's
//!   only region is the rest of that run (the sequential-fill case; debug
//!   builds check every such shortcut against the full rescan).
//! * Address -> chunk lookup uses a hash of the chunk-aligned address
//!   instead of `struct page`.
//! * The slow lock spins and yields instead of sleeping.
//!
//! One choice that does not touch the hints but differs from the kernel,
//! which clears every area in every unit on allocation: a chunk source may
//! promise that populated pages read as zero
//! ([`ChunkSource::populates_zeroed`]; `MmapSource` does), and each chunk
//! then keeps per page the offset from which the page has never been handed
//! out since it was populated; an area is cleared only up to the end of its
//! part that may have been handed out before.

#![no_std]
#![warn(missing_docs)]

#[cfg(any(feature = "std", test, loom))]
extern crate std;

/// The sync shim (std, loom or spin) under its short name, for the unit
/// tests; the modules import `local_lock::sync` directly.
#[cfg(test)]
pub(crate) use local_lock::sync;

/// The platform layer this crate is built on (re-exported so users name
/// one dependency).
pub use local_lock;

#[cfg(feature = "allocator-api2")]
mod api2;
mod bitmap;
mod block;
#[cfg(any(test, feature = "invariants"))]
mod check;
pub mod chunk;
mod chunk_map;
mod error;
#[cfg(all(feature = "std", not(loom)))]
mod fork;
#[cfg(all(feature = "std", not(loom)))]
mod global;
#[cfg(all(feature = "std", not(loom)))]
mod large;
mod pcpu;
mod percpu;
mod source;
#[cfg(all(feature = "std", not(loom), any(test, feature = "testing")))]
pub mod testing;
#[cfg(test)]
mod tests;
mod types;

pub use error::{FreeError, FreeErrorKind, PcpuError};
#[cfg(all(feature = "std", not(loom)))]
pub use global::GlobalBitmap;
pub use pcpu::{Config, PcpuAllocator, Stats, MAX_UNITS};
pub use percpu::{PerCpu, PerCpuCounter, ThisCpu};
pub use source::ChunkSource;
#[cfg(feature = "std")]
pub use source::MmapSource;
#[cfg(any(feature = "std", test))]
pub use source::{HeapSource, DEPOPULATE_POISON};
pub use types::{
    AllocFlags, PcpuPtr, BLOCK_BITS, EMPTY_POP_PAGES_HIGH, EMPTY_POP_PAGES_LOW, MAX_ALLOC_SIZE,
    MAX_UNIT_SIZE, MIN_ALLOC_SIZE, MIN_UNIT_SIZE, PAGE_SIZE, SLOT_BASE_SHIFT, SLOT_FAIL_THRESHOLD,
};
