//! Differential fuzzing of the percpu bitmap allocator against the model of
//! the harness in `percpu_bitmap::testing` (features `testing`, `arbitrary`),
//! with the brute-force invariant checker after every operation: random
//! geometries (units, unit size, first chunk with static/reserved/dynamic
//! regions or none), blocking / atomic / reserved / interrupt-context
//! requests of any size and alignment (including invalid ones, which must be
//! refused with the right error), frees, interior / misaligned / double
//! frees (which must be refused with the right reason), balance runs, and a
//! page budget so the exhaustion paths run too. Checked: no overlap,
//! alignment, zeroed in every unit, contents preserved until free, sizes
//! found from the boundary map, counters, and every page returned when the
//! allocator drops.
//!
//! Bad input (issue #14): ABA frees of any earlier area (`FreeStale`),
//! foreign pointers (stack, host heap, another allocator's area), frees of
//! the static area, and requests of huge sizes or of alignments that are
//! zero, not powers of two or above a page (`AllocBad`): each must be
//! refused with the right error and change nothing (the invariant checker
//! and the counters after every operation).
#![no_main]

use libfuzzer_sys::fuzz_target;
use percpu_bitmap::testing::fuzz::Input;
use percpu_bitmap::testing::Harness;

fuzz_target!(|input: Input| {
    let setup = input.setup();
    let src = setup.source();
    let Some(mut h) = Harness::new(&src, setup) else {
        return;
    };
    for &op in input.ops.iter().take(300) {
        h.apply(&op.into());
    }
    h.finish();
});
