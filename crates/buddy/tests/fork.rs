//! `fork()` from a multithreaded program whose global allocator is
//! `GlobalBuddy` (issue #14 item 13): blocks of several orders, direct mappings. The harness
//! (threads churning while the main thread forks; every child allocates
//! and exits 0; a hung child is killed after 10 s and counted) is
//! `local_lock::fork::stress`. Alone in its binary (tests of a binary are
//! threads, and the fork must see only these).
#![cfg(not(loom))]

use std::time::Duration;

#[global_allocator]
static HEAP: buddy::GlobalBuddy = buddy::GlobalBuddy::new();

#[test]
#[cfg_attr(miri, ignore = "fork")]
fn fork_while_threads_allocate_every_child_allocates_and_exits() {
    let r = local_lock::fork::stress::run(100, 2, Duration::from_secs(10));
    assert!(r.passed(), "{r}");
}
