//! The pages under mm-malloc: a pcp over a buddy of the library's own
//! ([`PAGES`]), not slub's shared `GlobalPages`, so that its purge policy
//! can be a C allocator's ([`PURGE`]) while Rust programs' `GlobalSlub`
//! keeps the std heap's. Its caches take `&PAGES` as their page source
//! (`PageAlloc for &T`); large blocks and direct mappings go to it (and
//! to its buddy, [`heap`]) directly.

use buddy::{Config, GlobalBuddy, PurgePolicy, GLOBAL_CONFIG};
use pcp::GlobalPcp;

/// When free pages go back to the OS (`madvise(MADV_DONTNEED)`): free
/// blocks of 32 KiB and more (order 3: the largest slab) are purged once
/// more than 1 MiB of them stays resident (checked at most every 10 ms on
/// the slow paths: glibc returns the top of its heap above 128 KiB at
/// once, mimalloc purges after 10 ms), and any left free for 100 ms.
/// The std heap's default keeps up to 32 MiB resident, blocks of 2 MiB
/// and more only, for 5 s: with it a C program's peak RSS was 1.27x
/// glibc's (python's stdlib tests; measured in the crate's notes).
pub const PURGE: PurgePolicy = PurgePolicy {
    order: 3,
    decay_ms: Some(100),
    max_resident_pages: Some(256),
    ..PurgePolicy::DEFAULT
};

/// The buddy's shape: the std heap's ([`GLOBAL_CONFIG`]) with [`PURGE`].
pub const CONFIG: Config = GLOBAL_CONFIG.with_purge(PURGE);

/// mm-malloc's pages (pcp lists over its buddy).
pub static PAGES: GlobalPcp = GlobalPcp::with_config(CONFIG);

/// The buddy under [`PAGES`]: direct mappings, purge, statistics.
#[inline(always)]
pub fn heap() -> &'static GlobalBuddy {
    PAGES.pcp().source()
}
