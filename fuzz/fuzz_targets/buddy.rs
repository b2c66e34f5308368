//! Differential fuzzing of the buddy allocator against the reference model
//! in `buddy::testing` (feature `invariants`): every operation is applied to
//! both, then the free lists are compared block by block with the model's
//! canonical decomposition, allocation outcomes (zone, failure) with the
//! model's prediction, contents and owner words with what was written, and
//! the invariant checker runs. Bad input (the bad-input mode of the
//! harness: foreign, misaligned, interior, wrong-order, huge-order, double,
//! ABA and duplicate-in-bulk frees, frees of blocks tagged as on a per-CPU
//! list, regions added twice or overlapping) goes through the `try_`
//! variants (the fuzzer aborts on panics) and must be rejected with the
//! predicted error and no change the model does not predict.
#![no_main]

use buddy::testing::fuzz::Input;
use buddy::testing::{Harness, Setup};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: Input| {
    let mut h = Harness::new(Setup {
        page_shift: input.page_shift,
        max_order: input.max_order,
        two_zones: input.two_zones,
        min_free_pct: input.min_free_pct % 21,
        reserve_ratio: input.reserve_ratio,
    });
    for &op in input.ops.iter().take(512) {
        h.apply(&op.into());
    }
    h.finish();
});
