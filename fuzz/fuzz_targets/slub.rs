//! Differential fuzzing of SLUB against the model in `slub::testing`
//! (feature `testing`): three caches (24, 200, 3000 B) and a kmalloc over a
//! buddy, allocations and frees (single and bulk: `alloc_bulk`,
//! `free_bulk` with detached freelists per slab; frees on other CPUs than
//! the allocation: remote frees; kfree without the size; some in interrupt
//! handlers),
//! flushes of the local CPU and of remote CPUs, and shrinks, across
//! simulated CPUs, on the pinned platform (lockless fast paths) and the
//! locked one (PREEMPT_RT). After every operation: no overlap, alignment,
//! contents preserved, ksize covers the request, every cache's invariants
//! (lists, counts, the frozen rule); at the end every cache is destroyed
//! cleanly and every page is back in the buddy.
//!
//! Bad input is mixed in (`Bad`: double, ABA, foreign, interior,
//! wrong-cache and bad bulk frees, see `slub::testing::Op::Bad`): each
//! must be refused with an error and leave the model and every cache's
//! invariants intact.
#![no_main]

use libfuzzer_sys::fuzz_target;
use local_lock::test_platform::TestPlatform;
use slub::testing::fuzz::Input;
use slub::testing::{run_machine, Op, CPUS};

fuzz_target!(|input: Input| {
    if input.ops.len() > 2000 {
        return;
    }
    let ops: Vec<Op> = input.ops.iter().map(|&o| o.into()).collect();
    let p = if input.locked {
        TestPlatform::locked(CPUS)
    } else {
        TestPlatform::pinned(CPUS)
    };
    run_machine(&ops, p);
});
