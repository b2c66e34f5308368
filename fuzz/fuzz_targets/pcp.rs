//! Differential fuzzing of the per-CPU page lists against the model in
//! `pcp::testing` (feature `invariants`): allocations (plain, zeroed,
//! only-zero, cold; orders 0..=4), frees (still-zero, cold), drains,
//! background zeroing and bulk allocation across simulated CPUs and
//! interrupt contexts, under each policy and both local-lock strategies.
//! Bad input (the harness's bad-input mode): double and ABA frees to the
//! pcp and straight to the buddy of a page on a per-CPU list, interior,
//! wrong-order, huge-order and foreign frees, nonsense `set_batch_high`:
//! each must be refused (`Err`), the state intact.
//! After every operation: no overlap, alignment, contents preserved, zeroed
//! reads as zero, every page accounted for, each CPU's list invariants; at
//! the end everything merges back in the buddy.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pcp::testing::fuzz::Input;
use pcp::testing::{run_machine, Op};
use pcp::Policy;

fuzz_target!(|input: Input| {
    let policy = match input.policy % 3 {
        0 => Policy::IrqSafe,
        1 => Policy::TaskOnly,
        _ => Policy::Trylock,
    };
    let ops: Vec<Op> = input.ops.iter().take(300).map(|&o| o.into()).collect();
    run_machine(policy, input.locked, &ops);
});
