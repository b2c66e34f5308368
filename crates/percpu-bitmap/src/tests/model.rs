//! A proptest state machine: random operation sequences run by the harness
//! in `crate::testing` against its model (the map of live allocations),
//! with the invariant checker after every step. Properties: no overlap, alignment honoured, zeroed in every unit,
//! contents preserved until free, sizes found from the boundary map, bad
//! frees refused, counters consistent, everything returned after draining.
//!
//! Bad-input mode (`state_machine_bad_input`, issue #14): the same machine
//! fed mostly misuse: double and ABA frees of any earlier area, interior,
//! misaligned, foreign (stack, host heap, another allocator's area) and
//! static-area frees, and requests of huge sizes and of alignments that are
//! zero, not powers of two or above a page. Each must be refused with the
//! right error, and leave the allocator intact (invariant checker, counters,
//! the model's live areas unchanged and their contents preserved).

use std::vec::Vec;

use proptest::prelude::*;

use crate::testing::{Harness, Op, Setup};
use crate::MAX_ALLOC_SIZE;

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        4 => 1usize..=16,
        3 => 1usize..=512,
        2 => 1usize..=4096,
        1 => 1usize..=MAX_ALLOC_SIZE,
        1 => prop_oneof![Just(0usize), Just(MAX_ALLOC_SIZE + 1)],
    ];
    prop_oneof![
        8 => (size, 0u32..14, any::<bool>(), prop::bool::weighted(0.15)).prop_map(|(size, align_shift, atomic, reserved)| Op::Alloc {
            size,
            align_shift,
            atomic: atomic && align_shift % 2 == 0,
            reserved
        }),
        6 => any::<usize>().prop_map(Op::Free),
        1 => (any::<usize>(), 0usize..63).prop_map(|(i, d)| Op::FreeInterior(i, d)),
        1 => Just(Op::DoubleFree),
        1 => Just(Op::Balance),
        1 => (1usize..256).prop_map(|size| Op::Interrupt { size }),
    ]
}

/// The bad-input mode's operations: mostly misuse, with enough valid
/// allocations and frees to give the misuse something to hit.
fn bad_op() -> impl Strategy<Value = Op> {
    let bad_size = prop_oneof![
        Just(usize::MAX),
        Just(usize::MAX / 2 + 1),
        Just(MAX_ALLOC_SIZE + 1),
        Just(1usize << 40),
        (MAX_ALLOC_SIZE + 1)..usize::MAX,
        Just(0usize),
    ];
    let bad_align = prop_oneof![
        Just(0usize),
        Just(3usize),
        Just(48usize),
        Just(4097usize),
        Just(8192usize),
        Just(usize::MAX),
        (1usize..100_000).prop_filter("not a power of two", |a| !a.is_power_of_two()),
    ];
    prop_oneof![
        4 => (1usize..=512, 0u32..8).prop_map(|(size, align_shift)| Op::Alloc {
            size,
            align_shift,
            atomic: false,
            reserved: false
        }),
        2 => any::<usize>().prop_map(Op::Free),
        2 => (any::<usize>(), 0usize..63).prop_map(|(i, d)| Op::FreeInterior(i, d)),
        2 => Just(Op::DoubleFree),
        3 => any::<usize>().prop_map(Op::FreeStale),
        2 => any::<u8>().prop_map(Op::FreeForeign),
        1 => Just(Op::FreeStatic),
        2 => (bad_size, 1usize..=4096).prop_map(|(size, align)| Op::AllocBad { size, align: align.next_power_of_two() }),
        2 => (1usize..=4096, bad_align).prop_map(|(size, align)| Op::AllocBad { size, align }),
        1 => Just(Op::Balance),
    ]
}

/// Three units of 32 KiB, a first chunk of 256 B static, 1 KiB reserved
/// and 4 KiB dynamic, an unlimited source (so only atomic requests may
/// fail for memory).
const SETUP: Setup = Setup {
    units: 3,
    unit_size: 32 << 10,
    first_chunk: Some((256, 1024, 4096)),
    page_limit: None,
};

fn run(ops: Vec<Op>) {
    let src = SETUP.source();
    let mut h = Harness::new(&src, SETUP).expect("valid setup");
    for op in &ops {
        h.apply(op);
    }
    h.finish();
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 3 } else { 48 },
        max_shrink_iters: if cfg!(miri) { 0 } else { 2000 },
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn state_machine(ops in prop::collection::vec(op(), 1..if cfg!(miri) { 30 } else { 160 })) {
        run(ops);
    }

    #[test]
    fn state_machine_bad_input(ops in prop::collection::vec(bad_op(), 1..if cfg!(miri) { 30 } else { 160 })) {
        run(ops);
    }
}
