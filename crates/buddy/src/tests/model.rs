//! The proptest state machine: random operation sequences against the
//! reference model in `crate::testing` (checked after every operation).

use proptest::prelude::*;

use crate::testing::{Harness, Op, Setup};

fn setup() -> impl Strategy<Value = Setup> {
    // Under miri: small pages and blocks (every byte check is interpreted).
    let (max_shift, max_order) = if cfg!(miri) { (8u8, 4u8) } else { (12, 6) };
    (
        4u8..=max_shift,
        2u8..=max_order,
        any::<bool>(),
        0u8..=20,
        prop_oneof![Just(0u8), 2u8..=16],
    )
        .prop_map(
            |(page_shift, max_order, two_zones, min_free_pct, reserve_ratio)| Setup {
                page_shift,
                max_order,
                two_zones,
                min_free_pct,
                reserve_ratio,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<u8>(), any::<u8>(), 0u8..3).prop_map(|(order, flags, zone)| Op::Alloc { order, flags, zone }),
        1 => (0u8..2, any::<u8>(), 0u8..16, any::<u8>())
            .prop_map(|(zone, order, count, flags)| Op::AllocBulk { zone, order, count, flags }),
        5 => (any::<u16>(), any::<bool>(), any::<bool>()).prop_map(|(idx, zero, cold)| Op::Free { idx, zero, cold }),
        1 => (0u8..2, 0u8..8, any::<bool>()).prop_map(|(zone, count, zero)| Op::FreeBulk { zone, count, zero }),
        1 => (any::<u16>(), any::<u32>()).prop_map(|(idx, offset)| Op::OwnerOf { idx, offset }),
        1 => (any::<u8>(), any::<u16>()).prop_map(|(kind, idx)| Op::BadFree { kind, idx }),
        1 => Just(Op::AddRegion),
        1 => (0u8..25).prop_map(|pct| Op::SetMinFree { pct }),
        1 => (any::<bool>(), 0u8..80).prop_map(|(decay, advance)| Op::Purge { decay, advance }),
        1 => any::<u16>().prop_map(|idx| Op::FreeRelease { idx }),
    ]
}

/// The bad-input mode: half the operations are misuse (every kind of bad
/// free, bad region additions), the rest keep the state interesting.
fn bad_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u8>(), any::<u8>(), 0u8..3).prop_map(|(order, flags, zone)| Op::Alloc { order, flags, zone }),
        1 => (0u8..2, any::<u8>(), 0u8..16, any::<u8>())
            .prop_map(|(zone, order, count, flags)| Op::AllocBulk { zone, order, count, flags }),
        2 => (any::<u16>(), any::<bool>(), any::<bool>()).prop_map(|(idx, zero, cold)| Op::Free { idx, zero, cold }),
        1 => (0u8..2, 0u8..8, any::<bool>()).prop_map(|(zone, count, zero)| Op::FreeBulk { zone, count, zero }),
        6 => (0u8..10, any::<u16>()).prop_map(|(kind, idx)| Op::BadFree { kind, idx }),
        2 => (0u8..4, any::<u16>()).prop_map(|(kind, at)| Op::BadAddRegion { kind, at }),
        1 => Just(Op::AddRegion),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 128 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn buddy_matches_model(
        setup in setup(),
        ops in prop::collection::vec(op(), 1..if cfg!(miri) { 12 } else { 150 }),
    ) {
        let mut h = Harness::new(setup);
        for op in &ops {
            h.apply(op);
        }
        h.finish();
    }

    /// Bad-input mode: misuse is refused with the predicted error and the
    /// state stays what the model says (checked after every operation).
    #[test]
    fn buddy_matches_model_under_bad_input(
        setup in setup(),
        ops in prop::collection::vec(bad_op(), 1..if cfg!(miri) { 12 } else { 150 }),
    ) {
        let mut h = Harness::new(setup);
        for op in &ops {
            h.apply(op);
        }
        h.finish();
    }
}

/// A fixed sequence touching every operation, in both memmap modes.
#[test]
fn harness_smoke() {
    let big = if cfg!(miri) { 9 } else { 12 };
    for (page_shift, two_zones) in [(6u8, true), (9, true), (big, false)] {
        let mut h = Harness::new(Setup {
            page_shift,
            max_order: 3,
            two_zones,
            min_free_pct: 5,
            reserve_ratio: 4,
        });
        let ops = [
            Op::Alloc {
                order: 0,
                flags: 1,
                zone: 0,
            },
            Op::Alloc {
                order: 3,
                flags: 32,
                zone: 0,
            },
            Op::Alloc {
                order: 1,
                flags: 2,
                zone: 1,
            },
            Op::AllocBulk {
                zone: 1,
                order: 0,
                count: 5,
                flags: 0,
            },
            Op::OwnerOf {
                idx: 1,
                offset: 999,
            },
            Op::Free {
                idx: 0,
                zero: true,
                cold: false,
            },
            Op::BadFree { kind: 0, idx: 0 },
            Op::BadFree { kind: 1, idx: 1 },
            Op::BadFree { kind: 2, idx: 1 },
            Op::BadFree { kind: 3, idx: 1 },
            Op::BadFree { kind: 4, idx: 3 },
            Op::BadFree { kind: 5, idx: 2 },
            Op::BadFree { kind: 6, idx: 1 },
            Op::BadFree { kind: 7, idx: 1 },
            Op::BadAddRegion { kind: 0, at: 0 },
            Op::BadAddRegion { kind: 1, at: 3 },
            Op::BadAddRegion { kind: 2, at: 1 },
            Op::BadAddRegion { kind: 3, at: 0 },
            Op::FreeBulk {
                zone: 1,
                count: 3,
                zero: false,
            },
            Op::AddRegion,
            Op::SetMinFree { pct: 10 },
            Op::Alloc {
                order: 2,
                flags: 1 | 4 | 8,
                zone: 2,
            },
            Op::Free {
                idx: 2,
                zero: false,
                cold: true,
            },
            Op::AllocBulk {
                zone: 0,
                order: 1,
                count: 9,
                flags: 3,
            },
            Op::BadFree { kind: 8, idx: 1 },
            Op::BadFree { kind: 9, idx: 0 },
            Op::Purge {
                decay: false,
                advance: 0,
            },
            // Purged blocks split (zeroed and plain) and merged back.
            Op::Alloc {
                order: 0,
                flags: 1,
                zone: 0,
            },
            Op::Alloc {
                order: 1,
                flags: 0,
                zone: 0,
            },
            Op::Free {
                idx: 0,
                zero: false,
                cold: false,
            },
            Op::Purge {
                decay: true,
                advance: 10,
            },
            Op::Purge {
                decay: true,
                advance: 100,
            },
        ];
        for op in &ops {
            h.apply(op);
        }
        assert!(h.bad_frees >= 7, "bad frees exercised: {}", h.bad_frees);
        assert!(h.buddy().stat(crate::Stat::PURGE) > 0, "purges exercised");
        h.finish();
    }
}
