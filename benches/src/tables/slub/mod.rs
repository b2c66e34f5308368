//! `slub-pairs`, `slub-batch`, `slub-2t`, `slub-prodcons`, `slub-larson`,
//! `slub-threads`:
//! this family's SLUB (`GlobalSlub`, i.e. kmalloc over per-thread pcp pages,
//! and `KmemCache`, the kernel's `kmem_cache_alloc` of one exact size)
//! beside the allocators a user would pick instead, measured in the same
//! run, interleaved, pinned, medians over rounds.
//!
//! * **`slub-pairs`**: one alloc + free pair of 16, 64, 256, 1024, 4096 B
//!   (`Layout` align 8) per operation. Seed 001 (the SLUB `local_lock`
//!   series) claims the fast paths are untouched by the conversion on !RT
//!   and that RT takes the local lock on them: the two `KmemCache` rows on
//!   the kernel platform are exactly those two fast paths.
//! * **`slub-batch`**: allocate N objects of 64 B, then free the N
//!   (N = 1, 4, ..., 16384), per object, alloc and free phases apart (seed
//!   000's shape, applied to objects).
//! * **`slub-2t`**: 64 B pairs on one thread, then on two pinned threads at
//!   once (the runner's two-CPU check beside them): per-thread caches scale,
//!   heaps behind one lock collapse.
//! * **`slub-prodcons`**: seed 004 (Eric Dumazet's SLUB producer/consumer
//!   problem): a producer thread allocates 64 B (and 256 B) objects, writes
//!   them and passes them through a bounded single-producer single-consumer
//!   ring ([`Ring`], 1024 entries, the depth of a NIC RX ring) to a
//!   consumer thread on the other CPU, which reads and frees them. Every
//!   free is remote. Then the same in batches of 64 (the seed: "batch
//!   things a bit like SLAB"): the producer allocates 64 at a time and the
//!   consumer frees 64 at a time, the SLUB rows through
//!   `kmem_cache_alloc_bulk` / `kmem_cache_free_bulk`
//!   ([`ObjHeap::alloc_batch`], [`ObjHeap::free_batch`]; the peers, with no
//!   bulk API, loop). Every section has a floor row, "ring only (no
//!   allocator)": the same ring fed round-robin from a fixed pool, nothing
//!   allocated or freed (the queue and the cache-line transfer alone; not a
//!   peer). After the table, one fixed run per SLUB row (and per SLUB row
//!   in batches at 256 B) prints the SLUB statistics it caused, in the
//!   seed's `grep . *` format with per-CPU splits, and per 1000 allocations
//!   (objects passed) beside the seed's skbuff_head_cache.
//! * **`slub-larson`**: a Larson-style server churn: each of two threads
//!   replaces random slots (its own region 7 times in 8, another thread's
//!   1 in 8, so about a quarter of the frees are remote) of an array of
//!   objects of random sizes 16..=1024 B, for a fixed time; ops/s and the
//!   peak resident memory. Each allocator runs in its own child process
//!   (the runner re-executed with a hidden flag, [`larson_child_main`]) so
//!   its `VmHWM` is its own.
//! * **`slub-threads`** (issue #16): 1, 2, 8, 32, 64, 256 and 1024 threads,
//!   each replacing objects of random sizes 16..=1024 B in a ring of 64
//!   live ones and handing every fourth to the next thread to free (a
//!   bounded mailbox per thread), for a fixed time; Mops/s and peak RSS of
//!   `GlobalSlub` and the malloc peers, one child process per run
//!   ([`threads_child_main`]), rounds interleaved; the 1- and 2-thread rows
//!   pinned, the others not.
//!
//! The competitors ([`Competitors`]) are `GlobalAlloc`s used as objects
//! (none is installed as the global allocator): `GlobalSlub` (a static),
//! `KmemCache`s over `GlobalPages` (the same pcp pages as `GlobalSlub`), glibc
//! (`System`), mimalloc, jemalloc, snmalloc, rpmalloc, and the `no_std` heaps
//! talc, linked_list_allocator and buddy_system_allocator, each over its own
//! fixed arena ([`ARENA_BYTES`], `MAP_NORESERVE`) behind the spin lock it
//! would need as a global allocator. They are monomorphised into the
//! measuring loops through [`ObjHeap`] (no `dyn` call per object).
//!
//! # Files
//!
//! * `heaps`: the competitors ([`ObjHeap`] and its implementations,
//!   [`Competitors`]) and the summaries against the fastest peer;
//! * `pairs` (`slub-pairs`, and the pair loop the workers warm up with),
//!   `batch` (`slub-batch`), `two_threads` (`slub-2t`), `prodcons`
//!   (`slub-prodcons`, with its [`Ring`] and the ring-only floor),
//!   `stats` (the SLUB statistics printer of `slub-prodcons`), `larson`
//!   (`slub-larson`), `threads` (`slub-threads`): one file per table;
//! * `child`: the child processes of `slub-larson` and `slub-threads`
//!   ([`child_main`], the hidden flags, the result lines, a deadline per
//!   child, [`rss_kb`]).
//!
//! Every public item is re-exported here. Dependencies run one way: the
//! tables use `heaps`; `two_threads` and `prodcons` use `pairs`'s loop;
//! `prodcons` uses `stats`; `larson` and `threads` use `child`.

mod batch;
pub(crate) mod child;
mod heaps;
mod larson;
mod pairs;
mod prodcons;
mod stats;
mod threads;
mod two_threads;

pub use batch::{batch_case, batch_counts, Objects, SlubBatch};
pub use child::{child_main, rss_kb};
pub use heaps::{
    kernel_kmem_cache, kmem_cache, layout, BenchCache, BsaHeap, CacheHeap, Caches, Competitors,
    FastPath, Heap, Kind, LlaHeap, ObjHeap, SlubHeap, TalcHeap, Visit, ALIGN, ARENA_BYTES,
    CACHE_ROW, GLOBAL_SLUB, GLOBAL_SLUB_NO_SHEAVES, GLOBAL_SLUB_ROW, LOCKED_ROW, LOCKLESS_ROW,
    NO_SHEAVES_ROW, PEERS,
};
pub use larson::{
    larson_child_main, larson_run, parse_larson_line, LarsonParams, LarsonResult, SlubLarson,
    LARSON_CHILD_FLAG, LARSON_SIZES,
};
pub use pairs::{pair_case, SlubPairs, PAIR_SIZES, WARM_PAIRS};
pub use prodcons::{
    prodcons_case, prodcons_stats, Consumer, Producer, Ring, SlubProdCons, BATCH, FLOOR_ROW,
    POOL_OBJECTS, PRODCONS_BATCHES, PRODCONS_SIZES, PRODCONS_TARGET, RING,
};
pub use stats::{seed_004, seed_format, StatsRun, SEED_004, SEED_004_CPU_PARTIAL_FREE};
pub use threads::{
    parse_threads_line, threads_child_main, threads_run, SlubThreads, ThreadsParams, ThreadsResult,
    LIVE_PER_THREAD, MAILBOX, REMOTE_EVERY, THREADS_CHILD_FLAG, THREADS_ROWS, THREAD_COUNTS,
};
pub use two_threads::Slub2t;
